"""Unit tests of the storage engine (engine.stream, engine.keyspace, engine.glob)."""

from __future__ import annotations

import os
import random

import pytest

from tstream.engine import BlockCache, Entry, Keyspace, Node, Stream, StreamConfig, compile_glob, glob_match
from tstream.engine import blocks as blocks_mod
from tstream.engine import codec as codec_mod
from tstream.engine import stream as stream_mod

T0 = 1_700_000_000_000_000_000  # a plausible "now" in ns


# The standalone streams of these tests share one decoded-block cache (a
# keyspace's streams do), so that the tests can watch and bound it.
CACHE: list = []


@pytest.fixture(autouse=True)
def small_cache(monkeypatch):
    shared = BlockCache(4, 1 << 30)
    monkeypatch.setattr(stream_mod, "BlockCache", lambda: shared)
    CACHE[:] = [shared]
    yield shared
    CACHE.clear()


def set_decoded_cache_limits(max_blocks: int, max_bytes: int) -> None:
    CACHE[0].set_limits(max_blocks, max_bytes)


def decoded_cache_bytes() -> int:
    return CACHE[0].nbytes


def clear_decoded_cache() -> None:
    CACHE[0].clear()


def lru():
    return CACHE[0].lru


def count_decompressions(monkeypatch, calls: list) -> None:
    real = BlockCache.decompress
    monkeypatch.setattr(BlockCache, "decompress", lambda self, b: calls.append(1) or real(self, b))


def filled(n: int, node_entries: int = 3, tag=lambda i: b"t%d" % (i % 3),
           data=lambda i: b"data-%d" % i) -> Stream:
    s = Stream(node_entries)
    for i in range(1, n + 1):
        assert s.append(tag(i), data(i), T0 + i) == i
    s._check()
    return s


def row(i: int, tag=lambda i: b"t%d" % (i % 3)) -> list:
    return [i, tag(i), b"data-%d" % i]


# ---------------------------------------------------------------------------
# empty stream, basic append/read
# ---------------------------------------------------------------------------

def test_empty_stream():
    s = Stream()
    s._check()
    assert (s.first, s.next_offset, s.last, s.length, s.nodes) == (1, 1, 0, 0, 0)
    assert s.read(1, 10) == []
    assert s.read(5, 10) == []
    assert s.get(1) is None
    assert list(s.iter_from(1)) == []
    assert s.evict_through(10) == 0
    assert s.evict_keep(0) == 0
    assert s.evict_older_than(T0) == 0
    assert s.delete(1) is False
    assert s.offset_at_time(0) == 1
    assert s.config == StreamConfig()
    assert s.memory_bytes() > 0


def test_node_entries_must_be_positive():
    with pytest.raises(ValueError):
        Stream(0)


def test_read_argument_checks():
    s = filled(3)
    with pytest.raises(ValueError):
        s.read(0, 1)
    with pytest.raises(ValueError):
        s.read(1, -1)
    assert s.read(1, 0) == []


def test_append_returns_consecutive_offsets_and_reads_back():
    s = filled(10, node_entries=4)
    assert (s.first, s.last, s.length, s.nodes) == (1, 10, 10, 3)
    assert s.read(1, 100) == [row(i) for i in range(1, 11)]
    assert s.read(4, 3) == [row(4), row(5), row(6)]  # across a node boundary
    assert s.read(10, 5) == [row(10)]                 # stops at the end
    assert s.read(11, 5) == []                        # past the end
    assert s.read(1000, 5) == []
    assert s.get(7) == Entry(7, b"t1", b"data-7", T0 + 7)
    assert s.get(11) is None
    assert [e.offset for e in s.iter_from(3)] == list(range(3, 11))


def test_read_returns_bytes_from_active_and_sealed_nodes():
    s = filled(5, node_entries=4)  # node 1 sealed, node 2 active
    for item in s.read(1, 5):
        assert type(item[1]) is bytes and type(item[2]) is bytes
    assert type(s.get(5).data) is bytes


def test_empty_tag_and_empty_data():
    s = Stream(2)
    s.append(b"", b"", T0)
    s.append(b"", b"x", T0)
    s.append(b"a", b"", T0)
    s._check()
    assert s.read(1, 3) == [[1, b"", b""], [2, b"", b"x"], [3, b"a", b""]]


@pytest.mark.parametrize("node_entries", [1, 2, 3])
def test_tiny_nodes(node_entries):
    s = filled(20, node_entries=node_entries)
    assert s.nodes == -(-20 // node_entries)
    assert s.read(1, 30) == [row(i) for i in range(1, 21)]
    assert s.evict_through(7) == 7
    s._check()
    assert s.read(6, 3) == [None, None, row(8)]
    assert s.nodes == -(-20 // node_entries) - 7 // node_entries


# ---------------------------------------------------------------------------
# eviction
# ---------------------------------------------------------------------------

def test_read_below_first_gives_nulls():
    s = filled(10, node_entries=4)
    assert s.evict_through(5) == 5
    s._check()
    assert s.first == 6 and s.length == 5
    assert s.read(1, 3) == [None, None, None]
    assert s.read(4, 4) == [None, None, row(6), row(7)]
    assert s.get(5) is None and s.get(6) == Entry(6, b"t0", b"data-6", T0 + 6)
    assert [e.offset for e in s.iter_from(1)] == [6, 7, 8, 9, 10]


def test_eviction_returns_memory_a_node_at_a_time():
    s = filled(12, node_entries=4)  # nodes [1-4] [5-8] [9-12]
    assert s.nodes == 3
    before = s.memory_bytes()
    assert s.evict_through(3) == 3
    assert s.nodes == 3 and s.memory_bytes() == before  # partly evicted node stays
    assert s.evict_through(4) == 1                       # exactly at the boundary
    assert s.nodes == 2 and s.memory_bytes() < before
    s._check()
    assert s.evict_through(4) == 0                       # already gone
    assert s.evict_through(8) == 4 and s.nodes == 1
    s._check()


def test_evict_through_is_clamped_to_last():
    s = filled(5)
    assert s.evict_through(100) == 5
    s._check()
    assert (s.first, s.next_offset, s.length, s.nodes) == (6, 6, 0, 0)
    assert s.append(b"x", b"y", T0) == 6   # offsets are never reused


def test_evict_everything_then_append_mid_node():
    s = filled(5, node_entries=4)    # nodes [1-4] sealed, [5..] active
    assert s.evict_keep(0) == 5      # BACKLOG 0
    s._check()
    assert (s.first, s.next_offset, s.length, s.nodes) == (6, 6, 0, 0)
    assert s.read(1, 10) == [None] * 5
    assert s.append(b"a", b"six", T0 + 10) == 6   # lands in the middle of [5-8]
    s._check()
    node = s.node_list()[0]
    assert (node.base, node.start, node.count) == (5, 6, 1)
    assert s.append_many([b"b", b"7", b"c", b"8", b"d", b"9"], T0 + 11) == 7
    s._check()
    assert s.nodes == 2 and s.node_list()[0].sealed
    assert s.read(4, 10) == [None, None, [6, b"a", b"six"], [7, b"b", b"7"],
                             [8, b"c", b"8"], [9, b"d", b"9"]]


def test_evict_everything_at_node_boundary_then_append():
    s = filled(8, node_entries=4)
    assert s.evict_keep(0) == 8
    s._check()
    assert s.nodes == 0
    assert s.append(b"a", b"nine", T0) == 9
    s._check()
    assert s.node_list()[0].start == s.node_list()[0].base == 9


def test_backlog_keep_n():
    s = filled(10, node_entries=3)
    assert s.evict_keep(4) == 6
    s._check()
    assert (s.first, s.length) == (7, 4)
    assert s.evict_keep(4) == 0
    assert s.evict_keep(10) == 0
    with pytest.raises(ValueError):
        s.evict_keep(-1)


def test_max_len_config_applies_on_every_write():
    s = Stream(3)
    s.config.max_len = 5
    for i in range(1, 21):
        s.append(b"t", b"%d" % i, T0 + i)
        s._check()
        assert s.length == min(i, 5)
    assert s.first == 16
    s.append_many([b"t", b"x"] * 7, T0 + 100)
    assert (s.first, s.last, s.length) == (23, 27, 5)
    s._check()


def test_time_eviction():
    s = Stream(3)
    for i in range(10):
        s.append(b"t", b"%d" % i, T0 + i * 1_000_000)  # one per ms
    s._check()
    assert s.evict_older_than(T0) == 0
    assert s.evict_older_than(T0 + 4_500_000) == 5   # entries at 0..4 ms
    s._check()
    assert s.first == 6
    assert s.evict_older_than(T0 + 4_500_000) == 0   # remembered floor
    assert s.evict_older_than(T0 + 5_000_000) == 0   # strictly older only
    assert s.evict_older_than(T0 + 5_000_001) == 1
    assert s.evict_older_than(T0 + 10**12) == 4
    s._check()
    assert s.length == 0 and s.first == s.next_offset == 11


def test_max_age_config():
    s = Stream(4)
    s.config.max_age_ms = 10
    for i in range(30):
        s.append(b"t", b"x", T0 + i * 1_000_000)
        s._check()
    # entries strictly older than now - 10 ms are gone
    assert s.first == 20 and s.length == 11
    assert s.enforce_limits(T0 + 100 * 1_000_000) == 11
    s._check()


def test_times_are_forced_non_decreasing():
    s = Stream(2)
    s.append(b"a", b"1", T0 + 100)
    s.append(b"a", b"2", T0 + 50)      # clock stepped back
    s.append_many([b"a", b"3"], T0)
    s._check()
    assert [s.get(i).time_ns for i in (1, 2, 3)] == [T0 + 100] * 3
    assert s.last_time == T0 + 100


def test_offset_at_time():
    s = Stream(3)
    for i in range(9):
        s.append(b"t", b"x", T0 + i * 10)
    assert s.offset_at_time(T0) == 1
    assert s.offset_at_time(T0 + 35) == 5
    assert s.offset_at_time(T0 + 40) == 5
    assert s.offset_at_time(T0 + 81) == 10
    s.evict_through(6)
    assert s.offset_at_time(T0) == 7


# ---------------------------------------------------------------------------
# deleted entries
# ---------------------------------------------------------------------------

def test_delete_in_the_middle():
    s = filled(10, node_entries=4)
    assert s.delete(6) is True
    assert s.delete(6) is False
    assert s.delete(11) is False and s.delete(0) is False
    s._check()
    assert s.length == 9 and s.first == 1
    assert s.read(5, 3) == [row(5), None, row(7)]
    assert s.get(6) is None and not s.is_held(6)
    assert [e.offset for e in s.iter_from(5)] == [5, 7, 8, 9, 10]
    # evicting over a deleted entry does not count it
    assert s.evict_through(7) == 6
    s._check()


def test_read_held_skips_missing_entries_and_says_where_to_go_on():
    s = filled(12, node_entries=4)
    s.delete(6)
    s.delete(7)
    s.evict_through(2)
    # from before first: evicted offsets are skipped like deleted ones
    assert s.read_held(1, 3) == ([row(3), row(4), row(5)], 6)
    # a gap inside the count: reads on past it, then goes on after the last returned
    assert s.read_held(5, 3) == ([row(5), row(8), row(9)], 10)
    # fewer than count to the end: goes on at next_offset
    assert s.read_held(10, 5) == ([row(10), row(11), row(12)], 13)
    assert s.read_held(13, 5) == ([], 13)
    s.delete(12)
    assert s.read_held(11, 5) == ([row(11)], 13)  # a trailing missing entry is passed over too
    # reads spanning sealed and active nodes, one entry or many, match read()
    t = filled(40, node_entries=16)
    for start in (1, 7, 15, 16, 17, 30):
        for count in (1, 2, 8, 9, 20):
            expected = [r for r in t.read(start, count) if r is not None]
            assert t.read_held(start, count)[0] == expected
            assert all(type(r[2]) is bytes for r in expected)  # never a view of a buffer


def _read_held_by_read(s: Stream, offset: int, count: int) -> tuple[list, int]:
    """read_held's answer spelled with read(): the reference for its short cut."""
    out: list = []
    while offset < s.next_offset:
        rows = s.read(offset, count - len(out))
        offset += len(rows)
        out += [r for r in rows if r is not None]
        if len(out) == count:
            return out, out[-1][0] + 1
    return out, max(offset, s.next_offset)


def test_read_held_of_the_active_node_matches_read_on_random_streams():
    # read_held reads the active node's entries straight from its tables when none
    # is deleted (a consumer group keeping up): the same rows and resume offset as
    # read() gives, whatever the node size, the deletions, evictions, a compact
    # one-entry active node, or a start before first or past the end.
    rng = random.Random(1914)
    for _ in range(150):
        s = Stream(rng.choice((1, 2, 3, 5, 8, 16)))
        for _ in range(rng.randrange(0, 40)):
            s.append(b"t%d" % rng.randrange(4), bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12))),
                     T0 + rng.randrange(100))
            if rng.random() < 0.1 and s.next_offset > 1:
                s.delete(rng.randrange(1, s.next_offset))
            if rng.random() < 0.05 and s.next_offset > 2:
                s.evict_through(rng.randrange(1, s.next_offset - 1))
        s._check()
        for _ in range(10):
            start = rng.randrange(1, s.next_offset + 3)
            count = rng.randrange(1, 14)
            got = s.read_held(start, count)
            assert got == _read_held_by_read(s, start, count), (start, count)
            assert all(type(r[2]) is bytes for r in got[0])  # never a view of the active buffer


