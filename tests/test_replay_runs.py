"""persistence.effects.Replay: a run of appends to one key replayed in one
engine call must leave what the records applied one by one leave, and fail
where they fail (the AOF's load and a replica's apply use it)."""

from __future__ import annotations

import os
import random

import pytest

from tstream.engine import Keyspace
from tstream.persistence import aof, effects, snapshot
from tstream.persistence.framing import CorruptFile, pack

T0 = 1_700_000_000_000_000_000
KEYS = (b"a", b"b", b"c")


def state(keyspace: Keyspace) -> tuple:
    """The snapshot's bytes and, per key, what TINFO reports (bytes aside: see
    tests/test_append_times.py) and the groups."""
    infos = {}
    for key in sorted(keyspace.streams):
        stream = keyspace.get(key)
        stream._check()
        infos[key] = (stream.length, stream.first, stream.last, stream.nodes, stream.last_time,
                      stream.settings, sorted((name, g.next, g.pending_offsets()) for name, g in stream.groups.items()))
    return b"".join(snapshot.records(snapshot.capture(keyspace))), infos


def some_pairs(rng: random.Random) -> list:
    return [x for i in range(rng.randrange(2, 30)) for x in (b"s%d" % (i % 3), b"x" * rng.randrange(50))]


# (up to this share of the draws, the record made of key, stream, next offset, now, rng, draw count)
KINDS = [
    (0.75, lambda k, s, n, t, rng, c: [effects.APPEND, k, n, t, b"t%d" % rng.randrange(4), b"v%d" % rng.randrange(99)]),
    (0.82, lambda k, s, n, t, rng, c: [effects.APPEND, k, n, t, *some_pairs(rng)]),
    (0.84, lambda k, s, n, t, rng, c: [effects.EVICT, k, max(s.first, n - rng.randrange(1, 20))]),
    (0.86, lambda k, s, n, t, rng, c: [effects.CONFIG, k, b"max_len", rng.choice([0, 0, 25])]),
    (0.88, lambda k, s, n, t, rng, c: [effects.GROUP, k, b"g", n, n - 1, 1, 600, 9000, 500] if n > 1 else None),
    (0.89, lambda k, s, n, t, rng, c: [effects.ACK, k, b"g", n - 1]),
    (0.90, lambda k, s, n, t, rng, c: [effects.DELETE, k, rng.randrange(s.first, n)] if n > s.first else None),
    (0.93, lambda k, s, n, t, rng, c: [effects.TXN, [[effects.APPEND, k, n, t, b"t", b"in-txn"],
                                                     [effects.APPEND, k, n + 1, t, b"t", b"in-txn-2"]]]),
    # an id ahead of every id so far (the appends after it take auto ids after it)
    (0.95, lambda k, s, n, t, rng, c: [effects.XADD, k, n, t, T0 // 1_000_000 + 10**7 + c, 0, 1, b"f", b"v"]),
    (0.96, lambda k, s, n, t, rng, c: [effects.INGEST, k, n, t, None, 0, 0, [b"id-%d" % n], b"t", b"ingested"]),
    (0.965, lambda k, s, n, t, rng, c: [effects.DELKEY, k]),
    (1.0, lambda k, s, n, t, rng, c: [effects.CONFIG, k, b"allow_direct", rng.random() < 0.5]),
]


def random_log(rng: random.Random, n: int) -> list:
    """A plausible log: mostly single TWRITE appends (runs of one key, and keys
    interleaved), batches, and every other kind of record now and then.  Built
    against a keyspace the records are applied to as they are made, so that
    offsets line up."""
    keyspace = Keyspace()
    log: list = []
    now = T0
    for key in KEYS:
        log.append([effects.CREATE, key, rng.choice([3, 16, 1000])])
        effects.apply(keyspace, log[-1])
    key = KEYS[0]
    for count in range(n):
        now += rng.choice([0, 1, 1000, 2_000_000, -1_000_000])
        if rng.random() < 0.15:
            key = rng.choice(KEYS)
        stream = keyspace.get(key)
        draw = rng.random()
        make = next(maker for share, maker in KINDS if draw < share)
        record = [effects.CREATE, key, 4] if stream is None else make(key, stream, stream.next_offset, now, rng, count)
        if record is not None:
            effects.apply(keyspace, record)
            log.append(record)
    return log


@pytest.mark.parametrize("seed", range(6))
def test_runs_leave_what_the_records_one_by_one_leave(seed):
    rng = random.Random(seed)
    log = random_log(rng, 1500)
    one = Keyspace()
    for record in log:
        effects.apply(one, record)
    runs = Keyspace()
    applied: list = []
    replay = effects.Replay(runs, applied.append)
    for i, record in enumerate(log):
        replay.apply(record, i)
    replay.flush()
    assert applied == log  # every record reported applied, in order
    assert state(runs) == state(one)


def test_a_run_goes_to_the_engine_in_one_call(monkeypatch):
    keyspace = Keyspace()
    stream = keyspace.get_or_create(b"k", 1000)
    calls = []
    real = type(stream).append_columns

    def counted(self, *args, **kwargs):
        calls.append(len(args[0]))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(stream), "append_columns", counted)
    replay = effects.Replay(keyspace)
    for offset in range(1, 51):
        replay.apply([effects.APPEND, b"k", offset, T0 + offset, b"t", b"v"])
    replay.apply([effects.APPEND, b"k", 51, T0, b"t", b"v", b"u", b"w"])
    assert calls == [] and stream.next_offset == 1  # held until something else comes
    replay.apply([effects.EVICT, b"k", 3])
    assert calls == [52] and stream.next_offset == 53 and stream.first == 3
    replay.flush()
    assert calls == [52]
    assert [e.time_ns for e in stream.iter_from(49)] == [T0 + 49, T0 + 50, T0 + 50, T0 + 50]


BAD = {
    "offset gap": [effects.APPEND, b"k", 99, T0, b"t", b"v"],
    "tag not bytes": [effects.APPEND, b"k", None, T0, 7, b"v"],
    "time not an int": [effects.APPEND, b"k", None, b"soon", b"t", b"v"],
    "data not bytes": [effects.APPEND, b"k", None, T0, b"t", 12],
    "half a pair": [effects.APPEND, b"k", None, T0, b"t", b"v", b"t"],
    "no such key": [effects.APPEND, b"nokey", 1, T0, b"t", b"v"],
}


def log_with_bad_record(name: str) -> tuple[list, int]:
    log = [[effects.CREATE, b"k", 4]]
    log += [[effects.APPEND, b"k", offset, T0 + offset, b"t", b"v%d" % offset] for offset in range(1, 11)]
    bad = list(BAD[name])
    if bad[2] is None:
        bad[2] = 11
    log.append(bad)
    log += [[effects.APPEND, b"k", 11 + i, T0 + 20, b"t", b"after"] for i in range(3)]
    return log, len(log) - 4


def applied_alone(log: list, bad: int) -> tuple[Keyspace, effects.ReplayError]:
    """The keyspace of ``log``'s records before ``bad`` applied one by one, and
    the error ``log[bad]`` then raises."""
    one = Keyspace()
    for record in log[:bad]:
        effects.apply(one, record)
    with pytest.raises(effects.ReplayError) as alone:
        effects.apply(one, log[bad])
    return one, alone.value


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_record_in_a_run_fails_as_alone(name):
    """The records before it stay applied (each reported), it raises its own
    error with its ``where``, nothing after it is applied."""
    log, bad = log_with_bad_record(name)
    one, alone = applied_alone(log, bad)
    runs = Keyspace()
    applied: list = []
    replay = effects.Replay(runs, applied.append)
    with pytest.raises(effects.ReplayError) as failed:
        for i, record in enumerate(log):
            replay.apply(record, 1000 + i)
        replay.flush()
    assert failed.value.where == 1000 + bad
    assert str(failed.value) == str(alone)
    assert applied == log[:bad]
    replay.flush()  # nothing held any more
    assert state(runs) == state(one)


@pytest.mark.parametrize("record", [5, b"x", [], [effects.APPEND, [1], 11, T0, b"t", b"v"],
                                    [effects.APPEND, {b"k": 1}, 11, T0, b"t", b"v"]])
def test_a_malformed_record_after_a_run_fails_as_alone(record):
    log, _ = log_with_bad_record("offset gap")
    log = log[:11] + [record]
    one = Keyspace()
    for good in log[:11]:
        effects.apply(one, good)
    with pytest.raises(effects.ReplayError) as alone:
        effects.apply(one, record)
    runs = Keyspace()
    replay = effects.Replay(runs)
    with pytest.raises(effects.ReplayError) as failed:
        for i, each in enumerate(log):
            replay.apply(each, i)
    assert (failed.value.where, str(failed.value)) == (11, str(alone.value))
    assert state(runs) == state(one)


def write_aof(directory, records: list, tail: bytes = b"") -> list[int]:
    """An AOF of ``records`` (one incr file); the offset of each record in it."""
    os.makedirs(directory, exist_ok=True)
    offsets = []
    data = b""
    for record in records:
        offsets.append(len(data))
        data += pack(record)
    with open(os.path.join(directory, aof.incr_name(1)), "wb") as handle:
        handle.write(data + tail)
    aof.write_manifest(str(directory), [aof.ManifestEntry(aof.incr_name(1), 1, "i")])
    return offsets


@pytest.mark.parametrize("name", ["offset gap", "tag not bytes", "half a pair"])
def test_aof_load_names_the_bad_record_in_a_run(tmp_path, name):
    log, bad = log_with_bad_record(name)
    offsets = write_aof(tmp_path, log)
    with pytest.raises(CorruptFile, match="record does not replay") as failed:
        aof.load(str(tmp_path))
    assert failed.value.offset == offsets[bad]


def test_aof_load_applies_a_run_before_a_bad_frame_and_a_torn_tail(tmp_path):
    log = [[effects.CREATE, b"k", 4]] + [[effects.APPEND, b"k", o, T0 + o, b"t", b"v"] for o in range(1, 10)]
    torn = pack([effects.APPEND, b"k", 10, T0, b"t", b"torn"])[:12]
    write_aof(tmp_path, log, torn)
    result = aof.load(str(tmp_path))
    assert result.records == len(log) and result.truncated_at is not None
    stream = result.keyspace.get(b"k")
    stream._check()
    assert stream.next_offset == 10 and stream.last_time == T0 + 9
    # a record bad in the run, then a damaged frame: the bad record is the one reported
    log2, bad = log_with_bad_record("offset gap")
    offsets = write_aof(tmp_path / "two", log2, b"TRdamaged header......")
    with pytest.raises(CorruptFile, match="record does not replay") as failed:
        aof.load(str(tmp_path / "two"))
    assert failed.value.offset == offsets[bad]


def test_a_kept_packer_packs_as_pack():
    from tstream.persistence.framing import Packer
    packer = Packer()
    records = [[effects.APPEND, b"k", 1, T0, b"t", b"v" * 300], [effects.FLUSH], [effects.TXN, [[effects.DELKEY, b"k"]]],
               [effects.INGEST, b"k", 2, T0, None, 0, 0, [], b"t", b""]]
    for record in records:
        assert packer(record) == pack(record)
    with pytest.raises(TypeError):
        packer([effects.APPEND, b"k", 1, T0, b"t", object()])
    assert packer(records[0]) == pack(records[0])  # a failed record leaves nothing behind


def test_aof_load_maps_its_files_and_reads_what_it_cannot_map(tmp_path, monkeypatch):
    """persistence/aof.py maps each incr file (mmap): the same keyspace as
    the file read whole into memory; an empty incr file (mmap refuses it)
    loads as nothing; a torn tail is cut from the mapped file and the file
    then loads again without it."""
    log = random_log(random.Random(7), 400)
    torn = pack([effects.APPEND, b"a", 10**6, T0, b"t", b"torn"])[:20]
    write_aof(tmp_path, log, torn)
    size = os.path.getsize(tmp_path / aof.incr_name(1))
    first = aof.load(str(tmp_path))
    assert first.truncated_at == (str(tmp_path / aof.incr_name(1)), size - len(torn))
    assert os.path.getsize(tmp_path / aof.incr_name(1)) == size - len(torn)
    again = aof.load(str(tmp_path))
    assert again.truncated_at is None and again.records == first.records
    monkeypatch.setattr(aof, "_map_file", snapshot.read_file)  # as before: read whole
    read = aof.load(str(tmp_path))
    assert state(first.keyspace) == state(again.keyspace) == state(read.keyspace)
    monkeypatch.undo()
    open(tmp_path / aof.incr_name(2), "wb").close()
    aof.write_manifest(str(tmp_path), [aof.ManifestEntry(aof.incr_name(1), 1, "i"),
                                       aof.ManifestEntry(aof.incr_name(2), 2, "i")])
    assert aof._map_file(str(tmp_path / aof.incr_name(2))) == b""
    both = aof.load(str(tmp_path))
    assert both.records == first.records and state(both.keyspace) == state(first.keyspace)
