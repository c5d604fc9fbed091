"""Unit tests of persistence/ in isolation: framing, snapshots, effect replay, AOF loading."""

from __future__ import annotations

import os
import random

import pytest

from engine import Keyspace
from engine.groups import Group
from persistence import aof, effects, snapshot
from persistence.framing import CorruptFile, TornTail, iter_frames, pack, unpack


def records_of(data: bytes) -> list:
    return [unpack(payload) for _, payload in iter_frames(data)]


class TestFraming:
    def test_round_trip(self):
        recs = [[1, b"k", 1, 99, b"t", b"x" * 300], [2, b"k", 5], [5]]
        assert records_of(b"".join(pack(r) for r in recs)) == recs

    def test_every_truncation_of_the_last_record_is_a_torn_tail(self):
        good = pack([1, b"k", 1, 1, b"t", b"a"]) + pack([2, b"k", 2])
        last = pack([1, b"k", 2, 2, b"tag", b"payload" * 20])
        for cut in range(1, len(last)):
            with pytest.raises(TornTail) as info:
                records_of(good + last[:cut])
            assert info.value.offset == len(good)

    def test_flipped_byte_is_corruption_not_a_torn_tail(self):
        data = bytearray(b"".join(pack([1, b"k", i, i, b"t", b"v" * 50]) for i in range(1, 20)))
        rng = random.Random(11)
        for _ in range(200):
            position = rng.randrange(len(data))
            damaged = bytearray(data)
            damaged[position] ^= 0x41
            with pytest.raises(CorruptFile):
                records_of(bytes(damaged))

    def test_damaged_length_in_the_middle_is_corruption(self):
        first = pack([1, b"k", 1, 1, b"t", b"a"])
        data = bytearray(first + pack([2, b"k", 2]) + pack([2, b"k", 3]))
        data[len(first) + 2 : len(first) + 6] = (10**6).to_bytes(4, "little")  # points past the end
        with pytest.raises(CorruptFile) as info:
            records_of(bytes(data))
        assert info.value.offset == len(first)


def build_keyspace() -> Keyspace:
    keyspace = Keyspace()
    stream = keyspace.get_or_create(b"big", 10)
    for i in range(95):
        stream.append(b"tag%d" % (i % 7), b"payload %d " % i * 5, 1_000_000_000 + i)
    stream.evict_through(12)
    stream.delete(40)
    stream.config.max_len = 500
    group = stream.groups[b"g"] = Group(b"g", 13)
    group.read(stream, 5, 1000, (500, 60000), 100)
    small = keyspace.get_or_create(b"small", 1000)
    small.append(b"t", b"", 5)
    keyspace.get_or_create(b"empty", 1000)
    return keyspace


def same_state(a: Keyspace, b: Keyspace) -> None:
    assert sorted(k for k, _ in a.items()) == sorted(k for k, _ in b.items())
    for key, left in a.items():
        right = b.get(key)
        right._check()
        assert (left.first, left.next_offset, left.length, left.config) == (
            right.first, right.next_offset, right.length, right.config)
        assert left.read(1, left.next_offset) == right.read(1, right.next_offset)
        assert [e.time_ns for e in left.iter_from(1)] == [e.time_ns for e in right.iter_from(1)]
        assert {n: g.export_state() for n, g in left.groups.items()} == {
            n: g.export_state() for n, g in right.groups.items()}


