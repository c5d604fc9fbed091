"""Blocks of a sealed node, and the decoded-block cache.

Sealing
=======
When the active node fills up it is *sealed* (engine/node.py): its entries
are cut into *blocks* of ``block_entries`` consecutive entries, each block is
serialised into its own *body* and compressed with zstandard as its own frame;
the frames are concatenated into the node's ``data``::

    body  = | payload buffer | pad to 8 | ends (count+1) | tag ids (count) | times (count) |

    data  = | zstd(body 0) | zstd(body 1) | ... | zstd(body nb-1) |
    block_offs  0 ------------^ ------------^ ...                  ^ len(data)

A block is self-contained: its ``ends`` are relative to its own payloads (a
leading 0, so no branch is needed for the first entry).  The block of node
position ``p`` is ``p // block_entries``: arithmetic, no search.  The block
size is fixed per node and chosen when sealing from the node's mean entry
size, so that a block's raw body is about ``BLOCK_BYTES`` (at least one entry
per block, evened out over the node).  Each node records its own
``block_entries``: changing ``BLOCK_BYTES`` never invalidates existing nodes
or snapshots.  When all the frames together do not save 1/64 of the raw size
the node is stored raw, as one body (one block), whose views are kept for
good.  Why blocks, and what the block size costs: bench/ENGINE-NOTES.md.

The decoded-block cache
=======================
Reading a compressed block decompresses it into a small :class:`_Block`
(memoryviews over the decompressed body) kept in the node's ``blocks`` list
and in an LRU bounded by blocks and bytes (each block's body plus its fixed
object overhead), so a hit costs one ``OrderedDict.move_to_end``::

    LRU (oldest first):  [blk(node A, 3)] [blk(node B, 0)] [blk(node A, -1 = whole)] ...
                               |                 |                  |
    node A.blocks = [None, None, None, blk3]     |        node A.whole (decoded())
    node B.blocks = [blk0, None]  <--------------+

The newest ``FRESH_CACHED_BLOCKS`` blocks of a freshly sealed node enter the
cache at once: tail readers keep reading them without decompressing.

The LRU and the zstd contexts live in a :class:`BlockCache`, one per
keyspace, handed to its streams (a standalone stream makes its own): it is
shared by the keyspace's streams so that memory stays bounded with many
streams, and by no one else, so that servers embedded in one process share
nothing (one's FLUSHALL, DEL or cache limits never touch another's blocks).

Thread safety: none.  The engine is driven by one thread (the event loop).
"""

from __future__ import annotations

import sys
from array import array
from collections import OrderedDict
from itertools import islice
from typing import Any

import zstandard

__all__ = ["BLOCK_BYTES", "BlockCache", "FRESH_CACHED_BLOCKS"]

# A SealedNode of engine/node.py, which imports this module: named, not
# imported (no import cycle, not even one for the type checker).
SealedNode = Any

COMPRESSION_LEVEL = 1  # level 1 vs 3: faster sealing for slightly larger blobs
FAST_COMPRESSION_LEVEL = -1  # for streams whose payloads do not compress

# Target raw size of one block of a compressed sealed node (see "Sealing"
# above).  Read when a node is sealed; each node records its own block size,
# so changing it never invalidates existing nodes or snapshots.
BLOCK_BYTES = 4096
# A sealed node stays compressed when its frames save at least 1/2**_KEEP_SHIFT
# of the raw size.  1/64: a read decompresses one small block, and a block
# of incompressible payloads is stored by zstd as raw literals (decoding it
# is a copy), so even the ~3% the tables save is kept (bench/ENGINE-NOTES.md).
_KEEP_SHIFT = 6
# Blocks of a freshly sealed node that enter the decoded cache at once.
FRESH_CACHED_BLOCKS = 2
# Values BlockCache.intern remembers at most.
INTERNED_MAX = 4096

DECODED_CACHE_BLOCKS = 512               # default limits of a BlockCache
DECODED_CACHE_BYTES = 64 * 1024 * 1024

