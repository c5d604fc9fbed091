"""Snapshots taken a slice at a time (persistence.snapshot.IncrementalCapture).

BGSAVE and AOF rewrites capture the keyspace in slices of about a millisecond
per loop turn; commands hand over a key before they change it.  The picture
must be the keyspace as it was when the capture started, whatever happened
during it: appends, evictions that drop nodes, deleted entries, group reads and
acks, config changes, DEL, FLUSHALL, keys created and re-created.
"""

from __future__ import annotations

import itertools
import random
import threading
import time

import pytest
import redis

from tstream.engine import Keyspace
from tstream.engine.groups import Group
from tstream.persistence import snapshot

from .conftest import ServerProcess


def state(streams) -> dict:
    """Everything a snapshot keeps of each stream, as plain values."""
    out = {}
    for key, stream in streams.items():
        entries = [tuple(e) if e is not None else None
                   for e in stream.read(stream.first, stream.next_offset - stream.first)] \
            if stream.next_offset > stream.first else []
        out[key] = (stream.first, stream.next_offset, entries,
                    sorted((name, repr(group.export_state())) for name, group in stream.groups.items()),
                    repr(sorted(vars(stream.settings).items()) if hasattr(stream.settings, "__dict__")
                         else stream.settings))
    return out


def build(rng: random.Random, keys: int) -> Keyspace:
    keyspace = Keyspace()
    for k in range(keys):
        stream = keyspace.get_or_create(b"k%d" % k, 10)  # 10 entries a node: many nodes
        for i in range(rng.randrange(1, 40)):
            stream.append(b"t%d" % rng.randrange(4), b"v%d-%d" % (k, i), 1_000 + i)
        if k % 7 == 0:
            group = Group(b"g", stream.first)
            stream.add_group(b"g", group)
            group.read(stream, 3, 5_000, (60_000, 120_000), 1000)
        if k % 11 == 0 and stream.next_offset > 3:
            stream.delete(stream.first + 1)
    return keyspace


def mutate(rng: random.Random, keyspace: Keyspace, capture: snapshot.IncrementalCapture, serial: list) -> None:
    """One random change, announced to the capture first, as the server does."""
    names = list(keyspace.streams)
    choice = rng.random()
    if not names or choice < 0.1:
        serial[0] += 1
        key = b"new%d" % serial[0] if rng.random() < 0.5 else b"k%d" % rng.randrange(400)
        capture.before_change(key)
        keyspace.get_or_create(key, 10).append(b"t", b"fresh", 9_000)
        return
    key = rng.choice(names)
    capture.before_change(key)
    stream = keyspace.get(key)
    if choice < 0.5:
        for i in range(rng.randrange(1, 25)):
            stream.append(b"t", b"late%d" % i, 9_000 + i)
    elif choice < 0.65:
        if stream.next_offset > stream.first:
            stream.evict_through(rng.randrange(stream.first, stream.next_offset))
    elif choice < 0.75:
        if stream.next_offset > stream.first:
            stream.delete(rng.randrange(stream.first, stream.next_offset))
    elif choice < 0.85:
        group = stream.groups.get(b"g")
        if group is None:
            group = Group(b"g", stream.first)
            stream.add_group(b"g", group)
        offsets = [e[0] for e in group.read(stream, 2, 6_000, (60_000, 120_000), 1000)]
        if offsets and rng.random() < 0.5:
            group.ack(offsets[:1])
    elif choice < 0.97:
        keyspace.delete(key)
    else:
        capture.before_flush()
        keyspace.flush()


@pytest.mark.parametrize("seed", range(6))
def test_an_incremental_capture_is_the_keyspace_at_its_start(tmp_path, seed):
    rng = random.Random(seed)
    keyspace = build(rng, 400)
    expected = state(keyspace.streams)
    taken: list = []
    capture = snapshot.IncrementalCapture(keyspace, taken.append)
    serial = [0]
    while not capture.step(budget_ns=0):  # the smallest slices: one key each
        for _ in range(rng.randrange(0, 12)):
            mutate(rng, keyspace, capture, serial)
    for _ in range(50):  # after the walk: changes no longer matter to it
        mutate(rng, keyspace, capture, serial)
    path = str(tmp_path / "dump.tsr")
    snapshot.write(taken, path)
    capture.release()
    assert keyspace.cache.pins == 0
    loaded = snapshot.load_file(path, check=True)
    assert state(loaded) == expected
    for stream in keyspace.streams.values():
        stream._check()


