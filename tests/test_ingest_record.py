"""The ids field of the INGEST effect record (persistence/effects.py): a
pipelined MSGID run logs its ids packed as one bin item (``packed_ids``); the
older form, a list item an id, is still read, by the AOF's load and by
tstream-check, and both give the same stream and window."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import pytest
import redis

from tstream.engine import Keyspace
from tstream.persistence import aof, effects

from . import c_extensions

try:
    from tstream.engine._window import pack_ids as c_pack_ids
except ImportError:
    c_pack_ids = None

needs_c = c_extensions.needs_c(c_pack_ids)

T0 = 1_700_000_000_000_000_000


def test_packed_ids_round_trip_random():
    rng = random.Random(13)
    for _ in range(500):
        count = rng.randint(1, 70)
        ids = tuple(bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 9, 36, 127, 128, 255, rng.randrange(256)))))
                    for _ in range(count))
        packed = effects.packed_ids(ids)
        assert type(packed) is bytes and len(packed) == count + sum(map(len, ids))
        assert effects.unpacked_ids(packed, count) == list(ids)


def _random_ids(rng: random.Random) -> list:
    ids = [bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 9, 45, 255, rng.randrange(256)))))
           for _ in range(rng.randint(0, 70))]
    if ids and rng.random() < 0.1:
        ids[rng.randrange(len(ids))] = None if rng.random() < 0.5 else b"z" * rng.choice((256, 300))
    return ids


@needs_c
def test_the_c_pack_ids_is_the_fallback_on_random_ids():
    rng = random.Random(1313)
    for _ in range(2000):
        ids = _random_ids(rng)
        for given in (ids, tuple(ids)):
            c_packed, py_packed = c_pack_ids(given), effects.py_packed_ids(given)
            assert type(c_packed) is type(py_packed) and c_packed == py_packed
            if type(c_packed) is not bytes:
                assert c_packed is given
    with pytest.raises(TypeError):
        c_pack_ids(iter([b"a"]))


@needs_c
def test_the_c_pack_ids_out_of_memory_gives_the_ids_as_they_are():
    ids = tuple(b"id-%d" % i for i in range(64))
    results = []

    def call():
        results.append(c_pack_ids(ids))

    assert c_extensions.memory_error_count(call, 4) == 0  # (its one allocation failing: the ids, not an error)
    assert results[0] is ids and all(r == effects.py_packed_ids(ids) for r in results[1:])
    assert c_pack_ids(ids) == effects.py_packed_ids(ids)


def test_ids_that_do_not_pack_stay_a_list():
    long_ids = [b"a", b"x" * 256]
    assert effects.packed_ids(long_ids) is long_ids  # a length over a byte: the older form
    with_none = [b"a", None]
    assert effects.packed_ids(with_none) is with_none
    assert effects.packed_ids([b"y" * 255]) == b"\xff" + b"y" * 255


@pytest.mark.parametrize("packed, count", [
    (b"\x02ab", 2),              # fewer lengths than entries
    (b"\x02\x01abcd", 2),        # one more byte after the ids
    (b"\x02\x02abc", 2),         # a byte short
    (b"\x01\x01ab", 1),          # more ids than entries
])
def test_packed_ids_that_do_not_fit_the_record_are_refused(packed, count):
    with pytest.raises(effects.ReplayError):
        effects.unpacked_ids(b"", count)  # no lengths at all (as a record's field: empty, no ids)
    with pytest.raises(effects.ReplayError):
        effects.unpacked_ids(packed, count)
    keyspace = Keyspace()
    effects.apply(keyspace, [effects.CREATE, b"k", 64])
    record = [effects.INGEST, b"k", 1, T0, None, 0, 0, packed] + [b"t", b"d"] * count
    with pytest.raises(effects.ReplayError):
        effects.apply(keyspace, record)


def _replayed(ids_field, count: int):
    keyspace = Keyspace()
    effects.apply(keyspace, [effects.CREATE, b"k", 64])
    effects.apply(keyspace, [effects.INGEST, b"k", 1, T0, None, 0, 0, ids_field]
                  + [x for i in range(count) for x in (b"t", b"d%d" % i)])
    stream = keyspace.get(b"k")
    return [(e.offset, e.tag, e.data) for e in stream.iter_from(1)], stream._ingest.export()


def test_both_forms_replay_to_the_same_stream_and_window():
    ids = [b"id-%d" % i for i in range(64)] + [b"", b"z" * 255]
    assert _replayed(effects.packed_ids(ids), len(ids)) == _replayed(ids, len(ids))
    entries, export = _replayed(effects.packed_ids(ids), len(ids))
    assert len(entries) == len(ids) and export["ids"] == [(m, 1 + i) for i, m in enumerate(ids)]


def _pipelined_msgid_runs(port: int, runs: list[list[str]]) -> list:
    client = redis.Redis(port=port)
    client.execute_command("TWRITE", "k", "t", "first", "MSGID", "first")  # (a new stream's first read goes one by one)
    replies = []
    for ids in runs:
        pipe = client.pipeline(transaction=False)
        for mid in ids:
            pipe.execute_command("TWRITE", "k", "t", f"v-{mid}", "MSGID", mid)
        replies += pipe.execute()
    client.close()
    return replies


def test_a_pipelined_msgid_run_logs_its_ids_packed_and_the_file_loads_and_checks(tmp_path):
    from tstream.server.embed import ServerThread

    runs = [[f"m{i}" for i in range(40)], ["y" * 200, "x" * 300, "z"]]  # the last run: an id too long to pack
    ids = [mid for run in runs for mid in run]
    with ServerThread(port=0, dir=tmp_path, save="", appendonly=True) as srv:
        replies = _pipelined_msgid_runs(srv.port, runs)
    assert replies == list(range(2, 2 + len(ids)))
    directory = tmp_path / "appendonlydir"
    (incr,) = sorted(directory.glob("*.incr.aof"))
    records = [r for r in aof.records_of(incr.read_bytes()) if r[0] == effects.INGEST]
    fields = [r[7] for r in records]
    assert fields[0] == [b"first"]  # one by one: a list, as before
    assert type(fields[1]) is bytes  # the first pipeline's run: packed
    assert fields[-1] == [b"y" * 200, b"x" * 300, b"z"]  # the second's: a list, an id being too long
    logged = []
    for record in records:
        count = (len(record) - 8) >> 1
        logged += effects.unpacked_ids(record[7], count) if type(record[7]) is bytes else record[7]
    assert logged == [b"first"] + [m.encode() for m in ids]
    loaded = aof.load(str(directory))
    window = loaded.keyspace.get(b"k")._ingest
    assert window.export()["ids"] == [(m, 1 + i) for i, m in enumerate(logged)]
    check = subprocess.run([sys.executable, "-m", "tstream.persistence.check", str(directory)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_file_of_the_older_form_loads_checks_and_knows_its_ids(tmp_path, make_server):
    """An AOF whose INGEST records carry their ids as lists (written before the
    packed form): the server loads it and refuses the ids again."""
    from tstream.persistence.framing import pack

    directory = tmp_path / "appendonlydir"
    directory.mkdir()
    ids = [b"old-%d" % i for i in range(20)]
    records = [[effects.CREATE, b"k", 64],
               [effects.INGEST, b"k", 1, time.time_ns(), None, 0, 0, ids]
               + [x for i in range(20) for x in (b"t", b"v%d" % i)]]
    seq = 1
    (directory / aof.incr_name(seq)).write_bytes(b"".join(pack(record) for record in records))
    aof.write_manifest(str(directory), [aof.ManifestEntry(aof.incr_name(seq), seq, "i")])
    check = subprocess.run([sys.executable, "-m", "tstream.persistence.check", str(directory)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    proc = make_server("--save", "", "--appendonly", "yes", directory=tmp_path)
    client = proc.client()
    assert client.execute_command("TWRITE", "k", "t", "again", "MSGID", "old-7") == 8
    assert client.execute_command("TWRITE", "k", "t", "new", "MSGID", "new-1") == 21


def _msgid_publisher(port_of, total: int, stop, sent: list) -> None:
    """Pipelined ``TWRITE s t <n> MSGID id-<n>`` in chunks of 32, each chunk sent
    again until its replies come back (across the server's kills)."""
    client = None
    n = 0
    while n < total and not stop.is_set():
        chunk = range(n, min(n + 32, total))
        try:
            if client is None:
                client = redis.Redis(port=port_of(), socket_timeout=5)
            pipe = client.pipeline(transaction=False)
            for i in chunk:
                pipe.execute_command("TWRITE", "s", "t", str(i), "MSGID", f"id-{i}")
            pipe.execute()
            n = chunk[-1] + 1
            sent.append(n)
        except (redis.ConnectionError, redis.TimeoutError, ConnectionResetError):
            client = None
            time.sleep(0.05)


def test_sigkill_pipelined_msgid_runs_stored_exactly_once_in_order(make_server, tmp_path):
    """Pipelined MSGID runs (packed ids in the AOF), the server killed (SIGKILL)
    four times: each chunk sent again until acknowledged, and all of them once
    more at the end, every message is stored once, in order (the window rebuilt
    from the packed ids of the AOF each time), and tstream-check passes."""
    import threading

    proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always")
    proc.client().execute_command("TWRITE", "s", "t", "start", "MSGID", "start")
    stop, sent = threading.Event(), []
    total = 6000
    thread = threading.Thread(target=_msgid_publisher, args=(lambda: proc.port, total, stop, sent), daemon=True)
    thread.start()
    try:
        for _ in range(4):
            deadline = time.time() + 20
            mark = len(sent)
            while len(sent) < mark + 10 and thread.is_alive() and time.time() < deadline:
                time.sleep(0.01)
            proc.kill()
            proc.start()
        thread.join(120)
    finally:
        stop.set()
    assert sent and sent[-1] == total
    again: list = []
    _msgid_publisher(lambda: proc.port, total, threading.Event(), again)  # every id once more: all duplicates
    client = proc.client()
    got = client.execute_command("TREAD", "s", 1, 100000)
    assert [data for _, _, data in got] == [b"start"] + [str(i).encode() for i in range(total)]
    proc.stop()
    check = subprocess.run([sys.executable, "-m", "tstream.persistence.check", str(tmp_path / "appendonlydir")],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_replica_applies_the_packed_ids_and_knows_them_once_promoted(tmp_path):
    """The replication stream carries the same records: a replica applies a
    pipelined MSGID run's packed ids; promoted, it refuses them again."""
    from .test_replication import follower, sync

    made = []

    def pair(*args: str):
        directory = tmp_path / f"s{len(made)}"
        directory.mkdir()
        from .conftest import ServerProcess

        proc = ServerProcess(directory, "--save", "", *args)
        made.append(proc)
        return proc.start()

    try:
        primary = pair()
        replica, r = follower(pair, primary)
        p = primary.client()
        replies = _pipelined_msgid_runs(primary.port, [[f"r{i}" for i in range(50)]])
        assert replies == list(range(2, 52))
        sync(p, r)
        assert r.execute_command("TREAD", "k", 1, 100) == p.execute_command("TREAD", "k", 1, 100)
        assert r.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
        assert r.execute_command("TWRITE", "k", "t", "again", "MSGID", "r30") == 32
        assert r.execute_command("TWRITE", "k", "t", "new", "MSGID", "r50") == 52
    finally:
        for proc in made:
            proc.stop()


def test_a_replay_lets_the_ids_that_aged_out_go():
    """A replica only replays INGEST records (it never claims an id), so the replay
    itself drops the ids older than two of the stream's duplicate windows, counted from
    each record's own time (two: a margin for the primary's clock having stepped back,
    persistence/effects.py): the window holds about two windows of ids, not every id."""
    keyspace = Keyspace()
    effects.apply(keyspace, [effects.CREATE, b"k", 64])
    second = 1_000_000_000
    window_ms = keyspace.get(b"k").settings.duplicate_window_ms  # (the default: 120 s)
    offset = 1
    for step in range(3):  # three records, 150 s apart: the third is 300 s after the first
        ids = [b"s%d-%d" % (step, i) for i in range(5)]
        effects.apply(keyspace, [effects.INGEST, b"k", offset, T0 + step * 150 * second, None, 0, 0,
                                 effects.packed_ids(ids)] + [b"t", b"d"] * len(ids))
        offset += len(ids)
    ingest = keyspace.get(b"k")._ingest
    assert window_ms == 120_000
    kept = [mid for mid, _ in ingest.export()["ids"]]
    assert kept == [b"s%d-%d" % (step, i) for step in (1, 2) for i in range(5)]  # s0 is 300 s old: > 240 s
    assert len(ingest.window) == 10 and ingest.window.get(b"s0-0") is None and ingest.window.get(b"s1-0") == 6


def test_a_replay_keeps_the_ids_the_primary_may_still_hold_after_its_clock_stepped_back():
    """The primary ages ids by its wall clock; a record carries the stream's time, which
    never goes back.  An id stored at 0, a plain write at 125 s, the clock stepped back to
    110 s, a MSGID write then (its record's time still 125 s): the primary's window (110 -
    120 < 0) still holds the first id, and so must a replica's."""
    keyspace = Keyspace()
    effects.apply(keyspace, [effects.CREATE, b"k", 64])
    second = 1_000_000_000
    effects.apply(keyspace, [effects.INGEST, b"k", 1, T0, None, 0, 0, [b"A"], b"t", b"a"])
    effects.apply(keyspace, [effects.INGEST, b"k", 2, T0 + 125 * second, None, 0, 0, [], b"t", b"plain"])
    effects.apply(keyspace, [effects.INGEST, b"k", 3, T0 + 125 * second, None, 0, 0, [b"B"], b"t", b"b"])
    window = keyspace.get(b"k")._ingest.window
    assert window.get(b"A") == 1 and window.get(b"B") == 3
