"""XREADGROUP's new entries written in one C call from the log's tables
(resp/_speedups.c ``encode_stream_tables``; commands/xgroups._deliver_tables).

The C function is tested against its pure-Python reference
(resp/xentries.encode_stream_tables_python) on random tables: the same reply
bytes, id texts and id tuples, the same refusals (None) and errors; and it
survives a MemoryError at each of its allocations.  Those tests are marked
``speedups`` and fail, not skip, where the extension is off.

The server's path is tested against the columns' path it bypasses (which the
Redis-oracle tests check byte for byte against redis-server): the same random
workload (auto ids within and across milliseconds, one-pair, packed and mixed
entries, stored ids, deletions, trims, SETID, several groups and consumers,
small nodes so that reads cross sealed blocks) run twice on an in-process
server with a virtual clock, once with the tables' path off: every reply's
bytes, the effect records and the final state are the same, and the effect
log replays to the live state.  With ``TSTREAM_PURE_PYTHON=1`` the tables'
path is off in both runs (the columns' encoders are faster in Python), so
that test passes there too.
"""

from __future__ import annotations

import os
import random
from array import array

import pytest

import tstream.commands.xgroups as xgroups_commands
import tstream.commands.xstreams as xstreams_commands
from tstream.resp.xentries import STREAM_TABLES_IN_C, encode_stream_tables, encode_stream_tables_python

from . import c_extensions
from .harness import Harness, keyspace_digest

