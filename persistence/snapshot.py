"""Snapshots (the RDB of tstream): one file holding every stream, its config, its groups.

    +----------------------------------------------------------+
    | "TSTREAM\\0" | version u16 | flags u16 | created_ms u64   |  file header (20 bytes)
    +----------------------------------------------------------+
    | framed record  S  stream metadata (msgpack): node size,   |  per key:
    |                   config, offsets, tag table, tag refcounts|   one S, its nodes in
    | framed record  N  node: deleted-bitmap length u32,        |   order, its groups
    |                   bitmap, node blob header, node body     |
    |                   (the zstd frames as stored in memory)   |
    | framed record  G  group state (msgpack)                   |
    | ...                                                       |
    | framed record  E  end: key count (msgpack)                |
    +----------------------------------------------------------+
    | "TSEOF\\0\\0\\0" | crc32 of every byte before it: u32        |  footer (12 bytes)
    +----------------------------------------------------------+

Sealed macro nodes are stored exactly as they sit in memory: zstandard-compressed
bodies (or raw where compression did not pay), written without recompression.
The node blob's header (version 3, drawn in ``engine/codec.py``) carries what
a sealed node keeps besides its body: block geometry and frame offsets, first
and last time, raw length and its sorted distinct tag ids; the S record carries
the stream's tag table and, since file version 2, its tag reference counts
(``tag_refs``: u32 little-endian per tag id, sealed nodes using it).

Loading (``load_file``) reads the file record by record with positioned reads:
a record's first few KiB (its header, an N record's bitmap and blob header),
then an N record's body straight into its own ``bytes`` object, which becomes
the node's stored data: one copy from the page cache, no whole-file buffer, and
every node owns its memory (eviction frees it a node at a time).  The
whole-file CRC is computed along the way and compared at the end; since it
covers every byte, nodes are rebuilt from their headers without decompressing
anything and the tag reference counts come from the S record (cheap structural
checks only: geometry, frame offsets, lengths, tag-set bounds, refcount sums).
Nothing is returned before the checksum matched.  ``check=True`` (what
``tstream-check`` uses) decompresses every node as well and compares headers
and refcounts with the blocks, O(entries).  On any damage the file is
scanned record by record (each record's own CRC) to name the first damaged
record's offset.  Version-1 files (no ``tag_refs``, version-2 node blobs
without summary) still load: their nodes are decompressed and their refcounts
recounted, O(entries).

Saving happens in steps so that BGSAVE never stalls clients: ``capture``
runs on the event loop and takes references to the sealed nodes (immutable) and
copies of what may still change (the active node, deleted bitmaps, tag tables,
refcounts, groups; a big stream's bitmaps are read as its nodes are framed,
see :class:`StreamCapture`); a :class:`Framer` turns captures into the file's
bytes on the event loop too, a slice at a time, checksums included, and
``write_chunks`` writes them in a worker thread that runs no Python between
its writes and fsyncs, calls that release the GIL (a writer thread framing
records or checksumming small pieces in Python held the GIL in the loop's way:
bench/RESULTS-capture.md).  The file is written to a temp name, fsynced,
renamed over the target and the directory fsynced, so a crash leaves either
the old snapshot or the new one.
"""

from __future__ import annotations

import os
import struct
import sys
import time
import zlib
from array import array
from bisect import bisect_left
from collections import deque
from dataclasses import asdict, fields
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Callable, Iterable, Iterator, Union

import msgpack

from tstream.engine import Keyspace, Stream
from tstream.engine.groups import Group
from tstream.engine.keyspace import SCAN_CHUNK as _SCAN_CHUNK
from tstream.engine.stream import BLOB_PREFIX, DEFAULT_CONFIG, Node, StreamConfig

from .fileops import FileOps
from .framing import HEADER, MAGIC, MAX_RECORD, CorruptFile, PersistenceError, frame, unpack

FILE_MAGIC = b"TSTREAM\x00"
FILE_HEADER = struct.Struct("<8sHHQ")
FOOTER_MAGIC = b"TSEOF\x00\x00\x00"
FOOTER = struct.Struct("<8sI")
VERSION = 2  # 2: S records carry tag_refs, node blobs version 3 (with summary)
READ_VERSIONS = (1, 2)

KIND_STREAM, KIND_NODE, KIND_GROUP, KIND_END = b"S", b"N", b"G", b"E"
# After the end record: aux fields (msgpack map), as Redis's RDB aux fields: the
# replication id and offset the data stands for (``repl-id``, ``repl-offset``).
# Readers that stop at the end record (pipeline.snapshot_reader) never see it.
KIND_AUX = b"A"
_SCAN_HEAD = 2  # a SCAN chunk's header: its number, its count of live keys (engine/keyspace.py)
_chunk_number = itemgetter(0)
_NODE_PREFIX = struct.Struct("<I")
# Bytes read at the start of a record: enough for its frame header and, for an
# N record, usually its prefix, bitmap and node blob header (more is read when
# not); the rest of an N record (the node's body) is read into its own object.
_HEAD_READ = 4096
_BAD_RECORD = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError,
               struct.error, msgpack.UnpackException)


# A stream's config as its S record stores it (``asdict``, whose deep copies cost
# more than the rest of a one-entry key's capture): the fields are plain values.
_CONFIG_FIELDS = tuple(f.name for f in fields(StreamConfig))
_DEFAULT_CONFIG = asdict(DEFAULT_CONFIG)


def _config_dict(config: StreamConfig) -> dict:
    if config is DEFAULT_CONFIG:
        return dict(_DEFAULT_CONFIG)
    return {name: getattr(config, name) for name in _CONFIG_FIELDS}