_LITTLE = sys.byteorder == "little"

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
    see :meth:`Node.decoded`).  ``lru`` tells whether it sits in a
    :class:`BlockCache`; a raw-stored node's single block is permanent instead (and has no
    ``node`` back reference, so that no cycle keeps a dropped node alive).
    ``served`` counts the entries readers of rendered pieces have asked of it
    and ``pieces`` holds what they rendered once it was read again
    (:meth:`BlockCache.keep_pieces`; None until then), counted in ``nbytes``."""

    __slots__ = ("node", "index", "buf", "ends", "tags", "times", "nbytes", "lru", "served", "pieces")

    # memoryviews over the body on little-endian hosts, arrays on big-endian ones
    ends: Any
    tags: Any
    times: Any

    def __init__(self, node, index: int, raw: bytes, count: int, code: str) -> None:
        e_len = (count + 1) * (4 if code == "I" else 8)
        pos = len(raw) - e_len - 12 * count
        if pos < 0:
            raise ValueError("block body too short")
        e_end = pos + e_len
        t_end = e_end + 4 * count
        if _LITTLE:
            mv = memoryview(raw)
            self.ends = mv[pos:e_end].cast(code)  # type: ignore[call-overload]  # "I" or "Q"
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
        self.served = 0
        self.pieces: list | None = None

    @classmethod
    def from_tables(cls, node, index: int, buf: bytes, ends, tags, times) -> "_Block":
        blk = cls.__new__(cls)
        blk.node, blk.index, blk.buf = node, index, buf
        blk.ends, blk.tags, blk.times = ends, tags, times
        blk.nbytes = (len(buf) + len(ends) * ends.itemsize + 12 * len(tags) + _BLOCK_OVERHEAD)
        blk.lru = False
        blk.served = 0
        blk.pieces = None
        return blk


# What a decoded block costs besides its body: the object and its 3 views
# (+1 for the managed buffer they share), and the bytes object's header.
_VIEWS_OVERHEAD = _Block.__basicsize__ + 4 * sys.getsizeof(memoryview(b""))
_BLOCK_OVERHEAD = _VIEWS_OVERHEAD + sys.getsizeof(b"")
# What a list of n rendered pieces costs besides their bytes: the list (its
# header and a pointer each) and each bytes object's header.
_PIECES_LIST = sys.getsizeof([])
_PIECE_OVERHEAD = sys.getsizeof(b"") + 8


def pieces_bytes(pieces: list | None) -> int:
    """Memory of a block's rendered pieces (0 for None). O(pieces)."""
    if pieces is None:
        return 0
    return sum(map(len, pieces)) + len(pieces) * _PIECE_OVERHEAD + _PIECES_LIST


