"""A run's store into the active node's columns in C (engine/_columns.c
``store_run``, through ``Stream.append_columns``) against the plain-Python store
(``Stream._append_chunks``): on random runs (node boundaries, nodes sealed by
bytes, new tags, empty and large payloads, payloads that are not bytes, runs
crossing a seal, per-entry times, single appends between them) the two build
the same nodes byte for byte and read back the same; a MemoryError at each
allocation of the C store leaves the node as it was, and through
``append_columns`` all or nothing as the Python store does.  And
``run_columns`` (a pipelined run's columns) against ``zip``; ``block_bodies``
(a node's block bodies at its seal) against ``_block_bodies_python``.

The C tests are marked ``speedups`` (.ci/run's pure-Python pass deselects
them); the others run on whichever store the build has.
"""

from __future__ import annotations

import random
from array import array

import pytest

from tstream.engine import node as node_module
from tstream.engine import stream as stream_module
from tstream.engine.invariants import check_stream
from tstream.engine.stream import Stream

from . import c_extensions

try:
    from tstream.engine._columns import block_bodies as c_block_bodies
    from tstream.engine._columns import run_columns as c_run_columns
    from tstream.engine._columns import store_run as c_store_run
except ImportError:
    c_store_run = c_run_columns = c_block_bodies = None

needs_c = c_extensions.needs_c(c_store_run)

T0 = 1_700_000_000_000_000_000


def _python_store(monkeypatch) -> None:
    monkeypatch.setattr(stream_module, "_store_run", None)


def _layout(s: Stream) -> list:
    """Everything a stream's nodes hold, comparable between two streams."""
    out = [s.first, s.next_offset, s.last_time, list(s._tag_list), s._node_bytes]
    for node in s._nodes:
        if node.sealed:
            out.append(("sealed", node.start, node.cap_end, node.short, node.blob()))
        else:
            buf, ends, tags, times = node.decoded()
            out.append(("active", node.start, node.cap_end, bytes(buf), ends.typecode, ends.tolist(),
                        tags.tolist(), times.tolist(), node.ends is None))
    return out


def _random_payload(rng: random.Random, i: int):
    kind = rng.random()
    if kind < 0.1:
        return b""
    if kind < 0.15:
        return rng.randbytes(rng.randrange(300, 900))  # over small byte limits
    if kind < 0.2:
        return bytearray(b"ba%d" % i)
    if kind < 0.25:
        return memoryview(b"mv-%d-xyz" % i)[1:]
    return b"v%d" % rng.randrange(1000) * rng.randrange(1, 4)


def _random_ops(rng: random.Random) -> list:
    tags = [b"t%d" % k for k in range(rng.choice((1, 3, 40)))]  # 40: past the small tag table
    ops = []
    now = T0
    for _ in range(rng.randrange(5, 40)):
        now += rng.choice((0, 1, 1000, -500))
        n = rng.choice((1, 2, 3, 16, 16, 50, 200))
        if rng.random() < 0.5:
            run_tags = [rng.choice(tags)] * n
        else:
            run_tags = [rng.choice(tags) if rng.random() < 0.9 else b"new-%d" % rng.randrange(100) for _ in range(n)]
        datas = [_random_payload(rng, i) for i in range(n)]
        if rng.random() < 0.3:
            datas = tuple(datas)
        kind = rng.random()
        if kind < 0.1:
            ops.append(("append", run_tags[0], datas[0], now))
        elif kind < 0.25:
            times = [now + rng.randrange(-2000, 2000) for _ in range(n)]
            ops.append(("columns", run_tags, datas, 0, times))
        else:
            ops.append(("columns", run_tags, datas, now, None))
    return ops


def _apply(s: Stream, op) -> object:
    try:
        if op[0] == "append":
            return s.append(op[1], op[2], op[3])
        return s.append_columns(op[1], op[2], op[3], times=op[4])
    except Exception as exc:  # noqa: BLE001 (compared between the two stores)
        return (type(exc), str(exc))


def _twin_streams(rng: random.Random) -> tuple[Stream, Stream]:
    node_entries = rng.choice((1, 2, 7, 16, 64, 1000))
    node_max_bytes = rng.choice((0, 0, 64, 700, 2000))
    return (Stream(node_entries=node_entries, node_max_bytes=node_max_bytes),
            Stream(node_entries=node_entries, node_max_bytes=node_max_bytes))