def _refs_bytes(refs: array) -> bytes:
    if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        refs = array(refs.typecode, refs)
        refs.byteswap()
    return refs.tobytes()


# A stream with more sealed nodes than this is captured lazily (``StreamCapture``):
# its deleted bitmaps are read as its nodes are framed, not all at its capture.
_LAZY_NODES = 64
_deleted_of = attrgetter("deleted")


class StreamCapture:
    """What ``write`` needs of one stream, safe to read from another thread.

    Taken on the event loop in O(nodes) C-level work (``Stream.capture_nodes``):
    the sealed nodes themselves (immutable; the keyspace's block cache stays
    pinned until the snapshot is written, so a node dropped meanwhile keeps its
    data), copies of what may still change (deleted bitmaps, the active node,
    tag table and counts, groups).

    ``lazy`` (a pinned capture of more than ``_LAZY_NODES`` sealed nodes, what
    ``IncrementalCapture`` takes): the deleted bitmaps, which change in place,
    are not copied at the capture (a Python walk of every node, about 10 ms per
    100,000 nodes) but read as each node is framed (``node_parts``, on the
    loop, a slice at a time); ``settle`` copies those of the nodes not framed
    yet, and must be called before anything changes the stream (the
    ``IncrementalCapture`` does, from ``before_change``).  ``deleted`` is None
    until then."""

    __slots__ = ("key", "meta", "sealed", "deleted", "active", "groups", "pinned", "framed")

    def __init__(self, key: bytes, stream: Stream, pinned: bool = True, lazy: bool = False) -> None:
        self.key = key
        self.meta = {
            "node_entries": stream.node_entries,
            "config": _config_dict(stream.settings),
            "first": stream.first,
            "next_offset": stream.next_offset,
            "last_time": stream.last_time,
            "tags": list(stream._tag_list),
            "tag_refs": _refs_bytes(stream._tag_refs),
        }
        if stream._x is not None:  # the stored part of its Redis ids (engine/xids.py)
            self.meta["x"] = stream._x.export()
        if stream._ingest:  # fast batches and message ids (engine/ingest.py)
            self.meta["ingest"] = stream._ingest.export()
        self.framed = 0  # sealed nodes framed so far (a lazy capture's bitmaps are read from there on)
        nodes: list = stream.node_list()
        self.sealed: list  # the nodes (pinned), or their capture parts
        self.deleted: dict[int, bytes] | None
        self.active: tuple | None
        active = stream._active
        if len(nodes) == 1 and nodes[0] is active:  # (a key of a few entries) Stream.capture_nodes in fewer calls
            self.sealed, self.deleted = [], {}
            self.active = (None if active.deleted is None else bytes(active.deleted), active.capture_parts())
        elif lazy and pinned and len(nodes) > _LAZY_NODES:
            # Stream.capture_nodes without its walk of the bitmaps: O(nodes) in C.
            self.sealed = nodes[:-1] if active is not None and nodes[-1] is active else nodes[:]
            self.deleted = None
            self.active = None if active is None else (
                None if active.deleted is None else bytes(active.deleted), active.capture_parts())
        else:
            self.sealed, self.deleted, self.active = stream.capture_nodes()
        self.pinned = pinned
        if not pinned:  # nothing keeps dropped nodes whole: take their parts now, O(nodes)
            self.sealed = [node.capture_parts() for node in self.sealed]
        self.groups = [group.export_state() for group in stream.groups.values()] if stream.groups else []

    def settle(self) -> None:
        """The stream is about to change: copy the deleted bitmaps of the
        sealed nodes not framed yet (a lazy capture; nothing to do otherwise).
        O(nodes left) in C, plus O(nodes with a bitmap)."""
        if self.deleted is None:
            start = self.framed
            bitmaps = list(map(_deleted_of, self.sealed[start:]))
            self.deleted = {} if bitmaps.count(None) == len(bitmaps) else {
                i: bytes(bits) for i, bits in enumerate(bitmaps, start) if bits is not None}

    def node_parts(self) -> Iterator[tuple[bytes | None, tuple]]:
        """(deleted bitmap or None, capture parts) of every node, oldest first,
        for a lazy capture read when asked for (see ``settle``)."""
        pinned = self.pinned
        for i, node in enumerate(self.sealed):
            deleted = self.deleted
            if deleted is None:
                bits = node.deleted
                bitmap = None if bits is None else bytes(bits)
            else:
                bitmap = deleted.get(i)
            self.framed = i + 1
            yield bitmap, node.capture_parts() if pinned else node
        self.deleted = self.deleted or {}  # settled: nothing left to copy
        if self.active is not None:
            yield self.active


def capture(keyspace: Keyspace) -> list[StreamCapture]:
    """Take a consistent picture of the whole keyspace at once (SAVE, SHUTDOWN,
    tests), unaffected by later changes: on the event loop, O(keys + nodes).
    BGSAVE and rewrites use :class:`IncrementalCapture`, which never holds the
    loop for long."""
    return [StreamCapture(key, stream, pinned=False) for key, stream in keyspace.items()]


# A piece of a snapshot's body: framed records, or a record whose payload is
# ``head + body`` framed by the writer (a large node body, not copied on the loop).
Piece = Union[bytes, tuple[bytes, bytes]]
_BIG_BODY = 1 << 10  # node bodies from this size go to the writer by reference (a sealed node's, usually)