class BlockCache:
    """The decoded-block LRU of one keyspace, and its zstd contexts.

    One per :class:`engine.keyspace.Keyspace` (a standalone
    :class:`engine.stream.Stream` makes its own): servers embedded in one
    process share nothing, and one's FLUSHALL leaves another's cache alone.
    At most ``max_blocks`` blocks and ``max_bytes`` bytes (each block's body
    plus its fixed object overhead; at least one block is kept).  The zstd
    contexts are created on first use and reused: creating a context costs
    far more than compressing one node.  Not thread-safe (one event loop)."""

    __slots__ = ("lru", "nbytes", "max_blocks", "max_bytes", "_cctx", "_cctx_fast", "_dctx", "_interned",
                 "pins", "sealer")

    def __init__(self, max_blocks: int = DECODED_CACHE_BLOCKS,
                 max_bytes: int = DECODED_CACHE_BYTES) -> None:
        self.lru: OrderedDict[_Block, None] = OrderedDict()
        self.nbytes = 0  # bytes held: decoded bodies plus their object overhead
        self.max_blocks = max(1, int(max_blocks))
        self.max_bytes = max(0, int(max_bytes))
        self._cctx: zstandard.ZstdCompressor | None = None
        self._cctx_fast: zstandard.ZstdCompressor | None = None
        self._dctx: zstandard.ZstdDecompressor | None = None
        self._interned: dict = {}  # see intern()
        # Snapshot captures under way that hold references to sealed nodes
        # (Stream.capture_nodes): while any does, a dropped node keeps its data.
        self.pins = 0
        # While an AOF loads: the streams' seals compress in another thread
        # (persistence/sealer.py; see Stream._seal_active).  None otherwise.
        self.sealer: Any = None

    def __len__(self) -> int:
        """Blocks held. O(1)."""
        return len(self.lru)

    # -- small values shared by the keyspace's streams -------------------------
    def intern(self, value):
        """``value``, or an equal one given before: small immutable values that
        many streams of the keyspace hold a copy of (a tag, the end offset of
        a first node), kept once (a million keys of one entry each would
        otherwise hold a million ``b"tag"`` and ``1001`` objects).  At most
        :data:`INTERNED_MAX` are remembered (forgotten all at once when full:
        what streams hold stays valid).  O(1)."""
        interned = self._interned
        kept = interned.get(value)
        if kept is None:
            if len(interned) >= INTERNED_MAX:
                interned.clear()
            interned[value] = kept = value
        return kept

    # -- zstd ------------------------------------------------------------------
    def compressor(self, fast: bool = False) -> zstandard.ZstdCompressor:
        """The compression context (``fast``: the fast level). O(1)."""
        if fast:
            if self._cctx_fast is None:
                self._cctx_fast = zstandard.ZstdCompressor(level=FAST_COMPRESSION_LEVEL,
                                                           write_content_size=True)
            return self._cctx_fast
        if self._cctx is None:
            self._cctx = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_content_size=True)
        return self._cctx

    def decompress(self, frame) -> bytes:
        """One zstd frame decompressed. O(frame)."""
        dctx = self._dctx
        if dctx is None:
            dctx = self._dctx = zstandard.ZstdDecompressor()
        return dctx.decompress(frame)

    # -- the LRU -------------------------------------------------------------------
    def set_limits(self, max_blocks: int, max_bytes: int) -> None:
        """Resize: at most ``max_blocks`` blocks and ``max_bytes`` bytes (at
        least one block is kept).  O(blocks evicted)."""
        self.max_blocks = max(1, int(max_blocks))
        self.max_bytes = max(0, int(max_bytes))
        self._shrink()

    def clear(self) -> None:
        """Empty the cache (e.g. on FLUSHALL). O(blocks held)."""
        lru = self.lru
        while lru:
            self.forget(next(iter(lru)).node)

    @staticmethod
    def _unlink(blk: _Block) -> None:
        """Unlink a block that just left the LRU from its node."""
        blk.lru = False
        if blk.index < 0:
            blk.node.whole = None
        else:
            blk.node.blocks[blk.index] = None

    def _shrink(self) -> None:
        lru = self.lru
        while lru and (len(lru) > self.max_blocks
                       or (self.nbytes > self.max_bytes and len(lru) > 1)):
            old, _ = lru.popitem(last=False)
            self.nbytes -= old.nbytes
            self._unlink(old)

    def add(self, blk: _Block) -> None:
        """Put a freshly decoded block in the LRU (its node links it). O(1)."""
        blk.lru = True
        self.lru[blk] = None
        self.nbytes += blk.nbytes
        self._shrink()

    def touch(self, blk: _Block) -> None:
        """A hit: ``blk`` becomes the newest. O(1)."""
        self.lru.move_to_end(blk)

    def keep_pieces(self, blk: _Block, pieces: list) -> None:
        """Keep ``pieces`` (one bytes object per entry of ``blk``, rendered by
        a reader: see :meth:`engine.stream.Stream.read_pieces`) with the
        block, counted in its ``nbytes`` and so in the cache's bound (the
        oldest blocks make room; the pieces leave with their block).
        ``blk`` must be in the LRU. O(pieces)."""
        more = pieces_bytes(pieces) - pieces_bytes(blk.pieces)
        blk.pieces = pieces
        blk.nbytes += more
        self.nbytes += more
        self.lru.move_to_end(blk)  # the newest: the last to make room
        self._shrink()

    def forget(self, node: SealedNode) -> None:
        """Drop every decoded block of ``node`` from the LRU. O(node's blocks)."""
        blocks = node.blocks
        if blocks is None:
            return
        lru = self.lru
        for blk in (*blocks, node.whole):
            if blk is not None and blk.lru:
                del lru[blk]
                self.nbytes -= blk.nbytes
                self._unlink(blk)

    def decode_block(self, node: SealedNode, b: int) -> _Block:
        """Decompress block ``b`` of a compressed sealed node into the LRU.
        O(block)."""
        offs = node.block_offs
        be = node.block_entries
        # A bytes slice (a copy of one small frame) is cheaper than a memoryview.
        raw = self.decompress(node.data[offs[b]:offs[b + 1]])
        count = node.cap_end - node.start - b * be
        blk = _Block(node, b, raw, be if be < count else count, node.ends_code)
        node.blocks[b] = blk
        self.add(blk)
        return blk

    def decode_whole(self, node: SealedNode) -> _Block:
        """Whole-node tables of a multi-block compressed node (for
        :meth:`Node.decoded`), assembled from its blocks into the LRU.
        O(node)."""
        blk = _Block.from_tables(node, -1, *_concat_tables(node._block_list(self), node.ends_code))
        node.whole = blk
        self.add(blk)
        return blk