@pytest.mark.parametrize("flush", [False, True])
def test_the_walk_goes_on_over_chunks_dropped_under_it(tmp_path, flush):
    """The walk reads the keyspace's own SCAN chunk list (no copy at the start):
    whole chunks dropped between two steps, the one the walk is in included,
    keys created after the start (new chunks), then FLUSHALL: every key of the
    start is captured exactly once, as it was."""
    keyspace = Keyspace()
    for k in range(1000):  # ids 1..1000: chunks 0..7 of 128
        keyspace.get_or_create(b"k%d" % k, 10).append(b"t", b"v%d" % k, 1_000 + k)
    expected = state(keyspace.streams)
    taken: list = []
    capture = snapshot.IncrementalCapture(keyspace, taken.append)
    assert len(keyspace._chunks) == 8
    while len(taken) < 300:  # into chunk 2 (ids 257..384)
        assert not capture.step(budget_ns=0)
    for k in [*range(256, 384), *range(640, 768)]:  # chunk 2 (the walk's) and chunk 5, whole
        capture.before_change(b"k%d" % k)
        keyspace.delete(b"k%d" % k)
    assert len(keyspace._chunks) == 6
    for k in range(2000, 2300):  # new keys, new chunks: not in the picture
        capture.before_change(b"k%d" % k)
        keyspace.get_or_create(b"k%d" % k, 10).append(b"t", b"new", 9_000)
    for _ in range(200):
        assert not capture.step(budget_ns=0)
    if flush:
        capture.before_flush()
        keyspace.flush()
    while not capture.step(budget_ns=0):
        pass
    assert sorted(item.key for item in taken) == sorted(expected)  # each once
    path = str(tmp_path / "dump.tsr")
    snapshot.write(taken, path)
    capture.release()
    assert state(snapshot.load_file(path, check=True)) == expected


def test_a_pinned_cache_keeps_dropped_nodes_whole_until_released():
    keyspace = Keyspace()
    stream = keyspace.get_or_create(b"k", 10)
    for i in range(100):
        stream.append(b"t", b"v%d" % i, i)
    capture = snapshot.IncrementalCapture(keyspace, lambda item: None)
    item = snapshot.StreamCapture(b"k", stream)
    stream.evict_through(60)  # drops six sealed nodes
    assert all(node.data for node in item.sealed)
    capture.release()
    stream.evict_through(90)
    assert keyspace.cache.pins == 0


def test_an_abandoned_walk_stops():
    keyspace = build(random.Random(1), 50)
    capture = snapshot.IncrementalCapture(keyspace, lambda item: None)
    capture.abandoned = True
    capture.release()
    assert keyspace.cache.pins == 0


def test_a_framer_writes_the_file_write_writes(tmp_path):
    """The Framer (BGSAVE's framing on the loop, a slice at a time, into the
    whole file's bytes: header, records, end, aux, footer with the checksum)
    gives byte for byte the file ``snapshot.write`` writes, and
    ``write_chunks`` writes it as given."""
    rng = random.Random(7)
    keyspace = build(rng, 60)
    big = keyspace.get_or_create(b"big", 100)  # 80 sealed nodes: captured lazily
    for i in range(8050):
        big.append(b"t%d" % (i % 3), rng.randbytes(40), 2_000 + i)
    big.delete(big.first + 150)
    expected = state(keyspace.streams)
    out: list = []
    framer = snapshot.Framer(out.append, chunk=4096, aux={"repl-id": "x"}, created_ms=1234)
    assert not out and not framer.view  # nothing handed over, no buffer taken before the first record
    capture = snapshot.IncrementalCapture(keyspace, framer.add)
    while not capture.step(budget_ns=0):  # one key a turn, one record framed: the walk ends first
        framer.run(0)
    assert capture.done and capture.owes()  # the big key's nodes are still being framed
    while not framer.run(0):
        pass
    assert not capture.owes()
    framer.finish()
    # buffers of 4096 bytes, and records bigger than that on their own (the big key's nodes)
    assert {type(piece) for piece in out} == {memoryview, bytes} and len(out) > 10
    assert framer.sent == sum(map(len, out))
    framed = b"".join(out)
    path = str(tmp_path / "dump.tsr")
    size = snapshot.write(snapshot.capture(keyspace), path, aux={"repl-id": "x"}, created_ms=1234)
    with open(path, "rb") as handle:
        assert framed == handle.read()
    path = str(tmp_path / "chunks.tsr")
    sizes: list = []
    assert snapshot.write_chunks(out, path, written=sizes.append) == size
    capture.release()
    assert sizes == list(itertools.accumulate(map(len, out)))
    fields: dict = {}
    assert state(snapshot.load_file(path, check=True, aux=fields)) == expected
    assert fields == {"repl-id": "x"}