def pieces(item: StreamCapture) -> Iterator[Piece]:
    """The records of one captured stream, in file order: framed bytes, or
    ``(head, body)`` for a node whose body is large (see ``write_pieces``)."""
    yield frame(KIND_STREAM + _packb([item.key, item.meta]))
    prefix = _NODE_PREFIX.pack
    for deleted, parts in item.node_parts():
        header, body = Node.parts_of(parts)
        bitmap = deleted or b""
        head = b"".join((KIND_NODE, prefix(len(bitmap)), bitmap, header))
        if len(body) >= _BIG_BODY:
            yield head, body
        else:
            yield frame(head + body)
    for group in item.groups:
        yield frame(KIND_GROUP + _packb([item.key, group]))


def end_record(count: int) -> bytes:
    return frame(KIND_END + _packb(count))


def body_pieces(captured: Iterable[StreamCapture]) -> Iterator[Piece]:
    """The pieces of a snapshot body (every stream's, then the end record)."""
    count = 0
    for item in captured:
        count += 1
        yield from pieces(item)
    yield end_record(count)


def records(captured: Iterable[StreamCapture]) -> Iterator[bytes]:
    """The framed records of a snapshot body, in file order."""
    for piece in body_pieces(captured):
        yield piece if isinstance(piece, bytes) else frame(piece[0] + piece[1])


def file_header(created_ms: int | None = None) -> bytes:
    """A snapshot file's header (``created_ms``: now when None)."""
    if created_ms is None:
        created_ms = int(time.time() * 1000)
    return FILE_HEADER.pack(FILE_MAGIC, VERSION, 0, created_ms)


# The framer's buffers: a fresh one is zero-filled in one step on the loop (a
# page fault each 4 KiB: 1 MiB took 0.8-2.3 ms, 256 KiB takes 0.2-0.6 ms;
# bench/RESULTS-capture.md); the writer hands written ones back for reuse.
FRAMER_CHUNK = 256 << 10
_NO_BUFFER = memoryview(b"")  # a Framer's view between two buffers (none taken yet)


class Framer:
    """Frames captured streams on the event loop a slice at a time into the
    whole file's bytes, ready to write: the writer thread (``write_chunks``)
    runs no Python between its writes, so it needs the GIL only a few times
    per chunk (a writer that checksummed or framed pieces held it in the
    loop's way: bench/RESULTS-capture.md).

    ``out`` receives chunks of about ``chunk`` bytes: memoryviews of buffers
    of ``chunk`` bytes (the framer does not touch one again unless it is
    handed back by ``recycle``, once written: the pages of a buffer reused
    are already mapped, a fresh one faults on each of them as ``bytearray``
    zero-fills it, in the step that takes it: ``FRAMER_CHUNK``), or a record
    bigger than a chunk as ``bytes``, and first the file header by itself, as
    ``bytes`` (no buffer is taken before the first record: ``__init__`` stays
    O(1), it is the BGSAVE command's turn).  They hold the file header, the records
    (node bodies copied in: a memcpy; no checksum left for the writer), and
    from ``finish`` the end record, the aux record (``aux``, see ``write``)
    and the footer with the checksum of every byte before it, computed here
    as the records are framed.  ``add`` queues a capture
    (``IncrementalCapture``'s ``emit``); ``run`` frames until a deadline, one
    record at a time; ``sent`` counts the bytes handed to ``out`` (a writer
    compares it with what it wrote).  The file is byte for byte what
    ``write`` writes (given the same ``created_ms``)."""

    def __init__(self, out: Callable[[memoryview | bytes], None], chunk: int = FRAMER_CHUNK,
                 aux: dict | None = None, created_ms: int | None = None) -> None:
        self.out = out
        self.chunk = chunk
        self.aux = aux
        self.free: deque[bytearray] = deque()  # written buffers (appended by the writer thread)
        # The buffer being filled: none yet, the first record takes one (its
        # zero fill is not the BGSAVE command's: that turn stays O(1)).
        self.view = _NO_BUFFER
        self._pack = msgpack.Packer(use_bin_type=True).pack  # (_packb's bytes; a Packer per call costs)
        self.pos = 0
        self.items: deque[StreamCapture] = deque()
        self.current: Iterator[None] | None = None
        self.count = 0  # streams added
        self.header: bytes | None = file_header(created_ms)  # handed over by itself, by the first flush
        self.crc = zlib.crc32(self.header)
        self.sent = 0

    def add(self, item: StreamCapture) -> None:
        self.items.append(item)
        self.count += 1

    def idle(self) -> bool:
        return self.current is None and not self.items

    def recycle(self, piece: memoryview | bytes) -> None:
        """``piece`` (from ``out``) is written: its buffer may be reused (any thread)."""
        if type(piece) is memoryview:
            self.free.append(piece.obj)  # type: ignore[arg-type]

    def run(self, deadline_ns: int) -> bool:
        """Frame until ``time.perf_counter_ns()`` passes ``deadline_ns``
        (checked after each record); True once every capture added is framed."""
        clock = time.perf_counter_ns
        items = self.items
        while True:
            current = self.current
            if current is None:
                if not items:
                    return True
                item = items.popleft()
                if not item.sealed and not item.groups and self._small(item):
                    if clock() > deadline_ns:
                        return False
                    continue
                current = self.current = self._frame(item)
            for _ in current:
                if clock() > deadline_ns:
                    return False
            self.current = None

    def _put(self, data: bytes) -> None:
        """Copy ``data`` into the current buffer (checksummed by the caller)."""
        pos = self.pos
        end = pos + len(data)
        if end > len(self.view):
            self.flush()
            if len(data) > self.chunk:  # bigger than a buffer: by itself
                self.sent += len(data)
                self.out(data)
                return
            self.view = memoryview(self.free.popleft() if self.free else bytearray(self.chunk))
            pos, end = 0, len(data)
        self.view[pos:end] = data
        self.pos = end

    def _add(self, record: bytes) -> None:
        self.crc = zlib.crc32(record, self.crc)
        self._put(record)

    def _small(self, item: StreamCapture) -> bool:
        """Frame a stream of no sealed node and no group (a key of a few
        entries: many keys are mostly these) at once, its two records as one
        piece: what ``_frame`` writes, in fewer calls.  False (nothing done)
        when its active node's body is large."""
        active = item.active
        if active is None:
            record = frame(KIND_STREAM + self._pack([item.key, item.meta]))
        else:
            deleted, parts = active
            header, body = Node.parts_of(parts)
            if len(body) >= _BIG_BODY:
                return False
            bitmap = deleted or b""
            record = frame(KIND_STREAM + self._pack([item.key, item.meta])) + frame(
                b"".join((KIND_NODE, _NODE_PREFIX.pack(len(bitmap)), bitmap, header, body)))
        self.crc = zlib.crc32(record, self.crc)
        self._put(record)
        return True

    def _frame(self, item: StreamCapture) -> Iterator[None]:
        """Frame ``item``'s records into the buffer, yielding after each one
        (the same bytes as ``pieces``)."""
        crc32 = zlib.crc32
        prefix = _NODE_PREFIX.pack
        parts_of = Node.parts_of
        pack = HEADER.pack
        put = self._put
        record = frame(KIND_STREAM + self._pack([item.key, item.meta]))
        self.crc = crc32(record, self.crc)
        put(record)
        yield
        for deleted, parts in item.node_parts():
            header, body = parts_of(parts)
            bitmap = deleted or b""
            head = b"".join((KIND_NODE, prefix(len(bitmap)), bitmap, header))
            if len(body) < _BIG_BODY:  # (an active node's, usually) one piece: fewer calls
                record = frame(head + body)
                self.crc = crc32(record, self.crc)
                put(record)
            else:  # no concatenation: the body is copied once, into the buffer
                length = len(head) + len(body)
                record = pack(MAGIC, length, crc32(body, crc32(head)), length ^ 0xFFFFFFFF)
                self.crc = crc32(body, crc32(head, crc32(record, self.crc)))
                put(record)
                put(head)
                put(body)
            yield
        for group in item.groups:
            record = frame(KIND_GROUP + self._pack([item.key, group]))
            self.crc = crc32(record, self.crc)
            put(record)
            yield

    def flush(self) -> None:
        """Hand the current buffer's bytes over (the next record takes another buffer)."""
        if self.header is not None:  # (the first record: no buffer taken before it)
            header, self.header = self.header, None
            self.sent += len(header)
            self.out(header)
        if self.pos:
            view, n = self.view, self.pos
            self.view = _NO_BUFFER
            self.pos = 0
            self.sent += n
            self.out(view[:n])

    def finish(self) -> None:
        """Every capture is framed: the end record, the aux record, the footer,
        and the last chunk."""
        assert self.idle()
        self._add(end_record(self.count))
        if self.aux:
            self._add(frame(KIND_AUX + _packb(self.aux)))
        self._put(FOOTER.pack(FOOTER_MAGIC, self.crc))
        self.flush()