class TestSnapshot:
    def test_round_trip(self, tmp_path):
        keyspace = build_keyspace()
        path = str(tmp_path / "dump.tsr")
        snapshot.write(snapshot.capture(keyspace), path)
        loaded = Keyspace()
        for key, stream in snapshot.load_file(path).items():
            loaded.put(key, stream)
        same_state(keyspace, loaded)

    def test_capture_is_not_affected_by_later_changes(self, tmp_path):
        keyspace = build_keyspace()
        captured = snapshot.capture(keyspace)
        stream = keyspace.get(b"big")
        for i in range(50):
            stream.append(b"late", b"x", 2_000_000_000 + i)
        stream.evict_through(60)
        path = str(tmp_path / "dump.tsr")
        snapshot.write(captured, path)
        loaded = snapshot.load_file(path)
        assert loaded[b"big"].next_offset == 96 and loaded[b"big"].first == 13

    def test_any_flipped_byte_is_detected_with_an_offset(self, tmp_path):
        path = tmp_path / "dump.tsr"
        snapshot.write(snapshot.capture(build_keyspace()), str(path))
        data = path.read_bytes()
        for position in random.Random(7).sample(range(len(data)), 60):
            damaged = bytearray(data)
            damaged[position] ^= 0x10
            with pytest.raises(CorruptFile) as info:
                snapshot.load(bytes(damaged), "dump.tsr")
            assert "dump.tsr" in str(info.value)

    def test_truncated_and_empty_files(self, tmp_path):
        path = tmp_path / "dump.tsr"
        snapshot.write(snapshot.capture(build_keyspace()), str(path))
        data = path.read_bytes()
        for size in (0, 5, 20, len(data) // 2, len(data) - 1):
            with pytest.raises(CorruptFile):
                snapshot.load(data[:size])

    def test_write_is_atomic_and_leaves_no_temp_file(self, tmp_path):
        path = str(tmp_path / "dump.tsr")
        snapshot.write(snapshot.capture(build_keyspace()), path)
        snapshot.write(snapshot.capture(Keyspace()), path)
        assert os.listdir(tmp_path) == ["dump.tsr"]
        assert snapshot.load_file(path) == {}


class TestReplay:
    def test_records_rebuild_the_state(self):
        keyspace = Keyspace()
        log = [
            [effects.CREATE, b"s", 3],
            [effects.APPEND, b"s", 1, 100, b"a", b"1", b"b", b"2"],
            [effects.APPEND, b"s", 3, 101, b"a", b"3"],
            [effects.CONFIG, b"s", b"max_len", 10, b"allow_direct", True],
            [effects.GROUP, b"s", b"g", 1],
            [effects.GROUP, b"s", b"g", 3, 1, 1, 600, 9000, 500, 2, 1, 600, 9000, 500],
            [effects.ACK, b"s", b"g", 1],
            [effects.EVICT, b"s", 2],
            [effects.DELETE, b"s", 3],
            [effects.CREATE, b"gone", 1000],
            [effects.DELKEY, b"gone"],
        ]
        for record in log:
            effects.apply(keyspace, records_of(pack(record))[0])
        stream = keyspace.get(b"s")
        stream._check()
        assert stream.read(1, 10) == [None, [2, b"b", b"2"], None]
        assert stream.config.max_len == 10
        group = stream.groups[b"g"]
        assert group.next == 3 and group.pending_offsets() == [2]
        assert keyspace.get(b"gone") is None

    @pytest.mark.parametrize("record", [
        [effects.APPEND, b"nokey", 1, 1, b"t", b"x"],
        [effects.APPEND, b"s", 7, 1, b"t", b"x"],   # offsets must line up
        [effects.CONFIG, b"s", b"bogus", 1],
        [effects.GROUP, b"s", b"g", 1, 5],          # partial pending entry
        [42, b"s"],
    ])
    def test_records_that_do_not_fit_raise(self, record):
        keyspace = Keyspace()
        effects.apply(keyspace, [effects.CREATE, b"s", 10])
        with pytest.raises(effects.ReplayError):
            effects.apply(keyspace, record)


class TestAofFiles:
    def make_history(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        keyspace = Keyspace()
        keyspace.get_or_create(b"s", 10).append(b"t", b"base", 1)
        snapshot.write(snapshot.capture(keyspace), os.path.join(directory, aof.base_name(1)))
        with open(os.path.join(directory, aof.incr_name(1)), "wb") as handle:
            for i in range(2, 12):
                handle.write(pack([effects.APPEND, b"s", i, 1 + i, b"t", b"v%d" % i]))
        aof.write_manifest(directory, [aof.ManifestEntry(aof.base_name(1), 1, "b"),
                                       aof.ManifestEntry(aof.incr_name(1), 1, "i")])

    def test_load(self, tmp_path):
        self.make_history(str(tmp_path))
        result = aof.load(str(tmp_path))
        assert result.records == 10 and result.truncated_at is None
        assert result.keyspace.get(b"s").read(1, 20)[-1] == [11, b"t", b"v11"]

    def test_torn_tail_truncated_or_refused(self, tmp_path):
        self.make_history(str(tmp_path))
        incr = tmp_path / aof.incr_name(1)
        good_size = incr.stat().st_size
        incr.write_bytes(incr.read_bytes() + pack([effects.APPEND, b"s", 12, 20, b"t", b"torn"])[:9])
        with pytest.raises(aof.PersistenceError, match="incomplete"):
            aof.load(str(tmp_path), truncate_torn_tail=False)
        assert incr.stat().st_size == good_size + 9  # refused: untouched
        result = aof.load(str(tmp_path))
        assert result.truncated_at == (str(incr), good_size)
        assert incr.stat().st_size == good_size

    def test_missing_file_and_bad_manifest(self, tmp_path):
        self.make_history(str(tmp_path))
        (tmp_path / aof.incr_name(1)).unlink()
        with pytest.raises(aof.PersistenceError, match="does not exist"):
            aof.load(str(tmp_path))
        (tmp_path / aof.MANIFEST).write_text("")
        with pytest.raises(CorruptFile, match="lists no file"):
            aof.load(str(tmp_path))
        (tmp_path / aof.MANIFEST).write_text("file ../etc/passwd seq 1 type i\n")
        with pytest.raises(CorruptFile, match="bad manifest line"):
            aof.load(str(tmp_path))