def test_delete_first_moves_first():
    s = filled(10, node_entries=4)
    s.delete(3)
    s.delete(2)
    s._check()
    assert s.first == 1
    s.delete(1)
    s._check()
    assert s.first == 4 and s.length == 7  # 2 and 3 were already deleted
    s.delete(4)                            # last of node 1: node released
    s._check()
    assert s.first == 5 and s.nodes == 2


def test_delete_everything():
    s = filled(6, node_entries=4)
    for off in (6, 2, 5, 3, 4, 1):
        assert s.delete(off)
        s._check()
    assert (s.length, s.first, s.nodes) == (0, 7, 0)
    assert s.read(1, 10) == [None] * 6
    assert s.append(b"x", b"y", T0) == 7
    s._check()


def test_delete_on_sealed_node_and_in_active_node_then_seal():
    s = filled(6, node_entries=4)
    s.delete(2)   # sealed node
    s.delete(6)   # active node
    s._check()
    s.append(b"t", b"7", T0)
    s.append(b"t", b"8", T0)  # seals the node holding the deleted offset 6
    s._check()
    assert s.read(1, 8)[1] is None and s.read(1, 8)[5] is None


def test_evict_keep_counts_offsets_not_entries():
    s = filled(10, node_entries=4)
    s.delete(8)
    assert s.evict_keep(3) == 7   # keeps offsets 8..10, of which 8 is deleted
    s._check()
    assert s.first == 9 and s.length == 2


# ---------------------------------------------------------------------------
# tags
# ---------------------------------------------------------------------------

def test_tag_refcounts_free_evicted_tags():
    s = Stream(2)
    s.append(b"old", b"1", T0)
    s.append(b"old", b"2", T0)          # node [1-2] sealed, uses "old"
    s.append(b"new", b"3", T0)
    s._check()
    assert s.tag_count() == 2
    s.evict_through(2)
    s._check()
    assert s.tag_count() == 1 and s._tag_lookup(b"old") is None
    old_len = len(s._tag_list)
    s.append(b"newer", b"4", T0)        # reuses the freed id
    s._check()
    assert len(s._tag_list) == old_len


def test_tag_kept_while_active_node_uses_it():
    s = Stream(2)
    s.append(b"a", b"1", T0)
    s.append(b"b", b"2", T0)            # sealed [a, b]
    s.append(b"a", b"3", T0)            # active uses a
    s.evict_through(2)
    s._check()
    assert s.get(3).tag == b"a" and s.tag_count() == 1


def test_unique_tags_do_not_leak():
    s = Stream(10)
    for i in range(2000):
        s.append(b"u%d" % i, b"", T0)
        s.evict_keep(25)
    s._check()
    assert s.tag_count() <= 35 and len(s._tag_list) <= 50


def test_bad_input_changes_nothing():
    s = filled(4, node_entries=3)
    before = s.read(1, 10)
    with pytest.raises(TypeError):
        s.append("str-tag", b"x", T0)
    with pytest.raises(TypeError):
        s.append(b"fresh-tag", "str-data", T0)
    with pytest.raises(TypeError):
        s.append_many([b"a", b"x", b"b", "not bytes"], T0)
    with pytest.raises(TypeError):
        s.append_many([b"fresh1", b"x", "str", b"y"], T0)
    with pytest.raises(ValueError):
        s.append_many([b"a", b"x", b"b"], T0)
    s._check()
    assert s.read(1, 10) == before and s.next_offset == 5
    assert s.append_many([], T0) == 5 and s.append_many([b"x"], T0, 1) == 5


# ---------------------------------------------------------------------------
# append_many
# ---------------------------------------------------------------------------

def test_append_many_spans_nodes_and_skips_prefix():
    s = Stream(4)
    s.append(b"a", b"0", T0)
    flat = [b"CMD", b"key"]
    for i in range(1, 11):
        flat += [b"t%d" % (i % 2), b"v%d" % i]
    assert s.append_many(flat, T0 + 5, start=2) == 2
    s._check()
    assert s.last == 11 and s.nodes == 3
    assert s.read(2, 3) == [[2, b"t1", b"v1"], [3, b"t0", b"v2"], [4, b"t1", b"v3"]]
    assert {s.get(i).time_ns for i in range(2, 12)} == {T0 + 5}


def test_append_many_accepts_bytes_like_data():
    s = Stream(4)
    s.append_many([b"a", bytearray(b"xy"), b"b", memoryview(b"zw")], T0)
    s.append(b"c", bytearray(b"q"), T0)
    assert s.read(1, 3) == [[1, b"a", b"xy"], [2, b"b", b"zw"], [3, b"c", b"q"]]


# ---------------------------------------------------------------------------
# sealed nodes, compression, the decoded cache
# ---------------------------------------------------------------------------

def text(i: int) -> bytes:
    return (b"the quick brown fox %d jumps over the lazy dog " % (i % 10)) * 3


