"""The ``tstream`` data source and its batch reader (server-backed or offline)."""

from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from . import offline
from .common import (
    SCHEMA_DDL,
    DataLossError,
    OptionError,
    Options,
    _lowered,
    batch_range,
    batch_rows,
    connect,
    loss_message,
    missing_key,
    no_key_matches,
    node_entries,
    node_ranges,
    replica_addresses,
    resolve_keys,
    spec_for,
    split_to,
    stream_info,
)
from .pushdown import Pushed, narrow, push, timestamp_options
from .server_read import read_partition


class ServerRange(InputPartition):
    """Offsets ``lo..hi`` (inclusive) of ``key`` read from the server by one
    task: the primary (``url``), or the replica at ``address`` (``readFrom=replica``)."""

    def __init__(self, key: str, lo: int, hi: int, address: str | None = None) -> None:
        super().__init__((key, lo, hi, address))
        self.key = key
        self.lo = lo
        self.hi = hi
        self.address = address


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
        options.require_source()
        self.by_time = timestamp_options(options)   # startingTimestamp/endingTimestamp
        self.pushed = Pushed()                       # the filters' narrowing
        if options.path and self.by_time.narrowed():
            raise OptionError("tstream: startingTimestamp/endingTimestamp read from a server, not a "
                              "snapshot file (filter on the time column instead)")

    def pushFilters(self, filters: list) -> Iterator:
        """Narrow the read by the filters this source understands (``pipeline/pushdown.py``);
        all of them go back to Spark, which checks them on the rows read."""
        if not self.options.path:
            self.pushed = push(filters, self.pushed)
        yield from filters

    def partitions(self) -> list[InputPartition]:
        options = self.options
        if options.path:
            return [SnapshotPartition(part) for part in offline.plan(options)]
        where = f"on the server at {options.url}"
        client = connect(options)
        try:
            keys = resolve_keys(client, options)
            if options.key_pattern and not keys and not options.allow_missing:
                raise no_key_matches(options.key_pattern, where)
            n = node_entries(client, options)
            ranges = []
            for key in keys:  # one range (or more) per stream, never across two
                ranges += self._ranges(client, key, n, where)
            replicas = replica_addresses(client, options)
        finally:
            client.close()
        ranges = split_to(ranges, options.min_partitions, n)
        # readFrom=replica: the partitions go to the replicas in turn
        return [ServerRange(*r, replicas[i % len(replicas)]) for i, r in enumerate(ranges)]

    def _ranges(self, client, key: str, n: int, where: str) -> list[tuple[str, int, int]]:
        options = self.options
        info = stream_info(client, key)
        if not info.exists and not options.allow_missing:
            raise missing_key(key, where)
        starting = spec_for(options.starting, key, "earliest")
        if isinstance(starting, int) and starting < info.first and info.exists and options.fail_on_data_loss:
            # Asked for offsets the stream no longer holds: Kafka's failOnDataLoss, in batch too.
            ending = spec_for(options.ending, key, "latest")
            ending = info.last if ending == "latest" else ending
            raise DataLossError(loss_message(key, starting, min(ending, info.first - 1), info.first))
        lo, hi = batch_range(info.first, info.last, options, key)
        if self.by_time.narrowed() and lo <= hi:
            lo, hi = narrow(client, key, info, lo, hi, self.by_time, strict=True)
        if self.pushed.narrowed() and lo <= hi:
            lo, hi = narrow(client, key, info, lo, hi, self.pushed)
        return [(key, a, b) for a, b in node_ranges(lo, hi, n, options)]

    def read(self, partition: InputPartition) -> Iterator:
        if isinstance(partition, SnapshotPartition):
            batches = offline.read(partition.part)
        elif isinstance(partition, ServerRange) and partition.lo <= partition.hi:
            batches = read_partition(self.options, partition.address, partition.key, partition.lo,
                                     partition.hi, fail_on_loss=self.options.fail_on_data_loss,
                                     tag=self.pushed.subject_filter)
        else:  # nothing to read (Spark plans one partition even then)
            return iter(())
        if self.options.arrow:
            return batches
        return (row for batch in batches for row in batch_rows(batch))