class IncrementalCapture:
    """A consistent picture of a keyspace taken a slice at a time, so that BGSAVE
    and AOF rewrites never hold the event loop for more than a few ms whatever
    the number of keys (copy-on-write at the key level)::

        start   the picture's moment: O(1), the ids below ``limit`` are the
                keys that existed then (the walk reads the keyspace's SCAN
                chunks as they are: a chunk dropped meanwhile held only keys
                deleted since, each captured first by ``before_change``)
        step()  captures keys in SCAN order for about ``budget_ns`` (call it
                again until it returns True); each goes to ``emit``
        before_change(key)   called before anything changes a key: a key the
                walk has not reached yet is captured first, as it still is; a
                big key's lazy capture still being framed is settled
        before_flush()       FLUSHALL: the keys not captured yet are kept aside
                (copies of the dict and the chunk list, O(keys) in C) and the
                walk goes on over them
        owes()  a lazy capture is still being framed: keep handing keys over
                after the walk is done, until it returns False

    A stream of more than ``_LAZY_NODES`` sealed nodes is captured lazily
    (``StreamCapture``, in O(nodes) C-level work: its node list): its deleted
    bitmaps, which change in place, are read as the Framer frames each node,
    and ``before_change`` copies those not read yet before the stream changes.

    A key created after the start has an id >= ``limit`` and is left out; a key
    deleted after the start was captured by ``before_change`` first; a key
    captured early is remembered in ``early`` so the walk skips it.  The
    keyspace's block cache is pinned (``BlockCache.pins``) from the start until
    ``release``: nodes dropped meanwhile keep their data for the writer.
    """

    def __init__(self, keyspace: Keyspace, emit) -> None:
        self.keyspace = keyspace
        self.emit = emit  # called with each StreamCapture, in the order taken
        self.source = keyspace.streams  # where the walk finds streams (a copy after FLUSHALL)
        # The SCAN chunks the walk goes through: the keyspace's own list, not a
        # copy (a copy made the BGSAVE command's turn O(keys / 128): 0.6 ms at
        # 1M keys, bench/RESULTS-capture.md); a copy after FLUSHALL.
        self.chunks = keyspace._chunks
        self.limit = keyspace._next_id
        self.early: set[bytes] = set()
        # Lazy captures (big streams, see StreamCapture) whose nodes are not all
        # framed yet: settled by before_change, before their key changes.
        self.owing: dict[bytes, StreamCapture] = {}
        self.count = 0
        # Walk position: the number of the chunk the walk is in (chunks are found
        # by number: the list may lose chunks between steps), the next slot in it.
        self._number = 0
        self._slot = _SCAN_HEAD
        self.done = False
        self.abandoned = False  # set by the writer thread when it failed: the walk stops
        self.released = False
        keyspace.cache.pins += 1

    def position(self) -> int:
        """The id of the next key the walk looks at."""
        if self.done:
            return self.limit
        return min(self.limit, self._number * _SCAN_CHUNK + self._slot - _SCAN_HEAD + 1)

    def _take(self, key: bytes, stream: Stream) -> None:
        item = StreamCapture(key, stream, lazy=True)
        if item.deleted is None:
            self.owing[key] = item
        self.emit(item)
        self.count += 1

    def owes(self) -> bool:
        """Is a lazy capture still reading its stream's nodes (so that its key
        must be handed over before it changes, ``before_change``)?"""
        owing = self.owing
        for key in [key for key, item in owing.items() if item.deleted is not None]:
            del owing[key]  # framed: settled
        return bool(owing)

    def step(self, budget_ns: int = 1_000_000) -> bool:
        """Capture keys for about ``budget_ns``; True once every key is captured."""
        deadline = time.perf_counter_ns() + budget_ns
        if self.owing:
            self.owes()  # (drops the lazy captures framed since: they hold their node lists)
        chunks, source, early, limit = self.chunks, self.source, self.early, self.limit
        clock = time.perf_counter_ns
        # (the walk's chunk, or the next one if it was dropped since the last step)
        i = bisect_left(chunks, self._number, key=_chunk_number)
        while i < len(chunks):
            chunk = chunks[i]
            number = chunk[0]
            if number != self._number:  # the walk moves on to this chunk
                self._number, self._slot = number, _SCAN_HEAD
            base = number * _SCAN_CHUNK - _SCAN_HEAD + 1  # id of slot j: base + j
            end = len(chunk)
            slot = self._slot
            while slot < end:
                if base + slot >= limit:
                    break
                key = chunk[slot]
                slot += 1
                if key is None or key in early:
                    continue
                stream = source.get(key)
                if stream is not None:
                    self._take(key, stream)
                if clock() > deadline:  # (after every key: a key's capture is 10-30 us, the clock 50 ns)
                    self._slot = slot
                    return False
            else:
                i += 1
                self._number, self._slot = number + 1, _SCAN_HEAD
                continue
            break  # (the first id created after the start: the walk is over)
        self.done = True
        return True

    def before_change(self, key: bytes) -> None:
        """``key`` is about to change: capture it first if the walk still owes it,
        settle its lazy capture if its nodes are still being framed.  O(SCAN_CHUNK)
        (O(nodes not framed yet) in C when settling)."""
        if self.owing:
            item = self.owing.pop(key, None)
            if item is not None:
                item.settle()
        if self.done or key in self.early:
            return
        stream = self.keyspace.streams.get(key)
        if stream is None or stream.key_slot is None:
            return  # no such key (or one being created): nothing to keep
        chunk = stream.key_slot
        kid = chunk[0] * _SCAN_CHUNK + chunk.index(key, _SCAN_HEAD) - _SCAN_HEAD + 1
        if kid >= self.limit or kid < self.position():
            return  # created after the start, or captured by the walk already
        self.early.add(key)
        self._take(key, stream)
        item = self.owing.pop(key, None)
        if item is not None:  # a big key: it changes now, its bitmaps are copied now
            item.settle()

    def before_flush(self) -> None:
        """Every key is about to go: the walk goes on over a copy of the map."""
        for item in self.owing.values():
            item.settle()
        self.owing.clear()
        if not self.done and self.source is self.keyspace.streams:
            self.source = dict(self.source)
            self.chunks = list(self.chunks)  # (the keyspace's list is emptied, its chunks kept)

    def release(self) -> None:
        """The picture is written (or abandoned): dropped nodes may be cleared again."""
        if not self.released:
            self.released = True
            self.keyspace.cache.pins -= 1


