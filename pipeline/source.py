"""The ``tstream`` data source and its batch reader (server-backed or offline)."""

from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from . import offline
from .common import (
    COLUMNS,
    SCHEMA_DDL,
    OptionError,
    Options,
    batch_range,
    batch_rows,
    connect,
    node_entries,
    node_ranges,
    stream_info,
)
from .server_read import read_range


class ServerRange(InputPartition):
    """Offsets ``lo..hi`` (inclusive) read from the server by one task."""

    def __init__(self, lo: int, hi: int) -> None:
        super().__init__((lo, hi))
        self.lo = lo
        self.hi = hi


class SnapshotPartition(InputPartition):
    def __init__(self, part: offline.SnapshotRange) -> None:
        super().__init__(part)
        self.part = part


class TStreamReader(DataSourceReader):
    """Batch reads: from the server at ``url``, or from the snapshot at ``path``.

    Server: the range ``startingOffset..endingOffset`` (inclusive; ``earliest``
    and ``latest`` by default, resolved once when the query is planned, so
    entries written during the query are not read) is split into partitions of
    whole macro nodes, and each task reads its range in pages.
    """

    def __init__(self, options: Options) -> None:
        self.options = options
        options.require_key()

    def partitions(self) -> list[InputPartition]:
        options = self.options
        if options.path:
            return [SnapshotPartition(part) for part in offline.plan(options)]
        client = connect(options)
        try:
            info = stream_info(client, options.key)
            n = node_entries(client, options)
        finally:
            client.close()
        lo, hi = batch_range(info.first, info.last, options)
        ranges = node_ranges(lo, hi, n, options)
        return [ServerRange(a, b) for a, b in ranges]

    def read(self, partition: InputPartition) -> Iterator:
        if isinstance(partition, SnapshotPartition):
            batches = offline.read(partition.part)
        elif isinstance(partition, ServerRange) and partition.lo <= partition.hi:
            batches = read_range(self.options, partition.lo, partition.hi)
        else:  # nothing to read (Spark plans one partition even then)
            return iter(())
        if self.options.arrow:
            return batches
        return (row for batch in batches for row in batch_rows(batch))


class TStreamDataSource(DataSource):
    """``spark.read/readStream.format("tstream")`` and ``df.write/writeStream.format("tstream")``.

    See the package docstring (``pipeline/__init__.py``) for the options.
    """

    @classmethod
    def name(cls) -> str:
        return "tstream"

    def schema(self) -> str:
        return SCHEMA_DDL

    def _check_schema(self, schema: StructType) -> None:
        if tuple(f.name for f in schema.fields) != COLUMNS:
            raise OptionError(f"tstream: the read schema is fixed ({SCHEMA_DDL}); "
                              f"got {schema.simpleString()}")

    def reader(self, schema: StructType) -> TStreamReader:
        self._check_schema(schema)
        return TStreamReader(Options.parse(self.options))

    def streamReader(self, schema: StructType):
        from .streaming import TStreamStreamReader

        self._check_schema(schema)
        options = Options.parse(self.options, streaming=True)
        if options.path:
            raise OptionError("tstream: a snapshot file (path) can only be read in batch")
        return TStreamStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool):
        from .sink import TStreamWriter, check_schema

        self._check_write(schema, overwrite)
        check_schema(schema)
        return TStreamWriter(Options.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .sink import TStreamStreamWriter, check_schema

        self._check_write(schema, overwrite)
        check_schema(schema)
        return TStreamStreamWriter(Options.parse(self.options))

    def _check_write(self, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("tstream: a log is append-only: write with mode('append') "
                              "(or DEL the key first)")
        options = Options.parse(self.options)
        options.require_key()
        if options.path:
            raise OptionError("tstream: snapshot files (path) are read-only; write to a server (url)")
