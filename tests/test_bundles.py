"""BUNDLE records: the records of a loop turn (AOF) or of a send (replication
stream) in one frame.  Replaying a bundle must leave what its records applied
one by one leave, fail where they fail, and a crash keeps a bundle whole or
drops it whole."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
import redis

from tstream.engine import Keyspace
from tstream.persistence import aof, effects
from tstream.persistence.framing import iter_frames, pack, unpack

from .test_replay_runs import BAD, T0, applied_alone, log_with_bad_record, random_log, state


def bundles_of(log: list, rng: random.Random) -> list:
    """``log`` cut into bundles of 1-40 records (a bundle of one is the record)."""
    out, i = [], 0
    while i < len(log):
        size = rng.randrange(1, 41)
        out.append(effects.bundled(log[i:i + size]))
        i += size
    return out


def replayed(records: list) -> tuple[Keyspace, list]:
    """A keyspace built by effects.Replay from ``records``; every record reported
    applied (through ``applied`` or ``applied_run``), in order."""
    keyspace = Keyspace()
    applied: list = []
    replay = effects.Replay(keyspace, applied.append, applied_run=lambda key, run: applied.extend(run))
    for i, record in enumerate(records):
        replay.apply(record, i)
    replay.flush()
    return keyspace, applied


def one_by_one(log: list) -> Keyspace:
    keyspace = Keyspace()
    for record in log:
        effects.apply(keyspace, record)
    return keyspace


def test_bundled_and_unbundled():
    a, b = [effects.APPEND, b"k", 1, T0, b"t", b"v"], [effects.DELKEY, b"k"]
    assert effects.bundled([a]) is a
    assert effects.bundled([a, b]) == [effects.BUNDLE, a, b]
    assert effects.unbundled([[effects.BUNDLE, a, b], b, [effects.FLUSH]]) == [a, b, b, [effects.FLUSH]]


@pytest.mark.parametrize("seed", range(6))
def test_bundles_leave_what_the_records_one_by_one_leave(seed):
    rng = random.Random(seed)
    log = random_log(rng, 1500)
    bundles = bundles_of(log, rng)
    assert any(record[0] == effects.BUNDLE for record in bundles)
    keyspace, applied = replayed(bundles)
    assert applied == log
    assert state(keyspace) == state(one_by_one(log))
    # effects.apply (tstream-check's replay) opens them as well
    checked = Keyspace()
    for record in bundles:
        effects.apply(checked, record)
    assert state(checked) == state(keyspace)


def plain_appends(key: bytes, start: int, count: int, time_ns: int = T0) -> list:
    return [[effects.APPEND, key, offset, time_ns + offset, b"t%d" % (offset % 3), b"v%d" % offset]
            for offset in range(start, start + count)]


def test_a_bundle_of_one_key_s_appends_goes_to_the_engine_in_one_call(monkeypatch):
    keyspace = Keyspace()
    stream = keyspace.get_or_create(b"k", 1000)
    calls: list = []
    real = type(stream).append_columns

    def counted(self, *args, **kwargs):
        calls.append(len(args[0]))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(stream), "append_columns", counted)
    runs: list = []
    replay = effects.Replay(keyspace, applied_run=lambda key, run: runs.append((key, len(run))))
    replay.apply(effects.bundled(plain_appends(b"k", 1, 30)))
    replay.apply(effects.bundled(plain_appends(b"k", 31, 20)))  # continues the run held
    assert calls == [] and stream.next_offset == 1
    replay.flush()
    assert calls == [50] and runs == [(b"k", 50)]
    assert [e.data for e in stream.iter_from(1)] == [b"v%d" % offset for offset in range(1, 51)]
    assert [e.time_ns for e in stream.iter_from(49)] == [T0 + 49, T0 + 50]


@pytest.mark.parametrize("shape", ["a gap", "another key", "two entries", "limits", "no such key"])
def test_bundles_that_do_not_fit_the_fast_path_apply_record_by_record(shape):
    log = [[effects.CREATE, b"k", 8], [effects.CREATE, b"j", 8]]
    appends = plain_appends(b"k", 1, 12)
    if shape == "a gap":
        appends[5:] = plain_appends(b"k", 7, 7)  # offsets 1-5 then 7-13: the engine refuses the 7
    elif shape == "another key":
        appends[4] = [effects.APPEND, b"j", 1, T0, b"t", b"in j"]
        appends[5:] = plain_appends(b"k", 5, 7)
    elif shape == "two entries":
        appends[3] = [effects.APPEND, b"k", 4, T0, b"t", b"x", b"u", b"y"]
        appends[4:] = plain_appends(b"k", 6, 8)
    elif shape == "limits":
        log.append([effects.CONFIG, b"k", b"max_len", 5])
    else:
        appends = plain_appends(b"nokey", 1, 12)
    log.append(effects.bundled(appends))
    if shape in ("a gap", "no such key"):
        with pytest.raises(effects.ReplayError) as alone:
            one_by_one(log)
        with pytest.raises(effects.ReplayError) as failed:
            replayed(log)
        assert str(failed.value) == str(alone.value) and failed.value.where == 2
        return
    keyspace, applied = replayed(log)
    assert applied == effects.unbundled(log)
    assert state(keyspace) == state(one_by_one(effects.unbundled(log)))


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_record_in_a_bundle_fails_as_alone(name):
    """The bundle's records before the bad one stay applied, the bad one raises
    its own error with the bundle's ``where``, nothing after it is applied."""
    log, bad = log_with_bad_record(name)
    one, alone = applied_alone(log, bad)
    keyspace = Keyspace()
    applied: list = []
    replay = effects.Replay(keyspace, applied.append)
    replay.apply(log[0], 0)
    with pytest.raises(effects.ReplayError) as failed:
        replay.apply(effects.bundled(log[1:]), 7)
        replay.flush()
    assert failed.value.where == 7
    assert str(failed.value) == str(alone)
    assert applied == log[:bad]
    assert state(keyspace) == state(one)


