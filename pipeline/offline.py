"""The offline reader: one key of a snapshot file, no server.

Planning (driver) walks the file once (``snapshot_reader.find_key``, whole-file
CRC checked) and splits the key's node records into partitions of whole nodes.
Each task maps the file, checks that its footer CRC is still the one planned
(a newer snapshot renamed over the path would otherwise be read at the wrong
positions), rebuilds its nodes with the engine's ``Node.from_blob`` and turns
each node's decoded tables straight into Arrow arrays, without a Python object
per entry:

- ``entry``: the node's payload buffer and its ``ends`` table *are* an Arrow
  binary array (data buffer + offsets), wrapped without copying;
- ``tag``: the tag-id table indexes the stream's tag table (``take``);
- ``time``: the ``times`` table (ns) cast to Spark's microseconds;
- deleted entries: the node's deleted bitmap has Arrow's bit order, it becomes
  the filter mask; offsets below the stream's ``first`` (evicted) are sliced off.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .common import (
    ARROW_SCHEMA,
    DEFAULT_OFFLINE_NODES_PER_PARTITION,
    TIME_TYPE,
    DataLossError,
    OptionError,
    Options,
    batch_range,
    loss_message,
    missing_key,
    no_key_matches,
    spec_for,
)
from .snapshot_reader import footer_crc, iter_keys, iter_node_blobs, open_snapshot, read_meta


@dataclass(frozen=True)
class SnapshotRange:
    """A task's share of one key: ``count`` consecutive node records from
    ``first_pos``, keeping offsets ``lo..hi``."""

    path: str
    key: str
    crc: int
    meta_pos: int
    first_pos: int
    count: int
    lo: int
    hi: int


COPIES = ".tstream-spark"        # the folder of the copies, next to the snapshot
COPIES_KEPT_S = 24 * 3600        # copies older than this are removed by the next plan


def private_copy(path: str) -> str:
    """A name of the current version of ``path`` that no later save replaces:
    a hard link (no bytes copied; a copy where links fail) in ``.tstream-spark/``
    next to it, named by the file's CRC, so that queries of one version share it.
    A server saves by renaming a new file over ``dump.tsr``; the link keeps the
    version planned readable for the tasks. Returns ``path`` itself when the
    folder cannot be written."""
    import shutil
    import uuid

    folder = os.path.join(os.path.dirname(os.path.abspath(path)), COPIES)
    try:
        os.makedirs(folder, exist_ok=True)
        temp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            os.link(path, temp)
        except OSError:
            shutil.copyfile(path, temp)
    except FileNotFoundError:
        raise
    except OSError:
        return path
    data = open_snapshot(temp)
    try:
        crc = footer_crc(data)
    finally:
        _close(data)
    target = os.path.join(folder, f"{os.path.basename(path)}.{crc:08x}")
    os.replace(temp, target)
    _prune(folder, target)
    return target


def _prune(folder: str, keep: str) -> None:
    now = time.time()
    for name in os.listdir(folder):
        full = os.path.join(folder, name)
        try:
            if full != keep and now - os.stat(full).st_ctime > COPIES_KEPT_S:
                os.unlink(full)
        except OSError:
            pass


def plan(options: Options) -> list[SnapshotRange]:
    """The partitions of a read of ``options.path``: per key read, ranges of
    whole node records. With ``copySnapshot`` (the default) they read a private
    copy of the file (``private_copy``): a save of a live server during the
    query does not fail it."""
    options.require_source()
    path = options.path
    try:
        if options.copy_snapshot:
            path = private_copy(path)
        data = open_snapshot(path)
    except FileNotFoundError:
        raise OptionError(f"tstream: snapshot file {path!r} does not exist") from None
    try:
        crc = footer_crc(data)
        wanted = options.fixed_keys
        items = [item for item in iter_keys(data, path)
                 if options.matches(item.key.decode("utf-8", "replace"))]
        found = {item.key.decode("utf-8", "replace") for item in items}
        if not options.allow_missing:
            for key in wanted or ():
                if key not in found:
                    raise missing_key(key, f"in the snapshot {path!r}")
            if wanted is None and not items:
                raise no_key_matches(options.key_pattern, f"in the snapshot {path!r}")
        parts = []
        for item in items:
            parts += _plan_key(data, path, crc, item, options)
        return parts
    finally:
        _close(data)


def _plan_key(data, path: str, crc: int, item, options: Options) -> list[SnapshotRange]:
    if not item.node_pos:
        return []
    key = item.key.decode("utf-8", "replace")
    n = item.node_entries
    # Node records are consecutive aligned nodes: the first one's start places them all.
    from tstream.engine.stream import Node

    blobs = iter_node_blobs(data, item.node_pos[0], 1, path)
    blob, _ = next(blobs)
    first_node = (Node.from_blob(blob, n, check=False).start - 1) // n
    del blob
    blobs.close()
    meta = item.meta
    first = int(meta["first"])
    last = int(meta["next_offset"]) - 1
    starting = spec_for(options.starting, key, "earliest")
    if isinstance(starting, int) and starting < first and options.fail_on_data_loss:
        ending = spec_for(options.ending, key, "latest")
        ending = last if ending == "latest" else ending
        raise DataLossError(loss_message(key, starting, min(ending, first - 1), first))
    lo, hi = batch_range(first, last, options, key)
    if hi < lo:
        return []
    want_lo = (lo - 1) // n - first_node
    want_hi = min((hi - 1) // n - first_node, len(item.node_pos) - 1)
    if len(item.node_pos) != (last - 1) // n - first_node + 1:
        # Nodes sealed by bytes (node-max-bytes) share ranges: no arithmetic;
        # read them all (each node's rows are clipped to [lo, hi]).
        want_lo, want_hi = 0, len(item.node_pos) - 1
    total = want_hi - want_lo + 1
    if total <= 0:
        return []
    if options.num_partitions:
        parts = min(options.num_partitions, total)
        bounds = [want_lo + total * i // parts for i in range(parts + 1)]
    else:
        step = options.nodes_per_partition or DEFAULT_OFFLINE_NODES_PER_PARTITION
        bounds = list(range(want_lo, want_hi + 1, step)) + [want_hi + 1]
    if options.min_partitions and len(bounds) - 1 < options.min_partitions:
        # minPartitions: whole node records here (a node is the unit read from the file)
        parts = min(options.min_partitions, total)
        bounds = [want_lo + total * i // parts for i in range(parts + 1)]
    return [SnapshotRange(path, key, crc, item.meta_pos, item.node_pos[a], b - a, lo, hi)
            for a, b in zip(bounds, bounds[1:]) if b > a]


def read(part: SnapshotRange) -> Iterator[pa.RecordBatch]:
    """Record batches of the entries of ``part`` (consecutive nodes gathered
    into batches of about ``BATCH_BYTES`` of entries)."""
    from tstream.engine.stream import Node

    data = open_snapshot(part.path)
    blobs = None
    try:
        if footer_crc(data) != part.crc:
            raise RuntimeError(f"tstream: snapshot {part.path!r} changed after the query was "
                               "planned (a newer save replaced it); run the query again, with the "
                               "option copySnapshot on (the default)")
        _, meta = read_meta(data, part.meta_pos, part.path)
        n = int(meta["node_entries"])
        first = max(int(meta["first"]), part.lo)
        tag_table = pa.array([None if t is None else bytes(t).decode("utf-8", "replace")
                              for t in meta["tags"]], pa.string())
        blobs = iter_node_blobs(data, part.first_pos, part.count, part.path)
        # each record's CRC was checked: no need to decompress the node twice
        slices = (node_slice(Node.from_blob(blob, n, check=False), deleted, first, part.hi)
                  for blob, deleted in blobs)
        yield from grouped_batches(slices, tag_table, part.key)
    finally:
        if blobs is not None:
            blobs.close()
        _close(data)


BATCH_BYTES = 8 << 20  # decoded entry bytes gathered into one record batch (several nodes' rows)


def node_batch(node, deleted, lo: int, hi: int, tag_table: pa.Array, key: str) -> pa.RecordBatch | None:
    """The rows of offsets ``lo..hi`` of a decoded ``node`` (its ``deleted``
    bitmap left out), as one record batch of the source's schema; None when the
    node holds none of them."""
    part = node_slice(node, deleted, lo, hi)
    return None if part is None else slices_batch([part], tag_table, key)


def node_slice(node, deleted, lo: int, hi: int) -> tuple | None:
    """The arrays of offsets ``lo..hi`` of a decoded ``node``, without a Python
    object per entry: ``(first offset, entries, tag ids, times in ns, deleted
    mask or None)``, views of the node's decoded body; None when the node holds
    none of them.  Shared by the snapshot reader and TNODES reads
    (pipeline.nodes_read): ``slices_batch`` makes record batches of them."""
    start = node.start
    count = node.count
    p = max(lo - start, 0)
    q = min(hi - start + 1, count)
    if q <= p:
        return None
    buf, ends, tags, times = node.decoded()
    if ends.itemsize == 4 and ends[count] < (1 << 31):  # uint32 ends read as int32 offsets
        entries = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(ends), pa.py_buffer(buf)])
    else:  # a node past 2 GB: 64-bit offsets, then binary (which fails past Arrow's 2 GB)
        wide = pa.py_buffer(ends) if ends.itemsize == 8 else pa.Array.from_buffers(
            pa.uint32(), count + 1, [None, pa.py_buffer(ends)]).cast(pa.int64()).buffers()[1]
        entries = pa.Array.from_buffers(pa.large_binary(), count,
                                        [None, wide, pa.py_buffer(buf)]).cast(pa.binary())
    tag_ids = pa.Array.from_buffers(pa.uint32(), count, [None, pa.py_buffer(tags)])
    nanos = pa.Array.from_buffers(_NANOS, count, [None, pa.py_buffer(times)])
    gone = None
    if deleted is not None:
        gone = pa.Array.from_buffers(pa.bool_(), count, [None, pa.py_buffer(deleted)]).slice(p, q - p)
    # The arrays are views of the node's decoded body; the Arrow buffers keep it alive.
    return start + p, entries.slice(p, q - p), tag_ids.slice(p, q - p), nanos.slice(p, q - p), gone


_NANOS = pa.timestamp("ns", tz="UTC")


def slices_batch(parts: list[tuple], tag_table: pa.Array, key: str) -> pa.RecordBatch:
    """One record batch of the source's schema from the ``node_slice`` of
    consecutive nodes: the columns of several nodes joined (one copy, in Arrow),
    then the tag names, the time cast and the key column built once for all
    (their cost is per call as much as per row)."""
    if len(parts) == 1:
        first, entries, tag_ids, nanos, gone = parts[0]
        offsets = np.arange(first, first + len(entries), dtype=np.int64)
        mask = gone
    else:
        offsets = np.concatenate([np.arange(p[0], p[0] + len(p[1]), dtype=np.int64) for p in parts])
        entries = pa.concat_arrays([p[1] for p in parts])
        tag_ids = pa.concat_arrays([p[2] for p in parts])
        nanos = pa.concat_arrays([p[3] for p in parts])
        mask = None
        if any(p[4] is not None for p in parts):
            mask = pa.concat_arrays([p[4] if p[4] is not None else pa.repeat(pa.scalar(False), len(p[1]))
                                     for p in parts])
    n = len(entries)
    batch = pa.RecordBatch.from_arrays(
        [pa.array(offsets), tag_table.take(tag_ids), entries, nanos.cast(TIME_TYPE, safe=False),
         pa.repeat(pa.scalar(key, pa.string()), n)], schema=ARROW_SCHEMA)
    if mask is not None:
        batch = batch.filter(pc.invert(mask))
    return batch


def grouped_batches(slices, tag_table: pa.Array, key: str, max_bytes: int = BATCH_BYTES) -> Iterator[pa.RecordBatch]:
    """Record batches of consecutive ``node_slice`` results (None skipped), each
    gathering nodes up to ``max_bytes`` of entries (a node bigger than that
    alone): fewer, bigger batches cost Spark less per row than one per node."""
    group: list = []
    size = 0
    for part in slices:
        if part is None:
            continue
        nbytes = part[1].nbytes
        if group and size + nbytes > max_bytes:  # a batch stays under max_bytes unless one node is bigger
            batch = slices_batch(group, tag_table, key)
            group, size = [], 0
            if batch.num_rows:
                yield batch
        group.append(part)
        size += nbytes
    if group:
        batch = slices_batch(group, tag_table, key)
        if batch.num_rows:
            yield batch


def _close(data) -> None:
    try:
        data.close()
    except BufferError:  # a view is still alive somewhere: the GC closes it
        pass
