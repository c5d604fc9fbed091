"""A macro node: the entries of one aligned range of offsets.

Every node covers a fixed, aligned range of ``N = node_entries`` offsets, or
the start of one when sealed by bytes (engine/stream.py draws the list of
nodes).  The last node of a stream is an :class:`ActiveNode` (the only
writable one); a full node is sealed once into a :class:`SealedNode`, which
takes its place in the stream and never changes (except its bitmap of
deleted positions)::

    SealedNode (immutable)                     ActiveNode (the only writable one)
    +--------------------------------+         +-------------------------------------+
    | base, start, cap_end, short    |         | base, start, cap_end                |
    | first_time, last_time          |         | buf   : bytearray  "aaa|bbbb|cc|"   |
    | tag_set : distinct tag ids     |         | ends  : array('I') [0, 3, 7, 9]     |
    | data    : zstd(block 0) zstd(  |         | tags  : array('I') [5, 2, 5]        |
    |   block 1) ...  or one body    |         | times : array('q') [t0, t1, t2]     |
    | block_entries, block_offs      |         | deleted : bitmap or None            |
    | blocks  : per block a decoded  |         +-------------------------------------+
    |   _Block (LRU) or None         |         compact, one entry: ends/tags/times None,
    | deleted : bitmap or None       |         its tag id and time in _tid0/_time0
    +--------------------------------+

``base`` is the node's aligned first offset ``k*N + 1`` and ``cap_end`` its
aligned end ``(k+1)*N + 1`` (exclusive), or, for a node sealed by bytes
(``short``, see engine/stream.py), the offset after its last entry.
``start`` is the first offset whose entry is physically stored in the node:
normally ``base``, but after the whole stream was evicted the next write may
land in the middle of a node's range and the new node simply starts there
(and after a short node, the next one starts right after it).  Entry
``offset`` sits at position ``p = offset - start`` of the node's tables and
its payload is ``buf[ends[p]:ends[p+1]]``.  Entries carry no per-entry Python
object: a node is one buffer plus three flat C arrays, like the
``offsets_table`` of RCP 11.  Blocks and the decoded-block cache:
engine/blocks.py; the blob format of a node in a snapshot: engine/codec.py.

Sealing is paid once per node: blocks of about ``BLOCK_BYTES`` raw bytes, each
compressed with zstd level 1; after a node that saved less than 20% the stream
seals with the fast level (-1) until a node compresses well again.
"""

from __future__ import annotations

import os
import sys
from array import array
from itertools import accumulate
from typing import Any, Callable

import zstandard

from . import blocks as _blocks
from .blocks import (
    _KEEP_SHIFT,
    _LITTLE,
    _VIEWS_OVERHEAD,
    FRESH_CACHED_BLOCKS,
    BlockCache,
    _Block,
    _block_body,
    _concat_tables,
)
from .codec import _pack_ids, header_length, pack_header, parse_header

__all__ = ["ActiveNode", "Node", "SealedNode"]


# Templates of ActiveNode.expand's first tables (copied, never changed).
_TWO_U32 = array("I", (0, 0))
_ONE_U32 = array("I", (0,))
_ONE_I64 = array("q", (0,))


def _block_bodies_python(buf, ends: array, tags: array, times: array, count: int, per_block: int) -> list:
    """The raw bodies of a node's blocks at its seal (little-endian hosts): its
    first ``count`` entries cut into blocks of ``per_block``, each body what
    blocks.py ``_block_body`` makes of the block's slices, its ends rebased to
    the block's first payload byte.  The fallback of engine/_columns.c
    ``block_bodies`` (the same bytes).  O(count)."""
    # The block bodies straight from byte views of the tables.  A block's
    # ends are rebased (minus its first payload offset) with one big-int
    # subtraction: every lane is >= the subtrahend, so no borrow crosses
    # lanes (3x faster than a per-entry loop).
    esize = ends.itemsize
    join = b"".join
    from_bytes = int.from_bytes
    bodies = []
    rel: Any
    with memoryview(buf) as mv, memoryview(ends) as ev, memoryview(tags) as tv, memoryview(times) as mt, \
            ev.cast("B") as eb, tv.cast("B") as tb, mt.cast("B") as mb:
        for a in range(0, count, per_block):
            c = a + per_block if a + per_block < count else count
            pa = ends[a]  # (read at block starts only: no list of every end)
            pc = ends[c]
            n = (c + 1 - a) * esize
            rel = eb[a * esize:(c + 1) * esize]
            if pa:
                rel = (from_bytes(rel, "little")
                       - from_bytes(pa.to_bytes(esize, "little") * (c + 1 - a), "little")
                       ).to_bytes(n, "little")
            bodies.append(join((mv[pa:pc], bytes(-(pc - pa) & 7), rel, tb[4 * a:4 * c], mb[8 * a:8 * c])))
            del rel
    return bodies


