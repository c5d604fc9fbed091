"""The streaming reader: a tstream key as a Structured Streaming source.

Offsets are tstream offsets. Spark's offset for this source is
``{"key": key, "offset": n}`` where ``n`` is the next offset to read, so a
micro-batch ``start -> end`` reads offsets ``start .. end-1``. Reads of a range
are deterministic (the same offsets always give the same held entries), so a
query restarted from its checkpoint re-plans the last uncommitted batch and
neither loses nor duplicates rows.

- ``startingOffsets``: ``earliest`` (the first entry held), ``latest`` (the
  default: only entries written after the query starts) or an offset; only used
  when the checkpoint has no offsets yet.
- ``maxOffsetsPerTrigger``: at most this many offsets per micro-batch (Spark's
  admission control: ``ReadMaxRows``). ``trigger(availableNow=True)`` reads up
  to the last entry written when the query started, in as many micro-batches as
  that limit needs, then stops.
- ``failOnDataLoss`` (default true): when offsets the query still has to read
  were evicted (they are below the stream's ``first``), the batch fails with a
  message saying which offsets; ``false`` skips them, as Spark's Kafka source
  does. This is checked when the batch is planned and again by every task.

Needs PySpark 4.2+ (``latestOffset(start, limit)``, ``getDefaultReadLimit`` and
``SupportsTriggerAvailableNow`` for Python sources).
"""

from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from .common import (
    DataLossError,
    Options,
    batch_rows,
    connect,
    missing_key,
    node_entries,
    node_ranges,
    split_to,
    stream_info,
)
from .server_read import loss_message, read_range


class OffsetRange(InputPartition):
    """Offsets ``lo..hi`` (inclusive) of one micro-batch task."""

    def __init__(self, lo: int, hi: int) -> None:
        super().__init__((lo, hi))
        self.lo = lo
        self.hi = hi


class TStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Options) -> None:
        self.options = options
        self.key = options.require_key()
        self._target: int | None = None  # availableNow: stop at this next-offset
        self._client = None              # the driver's connection, kept between micro-batches

    def __getstate__(self) -> dict:  # tasks get the options, not the driver's connection
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _conn(self):
        if self._client is None:
            self._client = connect(self.options)
        return self._client

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- offsets ----------------------------------------------------------------
    def _info(self):
        return stream_info(self._conn(), self.key)

    def _offset(self, n: int) -> dict:
        return {"key": self.key, "offset": int(n)}

    def _start(self, offset: dict) -> int:
        key = offset.get("key", self.key)
        if key != self.key:
            raise ValueError(f"tstream: the checkpoint holds offsets of key {key!r}, the query "
                             f"reads key {self.key!r}; use a new checkpoint location")
        return int(offset["offset"])

    def initialOffset(self) -> dict:
        starting = self.options.starting
        info = self._info()
        if not info.exists and not self.options.allow_missing:
            raise missing_key(self.key, f"on the server at {self.options.url}")
        if isinstance(starting, int):
            return self._offset(starting)
        if starting == "earliest":
            return self._offset(min(info.first, info.next_offset))
        return self._offset(info.next_offset)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._info().next_offset

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = self._start(start)
        info = self._info()
        end = info.next_offset
        if end < begin and self.options.fail_on_data_loss:
            raise DataLossError(
                f"tstream: key {self.key!r} ends at offset {info.last}, below the offset {begin} the "
                "query already reached: the key was deleted and written again. Use a new checkpoint "
                "location, or set failOnDataLoss to false to wait until it passes that offset.")
        if self._target is not None:
            end = min(end, self._target)
        if isinstance(limit, ReadMaxRows):
            # Count the limit from what is held: offsets evicted below `first`
            # are not rows (they fail the batch, or are skipped without
            # failOnDataLoss).
            end = min(end, max(begin, info.first) + limit.max_rows)
        return self._offset(max(begin, end))

    def reportLatestOffset(self) -> dict:
        return self._offset(self._info().next_offset)

    # -- planning and reading -----------------------------------------------------
    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        lo, stop = self._start(start), self._start(end)
        if stop <= lo:
            return []
        client = self._conn()
        info = stream_info(client, self.key)
        if self.options.fail_on_data_loss and info.first > lo:
            raise DataLossError(loss_message(self.key, lo, min(stop - 1, info.first - 1), info.first))
        n = node_entries(client, self.options)
        ranges = split_to(node_ranges(lo, stop - 1, n, self.options), self.options.min_partitions, n)
        return [OffsetRange(a, b) for a, b in ranges]

    def read(self, partition: OffsetRange) -> Iterator:
        batches = read_range(self.options, partition.lo, partition.hi,
                             fail_on_loss=self.options.fail_on_data_loss)
        if self.options.arrow:
            return batches
        return (row for batch in batches for row in batch_rows(batch))

    def commit(self, end: dict) -> None:
        """Nothing to release: the server keeps no state for this reader."""
