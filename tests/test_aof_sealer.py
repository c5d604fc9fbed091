"""persistence.sealer: an AOF load compresses the nodes it seals in a second
thread; the keyspace it builds must be byte for byte the one sealing at once
builds (the records applied one by one, ``background_seal=False``), whatever
the records: batches over many nodes of several keys, payloads that do or do
not compress (the fast level), nodes sealed by bytes, limits, deletes,
evictions, groups, transactions, flushes."""

from __future__ import annotations

import os
import random

import pytest

from tests.test_replay_runs import random_log, state, write_aof
from tstream.engine import Keyspace
from tstream.persistence import aof, effects, snapshot
from tstream.persistence.framing import CorruptFile, pack
from tstream.persistence.sealer import BackgroundSealer

T0 = 1_700_000_000_000_000_000
TEXT = b"The quick brown fox jumps over the lazy dog while the log keeps on growing. " * 2


def full_state(keyspace: Keyspace) -> tuple:
    """test_replay_runs.state, plus each stream's memory figure and the
    decoded-block cache (which blocks of which nodes, in LRU order)."""
    streams = keyspace.streams
    where = {id(node): (key, i) for key in streams for i, node in enumerate(keyspace.get(key).node_list())}
    lru = [(where.get(id(blk.node)), blk.index) for blk in keyspace.cache.lru]
    mems = {key: keyspace.get(key).memory_bytes() for key in sorted(streams)}
    return state(keyspace), mems, lru, keyspace.cache.nbytes


def batch_log(rng: random.Random, chunks: int, keys=(b"a", b"b", b"c", b"d"), node_entries: int = 100) -> list:
    """bench/persistence.py's AOF shape: per key in turn a batch of 100 entries
    and a run of 20; payloads half text, half random bytes (some chunks all
    random and ten times bigger: those nodes do not compress, are kept raw
    and the next seals with the fast level); now and then a payload of more
    than node_max_bytes (nodes sealed by bytes)."""
    log = [[effects.CREATE, key, node_entries] for key in keys]
    nexts = dict.fromkeys(keys, 1)
    for chunk in range(chunks):
        key = keys[chunk % len(keys)]
        noisy = rng.random() < 0.3
        for size in (100, 20):
            pairs = []
            for i in range(size):
                if noisy:
                    payload = rng.randbytes(1000)
                elif rng.random() < 0.5:
                    payload = rng.randbytes(100)
                else:
                    payload = (b"entry %08d: " % (nexts[key] + i) + TEXT)[:100]
                if rng.random() < 0.0005:
                    payload *= 12000  # past node_max_bytes: nodes sealed by bytes
                pairs += [b"tag%05d" % rng.randrange(1000), payload]
            log.append([effects.APPEND, key, nexts[key], T0 + 1000 * chunk, *pairs])
            nexts[key] += size
    return log


def load_both(directory) -> tuple:
    sync = aof.load(str(directory), background_seal=False)
    background = aof.load(str(directory), background_seal=True)
    return sync, background


def test_a_load_of_batches_seals_in_the_background_as_at_once(tmp_path, monkeypatch):
    submitted = []
    real = BackgroundSealer.submit

    def counted(self, stream, active, job):
        submitted.append(len(job[2]))
        return real(self, stream, active, job)

    monkeypatch.setattr(BackgroundSealer, "submit", counted)
    write_aof(tmp_path, batch_log(random.Random(5), 60))
    sync, background = load_both(tmp_path)
    assert len(submitted) > 50 and max(submitted) > 1  # nodes of several blocks went to the thread
    assert background.keyspace.cache.sealer is None
    assert full_state(background.keyspace) == full_state(sync.keyspace)
    nodes = [node for key in (b"a", b"b", b"c", b"d") for node in background.keyspace.get(key).node_list()]
    kinds = {(node.sealed and node.compressed, node.sealed and node.short) for node in nodes}
    assert {(True, False), (False, False), (True, True)} <= kinds  # compressed, raw, sealed by bytes


def mixed_log(seed: int) -> list:
    """Batches of bench/persistence.py's shape among every other kind of record."""
    rng = random.Random(seed)
    batches = batch_log(rng, 40, keys=(b"x", b"y"), node_entries=16)
    log = random_log(rng, 700)
    for at, record in zip(sorted(rng.sample(range(len(log)), len(batches))), batches):
        log.insert(at, record)
    log.sort(key=lambda r: r[1] in (b"x", b"y") and r[0] == effects.CREATE, reverse=True)  # (created first)
    return log + [[effects.FLUSH]] + batch_log(rng, 10, keys=(b"x", b"y"), node_entries=16)


@pytest.mark.parametrize("seed", range(3))
def test_a_load_of_every_kind_of_record_seals_as_at_once(tmp_path, seed):
    # batches of other keys among them, so that nodes seal (and settle) between other records
    write_aof(tmp_path, mixed_log(seed))
    sync, background = load_both(tmp_path)
    assert full_state(background.keyspace) == full_state(sync.keyspace)


