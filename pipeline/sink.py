"""The writer (``df.write``) and the streaming sink (``df.writeStream``).

Rows need a ``tag`` and an ``entry`` column (string or binary; other columns,
such as the ``offset`` and ``time`` of a DataFrame read from tstream, are
ignored). Each task appends its rows to ``key`` in chunks of ``batchSize`` rows
(default 500), one ``TWRITE key MSGIDS id ... ENTRIES tag entry ...`` per chunk:
the server writes a chunk atomically (and logs it as one AOF record), so a chunk
is either wholly in the log or not at all. A chunk is validated before it is
sent (a null tag or entry fails the task), so a task that fails leaves no
partial chunk: only the chunks it had completed before.

Delivery guarantee: **exactly once** (``exactlyOnce``, the default). Every row
carries a message id made of

- the write's id: the streaming query's id (``sql.streaming.queryId``, kept in
  the checkpoint, so the same after a restart) and the micro-batch id
  (``streaming.sql.batchId``: a replayed epoch has the same one); for
  ``df.write`` the option ``writeId``, else an id drawn once per job on the
  driver (so it covers task retries, and a rerun of the job with the same
  ``writeId``);
- the Spark partition id (``TaskContext.partitionId()``);
- the row's index in the task (or, with ``idColumn``, that column's value
  instead of partition and index),

and the server does not store a message whose id it stored within the stream's
``duplicate_window_ms``: a retried task's or a replayed micro-batch's rows are
dropped as duplicates, also a chunk that redis-py resent after a lost reply.
This needs the partition's rows to come in the same order again (the tstream
source's do; so do files' and Kafka's, without a shuffle in between) and a
window longer than a task retry or a driver restart takes (``duplicateWindowMs``
sets it on the stream when the write starts). Why message ids and not a fast
ingest batch (``BATCH ... FAST``, whose batch-seq would dedupe the row index): a
fast batch is forgotten once it ends or after ``batch-timeout-ms`` (10 s) idle,
so a task retried after its batch ended, or a micro-batch replayed after the
driver died, would start it again and store every row twice. Message ids are
remembered for the whole window, across restarts of the server too.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from tstream.client.types import as_map

from .common import OptionError, Options, connect

log = logging.getLogger("pipeline.sink")

MAX_ID_LENGTH = 64     # the server's limit on a message id (bytes)
WRITE_ID_LENGTH = 32   # a longer write id (or query id) is replaced by 32 hex digits of its SHA-256
# TaskContext local properties that Spark's micro-batch execution sets on every task
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class TStreamCommitMessage(WriterCommitMessage):
    """What one task wrote: ``(first offset, count)`` per chunk, in order (with
    message ids, a chunk whose rows were all duplicates reports the offset its
    first row was stored at the first time)."""

    key: str
    rows: int = 0
    chunks: list = field(default_factory=list)


def check_schema(schema: StructType, options: Options | None = None) -> None:
    names = {f.name.lower(): f for f in schema.fields}
    for column in ("tag", "entry"):
        f = names.get(column)
        if f is None:
            raise OptionError(f"tstream sink: the DataFrame needs a {column!r} column "
                              f"(string or binary); it has {schema.fieldNames()}")
        if not isinstance(f.dataType, (StringType, BinaryType)):
            raise OptionError(f"tstream sink: column {column!r} must be string or binary, not "
                              f"{f.dataType.simpleString()}; cast it first")
    if options is not None and options.id_column and options.id_column.lower() not in names:
        raise OptionError(f"tstream sink: idColumn {options.id_column!r} is not a column of the "
                          f"DataFrame ({schema.fieldNames()})")


def write_prefix(write_id: str, batch_id=None) -> str:
    """The part of the message ids that names one write (and micro-batch)."""
    base = str(write_id).replace("-", "")
    if len(base.encode()) > WRITE_ID_LENGTH:
        base = hashlib.sha256(str(write_id).encode()).hexdigest()[:WRITE_ID_LENGTH]
    return base if batch_id is None else f"{base}.{batch_id}"


def prepare(options: Options) -> None:
    """On the driver, before a write: with ``duplicateWindowMs`` set the stream's
    window (creating the stream); with exactly-once and no such option, refuse a
    stream whose window is 0 (ids would not be remembered)."""
    if not options.exactly_once:
        return
    key = options.require_key()
    client = connect(options)
    try:
        if options.duplicate_window_ms is not None:
            client.execute_command("TCONFIG", key, "SET", "duplicate_window_ms", options.duplicate_window_ms)
            return
        if not client.exists(key):
            return  # created by the first write, with the default window (120 s)
        window = as_map(client.execute_command("TCONFIG", key, "GET")).get("duplicate_window_ms")
        if window is not None and int(window) == 0:
            raise OptionError(f"tstream sink: stream {key!r} has duplicate_window_ms 0, so message ids are "
                              "not remembered and the sink cannot be exactly once: set the option "
                              "duplicateWindowMs (e.g. 3600000), or exactlyOnce to false")
    finally:
        client.close()


def _column(batch: pa.RecordBatch, name: str) -> pa.Array:
    for i, f in enumerate(batch.schema):
        if f.name.lower() == name.lower():
            return batch.column(i)
    raise OptionError(f"tstream sink: no {name!r} column")


def _id_values(column: pa.Array) -> list:
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column.to_pylist()
    return [None if v is None else str(v) for v in column.to_pylist()]


def _check_nulls(columns, sent: int) -> None:
    for name, values in columns:
        if None in values:
            row = sent + values.index(None)
            raise ValueError(f"tstream sink: row {row} of this task has a null {name}; "
                             f"the {sent} rows before its chunk were written, nothing after")


def _check_ids(ids: list) -> None:
    """``idColumn`` values: 1 to 64 bytes, and not ``ENTRIES`` (TWRITE's keyword)."""
    for mid in ids:
        raw = mid if isinstance(mid, bytes) else mid.encode()
        if not raw or len(raw) > MAX_ID_LENGTH or raw.lower() == b"entries":
            raise ValueError(f"tstream sink: idColumn value {mid!r} is not a message id "
                             f"(1 to {MAX_ID_LENGTH} bytes, not 'ENTRIES')")


def write_rows(options: Options, batches: Iterator[pa.RecordBatch], client=None,
               prefix: str | None = None, partition: int = 0) -> TStreamCommitMessage:
    """Append the ``tag``/``entry`` rows of ``batches`` in atomic chunks; with
    ``prefix`` (exactly once) each row gets the message id
    ``prefix.partition.index`` (or its ``idColumn`` value)."""
    key = options.require_key()
    size = options.batch_size
    message = TStreamCommitMessage(key)
    id_column = options.id_column
    own = client is None
    if own:
        client = connect(options)
    tags: list = []     # rows not sent yet
    entries: list = []
    ids: list = []      # their idColumn values
    sent = 0            # rows of this task already written

    def send(upto: int) -> None:
        """Write rows [0, upto) of the pending lists as one atomic chunk."""
        nonlocal sent
        chunk_tags, chunk_entries = tags[:upto], entries[:upto]
        columns = [("tag", chunk_tags), ("entry", chunk_entries)]
        if id_column:
            chunk_ids = ids[:upto]
            columns.append((f"id ({id_column})", chunk_ids))
        elif prefix is not None:
            chunk_ids = [f"{prefix}.{partition}.{sent + i}" for i in range(upto)]
        else:
            chunk_ids = None
        _check_nulls(columns, sent)
        flat = [None] * (2 * upto)
        flat[0::2] = chunk_tags
        flat[1::2] = chunk_entries
        if chunk_ids is None:
            first = client.execute_command("TWRITE", key, "ENTRIES", *flat)
        else:
            if id_column:
                _check_ids(chunk_ids)
            first = client.execute_command("TWRITE", key, "MSGIDS", *chunk_ids, "ENTRIES", *flat)
        message.chunks.append((int(first), upto))
        message.rows += upto
        sent += upto
        del tags[:upto], entries[:upto], ids[:upto]

    try:
        for batch in batches:
            tags += _column(batch, "tag").to_pylist()
            entries += _column(batch, "entry").to_pylist()
            if id_column:
                ids += _id_values(_column(batch, id_column))
            while len(tags) >= size:
                send(size)
        if tags:
            send(len(tags))
        return message
    finally:
        if own:
            client.close()


def _task():
    from pyspark import TaskContext

    return TaskContext.get()


def _report(messages, what: str) -> None:
    written = [m for m in messages if m is not None]
    rows = sum(m.rows for m in written)
    if written:
        ranges = [c for m in written for c in m.chunks]
        log.warning("tstream sink: %s; %d rows were already written by tasks that finished, "
                    "in (first offset, count) chunks %s", what, rows, ranges[:50])


class TStreamWriter(DataSourceArrowWriter):
    """``df.write``: the write id is the option ``writeId``, else drawn here, on
    the driver, once per job (the tasks and their retries share it)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.write_id = options.write_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TStreamCommitMessage:
        if not self.options.exactly_once:
            return write_rows(self.options, iterator)
        task = _task()
        partition = task.partitionId() if task is not None else 0
        return write_rows(self.options, iterator, prefix=write_prefix(self.write_id), partition=partition)

    def commit(self, messages) -> None:
        """The chunks are already durable as the server's writes are: nothing to do."""

    def abort(self, messages) -> None:
        if self.options.exactly_once:
            _report(messages, f"the write job failed (writing again with writeId {self.write_id!r} "
                              "within the duplicate window stores each row once)")
        else:
            _report(messages, "the write job failed (at-least-once: a retry writes those rows again)")


class TStreamStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream``: the write id is the query's id and the micro-batch id,
    which Spark sets on every task (and keeps across restarts on a checkpoint)."""

    def __init__(self, options: Options) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TStreamCommitMessage:
        if not self.options.exactly_once:
            return write_rows(self.options, iterator)
        task = _task()
        query = task.getLocalProperty(QUERY_ID_PROPERTY) if task is not None else None
        batch = task.getLocalProperty(BATCH_ID_PROPERTY) if task is not None else None
        if not query or batch is None:
            raise RuntimeError("tstream sink: the task has no streaming query id or batch id "
                               f"({QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY}); set exactlyOnce to false")
        return write_rows(self.options, iterator, prefix=write_prefix(query, batch),
                          partition=task.partitionId())

    def commit(self, messages, batchId: int) -> None:
        """The chunks are already durable as the server's writes are: nothing to do."""

    def abort(self, messages, batchId: int) -> None:
        if self.options.exactly_once:
            _report(messages, f"micro-batch {batchId} failed (when the query restarts it is written "
                              "again and its rows already stored are dropped as duplicates)")
        else:
            _report(messages, f"micro-batch {batchId} failed (at-least-once: it is written again "
                              "when the query restarts)")