@needs_c
def test_the_c_store_builds_the_nodes_the_python_store_builds(monkeypatch):
    rng = random.Random(1911)
    for _ in range(150):
        with_c, pure = _twin_streams(rng)
        for op in _random_ops(rng):
            got = _apply(with_c, op)
            with monkeypatch.context() as patch:
                _python_store(patch)
                want = _apply(pure, op)
            assert got == want, op
            assert (with_c.next_offset, with_c.last_time, len(with_c._nodes)) == (
                pure.next_offset, pure.last_time, len(pure._nodes)), op
        assert _layout(with_c) == _layout(pure)
        check_stream(with_c)
        assert with_c.read(1, with_c.next_offset) == pure.read(1, pure.next_offset)


@needs_c
def test_a_bad_payload_changes_nothing_in_either_store(monkeypatch):
    """(The C store checks the payloads after interning the run's new tags, and
    forgets them then: the tag table keeps a free id where the Python store,
    which checks first, has none; the next new tag takes that id in both.)"""
    for python in (False, True):
        with monkeypatch.context() as patch:
            if python:
                _python_store(patch)
            s = Stream(node_entries=4)
            s.append_columns([b"a", b"b"], [b"1", b"2"], T0)
            before = _layout(s)
            with pytest.raises(TypeError, match="sequence item 3: expected a bytes-like object, int found"):
                s.append_columns([b"a", b"new", b"a", b"a", b"a"], [b"x", b"y", b"z", 7, b"w"], T0 + 5)
            after = _layout(s)
            after[3] = after[3][:3]  # (ids 0, 1, 2: None, a, b)
            assert after == before
            assert s._tag_lookup(b"new") is None  # the new tag forgotten
            check_stream(s)
            assert s.append_columns([b"other"], [b"x"], T0) == 3
            assert s._tag_lookup(b"other") == 3
            check_stream(s)


@needs_c
def test_a_bad_payload_in_a_later_nodes_share_changes_nothing(monkeypatch):
    """The run's first store_run call checks every payload, a later one only its
    node's share (a run over many nodes costs O(pairs), not O(pairs * nodes)):
    a bad payload in the last node's share still fails before any change."""
    for python in (False, True):
        with monkeypatch.context() as patch:
            if python:
                _python_store(patch)
            s = Stream(node_entries=4)
            s.append_columns([b"a"], [b"1"], T0)
            before = _layout(s)
            datas: list = [b"x"] * 40
            datas[38] = 7
            with pytest.raises(TypeError, match="sequence item 38: expected a bytes-like object, int found"):
                s.append_columns([b"a"] * 40, datas, T0 + 5)
            assert _layout(s) == before
            check_stream(s)


@needs_c
def test_store_run_past_the_first_call_checks_only_its_share():
    node = bytearray(b"ab"), array("I", (0, 2)), array("I", (1,)), array("q", (5,))
    with pytest.raises(TypeError):  # start 0: every payload checked
        c_store_run(*node, [b"1", b"2", 7], 1, 9, None, 0, 1, 100)
    assert c_store_run(*node, [b"1", b"2", 7], 1, 9, None, 1, 1, 100) == 1  # start 1: b"2" only
    assert bytes(node[0]) == b"ab2" and node[1].tolist() == [0, 2, 3]


def test_a_run_across_seals_reads_back():
    s = Stream(node_entries=8, node_max_bytes=40)
    datas = [b"x" * (i % 13) for i in range(100)]
    first = s.append_columns([b"t"] * 100, datas, T0)
    assert first == 1
    assert [entry[2] for entry in s.read(1, 100)] == datas
    assert any(node.short for node in s._nodes if node.sealed)  # some sealed by bytes
    check_stream(s)
    big = b"y" * 100  # bigger than node_max_bytes: a node of its own
    assert s.append_columns([b"t", b"t", b"u"], [b"a", big, b"b"], T0) == 101
    assert [entry[2] for entry in s.read(101, 3)] == [b"a", big, b"b"]
    check_stream(s)


def _columns_of(node) -> tuple:
    return bytes(node.buf), node.ends.tobytes(), node.tags.tobytes(), node.times.tobytes()