def test_sealed_nodes_are_compressed_and_read_through_the_cache(monkeypatch):
    s = Stream(50)
    for i in range(200):
        s.append(b"t%d" % (i % 7), text(i), T0 + i)
    s._check()
    nodes = s.node_list()
    assert all(n.sealed and n.compressed for n in nodes[:-1] if n.count == 50) or True
    assert sum(n.compressed for n in nodes) == 4
    for n in nodes:
        assert len(n.data) < n.buf_len  # really smaller
        # ~4 KiB raw blocks: 50 entries of ~150 bytes make 2 blocks of 25
        assert (n.nblocks, n.block_entries) == (2, 25)
    clear_decoded_cache()  # drops decoded views
    assert nodes[0].blocks == [None, None] and getattr(nodes[0], "buf", None) is None
    calls: list = []
    count_decompressions(monkeypatch, calls)
    got = s.read(3, 20)
    assert len(calls) == 1, "one decompression for one block"
    assert got == [[i + 1, b"t%d" % (i % 7), text(i)] for i in range(2, 22)]
    got = s.read(3, 40)
    assert len(calls) == 2, "the second block of the node only"
    assert got == [[i + 1, b"t%d" % (i % 7), text(i)] for i in range(2, 42)]
    s.read(10, 20)
    s.get(30)
    assert len(calls) == 2, "cache hit"
    s.read(45, 10)  # crosses into node 2 (its first block)
    assert len(calls) == 3
    s._check()


def test_random_payload_kept_raw():
    s = Stream(20)
    for _i in range(20):
        s.append(b"t", os.urandom(1000), T0)
    node = s.node_list()[0]
    assert node.sealed and not node.compressed and node.nblocks == 1
    assert node.blocks[0].buf is node.data and node.block_entries == 20
    s._check()
    assert len(s.read(1, 20)) == 20


def test_fresh_sealed_node_is_cached_and_cache_is_bounded():
    set_decoded_cache_limits(3, 1 << 30)
    s = Stream(10)
    for i in range(100):
        s.append(b"t", text(i), T0)
    s._check()
    assert len(lru()) == 3
    assert decoded_cache_bytes() == sum(b.nbytes for b in lru())
    assert decoded_cache_bytes() > sum(len(b.buf) for b in lru())  # + overhead
    set_decoded_cache_limits(8, 1)  # byte budget keeps at least one block
    assert len(lru()) == 1
    s.clear_cache()
    assert len(lru()) == 0 and decoded_cache_bytes() == 0
    assert s.read(1, 100)[0] == [1, b"t", text(0)]
    s._check()


def test_node_blob_roundtrip():
    s = Stream(8)
    for i in range(13):
        s.append(b"t%d" % (i % 3), text(i), T0 + i)
    sealed, active = s.node_list()
    for node in (sealed, active):
        clone = Node.from_blob(node.blob(), 8)
        assert (clone.base, clone.start, clone.count, clone.sealed) == (
            node.base, node.start, node.count, node.sealed)
        a = node.decoded(CACHE[0])
        b = clone.decoded(CACHE[0])
        assert bytes(a[0][:a[1][node.count]]) == bytes(b[0][:b[1][node.count]])
        assert list(a[1]) == list(b[1]) and list(a[2]) == list(b[2]) and list(a[3]) == list(b[3])
    assert sealed.sealed_bytes() == sealed.blob()
    with pytest.raises(ValueError):
        Node.from_blob(b"XX" + sealed.blob()[2:], 8)
    with pytest.raises(ValueError):
        Node.from_blob(sealed.blob(), 4)  # does not fit a smaller node


def test_export_state_roundtrip():
    s = Stream(4)
    s.config.max_len = 100
    s.config.allow_atomic = False
    for i in range(1, 15):
        s.append(b"t%d" % (i % 5), text(i), T0 + i)
    s.evict_through(2)
    s.delete(7)
    s.delete(13)
    s._check()
    state = s.export_state()
    r = Stream.from_state(state)
    r._check()
    assert r.config == s.config
    assert (r.first, r.next_offset, r.length, r.nodes, r.last_time) == (
        s.first, s.next_offset, s.length, s.nodes, s.last_time)
    assert r.read(1, 20) == s.read(1, 20)
    assert r.append(b"t9", b"more", T0) == s.append(b"t9", b"more", T0)
    r._check()
    empty = Stream.from_state(Stream(7).export_state())
    empty._check()
    assert empty.node_entries == 7 and empty.next_offset == 1
    bad = dict(state, next_offset=state["next_offset"] + 1)
    with pytest.raises(ValueError):
        Stream.from_state(bad)


# ---------------------------------------------------------------------------
# memory accounting
# ---------------------------------------------------------------------------

def test_memory_bytes_tracks_growth_and_release():
    s = Stream(100)
    base = s.memory_bytes()
    for i in range(1000):
        s.append(b"tag%d" % (i % 10), text(i), T0)
    grown = s.memory_bytes()
    assert grown > base
    # compressed: well under the raw payload size
    assert grown < sum(len(text(i)) for i in range(1000))
    s.evict_keep(0)
    s._check()
    assert s.nodes == 0 and s.memory_bytes() < base + 1000


def test_iter_from_survives_writes_and_evictions():
    s = filled(6, node_entries=3)
    it = s.iter_from(2)
    assert next(it).offset == 2
    s.append(b"t", b"7", T0)
    s.evict_through(4)                # 3 and 4 evicted while suspended
    assert [e.offset for e in it] == [5, 6, 7]
    s2 = filled(4, node_entries=3)
    it2 = s2.iter_from(4)
    assert next(it2).offset == 4
    s2.evict_keep(0)                  # everything goes, node dropped
    s2.append(b"n", b"fresh", T0)     # new node reuses the range of the old one
    assert [e.offset for e in it2] == [5]


# ---------------------------------------------------------------------------
# keyspace and glob
# ---------------------------------------------------------------------------

def test_keyspace_basics():
    ks = Keyspace()
    assert len(ks) == 0 and ks.get(b"a") is None
    s = ks.get_or_create(b"a", node_entries=7)
    assert s.node_entries == 7 and ks.get_or_create(b"a") is s
    assert b"a" in ks and len(ks) == 1
    ks.get_or_create(b"b")
    assert sorted(ks.keys(b"*")) == [b"a", b"b"]
    assert ks.delete(b"a") is True and ks.delete(b"a") is False
    assert list(ks) == [b"b"]
    replacement = Stream(3)
    ks.put(b"b", replacement)
    assert ks.get(b"b") is replacement and len(ks) == 1
    ks.flush()
    assert len(ks) == 0 and ks.scan(0, 10) == (0, [])


def test_scan_cursor_walk():
    ks = Keyspace()
    for i in range(25):
        ks.get_or_create(b"k%02d" % i)
    cursor, seen, rounds = 0, [], 0
    while True:
        cursor, keys = ks.scan(cursor, 10)
        seen += keys
        rounds += 1
        if cursor == 0:
            break
    assert rounds == 3 and sorted(seen) == sorted(ks.keys(b"*"))
    assert ks.scan(0, 100) == (0, ks.keys(b"*"))
    cursor, keys = ks.scan(0, 10, b"k1?")
    assert keys == [b"k10", b"k11", b"k12", b"k13", b"k14"] or set(keys) <= set(ks.keys(b"k1?"))


@pytest.mark.parametrize("pattern,string,expected", [
    (b"*", b"", True),
    (b"*", b"anything", True),
    (b"h?llo", b"hello", True),
    (b"h?llo", b"hllo", False),
    (b"h*llo", b"heeeello", True),
    (b"h*llo", b"hllo", True),
    (b"h[ae]llo", b"hello", True),
    (b"h[ae]llo", b"hallo", True),
    (b"h[ae]llo", b"hillo", False),
    (b"h[^e]llo", b"hallo", True),
    (b"h[^e]llo", b"hello", False),
    (b"h[a-b]llo", b"hbllo", True),
    (b"h[a-b]llo", b"hcllo", False),
    (b"h[b-a]llo", b"hallo", True),      # reversed range
    (b"h\\*llo", b"h*llo", True),
    (b"h\\*llo", b"hello", False),
    (b"[\\]]", b"]", True),
    (b"[]]", b"]", False),               # "[]" is empty, then literal "]"
    (b"[^]", b"x", True),
    (b"[abc", b"b", True),               # unterminated set
    (b"[a-]x", b"]", True),              # range a..] swallows "]", x joins the set
    (b"[a-]x", b"]x", False),
    (b"a\\", b"a\\", True),              # trailing backslash is literal
    (b"**", b"", False),                 # Redis never matches "" but with "*"
    (b"", b"", True),
    (b"user:*:name", b"user:42:name", True),
    (b"*.*", b"a.b.c", True),
    (b"a*b*c", b"aXbYc", True),
    (b"a*b*c", b"aXbY", False),
])
def test_glob_known_cases(pattern, string, expected):
    assert glob_match(pattern, string) is expected


def test_glob_binary_safe_and_cached():
    assert glob_match(b"\x00?\xff", b"\x00\n\xff")
    assert glob_match(b"[\x00-\x02]*", b"\x01abc")
    assert compile_glob(b"a*") is compile_glob(b"a*")


def test_keys_with_pattern():
    ks = Keyspace()
    for k in (b"user:1", b"user:2", b"order:1", b"", b"user:10"):
        ks.get_or_create(k)
    assert sorted(ks.keys(b"user:?")) == [b"user:1", b"user:2"]
    assert sorted(ks.keys(b"*:1*")) == [b"order:1", b"user:1", b"user:10"]
    assert b"" in ks.keys(b"*")


