"""Structural invariants of a stream, asserted by the tests after each operation.

:func:`check_stream` walks every node, decompresses every sealed block
privately (the decoded-block cache is not disturbed) and compares what it
finds with the counters the stream keeps incrementally::

    offsets    first <= next_offset, _deleted_held, first never on a deleted entry
    nodes      in their aligned range, consecutive, short only when sealed by bytes,
               only the last is active, every offset finds its node
    sealed     block geometry, frame offsets, raw length, summary (times, tag set), mem
    entries    ends ascending, times non-decreasing across the stream, deleted bitmaps
    tag table  exact reference counts, free list exact, nothing leaked
    cache      bounded, byte count exact, every cached block linked from its node

O(size of the stream + size of the cache).  Not for production paths.
"""

from __future__ import annotations

import sys

from .blocks import _BLOCK_OVERHEAD, _KEEP_SHIFT, BlockCache, _Block, _concat_tables, pieces_bytes
from .node import ActiveNode, SealedNode, _popcount_range
from .tags import SMALL_TAGS, TagDict

__all__ = ["check_cache", "check_stream"]


def check_stream(s) -> None:
    """Assert every structural invariant of the stream ``s``. O(size)."""
    nodes = s._nodes
    assert 1 <= s.first <= s.next_offset
    assert 0 <= s._deleted_held <= s.next_offset - s.first
    if not nodes:
        assert s.first == s.next_offset, "no node but entries held"
    if not nodes or nodes[-1].sealed:
        assert s._active is None
    if s._active is None:
        assert s._node_bytes >= 0, "a seal owed with no active node"
    refs = [0] * len(s._tag_list)
    used: set[int] = set()
    sealed_mem = 0
    prev_time = -(1 << 63)
    deleted_held = 0
    first_time = None
    for i, node in enumerate(nodes):
        _check_geometry(s, i, node)
        if node.sealed:
            assert node is not s._active
            buf, ends, tags, times = _check_sealed(node, s._cache)
            ids = set(tags)
            for tid in ids:
                refs[tid] += 1
            sealed_mem += node.mem
        else:
            assert i == len(nodes) - 1 and node is s._active, "active node must be the last"
            buf, ends, tags, times = _check_active(node, s._node_bytes < 0)
            ids = set(tags)
        used |= ids
        count = len(times)
        _check_tables(buf, ends, tags, times, count)
        for tid in ids:
            assert 0 < tid < len(s._tag_list) and s._tag_list[tid] is not None
        assert prev_time <= times[0], "times go backwards between nodes"
        prev_time = times[count - 1]
        assert node.start + count > s.first, "a node with no offset >= first was kept"
        deleted_held += _check_deleted(s, node, count)
        if i == 0 and s.first < s.next_offset:
            first_time = times[s.first - node.start]
        if i == len(nodes) - 1:
            assert node.start + count == s.next_offset
    if nodes:
        assert nodes[0].start <= s.first
    assert s.last_time >= prev_time
    assert deleted_held == s._deleted_held
    assert s.length >= 0
    if s.length:
        assert s.is_held(s.first), "first must not rest on a deleted entry"
        assert first_time is not None and first_time >= s._age_floor
    assert sealed_mem == s._sealed_mem
    _check_tag_table(s, refs, used)
    check_cache(s._cache)


def _check_geometry(s, i: int, node) -> None:
    """The node's place: inside one aligned range, right after the previous
    node; only a node sealed by bytes (``short``) ends before its range."""
    n = s.node_entries
    assert node.base == (node.start - 1) // n * n + 1, "node not aligned"
    assert node.base <= node.start < node.cap_end <= node.base + n
    if node.short:
        assert node.sealed and node.cap_end < node.base + n
    else:
        assert node.cap_end == node.base + n, "a node ends before its range unless short"
    if i:
        assert node.start == s._nodes[i - 1].cap_end, "nodes not consecutive"
    else:
        assert s._first_node_index == (node.base - 1) // n
    assert s._node_index(node.start) == i and s._node_index(node.cap_end - 1) == i