_TEMP_PREFIX = "temp-"
_TEMP_SUFFIX = ".tsr"
_SYNC_EVERY = 4 << 20  # bytes written between fsyncs of a snapshot being written
_WRITE_CHUNK = 1 << 20


def is_temp_name(name: str) -> bool:
    """Is ``name`` a temp file ``write`` makes (left behind by a crash)?"""
    return name.startswith(_TEMP_PREFIX) and name.endswith(_TEMP_SUFFIX)


def remove_temp_files(directory: str, ops: FileOps | None = None) -> list[str]:
    """Delete the temp files of snapshot writes a crash (or a killed worker)
    left in ``directory``; returns their names.  Call it only when no write
    of this process is under way."""
    ops = ops or FileOps()
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        if is_temp_name(name):
            try:
                ops.unlink(os.path.join(directory, name))
                removed.append(name)
            except OSError:
                pass
    return removed


def write(captured: Iterable[StreamCapture], path: str, ops: FileOps | None = None,
          aux: dict | None = None, created_ms: int | None = None) -> int:
    """Write a snapshot to ``path`` atomically; returns its size. Safe in a worker thread.

    ``aux``: fields written after the end record (``KIND_AUX``), read back by
    ``load``/``load_file`` into their ``aux`` dict.

    Written to a temp file (removed on any failure), fsynced, renamed over
    ``path``, the directory fsynced.  Every step goes through ``ops`` (the
    fault-injection seam, see persistence.fileops)."""
    return write_pieces(body_pieces(captured), path, ops, aux, created_ms=created_ms)