def test_node_layout_offsets_seek_is_arithmetic():
    s = filled(1000, node_entries=7, tag=lambda i: b"x", data=lambda i: b"%d" % i)
    rng = random.Random(1)
    for _ in range(50):
        off = rng.randrange(1, 1001)
        assert s.get(off).data == b"%d" % off
    s.evict_through(500)
    assert s.nodes == 1000 // 7 + 1 - 500 // 7
    assert s.get(501).data == b"501" and s.get(500) is None


def test_damaged_blobs_are_rejected():
    s = Stream(4)
    for i in range(4):
        s.append(b"t", text(i), T0)
    blob = s.node_list()[0].blob()
    for bad in (blob[:10], blob[:-5], blob[:40] + bytes(len(blob) - 40)):
        with pytest.raises(ValueError):
            Node.from_blob(bad, 4)
    header, body = s.node_list()[0].blob_parts()
    assert header + body == blob and body is s.node_list()[0].data


def test_incompressible_payloads_switch_to_fast_sealing():
    s = Stream(50)
    for i in range(50):
        s.append(b"t", os.urandom(200), T0 + i)
    assert s._fast_seal is True          # first node barely compressed
    for i in range(50):
        s.append(b"t", text(i), T0 + i)
    assert s._fast_seal is False         # compressible again: level 1
    s._check()
    assert s.read(1, 100)[60][2] == text(10)


def test_clear_cache_only_touches_own_nodes():
    a, b = Stream(10), Stream(10)
    for i in range(30):
        a.append(b"a", text(i), T0)
        b.append(b"b", text(i), T0)
    assert len(lru()) == 4
    a.clear_cache()
    assert lru() and all(blk.node in b.node_list() for blk in lru())
    a._check()
    b._check()


def test_keyspace_streams_dict_is_stable_and_streams_have_groups():
    ks = Keyspace()
    live = ks.streams
    s = ks.get_or_create(b"k")
    assert live[b"k"] is s and s.groups == {}
    ks.flush()
    assert ks.streams is live and live == {}


def test_offset_table_widens_when_a_node_buffer_outgrows_it():
    # Stand-in for a node buffer passing 4 GiB: a 1-byte offset table overflows
    # at 256, which takes the same path as array('I') overflowing at 2**32.
    s = Stream(4)
    s.append(b"t", b"small", T0)
    s._active.expand()  # a node of one entry keeps no tables: give it them
    s._active.ends = stream_mod.array("B", s._active.ends)
    s.append(b"t", text(1) * 3, T0)
    assert s._active.ends.typecode == "Q"
    s.append(b"t", text(2), T0)
    s.append(b"t", text(3), T0)          # seals with a 64-bit offset table
    node = s.node_list()[0]
    assert node.sealed and node.ends_code == "Q"
    s._check()
    want = [[1, b"t", b"small"], [2, b"t", text(1) * 3], [3, b"t", text(2)], [4, b"t", text(3)]]
    assert s.read(1, 4) == want
    clone = Stream.from_state(s.export_state())
    clone._check()
    assert clone.read(1, 4) == want


# ---------------------------------------------------------------------------
# blocks: a sealed node is compressed as independently decompressible blocks
# ---------------------------------------------------------------------------

@pytest.fixture
def small_blocks(monkeypatch):
    """~400-byte blocks: 5 entries of ~80 raw bytes, block boundaries everywhere."""
    monkeypatch.setattr(blocks_mod, "BLOCK_BYTES", 400)


def blocky_payload(i: int) -> bytes:
    return text(i)[:60 + i % 7]


def blocky(n: int = 95, node_entries: int = 20) -> tuple[Stream, dict]:
    """A stream of ``n`` compressible entries with distinct times, and its model."""
    s = Stream(node_entries)
    model = {}
    for i in range(1, n + 1):
        tag = b"t%d" % (i % 3)
        assert s.append(tag, blocky_payload(i), T0 + 10 * i) == i
        model[i] = (tag, blocky_payload(i), T0 + 10 * i)
    s._check()
    return s, model


def model_read(model: dict, nxt: int, off: int, count: int) -> list:
    return [None if o not in model else [o, model[o][0], model[o][1]]
            for o in range(off, min(off + count, nxt))]


def counting_decompressor(monkeypatch) -> list:
    calls: list = []
    count_decompressions(monkeypatch, calls)
    return calls


def test_block_geometry_follows_block_bytes(small_blocks):
    s, _ = blocky()
    sealed = [n for n in s.node_list() if n.sealed]
    assert len(sealed) == 4
    for node in sealed:
        assert node.compressed and node.block_entries == 5 and node.nblocks == 4
        assert len(node.block_offs) == 5 and node.block_offs[-1] == len(node.data)
        assert node.raw_len / node.nblocks < 2 * blocks_mod.BLOCK_BYTES
    assert s._active.nblocks == 0


def test_default_blocks_are_about_4_kib():
    s = Stream(1000)
    for i in range(1000):
        s.append(b"tag%05d" % (i % 100), (text(i) * 2)[:100], T0 + i)
    node = s.node_list()[0]
    assert node.sealed and node.compressed
    # 100-byte payloads + 16 bytes of tables: 35 entries (~4 KiB) per block
    assert node.block_entries == 35 and node.nblocks == 29
    assert 3500 < node.raw_len / node.nblocks < 4700
    s._check()


def test_block_size_adapts_to_huge_and_tiny_entries(small_blocks):
    big = Stream(6)
    for i in range(6):
        big.append(b"t", text(i) * 10, T0)  # ~1.4 KB each: one entry per block
    node = big.node_list()[0]
    assert node.block_entries == 1 and node.nblocks == 6
    assert [e.data for e in big.iter_from(1)] == [text(i) * 10 for i in range(6)]
    tiny = Stream(7)
    for _ in range(7):
        tiny.append(b"t", b"x", T0)  # 7 entries fit one block
    assert tiny.node_list()[0].nblocks == 1
    big._check()
    tiny._check()


def test_reads_spanning_blocks_and_nodes_match_a_model(small_blocks):
    set_decoded_cache_limits(2, 1 << 30)  # blocks are decompressed over and over
    s, model = blocky()
    nxt = s.next_offset
    for off in range(1, nxt + 2):
        for count in (0, 1, 2, 4, 5, 6, 9, 11, 19, 21, 45):
            assert s.read(off, count) == model_read(model, nxt, off, count), (off, count)
        if off < nxt:
            assert tuple(s.get(off)) == (off, *model[off])
            assert s.time_of(off) == model[off][2]
    for off in (1, 5, 6, 20, 21, 40, 41, 77, 81, 95):
        want = [(o, *model[o]) for o in range(off, nxt)]
        assert [tuple(e) for e in s.iter_from(off)] == want
    assert_columns_match_iter_from(s)
    s._check()


def assert_read_each_matches_read(s) -> None:
    """read_each gives, for each offset, what read(offset, 1) holds (None and None
    for a missing one or one past the end), in any order, repeated, and the
    payloads are bytes."""
    nxt = s.next_offset
    orders = [list(range(1, nxt + 3)), list(range(nxt + 2, 0, -1)), [o * 7 % (nxt + 2) + 1 for o in range(3 * nxt)],
              [5, 5, 5, 1, nxt - 1, nxt, nxt + 10, 2**40, 6, 7], [], [3]]
    for offsets in orders:
        tags, datas = s.read_each(offsets)
        want = [s.read(o, 1) for o in offsets]
        assert [[o, t, d] if t is not None else None for o, t, d in zip(offsets, tags, datas)] == \
            [(r[0] if r else None) for r in want]
        assert all(t is None and d is None for t, d, r in zip(tags, datas, want) if not r or r[0] is None)
        assert all(type(d) is bytes for d in datas if d is not None)


def test_read_each_matches_read_over_blocks_nodes_and_holes(small_blocks):
    set_decoded_cache_limits(2, 1 << 30)  # blocks are decompressed over and over (and evicted in hand)
    s, _ = blocky()
    assert_read_each_matches_read(s)  # sealed blocks, the active node's entries, past the end
    for off in (8, 9, 13, 24, 60, 95):
        s.delete(off)  # deleted entries, in sealed blocks and in the active node
    assert_read_each_matches_read(s)
    s.evict_through(27)  # first inside a block of node 1
    assert s.first == 28
    assert_read_each_matches_read(s)
    s.evict_through(94)  # only the active node's last entry held
    assert_read_each_matches_read(s)
    compact = Stream(20)
    compact.append(b"t", b"only", T0)  # a compact node of one entry
    assert_read_each_matches_read(compact)
    assert compact.read_each([1, 1, 2]) == ([b"t", b"t", None], [b"only", b"only", None])
    s._check()


def assert_columns_match_iter_from(s):
    """read_columns and entries_at give what iter_from yields, as columns."""
    for off in range(1, s.next_offset + 2):
        entries = list(s.iter_from(off))
        for count in (0, 1, 2, 5, 9, 21, 45, 1000):
            want = [[e[k] for e in entries[:count]] for k in range(4)]
            cols = s.read_columns(off, count)
            assert [list(col) for col in cols] == want, (off, count)
            assert all(type(data) is bytes for data in cols[2])
        assert [list(col) for col in s.entries_at(range(off, off + 30, 3))] == \
            [[e[k] for e in entries if e.offset < off + 30 and (e.offset - off) % 3 == 0] for k in range(4)]


