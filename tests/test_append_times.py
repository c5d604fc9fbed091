"""Stream.append_columns with per-entry times (``times=``): a run of logged
appends replayed in one engine call (persistence/effects.py) must store
exactly what the appends one by one stored."""

from __future__ import annotations

import random

import pytest

from tstream.engine import BlockCache, Keyspace, Stream, xids
from tstream.engine import stream as stream_mod
from tstream.engine.node import ActiveNode
from tstream.persistence import effects, snapshot

T0 = 1_700_000_000_000_000_000


@pytest.fixture(autouse=True)
def tiny_cache(monkeypatch):
    """A 2-block decoded cache makes decompression paths run often."""
    monkeypatch.setattr(stream_mod, "BlockCache", lambda: BlockCache(2, 1 << 30))


def times_of(stream: Stream) -> list:
    return [entry.time_ns for entry in stream.iter_from(1)]


def info(stream: Stream) -> dict:
    """What TINFO reports of a stream (commands/streams.py, tinfo), its
    ``bytes`` left out: see :func:`assert_same_bytes`."""
    return {"length": stream.length, "first": stream.first, "last": stream.last, "nodes": stream.nodes,
            "groups": len(stream.groups), "last_time": stream.last_time, "config": stream.settings}


def assert_same_bytes(run: Stream, one: Stream) -> None:
    """TINFO's ``bytes`` counts lists' and buffers' over-allocation (the node
    list, the tag table, the active node's tables), which depends on how they
    grew, one entry at a time or a run at once (a replica's figure already
    differs from its primary's that way): equal once each stream is rebuilt
    from its own state, and within that slack live."""
    assert Stream.from_state(run.export_state()).memory_bytes() == Stream.from_state(one.export_state()).memory_bytes()
    assert abs(run.memory_bytes() - one.memory_bytes()) <= 256 + one.memory_bytes() // 50


def snapshot_bytes(keyspace: Keyspace) -> bytes:
    return b"".join(snapshot.records(snapshot.capture(keyspace)))


def test_each_entry_gets_its_own_time():
    s = Stream(4)
    assert s.append_columns([b"a", b"b", b"a"], [b"1", b"2", b"3"], 0, times=[T0, T0 + 5, T0 + 9]) == 1
    assert times_of(s) == [T0, T0 + 5, T0 + 9]
    assert s.last_time == T0 + 9
    s._check()


def test_times_never_go_backwards():
    s = Stream(3)
    s.append(b"t", b"x", T0 + 100)
    s.append_columns([b"t"] * 5, [b"%d" % i for i in range(5)], 0, times=[T0, T0 + 200, T0 + 150, T0 + 300, 7])
    assert times_of(s) == [T0 + 100, T0 + 100, T0 + 200, T0 + 200, T0 + 300, T0 + 300]
    assert s.last_time == T0 + 300
    s._check()


@pytest.mark.parametrize("times", [[T0, T0], [T0, "x", T0], [T0, 1 << 64, T0], [T0, None, T0]])
def test_bad_times_change_nothing(times):
    s = Stream(2)
    s.append(b"t", b"x", T0)
    before = (s.export_state(), s.last_time, s.next_offset)
    with pytest.raises((ValueError, TypeError, OverflowError)):
        s.append_columns([b"t", b"new-tag", b"t"], [b"a", b"b", b"c"], 0, times=times)
    assert (s.export_state(), s.last_time, s.next_offset) == before
    assert s._tag_lookup(b"new-tag") is None
    s._check()