@pytest.mark.parametrize("record", [
    [effects.BUNDLE, [effects.CREATE, b"k", 4], [effects.BUNDLE, [effects.DELKEY, b"k"]]],
    [effects.TXN, [[effects.CREATE, b"k", 4], [effects.BUNDLE, [effects.DELKEY, b"k"], [effects.FLUSH]]]],
    [effects.BUNDLE, [effects.CREATE, b"k", 4], 5],
])
def test_nested_or_malformed_bundles_are_refused(record):
    with pytest.raises(effects.ReplayError):
        effects.apply(Keyspace(), record)
    with pytest.raises(effects.ReplayError):
        replayed([record])


def write_aof(directory, records: list, tail: bytes = b"") -> None:
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, aof.incr_name(1)), "wb") as handle:
        handle.write(b"".join(map(pack, records)) + tail)
    aof.write_manifest(str(directory), [aof.ManifestEntry(aof.incr_name(1), 1, "i")])


def test_a_torn_bundle_at_the_tail_is_dropped_whole(tmp_path):
    log = [[effects.CREATE, b"k", 4]] + plain_appends(b"k", 1, 5)
    torn = pack(effects.bundled(plain_appends(b"k", 6, 10)))
    for cut in (1, 20, len(torn) // 2, len(torn) - 1):
        directory = tmp_path / str(cut)
        write_aof(directory, [log[0], effects.bundled(log[1:])], torn[:cut])
        with pytest.raises(aof.PersistenceError, match="incomplete"):
            aof.load(str(directory), truncate_torn_tail=False)
        loaded = aof.load(str(directory), truncate_torn_tail=True)
        assert loaded.records == 6  # the bundle's records counted one by one
        stream = loaded.keyspace.get(b"k")
        assert [e.data for e in stream.iter_from(1)] == [b"v%d" % offset for offset in range(1, 6)]


def test_the_server_logs_a_turn_s_records_as_one_bundle_that_loads_and_checks(tmp_path):
    from tstream.server.embed import ServerThread

    with ServerThread(port=0, dir=tmp_path, save="", appendonly=True) as srv:
        client = redis.Redis(port=srv.port)
        pipe = client.pipeline(transaction=False)
        for i in range(30):
            pipe.execute_command("TWRITE", "k%d" % (i % 3), "t", "v%d" % i)
        assert pipe.execute() == [1 + i // 3 for i in range(30)]
        client.close()
    directory = tmp_path / "appendonlydir"
    (incr,) = sorted(directory.glob("*.incr.aof"))
    frames = [unpack(payload) for _, payload in iter_frames(incr.read_bytes())]
    assert [record[0] for record in frames] == [effects.BUNDLE]  # the pipeline's turn: one frame
    records = aof.records_of(incr.read_bytes())
    assert [r[0] for r in records] == [effects.CREATE, effects.APPEND] * 3 + [effects.APPEND] * 27
    loaded = aof.load(str(directory))
    assert loaded.records == len(records)
    assert [e.data for e in loaded.keyspace.get(b"k1").iter_from(1)] == [b"v%d" % i for i in range(1, 30, 3)]
    check = subprocess.run([sys.executable, "-m", "tstream.persistence.check", str(directory)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"OK   {incr}: {len(records)} records" in check.stdout