def test_read_decompresses_only_the_blocks_it_touches(small_blocks, monkeypatch):
    set_decoded_cache_limits(1000, 1 << 30)
    s, model = blocky()
    clear_decoded_cache()
    calls = counting_decompressor(monkeypatch)
    assert s.read(7, 3) == model_read(model, 96, 7, 3)         # inside block 1 of node 0
    assert len(calls) == 1
    assert s.read(9, 3) == model_read(model, 96, 9, 3)         # blocks 1 and 2
    assert len(calls) == 2
    assert s.read(19, 4) == model_read(model, 96, 19, 4)       # node 0 block 3, node 1 block 0
    assert len(calls) == 4
    assert s.read(6, 15) == model_read(model, 96, 6, 15)       # all cached now
    assert len(calls) == 4
    s.get(33)                                                  # node 1, block 2
    assert len(calls) == 5
    s.read(1, 200)                                             # the 16 - 5 others
    assert len(calls) == 16
    s._check()


def test_fresh_blocks_are_cached_and_tail_reads_do_not_decompress(small_blocks, monkeypatch):
    set_decoded_cache_limits(1000, 1 << 30)
    clear_decoded_cache()
    calls = counting_decompressor(monkeypatch)
    s, model = blocky(40)
    calls.clear()  # _check() decompresses privately
    # the newest FRESH_CACHED_BLOCKS blocks of each sealed node are decoded
    assert blocks_mod.FRESH_CACHED_BLOCKS == 2
    cached = sorted((b.node.start, b.index) for b in lru())
    assert cached == [(1, 2), (1, 3), (21, 2), (21, 3)]
    assert s.read(31, 10) == model_read(model, 41, 31, 10)
    assert calls == []
    assert s.read(1, 40) == model_read(model, 41, 1, 40)
    assert len(calls) == 4


def render_pieces(offsets, tags, datas, times) -> list:
    """A renderer for Stream.read_pieces: each entry's fields in one bytes object."""
    return [b"%d|%s|%s|%d" % (o, t, d, tm) for o, t, d, tm in zip(offsets, tags, datas, times)]


def read_from_columns(s: Stream, off: int, count: int) -> bool:
    """True when ``read_pieces`` sends the read to the columns (and they are read_columns')."""
    got = s.read_pieces(off, count, render_pieces)
    return got.__class__ is tuple and got == s.read_columns(off, count)


def model_pieces(s: Stream, model: dict, off: int, count: int) -> list:
    off = max(off, s.first)
    return [b"%d|%s|%s|%d" % (o, *model[o]) for o in range(off, min(off + count, s.next_offset))]


def test_read_pieces_renders_a_block_on_its_second_read_only(small_blocks):
    set_decoded_cache_limits(100, 1 << 30)
    s, model = blocky()  # nodes of 20 (4 sealed, the active one holds 81..95), blocks of 5
    # a tail reader, pages of 7 across the sealed nodes: every block read once, none rendered
    for off in range(1, 81, 7):
        assert read_from_columns(s, off, 7)
    assert not any(b.pieces for b in lru())
    # reading again renders the blocks as they are met: the second read of 1..40 is served whole
    assert s.read_pieces(1, 40, render_pieces) == model_pieces(s, model, 1, 40)
    assert all(b.pieces is not None for b in lru() if b.node.start < 41)
    assert s.read_pieces(3, 9, render_pieces) == model_pieces(s, model, 3, 9)
    # the active node has no pieces kept: a range reaching it is None
    assert read_from_columns(s, 75, 10)
    assert read_from_columns(s, 200, 10)
    s._check()
    # random ranges: a list only where every block was read twice, and then the right one
    rng = random.Random(3)
    served = 0
    for _ in range(300):
        off, count = rng.randrange(-2, 100), rng.randrange(1, 30)
        got = s.read_pieces(off, count, render_pieces)
        if got.__class__ is list:
            served += 1
            assert got == model_pieces(s, model, off, count)
        else:
            assert got == s.read_columns(off, count)
    assert served > 100
    s._check()
    # deleted entries: their node's range is read from the columns again
    assert s.delete(12)
    assert read_from_columns(s, 10, 5)
    assert s.read_pieces(21, 5, render_pieces) == model_pieces(s, model, 21, 5)
    # evicted up to the middle of a block: from the first held entry on
    s.evict_through(22)
    assert s.read_pieces(1, 6, render_pieces) == model_pieces(s, model, 23, 6)
    s._check()


def test_read_pieces_decompresses_no_block_twice(small_blocks, monkeypatch):
    """A read sent to the columns decodes its blocks there only, even when the
    cache holds fewer blocks than the read spans (a tail reader pays nothing)."""
    s, model = blocky()
    set_decoded_cache_limits(2, 1 << 30)
    clear_decoded_cache()
    calls = counting_decompressor(monkeypatch)
    assert read_from_columns(s, 1, 20)  # 4 blocks
    assert len(calls) == 8  # read_pieces' 0, then read_columns' 4 (and the check's own read_columns' 4)
    assert not any(b.pieces for b in lru())


def table_entries(s: Stream, tables: list) -> list:
    """The entries ``tables`` (Stream.read_tables) hold, checked consecutive."""
    out = []
    at = tables[0][6] if tables else None
    for buf, ends, tags, times, i, j, first in tables:
        assert first == at and 0 <= i <= j < len(ends)
        out += [(first + k - i, s.tag_list[tags[k]], bytes(buf[ends[k]:ends[k + 1]]), times[k]) for k in range(i, j)]
        at = first + j - i
    return out


def test_read_tables_hold_what_read_columns_reads(small_blocks):
    """Sealed nodes of several blocks, the active node, a head evicted to the
    middle of a block, a small cache (blocks decoded again): read_tables'
    tables hold read_columns' entries; None once a node of the range has a
    deleted entry (read_columns skips it)."""
    s, model = blocky()
    rng = random.Random(5)
    for cache_blocks in (100, 2):
        set_decoded_cache_limits(cache_blocks, 1 << 30)
        for _ in range(300):
            off, count = rng.randrange(-2, 100), rng.choice((0, 1, 3, 7, 20, 40, 120))
            assert table_entries(s, s.read_tables(off, count)) == list(zip(*s.read_columns(off, count)))
    s.evict_through(12)
    for off in range(0, 100, 3):
        assert table_entries(s, s.read_tables(off, 9)) == list(zip(*s.read_columns(off, 9)))
    assert s.delete(50)
    assert s.read_tables(41, 5) is None and s.read_tables(30, 30) is None
    assert table_entries(s, s.read_tables(61, 30)) == list(zip(*s.read_columns(61, 30)))
    s._check()


def test_rendered_pieces_count_in_the_cache_bound(small_blocks):
    set_decoded_cache_limits(100, 1 << 30)
    s, model = blocky()
    for _ in range(2):
        s.read_pieces(1, 80, render_pieces)
    rendered = [b for b in lru() if b.pieces is not None]
    assert len(rendered) == 16
    plain = [b for b in lru() if b.pieces is None]
    assert decoded_cache_bytes() == sum(b.nbytes for b in lru())
    for b in rendered:
        assert b.nbytes == len(b.buf) + blocks_mod._BLOCK_OVERHEAD + blocks_mod.pieces_bytes(b.pieces)
        assert blocks_mod.pieces_bytes(b.pieces) > sum(map(len, b.pieces))
    assert all(b.nbytes == len(b.buf) + blocks_mod._BLOCK_OVERHEAD for b in plain)
    s._check()
    # a byte bound of 3 rendered blocks: pieces make room by evicting, and leave with their block
    budget = 3 * max(b.nbytes for b in rendered)
    set_decoded_cache_limits(100, budget)
    assert decoded_cache_bytes() <= budget
    for _ in range(3):
        for off in range(1, 80, 5):
            s.read_pieces(off, 5, render_pieces)
            assert decoded_cache_bytes() <= budget
            assert decoded_cache_bytes() == sum(b.nbytes for b in lru())
    s._check()
    kept = {id(b) for b in lru()}
    dropped = [b for node in s.node_list() if node.sealed for b in node.blocks if b is not None and id(b) not in kept]
    assert not dropped  # an evicted block is unlinked from its node: its pieces are gone with it
    clear_decoded_cache()
    assert decoded_cache_bytes() == 0
    assert read_from_columns(s, 1, 5)  # decoded afresh: a first read again (the columns' read decodes it)
    assert s.read_pieces(1, 5, render_pieces) == model_pieces(s, model, 1, 5)  # and counts it: the second renders


def test_block_cache_is_bounded_by_count_and_bytes(small_blocks, monkeypatch):
    set_decoded_cache_limits(3, 1 << 30)
    s, model = blocky()
    assert len(lru()) == 3
    s.read(1, 95)
    assert len(lru()) == 3
    s._check()
    one = max(b.nbytes for b in lru())
    set_decoded_cache_limits(100, 2 * one)
    s.read(1, 95)
    assert 1 <= len(lru()) <= 2 and decoded_cache_bytes() <= 2 * one
    assert decoded_cache_bytes() == sum(b.nbytes for b in lru())
    s._check()
    set_decoded_cache_limits(100, 1)  # the byte budget keeps one block at least
    assert len(lru()) == 1
    s._check()