def _check_sealed(node, cache: BlockCache):
    """Block geometry, every block's body, the summary; returns the node's
    whole tables (decoded privately)."""
    assert isinstance(node, SealedNode) and isinstance(node.data, bytes)
    count = node.cap_end - node.start
    be, blocks, offs = node.block_entries, node.blocks, node.block_offs
    nb = len(blocks)
    assert 1 <= be <= count and nb == -(-count // be) and len(offs) == nb + 1
    assert offs[0] == 0 and offs[nb] == len(node.data)
    assert all(offs[k] <= offs[k + 1] for k in range(nb))
    if not node.compressed:
        assert nb == 1 and node.whole is None
        kept = blocks[0]
        assert kept is not None and not kept.lru and kept.node is None and kept.buf is node.data, \
            "raw node lost its views"
    esize = 4 if node.ends_code == "I" else 8
    raw_len = payload = 0
    for b in range(nb):
        frame = node.data[offs[b]:offs[b + 1]]
        raw = cache.decompress(frame) if node.compressed else frame
        cnt = min(be, count - b * be)
        probe = _Block(None, b, raw, cnt, node.ends_code)
        pend = probe.ends[cnt]
        assert probe.ends[0] == 0
        assert len(raw) == pend + ((-pend) & 7) + (cnt + 1) * esize + 12 * cnt
        raw_len += len(raw)
        payload += pend
        blk = blocks[b]
        if node.compressed and blk is not None:
            assert blk.lru and blk in cache.lru and blk.node is node and blk.index == b, \
                "decoded outside the LRU"
            assert blk.buf == raw and blk.nbytes == len(raw) + _BLOCK_OVERHEAD + pieces_bytes(blk.pieces)
            assert blk.pieces is None or len(blk.pieces) == cnt
    assert raw_len == node.raw_len and payload == node.buf_len
    if node.compressed:
        assert len(node.data) <= raw_len - (raw_len >> _KEEP_SHIFT), "useless compression kept"
    buf, ends, tags, times = _concat_tables(node._block_list(cache), node.ends_code)
    whole = node.whole
    if whole is not None:
        assert node.compressed and nb > 1 and whole.lru and whole in cache.lru
        assert whole.node is node and whole.index == -1
        assert (whole.buf == buf and list(whole.ends) == list(ends)
                and list(whole.tags) == list(tags) and list(whole.times) == list(times))
    assert node.first_time == times[0] and node.last_time == times[-1]
    assert node.tag_set.tolist() == sorted(set(tags)), "tag set not sorted or wrong"
    assert node.mem == node._sealed_mem()
    return buf, ends, tags, times


def _check_active(node, seal_owed: bool):
    """The active node: its own tables, not full unless its seal is owed
    (sealing it failed for lack of memory: see Stream._owe_seal)."""
    assert isinstance(node, ActiveNode)
    buf, ends, tags, times = node.decoded()
    if node.ends is None:  # compact: one entry, no tables, its payload immutable
        assert node.tags is None and node.times is None and node.count == 1 and type(node.buf) is bytes
    else:
        assert isinstance(node.buf, bytearray)
    count = len(times)
    assert count >= 1 and node.count == count and node.last_time == times[-1]
    assert (node.start + count == node.cap_end) == seal_owed, "full node left unsealed (or a seal owed by none)"
    assert len(buf) == ends[count]
    return buf, ends, tags, times


def _check_tables(buf, ends, tags, times, count: int) -> None:
    assert len(ends) == count + 1 and len(tags) == count and ends[0] == 0
    assert all(ends[j] <= ends[j + 1] for j in range(count)) and ends[count] <= len(buf)
    assert all(times[j] <= times[j + 1] for j in range(count - 1)), "times go backwards"


def _check_deleted(s, node, count: int) -> int:
    """The node's deleted bitmap; returns its deleted offsets >= first."""
    if node.deleted is None:
        assert node.ndel == 0
        return 0
    span = node.cap_end - node.start
    assert len(node.deleted) == (span + 7) // 8
    assert node.ndel == _popcount_range(node.deleted, 0, span)
    assert _popcount_range(node.deleted, count, span) == 0, "unwritten slot deleted"
    lo = max(s.first, node.start)
    return _popcount_range(node.deleted, lo - node.start, count)


def _check_tag_table(s, refs: list, used: set) -> None:
    """Exact reference counts, nothing leaked, free list and index exact."""
    tag_list = s._tag_list
    assert tag_list[0] is None and refs[0] == 0
    if s._refs is not None:
        assert len(s._refs) == len(tag_list)
    assert list(s._tag_refs) == refs, "tag reference counts"
    live = {t for t in range(1, len(tag_list)) if tag_list[t] is not None}
    assert live == used, "tag table differs from the tags the nodes use"
    assert sorted(s._free_ids or ()) == sorted(set(range(1, len(tag_list))) - live)
    assert s.tag_count() == len(live)
    index = s._tag_index
    if len(tag_list) <= SMALL_TAGS + 1 and type(index) is not TagDict:
        assert index is tag_list, "a small table is its own index"
    else:
        assert type(index) is TagDict and len(index) == len(live)
        for tag, tid in index.items():
            assert tag_list[tid] == tag
    for tid in live:
        assert s._tag_lookup(tag_list[tid]) == tid
    assert s._tag_mem == sum(sys.getsizeof(tag_list[t]) for t in live)


def check_cache(cache: BlockCache) -> None:
    """A decoded-block cache: bounded, byte count exact, links exact.
    O(blocks held)."""
    lru = cache.lru
    assert len(lru) <= cache.max_blocks
    assert cache.nbytes == sum(x.nbytes for x in lru)
    for x in lru:
        owner = x.node
        assert x.lru and owner.sealed and owner.compressed
        assert (owner.whole if x.index < 0 else owner.blocks[x.index]) is x