# A node's block bodies at its seal in C (engine/_columns.c), unless it was not
# built or is turned off (TSTREAM_PURE_PYTHON=1): then the Python above.
_block_bodies: Callable[..., list] = _block_bodies_python
if os.environ.get("TSTREAM_PURE_PYTHON", "") in ("", "0"):
    try:
        from ._columns import block_bodies as _c_block_bodies
    except ImportError:  # (not built)
        pass
    else:
        _block_bodies = _c_block_bodies


def _popcount_range(bits: bytearray, a: int, b: int) -> int:
    """Number of set bits at positions [a, b) of a little-endian bitmap."""
    if b <= a:
        return 0
    v = int.from_bytes(bits, "little") >> a
    return (v & ((1 << (b - a)) - 1)).bit_count()

# ---------------------------------------------------------------------------
# Macro nodes: the base class, the active node, the sealed node
# ---------------------------------------------------------------------------

class Node:
    """One macro node: the entries of offsets ``[start, cap_end)`` at most.

    See the module docstring for the layout.  A node is an
    :class:`ActiveNode` (the stream's last, writable) or a
    :class:`SealedNode`; sealing makes a new sealed object that replaces the
    active one in the stream (two small classes rather than one with the
    fields of both: a key holding one entry pays for one small active node).
    Nodes are managed by :class:`engine.stream.Stream`; the public surface
    for snapshots is :meth:`blob` (alias :meth:`sealed_bytes`),
    :meth:`blob_parts` (:meth:`capture_parts`, :meth:`parts_of`),
    :meth:`from_blob`, :meth:`from_parts`, :meth:`header_length`,
    :attr:`count`, :attr:`sealed` and :attr:`deleted`; readers use
    :meth:`tables_at` (one block) or :meth:`decoded` (the whole node).
    """

    __slots__ = ("base", "start", "cap_end", "deleted", "ndel")

    sealed = False
    short = False  # sealed before its range was full (node_max_bytes); SealedNode keeps its own

    def __init__(self, base: int, start: int, cap_end: int) -> None:
        self.base = base
        self.start = start
        self.cap_end = cap_end
        self.deleted: bytearray | None = None  # bitmap of deleted positions
        self.ndel = 0                          # bits set in it

    @property
    def count(self) -> int:
        """Entries physically stored (deleted ones included). O(1)."""
        raise NotImplementedError

    @property
    def nblocks(self) -> int:
        """Blocks of a sealed node (1 when stored raw); 0 for the active node. O(1)."""
        raise NotImplementedError

    def capture_parts(self) -> tuple:
        """See :meth:`ActiveNode.capture_parts` / :meth:`SealedNode.capture_parts`."""
        raise NotImplementedError

    def tables_at(self, p: int, cache: BlockCache):
        """See :meth:`ActiveNode.tables_at` / :meth:`SealedNode.tables_at`."""
        raise NotImplementedError

    def decoded(self, cache: BlockCache | None = None):
        """See :meth:`ActiveNode.decoded` / :meth:`SealedNode.decoded`."""
        raise NotImplementedError

    def tag_id_at(self, p: int, cache: BlockCache) -> int:
        """Tag id of position ``p`` (decodes one block at most). O(1)."""
        _, _, tags, _, i = self.tables_at(p, cache)
        return tags[i]

    def time_at(self, p: int, cache: BlockCache) -> int:
        """Time of position ``p`` (decodes one block at most). O(1)."""
        _, _, _, times, i = self.tables_at(p, cache)
        return times[i]

    def blob_parts(self) -> tuple[bytes, bytes]:
        """``(header, body)`` of :meth:`blob` without concatenating them: a
        snapshot writer can write both and skip one copy.  For a sealed node
        ``body`` is the stored object itself (no copy, immutable) and the
        header is O(blocks + distinct tags); for the active node the body is
        serialised now (raw, O(size))."""
        return Node.parts_of(self.capture_parts())

    @staticmethod
    def parts_of(captured: tuple) -> tuple[bytes, bytes]:
        """``(header, body)`` of a node from its :meth:`capture_parts`.
        O(blocks + distinct tags)."""
        if len(captured) == 2:
            return captured
        (start, count, compressed, code, buf_len, be, first_time, last_time, raw_len, offs, ids,
         data, short) = captured
        return (pack_header(start, count, compressed, code, buf_len, be, first_time, last_time,
                            raw_len, offs, ids, short), data)

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
        """Length of the header that starts ``blob`` (see
        :func:`engine.codec.header_length`). O(1)."""
        return header_length(blob)

    @classmethod
    def from_blob(cls, blob, node_entries: int, check: bool = True,
                  cache: BlockCache | None = None) -> "Node":
        """Rebuild a node from :meth:`blob` (any version: see
        :meth:`from_parts`).  The body is copied once.  Raises ValueError
        on a damaged blob.  O(size) (the copy), plus :meth:`from_parts`."""
        hlen = cls.header_length(blob)
        view = memoryview(blob)
        return cls.from_parts(view[:hlen], bytes(view[hlen:]), node_entries, check, cache)

    @classmethod
    def from_parts(cls, header, body, node_entries: int, check: bool = True,  # noqa: C901 (over the limit when it came in)
                   cache: BlockCache | None = None) -> "Node":
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
        (base, start, cap_end, count, code, buf_len, zst, be, nb, offs, summary,
         version, short) = parse_header(header, node_entries)
        if type(body) is not bytes:
            body = bytes(body)
        stored = body
        if offs is None:  # version 1: one frame (or raw body)
            offs = (0, len(stored))
        if offs[0] != 0 or offs[-1] != len(stored) or list(offs) != sorted(offs):
            raise ValueError("node blob has damaged block offsets")
        full = start + count == cap_end
        if cache is None:
            cache = BlockCache()  # its zstd contexts only: a loaded node is not cached
        if full and summary is not None and not check:
            node = SealedNode._from_summary(base, start, cap_end, code, buf_len, zst, be, offs,
                                            stored, summary)
            node.short = short
            return node
        blocks = []
        raw_len = payload = 0
        view = memoryview(stored)
        for b in range(nb):
            frame = stored if nb == 1 else view[offs[b]:offs[b + 1]]
            try:
                raw = cache.decompress(frame) if zst else bytes(frame)
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
            node = SealedNode(base, start, cap_end)
            node._set_sealed(stored, zst, be, offs, buf_len, raw_len, code, blocks[0].times[0],
                             blocks[-1].times[len(blocks[-1].times) - 1])
            ids: set[int] = set()
            for blk in blocks:
                ids.update(blk.tags)
            node.tag_set = _pack_ids(ids)
            # decoded blocks are not kept: the node is not in the LRU
            node.blocks = [None] * nb if zst else [blocks[0]]
            node.mem = node._sealed_mem()
            node.short = short
            if summary is not None and summary != (node.first_time, node.last_time, raw_len,
                                                    node.tag_set):
                raise ValueError("node blob summary does not match its blocks")
            return node
        # An active node, or a version-1 compressed node to cut into blocks.
        payloads, ends, tags, times = _concat_tables(blocks, code)
        if summary is not None and summary != (times[0], times[-1], raw_len, _pack_ids(set(tags))):
            raise ValueError("node blob summary does not match its blocks")
        active = ActiveNode(base, start, cap_end, bytearray(payloads), ends, tags, times)
        if full:
            return active.seal(cache, fresh=False, short=short)[0]
        return active

    def __repr__(self) -> str:
        state = "sealed" if self.sealed else "active"
        return f"<Node {state} base={self.base} start={self.start} count={self.count}>"