def test_whole_node_decode_is_one_cached_entry(small_blocks, monkeypatch):
    set_decoded_cache_limits(1000, 1 << 30)
    s, model = blocky()
    clear_decoded_cache()
    node = s.node_list()[1]
    calls = counting_decompressor(monkeypatch)
    buf, ends, tags, times = node.decoded(CACHE[0])
    assert len(calls) == node.nblocks
    assert len(lru()) == 1 and node.whole is next(iter(lru()))
    for p in range(node.count):
        o = node.start + p
        assert bytes(buf[ends[p]:ends[p + 1]]) == model[o][1]
        assert s._tag_list[tags[p]] == model[o][0] and times[p] == model[o][2]
        assert node.tag_id_at(p, CACHE[0]) == tags[p] and node.time_at(p, CACHE[0]) == times[p]
    node.decoded(CACHE[0])
    assert len(calls) == 2 * node.nblocks  # whole hit; tag_id_at/time_at decoded each block once
    s._check()
    s.clear_cache()
    assert node.whole is None and not lru() and decoded_cache_bytes() == 0
    s._check()


def test_deletes_inside_blocks(small_blocks):
    set_decoded_cache_limits(2, 1 << 30)
    s, model = blocky()
    # first, last and middle entries of blocks, a whole block, across nodes
    for off in (5, 6, 10, 13, 16, 17, 18, 19, 20, 21, 40, 41, 58, 94, 95):
        assert s.delete(off) is True
        del model[off]
        assert s.delete(off) is False
        s._check()
    nxt = s.next_offset
    for off in range(1, nxt + 1):
        for count in (1, 3, 5, 7, 22):
            assert s.read(off, count) == model_read(model, nxt, off, count)
        assert (s.get(off) is None) == (off not in model)
    assert [e.offset for e in s.iter_from(1)] == sorted(model)
    assert_columns_match_iter_from(s)
    # evict into the middle of a block, then delete the new first entry
    s.evict_through(23)
    model = {o: v for o, v in model.items() if o > 23}
    assert s.first == 24 and s.delete(24) and s.first == 25
    del model[24]
    s._check()
    assert s.read(1, 100) == model_read(model, nxt, 1, 100)
    assert s.length == len(model)
    clone = Stream.from_state(s.export_state())
    clone._check()
    assert clone.read(1, 100) == s.read(1, 100)


def test_offset_at_time_bisects_blocks(small_blocks):
    set_decoded_cache_limits(2, 1 << 30)
    s, model = blocky()
    for t in range(T0, T0 + 10 * 97, 3):
        want = min((o for o, v in model.items() if v[2] >= t), default=s.next_offset)
        assert s.offset_at_time(t) == want, t
    s.evict_through(27)  # first inside block 1 of node 1
    for t in range(T0, T0 + 10 * 40, 7):
        want = min((o for o, v in model.items() if v[2] >= t and o > 27), default=s.next_offset)
        assert s.offset_at_time(t) == want, t
    assert s.evict_older_than(T0 + 10 * 33 + 1) == 6 and s.first == 34
    s._check()


def test_block_blob_roundtrip(small_blocks):
    s, model = blocky(95)
    s.append(b"r", os.urandom(4000), T0 + 10_000)  # an incompressible node (raw, one block)
    for _i in range(19):
        s.append(b"r", os.urandom(40), T0 + 10_000)
    s.append(b"a", b"active", T0 + 20_000)
    s._check()
    kinds = set()
    for node in s.node_list():
        header, body = node.blob_parts()
        assert header[2] == 3  # version
        clone = Node.from_blob(header + body, 20)
        assert (clone.base, clone.start, clone.count, clone.sealed) == (
            node.base, node.start, node.count, node.sealed)
        if node.sealed:
            kinds.add("compressed" if node.compressed else "raw")
            assert body is node.data and clone.data == node.data  # stored body reused
            assert (clone.nblocks, clone.block_entries, list(clone.block_offs)) == (
                node.nblocks, node.block_entries, list(node.block_offs))
            assert clone.compressed == node.compressed and clone.mem == node.mem
            assert clone.whole is None and (clone.blocks == [None] * clone.nblocks
                                             or not clone.compressed)
        else:
            kinds.add("active")
        for p in range(node.count):
            a, b = node.tables_at(p, CACHE[0]), clone.tables_at(p, CACHE[0])
            assert bytes(a[0][a[1][a[4]]:a[1][a[4] + 1]]) == bytes(b[0][b[1][b[4]]:b[1][b[4] + 1]])
            assert a[2][a[4]] == b[2][b[4]] and a[3][a[4]] == b[3][b[4]]
    assert kinds == {"compressed", "raw", "active"}
    clone = Stream.from_state(s.export_state())
    clone._check()
    assert clone.read(1, 200) == s.read(1, 200)


def _v1_blob(node) -> bytes:
    """A node serialised the way blob version 1 did: one frame per node."""
    code = node.ends_code if node.sealed else node.decoded()[1].typecode
    if node.sealed:
        body = blocks_mod._block_body(*blocks_mod._concat_tables(node._block_list(CACHE[0]), code))
    else:
        body = node._body()
    flags = 1 if node.sealed and node.compressed else 0
    stored = CACHE[0].compressor().compress(body) if flags else body
    return codec_mod._HDR.pack(b"TN", 1, flags, code.encode(), node.count, node.start,
                                node.buf_len if node.sealed else len(node.buf)) + stored


def test_version_1_blobs_still_load(small_blocks):
    s, model = blocky(50)
    s.append(b"r", os.urandom(3000), T0 + 1000)
    s.append(b"r", os.urandom(3000), T0 + 1000)
    for _i in range(8):
        s.append(b"r", os.urandom(10), T0 + 1000)
    s.append(b"a", b"active", T0 + 2000)
    state = s.export_state()
    state["nodes"] = [(_v1_blob(node), None if node.deleted is None else bytes(node.deleted))
                      for node in s.node_list()]
    r = Stream.from_state(state)
    r._check()
    assert r.read(1, 100) == s.read(1, 100)
    old, new = s.node_list(), r.node_list()
    assert new[0].compressed and new[0].nblocks == old[0].nblocks  # re-blocked
    assert not new[2].compressed and new[2].nblocks == 1            # raw stays one block
    assert not new[-1].sealed
    assert not lru() or all(b.node not in new for b in lru())


def test_damaged_block_blobs_are_rejected(small_blocks):
    s, _ = blocky(20)
    node = s.node_list()[0]
    assert node.nblocks == 4
    header, body = node.blob_parts()
    hsize = codec_mod._HDR.size + codec_mod._BLOCKS_HDR.size
    osize = codec_mod.BLOB_PREFIX  # the frame offsets follow the summary
    offs = list(node.block_offs)
    pack = lambda o: codec_mod.struct.pack(f"<{len(o)}Q", *o)  # noqa: E731
    bad = [
        header[:hsize - 4] + (5).to_bytes(4, "little") + header[hsize:] + body,    # nblocks
        header[:hsize - 8] + (3).to_bytes(4, "little") + header[hsize - 4:] + body,  # block_entries
        header[:osize] + pack([offs[0], offs[2], offs[1], *offs[3:]]) + header[osize + 40:] + body,  # offsets
        header[:osize] + pack([0, offs[1] - 1, *offs[2:]]) + header[osize + 40:] + body,  # frame cut
        header + body[:offs[1]] + bytes(offs[2] - offs[1]) + body[offs[2]:],         # zeroed frame
        header[:2] + b"\x04" + header[3:] + body,                                    # version 4
    ]
    for blob in bad:
        with pytest.raises(ValueError):
            Node.from_blob(blob, 20)
    for blob in bad[:3] + bad[5:]:  # structural damage: seen without decompressing too
        with pytest.raises(ValueError):
            Node.from_blob(blob, 20, check=False)
    raw = node.blob_parts()
    raw_header = raw[0][:3] + b"\x00" + raw[0][4:]  # "raw" flag on zstd frames
    with pytest.raises(ValueError):
        Node.from_blob(raw_header + raw[1], 20)


def test_memory_bytes_counts_blocks_and_not_the_cache(small_blocks):
    s, _ = blocky()
    before = s.memory_bytes()
    clear_decoded_cache()
    assert s.memory_bytes() == before
    s.read(1, 95)
    assert s.memory_bytes() == before
    node = s.node_list()[0]
    import sys
    assert node.mem == (sys.getsizeof(node) + sys.getsizeof(node.data) + sys.getsizeof(node.tag_set)
                        + sys.getsizeof(node.block_offs) + sys.getsizeof(node.blocks))
    sealed = [n for n in s.node_list() if n.sealed]
    assert s.memory_bytes() > sum(len(n.data) for n in sealed)
    s._check()


def test_wide_offset_table_in_blocks(small_blocks):
    # as test_offset_table_widens_when_a_node_buffer_outgrows_it, with a node
    # of several blocks: 64-bit ends rebased per block
    s = Stream(8)
    s.append(b"t", b"small", T0)
    s._active.expand()  # a node of one entry keeps no tables: give it them
    s._active.ends = stream_mod.array("B", s._active.ends)
    want = [[1, b"t", b"small"]]
    for i in range(2, 9):
        s.append(b"t", text(i) * 2, T0)
        want.append([i, b"t", text(i) * 2])
    node = s.node_list()[0]
    assert node.sealed and node.ends_code == "Q" and node.compressed and node.nblocks > 2
    s._check()
    clear_decoded_cache()
    assert s.read(1, 8) == want
    assert [list(e)[:3] for e in s.iter_from(1)] == want
    clone = Stream.from_state(s.export_state())
    clone._check()
    assert clone.read(1, 8) == want