def write_pieces(body: Iterable[Piece], path: str, ops: FileOps | None = None,
                 aux: dict | None = None, written: Callable[[int], None] | None = None,
                 created_ms: int | None = None) -> int:
    """``write`` of a body already framed (``body_pieces``, which ends with
    the end record): header, pieces, aux, footer, checksummed and joined
    into chunks of about 1 MiB here.  ``written(n)`` is told the bytes
    written so far, after each write."""
    return write_chunks(_checksummed(body, aux, created_ms), path, ops, written)


def _checksummed(body: Iterable[Piece], aux: dict | None, created_ms: int | None) -> Iterator[bytes]:
    """The file's bytes for ``write_pieces``, in chunks of about ``_WRITE_CHUNK``."""
    header = file_header(created_ms)
    tail = (frame(KIND_AUX + _packb(aux)),) if aux else ()
    crc32 = zlib.crc32
    crc = 0
    pending: list[bytes] = []
    pending_size = 0
    for chunk in chain((header,), body, tail):  # lazily: frames are written as made
        if not isinstance(chunk, bytes):  # (head, body): frame it here, no copy of body
            head, blob = chunk
            length = len(head) + len(blob)
            record = HEADER.pack(MAGIC, length, crc32(blob, crc32(head)), length ^ 0xFFFFFFFF) + head
            crc = crc32(blob, crc32(record, crc))
            pending += (record, blob)
            pending_size += len(record) + len(blob)
        else:
            crc = crc32(chunk, crc)
            pending.append(chunk)
            pending_size += len(chunk)
        if pending_size >= _WRITE_CHUNK:
            yield b"".join(pending)
            pending.clear()
            pending_size = 0
    pending.append(FOOTER.pack(FOOTER_MAGIC, crc))
    yield b"".join(pending)


def write_chunks(chunks: Iterable[bytes | bytearray | memoryview], path: str, ops: FileOps | None = None,
                 written: Callable[[int], None] | None = None) -> int:
    """Write a whole snapshot file given as chunks (a ``Framer``'s output:
    header to footer, checksummed) to ``path`` atomically; returns its size.
    No Python per byte: each chunk is written as it comes (``os.write``
    releases the GIL), ``written(n)`` told the bytes written so far after
    each one.  Written to a temp file (removed on any failure), fsynced every
    ``_SYNC_EVERY`` bytes and at the end, renamed over ``path``, the
    directory fsynced; every step goes through ``ops`` (the fault-injection
    seam, see persistence.fileops)."""
    ops = ops or FileOps()
    directory = os.path.dirname(os.path.abspath(path))
    temp = os.path.join(directory, f"{_TEMP_PREFIX}{os.getpid()}-{time.monotonic_ns()}{_TEMP_SUFFIX}")
    size = 0
    try:
        fd = ops.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, step="snapshot-open")
        try:
            unsynced = 0
            for chunk in chunks:  # lazily: chunks are written as made
                view = memoryview(chunk)
                while view:
                    view = view[ops.write(fd, view, step="snapshot-write"):]
                size += len(chunk)
                unsynced += len(chunk)
                if written is not None:
                    written(size)
                if unsynced >= _SYNC_EVERY:
                    # As Redis's rdb-save-incremental-fsync: the final fsync then
                    # has little left to flush (one burst of a whole file's
                    # writeback slows the machine, the server's loop included).
                    ops.fsync(fd, step="snapshot-fsync")
                    unsynced = 0
            ops.fsync(fd, step="snapshot-fsync")
        finally:
            ops.close(fd)
        ops.rename(temp, path, step="snapshot-rename")
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    ops.fsync_directory(directory)
    return size


def fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise PersistenceError(f"cannot read: {exc.strerror}", path) from None


def verify(data, path: str = "") -> int:
    """Check header, footer and whole-file checksum of a snapshot held in
    memory (or mapped); returns where the records start."""
    if len(data) < FILE_HEADER.size + FOOTER.size:
        raise CorruptFile(f"too short to be a snapshot ({len(data)} bytes)", path, 0)
    magic, version, _flags, _created = FILE_HEADER.unpack_from(data, 0)
    if magic != FILE_MAGIC:
        raise CorruptFile("not a tstream snapshot (bad magic)", path, 0)
    if version not in READ_VERSIONS:
        raise CorruptFile(f"unsupported snapshot version {version}", path, 8)
    end = len(data) - FOOTER.size
    footer_magic, crc = FOOTER.unpack_from(data, end)
    if footer_magic != FOOTER_MAGIC:
        raise CorruptFile("missing end marker (truncated file?)", path, end)
    with memoryview(data) as view:
        if zlib.crc32(view[:end]) != crc:
            source = _BytesSource(view)
            try:
                _locate_damage(source, end, path)
            finally:
                source.view.release()
            raise CorruptFile("checksum mismatch in the file header or footer", path, end)
    return FILE_HEADER.size