class ActiveNode(Node):
    """The writable last node of a stream: its own tables, growing in place::

        buf   : bytearray  "aaa|bbbb|cc|"     payloads
        ends  : array('I') [0, 3, 7, 9]       end of each payload (leading 0)
        tags  : array('I') [5, 2, 5]          tag ids (engine/tags.py)
        times : array('q') [t0, t1, t2]       ns since the epoch

    A node of one entry is kept *compact*: ``ends``, ``tags`` and ``times``
    are None, the entry's tag id and time sit in ``_tid0`` / ``_time0`` and
    its payload is all of ``buf``, an immutable ``bytes`` (the writer's own
    object when it gave bytes: no copy), three arrays and a bytearray fewer
    for the many keys that hold one entry.  The second entry gives it its tables
    (:meth:`expand`); :meth:`decoded` and :meth:`tables_at` answer for both
    forms.
    """

    __slots__ = ("buf", "ends", "tags", "times", "_tid0", "_time0")

    buf: bytearray | bytes  # bytes while compact

    def __init__(self, base: int, start: int, cap_end: int, buf: bytearray | None = None,
                 ends: array | None = None, tags: array | None = None,
                 times: array | None = None) -> None:
        super().__init__(base, start, cap_end)
        self.buf = bytearray() if buf is None else buf
        self.ends: array | None = array("I", (0,)) if ends is None else ends
        self.tags: array | None = array("I") if tags is None else tags
        self.times: array | None = array("q") if times is None else times
        self._tid0 = 0
        self._time0 = 0

    @classmethod
    def with_entry(cls, base: int, start: int, cap_end: int, data, tid: int,
                   time_ns: int) -> "ActiveNode":
        """A new, compact active node holding one entry. O(len(data))."""
        node = cls.__new__(cls)
        node.base, node.start, node.cap_end = base, start, cap_end
        node.deleted = None
        node.ndel = 0
        node.buf = bytes(data)  # compact: immutable until expand()
        node.ends = node.tags = node.times = None
        node._tid0 = tid
        node._time0 = time_ns
        return node

    def expand(self) -> None:
        """Give a compact node its tables (and a growable ``buf``).
        O(entry); no-op when the node has its tables."""
        if self.ends is not None:
            return
        # Every table first, then the switch: a MemoryError leaves the node compact.
        buf = bytearray(self.buf)
        end = len(buf)
        # Copies of tiny templates: twice as fast as array(code, initializer),
        # and a write spread over many keys expands a node on most appends.
        if end <= 0xFFFFFFFF:
            ends = _TWO_U32[:]
            ends[1] = end
        else:
            ends = array("Q", (0, end))
        tags = _ONE_U32[:]
        tags[0] = self._tid0
        times = _ONE_I64[:]
        times[0] = self._time0
        self.buf, self.ends, self.tags, self.times = buf, ends, tags, times
        self._time0 = 0

    def cut_back(self, held: int) -> None:
        """Take back what an append stored past the first ``held`` entries
        (an append that failed midway): every table cut to ``held``
        entries.  A compact node has nothing to cut (an append stores into
        its tables only after :meth:`expand`).  Allocates nothing. O(1)."""
        ends, tags, times = self.ends, self.tags, self.times
        if ends is None or tags is None or times is None:
            return
        del ends[held + 1:]
        del tags[held:]
        del times[held:]
        buf = self.buf
        assert isinstance(buf, bytearray)  # tables: not compact
        del buf[ends[held]:]

    @property
    def count(self) -> int:
        """Entries stored so far. O(1)."""
        times = self.times
        return 1 if times is None else len(times)

    @property
    def nblocks(self) -> int:
        """0: the active node has no blocks. O(1)."""
        return 0

    @property
    def last_time(self) -> int:
        """Time of the newest entry. O(1)."""
        times = self.times
        return self._time0 if times is None else times[-1]

    def tag_ids(self) -> set[int]:
        """The distinct tag ids of the entries. O(entries)."""
        tags = self.tags
        return {self._tid0} if tags is None else set(tags)

    def _body(self) -> bytes:
        """Serialise the active node's tables as one raw body."""
        return _block_body(*self.decoded())

    def seal(self, cache: BlockCache, fast: bool = False, fresh: bool = True,  # noqa: C901 (over the limit when it came in)
             short: bool = False) -> tuple["SealedNode", set[int]]:
        """The sealed node of this active one, and its distinct tag ids: cut
        into blocks of about ``BLOCK_BYTES`` raw bytes, each compressed as
        its own zstd frame (``fast``: with the fast level), or one raw body
        when that does not save 1/64.  ``short``: sealed by bytes, before the
        range is full (the node ends after its last entry).  ``fresh``: put
        the newest decoded blocks in ``cache``'s LRU.  This object is spent
        (its tables dropped) only once the sealed node is complete: a
        MemoryError leaves it whole and active.  O(node).

        In two halves, which a caller may run apart (an AOF load compresses
        in another thread, persistence/sealer.py): :meth:`seal_begin` (the
        sealed node's geometry and summary, the block bodies), the bodies
        compressed with ``cache.compressor(fast)``, :meth:`seal_end`."""
        job = self.seal_begin(fast, short)
        ctx = cache.compressor(fast)
        return self.seal_end(job, [ctx.compress(body) for body in job[2]], cache, fresh), job[1]

    def seal_begin(self, fast: bool = False, short: bool = False) -> tuple:
        """The first half of :meth:`seal`: ``(node, ids, bodies, ...)``, the
        sealed node without its stored data (not to be read before
        :meth:`seal_end`), its distinct tag ids and the block bodies to
        compress (with the fast level when ``fast``), and what seal_end needs.
        Changes nothing here (a MemoryError leaves this node as it was).
        O(node)."""
        buf, ends, tags, times = self.decoded()
        count = len(times)
        code = ends.typecode
        node = SealedNode(self.base, self.start, self.start + count if short else self.cap_end)
        node.short = short
        if self.deleted is not None:  # sized for the range; a short node's is trimmed
            node.deleted = self.deleted[:(node.cap_end - node.start + 7) // 8]
            node.ndel = self.ndel
        node.buf_len = len(buf)
        node.ends_code = code
        node.first_time = times[0]
        node.last_time = times[-1]
        # One tag for the whole node (the common stream): two byte copies and a
        # memcmp, not a set built item by item (~45k instructions a 1,000-entry node).
        ids = {tags[0]} if tags.tobytes() == tags[:1].tobytes() * count else set(tags)
        node.tag_set = _pack_ids(ids)
        # Entries per block: a fixed count per node (O(1) block lookup),
        # chosen so that an average block holds ~BLOCK_BYTES raw bytes.
        size = len(buf) + (count + 1) * ends.itemsize + 12 * count
        be = _blocks.BLOCK_BYTES * count // size
        if be >= count:
            be, nb = count, 1
        else:
            nb = -(-count // (be or 1))
            be = -(-count // nb)  # even the blocks out
        if nb == 1:
            bodies = [self._body()]
        elif _LITTLE:
            bodies = _block_bodies(buf, ends, tags, times, count, be)
        else:  # pragma: no cover - big-endian hosts
            el = ends.tolist()
            bodies = [_block_body(buf[el[a]:el[min(a + be, count)]],
                                  array(code, [e - el[a] for e in el[a:min(a + be, count) + 1]]),
                                  tags[a:a + be], times[a:a + be]) for a in range(0, count, be)]
        return node, ids, bodies, fast, count, be, nb, code

    def seal_end(self, job: tuple, frames: list, cache: BlockCache, fresh: bool = True) -> "SealedNode":
        """The second half of :meth:`seal`: the sealed node of ``job`` (what
        :meth:`seal_begin` gave) completed with ``frames`` (its bodies
        compressed), and this object spent.  O(node)."""
        node, _ids, bodies, _fast, count, be, nb, code = job
        raw_len = sum(map(len, bodies))
        node.raw_len = raw_len
        spent_buf = bytearray()
        blocks: list[_Block | None]
        if sum(map(len, frames)) <= raw_len - (raw_len >> _KEEP_SHIFT):
            # One exact-size object (python-zstandard over-allocates each
            # frame to the compress bound and merely shortens it).
            node.data = data = b"".join(frames)
            node.compressed = True
            node.block_entries = be
            node.block_offs = array("I" if len(data) < 1 << 32 else "Q",
                                    [0, *accumulate(map(len, frames))])
            node.blocks = blocks = [None] * nb
        else:
            node.data = data = bodies[0] if nb == 1 else _block_body(*self.decoded())
            node.raw_len = len(data)
            node.compressed = False
            node.block_entries = count
            node.block_offs = array("I" if len(data) < 1 << 32 else "Q", (0, len(data)))
            node.blocks = [_Block(None, 0, data, count, code)]  # permanent views
            fresh = False
        node.mem = node._sealed_mem()
        # The commit point, after every allocation the sealed node needs.
        # This object is no longer the stream's: cap_end 0 tells suspended
        # iterators to look the offset up again (they find the sealed node).
        self.buf = spent_buf
        self.ends = self.tags = self.times = self.deleted = None
        self.cap_end = 0
        if fresh:
            # Tail readers are the common case: keep the newest blocks
            # decoded (the others cost one small decompression each).  Only
            # a help: a MemoryError leaves them to be decoded when read.
            try:
                for k in range(max(0, nb - FRESH_CACHED_BLOCKS), nb):
                    c = count - k * be
                    blocks[k] = blk = _Block(node, k, bodies[k], be if be < c else c, code)
                    cache.add(blk)
            except MemoryError:
                lru = cache.lru
                for k, cached in enumerate(blocks):
                    if cached is not None and cached not in lru:
                        blocks[k] = None
        return node

    def active_mem(self) -> int:
        """Bytes held by an active node (buffers include over-allocation). O(1)."""
        mem = sys.getsizeof(self) + sys.getsizeof(self.buf)
        if self.ends is None:
            mem += sys.getsizeof(self._time0)
        else:
            mem += sys.getsizeof(self.ends) + sys.getsizeof(self.tags) + sys.getsizeof(self.times)
        if self.deleted is not None:
            mem += sys.getsizeof(self.deleted)
        return mem

    def capture_parts(self) -> tuple:
        """What :meth:`blob_parts` needs: for the active node,
        :meth:`blob_parts` itself, serialised now (raw, O(size))."""
        buf, ends, tags, times = self.decoded()
        body = _block_body(buf, ends, tags, times)
        count = len(times)
        ids = _pack_ids(set(tags))
        return (pack_header(self.start, count, False, ends.typecode, len(buf),
                            max(count, 1), times[0] if count else 0, times[-1] if count else 0,
                            len(body), (0, len(body)), ids), body)

    def tables_at(self, p: int, cache: BlockCache | None = None):
        """``(buf, ends, tags, times, p)``: the node's tables. O(1)."""
        buf, ends, tags, times = self.decoded()
        return buf, ends, tags, times, p

    def decoded(self, cache: BlockCache | None = None):
        """``(buf, ends, tags, times)``: the node's own tables (made up for
        a compact node, which keeps none). O(1)."""
        ends = self.ends
        if ends is None:
            end = len(self.buf)
            return (self.buf, array("I" if end <= 0xFFFFFFFF else "Q", (0, end)),
                    array("I", (self._tid0,)), array("q", (self._time0,)))
        return self.buf, ends, self.tags, self.times


class SealedNode(Node):
    """An immutable, full node (or one sealed by bytes: ``short``) stored as
    zstd frames of blocks, or one raw body (engine/blocks.py)::

        data         : zstd(block 0) zstd(block 1) ...  or one raw body
        block_offs   : where each frame starts in data (+ its end)
        blocks       : per block its decoded _Block (in the cache) or None
        whole        : whole-node _Block for decoded(), or None
        tag_set      : the distinct tag ids, sorted
        first_time, last_time, buf_len, raw_len, ends_code, mem
    """

    __slots__ = ("short", "data", "compressed", "block_entries", "block_offs", "blocks", "whole",
                 "buf_len", "ends_code", "raw_len", "tag_set", "first_time", "last_time", "mem")

    sealed = True

    # Set by whoever builds the node (seal, _set_sealed and its callers);
    # emptied when the stream drops it.
    data: bytes
    block_offs: array
    blocks: list[_Block | None]
    tag_set: array

    def __init__(self, base: int, start: int, cap_end: int) -> None:
        super().__init__(base, start, cap_end)
        self.short = False
        self.compressed = False
        self.block_entries = 0
        self.whole: _Block | None = None
        self.buf_len = 0
        self.ends_code = "I"
        self.raw_len = 0
        self.first_time = 0
        self.last_time = 0
        self.mem = 0

    @property
    def count(self) -> int:
        """Entries stored (deleted ones included). O(1)."""
        return self.cap_end - self.start

    @property
    def nblocks(self) -> int:
        """Blocks (1 when stored raw). O(1)."""
        return len(self.blocks)

    def _sealed_mem(self) -> int:
        mem = (sys.getsizeof(self) + sys.getsizeof(self.data) + sys.getsizeof(self.tag_set)
               + sys.getsizeof(self.block_offs) + sys.getsizeof(self.blocks))
        if not self.compressed:  # permanent views over the raw body
            mem += _VIEWS_OVERHEAD
        if self.deleted is not None:
            mem += sys.getsizeof(self.deleted)
        return mem

    def capture_parts(self) -> tuple:
        """What :meth:`blob_parts` needs, taken now and turned into bytes
        later (:meth:`parts_of`), from any thread: references to the node's
        immutable parts, O(1) (eviction may drop the node meanwhile: the
        references stay valid).  A snapshot's capture runs on the event
        loop, its writing in a worker thread."""
        return (self.start, self.cap_end - self.start, self.compressed, self.ends_code,
                self.buf_len, self.block_entries, self.first_time, self.last_time,
                self.raw_len, self.block_offs, self.tag_set, self.data, self.short)

    def _set_sealed(self, stored: bytes, zst: bool, be: int, offs, buf_len: int, raw_len: int,
                    code: str, first_time: int, last_time: int) -> None:
        """Make this fresh node a sealed one holding ``stored`` (loading a blob)."""
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
                      be: int, offs, stored: bytes, summary) -> "SealedNode":
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

    def _block(self, b: int, cache: BlockCache) -> _Block:
        """Decoded block ``b`` of a sealed node, through ``cache``. O(1) on a
        hit, O(block) on a miss."""
        blk = self.blocks[b]
        if blk is None:
            return cache.decode_block(self, b)
        if blk.lru:
            cache.touch(blk)
        return blk

    def _block_list(self, cache: BlockCache) -> list:
        """Every decoded block of a sealed node, without touching the LRU
        (blocks not cached are decompressed privately, with ``cache``'s
        context).  O(node)."""
        out = []
        be = self.block_entries
        count = self.cap_end - self.start
        offs = self.block_offs
        for b, blk in enumerate(self.blocks):
            if blk is None:
                c = count - b * be
                blk = _Block(None, b, cache.decompress(memoryview(self.data)[offs[b]:offs[b + 1]]),
                             be if be < c else c, self.ends_code)
            out.append(blk)
        return out

    def tables_at(self, p: int, cache: BlockCache):
        """``(buf, ends, tags, times, i)``: the decoded tables of the block
        holding position ``p`` and ``p``'s index ``i`` in them (entry ``p``'s
        payload is ``buf[ends[i]:ends[i + 1]]``), decoded through ``cache``
        (the owning stream's).  O(1), plus one block decompression on a
        miss."""
        be = self.block_entries
        b = p // be
        blk = self._block(b, cache)
        return blk.buf, blk.ends, blk.tags, blk.times, p - b * be

    def decoded(self, cache: BlockCache | None = None):
        """``(buf, ends, tags, times)`` of the *whole* node (position ``p``
        is index ``p``).  A multi-block node is assembled from all of its
        blocks into one entry of ``cache``: O(node) on a miss, O(1) on a
        hit.  Without a cache (a node read outside any stream, e.g. from a
        snapshot file) it is decoded privately, O(node) every time.  Prefer
        :meth:`tables_at` to reach a few entries."""
        if cache is None:
            blks = self._block_list(BlockCache())
            if len(blks) == 1:
                return blks[0].buf, blks[0].ends, blks[0].tags, blks[0].times
            return _concat_tables(blks, self.ends_code)
        if len(self.blocks) == 1:
            blk = self._block(0, cache)
        else:
            whole = self.whole
            if whole is None:
                blk = cache.decode_whole(self)
            else:
                cache.touch(whole)
                blk = whole
        return blk.buf, blk.ends, blk.tags, blk.times