# ---------------------------------------------------------------------------
# blob version 3: the summary a sealed node keeps, loading without decompressing
# ---------------------------------------------------------------------------

def _v2_blob(node) -> bytes:
    """A node serialised the way blob version 2 did: no summary, no tag ids."""
    header, body = node.blob_parts()
    fixed = codec_mod._HDR.size + codec_mod._BLOCKS_HDR.size
    nb = codec_mod._BLOCKS_HDR.unpack_from(header, codec_mod._HDR.size)[1]
    offs = header[codec_mod.BLOB_PREFIX:codec_mod.BLOB_PREFIX + 8 * (nb + 1)]
    return header[:2] + b"\x02" + header[3:fixed] + offs + body


def _summary_of(header: bytes):
    at = codec_mod._HDR.size + codec_mod._BLOCKS_HDR.size
    first, last, raw_len, code, ntags = codec_mod._SUMMARY.unpack_from(header, at)
    size = 2 if code == b"H" else 4
    ids = codec_mod._le_array(code.decode(), header[len(header) - size * ntags:])
    return first, last, raw_len, code, list(ids)


class _NoDecompression:
    def decompress(self, data):
        raise AssertionError("decompressed")


def test_tag_sets_are_sorted():
    assert codec_mod._pack_ids({70000, 3, 65535, 9}).tolist() == [3, 9, 65535, 70000]
    assert codec_mod._pack_ids({70000, 3}).typecode == "I"
    assert codec_mod._pack_ids({300, 2, 65535}).typecode == "H"
    s = Stream(40)
    for i in range(80):
        s.append(b"tag-%d" % (37 * i % 29), b"x", T0 + i)
    for node in s.node_list():
        assert node.tag_set.tolist() == sorted(set(node.decoded(CACHE[0])[2]))


def test_blob_summary_fields(small_blocks):
    s, _ = blocky(60)
    s.append(b"r", os.urandom(2000), T0 + 10_000)  # a raw node
    for i in range(19):
        s.append(b"r", os.urandom(20), T0 + 10_000 + i)
    s.append(b"zz", b"active", T0 + 20_000)
    s.append(b"a", b"active", T0 + 20_001)
    kinds = set()
    for node in s.node_list():
        header, body = node.blob_parts()
        assert Node.header_length(header + body) == len(header)
        assert Node.header_length((header + body)[:codec_mod.BLOB_PREFIX]) == len(header)
        first, last, raw_len, code, ids = _summary_of(header)
        assert code == b"H"
        if node.sealed:
            kinds.add("compressed" if node.compressed else "raw")
            assert (first, last, raw_len) == (node.first_time, node.last_time, node.raw_len)
            assert ids == node.tag_set.tolist() == sorted(set(node.decoded(CACHE[0])[2]))
        else:
            kinds.add("active")
            assert (first, last, raw_len) == (node.times[0], node.times[-1], len(body))
            assert ids == sorted(set(node.tags))
    assert kinds == {"compressed", "raw", "active"}


def test_unchecked_blobs_are_built_from_the_header(small_blocks, monkeypatch):
    s, model = blocky(95)
    s.append(b"r", os.urandom(3000), T0 + 10_000)  # a raw node
    for i in range(19):
        s.append(b"r", os.urandom(20), T0 + 10_000 + i)
    s.append(b"a", b"active", T0 + 20_000)
    s.delete(33)
    state = s.export_state()
    parts = [node.blob_parts() for node in s.node_list()]
    clear_decoded_cache()
    real = BlockCache.decompress
    monkeypatch.setattr(BlockCache, "decompress", _NoDecompression.decompress)
    clones = [Node.from_parts(header, body, 20, check=False) for header, body in parts]
    clone = Stream.from_state(state, check=False)
    monkeypatch.setattr(BlockCache, "decompress", real)
    for node, copy, (_header, body) in zip(s.node_list(), clones, parts):
        assert (copy.base, copy.start, copy.count, copy.sealed) == (node.base, node.start, node.count, node.sealed)
        if node.sealed:
            assert copy.data is body  # the body object itself, no copy
            assert (copy.first_time, copy.last_time, copy.raw_len, copy.tag_set.tolist(), copy.compressed,
                    copy.block_entries, list(copy.block_offs), copy.buf_len, copy.ends_code) == (
                node.first_time, node.last_time, node.raw_len, node.tag_set.tolist(), node.compressed,
                node.block_entries, list(node.block_offs), node.buf_len, node.ends_code)
            assert copy.blocks == [None] * copy.nblocks or not copy.compressed
    clone._check()
    assert clone.read(1, 200) == s.read(1, 200)
    assert list(clone._tag_refs) == list(s._tag_refs)
    assert [n.data for n in clone.node_list() if n.sealed] == [n.data for n in s.node_list() if n.sealed]
    clone.evict_through(clone.last)
    clone._check()
    assert clone.tag_count() == 0 and not any(clone._tag_refs)


def test_damaged_summaries_are_rejected(small_blocks):
    s, _ = blocky(40)
    node = s.node_list()[0]
    assert node.sealed and node.compressed and node.nblocks == 4
    header, body = node.blob_parts()
    at = codec_mod._HDR.size + codec_mod._BLOCKS_HDR.size
    first, last, raw_len, code, ids = _summary_of(header)
    tail = len(header) - 2 * len(ids)

    def with_summary(first=first, last=last, raw_len=raw_len, code=code, ntags=None, ids=ids) -> bytes:
        ntags = len(ids) if ntags is None else ntags
        return (header[:at] + codec_mod._SUMMARY.pack(first, last, raw_len, code, ntags)
                + header[at + codec_mod._SUMMARY.size:tail] + stream_mod.array("H", ids).tobytes())

    assert Node.from_parts(with_summary(), body, 20).tag_set.tolist() == ids
    # values only the blocks contradict: decompressing sees them, the header alone cannot
    plausible = [with_summary(first=first - 1), with_summary(last=last + 1),
                 with_summary(raw_len=raw_len - 1), with_summary(ids=[*ids[:-1], 7]),
                 with_summary(ids=ids[1:])]
    for bad in plausible:
        with pytest.raises(ValueError, match="summary does not match"):
            Node.from_parts(bad, body, 20)
        assert Node.from_parts(bad, body, 20, check=False).sealed
    # structural damage: refused either way
    structural = [
        with_summary(first=last + 1),                      # times going backwards
        with_summary(raw_len=raw_len + 100),               # raw length beyond the geometry
        with_summary(raw_len=len(body)),                   # "compressed" but no smaller
        with_summary(code=b"Q"),                           # tag-id typecode
        with_summary(ntags=len(ids) + 1),                  # header length
        with_summary(ntags=0, ids=[]),                     # no tag at all
        with_summary(ids=[0] + ids[1:]),                   # tag id 0 is reserved
        header + b"\0\0",                                  # trailing bytes in the header
    ]
    for bad in structural:
        for check in (True, False):
            with pytest.raises(ValueError):
                Node.from_parts(bad, body, 20, check=check)
    with pytest.raises(ValueError):
        Node.header_length(header[:codec_mod.BLOB_PREFIX - 1])
    # a raw node: its single block's views are checked against the summary
    r = Stream(10)
    for i in range(10):
        r.append(b"r", os.urandom(100), T0 + i)
    raw_node = r.node_list()[0]
    assert raw_node.sealed and not raw_node.compressed
    header, body = raw_node.blob_parts()
    first, last, raw_len, code, ids = _summary_of(header)
    for bad in (header[:at] + codec_mod._SUMMARY.pack(first - 1, last, raw_len, code, len(ids))
                + header[at + codec_mod._SUMMARY.size:],
                header[:at] + codec_mod._SUMMARY.pack(first, last, raw_len + 8, code, len(ids))
                + header[at + codec_mod._SUMMARY.size:]):
        with pytest.raises(ValueError):
            Node.from_parts(bad, body, 10, check=False)


def test_version_2_blobs_still_load(small_blocks, monkeypatch):
    s, _ = blocky(70)
    s.append(b"a", b"active", T0 + 2000)
    s.delete(12)
    state = s.export_state()
    state["nodes"] = [(_v2_blob(node), None if node.deleted is None else bytes(node.deleted))
                      for node in s.node_list()]
    del state["tag_refs"]  # as a version-1 snapshot: recounted
    for check in (True, False):
        r = Stream.from_state(state, check=check)
        r._check()
        assert r.read(1, 100) == s.read(1, 100)
        assert list(r._tag_refs) == list(s._tag_refs)
        assert [n.tag_set.tolist() for n in r.node_list() if n.sealed] == [
            n.tag_set.tolist() for n in s.node_list() if n.sealed]