try:
    if os.environ.get("TSTREAM_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("TSTREAM_PURE_PYTHON is set")
    from tstream.resp._speedups import encode_stream_tables as c_encode_stream_tables
except ImportError:
    c_encode_stream_tables = None

needs_c = c_extensions.needs_c(c_encode_stream_tables)
U64 = (1 << 64) - 1
MS = 1_764_222_222_222


def packed_payload(rng: random.Random, items: int | None = None) -> bytes:
    """engine/xids.pack_pairs' form: the count of items after the first field,
    then each as a RESP bulk string."""
    items = rng.choice([1, 3, 3, 5, 125, 126]) if items is None else items
    values = [rng.randbytes(rng.choice([0, 1, 7, 40])) for _ in range(items)]
    return bytes([items]) + b"".join(b"$%d\r\n%s\r\n" % (len(v), v) for v in values)


def random_tables(rng: random.Random, packed: int, last: tuple[int, int]) -> list:
    """A list of tables as Stream.read_tables gives them (entries i..j-1 of
    each), their times mostly derivable after ``last``, now and then not."""
    tables = []
    ns = last[0] * 1_000_000 + rng.choice([0, 0, 999_999, 1_000_000, 5_000_000])
    offset = rng.randrange(1000)
    for _ in range(rng.choice([1, 1, 2, 3, 10])):
        size = rng.randrange(1, 30)
        payloads = []
        for _ in range(size):
            if packed:
                payloads.append(packed_payload(rng) if rng.random() > 0.01 else rng.choice([b"", b"\x7f", b"\x90ab"]))
            else:
                payloads.append(rng.randbytes(rng.choice([0, 1, 10, 100, 2100])))
        ends = [0]
        for payload in payloads:
            ends.append(ends[-1] + len(payload))
        times = []
        for _ in range(size):
            ns += rng.choice([0, 0, 0, 1, 300_000, 1_000_000, 2_500_000])
            if rng.random() < 0.005:
                ns -= 2_000_000  # a time going back: not derivable
            times.append(ns)
        buf = b"".join(payloads)
        i = rng.randrange(size)
        j = rng.randrange(i, size + 1)
        tables.append((rng.choice([buf, bytearray(buf), memoryview(buf)]),
                       array(rng.choice("IQ"), ends), array("I", [rng.randrange(4) for _ in range(size)]),
                       array("q", times), i, j, offset))
        offset += j - i
    return tables


def cases(rng: random.Random, n: int):
    subjects = [b"f", b"seq", b"", b"\r\n" * 1100]
    for _ in range(n):
        packed = rng.randrange(2)
        last = rng.choice([(MS, 0), (MS, 5), (MS - 1, U64), (MS, U64), (MS, U64 - 3), (0, 0), (MS + 3, 99)])
        protocol = rng.choice([2, 3])
        key = rng.choice([None, b"k", b"g:k", b"x" * 300])
        yield protocol, key, random_tables(rng, packed, last), subjects, last[0], last[1], packed


@needs_c
def test_the_c_encoder_matches_its_python_reference_on_random_tables():
    refused = 0
    for args in cases(random.Random(11), 3000):
        expected = encode_stream_tables_python(*args)
        assert c_encode_stream_tables(*args) == expected, args
        refused += expected is None
    assert 0 < refused < 2000  # both outcomes seen


def test_the_reference_is_encode_of_the_nested_entries():
    """encode_stream_tables_python's reply is ``encode`` of KeyedReplies of the
    entries (the field arrays as lists), its ids derived as _ids_from_times does."""
    from tstream.engine.xgroups import _ids_from_times
    from tstream.engine.xids import unpack_pairs
    from tstream.resp import KeyedReplies, StreamEntries, encode

    rng = random.Random(12)
    for protocol, key, tables, subjects, last_ms, last_seq, packed in cases(rng, 600):
        made = encode_stream_tables_python(protocol, key, tables, subjects, last_ms, last_seq, packed)
        if made is None:
            continue
        reply, texts, ids = made
        times = [t for _b, _e, _t, ts, i, j, _f in tables for t in ts[i:j]]
        if times and last_seq < U64:
            derived = _ids_from_times(times, (last_ms, last_seq))
            assert derived is not None and (ids, texts) == (derived[0], derived[1])
        entries = []
        k = 0
        for buf, ends, tags, _times, i, j, _first in tables:
            for e in range(i, j):
                subject, payload = subjects[tags[e]], bytes(buf[ends[e]:ends[e + 1]])
                fields = [subject, *unpack_pairs(subject, payload)[1:]] if packed else [subject, payload]
                entries.append([texts[k], fields])
                k += 1
        assert k == len(texts) == len(ids)
        nested = StreamEntries(entries)
        if key is None:
            assert reply == encode(nested, protocol)
        else:
            keyed = KeyedReplies()
            keyed[key] = nested
            assert reply == encode(keyed, protocol)


@needs_c
def test_the_c_encoder_refuses_what_its_reference_refuses():
    def one(ns: int, payload: bytes = b"v") -> list:
        return [(payload, array("I", [0, len(payload)]), array("I", [0]), array("q", [ns]), 0, 1, 0)]

    for encode in (c_encode_stream_tables, encode_stream_tables_python):
        ok = encode(2, b"k", one(MS * 1_000_000), [b"f"], MS, 4, 0)
        assert ok == (b"*1\r\n*2\r\n$1\r\nk\r\n*1\r\n*2\r\n$15\r\n%d-5\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n" % MS,
                      [b"%d-5" % MS], [(MS, 5)])
        assert encode(3, None, [], [b"f"], MS, 4, 1) == (b"*0\r\n", [], [])
        assert encode(2, b"k", one(MS * 1_000_000 - 1), [b"f"], MS, 4, 0) is None  # before the last id
        assert encode(2, b"k", one(-1), [b"f"], 0, 0, 0) is None  # before the epoch
        assert encode(2, b"k", one(MS * 1_000_000), [b"f"], MS, U64, 0) is None  # the sequence past 64 bits
        assert encode(2, b"k", one(MS * 1_000_000), [b"f"], MS - 1, U64, 0)[2] == [(MS, 0)]
        for payload in (b"", b"\x7f", b"\x92\xa1a\xa1b"):  # not packed: the caller's path
            assert encode(2, b"k", one(MS * 1_000_000, payload), [b"f"], MS, 0, 1) is None
        for bad in ([(b"v", array("I", [0, 2]), array("I", [0]), array("q", [0]), 0, 1, 0)],  # an end past buf
                    [(b"v", array("I", [0, 1]), array("I", [5]), array("q", [0]), 0, 1, 0)]):  # no such tag
            with pytest.raises(ValueError):
                encode(2, b"k", bad, [b"f"], 0, 0, 0)
        with pytest.raises(ValueError):
            encode(4, b"k", [], [b"f"], 0, 0, 0)
        with pytest.raises(ValueError):
            encode(2, b"k", [], [b"f"], 0, 0, 2)
        with pytest.raises(OverflowError):
            encode(2, b"k", [], [b"f"], -1, 0, 0)
        with pytest.raises(OverflowError):
            encode(2, b"k", [], [b"f"], 0, 1 << 64, 0)
    with pytest.raises(TypeError):
        c_encode_stream_tables(2, "k", [], [b"f"], 0, 0, 0)
    with pytest.raises(TypeError):
        c_encode_stream_tables(2, b"k", [(b"v",)], [b"f"], 0, 0, 0)
    with pytest.raises(TypeError):
        c_encode_stream_tables(2, b"k", [], [b"f"], 0, 0)


@needs_c
def test_the_c_encoder_survives_a_memory_error_at_each_allocation():
    rng = random.Random(13)
    args = next(a for a in cases(rng, 100) if a[1] is not None and encode_stream_tables_python(*a) is not None
                and len(encode_stream_tables_python(*a)[1]) > 12)
    expected = encode_stream_tables_python(*args)
    allocations = 8 * len(expected[1]) + 20
    assert c_extensions.memory_error_count(lambda: c_encode_stream_tables(*args), allocations) > 0
    assert c_encode_stream_tables(*args) == expected


def test_the_environment_variable_turns_the_c_encoder_off():
    probe = ("import tstream.resp.xentries as x; "
             "print(x.STREAM_TABLES_IN_C, x.encode_stream_tables is x.encode_stream_tables_python)")
    assert c_extensions.probe_words(probe, pure=True) == ["False", "True"]
    if c_encode_stream_tables is not None:
        assert STREAM_TABLES_IN_C and encode_stream_tables is c_encode_stream_tables


# --- the server's path against the columns' path -------------------------------------------


def workload(seed: int, n: int = 700) -> list[tuple]:  # noqa: C901 (one branch per kind of step)
    """Steps: ("advance", ms), ("call", client index, argv) and ("ack", client
    index, group), which acknowledges some of that client's last read."""
    rng = random.Random(seed)
    steps: list[tuple] = [("call", 0, ("XGROUP", "CREATE", "s", "g1", "0", "MKSTREAM")),
                          ("call", 0, ("XGROUP", "CREATE", "s", "g2", "$"))]
    now_ms = 1_750_000_000_000.0  # (the harness's virtual clock starts there)
    for _ in range(n):
        roll = rng.random()
        client = rng.randrange(3)
        if roll < 0.45:
            shape = rng.random()
            if shape < 0.35:
                argv = ("XADD", "s", "*", "f", "v" * rng.choice([0, 1, 100, 2100]))
            elif shape < 0.8:
                argv = ("XADD", "s", "*", "seq", str(rng.randrange(10**6)), "payload", "x" * rng.choice([0, 100]))
            else:
                argv = ("XADD", "s", "*", "a", "1", "b", "2", "c", "")
            steps.append(("call", client, argv))
        elif roll < 0.46:  # a stored id, a little ahead of the clock
            steps.append(("call", client, ("XADD", "s", f"{int(now_ms) + 2}-{rng.randrange(3)}", "f", "stored")))
        elif roll < 0.52:
            step = rng.choice([0.2, 0.7, 1, 3])
            now_ms += step
            steps.append(("advance", step))
        elif roll < 0.8:
            group = rng.choice(["g1", "g1", "g2"])
            steps.append(("call", client, ("XREADGROUP", "GROUP", group, f"c{client}", "COUNT",
                                           str(rng.choice([1, 3, 10, 10, 40, 0])), "STREAMS", "s", ">")))
        elif roll < 0.92:
            steps.append(("ack", client, rng.choice(["g1", "g2"])))
        elif roll < 0.95:
            steps.append(("call", client, ("XDEL", "s", "last")))
        elif roll < 0.97:
            steps.append(("call", client, ("XTRIM", "s", "MAXLEN", str(rng.randrange(5, 60)))))
        elif roll < 0.98:
            steps.append(("call", client, ("XGROUP", "SETID", "s", rng.choice(["g1", "g2"]), rng.choice(["0", "$"]))))
        else:
            steps.append(("call", client, ("XPENDING", "s", rng.choice(["g1", "g2"]))))
    return steps


def run_workload(steps: list[tuple], tables_path: bool, monkeypatch) -> tuple[list, list, str, int]:
    """The raw replies, the effect records and the final state's digest of
    ``steps`` on a fresh in-process server (its X* clocks on the virtual
    clock), with the tables' path on or off; and how often it served a read."""
    served = [0]

    def counted(*args):
        reply = deliver_tables(*args)
        served[0] += reply is not None
        return reply

    deliver_tables = xgroups_commands._deliver_tables
    monkeypatch.setattr(xgroups_commands, "_deliver_tables", counted)
    monkeypatch.setattr(xgroups_commands, "STREAM_TABLES_IN_C", tables_path)
    with Harness(node_entries=8) as harness:
        monkeypatch.setattr(xstreams_commands, "time_ns", harness.clock.time_ns)
        monkeypatch.setattr(xgroups_commands, "time_ns", harness.clock.time_ns)
        raw: list[bytes] = []
        clients = [harness.client(protocol) for protocol in (2, 3, 2)]
        for client in clients:
            write = client.transport.write
            client.transport.write = lambda data, write=write: (raw.append(bytes(data)), write(data))[1]
        handed: dict = {}
        for step in steps:
            if step[0] == "advance":
                harness.advance(step[1])
                continue
            client = clients[step[1]]
            if step[0] == "ack":
                ids = handed.get((step[1], step[2]), [])
                client.call("XACK", "s", step[2], *ids[: max(1, len(ids) - 2)], "9-9")
                continue
            argv = step[2]
            if argv[:2] == ("XDEL", "s"):
                last = client.call("XREVRANGE", "s", "+", "-", "COUNT", "3")
                argv = ("XDEL", "s", *(entry[0] for entry in last[1:2]), "1-1")
            reply = client.call(*argv)
            if argv[0] == "XREADGROUP" and reply:
                entries = reply[0][1] if isinstance(reply, list) else next(iter(reply.values()))
                handed[(step[1], argv[2])] = [entry[0] for entry in entries]
        harness.replay.assert_matches()
        records = harness.recorder.records
        digest = keyspace_digest(harness.server.keyspace, harness.clock.time_ns() // 1_000_000)
    return raw, records, digest, served[0]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reads_from_the_tables_reply_and_change_what_the_columns_do(seed, monkeypatch):
    steps = workload(seed)
    raw_columns, records_columns, digest_columns, served_columns = run_workload(steps, False, monkeypatch)
    raw_tables, records_tables, digest_tables, served_tables = run_workload(steps, STREAM_TABLES_IN_C, monkeypatch)
    assert served_columns == 0
    if STREAM_TABLES_IN_C:
        assert served_tables > 20  # the path was taken (and declined elsewhere: stored ids, deletions)
    assert len(raw_tables) == len(raw_columns)
    for k, (tables, columns) in enumerate(zip(raw_tables, raw_columns)):
        assert tables == columns, (k, tables[:300], columns[:300])
    assert records_tables == records_columns
    assert digest_tables == digest_columns


# --- against redis-server: auto ids, as the consumer loop reads them ------------------------


def _auto_id_loop(port: int, protocol: int, seed: int) -> int:
    """On one server: entries with auto ids (one pair, two, three, mixed), read
    by ``XREADGROUP ... COUNT n STREAMS s >`` and acknowledged.  Each read's
    bytes must be the keyed head then XRANGE's bytes of the same ids (Redis's
    reply is that by definition; tstream's XRANGE is checked byte for byte
    against redis by the oracle tests above).  Returns the entries read."""
    import hiredis

    from .test_transactions import Raw

    rng = random.Random(seed)
    conn = Raw(port, protocol)
    read_total = 0
    try:
        conn.call("FLUSHALL")
        conn.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        head = b"%1\r\n$1\r\ns\r\n" if protocol == 3 else b"*1\r\n*2\r\n$1\r\ns\r\n"
        for _ in range(40):
            for _ in range(rng.choice([1, 10, 16, 40])):
                shape = rng.random()
                if shape < 0.3:
                    conn.call("XADD", "s", "*", "f", "v" * rng.choice([0, 100, 2100]))
                elif shape < 0.9:
                    conn.call("XADD", "s", "*", "seq", str(rng.randrange(10**6)), "payload", "x" * 100)
                else:
                    conn.call("XADD", "s", "*", "a", "1", "b", "", "c", "3")
            while True:
                count = rng.choice([1, 10, 10, 25])
                reply = conn.call("XREADGROUP", "GROUP", "g", f"c{rng.randrange(4)}", "COUNT", str(count),
                                  "STREAMS", "s", ">")
                if reply in (b"*-1\r\n", b"_\r\n"):
                    break
                reader = hiredis.Reader()
                reader.feed(reply)
                decoded = reader.gets()
                entries = decoded[b"s"] if protocol == 3 else decoded[0][1]
                ids = [entry[0] for entry in entries]
                assert 0 < len(ids) <= count
                assert reply == head + conn.call("XRANGE", "s", ids[0], ids[-1])
                assert conn.call("XACK", "s", "g", *ids) == b":%d\r\n" % len(ids)
                read_total += len(ids)
        assert conn.call("XPENDING", "s", "g") in (b"*4\r\n:0\r\n$-1\r\n$-1\r\n*-1\r\n", b"*4\r\n:0\r\n_\r\n_\r\n_\r\n")
    finally:
        conn.close()
    return read_total


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_auto_id_reads_match_xrange_on_both_servers(server, redis_oracle, protocol):
    assert _auto_id_loop(server.port, protocol, 5) == _auto_id_loop(redis_oracle, protocol, 5) > 500
