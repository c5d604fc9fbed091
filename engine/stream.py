"""The RCP 11 stream: an append-only log of ``(offset, tag, data, time)`` entries.

Layout
======

A stream is a Python list of *macro nodes*.  Every node covers a fixed,
aligned range of ``N = node_entries`` offsets (offsets start at 1)::

    offsets    1 ......... N | N+1 ....... 2N | 2N+1 ...... 3N | 3N+1 ..(next_offset)..
    node idx        k=0      |      k=1       |      k=2       |      k=3 (active)
                  (evicted,  |                |                |
                   dropped)  |                |                |
    Stream._nodes = [ Node(k=1, sealed),  Node(k=2, sealed),  Node(k=3, active) ]
    _first_node_index = 1          ^ first (may point inside a node)

    Sealed node (immutable, full)              Active node (the only writable one)
    +--------------------------------+         +-------------------------------------+
    | base, start, cap_end           |         | base, start, cap_end                |
    | first_time, last_time          |         | buf   : bytearray  "aaa|bbbb|cc|"   |
    | tag_set : distinct tag ids     |         | ends  : array('I') [0, 3, 7, 9]     |
    | data    : zstd(block 0) zstd(  |         | tags  : array('I') [5, 2, 5]        |
    |   block 1) ...  or one body    |         | times : array('q') [t0, t1, t2]     |
    | block_entries, block_offs      |         | deleted : bitmap or None            |
    | blocks  : per block a decoded  |         +-------------------------------------+
    |   _Block (LRU) or None         |
    | deleted : bitmap or None       |
    +--------------------------------+

    body = | payload buffer | pad to 8 | ends (count+1) | tag ids (count) | times (count) |

A block is the body of ``block_entries`` consecutive entries (the last block
may hold fewer), self-contained: its ``ends`` are relative to its own payloads.

``base`` is the node's aligned first offset ``k*N + 1`` and ``cap_end`` its
aligned end ``(k+1)*N + 1`` (exclusive).  ``start`` is the first offset whose
entry is physically stored in the node: normally ``base``, but after the whole
stream was evicted the next write may land in the middle of a node's range and
the new node simply starts there.  Entry ``offset`` of a node sits at position
``p = offset - start`` of its tables and its payload is
``buf[ends[p]:ends[p+1]]`` (``ends`` keeps a leading 0 so that no branch is
needed for the first entry).  Entries carry no per-entry Python object: a node
is one buffer plus three flat C arrays, like the ``offsets_table`` of RCP 11.

O(1) seek
---------
Because every node covers exactly ``N`` offsets and the list holds consecutive
nodes, the node of an offset is pure arithmetic::

    nodes[(offset - 1) // N - _first_node_index]

and the entry's position inside it is ``offset - node.start``.  No skiplist is
needed (RCP 11 proposed one): eviction only ever removes whole nodes from the
front (``del nodes[:k]``, then ``_first_node_index += k``), which keeps the
arithmetic valid.  Evicting ``k`` nodes costs O(k) plus one memmove of the
remaining node pointers; reading ``count`` entries costs O(count) plus at most
one decompression per sealed block touched (the block of position ``p`` is
``p // block_entries``, arithmetic again).

Eviction is exact for readers, memory is returned a node at a time: ``first``
moves to exactly the right offset (entries below it read as missing), and a
node is released once all of its offsets are below ``first``.

Sealing, blocks and the decoded-block cache
-------------------------------------------
When the active node fills up it is *sealed*: its entries are cut into
*blocks* of ``block_entries`` consecutive entries, each block is serialised
into its own body and compressed with zstandard as its own frame, the frames
are concatenated into ``data`` (``block_offs``: where each starts) and the
tables are dropped.  Sealing is paid once per node.  Level 1 is used; after a
node that saved less than 20%, the stream seals with level -1 (5x faster on
incompressible bytes, where level 1 burns ~130 us per 100 KB for little)
until a node compresses well again.  When all the frames together do not save
1/64 the node is stored raw instead, as one block (one body).

Why blocks: a random ``read(offset, 10)`` used to decompress a whole node
(~32 KB of 16-byte entries: 24 us of zstd for 10 entries, 36 us vs 3 us for a
read at the head).  A block is independently decompressible, so a read of
``k`` entries decompresses only the one or two blocks it touches.  The block
size is fixed per node (so that the block of a position is arithmetic) and
chosen when sealing from the node's mean entry size so that a block's raw
body is about ``BLOCK_BYTES`` = 4 KiB: ``block_entries = BLOCK_BYTES * count
// raw size`` (at least 1, evened out over the node), e.g. 125 entries of
16-byte payloads (8 blocks per node) or 35 of 100-byte payloads (29 blocks).
The trade-off, measured on 1000-entry nodes (memory_bytes per entry, one
node vs 4 KiB blocks): every frame restarts zstd's window and entropy tables,
so the ratio drops as blocks shrink (100-byte payloads half text half random:
60.5 -> 66.4 B/entry; all repetitive text: 8.2 -> 14.4; all random: 110.2 ->
112.0; 16-byte counters: 7.8 -> 8.6), and sealing costs ~4 us more per frame
(~+0.1-0.2 us per appended entry, amortised).  A miss costs ~1.4 us of
decompression per KiB of block, but below ~4 KiB the fixed costs of a miss
(locating the frame, zstd's table set-up, the decoded block's objects, the
LRU) dominate: in-process, a random ``read(offset, 10)`` takes 13 us with
4 KiB blocks, 11 us with 2 KiB, 11 us with 1 KiB (whose ratio is 12 B/entry
on 16-byte counters), vs 3 us at the head and 39 us with whole nodes.
``BLOCK_BYTES`` is read at sealing time only: each node records its own
``block_entries``.

Reading a compressed block decompresses it through a **process-wide** LRU of
decoded blocks (``DECODED_CACHE_BLOCKS`` blocks and at most
``DECODED_CACHE_BYTES`` bytes, counting each block's body plus its fixed
object overhead; see :func:`set_decoded_cache_limits`).  It is shared rather
than per stream so that memory stays bounded with many streams.  A decoded
block is a small ``_Block`` (memoryviews over the decompressed body) stored in
the node's ``blocks`` list, so a cache hit costs one ``OrderedDict.move_to_end``.
The newest ``FRESH_CACHED_BLOCKS`` blocks of a freshly sealed node enter the
cache at once: tail readers keep reading them without decompressing.  A
raw-stored sealed node keeps its one block's views permanently (nothing to
decompress).  :meth:`Node.tables_at` gives the tables of one position's block;
:meth:`Node.decoded` still gives whole-node tables, assembled from all the
blocks into one LRU entry (O(node) on a miss: for scans, not for lookups).

Tags
----
Tags are interned per stream: ``_tag_id`` (tag -> id) and ``_tag_list``
(id -> tag); id 0 is reserved so that ids are truthy.  ``_tag_refs[id]`` counts
the *sealed* nodes whose entries use the tag: a node's distinct ids are
computed once, when it is sealed, and kept in ``tag_set`` (sorted, an
``array('H')`` while ids fit in 16 bits).  A tag is
alive while a sealed node references it or the active node stores it; when
nodes are dropped the counts fall and every tag left unused is freed and its
id reused (the active node's ids are computed then, once per drop), so a
long-running stream writing unique tags does not leak.  ``tag_set`` also lets
a later subject filter skip a sealed node without decompressing it.

Missing entries
---------------
An entry is missing when it is evicted (offset < ``first``) or deleted
(``delete(offset)``; per-node bitmap of deleted positions).  ``first`` never
rests on a deleted entry: deleting the first held entry moves ``first`` up,
exactly as JetStream moves ``first_seq``.  ``length`` counts held entries.

Time
----
Each entry stores ``time_ns`` (ns since the epoch).  Times are forced
non-decreasing per stream (``max(now_ns, last_time)``), so time-based eviction
binary-searches (node ``last_time``, then over the node's blocks, then bisect
inside one block).

Snapshots
---------
``Node.blob()`` (or ``blob_parts()``: header and body apart) returns a
self-describing serialisation of a node, version 3, little-endian::

    +----+---------+-------+------------+-------+-------+---------+  _HDR, 32 bytes
    | TN | version | flags | ends code  | count | start | buf_len |  flags: 1 = zstd
    +----+---------+-------+------------+-------+-------+---------+
    | block_entries u32 | nblocks u32 |                               _BLOCKS_HDR (v2+)
    +-------------------+-------------+-------------+--------------+
    | first_time i64 | last_time i64 | raw_len u64 | tag-id code c |  _SUMMARY (v3),
    |                                 number of tag ids u32        |  32 bytes
    +--------------------------------------------------------------+
    | nblocks + 1 frame offsets into the body, u64 each            |
    | the distinct tag ids, sorted, u16 ('H') or u32 ('I') each    |  (v3)
    +--------------------------------------------------------------+
    | body: a sealed node's stored data as is (its zstd frames, or |
    | its one raw body; no recompression); the active node's raw   |
    | body (one block)                                             |
    +--------------------------------------------------------------+

The header holds everything a sealed node keeps besides its body, so
``Node.from_parts(header, body, node_entries, check=False)`` rebuilds one
without decompressing anything, keeping ``body`` itself as its data (a
snapshot load reads each node's body straight into its own ``bytes``):
structural checks only, for data whose checksum was verified.  ``check=True``
(the default of ``Node.from_blob(blob, node_entries)``) decompresses every
block and compares the summary with it.  Version-2 blobs (no summary) and
version-1 blobs (one frame per node; a full compressed one is re-cut into
blocks) still load, decompressed.  Tag ids inside a blob refer to the
stream's tag table, so a snapshot uses :meth:`Stream.export_state` /
:meth:`Stream.from_state`, which carry the tag table, its reference counts
(``tag_refs``: with ``check=False`` they are taken as given instead of being
recounted from every node's tag set), the node blobs, the deleted bitmaps,
offsets and config as plain ``bytes``/``int``/``list`` values.

Thread safety: none.  The engine is meant to be driven by one thread (the
event loop); the zstd contexts and the decoded-block cache are module globals.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left
from collections import OrderedDict
from dataclasses import asdict, dataclass
from itertools import accumulate, islice
from typing import Iterator, NamedTuple

import zstandard

from .subjects import enforce_subject_limit  # JetStream per-subject limit (max_msgs_per_subject)

__all__ = [
    "Entry",
    "Node",
    "Stream",
    "StreamConfig",
    "clear_decoded_cache",
    "decoded_cache_bytes",
    "set_decoded_cache_limits",
]

# ---------------------------------------------------------------------------
# Module-wide compression state.  Contexts are reused: creating a zstd context
# costs far more than compressing one node.
# ---------------------------------------------------------------------------

COMPRESSION_LEVEL = 1  # level 1 vs 3: ~25% faster sealing for ~4% larger blobs
FAST_COMPRESSION_LEVEL = -1  # for streams whose payloads do not compress
_CCTX = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_content_size=True)
_CCTX_FAST = zstandard.ZstdCompressor(level=FAST_COMPRESSION_LEVEL, write_content_size=True)
_DCTX = zstandard.ZstdDecompressor()

# Target raw size of one block of a compressed sealed node (see "Sealing,
# blocks and the decoded-block cache" above).  Read when a node is sealed;
# each node records its own block size, so changing it never invalidates
# existing nodes or snapshots.
BLOCK_BYTES = 4096
# A sealed node stays compressed when its frames save at least 1/2**_KEEP_SHIFT
# of the raw size.  1/64: a read decompresses one small block, and a block
# of incompressible payloads is stored by zstd as raw literals (decoding it
# is a copy, ~0.4 us per 4 KiB), so even the ~3% the tables save is kept.
_KEEP_SHIFT = 6
# Blocks of a freshly sealed node that enter the decoded cache at once.
FRESH_CACHED_BLOCKS = 2

DECODED_CACHE_BLOCKS = 512
DECODED_CACHE_BYTES = 64 * 1024 * 1024
DECODED_CACHE_NODES = DECODED_CACHE_BLOCKS  # old name (the cache held whole nodes)
_lru: "OrderedDict[_Block, None]" = OrderedDict()
_lru_bytes = 0

_LITTLE = sys.byteorder == "little"

# Blob header (see "Snapshots" above): magic, version, flags, ends typecode,
# count, start, buf_len; versions 2+ follow it with _BLOCKS_HDR
# (block_entries, nblocks); version 3 then with _SUMMARY (first_time,
# last_time, raw_len, tag-id typecode, number of tag ids); then the
# nblocks + 1 frame offsets of the body as little-endian u64; version 3
# then the node's sorted distinct tag ids (u16 or u32 each).
_HDR = struct.Struct("<2sBBcxxxIqQ")
_BLOCKS_HDR = struct.Struct("<II")
_SUMMARY = struct.Struct("<qqQcxxxI")
_MAGIC = b"TN"
_VERSION = 3  # 1: one frame (or raw body) per node; 2: no summary; both still loaded
_FLAG_ZSTD = 1
# Bytes of a blob that always suffice to compute its header's length.
BLOB_PREFIX = _HDR.size + _BLOCKS_HDR.size + _SUMMARY.size


def set_decoded_cache_limits(max_blocks: int, max_bytes: int) -> None:
    """Resize the process-wide decoded-block LRU: at most ``max_blocks``
    blocks and ``max_bytes`` bytes (at least one block is kept)."""
    global DECODED_CACHE_BLOCKS, DECODED_CACHE_BYTES, DECODED_CACHE_NODES
    DECODED_CACHE_BLOCKS = DECODED_CACHE_NODES = max(1, int(max_blocks))
    DECODED_CACHE_BYTES = max(0, int(max_bytes))
    _lru_shrink()


def clear_decoded_cache() -> None:
    """Empty the shared decoded-block LRU (e.g. on FLUSHALL)."""
    while _lru:
        _lru_forget(next(iter(_lru)).node)


def decoded_cache_bytes() -> int:
    """Bytes held by the shared LRU: decompressed block bodies plus their
    fixed per-block object overhead."""
    return _lru_bytes


def _lru_drop(blk: "_Block") -> None:
    """Unlink a block that just left the LRU from its node."""
    blk.lru = False
    if blk.index < 0:
        blk.node.whole = None
    else:
        blk.node.blocks[blk.index] = None


def _lru_shrink() -> None:
    global _lru_bytes
    while _lru and (len(_lru) > DECODED_CACHE_BLOCKS
                    or (_lru_bytes > DECODED_CACHE_BYTES and len(_lru) > 1)):
        old, _ = _lru.popitem(last=False)
        _lru_bytes -= old.nbytes
        _lru_drop(old)


def _lru_add(blk: "_Block") -> None:
    global _lru_bytes
    blk.lru = True
    _lru[blk] = None
    _lru_bytes += blk.nbytes
    _lru_shrink()


def _lru_forget(node: "Node") -> None:
    """Drop every decoded block of ``node`` from the LRU."""
    global _lru_bytes
    blocks = node.blocks
    if blocks is None:
        return
    for blk in (*blocks, node.whole):
        if blk is not None and blk.lru:
            del _lru[blk]
            _lru_bytes -= blk.nbytes
            _lru_drop(blk)


def _decode_block(node: "Node", b: int) -> "_Block":
    """Decompress block ``b`` of a compressed sealed node into the LRU."""
    offs = node.block_offs
    be = node.block_entries
    # A bytes slice (a copy of one small frame) is cheaper than a memoryview.
    raw = _DCTX.decompress(node.data[offs[b]:offs[b + 1]])
    count = node.cap_end - node.start - b * be
    blk = _Block(node, b, raw, be if be < count else count, node.ends_code)
    node.blocks[b] = blk
    _lru_add(blk)
    return blk


def _decode_whole(node: "Node") -> "_Block":
    """Whole-node tables of a multi-block compressed node (for
    :meth:`Node.decoded`), assembled from its blocks into the LRU."""
    blk = _Block.from_tables(node, -1, *_concat_tables(node._block_list(), node.ends_code))
    node.whole = blk
    _lru_add(blk)
    return blk


# ---------------------------------------------------------------------------
# Blocks
# ---------------------------------------------------------------------------

def _block_body(payload, ends, tags, times) -> bytes:
    """Serialise one block (or a whole node): payloads, pad to 8, ends
    (relative to the first payload byte, leading 0), tag ids, times.
    Little-endian on every host."""
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        ends, tags, times = array(ends.typecode, ends), array("I", tags), array("q", times)
        ends.byteswap(), tags.byteswap(), times.byteswap()
    pad = (-len(payload)) & 7  # keep the tables 8-byte aligned
    return b"".join((payload, bytes(pad), ends, tags, times))


def _concat_tables(blocks, code: str):
    """``(payloads, ends, tags, times)`` of consecutive decoded blocks joined
    into node-wide tables (``ends`` rebased).  O(entries)."""
    pays = []
    ends = array(code, (0,))
    tags = array("I")
    times = array("q")
    base = 0
    for blk in blocks:
        e = blk.ends.tolist()
        last = e[-1]
        pays.append(memoryview(blk.buf)[:last])
        ends.extend([x + base for x in islice(e, 1, None)] if base else islice(e, 1, None))
        base += last
        if _LITTLE:
            tags.frombytes(blk.tags.cast("B"))
            times.frombytes(blk.times.cast("B"))
        else:  # pragma: no cover - big-endian hosts: the views are arrays
            tags.extend(blk.tags)
            times.extend(blk.times)
    return b"".join(pays), ends, tags, times


class _Block:
    """The decoded tables of one block of a sealed node: ``buf`` holds the
    block's payloads (its raw body), ``ends``/``tags``/``times`` are views
    over the body's tables, ``ends`` relative to the block's first payload
    byte.  ``index`` is the block's number in the node (-1: the whole node,
    see :meth:`Node.decoded`).  ``lru`` tells whether it sits in the shared
    LRU; a raw-stored node's single block is permanent instead (and has no
    ``node`` back reference, so that no cycle keeps a dropped node alive)."""

    __slots__ = ("node", "index", "buf", "ends", "tags", "times", "nbytes", "lru")

    def __init__(self, node, index: int, raw: bytes, count: int, code: str) -> None:
        e_len = (count + 1) * (4 if code == "I" else 8)
        pos = len(raw) - e_len - 12 * count
        if pos < 0:
            raise ValueError("block body too short")
        e_end = pos + e_len
        t_end = e_end + 4 * count
        if _LITTLE:
            mv = memoryview(raw)
            self.ends = mv[pos:e_end].cast(code)
            self.tags = mv[e_end:t_end].cast("I")
            self.times = mv[t_end:].cast("q")
        else:  # pragma: no cover - big-endian hosts
            self.ends = array(code, raw[pos:e_end])
            self.tags = array("I", raw[e_end:t_end])
            self.times = array("q", raw[t_end:])
            self.ends.byteswap(), self.tags.byteswap(), self.times.byteswap()
        self.node = node
        self.index = index
        self.buf = raw
        self.nbytes = len(raw) + _BLOCK_OVERHEAD
        self.lru = False

    @classmethod
    def from_tables(cls, node, index: int, buf: bytes, ends, tags, times) -> "_Block":
        blk = cls.__new__(cls)
        blk.node, blk.index, blk.buf = node, index, buf
        blk.ends, blk.tags, blk.times = ends, tags, times
        blk.nbytes = (len(buf) + len(ends) * ends.itemsize + 12 * len(tags) + _BLOCK_OVERHEAD)
        blk.lru = False
        return blk


# What a decoded block costs besides its body: the object and its 3 views
# (+1 for the managed buffer they share), and the bytes object's header.
_VIEWS_OVERHEAD = _Block.__basicsize__ + 4 * sys.getsizeof(memoryview(b""))
_BLOCK_OVERHEAD = _VIEWS_OVERHEAD + sys.getsizeof(b"")

# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------

def _pack_ids(ids: set[int]) -> array:
    """Distinct tag ids of a node, sorted, 2 bytes each while ids fit."""
    ordered = sorted(ids)
    return array("H" if not ordered or ordered[-1] < 65536 else "I", ordered)


def _le_bytes(values: array) -> bytes:
    """An array's items as little-endian bytes."""
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _le_array(code: str, data) -> array:
    """An array of ``code`` items from little-endian bytes (copied)."""
    values = array(code)
    values.frombytes(data)  # any bytes-like (array(code, view) would take bytes as items)
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        values.byteswap()
    return values


