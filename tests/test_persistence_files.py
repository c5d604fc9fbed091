"""Unit tests of persistence/ in isolation: framing, snapshots, effect replay, AOF loading."""

from __future__ import annotations

import os
import random

import pytest

from tstream.engine import Keyspace
from tstream.engine.groups import Group
from tstream.persistence import aof, effects, snapshot
from tstream.persistence.framing import CorruptFile, TornTail, iter_frames, pack, unpack


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
    group = Group(b"g", 13)
    stream.add_group(b"g", group)
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


def rich_keyspace() -> Keyspace:
    """Several sealed nodes of several blocks, a raw (incompressible) node,
    deleted entries, an eviction in the middle of a node, a freed tag, a
    partial active node, groups with pending entries."""
    rng = random.Random(5)
    keyspace = Keyspace()
    stream = keyspace.get_or_create(b"rich", 50)
    t = 1_700_000_000_000_000_000
    stream.append(b"once", b"only in the first node", t)
    for i in range(1, 330):
        if 150 <= i < 200:
            data = rng.randbytes(300)  # a node that does not compress
        else:
            data = b"entry %d of a rich stream; " % i * (1 + i % 4)
        stream.append(b"sub.%d.%s" % (i % 5, b"ab"[i % 2:i % 2 + 1]), data, t + i * 1000)
    stream.evict_through(62)  # frees "once" and lands inside node 2
    for offset in (63, 64, 80, 151, 199, 200, 320, 329):
        stream.delete(offset)
    stream.config.max_age_ms = 10**9
    group = Group(b"g1", 70)
    stream.add_group(b"g1", group)
    group.read(stream, 20, 1000, (500, 60000), 100)
    stream.add_group(b"g2", Group(b"g2", 1))
    keyspace.get_or_create(b"one", 7).append(b"t", b"x", 5)
    return keyspace


def node_record_spans(data: bytes) -> list[tuple[int, int, bytes]]:
    """(start, end, kind) of every record of a snapshot file."""
    body = memoryview(data)[: len(data) - snapshot.FOOTER.size]
    return [(pos, pos + 14 + len(payload), bytes(payload[:1]))
            for pos, payload in iter_frames(body, snapshot.FILE_HEADER.size)]


def refreshed_checksums(data: bytearray, start: int, end: int) -> bytes:
    """``data`` with the record at [start, end) and the whole file re-checksummed."""
    import zlib
    payload = bytes(data[start + 14:end])
    data[start + 6:start + 10] = zlib.crc32(payload).to_bytes(4, "little")
    footer = len(data) - snapshot.FOOTER.size
    data[footer + 8:] = zlib.crc32(bytes(data[:footer])).to_bytes(4, "little")
    return bytes(data)