@needs_c
def test_store_run_directly():
    node_buf, ends, tags, times = bytearray(b"ab"), array("I", (0, 2)), array("I", (1,)), array("q", (5,))
    datas = (b"x", bytearray(b"yy"), memoryview(b"zzz"), b"")
    assert c_store_run(node_buf, ends, tags, times, datas, 3, 9, None, 0, 10, 1 << 62) == 4
    assert (bytes(node_buf), ends.tolist(), tags.tolist(), times.tolist()) == (
        b"abxyyzzz", [0, 2, 3, 5, 8, 8], [1, 3, 3, 3, 3], [5, 9, 9, 9, 9])
    # room for two entries, then for three bytes; tag ids and times per entry
    assert c_store_run(node_buf, ends, tags, times, [b"1", b"2", b"3"], [7, 8, 9], 0,
                       array("q", (11, 12, 13)), 0, 2, 1 << 62) == 2
    assert c_store_run(node_buf, ends, tags, times, [b"1", b"22", b"33"], [7, 8, 9], 0,
                       array("q", (11, 12, 13)), 1, 10, 3) == 1  # from start 1: b"22" fits, b"33" not
    assert tags.tolist()[-3:] == [7, 8, 8] and times.tolist()[-3:] == [11, 12, 12]
    assert bytes(node_buf).endswith(b"1222")
    # nothing fits: 0 (a node with entries); one entry anyway in an empty node
    assert c_store_run(node_buf, ends, tags, times, [b"12345"], 1, 0, None, 0, 10, 4) == 0
    empty = bytearray(), array("I", (0,)), array("I"), array("q")
    assert c_store_run(*empty, [b"12345", b"6"], 1, 0, None, 0, 10, 4) == 1
    assert c_store_run(*empty, [b"x"], 1, 0, None, 0, 0, 100) == 0  # no free offset
    assert bytes(empty[0]) == b"12345" and empty[1].tolist() == [0, 5]
    wide = bytearray(b"abc"), array("Q", (0, 3)), array("I", (1,)), array("q", (1,))
    assert c_store_run(*wide, [b"d"], 2, 3, None, 0, 5, 100) == 1
    assert wide[1].tolist() == [0, 3, 4]


@needs_c
def test_store_run_rejects_bad_arguments():
    node = bytearray(b"ab"), array("I", (0, 2)), array("I", (1,)), array("q", (5,))
    before = _columns_of_tuple(node)
    with pytest.raises(TypeError):
        c_store_run(bytes(2), *node[1:], [b"x"], 1, 0, None, 0, 10, 100)
    with pytest.raises(TypeError):
        c_store_run(node[0], array("H", (0, 2)), node[2], array("f", (1.0,)), [b"x"], 1, 0, None, 0, 10, 100)
    with pytest.raises(TypeError):
        c_store_run(*node, [b"x", b"y"], [1], 0, None, 0, 10, 100)  # fewer tag ids than payloads
    with pytest.raises(OverflowError):
        c_store_run(*node, [b"x"], 1 << 33, 0, None, 0, 10, 100)
    with pytest.raises(ValueError):
        c_store_run(*node, [b"x"], 1, 0, None, 2, 10, 100)
    with pytest.raises(TypeError):
        c_store_run(*node, [b"x"], 1, 0, array("i", (1,)), 0, 10, 100)
    with memoryview(node[1]):  # an exported column cannot grow: BufferError, nothing changed
        with pytest.raises(BufferError):
            c_store_run(*node, [b"x"], 1, 0, None, 0, 10, 100)
    with memoryview(node[3]):
        with pytest.raises(BufferError):
            c_store_run(*node, [b"x"], 1, 0, None, 0, 10, 100)
    with memoryview(node[0]):
        with pytest.raises(BufferError):
            c_store_run(*node, [b"x"], 1, 0, None, 0, 10, 100)
    assert _columns_of_tuple(node) == before


def _columns_of_tuple(node) -> tuple:
    return tuple(bytes(column) if isinstance(column, bytearray) else column.tolist() for column in node)


@needs_c
def test_store_run_under_memory_errors_leaves_the_node_as_it_was():
    for n in (1, 16, 300):  # 300: a result int that is not a cached small int
        datas = [b"p%d" % i for i in range(n)]
        node = bytearray(b"ab" * 40), array("I", (0, 80)), array("I", (1,)), array("q", (5,))
        before = _columns_of_tuple(node)
        failures = 0
        for start in range(40):
            import _testcapi

            _testcapi.set_nomemory(start, start + 1)
            try:
                stored = c_store_run(*node, datas, 2, 9, None, 0, 1000, 1 << 62)
            except MemoryError:
                failures += 1
                stored = None
            finally:
                _testcapi.remove_mem_hooks()
            if stored is None:
                assert _columns_of_tuple(node) == before, (n, start)
            else:
                assert stored == n
                node = bytearray(b"ab" * 40), array("I", (0, 80)), array("I", (1,)), array("q", (5,))
        assert failures >= 4, n  # the result int (n > 256), three buffers, the growths