class _FileSource:
    """Positioned reads of an open file.  ``os.pread`` reads straight into
    the ``bytes`` object it returns: no intermediate buffer."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path
        self.size = os.fstat(fd).st_size

    def read(self, pos: int, n: int) -> bytes:
        """``n`` bytes at ``pos`` (fewer only at the end of the file)."""
        try:
            data = os.pread(self.fd, n, pos)
            if len(data) < n:  # a short read (a record past 2 GiB): finish it
                parts = [data]
                got = len(data)
                while got < n:
                    more = os.pread(self.fd, n - got, pos + got)
                    if not more:
                        break
                    parts.append(more)
                    got += len(more)
                data = b"".join(parts)
        except OSError as exc:
            raise PersistenceError(f"cannot read: {exc.strerror}", self.path, pos) from None
        return data


class _BytesSource:
    """The same reads over a snapshot held in memory (each read a copy)."""

    def __init__(self, data) -> None:
        self.view = memoryview(data)
        self.size = len(self.view)

    def read(self, pos: int, n: int) -> bytes:
        return bytes(self.view[pos:pos + n])


def load(data, path: str = "", check: bool = False, aux: dict | None = None) -> dict[bytes, Stream]:
    """Rebuild every stream of a snapshot held in memory. Raises
    PersistenceError naming file and offset.  ``load_file`` reads less.
    ``aux``: a dict that receives the file's aux fields (see ``write``)."""
    return _load(_BytesSource(data), path, check, aux)