def test_a_lazy_capture_keeps_the_bitmaps_of_its_start(tmp_path):
    """A big stream's capture reads its deleted bitmaps as its nodes are framed;
    a change to the stream (deletions, evictions that drop nodes, appends)
    settles it first: the file holds the stream as it was at its capture."""
    keyspace = Keyspace()
    big = keyspace.get_or_create(b"big", 10)
    for i in range(2000):  # 200 nodes
        big.append(b"t%d" % (i % 5), b"v%d" % i, 1_000 + i)
    for offset in (5, 500, 1500):
        big.delete(offset)
    expected = state(keyspace.streams)
    out: list = []

    def written(piece) -> None:  # as the writer thread: write it, then hand its buffer back
        out.append(bytes(piece))
        framer.recycle(piece)

    framer = snapshot.Framer(written, chunk=4096)
    capture = snapshot.IncrementalCapture(keyspace, framer.add)
    assert capture.step(budget_ns=10**9)  # (both keys: a 1 ms budget is not enough on a busy machine)
    for _ in range(60):  # the S record and some nodes
        framer.run(0)
    assert capture.owes()
    capture.before_change(b"big")
    assert not capture.owes()
    for offset in (10, 800, 1900):  # in nodes framed already and not yet
        big.delete(offset)
    big.evict_through(1200)
    for i in range(30):
        big.append(b"t", b"late%d" % i, 9_000 + i)
    while not framer.run(0):
        pass
    framer.finish()
    assert len(framer.free) == 1  # the buffers were reused
    path = str(tmp_path / "dump.tsr")
    snapshot.write_chunks(out, path)
    capture.release()
    assert state(snapshot.load_file(path, check=True)) == expected


# --- through the server ------------------------------------------------------------------


def load_bulk(client: redis.Redis, keys: int) -> None:
    pipe = client.pipeline(transaction=False)
    for k in range(keys):
        pipe.execute_command("TWRITE", f"bulk{k}", "t", "v")
        if k % 5000 == 4999:
            pipe.execute()
    pipe.execute()


def pair_writer(proc: ServerProcess, n: int, stop: threading.Event, errors: list) -> None:
    """MULTI/EXEC: the same value to pair<n>a and pair<n>b, now and then a DEL of a bulk key."""
    client = proc.client()
    i = 0
    while not stop.is_set():
        try:
            pipe = client.pipeline()
            for side in ("a", "b"):
                pipe.execute_command("TWRITE", f"pair{n}{side}", "t", str(i))
            if i % 10 == 5:
                pipe.delete(f"bulk{(n * 997 + i) % 60_000}")
            pipe.execute()
        except redis.RedisError as exc:  # pragma: no cover - reported by the test
            errors.append(exc)
            return
        i += 1