class TestSnapshotLoad:
    """The fast load: node headers, stored refcounts, record-by-record reads."""

    def test_loaded_stream_equals_the_original(self, tmp_path):
        from tstream.engine.subjects import index_of, parse_filter

        keyspace = rich_keyspace()
        path = str(tmp_path / "dump.tsr")
        snapshot.write(snapshot.capture(keyspace), path)
        loaded = snapshot.load_file(path)
        for key, left in keyspace.items():
            right = loaded[key]
            right._check()
            assert (right.first, right.next_offset, right.length, right.last_time, right.config) == (
                left.first, left.next_offset, left.length, left.last_time, left.config)
            for offset in range(1, left.next_offset + 2):  # deleted and evicted ones too
                assert right.get(offset) == left.get(offset)
            assert right.read(1, left.next_offset) == left.read(1, left.next_offset)
            assert list(right._tag_refs) == list(left._tag_refs)
            assert right._tag_list == left._tag_list and right.tag_count() == left.tag_count()
            assert {n: g.export_state() for n, g in right.groups.items()} == {
                n: g.export_state() for n, g in left.groups.items()}
            for node_l, node_r in zip(left.node_list(), right.node_list()):
                assert (node_r.start, node_r.sealed, node_r.count, node_r.ndel) == (
                    node_l.start, node_l.sealed, node_l.count, node_l.ndel)
                if node_r.sealed:
                    assert (node_r.first_time, node_r.last_time, node_r.raw_len, list(node_r.tag_set),
                            node_r.compressed) == (
                        node_l.first_time, node_l.last_time, node_l.raw_len, list(node_l.tag_set),
                        node_l.compressed)
                    assert type(node_r.data) is bytes and node_r.data == node_l.data
        rich_l, rich_r = keyspace.get(b"rich"), loaded[b"rich"]
        assert any(not n.compressed for n in rich_r.node_list() if n.sealed)
        # tag-filtered reads
        for raw in (b"sub.1.a", b"sub.*.b", b"sub.>", b"sub.3.*"):
            flt = parse_filter(raw)
            want = index_of(rich_l)
            got = index_of(rich_r)
            assert list(got.iter_from(got.entries(flt), 1)) == list(want.iter_from(want.entries(flt), 1))
            assert got.last_matching(flt) == want.last_matching(flt)
        rich_r._check()
        # writes and eviction after the load: the stored refcounts fall to zero
        for stream in (rich_l, rich_r):
            stream.append(b"sub.9.a", b"after", 1_800_000_000_000_000_000)
            stream.evict_through(200)
        assert rich_r.read(1, 400) == rich_l.read(1, 400)
        assert list(rich_r._tag_refs) == list(rich_l._tag_refs)
        rich_r._check()
        rich_r.evict_through(rich_r.last)
        rich_r._check()
        assert rich_r.length == 0 and rich_r.nodes == 0 and rich_r.tag_count() == 0
        assert not any(rich_r._tag_refs)

    def test_load_file_does_not_decompress(self, tmp_path, monkeypatch):
        from tstream.engine import BlockCache

        keyspace = rich_keyspace()
        path = str(tmp_path / "dump.tsr")
        snapshot.write(snapshot.capture(keyspace), path)

        class NoDecompression:
            def decompress(self, data):
                raise AssertionError("a node was decompressed while loading")

        real = BlockCache.decompress
        monkeypatch.setattr(BlockCache, "decompress", NoDecompression.decompress)
        loaded = snapshot.load_file(path)
        in_memory = snapshot.load(open(path, "rb").read(), path)
        monkeypatch.setattr(BlockCache, "decompress", real)
        for streams in (loaded, in_memory):
            for key, stream in streams.items():
                stream._check()
                assert stream.read(1, 1000) == keyspace.get(key).read(1, 1000)

    def test_version_1_snapshot_still_loads(self, tmp_path):
        # written by the version-1 writer (commit 4414273) from build_keyspace()
        path = os.path.join(os.path.dirname(__file__), "data", "snapshot-v1.tsr")
        with open(path, "rb") as handle:
            assert handle.read(10)[8:] == b"\x01\x00"
        loaded = Keyspace()
        for key, stream in snapshot.load_file(path).items():
            loaded.put(key, stream)
        same_state(build_keyspace(), loaded)
        # saved again, it is a version-2 file with the same content
        again = str(tmp_path / "again.tsr")
        snapshot.write(snapshot.capture(loaded), again)
        assert open(again, "rb").read(10)[8:] == b"\x02\x00"
        reloaded = Keyspace()
        for key, stream in snapshot.load_file(again).items():
            reloaded.put(key, stream)
        same_state(loaded, reloaded)

    def test_any_flipped_byte_names_its_record(self, tmp_path):
        path = tmp_path / "dump.tsr"
        snapshot.write(snapshot.capture(rich_keyspace()), str(path))
        data = path.read_bytes()
        spans = node_record_spans(data)
        end = len(data) - snapshot.FOOTER.size
        rng = random.Random(3)
        positions = rng.sample(range(len(data)), 40)
        for start, stop, kind in spans:
            if kind == snapshot.KIND_NODE:  # the node's prefix and blob header, where parsing happens
                positions += [start + k for k in (1, 8, 14, 15, 19, 23, 26, 40, 60, 75, 100) if start + k < stop]
        for position in positions:
            damaged = bytearray(data)
            damaged[position] ^= 0x24
            path.write_bytes(bytes(damaged))
            with pytest.raises(CorruptFile) as info:
                snapshot.load_file(str(path))
            assert str(path) in str(info.value)
            inside = [start for start, stop, _ in spans if start <= position < stop]
            if inside:
                assert info.value.offset == inside[0], (position, str(info.value))
            else:
                assert info.value.offset in (0, 8, end), (position, str(info.value))

    def test_damaged_node_header_with_good_checksums(self, tmp_path):
        """The checksums cover the bytes, not the meaning: structural checks still
        refuse nonsense a buggy writer could produce, naming the record."""
        path = tmp_path / "dump.tsr"
        snapshot.write(snapshot.capture(rich_keyspace()), str(path))
        data = path.read_bytes()
        spans = node_record_spans(data)
        start, stop, _ = [span for span in spans if span[2] == snapshot.KIND_NODE][1]
        (bitmap_len,) = snapshot._NODE_PREFIX.unpack_from(data, start + 15)
        blob = start + 19 + bitmap_len
        from tstream.engine import codec as codec_mod

        nblocks = blob + codec_mod._HDR.size + 4
        summary = blob + codec_mod._HDR.size + codec_mod._BLOCKS_HDR.size
        first_offset = blob + codec_mod.BLOB_PREFIX + 8  # the second frame offset
        edits = [
            (nblocks, (1).to_bytes(4, "little")),                 # block geometry
            (first_offset, (10**6).to_bytes(8, "little")),        # offsets not monotone
            (summary, (2**62).to_bytes(8, "little")),             # first_time after last_time
            (summary + 16, (10**9).to_bytes(8, "little")),        # raw length
        ]
        for at, value in edits:
            damaged = bytearray(data)
            damaged[at:at + len(value)] = value
            path.write_bytes(refreshed_checksums(damaged, start, stop))
            with pytest.raises(CorruptFile, match="bad record") as info:
                snapshot.load_file(str(path))
            assert info.value.offset == start
        # the stored refcounts against the nodes' tag sets
        s_start, s_stop, _ = spans[0]
        key, meta = unpack(data[s_start + 15:s_stop])
        refs = bytearray(meta[b"tag_refs"])
        refs[4] += 1  # one more use of tag id 1 than the nodes hold
        meta[b"tag_refs"] = bytes(refs)
        import msgpack

        from tstream.persistence.framing import frame
        record = frame(snapshot.KIND_STREAM + msgpack.packb([key, meta], use_bin_type=True))
        damaged = bytearray(data[:s_start] + record + data[s_stop:])
        path.write_bytes(refreshed_checksums(damaged, s_start, s_start + len(record)))
        with pytest.raises(CorruptFile, match="does not rebuild") as info:
            snapshot.load_file(str(path))
        assert info.value.offset == s_start

    def test_deep_check_compares_headers_with_blocks(self, tmp_path, capsys):
        """A node header that contradicts its blocks (checksums fine): the load takes
        it as written, ``check=True`` and tstream-check decompress and refuse it."""
        from tstream.engine import codec as codec_mod
        from tstream.persistence import check

        path = tmp_path / "dump.tsr"
        snapshot.write(snapshot.capture(rich_keyspace()), str(path))
        assert snapshot.load_file(str(path), check=True)
        assert check.main([str(path)]) == 0
        data = path.read_bytes()
        start, stop, _ = [span for span in node_record_spans(data) if span[2] == snapshot.KIND_NODE][1]
        (bitmap_len,) = snapshot._NODE_PREFIX.unpack_from(data, start + 15)
        first_time = start + 19 + bitmap_len + codec_mod._HDR.size + codec_mod._BLOCKS_HDR.size
        damaged = bytearray(data)
        value = int.from_bytes(damaged[first_time:first_time + 8], "little") - 1
        damaged[first_time:first_time + 8] = value.to_bytes(8, "little")
        path.write_bytes(refreshed_checksums(damaged, start, stop))
        assert snapshot.load_file(str(path))[b"rich"].length == rich_keyspace().get(b"rich").length
        with pytest.raises(CorruptFile, match="summary does not match") as info:
            snapshot.load_file(str(path), check=True)
        assert info.value.offset == start
        assert check.main([str(path)]) == 1
        assert f"at offset {start}" in capsys.readouterr().out

    def test_snapshot_reader_and_offline_nodes(self, tmp_path):
        """pipeline/snapshot_reader.py walks version-2 files; nodes rebuild from its blobs."""
        from tstream.engine import Node
        from tstream.pipeline.snapshot_reader import find_key, iter_node_blobs, open_snapshot

        keyspace = rich_keyspace()
        path = str(tmp_path / "dump.tsr")
        snapshot.write(snapshot.capture(keyspace), path)
        data = open_snapshot(path)
        try:
            item = find_key(data, b"rich", path)
            assert item is not None and len(item.node_pos) == keyspace.get(b"rich").nodes
            for (blob, deleted), node in zip(iter_node_blobs(data, item.node_pos[0], len(item.node_pos), path),
                                             keyspace.get(b"rich").node_list()):
                for check in (True, False):
                    clone = Node.from_blob(blob, 50, check=check)
                    assert clone.decoded()[2].tolist() == node.decoded()[2].tolist()
                    assert bytes(clone.decoded()[0]) == bytes(node.decoded()[0])
                assert deleted == (None if node.deleted is None else bytes(node.deleted))
                del blob, clone
        finally:
            data.close()