def load_file(path: str, check: bool = False, aux: dict | None = None) -> dict[bytes, Stream]:
    """Rebuild every stream of the snapshot file ``path``, reading it record
    by record.  Raises PersistenceError naming file and offset.

    ``check=True`` (``tstream-check``) also decompresses every node, checks
    every block and compares the node headers and the stored tag refcounts
    with what the blocks hold: O(entries), for a verification tool; the
    checksum already guards against damage, this guards against a writer's
    mistakes."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise PersistenceError(f"cannot read: {exc.strerror}", path) from None
    try:
        return _load(_FileSource(fd, path), path, check, aux)
    finally:
        os.close(fd)


def _load(src, path: str, check: bool = False, aux: dict | None = None) -> dict[bytes, Stream]:
    size = src.size
    if size < FILE_HEADER.size + FOOTER.size:
        raise CorruptFile(f"too short to be a snapshot ({size} bytes)", path, 0)
    header = src.read(0, FILE_HEADER.size)
    magic, version, _flags, _created = FILE_HEADER.unpack(header)
    if magic != FILE_MAGIC:
        raise CorruptFile("not a tstream snapshot (bad magic)", path, 0)
    if version not in READ_VERSIONS:
        raise CorruptFile(f"unsupported snapshot version {version}", path, 8)
    end = size - FOOTER.size
    footer_magic, stored_crc = FOOTER.unpack(src.read(end, FOOTER.size))
    if footer_magic != FOOTER_MAGIC:
        raise CorruptFile("missing end marker (truncated file?)", path, end)
    try:
        streams, crc, fields = _read_records(src, end, zlib.crc32(header), path, check)
    except CorruptFile:
        # A damaged record says so by its own checksum: name the first one.
        _locate_damage(src, end, path)
        raise
    if crc != stored_crc:
        _locate_damage(src, end, path)
        raise CorruptFile("checksum mismatch in the file header or footer", path, end)
    if aux is not None:
        aux.update(fields)
    return streams


def read_aux(path: str) -> dict:
    """The aux fields of the snapshot file ``path`` without loading it: a walk
    over the record headers, each aux record checked by its own CRC ({} when
    the file has none).  Raises PersistenceError."""
    fields: dict = {}
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise PersistenceError(f"cannot read: {exc.strerror}", path) from None
    try:
        src = _FileSource(fd, path)
        end = src.size - FOOTER.size
        pos = FILE_HEADER.size
        hsize = HEADER.size
        if end < pos or src.read(0, len(FILE_MAGIC)) != FILE_MAGIC:
            raise CorruptFile("not a tstream snapshot", path, 0)
        while pos + hsize < end:
            head = src.read(pos, hsize + 1)
            magic, length, crc, inverted = HEADER.unpack_from(head, 0)
            if magic != MAGIC or length ^ inverted != 0xFFFFFFFF or pos + hsize + length > end:
                raise CorruptFile("not a record header", path, pos)
            if head[hsize:hsize + 1] == KIND_AUX:
                payload = src.read(pos + hsize, length)
                if zlib.crc32(payload) != crc:
                    raise CorruptFile("aux record checksum mismatch", path, pos)
                try:
                    items = unpack(payload[1:]).items()
                except _BAD_RECORD as exc:
                    raise CorruptFile(f"bad aux record: {exc}", path, pos) from None
                fields.update(_aux_fields(items))
            pos += hsize + length
    finally:
        os.close(fd)
    return fields


def _read_records(src, end: int, crc: int, path: str, check: bool = False) -> tuple[dict[bytes, Stream], int, dict]:  # noqa: C901 (over the limit when it came in)
    """Rebuild the streams of the records in ``[FILE_HEADER.size, end)``;
    returns them with the running CRC over those bytes (not checked here:
    the caller discards everything unless it matches) and the aux fields.
    Raises CorruptFile."""
    streams: dict[bytes, Stream] = {}
    fields: dict = {}
    pending: dict | None = None  # the stream being assembled: meta + nodes + groups
    ended = False
    crc32 = zlib.crc32
    read = src.read
    hsize = HEADER.size
    unpack_header = HEADER.unpack_from
    node_at = hsize + 1 + _NODE_PREFIX.size  # an N record's bitmap starts here
    from_parts = Node.from_parts
    header_length = Node.header_length

    def finish() -> None:
        nonlocal pending
        if pending is None:
            return
        state = pending["meta"]
        state["config"] = {k.decode() if isinstance(k, bytes) else k: v for k, v in state["config"].items()}
        state["nodes"] = pending["nodes"]
        try:
            # The file's checksum covers every byte: no decompression, refcounts as stored.
            stream = Stream.from_state(state, check=check)
            for group_state in pending["groups"]:
                group = Group.from_state(group_state)
                stream.add_group(group.name, group)
        except _BAD_RECORD as exc:
            raise CorruptFile(f"stream {pending['key']!r} does not rebuild: {exc}", path, pending["at"]) from None
        streams[pending["key"]] = stream
        pending = None

    pos = FILE_HEADER.size
    while pos < end:
        if end - pos < hsize:
            raise CorruptFile("not a record header", path, pos)
        head = read(pos, min(_HEAD_READ, end - pos))
        magic, length, _crc, inverted = unpack_header(head)
        if magic != MAGIC or length ^ inverted != 0xFFFFFFFF or length > MAX_RECORD:
            raise CorruptFile("not a record header", path, pos)
        rec_len = hsize + length
        if pos + rec_len > end:
            raise CorruptFile("a record runs past the end of the records", path, pos)
        kind = head[hsize:hsize + 1]
        if ended and kind != KIND_AUX:
            raise CorruptFile("records after the end record", path, pos)
        try:
            if kind == KIND_NODE:
                if pending is None:
                    raise ValueError("node record before any stream record")
                if rec_len < node_at:
                    raise ValueError("node record too short")
                (bitmap_len,) = _NODE_PREFIX.unpack_from(head, hsize + 1)
                blob_at = node_at + bitmap_len
                if blob_at > rec_len:
                    raise ValueError("deleted bitmap runs past the record")
                need = min(rec_len, blob_at + BLOB_PREFIX)
                if len(head) < need:
                    head = read(pos, need)
                body_at = blob_at + header_length(memoryview(head)[blob_at:rec_len])
                if body_at > rec_len:
                    raise ValueError("node blob header runs past the record")
                if len(head) < body_at:
                    head = read(pos, body_at)
                view = memoryview(head)
                if len(head) >= rec_len:  # a small record: all of it is in head
                    body = head[body_at:rec_len]
                    crc = crc32(view[:rec_len], crc)
                else:  # the body straight into its own object: the node's data
                    body = read(pos + body_at, rec_len - body_at)
                    crc = crc32(body, crc32(view[:body_at], crc))
                bitmap = head[node_at:blob_at] or None
                node = from_parts(view[blob_at:body_at], body, pending["node_entries"], check=check)
                del view
                pending["nodes"].append((node, bitmap))
                pos += rec_len
                continue
            if len(head) >= rec_len:
                payload = head[hsize:rec_len]
            else:
                payload = head[hsize:] + read(pos + len(head), rec_len - len(head))
            crc = crc32(payload, crc32(head[:hsize], crc))
            if kind == KIND_STREAM:
                finish()
                key, meta = unpack(payload[1:])
                meta = {k.decode(): v for k, v in meta.items()}
                pending = {"key": key, "at": pos, "meta": meta, "nodes": [], "groups": [],
                           "node_entries": int(meta["node_entries"])}
                if pending["node_entries"] < 1:
                    raise ValueError("bad node size")
            elif kind == KIND_GROUP:
                key, group_state = unpack(payload[1:])
                group_state = {k.decode(): v for k, v in group_state.items()}
                if pending is None or key != pending["key"]:
                    raise ValueError("group of another stream")
                pending["groups"].append(group_state)
            elif kind == KIND_END:
                finish()
                if unpack(payload[1:]) != len(streams):
                    raise ValueError("key count does not match")
                ended = True
            elif kind == KIND_AUX:
                if not ended:
                    raise ValueError("aux record before the end record")
                fields.update(_aux_fields(unpack(payload[1:]).items()))
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except CorruptFile:
            raise
        except _BAD_RECORD as exc:
            raise CorruptFile(f"bad record: {exc}", path, pos) from None
        pos += rec_len
    if not ended:
        raise CorruptFile("no end record", path, end)
    return streams, crc, fields


def _locate_damage(src, end: int, path: str) -> None:
    """Walk the records in ``[FILE_HEADER.size, end)`` checking each one's own
    CRC; raise CorruptFile at the first damaged one.  Returns when every
    record is intact.  The slow path of a load that failed."""
    pos = FILE_HEADER.size
    hsize = HEADER.size
    while pos < end:
        if end - pos < hsize:
            raise CorruptFile("checksum mismatch: the records end inside a record header", path, pos)
        magic, length, crc, inverted = HEADER.unpack(src.read(pos, hsize))
        if magic != MAGIC or length ^ inverted != 0xFFFFFFFF or length > MAX_RECORD:
            raise CorruptFile("checksum mismatch: not a record header", path, pos)
        if pos + hsize + length > end:
            raise CorruptFile("checksum mismatch: a record runs past the end of the records", path, pos)
        checked = 0
        value = 0
        while checked < length:  # in pieces: a record may be large
            n = min(length - checked, 1 << 24)
            value = zlib.crc32(src.read(pos + hsize + checked, n), value)
            checked += n
        if value != crc:
            raise CorruptFile("checksum mismatch: record checksum mismatch", path, pos)
        pos += hsize + length


def _aux_fields(items) -> dict:
    """Aux fields as written: str keys, str (not bytes) values, lists of them."""
    def text(value):
        if isinstance(value, bytes):
            return value.decode(errors="replace")
        if isinstance(value, list):
            return [text(v) for v in value]
        return value

    return {text(k): text(v) for k, v in items}


def _packb(value) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


__all__ = ["capture", "write", "write_pieces", "write_chunks", "Framer", "load", "load_file", "verify", "records", "read_file"]