def test_redis_ids_follow_each_time():
    """Entries of a run get the Redis ids the appends one by one gave them."""
    one, run = Stream(4), Stream(4)
    for s in (one, run):
        xids.replay_add(s, b"f", b"v", T0, (T0 // 1_000_000 + 10_000, 0), True)  # an id ahead of the clock
    records = [(T0 + 1_000_000, 2), (T0 + 1_000_000, 1), (T0 + 20_000_000_000_000, 3), (T0 + 20_000_000_500_000, 1)]
    tags: list = []
    datas: list = []
    times: list = []
    for time_ns, count in records:
        pairs = [b"t", b"d"] * count
        one.append_many(pairs, time_ns)
        tags += [b"t"] * count
        datas += [b"d"] * count
        times += [time_ns] * count
    run.append_columns(tags, datas, 0, times=times)
    assert [xids.id_of(run, o) for o in range(1, run.next_offset)] == \
        [xids.id_of(one, o) for o in range(1, one.next_offset)]
    one._check()
    run._check()


def test_a_failed_seal_midway_keeps_what_was_sealed_with_its_times(monkeypatch):
    """MemoryError at the second seal with entries left: the first node's
    entries stay (as for append_columns), and the stream's last time is the
    last stored entry's, not the run's."""
    s = Stream(4)
    real_seal = ActiveNode.seal
    calls = []

    def second_seal_fails(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise MemoryError
        return real_seal(self, *args, **kwargs)

    monkeypatch.setattr(ActiveNode, "seal", second_seal_fails)
    times = [T0 + i for i in range(10)]
    with pytest.raises(MemoryError):
        s.append_columns([b"t"] * 10, [b"v%d" % i for i in range(10)], 0, times=times)
    s._check()
    assert s.next_offset == 9  # two nodes of four: the second one's seal owed
    assert times_of(s) == times[:8]
    assert s.last_time == times[7]


def test_a_failure_in_the_first_node_stores_nothing(monkeypatch):
    s = Stream(8)
    s.append(b"t", b"x", T0 + 50)

    def no_memory(self, *args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(ActiveNode, "seal", no_memory)
    with pytest.raises(MemoryError):
        s.append_columns([b"t"] * 10, [b"v"] * 10, 0, times=[T0 + 100 + i for i in range(10)])
    s._check()
    assert (s.next_offset, s.last_time, times_of(s)) == (2, T0 + 50, [T0 + 50])


def random_records(rng: random.Random, n: int, key: bytes, ntags: int) -> list:
    """n APPEND records as TWRITE, pipelined TWRITE runs and BATCH commits log them."""
    records = []
    now = T0
    offset = 1
    for _ in range(n):
        now += rng.choice([0, 0, 1, 1000, 5_000_000, -3_000_000])  # the primary's clock may step back
        count = rng.choice([1, 1, 1, 1, 2, 5, 17])
        record = [effects.APPEND, key, offset, now]
        for _ in range(count):
            size = rng.choice([0, 5, 40, 100, 300])
            record += [b"t%d" % rng.randrange(ntags), rng.randbytes(size) if rng.random() < 0.5 else b"x" * size]
        records.append(record)
        offset += count
    return records


def apply_as_runs(stream: Stream, records: list, rng: random.Random) -> None:
    """The records in runs of random length, each run in one engine call."""
    i = 0
    while i < len(records):
        run = records[i:i + rng.randrange(1, 40)]
        tags: list = []
        datas: list = []
        times: list = []
        for record in run:
            tags += record[4::2]
            datas += record[5::2]
            times += [record[3]] * ((len(record) - 4) // 2)
        assert stream.append_columns(tags, datas, 0, times=times) == run[0][2]
        i += len(run)
        stream._check()


@pytest.mark.parametrize("seed", range(8))
def test_runs_in_one_call_equal_the_records_one_by_one(seed):
    """Seeded stress: nodes sealed by count and by bytes, limits, a subject
    index; snapshot bytes and TINFO's figures equal, ``_check()`` after every
    call."""
    rng = random.Random(seed)
    node_entries = rng.choice([1, 3, 16, 100])
    node_max_bytes = rng.choice([0, 200, 1 << 20])
    records = random_records(rng, 400, b"k", rng.choice([1, 3, 50]))
    spaces = []
    for form in ("one by one", "runs"):
        keyspace = Keyspace()
        stream = keyspace.get_or_create(b"k", node_entries)
        stream.node_max_bytes = node_max_bytes
        if seed % 4 == 1:
            stream.config.max_len = 3 * node_entries + 1
        elif seed % 4 == 2:
            stream.config.max_age_ms = 20
        if seed % 4 == 3:
            stream.config.max_msgs_per_subject = 5
        if form == "one by one":
            for record in records:
                effects.apply(keyspace, record)
            stream._check()
        else:
            apply_as_runs(stream, records, random.Random(seed + 100))
        spaces.append((keyspace, stream))
    (one_space, one), (run_space, run) = spaces
    assert info(run) == info(one)
    assert_same_bytes(run, one)
    assert times_of(run) == times_of(one)
    assert run.read(1, run.next_offset) == one.read(1, one.next_offset)
    assert snapshot_bytes(run_space) == snapshot_bytes(one_space)