def test_limits_and_deletes_between_background_seals(tmp_path):
    rng = random.Random(9)
    log = batch_log(rng, 30, node_entries=50)
    nexts = {key: 1 + sum((len(r) - 4) // 2 for r in log if r[0] == effects.APPEND and r[1] == key)
             for key in (b"a", b"b", b"c", b"d")}
    log += [[effects.DELETE, b"a", 7, 8, 300], [effects.EVICT, b"b", 120],
            [effects.CONFIG, b"c", b"max_len", 130], [effects.GROUP, b"d", b"g", 5, 3, 1, 600, 9000, 500]]
    for round_ in range(3):
        for key in (b"a", b"b", b"c", b"d"):
            pairs = [x for i in range(70) for x in (b"t%d" % (i % 7), b"v%d-%d" % (round_, i))]
            log.append([effects.APPEND, key, nexts[key], T0 + 10**9 + round_, *pairs])
            nexts[key] += 70
    write_aof(tmp_path, log)
    sync, background = load_both(tmp_path)
    assert full_state(background.keyspace) == full_state(sync.keyspace)
    assert background.keyspace.get(b"c").length == 130


def test_a_base_snapshot_then_batches(tmp_path):
    keyspace = Keyspace()
    for record in batch_log(random.Random(3), 12):
        effects.apply(keyspace, record)
    base = aof.base_name(1)
    snapshot.write(snapshot.capture(keyspace), os.path.join(tmp_path, base))
    nexts = {key: keyspace.get(key).next_offset for key in (b"a", b"b")}
    log = [[effects.APPEND, key, nexts[key] + 150 * i, T0 + i, *[x for j in range(150) for x in (b"t", b"%d" % j)]]
           for i in range(4) for key in (b"a", b"b")]
    log.sort(key=lambda r: (r[1], r[2]))
    with open(os.path.join(tmp_path, aof.incr_name(1)), "wb") as handle:
        handle.write(b"".join(map(pack, log)))
    aof.write_manifest(str(tmp_path), [aof.ManifestEntry(base, 1, "b"), aof.ManifestEntry(aof.incr_name(1), 1, "i")])
    sync, background = load_both(tmp_path)
    assert full_state(background.keyspace) == full_state(sync.keyspace)


def test_a_failing_load_stops_the_sealer(tmp_path):
    log = batch_log(random.Random(4), 20)
    log.append([effects.APPEND, b"a", 10**6, T0, b"t", b"v"])  # an offset gap
    write_aof(tmp_path, log)
    import threading
    before = {t.name for t in threading.enumerate()}
    with pytest.raises(CorruptFile, match="record does not replay"):
        aof.load(str(tmp_path), background_seal=True)
    assert not {t.name for t in threading.enumerate()} - before  # the thread is gone


def test_a_failure_in_the_thread_is_raised_by_the_load(tmp_path, monkeypatch):
    write_aof(tmp_path, batch_log(random.Random(6), 20))

    def broken(self, bodies, threads=1):
        raise MemoryError

    import zstandard
    monkeypatch.setattr(zstandard.ZstdCompressor, "multi_compress_to_buffer", broken, raising=False)
    with pytest.raises(MemoryError):
        aof.load(str(tmp_path), background_seal=True)


def test_a_seal_made_before_the_ones_before_it_completed_gets_their_level(monkeypatch):
    """The thread held until the end: every seal is made before any completes
    (the level each stream knows is the first one); nodes of random payloads
    (kept raw: the next seals with the fast level) and of text alternate, so
    that completions find wrong guesses and compress again."""
    import threading
    gate = threading.Event()
    real_run = BackgroundSealer._run

    def held(self):
        gate.wait()
        real_run(self)

    monkeypatch.setattr(BackgroundSealer, "_run", held)
    rng = random.Random(2)
    log = [[effects.CREATE, b"k", 50]]
    for node in range(12):
        random_kind = node % 3 != 2
        pairs = [x for i in range(50) for x in (b"t%d" % (i % 5), rng.randbytes(1000) if random_kind
                                                 else (b"entry %08d: " % i + TEXT)[:100])]
        log.append([effects.APPEND, b"k", 1 + 50 * node, T0 + node, *pairs])
    sync = Keyspace()
    for record in log:
        effects.apply(sync, record)
    background = Keyspace()
    sealer = BackgroundSealer(background.cache).open()
    replay = effects.Replay(background, before_other=sealer.settle_all)
    for record in log:
        replay.apply(record)
    replay.flush()
    assert len(sealer._jobs) == 12  # none completed yet
    gate.set()
    sealer.close()
    assert sealer.redone >= 2 and background.cache.sealer is None
    assert full_state(background) == full_state(sync)
    assert {node.compressed for node in background.get(b"k").node_list()} == {True, False}


def test_the_sealer_thread_only_with_a_second_cpu(tmp_path, monkeypatch):
    write_aof(tmp_path, batch_log(random.Random(8), 8))
    made = []
    real = BackgroundSealer.__init__

    def counted(self, cache):
        made.append(cache)
        real(self, cache)

    monkeypatch.setattr(BackgroundSealer, "__init__", counted)
    monkeypatch.setattr(aof, "_cores", lambda: 1)
    one = aof.load(str(tmp_path))
    assert made == []
    monkeypatch.setattr(aof, "_cores", lambda: 2)
    two = aof.load(str(tmp_path))
    assert len(made) == 1
    assert full_state(one.keyspace) == full_state(two.keyspace)


@pytest.mark.parametrize("size", [10, 3000])
def test_a_damaged_payload_is_a_checksum_mismatch_at_its_record(tmp_path, size):
    """The load checks CRCs itself (in pieces: persistence/aof.py's _crc), for
    records under and over the piece's 5 KiB."""
    log = [[effects.CREATE, b"k", 1000]] + [
        [effects.APPEND, b"k", 1 + size * i, T0 + i, *[x for j in range(size) for x in (b"t", b"v")]] for i in range(3)]
    offsets = write_aof(tmp_path, log)
    assert (len(pack(log[2])) > 5120) == (size == 3000)
    path = tmp_path / aof.incr_name(1)
    data = bytearray(path.read_bytes())
    data[offsets[2] + 30] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFile, match="record checksum mismatch") as failed:
        aof.load(str(tmp_path), background_seal=True)
    assert failed.value.offset == offsets[2]