def _popcount_range(bits: bytearray, a: int, b: int) -> int:
    """Number of set bits at positions [a, b) of a little-endian bitmap."""
    if b <= a:
        return 0
    v = int.from_bytes(bits, "little") >> a
    return (v & ((1 << (b - a)) - 1)).bit_count()


# ---------------------------------------------------------------------------
# Public value types
# ---------------------------------------------------------------------------

@dataclass
class StreamConfig:
    """Per-stream limits and switches (see SPEC section 3, TCONFIG)."""

    max_len: int = 0               # 0 = no limit; like BACKLOG on every write
    max_age_ms: int = 0            # 0 = no limit; older entries are evicted
    max_msgs_per_subject: int = 0  # 0 = no limit; else the oldest entries of a subject beyond N are deleted
    allow_direct: bool = True
    allow_atomic: bool = True


class Entry(NamedTuple):
    offset: int
    tag: bytes
    data: bytes
    time_ns: int


# ---------------------------------------------------------------------------
# Macro node
# ---------------------------------------------------------------------------

class Node:
    """One macro node: the entries of offsets ``[start, cap_end)`` at most.

    See the module docstring for the layout.  Nodes are managed by
    :class:`Stream`; the public surface for snapshots is :meth:`blob`
    (alias :meth:`sealed_bytes`), :meth:`blob_parts` (:meth:`capture_parts`,
    :meth:`parts_of`), :meth:`from_blob`,
    :meth:`from_parts`, :meth:`header_length`, :attr:`count`, :attr:`sealed` and :attr:`deleted`; readers use
    :meth:`tables_at` (one block) or :meth:`decoded` (the whole node).
    """

    __slots__ = (
        "base", "start", "cap_end", "sealed",
        "buf", "ends", "tags", "times",  # active node only (None once sealed)
        "data", "compressed",    # sealed only: stored block frames / raw body
        "block_entries", "block_offs",  # sealed only: entries per block, frame offsets in data
        "blocks",                # sealed only: per block its decoded _Block or None
        "whole",                 # sealed only: whole-node _Block for decoded(), or None
        "buf_len", "ends_code", "raw_len",  # sealed only: body geometry
        "tag_set",               # sealed only: packed distinct tag ids
        "first_time", "last_time",  # sealed only
        "deleted", "ndel",       # bitmap of deleted positions (or None), count
        "mem",
    )

    def __init__(self, base: int, start: int, cap_end: int) -> None:
        self.base = base
        self.start = start
        self.cap_end = cap_end
        self.sealed = False
        self.buf = bytearray()
        self.ends = array("I", (0,))
        self.tags = array("I")
        self.times = array("q")
        self.data = None
        self.compressed = False
        self.block_entries = 0
        self.block_offs = None
        self.blocks = None
        self.whole = None
        self.buf_len = 0
        self.raw_len = 0
        self.ends_code = "I"
        self.tag_set = None
        self.first_time = 0
        self.last_time = 0
        self.deleted = None
        self.ndel = 0
        self.mem = 0

    # -- geometry ---------------------------------------------------------
    @property
    def count(self) -> int:
        """Entries physically stored (deleted ones included). O(1)."""
        if self.sealed:
            return self.cap_end - self.start
        return len(self.times)

    @property
    def nblocks(self) -> int:
        """Blocks of a sealed node (1 when stored raw); 0 for the active node."""
        return len(self.blocks) if self.sealed else 0

    # -- serialisation ----------------------------------------------------
    def _body(self) -> bytes:
        """Serialise the active node's tables as one raw body."""
        return _block_body(self.buf, self.ends, self.tags, self.times)

    def _seal(self, fast: bool = False, cache: bool = True) -> set[int]:
        """Freeze a full active node: cut it into blocks of about
        ``BLOCK_BYTES`` raw bytes and compress each as its own zstd frame
        (``fast``: with the fast level), or keep one raw body when that does
        not save 1/16; record its summary, drop the tables.  ``cache``: put
        the fresh decoded blocks in the LRU.  Returns the distinct tag ids of
        the node.  O(node)."""
        buf, ends, tags, times = self.buf, self.ends, self.tags, self.times
        count = len(times)
        code = ends.typecode
        self.buf_len = len(buf)
        self.ends_code = code
        self.first_time = times[0]
        self.last_time = times[-1]
        ids = set(tags)
        self.tag_set = _pack_ids(ids)
        # Entries per block: a fixed count per node (O(1) block lookup),
        # chosen so that an average block holds ~BLOCK_BYTES raw bytes.
        size = len(buf) + (count + 1) * ends.itemsize + 12 * count
        be = BLOCK_BYTES * count // size
        if be >= count:
            be, nb = count, 1
        else:
            nb = -(-count // (be or 1))
            be = -(-count // nb)  # even the blocks out
        if nb == 1:
            bodies = [self._body()]
        elif _LITTLE:
            # The block bodies straight from byte views of the tables.  A
            # block's ends are rebased (minus its first payload offset) with
            # one big-int subtraction: every lane is >= the subtrahend, so no
            # borrow crosses lanes (3x faster than a per-entry loop).
            el = ends.tolist()
            esize = ends.itemsize
            mv = memoryview(buf)
            eb = memoryview(ends).cast("B")
            tb = memoryview(tags).cast("B")
            mb = memoryview(times).cast("B")
            join = b"".join
            from_bytes = int.from_bytes
            bodies = []
            for a in range(0, count, be):
                c = a + be if a + be < count else count
                pa = el[a]
                pc = el[c]
                n = (c + 1 - a) * esize
                rel = eb[a * esize:(c + 1) * esize]
                if pa:
                    rel = (from_bytes(rel, "little")
                           - from_bytes(pa.to_bytes(esize, "little") * (c + 1 - a), "little")
                           ).to_bytes(n, "little")
                bodies.append(join((mv[pa:pc], bytes(-(pc - pa) & 7), rel, tb[4 * a:4 * c],
                                    mb[8 * a:8 * c])))
            del mv, eb, tb, mb, rel
        else:  # pragma: no cover - big-endian hosts
            el = ends.tolist()
            bodies = [_block_body(buf[el[a]:el[min(a + be, count)]],
                                  array(code, [e - el[a] for e in el[a:min(a + be, count) + 1]]),
                                  tags[a:a + be], times[a:a + be]) for a in range(0, count, be)]
        ctx = _CCTX_FAST if fast else _CCTX
        frames = [ctx.compress(body) for body in bodies]
        raw_len = sum(map(len, bodies))
        self.raw_len = raw_len
        if sum(map(len, frames)) <= raw_len - (raw_len >> _KEEP_SHIFT):
            # One exact-size object (python-zstandard over-allocates each
            # frame to the compress bound and merely shortens it).
            self.data = data = b"".join(frames)
            self.compressed = True
            self.block_entries = be
            self.block_offs = array("I" if len(data) < 1 << 32 else "Q",
                                    [0, *accumulate(map(len, frames))])
            self.blocks = blocks = [None] * nb
            if cache:
                # Tail readers are the common case: keep the newest blocks
                # decoded (the others cost one small decompression each).
                for k in range(max(0, nb - FRESH_CACHED_BLOCKS), nb):
                    c = count - k * be
                    blocks[k] = blk = _Block(self, k, bodies[k], be if be < c else c, code)
                    _lru_add(blk)
        else:
            self.data = data = bodies[0] if nb == 1 else _block_body(buf, ends, tags, times)
            self.raw_len = len(data)
            self.compressed = False
            self.block_entries = count
            self.block_offs = array("I" if len(data) < 1 << 32 else "Q", (0, len(data)))
            self.blocks = [_Block(None, 0, data, count, code)]  # permanent views
        # The commit point, after every allocation: a MemoryError above leaves
        # the node active and whole (Stream seals it again later).
        self.sealed = True
        self.buf = self.ends = self.tags = self.times = None
        self.mem = self._sealed_mem()
        return ids

    def _sealed_mem(self) -> int:
        mem = (sys.getsizeof(self) + sys.getsizeof(self.data) + sys.getsizeof(self.tag_set)
               + sys.getsizeof(self.block_offs) + sys.getsizeof(self.blocks))
        if not self.compressed:  # permanent views over the raw body
            mem += _VIEWS_OVERHEAD
        if self.deleted is not None:
            mem += sys.getsizeof(self.deleted)
        return mem

    def active_mem(self) -> int:
        """Bytes held by an active node (buffers include over-allocation). O(1)."""
        mem = (sys.getsizeof(self) + sys.getsizeof(self.buf) + sys.getsizeof(self.ends)
               + sys.getsizeof(self.tags) + sys.getsizeof(self.times))
        if self.deleted is not None:
            mem += sys.getsizeof(self.deleted)
        return mem

    def blob_parts(self) -> tuple[bytes, bytes]:
        """``(header, body)`` of :meth:`blob` without concatenating them: a
        snapshot writer can write both and skip one copy.  For a sealed node
        ``body`` is the stored object itself (no copy, immutable) and the
        header is O(blocks + distinct tags); for the active node the body is
        serialised now (raw, O(size))."""
        return Node.parts_of(self.capture_parts())

    def capture_parts(self) -> tuple:
        """What :meth:`blob_parts` needs, taken now and turned into bytes
        later (:meth:`parts_of`), from any thread: for a sealed node,
        references to its immutable parts, O(1) (eviction may drop the node
        meanwhile: the references stay valid); for the active node,
        :meth:`blob_parts` itself, O(size).  A snapshot's capture runs on
        the event loop, its writing in a worker thread."""
        if self.sealed:
            return (self.start, self.cap_end - self.start, self.compressed, self.ends_code,
                    self.buf_len, self.block_entries, self.first_time, self.last_time,
                    self.raw_len, self.block_offs, self.tag_set, self.data)
        body = self._body()
        times = self.times
        count = len(times)
        ids = _pack_ids(set(self.tags))
        return (_HDR.pack(_MAGIC, _VERSION, 0, self.ends.typecode.encode(), count, self.start,
                          len(self.buf))
                + _BLOCKS_HDR.pack(max(count, 1), 1)
                + _SUMMARY.pack(times[0] if count else 0, times[-1] if count else 0, len(body),
                                ids.typecode.encode(), len(ids))
                + struct.pack("<QQ", 0, len(body)) + _le_bytes(ids), body)

    @staticmethod
    def parts_of(captured: tuple) -> tuple[bytes, bytes]:
        """``(header, body)`` of a node from its :meth:`capture_parts`."""
        if len(captured) == 2:
            return captured
        (start, count, compressed, code, buf_len, be, first_time, last_time, raw_len, offs, ids,
         data) = captured
        return (_HDR.pack(_MAGIC, _VERSION, _FLAG_ZSTD if compressed else 0, code.encode(), count,
                          start, buf_len)
                + _BLOCKS_HDR.pack(be, len(offs) - 1)
                + _SUMMARY.pack(first_time, last_time, raw_len, ids.typecode.encode(), len(ids))
                + struct.pack(f"<{len(offs)}Q", *offs) + _le_bytes(ids), data)

    def blob(self) -> bytes:
        """Self-describing serialisation of this node, for snapshots
        (version 3, see "Snapshots" in the module docstring).

        A header: geometry, block geometry, the summary a sealed node keeps
        (first and last time, raw length, distinct tag ids) and the frame
        offsets; then the body.  Sealed node: the stored body as is (the
        concatenated zstd frames of its blocks, or its one raw body), no
        recompression.  Active node: its raw body as one block.  Tag ids in
        the blob refer to the owning stream's tag table.  Deleted bitmaps are
        not included (they change after sealing): save ``node.deleted``.
        Little-endian on every host.  O(size) (one copy).
        """
        header, body = self.blob_parts()
        return header + body

    sealed_bytes = blob

    @staticmethod
    def header_length(blob) -> int:
        """Length of the header that starts ``blob`` (bytes-like), which
        must hold the first :data:`BLOB_PREFIX` bytes of the blob (or all of
        it when shorter).  Raises ValueError when they do not describe a
        header.  O(1)."""
        size = len(blob)
        if size < _HDR.size:
            raise ValueError("node blob too short")
        magic, version = struct.unpack_from("<2sB", blob)
        if magic != _MAGIC or not 1 <= version <= _VERSION:
            raise ValueError("not a tstream node blob")
        if version == 1:
            return _HDR.size
        if version == 2:
            if size < _HDR.size + _BLOCKS_HDR.size:
                raise ValueError("node blob too short")
            return _HDR.size + _BLOCKS_HDR.size + 8 * (_BLOCKS_HDR.unpack_from(blob, _HDR.size)[1] + 1)
        if size < BLOB_PREFIX:
            raise ValueError("node blob too short")
        nb = _BLOCKS_HDR.unpack_from(blob, _HDR.size)[1]
        tcode, ntags = _SUMMARY.unpack_from(blob, _HDR.size + _BLOCKS_HDR.size)[3:]
        if tcode not in (b"H", b"I"):
            raise ValueError("bad tag-id typecode in node blob")
        return BLOB_PREFIX + 8 * (nb + 1) + (2 if tcode == b"H" else 4) * ntags

    @classmethod
    def from_blob(cls, blob, node_entries: int, check: bool = True) -> "Node":
        """Rebuild a node from :meth:`blob` (any version: see
        :meth:`from_parts`).  The body is copied once.  Raises ValueError
        on a damaged blob."""
        hlen = cls.header_length(blob)
        view = memoryview(blob)
        return cls.from_parts(view[:hlen], bytes(view[hlen:]), node_entries, check)

    @classmethod
    def from_parts(cls, header, body, node_entries: int, check: bool = True) -> "Node":
        """Rebuild a node from the ``(header, body)`` of :meth:`blob_parts`
        (``header`` exactly :meth:`header_length` bytes).  A full node comes
        back sealed and keeps ``body`` itself as its stored data when it is a
        ``bytes`` (else a copy); a partial one comes back as an active node.
        Raises ValueError on a damaged blob.

        Version 3, full node, ``check=False``: built from the header alone,
        without decompressing anything: O(blocks + distinct tags), with
        structural checks only (geometry, frame offsets, lengths).  For data
        whose integrity is known otherwise (a checksum verified).
        ``check=True``: every block is decompressed and checked, and the
        summary compared with what the blocks hold, O(size).  Versions 1
        and 2 carry no summary: always decompressed (a version-1 full
        compressed node is re-cut into blocks)."""
        if cls.header_length(header) != len(header):
            raise ValueError("node blob header has the wrong length")
        _, version, flags, code, count, start, buf_len = _HDR.unpack_from(header)
        if code not in (b"I", b"Q"):
            raise ValueError("bad ends typecode in node blob")
        code = code.decode()
        base = start - (start - 1) % node_entries
        cap_end = base + node_entries
        if start < 1 or count < 1 or start + count > cap_end:
            raise ValueError("node blob does not fit the node size")
        if type(body) is not bytes:
            body = bytes(body)
        stored = body
        summary = None
        if version == 1:
            be, nb, offs = count, 1, (0, len(stored))
        else:
            pos = _HDR.size
            be, nb = _BLOCKS_HDR.unpack_from(header, pos)
            pos += _BLOCKS_HDR.size
            if version >= 3:
                summary = _SUMMARY.unpack_from(header, pos)
                pos += _SUMMARY.size
            if be < 1 or nb != -(-count // be):
                raise ValueError("node blob has a bad block geometry")
            offs = struct.unpack_from(f"<{nb + 1}Q", header, pos)
            pos += 8 * (nb + 1)
            if summary is not None:
                ids = _le_array(summary[3].decode(), memoryview(header)[pos:])
                if not 1 <= len(ids) <= count or ids[0] < 1:
                    raise ValueError("node blob has a bad tag set")
                summary = (*summary[:3], ids)
        if offs[0] != 0 or offs[-1] != len(stored) or list(offs) != sorted(offs):
            raise ValueError("node blob has damaged block offsets")
        zst = bool(flags & _FLAG_ZSTD)
        full = start + count == cap_end
        if full and summary is not None and not check:
            return cls._from_summary(base, start, cap_end, code, buf_len, zst, be, offs, stored, summary)
        blocks = []
        raw_len = payload = 0
        view = memoryview(stored)
        for b in range(nb):
            frame = stored if nb == 1 else view[offs[b]:offs[b + 1]]
            try:
                raw = _DCTX.decompress(frame) if zst else bytes(frame)
            except zstandard.ZstdError as exc:
                raise ValueError(f"node blob does not decompress: {exc}") from None
            c = count - b * be
            blk = _Block(None, b, raw, be if be < c else c, code)
            last = blk.ends[len(blk.ends) - 1]
            if (blk.ends[0] != 0 or last + ((-last) & 7) + len(blk.ends) * blk.ends.itemsize
                    + 12 * len(blk.tags) != len(raw)):
                raise ValueError("node blob has a damaged offset table")
            blocks.append(blk)
            raw_len += len(raw)
            payload += last
        del view
        if payload != buf_len:
            raise ValueError("node blob has the wrong length")
        if full and (version != 1 or not zst):
            if not zst and nb != 1:
                raise ValueError("a raw node blob must be one block")
            node = cls(base, start, cap_end)
            node._set_sealed(stored, zst, be, offs, buf_len, raw_len, code, blocks[0].times[0],
                             blocks[-1].times[len(blocks[-1].times) - 1])
            ids: set[int] = set()
            for blk in blocks:
                ids.update(blk.tags)
            node.tag_set = _pack_ids(ids)
            # decoded blocks are not kept: the node is not in the LRU
            node.blocks = [None] * nb if zst else [blocks[0]]
            node.mem = node._sealed_mem()
            if summary is not None and summary != (node.first_time, node.last_time, raw_len,
                                                    node.tag_set):
                raise ValueError("node blob summary does not match its blocks")
            return node
        # An active node, or a version-1 compressed node to cut into blocks.
        payloads, ends, tags, times = _concat_tables(blocks, code)
        if summary is not None and summary != (times[0], times[-1], raw_len, _pack_ids(set(tags))):
            raise ValueError("node blob summary does not match its blocks")
        node = cls(base, start, cap_end)
        node.buf = bytearray(payloads)
        node.ends, node.tags, node.times = ends, tags, times
        if full:
            node._seal(cache=False)
        return node

    def _set_sealed(self, stored: bytes, zst: bool, be: int, offs, buf_len: int, raw_len: int,
                    code: str, first_time: int, last_time: int) -> None:
        """Make this fresh node a sealed one holding ``stored`` (loading a blob)."""
        self.buf = self.ends = self.tags = self.times = None
        self.sealed = True
        self.data = stored
        self.compressed = zst
        self.block_entries = be
        self.block_offs = array("I" if len(stored) < 1 << 32 else "Q", offs)
        self.buf_len = buf_len
        self.raw_len = raw_len
        self.ends_code = code
        self.first_time = first_time
        self.last_time = last_time

    @classmethod
    def _from_summary(cls, base: int, start: int, cap_end: int, code: str, buf_len: int, zst: bool,
                      be: int, offs, stored: bytes, summary) -> "Node":
        """A sealed node from a version-3 header and its stored body, not
        decompressed: structural checks only. O(blocks + distinct tags)."""
        first_time, last_time, raw_len, ids = summary
        count = cap_end - start
        nb = len(offs) - 1
        esize = 4 if code == "I" else 8
        tables = (count + nb) * esize + 12 * count  # every block's ends have a leading 0
        if first_time > last_time:
            raise ValueError("node blob summary has times going backwards")
        node = cls(base, start, cap_end)
        if zst:
            if not (buf_len + tables <= raw_len <= buf_len + tables + 7 * nb
                    and len(stored) <= raw_len - (raw_len >> _KEEP_SHIFT)):
                raise ValueError("node blob summary does not match its geometry")
            node.blocks = [None] * nb
        else:
            if nb != 1 or raw_len != len(stored):
                raise ValueError("a raw node blob must be one block")
            blk = _Block(None, 0, stored, count, code)  # permanent views; checks the size
            last = blk.ends[count]
            if (blk.ends[0] != 0 or last != buf_len
                    or last + ((-last) & 7) + (count + 1) * esize + 12 * count != raw_len
                    or blk.times[0] != first_time or blk.times[count - 1] != last_time):
                raise ValueError("node blob has a damaged offset table")
            node.blocks = [blk]
        node._set_sealed(stored, zst, be, offs, buf_len, raw_len, code, first_time, last_time)
        node.tag_set = ids
        node.mem = node._sealed_mem()
        return node

    # -- decoded access ---------------------------------------------------
    def _block(self, b: int) -> "_Block":
        """Decoded block ``b`` of a sealed node, through the shared LRU."""
        blk = self.blocks[b]
        if blk is None:
            return _decode_block(self, b)
        if blk.lru:
            _lru.move_to_end(blk)
        return blk

    def _block_list(self) -> list:
        """Every decoded block of a sealed node, without touching the LRU
        (blocks not cached are decompressed privately)."""
        out = []
        be = self.block_entries
        count = self.cap_end - self.start
        offs = self.block_offs
        for b, blk in enumerate(self.blocks):
            if blk is None:
                c = count - b * be
                blk = _Block(None, b, _DCTX.decompress(memoryview(self.data)[offs[b]:offs[b + 1]]),
                             be if be < c else c, self.ends_code)
            out.append(blk)
        return out

    def tables_at(self, p: int):
        """``(buf, ends, tags, times, i)``: the decoded tables holding
        position ``p`` of the node and ``p``'s index ``i`` in them (entry
        ``p``'s payload is ``buf[ends[i]:ends[i + 1]]``).  For a sealed node
        only the block of ``p`` is decoded (through the shared LRU); the
        active node's tables are its own.  O(1), plus one block
        decompression on a miss."""
        if not self.sealed:
            return self.buf, self.ends, self.tags, self.times, p
        be = self.block_entries
        b = p // be
        blk = self._block(b)
        return blk.buf, blk.ends, blk.tags, blk.times, p - b * be

    def tag_id_at(self, p: int) -> int:
        """Tag id of position ``p`` (decodes one block at most). O(1)."""
        _, _, tags, _, i = self.tables_at(p)
        return tags[i]

    def time_at(self, p: int) -> int:
        """Time of position ``p`` (decodes one block at most). O(1)."""
        _, _, _, times, i = self.tables_at(p)
        return times[i]

    def decoded(self):
        """``(buf, ends, tags, times)`` of the *whole* node (position ``p``
        is index ``p``).  A multi-block sealed node is assembled from all of
        its blocks into one LRU entry: O(node) on a miss, O(1) on a hit.
        Prefer :meth:`tables_at` to reach a few entries."""
        if not self.sealed:
            return self.buf, self.ends, self.tags, self.times
        if len(self.blocks) == 1:
            blk = self._block(0)
        else:
            blk = self.whole
            if blk is None:
                blk = _decode_whole(self)
            else:
                _lru.move_to_end(blk)
        return blk.buf, blk.ends, blk.tags, blk.times

    def __repr__(self) -> str:
        state = "sealed" if self.sealed else "active"
        return f"<Node {state} base={self.base} start={self.start} count={self.count}>"


# ---------------------------------------------------------------------------
# Stream
# ---------------------------------------------------------------------------

class Stream:
    """An RCP 11 stream.  See the module docstring for the layout.

    Public attributes: ``config``, ``node_entries``, ``first`` (first offset
    held; ``== next_offset`` when nothing is held), ``next_offset``,
    ``last_time`` (time of the newest write, ns), ``groups`` (a dict the
    command layer keeps its consumer groups in; the engine never reads it and
    does not snapshot it), ``limit_pending`` (set by the Keyspace holding the
    stream, see engine/keyspace.py); properties ``last``, ``length``, ``nodes``.
    ``first`` never points at a deleted entry while anything is held.
    """

    __slots__ = (
        "config", "node_entries", "first", "next_offset", "last_time", "groups",
        "_nodes", "_first_node_index", "_active",
        "_tag_id", "_tag_list", "_tag_refs", "_free_ids", "_tag_mem",
        "_deleted_held", "_sealed_mem", "_age_floor", "_fast_seal",
        "_subjects",  # JetStream subject index (engine/subjects.py), None until first needed
        "limit_pending",  # its keyspace's set of subject indexes with deletions to log, or None
    )

    def __init__(self, node_entries: int = 1000) -> None:
        if node_entries < 1:
            raise ValueError("node_entries must be >= 1")
        self.config = StreamConfig()
        self.groups: dict = {}  # consumer group name -> engine.groups.Group
        self.node_entries = int(node_entries)
        self.first = 1
        self.next_offset = 1
        self.last_time = 0
        self._nodes: list[Node] = []
        self._first_node_index = 0
        self._active: Node | None = None
        self._tag_id: dict[bytes, int] = {}
        self._tag_list: list = [None]     # id 0 reserved: ids are truthy
        self._tag_refs = array("I", (0,))  # nodes using each tag id
        self._free_ids: list[int] = []
        self._tag_mem = 0                  # getsizeof of the interned tags
        self._deleted_held = 0             # deleted offsets in [first, next_offset)
        self._sealed_mem = 0               # sum of sealed nodes' .mem
        self._age_floor = -(1 << 63)       # every held entry has time >= this
        self._fast_seal = False            # last node did not compress
        self._subjects = None              # JetStream subject index: built on first need
        self.limit_pending: set | None = None  # set by the Keyspace holding the stream

    # -- simple properties ---------------------------------------------------
    @property
    def last(self) -> int:
        """Last offset written (``next_offset - 1``; 0 for a new stream). O(1)."""
        return self.next_offset - 1

    @property
    def length(self) -> int:
        """Entries held: offsets ``first..last`` minus deleted ones. O(1)."""
        return self.next_offset - self.first - self._deleted_held

    @property
    def nodes(self) -> int:
        """Number of macro nodes currently allocated. O(1)."""
        return len(self._nodes)

    def node_list(self) -> list[Node]:
        """The macro nodes, oldest first (read-only use, e.g. snapshots). O(1)."""
        return self._nodes

    def memory_bytes(self) -> int:
        """Estimate of the memory this stream holds: sealed blobs, the active
        node's buffers (with over-allocation), deleted bitmaps, node objects,
        the tag table and the stream object.  Decoded copies in the shared
        LRU are not counted (see :func:`decoded_cache_bytes`).  O(1)."""
        mem = (sys.getsizeof(self) + sys.getsizeof(self._nodes) + sys.getsizeof(self.config)
               + self._sealed_mem + self._tag_mem
               + sys.getsizeof(self._tag_id) + sys.getsizeof(self._tag_list)
               + sys.getsizeof(self._tag_refs) + sys.getsizeof(self._free_ids))
        if self._active is not None:
            mem += self._active.active_mem()
        return mem

    # -- tags ------------------------------------------------------------------
    def _intern(self, tag: bytes) -> int:
        """Slow path of a tag lookup: give a new tag an id.  Its reference
        count stays 0 until a node holding it is sealed; until then the
        active node keeps it alive (see :meth:`_free_unused`)."""
        if type(tag) is not bytes:
            raise TypeError("tag must be bytes")
        if self._free_ids:
            tid = self._free_ids.pop()
            self._tag_list[tid] = tag
        else:
            tid = len(self._tag_list)
            self._tag_list.append(tag)
            self._tag_refs.append(0)
        self._tag_id[tag] = tid
        self._tag_mem += sys.getsizeof(tag)
        return tid

    def _free_unused(self, candidates) -> None:
        """Free the candidate tag ids no sealed node and not the active node
        uses any more."""
        refs = self._tag_refs
        tag_list = self._tag_list
        in_active = None
        for tid in candidates:
            if refs[tid] or tag_list[tid] is None:
                continue
            if in_active is None:
                in_active = set(self._active.tags) if self._active is not None else ()
            if tid in in_active:
                continue
            tag = tag_list[tid]
            del self._tag_id[tag]
            tag_list[tid] = None
            self._free_ids.append(tid)
            self._tag_mem -= sys.getsizeof(tag)

    def tag_count(self) -> int:
        """Distinct tags used by the nodes held. O(1)."""
        return len(self._tag_id)

    # -- writing -----------------------------------------------------------------
    def _open_node(self) -> Node:
        n = self.node_entries
        off = self.next_offset
        index = (off - 1) // n
        if not self._nodes:
            self._first_node_index = index
        node = Node(index * n + 1, off, (index + 1) * n + 1)
        self._nodes.append(node)
        self._active = node
        return node

    def _seal_active(self) -> None:
        """Seal the full active node.  A MemoryError leaves it active (and
        full): the next append seals it first (see _active_for_append)."""
        node = self._active
        ids = node._seal(self._fast_seal)
        self._active = None
        # Payloads that barely compress: seal the next node with the fast
        # level (the tables alone usually save ~10%, so "kept compressed" is
        # not the signal); a node that compresses well switches back.
        self._fast_seal = len(node.data) > 0.8 * node.raw_len
        self._sealed_mem += node.mem
        refs = self._tag_refs
        for tid in ids:
            refs[tid] += 1

    def _active_for_append(self) -> Node:
        """The node the next entry goes to: the active one, or a new one (after
        sealing a full active node whose sealing failed for lack of memory)."""
        node = self._active
        if node is not None and self.next_offset == node.cap_end:
            self._seal_active()  # MemoryError: nothing changed
            node = None
        return node if node is not None else self._open_node()

    def _seal_if_full(self, node: Node) -> None:
        """After an append: seal ``node`` when full.  The entries are stored
        whatever happens: a MemoryError only postpones the sealing."""
        if self.next_offset == node.cap_end:
            try:
                self._seal_active()
            except MemoryError:
                pass

    def _undo_append(self, lengths: tuple, next_offset: int, last_time: int) -> None:
        """Take back entries appended to the active node (a MemoryError midway):
        its tables back to ``lengths``, the stream's counters as they were,
        tags interned for them forgotten.  Shrinking allocates nothing."""
        node = self._active
        nbuf, nends, ntags, ntimes = lengths
        del node.buf[nbuf:]
        del node.ends[nends:]
        del node.tags[ntags:]
        del node.times[ntimes:]
        self.next_offset = next_offset
        self.last_time = last_time
        self._free_unused(list(self._tag_id.values()))

    @staticmethod
    def _widen_ends(node: Node, value: int) -> None:
        """A node's buffer outgrew 4 GiB: switch its offset table to 64 bit."""
        node.ends = array("Q", node.ends)
        node.ends.append(value)

    def append(self, tag: bytes, data: bytes, now_ns: int) -> int:
        """Append one entry; returns its offset.  O(1) amortised (sealing a
        full node is O(node) once per ``node_entries`` appends), plus the
        limits' evictions when ``config`` sets any.  ``tag`` must be bytes,
        ``data`` any bytes-like."""
        node = self._active
        if node is None or self.next_offset == node.cap_end:
            node = self._active_for_append()
        tid = self._tag_id.get(tag)
        if tid is None:
            memoryview(data).release()  # reject bad data before interning
            tid = self._intern(tag)
        buf = node.buf
        count = len(node.times)
        nbuf = len(buf)
        last_time = self.last_time
        try:
            buf += data
            try:
                node.ends.append(len(buf))
            except OverflowError:
                self._widen_ends(node, len(buf))
            node.tags.append(tid)
            if now_ns > last_time:
                self.last_time = now_ns
            else:
                now_ns = last_time  # keep times non-decreasing
            node.times.append(now_ns)
        except MemoryError:  # all or nothing: the entry is not stored
            self._undo_append((nbuf, count + 1, count, count), self.next_offset, last_time)
            raise
        offset = self.next_offset
        self.next_offset = offset + 1
        if offset + 1 == node.cap_end:
            self._seal_if_full(node)
        # --- JetStream subject index hook (engine/subjects.py): once built only ---
        if self._subjects is not None:
            self._subjects.appended(tag, offset)
        cfg = self.config
        if cfg.max_len or cfg.max_age_ms or cfg.max_msgs_per_subject:
            self.enforce_limits(now_ns)
        return offset

    def append_many(self, flat: list, now_ns: int, start: int = 0) -> int:
        """Append the pairs ``flat[start:] = [tag, data, tag, data, ...]``, all
        with the same time; returns the first offset (``next_offset`` if there
        is no pair).  All or nothing: bad input (odd length, a tag that is not
        bytes, data that is not bytes-like) raises before anything is stored.
        O(pairs), with per-node bulk operations; limits are enforced once,
        after the whole batch."""
        if (len(flat) - start) & 1:
            raise ValueError("append_many needs tag/data pairs")
        return self.append_columns(flat[start::2], flat[start + 1::2], now_ns)

    def append_columns(self, tags: list, datas: list, now_ns: int) -> int:
        """:meth:`append_many` of the pairs ``zip(tags, datas)`` (two lists of
        the same length), for callers that hold the columns already."""
        npairs = len(tags)
        if len(datas) != npairs:
            raise ValueError("append_columns needs as many tags as entries")
        first_offset = self.next_offset
        if npairs <= 0:
            return first_offset
        joined = b"".join(datas)  # validates every payload before any change
        try:
            get = self._tag_id.get
            tids = list(map(get, tags))
            if not all(tids):  # id 0 is reserved, so a falsy id is a miss (None):
                # intern, looking each tag up again (a new tag may repeat in the batch)
                tids = [get(tag) or self._intern(tag) for tag in tags]
        except TypeError:
            self._free_unused(list(self._tag_id.values()))  # forget new tags
            raise
        last_time = self.last_time
        try:
            node = self._active_for_append()  # MemoryError: nothing changed yet
        except MemoryError:
            self._free_unused(list(self._tag_id.values()))  # forget new tags
            raise
        # All or nothing under MemoryError, as long as no node was sealed by
        # this append (a batch that crosses a node boundary and then runs out
        # of memory keeps what went into the sealed node).
        lengths = (len(node.buf), len(node.ends), len(node.tags), len(node.times))
        if now_ns > last_time:
            self.last_time = now_ns
        else:
            now_ns = last_time
        jview = memoryview(joined)
        try:
            self._append_chunks(tags, datas, tids, jview, now_ns)
        except MemoryError:
            if self._active is node:
                self._undo_append(lengths, first_offset, last_time)
            elif self._active is not None:  # a node opened after a seal: back to empty
                self._undo_append((0, 1, 0, 0), self.next_offset, self.last_time)
            raise
        finally:
            jview.release()
        # --- JetStream subject index hook (engine/subjects.py): once built only ---
        if self._subjects is not None:
            self._subjects.appended_many(tags, first_offset)
        cfg = self.config
        if cfg.max_len or cfg.max_age_ms or cfg.max_msgs_per_subject:
            self.enforce_limits(now_ns)
        return first_offset

    def _append_chunks(self, tags: list, datas: list, tids: list, jview: memoryview, now_ns: int) -> None:
        """The storing part of append_columns: each node's share of the pairs."""
        npairs = len(tags)
        i = 0          # index of the next pair
        jpos = 0       # its payload's position in ``joined``
        while i < npairs:
            node = self._active
            if node is None:
                node = self._open_node()
            k = min(npairs - i, node.cap_end - self.next_offset)
            whole = k == npairs  # the usual case: no slicing
            buf = node.buf
            lens = list(map(len, datas if whole else datas[i:i + k]))
            chunk_len = sum(lens)
            ends = node.ends
            if ends.typecode == "I" and len(buf) + chunk_len > 0xFFFFFFFF:
                node.ends = ends = array("Q", ends)  # the buffer outgrows 4 GiB
            lens[0] += len(buf)  # the running sum then gives the end positions
            ends.extend(accumulate(lens))
            buf += jview[jpos:jpos + chunk_len]
            node.tags.fromlist(tids if whole else tids[i:i + k])
            node.times.extend(array("q", (now_ns,)) * k)
            jpos += chunk_len
            i += k
            self.next_offset += k
            if self.next_offset == node.cap_end:
                if i < npairs:
                    self._seal_active()  # more to store: the next node needs this one sealed
                else:
                    self._seal_if_full(node)

    # -- reading -------------------------------------------------------------------
    def read(self, offset: int, count: int) -> list:
        """Up to ``count`` elements for offsets ``offset, offset+1, ...``:
        ``[offset, tag, data]`` for a held entry, ``None`` for a missing one
        (evicted or deleted).  Stops early at the end of the log.  ``offset``
        must be >= 1 (callers resolve ``-``/``$``).  O(count) plus at most one
        decompression per sealed block touched."""
        if offset < 1:
            raise ValueError("offset must be >= 1")
        if count < 0:
            raise ValueError("count must be >= 0")
        end = offset + count
        if end > self.next_offset:
            end = self.next_offset
        if offset >= end:
            return []
        first = self.first
        if offset < first:
            if end <= first:
                return [None] * (end - offset)
            out = [None] * (first - offset)
            offset = first
        else:
            out = []
        append = out.append
        n = self.node_entries
        nodes = self._nodes
        base_index = self._first_node_index
        tag_list = self._tag_list
        while offset < end:
            node = nodes[(offset - 1) // n - base_index]
            nstart = node.start
            stop = node.cap_end
            if node.sealed:
                # Only the block holding ``offset`` (Node.tables_at, inlined).
                be = node.block_entries
                b = (offset - nstart) // be
                blk = node.blocks[b]
                if blk is None:
                    blk = _decode_block(node, b)
                elif blk.lru:
                    _lru.move_to_end(blk)
                buf = blk.buf
                ends = blk.ends
                tags = blk.tags
                bstart = nstart + b * be  # offset of the block's first entry
                if bstart + be < stop:
                    stop = bstart + be
                sealed = True
            else:
                buf = node.buf
                ends = node.ends
                tags = node.tags
                bstart = nstart
                sealed = False
            if stop > end:
                stop = end
            i = offset - bstart
            j = stop - bstart
            bits = node.deleted
            if bits is None and j - i <= 8:
                # A few entries (a consumer keeping up): indexing costs less
                # than slicing the tables.
                for o in range(offset, stop):
                    data = buf[ends[i]:ends[i + 1]]
                    append([o, tag_list[tags[i]], data if sealed else bytes(data)])
                    i += 1
            elif bits is None:
                # Slice the tables once; zip + comprehension beats per-entry
                # indexing by ~25-40% from ~10 entries on.
                e = ends[i:j + 1].tolist()
                rows = zip(range(offset, stop), tags[i:j].tolist(), e, islice(e, 1, None))
                if sealed:
                    out += [[o, tag_list[t], buf[a:z]] for o, t, a, z in rows]
                else:
                    # The active buffer is a bytearray: copy slices out as
                    # bytes through a view, released before any append can
                    # resize the buffer.
                    with memoryview(buf) as mv:
                        out += [[o, tag_list[t], mv[a:z].tobytes()] for o, t, a, z in rows]
            else:
                shift = bstart - nstart  # node position = table index + shift
                for i in range(i, j):
                    p = i + shift
                    if bits[p >> 3] >> (p & 7) & 1:
                        append(None)
                    else:
                        data = buf[ends[i]:ends[i + 1]]
                        append([bstart + i, tag_list[tags[i]], data if sealed else bytes(data)])
            offset = stop
        return out

    def read_held(self, offset: int, count: int) -> tuple[list, int]:
        """Up to ``count`` held entries from ``offset`` on, missing ones
        skipped, as ``[offset, tag, data]``; and where a next call should go
        on: after the last entry returned when ``count`` were found, else
        ``next_offset`` (the log's end, trailing missing offsets included).
        ``offset`` must be >= 1.  O(count + missing offsets skipped), plus at
        most one decompression per sealed block touched."""
        out: list = []
        while offset < self.next_offset:
            rows = self.read(offset, count - len(out))
            offset += len(rows)
            if None in rows:
                rows = [row for row in rows if row is not None]
            out += rows
            if len(out) == count:
                return out, out[-1][0] + 1
        return out, self.next_offset

    def _locate(self, offset: int):
        """(node, position) of a held offset, else None. O(1)."""
        if offset < self.first or offset >= self.next_offset:
            return None
        node = self._nodes[(offset - 1) // self.node_entries - self._first_node_index]
        p = offset - node.start
        bits = node.deleted
        if bits is not None and bits[p >> 3] >> (p & 7) & 1:
            return None
        return node, p

    def get(self, offset: int) -> Entry | None:
        """The entry at ``offset``, or None if missing or not written. O(1)
        (plus one block decompression on a cold sealed block)."""
        loc = self._locate(offset)
        if loc is None:
            return None
        node, p = loc
        buf, ends, tags, times, i = node.tables_at(p)
        return Entry(offset, self._tag_list[tags[i]], bytes(buf[ends[i]:ends[i + 1]]), times[i])

    def time_of(self, offset: int) -> int | None:
        """Write time (ns) of a held entry, else None. O(1)."""
        loc = self._locate(offset)
        if loc is None:
            return None
        node, p = loc
        return node.time_at(p)

    def is_held(self, offset: int) -> bool:
        """True if ``offset`` holds an entry (neither evicted nor deleted). O(1)."""
        return self._locate(offset) is not None

    def iter_from(self, offset: int) -> Iterator[Entry]:
        """Held entries with offset >= ``offset``, ascending, missing ones
        skipped.  Lazy: O(1) per entry yielded plus one decompression per
        sealed block.  Writes, evictions and deletions made while the
        iterator is suspended are honoured as it reaches them."""
        n = self.node_entries
        while True:
            if offset < self.first:
                offset = self.first
            if offset >= self.next_offset:
                return
            node = self._nodes[(offset - 1) // n - self._first_node_index]
            p = offset - node.start
            buf, ends, tags, times, i = node.tables_at(p)
            tag_list = self._tag_list
            # Up to the end of these tables (a block, or the active node's
            # tables as they grow: a widened offset table stops growing and
            # is fetched again).  A dropped node gets cap_end 0, which ends
            # this loop.
            while (i + 1 < len(ends) and offset < node.cap_end and offset < self.next_offset
                   and offset >= self.first):
                bits = node.deleted
                if bits is None or not bits[p >> 3] >> (p & 7) & 1:
                    yield Entry(offset, tag_list[tags[i]], bytes(buf[ends[i]:ends[i + 1]]),
                                times[i])
                offset += 1
                p += 1
                i += 1

    def offset_at_time(self, t_ns: int) -> int:
        """First held offset whose time is >= ``t_ns`` (``next_offset`` if
        none; may be a deleted entry's offset).  O(log nodes + log N) plus at
        most O(log blocks) block decompressions."""
        nodes = self._nodes
        if not nodes or self.first >= self.next_offset:
            return self.next_offset
        lo, hi = 0, len(nodes)
        while lo < hi:  # first node whose newest time is >= t_ns
            mid = (lo + hi) // 2
            node = nodes[mid]
            last_time = node.last_time if node.sealed else node.times[-1]
            if last_time < t_ns:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(nodes):
            return self.next_offset
        node = nodes[lo]
        p0 = max(self.first - node.start, 0)
        if not node.sealed:
            return node.start + bisect_left(node.times, t_ns, p0, node.count)
        be = node.block_entries
        b, hi = p0 // be, len(node.blocks) - 1
        lo = b
        while lo < hi:  # first block whose newest time is >= t_ns (the last one is)
            mid = (lo + hi) // 2
            times = node._block(mid).times
            if times[len(times) - 1] < t_ns:
                lo = mid + 1
            else:
                hi = mid
        times = node._block(lo).times
        i0 = p0 - lo * be if lo == b else 0
        return node.start + lo * be + bisect_left(times, t_ns, i0, len(times))

    # -- deletion (missing entries in the middle) ---------------------------
    def delete(self, offset: int) -> bool:
        """Make a held entry missing; True if it was held.  O(1) (moving
        ``first`` past deleted entries is amortised O(1))."""
        loc = self._locate(offset)
        if loc is None:
            return False
        node, p = loc
        # --- JetStream subject index hook (engine/subjects.py): once built only ---
        if self._subjects is not None:
            self._subjects.deleted(offset)
        bits = node.deleted
        if bits is None:
            bits = node.deleted = bytearray((node.cap_end - node.start + 7) // 8)
            if node.sealed:
                grown = sys.getsizeof(bits)
                node.mem += grown
                self._sealed_mem += grown
        bits[p >> 3] |= 1 << (p & 7)
        node.ndel += 1
        self._deleted_held += 1
        if offset == self.first:
            self._skip_deleted()
            self._drop_evicted_nodes()
        return True

    # -- eviction ---------------------------------------------------------------
    def _deleted_between(self, a: int, b: int) -> int:
        """Deleted offsets in [a, b), a >= first. O(nodes in range)."""
        if not self._deleted_held:
            return 0
        n = self.node_entries
        nodes = self._nodes
        total = 0
        off = a
        while off < b:
            node = nodes[(off - 1) // n - self._first_node_index]
            stop = node.cap_end if node.cap_end < b else b
            if node.ndel:
                total += _popcount_range(node.deleted, off - node.start, stop - node.start)
            off = stop
        return total

    def _skip_deleted(self) -> None:
        """Move ``first`` over deleted entries (they become evicted)."""
        if not self._deleted_held:
            return
        n = self.node_entries
        nodes = self._nodes
        first = self.first
        nxt = self.next_offset
        while first < nxt:
            node = nodes[(first - 1) // n - self._first_node_index]
            bits = node.deleted
            if bits is None:
                break
            p = first - node.start
            if not bits[p >> 3] >> (p & 7) & 1:
                break
            first += 1
            self._deleted_held -= 1
        self.first = first

    def _drop_node(self, node: Node) -> list[int]:
        """Release one node; returns the tag ids it may have left unused."""
        if node.sealed:
            self._sealed_mem -= node.mem
            refs = self._tag_refs
            ids = []
            for tid in node.tag_set:
                n = refs[tid] - 1
                refs[tid] = n
                if not n:
                    ids.append(tid)
            _lru_forget(node)
        else:
            ids = list(set(node.tags))  # refs 0: only the active node used them
            self._active = None
        # Break references to large buffers even if someone still holds the
        # node; cap_end 0 tells suspended iterators that it is gone.
        node.buf = node.ends = node.tags = node.times = node.data = None
        node.blocks = node.whole = None
        node.cap_end = 0
        return ids

    def _drop_evicted_nodes(self) -> None:
        """Release every node whose offsets are all below ``first``."""
        nodes = self._nodes
        first = self.first
        k = 0
        while k < len(nodes) and nodes[k].sealed and nodes[k].cap_end <= first:
            k += 1
        if k < len(nodes) and not nodes[k].sealed and first >= self.next_offset:
            k += 1  # everything evicted: the active node goes too
        if k:
            # --- JetStream subject index hook (engine/subjects.py): once built only ---
            if self._subjects is not None:
                self._subjects.dropped(nodes[:k])
            released: list[int] = []
            for node in nodes[:k]:
                released += self._drop_node(node)
            del nodes[:k]
            self._first_node_index += k
            if released:
                self._free_unused(released)

    def _evict_to(self, new_first: int) -> int:
        """Make ``new_first`` the first offset held (no-op if not above
        ``first``); returns held entries evicted."""
        first = self.first
        if new_first > self.next_offset:
            new_first = self.next_offset
        if new_first <= first:
            return 0
        deleted = self._deleted_between(first, new_first)
        self._deleted_held -= deleted
        self.first = new_first
        self._skip_deleted()
        self._drop_evicted_nodes()
        return new_first - first - deleted

    def evict_through(self, offset: int) -> int:
        """Evict every entry with offset <= ``offset`` (clamped to ``last``);
        returns the entries evicted that were held.  O(nodes released)."""
        return self._evict_to(offset + 1)

    def evict_keep(self, n: int) -> int:
        """Keep only the ``n`` newest offsets (``first = max(first,
        next_offset - n)``); returns entries evicted.  O(nodes released)."""
        if n < 0:
            raise ValueError("n must be >= 0")
        return self._evict_to(self.next_offset - n)

    def evict_older_than(self, cutoff_ns: int) -> int:
        """Evict every entry whose time is < ``cutoff_ns``; returns entries
        evicted.  O(1) when nothing is old enough (remembered floor), else
        O(log nodes + log N + nodes released)."""
        if cutoff_ns <= self._age_floor:
            return 0
        target = self.offset_at_time(cutoff_ns)
        evicted = self._evict_to(target)
        if self.first < self.next_offset:
            node = self._nodes[(self.first - 1) // self.node_entries - self._first_node_index]
            self._age_floor = node.time_at(self.first - node.start)
        else:
            # Nothing held: later entries get times >= last_time (not >= the
            # cutoff, which may be ahead of the clock writers pass in).
            self._age_floor = self.last_time
        return evicted

    def enforce_limits(self, now_ns: int) -> int:
        """Apply ``config.max_len``, ``config.max_age_ms`` then
        ``config.max_msgs_per_subject``; returns entries evicted or deleted.
        Called by append/append_many.  O(1) when nothing is due."""
        cfg = self.config
        evicted = 0
        if cfg.max_len > 0:
            evicted += self._evict_to(self.next_offset - cfg.max_len)
        if cfg.max_age_ms > 0:
            evicted += self.evict_older_than(now_ns - cfg.max_age_ms * 1_000_000)
        if cfg.max_msgs_per_subject > 0:
            # --- JetStream per-subject limit (engine/subjects.py): builds the
            # subject index on first need; appends keep the limit after that. ---
            evicted += enforce_subject_limit(self)
        return evicted

    def clear_cache(self) -> None:
        """Drop this stream's blocks from the shared decoded LRU (call when
        the stream is deleted, so that its decoded blocks do not linger).
        O(cache size)."""
        nodes = self._nodes
        n = self.node_entries
        for blk in list(_lru):
            if not blk.lru:
                continue  # already dropped with an earlier block of its node
            node = blk.node
            k = (node.base - 1) // n - self._first_node_index
            if 0 <= k < len(nodes) and nodes[k] is node:
                _lru_forget(node)

    # -- snapshots --------------------------------------------------------------
    def export_state(self) -> dict:
        """Everything needed to rebuild the stream, as plain values:
        ``node_entries``, ``config`` (dict), ``first``, ``next_offset``,
        ``last_time``, ``tags`` (list indexed by tag id, None for free ids,
        index 0 unused), ``tag_refs`` (the reference count of every tag id:
        sealed nodes using it, u32 little-endian bytes) and ``nodes``: a
        list of ``(blob, deleted)`` pairs where ``deleted`` is the node's
        bitmap as bytes or None.  O(size)."""
        return {
            "node_entries": self.node_entries,
            "config": asdict(self.config),
            "first": self.first,
            "next_offset": self.next_offset,
            "last_time": self.last_time,
            "tags": list(self._tag_list),
            "tag_refs": _le_bytes(self._tag_refs),
            "nodes": [(node.blob(), None if node.deleted is None else bytes(node.deleted))
                      for node in self._nodes],
        }

    @classmethod
    def from_state(cls, state: dict, check: bool = True) -> "Stream":
        """Rebuild a stream from :meth:`export_state`; raises ValueError on
        inconsistent input.  An item of ``nodes`` may also hold a
        :class:`Node` already rebuilt (e.g. by :meth:`Node.from_parts`)
        instead of a blob.  ``tag_refs`` is optional (snapshots of earlier
        versions lack it).

        ``check=True``: blobs are rebuilt with every block decompressed and
        checked, and the tag reference counts are recounted from the nodes'
        tag sets (and compared with ``tag_refs`` when given): O(size).
        ``check=False``, for input whose integrity is known (a verified
        checksum): version-3 blobs are not decompressed and ``tag_refs`` is
        taken as given, with cheap consistency checks only (its length, zero
        for free ids, its sum against the nodes' tag-set sizes, each tag
        set's smallest and largest id): O(nodes + blocks + tags)."""
        s = cls(state["node_entries"])
        n = s.node_entries
        s.config = StreamConfig(**state["config"])
        tags = list(state["tags"])
        if not tags or tags[0] is not None:
            raise ValueError("tag table must start with None")
        ntags = len(tags)
        s._tag_list = tags
        for tid, tag in enumerate(tags):
            if tid and tag is not None:
                if type(tag) is not bytes or tag in s._tag_id:
                    raise ValueError("bad tag table")
                s._tag_id[tag] = tid
                s._tag_mem += sys.getsizeof(tag)
        s._free_ids = [t for t in range(ntags - 1, 0, -1) if tags[t] is None]
        given = state.get("tag_refs")
        if given is not None:
            given = _le_array("I", given) if isinstance(given, (bytes, bytearray, memoryview)) \
                else array("I", given)
            if len(given) != ntags:
                raise ValueError("tag reference counts do not match the tag table")
        recount = check or given is None
        refs = s._tag_refs = array("I", bytes(4 * ntags)) if recount else given
        ids_total = 0  # sum of the sealed nodes' tag-set sizes
        s.first = state["first"]
        s.next_offset = state["next_offset"]
        s.last_time = state["last_time"]
        items = state["nodes"]
        prev_time = -(1 << 63)
        for i, (item, deleted) in enumerate(items):
            node = item if isinstance(item, Node) else Node.from_blob(item, n, check)
            if i == 0:
                s._first_node_index = (node.start - 1) // n
            elif node.base != (s._first_node_index + i) * n + 1 or node.start != node.base:
                raise ValueError("node blobs are not consecutive")
            if node.base != (s._first_node_index + i) * n + 1 or node.cap_end != node.base + n:
                raise ValueError("node does not fit the node size")
            if node.sealed:
                ids = node.tag_set
                if recount:
                    for tid in ids:
                        if tid >= ntags or tags[tid] is None:
                            raise ValueError("node uses an unknown tag id")
                        refs[tid] += 1
                else:
                    # sorted ids: the ends bound them all
                    if (not ids or ids[0] < 1 or ids[-1] >= ntags or tags[ids[0]] is None
                            or tags[ids[-1]] is None):
                        raise ValueError("node uses an unknown tag id")
                    ids_total += len(ids)
                times = (node.first_time, node.last_time)
            else:
                if i != len(items) - 1:
                    raise ValueError("only the last node may be partial")
                for tid in set(node.tags):
                    if tid >= ntags or tags[tid] is None:
                        raise ValueError("node uses an unknown tag id")
                s._active = node
                times = (node.times[0], node.times[-1])
            if times[0] < prev_time:
                raise ValueError("node times go backwards")
            prev_time = times[1]
            if deleted is not None:
                if len(deleted) != (node.cap_end - node.start + 7) // 8:
                    raise ValueError("deleted bitmap has the wrong size")
                node.deleted = bytearray(deleted)
                node.ndel = _popcount_range(node.deleted, 0, node.cap_end - node.start)
                if node.sealed:
                    node.mem = node._sealed_mem()
            if node.sealed:
                s._sealed_mem += node.mem
            s._nodes.append(node)
        if given is not None:
            if recount:
                if refs != given:
                    raise ValueError("tag reference counts do not match the nodes")
            elif refs[0] or sum(refs) != ids_total or any(refs[t] for t in s._free_ids):
                raise ValueError("tag reference counts do not match the nodes")
        if prev_time > s.last_time:
            raise ValueError("last_time is older than the newest entry")
        if s._nodes:
            last = s._nodes[-1]
            end = last.cap_end if last.sealed else last.start + last.count
            if end != s.next_offset or not s._nodes[0].start <= s.first <= s.next_offset:
                raise ValueError("offsets do not match the nodes")
        elif s.first != s.next_offset or s.first < 1:
            raise ValueError("offsets do not match the nodes")
        held = 0
        for node in s._nodes:
            if node.ndel:
                lo = max(s.first, node.start)
                held += _popcount_range(node.deleted, lo - node.start, node.count)
        s._deleted_held = held
        s._skip_deleted()
        s._drop_evicted_nodes()
        s._free_unused([t for t in range(1, ntags) if tags[t] is not None])
        return s

    # -- invariants ----------------------------------------------------------
    def _check(self) -> None:
        """Assert every structural invariant (tests call it after each op).
        Decodes sealed nodes privately: the shared LRU is not disturbed."""
        n = self.node_entries
        nodes = self._nodes
        assert 1 <= self.first <= self.next_offset
        assert 0 <= self._deleted_held <= self.next_offset - self.first
        refs = [0] * len(self._tag_list)
        used: set[int] = set()
        sealed_mem = 0
        prev_time = -(1 << 63)
        deleted_held = 0
        first_time = None
        if not nodes:
            assert self.first == self.next_offset, "no node but entries held"
        if not nodes or nodes[-1].sealed:
            assert self._active is None
        for i, node in enumerate(nodes):
            index = self._first_node_index + i
            assert node.base == index * n + 1, "node not aligned"
            assert node.cap_end == node.base + n
            assert node.base <= node.start < node.cap_end
            if i:
                assert node.start == node.base, "only the oldest node may start late"
            last = i == len(nodes) - 1
            if node.sealed:
                assert node is not self._active and isinstance(node.data, bytes)
                assert node.buf is None and node.ends is None and node.tags is None
                count = node.cap_end - node.start
                be, blocks, offs = node.block_entries, node.blocks, node.block_offs
                nb = len(blocks)
                assert 1 <= be <= count and nb == -(-count // be) and len(offs) == nb + 1
                assert offs[0] == 0 and offs[nb] == len(node.data)
                assert all(offs[k] <= offs[k + 1] for k in range(nb))
                if not node.compressed:
                    assert nb == 1 and node.whole is None
                    blk = blocks[0]
                    assert not blk.lru and blk.node is None and blk.buf is node.data, \
                        "raw node lost its views"
                esize = 4 if node.ends_code == "I" else 8
                raw_len = payload = 0
                for b in range(nb):
                    frame = node.data[offs[b]:offs[b + 1]]
                    raw = _DCTX.decompress(frame) if node.compressed else frame
                    cnt = min(be, count - b * be)
                    probe = _Block(None, b, raw, cnt, node.ends_code)
                    pend = probe.ends[cnt]
                    assert probe.ends[0] == 0
                    assert len(raw) == pend + ((-pend) & 7) + (cnt + 1) * esize + 12 * cnt
                    raw_len += len(raw)
                    payload += pend
                    blk = blocks[b]
                    if node.compressed and blk is not None:
                        assert blk.lru and blk in _lru and blk.node is node and blk.index == b, \
                            "decoded outside the LRU"
                        assert blk.buf == raw and blk.nbytes == len(raw) + _BLOCK_OVERHEAD
                assert raw_len == node.raw_len and payload == node.buf_len
                if node.compressed:
                    assert len(node.data) <= raw_len - (raw_len >> _KEEP_SHIFT), \
                        "useless compression kept"
                buf, ends, tags, times = _concat_tables(node._block_list(), node.ends_code)
                whole = node.whole
                if whole is not None:
                    assert node.compressed and nb > 1 and whole.lru and whole in _lru
                    assert whole.node is node and whole.index == -1
                    assert (whole.buf == buf and list(whole.ends) == list(ends)
                            and list(whole.tags) == list(tags) and list(whole.times) == list(times))
                assert node.first_time == times[0] and node.last_time == times[-1]
                ids = set(tags)
                assert node.tag_set.tolist() == sorted(ids), "tag set not sorted or wrong"
                for tid in ids:
                    refs[tid] += 1
                assert node.mem == node._sealed_mem()
                sealed_mem += node.mem
            else:
                assert last and node is self._active, "active node must be the last"
                assert node.data is None and node.blocks is None and isinstance(node.buf, bytearray)
                buf, ends, tags, times = node.buf, node.ends, node.tags, node.times
                count = len(times)
                assert count >= 1
                assert node.start + count < node.cap_end, "full node left unsealed"
                assert len(buf) == ends[count]
                ids = set(tags)
            used |= ids
            assert len(ends) == count + 1 and len(tags) == count and ends[0] == 0
            assert all(ends[j] <= ends[j + 1] for j in range(count)) and ends[count] <= len(buf)
            for tid in ids:
                assert 0 < tid < len(self._tag_list) and self._tag_list[tid] is not None
            assert prev_time <= times[0], "times go backwards between nodes"
            assert all(times[j] <= times[j + 1] for j in range(count - 1)), "times go backwards"
            prev_time = times[count - 1]
            assert node.start + count > self.first, "a node with no offset >= first was kept"
            if node.deleted is None:
                assert node.ndel == 0
            else:
                span = node.cap_end - node.start
                assert len(node.deleted) == (span + 7) // 8
                assert node.ndel == _popcount_range(node.deleted, 0, span)
                assert _popcount_range(node.deleted, count, span) == 0, "unwritten slot deleted"
                lo = max(self.first, node.start)
                deleted_held += _popcount_range(node.deleted, lo - node.start, count)
            if i == 0 and self.first < self.next_offset:
                first_time = times[self.first - node.start]
            if last:
                assert node.start + count == self.next_offset
        if nodes:
            assert nodes[0].start <= self.first
        assert self.last_time >= prev_time
        assert deleted_held == self._deleted_held
        assert self.length >= 0
        if self.length:
            assert self.is_held(self.first), "first must not rest on a deleted entry"
            assert first_time >= self._age_floor
        assert sealed_mem == self._sealed_mem
        # tag table: exact counts, nothing leaked, free list exact
        assert self._tag_list[0] is None and refs[0] == 0
        assert len(self._tag_refs) == len(self._tag_list)
        assert list(self._tag_refs) == refs, "tag reference counts"
        live = {t for t in range(1, len(self._tag_list)) if self._tag_list[t] is not None}
        assert live == used, "tag table differs from the tags the nodes use"
        assert sorted(self._free_ids) == sorted(set(range(1, len(self._tag_list))) - live)
        assert len(self._tag_id) == len(live)
        for tag, tid in self._tag_id.items():
            assert self._tag_list[tid] == tag
        assert self._tag_mem == sum(sys.getsizeof(t) for t in self._tag_id)
        # the shared LRU
        assert len(_lru) <= DECODED_CACHE_BLOCKS
        assert _lru_bytes == sum(x.nbytes for x in _lru)
        for x in _lru:
            owner = x.node
            assert x.lru and owner.sealed and owner.compressed
            assert (owner.whole if x.index < 0 else owner.blocks[x.index]) is x

    def __repr__(self) -> str:
        return (f"<Stream first={self.first} next={self.next_offset} "
                f"length={self.length} nodes={self.nodes}>")