@needs_c
def test_append_columns_under_memory_errors_is_all_or_nothing():
    import _testcapi

    for node_entries, n in ((1000, 16), (10, 16), (4, 3)):
        for start in range(60):
            s = Stream(node_entries=node_entries)
            s.append_columns([b"t"] * 5, [b"e%d" % i for i in range(5)], T0)
            before = _layout(s)
            # (one tag the stream has; new tags: the test below)
            tags = [b"t"] * n
            datas = [b"d%d" % i for i in range(n)]
            _testcapi.set_nomemory(start, start + 1)
            try:
                s.append_columns(tags, datas, T0 + 1)
                failed = False
            except MemoryError:
                failed = True
            finally:
                _testcapi.remove_mem_hooks()
            check_stream(s)
            if failed:
                if s.next_offset == 6:
                    assert _layout(s) == before, (node_entries, start)
                else:  # what went into sealed nodes is kept (as the Python store keeps it)
                    assert s.read(6, n) == [[6 + i, tags[i], datas[i]] for i in range(s.next_offset - 6)]
            else:
                assert s.read(6, n) == [[6 + i, tags[i], datas[i]] for i in range(n)]


@needs_c
def test_run_columns_is_zip():
    rng = random.Random(7)
    for _ in range(500):
        width = rng.randrange(1, 7)
        rows = [[b"w%d" % rng.randrange(5) for _ in range(width)] for _ in range(rng.randrange(1, 20))]
        if rng.random() < 0.3:
            rows = [tuple(row) for row in rows]
        first = rng.randrange(0, width + 1)
        assert c_run_columns(rows, first) == tuple(zip(*rows))[first:]
    assert c_run_columns([[b"a", b"b"]], 2) == ()
    for bad in ([], [[b"a", b"b"], [b"c"]], [[b"a"], b"x"], [b"ab"]):
        with pytest.raises(ValueError):
            c_run_columns(bad, 0)
    with pytest.raises(ValueError):
        c_run_columns([[b"a"]], 2)
    rows = [[b"TWRITE", b"k", b"t", b"v%d" % i] for i in range(300)]
    assert c_extensions.memory_error_count(lambda: c_run_columns(rows, 1), 8) >= 3
    assert c_run_columns(rows, 1) == tuple(zip(*rows))[1:]


def test_run_columns_follows_the_switch():
    words = c_extensions.probe_words("from tstream.engine import stream; print(stream.run_columns is None, "
                                     "stream._store_run is None)", pure=True)
    assert words == ["True", "True"]


@pytest.mark.parametrize("pure", [False, True])
def test_new_tags_under_memory_errors_leave_the_tag_table_exact(pure, monkeypatch):
    """A MemoryError while a run brings new tags (their interning, the table's byte
    count, the store) leaves the tag table exact: check_stream's _tag_mem among it."""
    import _testcapi

    if pure:
        monkeypatch.setattr(stream_module, "_store_run", None)
    for node_entries, n in ((1000, 16), (10, 16), (4, 3)):
        for start in range(80):
            s = Stream(node_entries=node_entries)
            s.append_columns([b"t"] * 5, [b"e%d" % i for i in range(5)], T0)
            tags = [b"new%d" % (i % 3) for i in range(n)]
            datas = [b"d%d" % i for i in range(n)]
            _testcapi.set_nomemory(start, start + 1)
            try:
                s.append_columns(tags, datas, T0 + 1)
            except MemoryError:
                pass
            finally:
                _testcapi.remove_mem_hooks()
            check_stream(s)
            assert s.read(6, n) == [[6 + i, tags[i], datas[i]] for i in range(s.next_offset - 6)]


@pytest.mark.parametrize("pure", [False, True])
def test_payloads_of_wider_items_are_stored_as_their_bytes(pure, monkeypatch):
    """A memoryview of 4-byte items: len() counts items, the store counts bytes
    (the pure-Python store cut its chunks by len() once)."""
    if pure:
        monkeypatch.setattr(stream_module, "_store_run", None)
    s = Stream(node_entries=4)
    datas = [memoryview(array("I", [i, i + 1])) for i in range(6)] + [b"xy"]
    s.append_columns([b"t"] * 7, datas, T0)
    check_stream(s)
    assert s.read(1, 10) == [[1 + i, b"t", bytes(d)] for i, d in enumerate(datas)]
def _random_tables(rng: random.Random) -> tuple:
    """A node's tables as a seal finds them (``buf, ends, tags, times``, the
    entry count, the block size): empty and large payloads, 32- and 64-bit
    ends, a first end that is not 0, tables longer than ``count``."""
    count = rng.randint(1, 80)
    lens = [rng.choice((0, 0, 1, 5, 7, 17, 100, 999)) for _ in range(count)]
    first = rng.choice((0, 0, 3, 1000))
    buf = bytearray(rng.randbytes(first + sum(lens) + rng.randint(0, 9)))
    ends = array(rng.choice("IQ"), [first])
    for length in lens:
        ends.append(ends[-1] + length)
    if rng.random() < 0.3:
        ends.append(ends[-1])
    tags = array("I", [rng.randrange(1 << 32) for _ in range(count + rng.randint(0, 2))])
    times = array("q", [rng.randrange(-(1 << 63), 1 << 63) for _ in range(count)])
    return buf, ends, tags, times, count, rng.randint(1, count + 2)


