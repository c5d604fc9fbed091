"""The streaming reader: a tstream key as a Structured Streaming source.

Offsets are tstream offsets. Spark's offset for this source is
``{"offsets": {key: n, ...}}``, for every stream read, where ``n`` is the next
offset to read, so a micro-batch ``start -> end`` reads offsets
``start[key] .. end[key]-1`` of every key (the ``{"key": k, "offset": n}`` of
checkpoints written by earlier versions is read too). A stream that appears
later (``keyPattern``, or a key of ``keys`` that did not exist) joins at its first
offset held. Reads of a range
are deterministic (the same offsets always give the same held entries), so a
query restarted from its checkpoint re-plans the last uncommitted batch and
neither loses nor duplicates rows.

- ``startingOffsets``: ``earliest`` (the first entry held), ``latest`` (the
  default: only entries written after the query starts) or an offset; only used
  when the checkpoint has no offsets yet.
- ``maxOffsetsPerTrigger``: at most this many offsets per micro-batch (Spark's
  admission control: ``ReadMaxRows``). ``minOffsetsPerTrigger``: no micro-batch
  until that many offsets are there to read, or ``maxTriggerDelay`` (15m) passed
  since the last one (Kafka's options; ignored by ``availableNow``). ``trigger(availableNow=True)`` reads up
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

import time
from typing import Iterator

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from .common import (
    DataLossError,
    OptionError,
    Options,
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
from .pushdown import offset_at_time
from .server_read import read_partition


class OffsetRange(InputPartition):
    """Offsets ``lo..hi`` (inclusive) of ``key``: one micro-batch task (read from
    the replica at ``address`` with ``readFrom=replica``)."""

    def __init__(self, key: str, lo: int, hi: int, address: str | None = None) -> None:
        super().__init__((key, lo, hi, address))
        self.key = key
        self.lo = lo
        self.hi = hi
        self.address = address


def budget(avail: dict[str, int], limit: int) -> dict[str, int]:
    """``maxOffsetsPerTrigger`` shared between streams in proportion to what each
    has to read (Kafka's rule); what rounding leaves goes to the first ones."""
    total = sum(avail.values())
    if total <= limit:
        return dict(avail)
    share = {k: limit * v // total for k, v in avail.items()}
    left = limit - sum(share.values())
    for k in sorted(avail):
        if left <= 0:
            break
        if share[k] < avail[k]:
            share[k] += 1
            left -= 1
    return share


def lag_metrics(latest: dict[str, int], reached: dict[str, int]) -> dict:
    """Offsets behind latest per stream (``latest`` next offsets against the
    ``reached`` ones), with Kafka's min/max/avg names."""
    behind = {key: max(0, latest[key] - reached.get(key, latest[key])) for key in sorted(latest)}
    values = list(behind.values()) or [0]
    return {"offsetsBehindLatest": behind, "minOffsetsBehindLatest": min(values),
            "maxOffsetsBehindLatest": max(values), "avgOffsetsBehindLatest": round(sum(values) / len(values), 1)}


class TStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Options) -> None:
        self.options = options
        options.require_source()
        self._target: dict[str, int] | None = None  # availableNow: stop at these next-offsets
        self._last_batch = time.monotonic()  # minOffsetsPerTrigger: when the last micro-batch was let through
        self._client = None              # the driver's connection, kept between micro-batches
        self._reached: dict[str, int] = {}  # the end of the last latestOffset: where the query will be

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
    def _where(self) -> str:
        return f"on the server at {self.options.url}"

    def _infos(self, keys) -> dict:
        client = self._conn()
        return {key: stream_info(client, key) for key in keys}

    def _keys(self) -> list[str]:
        return resolve_keys(self._conn(), self.options)

    @staticmethod
    def _offset(offsets: dict[str, int]) -> dict:
        return {"offsets": {k: int(offsets[k]) for k in sorted(offsets)}}

    def _start(self, offset: dict) -> dict[str, int]:
        """The next offset of every stream in a checkpointed offset (the
        ``{"key": k, "offset": n}`` of earlier versions too)."""
        if "offsets" in offset:
            offsets = {str(k): int(v) for k, v in offset["offsets"].items()}
        else:
            offsets = {str(offset["key"]): int(offset["offset"])}
        for key in offsets:
            if not self.options.matches(key):
                raise ValueError(f"tstream: the checkpoint holds offsets of key {key!r}, which the query "
                                 "does not read (option key, keys or keyPattern); use a new checkpoint location")
        return offsets

    def initialOffset(self) -> dict:
        keys = self._keys()
        infos = self._infos(keys)
        if self.options.key_pattern and not keys and not self.options.allow_missing:
            raise no_key_matches(self.options.key_pattern, self._where())
        offsets = {}
        for key, info in infos.items():
            if not info.exists and not self.options.allow_missing:
                raise missing_key(key, self._where())
            starting = spec_for(self.options.starting, key, "latest")
            if self.options.starting_timestamp is not None:
                at = offset_at_time(self._conn(), key, self.options.starting_timestamp * 1_000_000, info)
                if at is None:
                    raise OptionError(f"tstream: startingTimestamp needs direct gets (DGET) on key {key!r}")
                offsets[key] = at
            elif isinstance(starting, int):
                offsets[key] = starting
            elif starting == "earliest":
                offsets[key] = min(info.first, info.next_offset)
            else:
                offsets[key] = info.next_offset
        return self._offset(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {key: info.next_offset for key, info in self._infos(self._keys()).items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = self._start(start)
        keys = self._keys()
        infos = self._infos(sorted(set(begin) | set(keys)))
        ends = {}
        avail = {}
        for key, info in infos.items():
            if key not in begin:
                # A stream that appeared (keyPattern, or a missing key of keys): it joins
                # at its first offset held; its rows are read from the next micro-batch on.
                ends[key] = min(info.first, info.next_offset)
                continue
            b = begin[key]
            end = info.next_offset
            if end < b and self.options.fail_on_data_loss:
                raise DataLossError(
                    f"tstream: key {key!r} ends at offset {info.last}, below the offset {b} the "
                    "query already reached: the key was deleted and written again. Use a new checkpoint "
                    "location, or set failOnDataLoss to false to wait until it passes that offset.")
            if self._target is not None:
                end = min(end, self._target.get(key, b))
            # Count the limit from what is held: offsets evicted below `first` are not
            # rows (they fail the batch, or are skipped without failOnDataLoss).
            floor = max(b, info.first)
            ends[key] = end
            avail[key] = max(0, end - floor)
        if isinstance(limit, ReadMaxRows):
            share = budget(avail, limit.max_rows)
            for key, n in share.items():
                ends[key] = min(ends[key], max(begin[key], infos[key].first) + n)
        least = self.options.min_offsets_per_trigger
        if least and self._target is None and sum(avail.values()) < least and all(k in begin for k in ends):
            # Kafka's minOffsetsPerTrigger: wait for more, at most maxTriggerDelay after the last batch.
            if time.monotonic() - self._last_batch < self.options.max_trigger_delay:
                self._reached = begin
                return self._offset(begin)
        end = self._offset({key: max(begin.get(key, end), end) for key, end in ends.items()})
        if end != self._offset(begin):
            self._last_batch = time.monotonic()
        self._reached = end["offsets"]
        return end

    def reportLatestOffset(self) -> dict:
        """The progress's ``latestOffset``: the next offset of every stream, and
        the lag (PySpark's Python sources have no metrics hook, Kafka's
        ``ReportsSourceMetrics``): how many offsets each stream will still hold
        past the micro-batch being planned, with their min, max and mean."""
        latest = {key: info.next_offset for key, info in self._infos(self._keys()).items()}
        report = self._offset(latest)
        report.update(lag_metrics(latest, self._reached))
        return report

    # -- planning and reading -----------------------------------------------------
    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        begin, stop = self._start(start), self._start(end)
        client = self._conn()
        n = None
        ranges = []
        for key in sorted(stop):
            lo, hi = begin.get(key, stop[key]), stop[key] - 1  # a stream new in `end` starts there
            if hi < lo:
                continue
            info = stream_info(client, key)
            if self.options.fail_on_data_loss and info.first > lo:
                raise DataLossError(loss_message(key, lo, min(hi, info.first - 1), info.first))
            n = n or node_entries(client, self.options)
            ranges += [(key, a, b) for a, b in node_ranges(lo, hi, n, self.options)]
        if not ranges:
            return []
        replicas = replica_addresses(client, self.options)
        ranges = split_to(ranges, self.options.min_partitions, n)
        return [OffsetRange(*r, replicas[i % len(replicas)]) for i, r in enumerate(ranges)]

    def read(self, partition: OffsetRange) -> Iterator:
        batches = read_partition(self.options, partition.address, partition.key,
                                 partition.lo, partition.hi, fail_on_loss=self.options.fail_on_data_loss)
        if self.options.arrow:
            return batches
        return (row for batch in batches for row in batch_rows(batch))

    def commit(self, end: dict) -> None:
        """Nothing to release: the server keeps no state for this reader."""