def read_schema() -> StructType:
    """The schema of what is read (``SCHEMA_DDL``)."""
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, TimestampType

    return StructType([StructField("offset", LongType()), StructField("tag", StringType()),
                       StructField("entry", BinaryType()), StructField("time", TimestampType()),
                       StructField("key", StringType())])


def check_read_schema(schema: StructType) -> None:
    """A user's schema (``.schema(...)``) must be the source's: same names, same types."""
    want = [(f.name, f.dataType) for f in read_schema().fields]
    got = [(f.name.lower(), f.dataType) for f in schema.fields]
    if got != want:
        raise OptionError(f"tstream: the read schema is fixed ({SCHEMA_DDL}); got "
                          f"{schema.simpleString()}: leave .schema() out, or give exactly this one")


class _RefusedStreamReader(DataSourceStreamReader):
    """What ``streamReader`` returns when the options are wrong for a streaming
    read: it raises the error when the query starts. (An exception raised by
    ``streamReader`` itself reaches the user behind PySpark's ``UnboundLocalError``.)"""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def initialOffset(self) -> dict:
        raise self.error

    def latestOffset(self, start=None, limit=None) -> dict:
        raise self.error

    def partitions(self, start: dict, end: dict):
        raise self.error

    def read(self, partition):
        raise self.error

    def stop(self) -> None:
        """Nothing to release."""


class TStreamDataSource(DataSource):
    """``spark.read/readStream.format("tstream")`` and ``df.write/writeStream.format("tstream")``.

    See the package docstring (``pipeline/__init__.py``) for the options. They are
    checked in ``schema()`` (which Spark calls at ``load()``, batch or streaming):
    unknown names and malformed values fail there; options that do not apply to
    the kind of query fail in ``reader()``/``streamReader()``/``writer()``.
    """

    @classmethod
    def name(cls) -> str:
        return "tstream"

    def schema(self) -> str:
        Options.parse(self.options)
        Options.parse(self.options, streaming=True)
        return SCHEMA_DDL

    def _check_schema(self, schema: StructType) -> None:
        check_read_schema(schema)

    def reader(self, schema: StructType) -> TStreamReader:
        self._check_schema(schema)
        return TStreamReader(Options.parse(self.options, mode="r"))

    def streamReader(self, schema: StructType):
        from .streaming import TStreamStreamReader

        try:
            self._check_schema(schema)
            options = Options.parse(self.options, mode="s")
            if options.path:
                raise OptionError("tstream: a snapshot file (path) can only be read in batch")
            return TStreamStreamReader(options)
        except OptionError as exc:
            return _RefusedStreamReader(exc)

    def writer(self, schema: StructType, overwrite: bool):
        from .sink import TStreamWriter, check_schema, prepare

        self._check_write(schema, overwrite)
        options = Options.parse(self.options, mode="w")
        check_schema(schema, options)
        prepare(options)
        return TStreamWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .sink import TStreamStreamWriter, check_schema, prepare

        self._check_write(schema, overwrite)
        options = Options.parse(self.options, mode="w")
        check_schema(schema, options)
        prepare(options)
        return TStreamStreamWriter(options)

    def _check_write(self, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("tstream: a log is append-only: write with mode('append') "
                              "(Spark's default mode, errorifexists, is refused by Spark itself with "
                              "UNSUPPORTED_DATA_SOURCE_SAVE_MODE; overwrite is refused here; or DEL the key first)")
        options = _lowered(self.options)
        if options.get("path"):
            raise OptionError("tstream: snapshot files (path) are read-only; write to a server (url)")
        Options.parse(self.options, mode="w").require_key()
