"""The writer (``df.write``) and the streaming sink (``df.writeStream``).

Rows need a ``tag`` and an ``entry`` column (string or binary; other columns,
such as the ``offset`` and ``time`` of a DataFrame read from tstream, are
ignored). Each task appends its rows to ``key`` in chunks of ``batchSize`` rows
(default 500), one ``TWRITE key ENTRIES tag entry ...`` per chunk: the server
writes a chunk atomically (and logs it as one AOF record), so a chunk is either
wholly in the log or not at all. A chunk is validated before it is sent (a null
tag or entry fails the task), so a task that fails leaves no partial chunk:
only the chunks it had completed before.

Delivery guarantee: **at-least-once**. tstream has no transaction spanning
several commands, so the chunks of a task that failed after writing some of
them stay written; when Spark retries the task (or re-runs a micro-batch after
a failure between the write and the checkpoint's commit), those rows are
written again. Within one task rows keep their order; tasks write concurrently,
so the order between partitions is not defined. To make the effect idempotent,
give every row an id (e.g. the source offset, or ``batchId`` + a row number in
``foreachBatch``) inside the tag or entry and deduplicate when reading (the
log-compaction job keeps the newest entry per tag), or write with one partition
and compare the target's last entry before a retry. The commit messages report
which offset ranges each task wrote, and an aborted job logs them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from .common import OptionError, Options, connect

log = logging.getLogger("pipeline.sink")


@dataclass
class TStreamCommitMessage(WriterCommitMessage):
    """What one task wrote: ``(first offset, count)`` per chunk, in order."""

    key: str
    rows: int = 0
    chunks: list = field(default_factory=list)


def check_schema(schema: StructType) -> None:
    names = {f.name.lower(): f for f in schema.fields}
    for column in ("tag", "entry"):
        f = names.get(column)
        if f is None:
            raise OptionError(f"tstream sink: the DataFrame needs a {column!r} column "
                              f"(string or binary); it has {schema.fieldNames()}")
        if not isinstance(f.dataType, (StringType, BinaryType)):
            raise OptionError(f"tstream sink: column {column!r} must be string or binary, not "
                              f"{f.dataType.simpleString()}; cast it first")


def _column(batch: pa.RecordBatch, name: str) -> pa.Array:
    for i, f in enumerate(batch.schema):
        if f.name.lower() == name:
            return batch.column(i)
    raise OptionError(f"tstream sink: no {name!r} column")


def write_rows(options: Options, batches: Iterator[pa.RecordBatch], client=None) -> TStreamCommitMessage:
    """Append the ``tag``/``entry`` rows of ``batches`` in atomic chunks."""
    key = options.require_key()
    size = options.batch_size
    message = TStreamCommitMessage(key)
    own = client is None
    if own:
        client = connect(options)
    tags: list = []     # rows not sent yet
    entries: list = []
    sent = 0            # rows of this task already written

    def send(upto: int) -> None:
        """Write rows [0, upto) of the pending lists as one atomic chunk."""
        nonlocal sent
        chunk_tags, chunk_entries = tags[:upto], entries[:upto]
        for name, values in (("tag", chunk_tags), ("entry", chunk_entries)):
            if None in values:
                row = sent + values.index(None)
                raise ValueError(f"tstream sink: row {row} of this task has a null {name}; "
                                 f"the {sent} rows before its chunk were written, nothing after")
        flat = [None] * (2 * upto)
        flat[0::2] = chunk_tags
        flat[1::2] = chunk_entries
        first = client.execute_command("TWRITE", key, "ENTRIES", *flat)
        message.chunks.append((int(first), upto))
        message.rows += upto
        sent += upto
        del tags[:upto], entries[:upto]

    try:
        for batch in batches:
            tags += _column(batch, "tag").to_pylist()
            entries += _column(batch, "entry").to_pylist()
            while len(tags) >= size:
                send(size)
        if tags:
            send(len(tags))
        return message
    finally:
        if own:
            client.close()


def _report(messages, what: str) -> None:
    written = [m for m in messages if m is not None]
    rows = sum(m.rows for m in written)
    if written:
        ranges = [c for m in written for c in m.chunks]
        log.warning("tstream sink: %s; %d rows were already written by tasks that finished, "
                    "in (first offset, count) chunks %s", what, rows, ranges[:50])


class TStreamWriter(DataSourceArrowWriter):
    def __init__(self, options: Options) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TStreamCommitMessage:
        return write_rows(self.options, iterator)

    def commit(self, messages) -> None:
        """The chunks are already durable as the server's writes are: nothing to do."""

    def abort(self, messages) -> None:
        _report(messages, "the write job failed (at-least-once: a retry writes those rows again)")


class TStreamStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Options) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TStreamCommitMessage:
        return write_rows(self.options, iterator)

    def commit(self, messages, batchId: int) -> None:
        """The chunks are already durable as the server's writes are: nothing to do."""

    def abort(self, messages, batchId: int) -> None:
        _report(messages, f"micro-batch {batchId} failed (at-least-once: it is written again "
                          "when the query restarts)")