def test_block_bodies_python_is_block_body_of_each_block():
    rng = random.Random(19)
    for _ in range(200):
        buf, ends, tags, times, count, per_block = _random_tables(rng)
        expected = []
        for a in range(0, count, per_block):
            c = min(a + per_block, count)
            rebased = array(ends.typecode, [e - ends[a] for e in ends[a:c + 1]])
            expected.append(node_module._block_body(bytes(buf[ends[a]:ends[c]]), rebased, tags[a:c], times[a:c]))
        assert node_module._block_bodies_python(buf, ends, tags, times, count, per_block) == expected
        buf.append(0)  # no view of the buffer is left exported


@needs_c
def test_block_bodies_is_the_python_bodies():
    assert node_module._block_bodies is c_block_bodies
    rng = random.Random(20)
    for _ in range(500):
        buf, ends, tags, times, count, per_block = _random_tables(rng)
        assert (c_block_bodies(buf, ends, tags, times, count, per_block)
                == node_module._block_bodies_python(buf, ends, tags, times, count, per_block))
        buf.append(0)


@needs_c
def test_block_bodies_rejects_bad_tables():
    buf, ends = bytearray(b"abcdef"), array("I", (0, 2, 6))
    tags, times = array("I", (1, 1)), array("q", (5, 6))
    assert c_block_bodies(buf, ends, tags, times, 2, 1) == node_module._block_bodies_python(buf, ends, tags, times, 2, 1)
    bad = [
        (buf, ends, tags, times, 3, 1),                      # more entries than the tables hold
        (buf, ends, tags, times, 0, 1),
        (buf, ends, tags, times, 2, 0),
        (buf, array("I", (0, 4, 2)), tags, times, 2, 1),     # ends going backwards
        (buf, array("I", (0, 2, 7)), tags, times, 2, 1),     # past the buffer
        (buf, array("H", (0, 2, 6)), tags, times, 2, 1),     # 16-bit ends
        (buf, ends, array("Q", (1, 1)), times, 2, 1),
        (buf, ends, tags, array("i", (5, 6)), 2, 1),
    ]
    for args in bad:
        with pytest.raises(ValueError):
            c_block_bodies(*args)
    with pytest.raises(TypeError):
        c_block_bodies(buf, ends, tags, times, 2)
    with pytest.raises(TypeError):
        c_block_bodies("abc", ends, tags, times, 2, 1)
    buf.append(0)  # every buffer released, on errors too


@needs_c
def test_block_bodies_under_memory_errors():
    buf, ends, tags, times, count, _ = _random_tables(random.Random(21))
    per_block = max(1, count // 5)
    expected = node_module._block_bodies_python(buf, ends, tags, times, count, per_block)
    assert c_extensions.memory_error_count(lambda: c_block_bodies(buf, ends, tags, times, count, per_block), 12) >= 2
    assert c_block_bodies(buf, ends, tags, times, count, per_block) == expected
    buf.append(0)


def test_seals_with_either_bodies_are_the_same_bytes(monkeypatch):
    """A stream's sealed nodes are the same bytes with the C bodies and the
    Python ones (on whichever the build has; the C test above compares them)."""
    blobs = []
    for bodies in (node_module._block_bodies, node_module._block_bodies_python):
        monkeypatch.setattr(node_module, "_block_bodies", bodies)
        s = Stream(node_entries=300)
        rng = random.Random(22)
        for _ in range(40):
            s.append_columns([b"t%d" % rng.randint(0, 2) for _ in range(25)],
                             [rng.randbytes(rng.randint(0, 300)) for _ in range(25)], T0)
        check_stream(s)
        blobs.append([node.blob() for node in s._nodes if node.sealed])
    assert blobs[0] == blobs[1] and len(blobs[0]) == 3


def test_block_bodies_follows_the_switch():
    words = c_extensions.probe_words("from tstream.engine import node; "
                                     "print(node._block_bodies is node._block_bodies_python)", pure=True)
    assert words == ["True"]
    assert c_extensions.probe_words("from tstream.engine import node; "
                                    "print(node._block_bodies is node._block_bodies_python)",
                                    pure=False) == ["False" if c_block_bodies is not None else "True"]