class TestNodesSealedByBytes:
    """node-max-bytes: nodes that end before their aligned range, in snapshot files."""

    @staticmethod
    def keyspace() -> Keyspace:
        keyspace = Keyspace()
        keyspace.node_max_bytes = 2000
        stream = keyspace.get_or_create(b"k", 10)
        for i in range(300):
            size = (700, 30, 1500, 90, 5000)[i % 5]
            stream.append(b"t%d" % (i % 3), (b"%d " % i * size)[:size], 1_000_000_000 + i)
        stream.delete(100)
        stream.evict_through(17)
        assert any(node.short for node in stream.node_list())
        return keyspace

    @pytest.mark.parametrize("check", [True, False])
    def test_round_trip(self, tmp_path, check):
        keyspace = self.keyspace()
        path = str(tmp_path / "dump.tsr")
        snapshot.write(snapshot.capture(keyspace), path)
        loaded = Keyspace()
        loaded.node_max_bytes = 2000
        for key, stream in snapshot.load_file(path, check=check).items():
            loaded.put(key, stream)
        same_state(keyspace, loaded)
        left, right = keyspace.get(b"k"), loaded.get(b"k")
        assert [(n.start, n.cap_end, n.short) for n in right.node_list()] == \
               [(n.start, n.cap_end, n.short) for n in left.node_list()]

    def test_offline_reader_reads_every_node(self, tmp_path):
        from tstream.pipeline import offline
        from tstream.pipeline.common import Options

        keyspace = self.keyspace()
        path = str(tmp_path / "dump.tsr")
        snapshot.write(snapshot.capture(keyspace), path)
        expected = [row[0] for row in keyspace.get(b"k").read(1, 400) if row is not None]
        for parts in ("1", "4"):
            options = Options.parse({"path": path, "key": "k", "numPartitions": parts})
            got = [o for part in offline.plan(options) for batch in offline.read(part)
                   for o in batch.column("offset").to_pylist()]
            assert sorted(got) == expected
        window = Options.parse({"path": path, "key": "k", "startingOffset": "120",
                                "endingOffset": "170"})
        got = [o for part in offline.plan(window) for batch in offline.read(part)
               for o in batch.column("offset").to_pylist()]
        assert sorted(got) == [o for o in expected if 120 <= o <= 170]


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