def wait_for_bgsave(client: redis.Redis) -> None:
    deadline = time.monotonic() + 60
    while client.info("persistence")["rdb_bgsave_in_progress"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_bgsave_finds_its_writer_thread_started(tmp_path):
    """The writer thread is started with the server, not by BGSAVE: the
    command's turn does not wait for a new thread to run (Thread.start), and
    the job's start is O(1) (no buffer, no copy of the SCAN chunk list)."""
    from tstream.server.embed import ServerThread

    with ServerThread(port=0, dir=tmp_path, save="") as srv:
        client = redis.Redis(port=srv.port)
        for k in range(300):
            client.execute_command("TWRITE", f"k{k}", "t", "v")
        threads = threading.active_count()
        assert client.bgsave()
        wait_for_bgsave(client)
        assert threading.active_count() == threads
        client.close()
    assert (tmp_path / "dump.tsr").exists()


@pytest.mark.slow
def test_bgsave_during_transactions_is_a_consistent_cut(tmp_path):
    """Pairs of keys written together by MULTI/EXEC while BGSAVE captures 60,000
    keys: in the snapshot, both keys of every pair have the same entries."""
    proc = ServerProcess(tmp_path, "--save", "").start()
    try:
        client = proc.client()
        load_bulk(client, 60_000)
        stop = threading.Event()
        errors: list = []
        threads = [threading.Thread(target=pair_writer, args=(proc, n, stop, errors)) for n in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(0.2)
        assert client.bgsave()
        wait_for_bgsave(client)
        stop.set()
        for thread in threads:
            thread.join(10)
        assert not errors
        assert client.info("persistence")["rdb_last_bgsave_status"] == "ok"
        loaded = snapshot.load_file(str(tmp_path / "dump.tsr"), check=True)
        for n in range(4):
            a, b = loaded.get(b"pair%da" % n), loaded.get(b"pair%db" % n)
            assert (a is None) == (b is None)
            if a is not None:
                assert [e[2] for e in a.read(1, 1_000_000)] == [e[2] for e in b.read(1, 1_000_000)]
    finally:
        proc.stop()


def test_a_failed_capture_fails_the_save_and_leaves_no_file(tmp_path, monkeypatch):
    """A capture step that raises (MemoryError on the walk's third slice) fails
    the save: the job's future raises, no snapshot is written, its temp file is
    removed, and the keyspace is as it was (a half-walked snapshot would look
    whole: it must never be renamed into place)."""
    import asyncio
    import gc
    import os

    from tstream.persistence.fileops import FileOps
    from tstream.persistence.framing import PersistenceError
    from tstream.server.app import Server
    from tstream.server.config import Config
    from tstream.server.snapshotjob import SnapshotJob

    config = Config()
    config.set("save", "")
    server = Server(config)
    for i in range(3000):
        server.keyspace.get_or_create(b"k%d" % i, 1000).append(b"t", b"v%d" % i, i + 1)
    steps = []
    real_step = snapshot.IncrementalCapture.step

    def third_step_fails(self, *args, **kwargs):
        steps.append(1)
        if len(steps) == 3:
            raise MemoryError
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(snapshot.IncrementalCapture, "step", third_step_fails)
    path = str(tmp_path / "dump.tsr")

    async def save() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda loop, context: None)  # the step's own error, logged by the loop
        with pytest.raises(PersistenceError, match="capture failed"):
            await SnapshotJob(server, path, FileOps()).start()
        await asyncio.sleep(0)  # the job's done callback: the collector back on, the switch interval back

    was_enabled = gc.isenabled()
    asyncio.run(save())
    assert gc.isenabled() == was_enabled and SnapshotJob.running == 0
    assert len(steps) >= 3
    assert os.listdir(tmp_path) == []  # neither the snapshot nor its temp file
    assert server.capture is None  # writes no longer hand their keys over
    assert server.keyspace.get(b"k2999").read(1, 1) == [[1, b"t", b"v2999"]]


def test_a_big_key_changed_before_the_walk_reaches_it(tmp_path):
    """A command about to change a big key the walk has not reached has it
    captured first, bitmaps copied: its deletions then are not in the file."""
    keyspace = Keyspace()
    small = keyspace.get_or_create(b"small", 10)
    small.append(b"t", b"v", 1_000)
    big = keyspace.get_or_create(b"big", 10)
    for i in range(1000):  # 100 nodes
        big.append(b"t", b"v%d" % i, 1_000 + i)
    expected = state(keyspace.streams)
    out: list = []
    framer = snapshot.Framer(out.append, chunk=4096)
    capture = snapshot.IncrementalCapture(keyspace, framer.add)
    capture.before_change(b"big")
    assert not capture.owes()
    for offset in (3, 500, 999):
        big.delete(offset)
    while not (framer.run(0) and capture.step(budget_ns=0)):
        pass
    while not framer.run(0):
        pass
    framer.finish()
    path = str(tmp_path / "dump.tsr")
    snapshot.write_chunks(out, path)
    capture.release()
    assert state(snapshot.load_file(path, check=True)) == expected