def test_from_state_tag_refs_are_checked():
    s = Stream(4)
    for i in range(1, 30):
        s.append(b"u%d" % (i // 3), text(i), T0 + i)  # tags used by one or two nodes
    s.evict_through(9)  # frees the first tags
    s._check()
    assert s._free_ids
    state = s.export_state()
    refs = codec_mod._le_array("I", state["tag_refs"]).tolist()
    assert refs == list(s._tag_refs)
    used = [t for t, n in enumerate(refs) if n]
    for given in (refs, bytes(state["tag_refs"])):
        for check in (True, False):
            r = Stream.from_state(dict(state, tag_refs=given), check=check)
            r._check()
    swapped = list(refs)
    swapped[used[0]] += 1
    swapped[used[1]] -= 1  # the same sum: only a recount sees it
    with pytest.raises(ValueError, match="reference counts"):
        Stream.from_state(dict(state, tag_refs=swapped))
    free = s._free_ids[0]
    bad = [refs + [0],                                        # length
           [1] + refs[1:],                                    # id 0
           [n + (t == used[0]) for t, n in enumerate(refs)],  # sum
           [n - (t == used[0]) + (t == free) for t, n in enumerate(refs)]]  # a free id in use
    for given in bad:
        for check in (True, False):
            with pytest.raises(ValueError, match="reference counts"):
                Stream.from_state(dict(state, tag_refs=given), check=check)


def _fill(ks: Keyspace, key: bytes) -> Stream:
    s = ks.get_or_create(key, 10)
    for i in range(45):
        s.append(b"t", b"payload %d " % i * 40, T0 + i)  # compressible: sealed compressed
    return s


def test_two_keyspaces_have_independent_block_caches():
    a, b = Keyspace(), Keyspace()
    assert a.cache is not b.cache
    sa, sb = _fill(a, b"k"), _fill(b, b"k")
    assert len(a.cache) and len(b.cache)
    kept = list(b.cache.lru)
    assert all(blk.node in sb.node_list() for blk in kept)
    assert not any(blk.node in sb.node_list() for blk in a.cache.lru)
    a.flush()  # FLUSHALL on one server
    assert len(a.cache) == 0 and a.cache.nbytes == 0
    assert list(b.cache.lru) == kept and all(blk.lru for blk in kept)
    sb._check()
    sa = _fill(a, b"k")
    b.cache.set_limits(1, 1 << 30)  # one server's limits leave the other alone
    assert len(b.cache) == 1 and len(a.cache) > 1
    kept = list(a.cache.lru)
    b.delete(b"k")
    assert len(b.cache) == 0 and list(a.cache.lru) == kept
    assert sa.read(1, 45) == [[i + 1, b"t", b"payload %d " % i * 40] for i in range(45)]
    sa._check()


def test_a_stream_put_in_a_keyspace_uses_its_cache():
    ks = Keyspace()
    s = Stream(10)
    for i in range(45):
        s.append(b"t", b"payload %d " % i * 40, T0 + i)
    own = s._cache
    assert own is not ks.cache and len(own)
    ks.put(b"k", s)
    assert s._cache is ks.cache and len(own) == 0
    assert s.read(1, 45)[44] == [45, b"t", b"payload 44 " * 40]
    s._check()


# -- node-max-bytes: nodes sealed by bytes as well as by entry count ----------------

def _sized(i: int) -> bytes:
    """Payloads of varied sizes, some bigger than the test's 1000-byte limit."""
    size = (37, 300, 999, 1000, 1001, 2500, 0, 450)[i % 8]
    return (b"%d:" % i + b"x" * size)[:size] if size else b""


def _assert_nodes_bounded(s: Stream, limit: int) -> None:
    for node in s.node_list():
        if node.sealed:
            assert node.buf_len <= limit or node.count == 1, "a seal compressed more than the limit"
        else:
            assert len(node.buf) <= limit or node.count == 1


def test_nodes_are_sealed_by_bytes():
    s = Stream(10, node_max_bytes=1000)
    model = []
    for i in range(120):
        data = _sized(i)
        assert s.append(b"t%d" % (i % 3), data, T0 + i) == i + 1
        model.append([i + 1, b"t%d" % (i % 3), data])
        s._check()
    _assert_nodes_bounded(s, 1000)
    assert any(node.short for node in s.node_list()), "some nodes were sealed by bytes"
    assert s.nodes > 120 // 10
    assert s.read(1, 200) == model
    assert [list(e[:3]) for e in s.iter_from(1)] == model
    for off in (1, 7, 8, 9, 55, 120):
        assert s.get(off) == Entry(off, model[off - 1][1], model[off - 1][2], T0 + off - 1)
        assert s.offset_at_time(T0 + off - 1) == off
    for start in range(1, 121, 13):
        assert s.read(start, 17) == model[start - 1:start + 16]
    assert s.read_held(5, 30) == (model[4:34], 35)


def test_one_entry_bigger_than_the_limit_gets_a_node_of_its_own():
    s = Stream(100, node_max_bytes=64)
    s.append(b"a", b"small", T0)
    s.append(b"a", b"B" * 500, T0 + 1)  # seals the first node, sits alone
    s.append(b"a", b"c", T0 + 2)        # seals the big one
    s._check()
    counts = [node.count for node in s.node_list()]
    assert counts == [1, 1, 1] and [n.short for n in s.node_list()] == [True, True, False]
    assert s.read(1, 3) == [[1, b"a", b"small"], [2, b"a", b"B" * 500], [3, b"a", b"c"]]


def test_append_many_seals_by_bytes_and_matches_single_appends():
    one = Stream(10, node_max_bytes=1000)
    many = Stream(10, node_max_bytes=1000)
    flat = []
    for i in range(200):
        one.append(b"t", _sized(i), T0)
        flat += [b"t", _sized(i)]
    for at in range(0, len(flat), 26):  # batches crossing nodes and ranges
        many.append_many(flat[at:at + 26], T0)
        many._check()
    one._check()
    _assert_nodes_bounded(many, 1000)
    assert [(n.start, n.cap_end) for n in many.node_list()] == \
           [(n.start, n.cap_end) for n in one.node_list()]
    assert many.read(1, 300) == one.read(1, 300)


def test_no_byte_limit_keeps_aligned_nodes():
    s = Stream(10, node_max_bytes=0)
    for i in range(35):
        s.append(b"t", b"z" * 5000, T0 + i)
    assert [n.count for n in s.node_list()] == [10, 10, 10, 5]
    assert not any(n.short for n in s.node_list())
    with pytest.raises(ValueError):
        s.node_max_bytes = -1
    s._check()


def test_evictions_and_deletes_across_nodes_sealed_by_bytes():
    s = Stream(10, node_max_bytes=1000)
    model = {}
    for i in range(150):
        s.append(b"t", _sized(i), T0 + i)
        model[i + 1] = _sized(i)
    for off in (3, 4, 5, 40, 41, 77):
        assert s.delete(off)
        del model[off]
        s._check()
    assert s.evict_through(2) == 2
    for off in (1, 2):
        model.pop(off)
    s._check()
    assert s.first == 6  # deleted 3, 4, 5 after the evicted ones
    assert s.evict_keep(120) == len([o for o in model if o <= 30])
    model = {o: d for o, d in model.items() if o > 30}
    s._check()
    assert s.evict_older_than(T0 + 60) == len([o for o in model if o <= 60])
    model = {o: d for o, d in model.items() if o > 60}
    s._check()
    assert s.length == len(model)
    assert [row for row in s.read(1, 200) if row] == [[o, b"t", d] for o, d in model.items()]
    for o in range(1, 151):
        assert s.is_held(o) == (o in model)
    s.evict_through(150)
    s._check()
    assert s.nodes == 0 and s.length == 0
    s.append(b"t", b"y" * 900, T0 + 200)  # lands mid-range, then bytes seal it
    s.append(b"t", b"y" * 900, T0 + 201)
    s._check()
    assert s.read(151, 5) == [[151, b"t", b"y" * 900], [152, b"t", b"y" * 900]]


@pytest.mark.parametrize("check", [True, False])
def test_snapshot_state_round_trips_nodes_sealed_by_bytes(check):
    s = Stream(10, node_max_bytes=1000)
    for i in range(97):
        s.append(b"t%d" % (i % 5), _sized(i), T0 + i)
    s.delete(50)
    s.evict_through(12)
    state = s.export_state()
    clone = Stream.from_state(state, check=check, node_max_bytes=1000)
    clone._check()
    assert [(n.start, n.cap_end, n.short) for n in clone.node_list()] == \
           [(n.start, n.cap_end, n.short) for n in s.node_list()]
    assert clone.read(1, 200) == s.read(1, 200)
    for node in s.node_list():
        header, body = node.blob_parts()
        copy = Node.from_parts(header, body, 10, check=check)
        assert (copy.start, copy.cap_end, copy.short, copy.sealed) == \
               (node.start, node.cap_end, node.short, node.sealed)
    for i in range(97, 130):  # the clone keeps writing by bytes
        clone.append(b"t", _sized(i), T0 + i)
        s.append(b"t", _sized(i), T0 + i)
    clone._check()
    assert clone.read(1, 200) == s.read(1, 200)


def test_short_flag_on_a_full_range_is_refused():
    s = Stream(4, node_max_bytes=0)
    for i in range(4):
        s.append(b"t", b"v%d" % i, T0)
    header, body = s.node_list()[0].blob_parts()
    bad = bytearray(header)
    bad[3] |= 2  # the flags byte: "short", but the node fills its range
    with pytest.raises(ValueError, match="short"):
        Node.from_parts(bytes(bad), body, 4)


def test_keyspace_gives_its_node_max_bytes_to_new_and_put_streams():
    ks = Keyspace()
    assert ks.get_or_create(b"a").node_max_bytes == 1 << 20
    ks.node_max_bytes = 100
    assert ks.get_or_create(b"b", 10).node_max_bytes == 100
    assert ks.get(b"a").node_max_bytes == 1 << 20  # existing streams keep theirs
    loaded = Stream(10, node_max_bytes=0)
    ks.put(b"c", loaded)
    assert loaded.node_max_bytes == 100
