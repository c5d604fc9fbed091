"""The Redis Streams data commands through the real server: redis-py's stream
helpers (RESP2 and RESP3), the same entries through X* and T*/DGET, blocking
XREAD woken by a write, and ids kept by the append-only file, its rewrite and
snapshots."""

from __future__ import annotations

import socket
import threading
import time

import hiredis
import pytest
import redis

from tstream.engine import xids
from tstream.persistence import effects

from .harness import encode_command
from .test_faults import run_check
from .test_transactions import aof_records


def streams_of(reply) -> list:
    """redis-py's XREAD reply (a list of [key, entries] in RESP2, a dict in RESP3)
    as [(key, [(id, fields), ...])]."""
    pairs = reply.items() if isinstance(reply, dict) else reply
    out = []
    for key, entries in pairs:
        if entries and isinstance(entries[0], list) and entries[0] and isinstance(entries[0][0], tuple):
            entries = entries[0]  # (redis-py nests RESP3 stream entries one level deeper)
        out.append((key, [tuple(entry) for entry in entries]))
    return out


def test_redis_py_stream_helpers(r):
    first = r.xadd("k", {"a": "1", "b": "2"}, id="1-1")
    r.xadd("k", {"c": "3"}, id="1-2")
    r.xadd("k", {"d": "4"}, id="2-0")
    assert first in (b"1-1", "1-1")
    assert r.xlen("k") == 3
    entries = r.xrange("k")
    assert [(i, f) for i, f in entries] == [(b"1-1", {b"a": b"1", b"b": b"2"}), (b"1-2", {b"c": b"3"}),
                                            (b"2-0", {b"d": b"4"})]
    assert r.xrevrange("k", count=1)[0][0] == b"2-0"
    assert r.xrange("k", min="(1-1", max="+", count=1)[0][0] == b"1-2"
    assert streams_of(r.xread({"k": "1-2"})) == [(b"k", [(b"2-0", {b"d": b"4"})])]
    assert r.xdel("k", "1-2", "9-9") == 1
    assert r.xtrim("k", maxlen=1, approximate=False) == 1
    assert [e[0] for e in r.xrange("k")] == [b"2-0"]
    generated = r.xadd("k", {"e": "5"})
    ms, seq = map(int, generated.split(b"-"))
    assert (ms, seq) > (2, 0) and abs(ms - time.time() * 1000) < 60_000
    info = r.xinfo_stream("k")
    assert info["length"] == 2 and info["last-generated-id"] == generated


def test_twrite_entries_read_through_x_and_xadd_entries_through_tread(r2):
    r2.execute_command("TWRITE", "s", "orders.new", "payload-1")
    xid = r2.xadd("s", {"orders.paid": "payload-2"})
    r2.xadd("s", {"f1": "v1", "f2": "v2"})
    entries = r2.xrange("s")
    assert entries[0][1] == {b"orders.new": b"payload-1"}
    assert entries[1] == (xid, {b"orders.paid": b"payload-2"})
    assert entries[2][1] == {b"f1": b"v1", b"f2": b"v2"}
    rows = r2.execute_command("TREAD", "s", 1, 3)
    assert [row[1] for row in rows] == [b"orders.new", b"orders.paid", b"f1"]
    assert rows[1][2] == b"payload-2"  # one pair: a plain entry
    assert xids.unpack_pairs(rows[2][1], rows[2][2]) == [b"f1", b"v1", b"f2", b"v2"]
    # DGET reads the XADD entry by its offset
    message = r2.execute_command("DGET", "s", "SEQ", 2)
    assert b"orders.paid" in message and b"payload-2" in message


def test_ids_are_increasing_across_twrite_and_xadd(r2):
    r2.xadd("m", {"a": "1"}, id="99999999999999-5")  # an id ahead of the clock
    r2.execute_command("TWRITE", "m", "t", "v")  # takes the next id after it
    r2.xadd("m", {"b": "2"})
    ids = [e[0] for e in r2.xrange("m")]
    assert ids == [b"99999999999999-5", b"99999999999999-6", b"99999999999999-7"]


def test_blocking_xread_is_woken_by_a_write_on_any_of_its_keys(server):
    reader = server.client()
    writer = server.client()
    got = {}

    def read():
        got["reply"] = reader.xread({"w1": "$", "w2": "$"}, block=5000)

    thread = threading.Thread(target=read)
    thread.start()
    deadline = time.monotonic() + 5
    while writer.info("clients")["blocked_clients"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    writer.xadd("w2", {"x": "1"}, id="5-5")
    thread.join(5)
    assert streams_of(got["reply"]) == [(b"w2", [(b"5-5", {b"x": b"1"})])]
    assert writer.info("clients")["blocked_clients"] == 0


def test_blocking_xread_times_out_with_null_and_inside_multi_never_blocks(r2):
    started = time.monotonic()
    assert r2.xread({"nokey": "$"}, block=50) in (None, [], {})
    assert time.monotonic() - started >= 0.04
    pipe = r2.pipeline()
    pipe.xread({"nokey": "$"}, block=0)
    assert pipe.execute() in ([None], [[]], [{}])


def test_a_blocked_xread_client_that_leaves_is_forgotten(server):
    reader = socket.create_connection(("127.0.0.1", server.port))
    reader.sendall(b"*6\r\n$5\r\nXREAD\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n$7\r\nSTREAMS\r\n$4\r\ngone\r\n$1\r\n$\r\n")
    writer = server.client()
    deadline = time.monotonic() + 5
    while writer.info("clients")["blocked_clients"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    reader.close()
    while writer.info("clients")["blocked_clients"] != 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    writer.xadd("gone", {"a": "b"})  # nobody to serve: nothing breaks
    assert writer.xlen("gone") == 1


def server_for(make_server, how: str):
    """A server whose changes a restart gets back through ``how``: the AOF
    (``aof``, ``aof-rewrite``) or a snapshot; small nodes, so several seal."""
    if how == "snapshot":
        return make_server("--save", "", "--appendonly", "no", "--node-entries", "4")
    return make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always", "--node-entries", "4")


def save_for(c, how: str) -> None:
    """Before the restart: rewrite the AOF, or save a snapshot, as ``how`` says."""
    if how == "aof-rewrite":
        c.bgrewriteaof()
        deadline = time.monotonic() + 10
        while c.info("persistence")["aof_rewrite_in_progress"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    elif how == "snapshot":
        c.save()


def fill(c) -> None:
    c.xadd("p", {"a": "1", "b": "2"}, id="1-1")
    c.xadd("p", {"c": "3"}, id="1-5")
    c.execute_command("TWRITE", "p", "tag", "entry")
    c.xadd("p", {"d": "4"}, id="99999999999999-0")
    c.execute_command("TWRITE", "p", "tag", "after-future")
    for i in range(30):
        c.xadd("p", {"n": str(i)}, id=f"99999999999999-{10 + i}")
    c.xdel("p", "99999999999999-12")
    c.xtrim("p", minid="1-5", approximate=False)
    c.execute_command("XSETID", "p", "99999999999999-100", "ENTRIESADDED", 60, "MAXDELETEDID", "99999999999999-50")
    c.xadd("q", {"x": "y"}, maxlen=2, approximate=False)
    c.xadd("q", {"x": "z"}, maxlen=2, approximate=False)
    c.xadd("q", {"x": "w"}, maxlen=2, approximate=False)


def snapshot_of(c) -> tuple:
    return (c.xrange("p"), c.xinfo_stream("p"), c.xrange("q"), c.execute_command("TREAD", "p", 1, 100))


@pytest.mark.parametrize("how", ["aof", "aof-rewrite", "snapshot"])
def test_ids_survive_restarts(make_server, tmp_path, how):
    proc = server_for(make_server, how)
    c = proc.client()
    fill(c)
    before = snapshot_of(c)
    if how == "aof":
        records, _ = aof_records(tmp_path)
        kinds = {record[0] for record in records}
        assert {effects.XADD, effects.XDEL, effects.XSETID} <= kinds
    else:
        save_for(c, how)
    proc.kill()
    proc.start()
    c = proc.client()
    assert snapshot_of(c) == before
    c.xadd("p", {"later": "1"})
    assert c.xrange("p")[-1][0] == b"99999999999999-101"  # after the XSETID top, which survived
    proc.stop()
    check = run_check(tmp_path / ("dump.tsr" if how == "snapshot" else "appendonlydir"))
    assert check.returncode == 0, check.stdout + check.stderr


def test_every_bad_xadd_changes_nothing(r2):
    r2.xadd("b", {"a": "1"}, id="5-5")
    for words in (("XADD", "b", "5-5", "a", "1"), ("XADD", "b", "MAXLEN", "x", "*", "a", "1"),
                  ("XADD", "b", "*", "a"), ("XADD", "b", "4-*", "a", "1"), ("XADD", "nob", "0-0", "a", "1")):
        with pytest.raises(redis.ResponseError):
            r2.execute_command(*words)
    assert r2.xlen("b") == 1 and r2.exists("nob") == 0


def test_type_name_is_tstream_unless_configured_as_stream(r2):
    r2.xadd("typed", {"a": "1"})
    assert r2.type("typed") == b"tstream"
    r2.config_set("stream-type-name", "stream")
    try:
        assert r2.type("typed") == b"stream"
        assert r2.scan(0, _type="stream")[1] == [b"typed"]
        with pytest.raises(redis.ResponseError):
            r2.config_set("stream-type-name", "hash")
        assert r2.config_get("stream-type-name") == {"stream-type-name": "stream"}
    finally:
        r2.config_set("stream-type-name", "tstream")


def test_a_pipelined_run_of_xadd_answers_as_one_by_one(server):
    sock = socket.create_connection(("127.0.0.1", server.port))
    reader = hiredis.Reader()

    def send_all(commands):
        sock.sendall(b"".join(encode_command(c) for c in commands))
        replies = []
        while len(replies) < len(commands):
            reader.feed(sock.recv(65536))
            while (reply := reader.gets()) is not False:
                replies.append(reply)
        return replies

    run = send_all([("XADD", "pr", "*", "f", str(i)) for i in range(16)])
    ids = [tuple(map(int, r.split(b"-"))) for r in run]
    assert ids == sorted(set(ids)) and len(ids) == 16
    mixed = send_all([("XADD", "pr", "*", "f", "a"), ("XADD", "pr", "1-1", "f", "b"), ("XADD", "pr", "*", "f", "c")])
    assert isinstance(mixed[1], hiredis.ReplyError) and b"-" in mixed[0] and b"-" in mixed[2]
    c = server.client()
    entries = c.xrange("pr")
    assert [e[0] for e in entries] == run + [mixed[0], mixed[2]]
    assert [e[1][b"f"] for e in entries] == [str(i).encode() for i in range(16)] + [b"a", b"c"]
    sock.close()


def test_id_runs_encode_as_each_id_formatted():
    """A pipelined XADD run's replies (resp.xentries.encode_stream_id_run: the
    last two digits joined when the ids share the rest) are the bytes of
    formatting every id, across widths, hundreds and the largest sequences;
    and an XREADGROUP reply encoded from columns (one pair or several) is that
    of its nested lists."""
    from tstream.resp import KeyedReplies, StreamEntries, encode, encode_stream_ids
    from tstream.resp.xentries import (
        encode_keyed,
        encode_stream_columns,
        encode_stream_id_run,
        encode_stream_packed,
        encode_stream_pairs,
    )

    for ms in (0, 7, 1764222222222):
        for first in [*range(0, 230), 999, 1000, 12345, (1 << 63) - 5, (1 << 64) - 20]:
            for count in (1, 2, 9, 16, 64, 100, 101):
                assert encode_stream_id_run(ms, first, count) == encode_stream_ids(ms, first, count)
                assert encode_stream_ids(ms, first, count) == b"".join(
                    b"$%d\r\n%d-%d\r\n" % (len(b"%d-%d" % (ms, s)), ms, s) for s in range(first, first + count))
    ids, fields, values = [b"1-0", b"1-1", b"22-10"], [b"f", b"field", b""], [b"v" * 100, b"", b"x"]
    nested = StreamEntries([[i, [f, v]] for i, f, v in zip(ids, fields, values)])
    for protocol in (2, 3):
        assert encode_stream_columns(ids, fields, values) == encode(nested, protocol)
        keyed = KeyedReplies()
        keyed[b"k"] = nested
        assert encode_keyed(protocol, b"k", encode_stream_columns(ids, fields, values)) == encode(keyed, protocol)
    # several pairs (encode_stream_pairs): two pairs (one format), one, three, empty items
    rests = [[b"v", b"g", b"w" * 300], [b""], [b"1", b"b", b"2", b"c", b""], [b"", b"", b""]]
    ids4, fields4 = [b"1-0", b"1-1", b"22-10", b"9-9"], [b"f", b"field", b"", b"\r\n"]
    nested = StreamEntries([[i, [f, *rest]] for i, f, rest in zip(ids4, fields4, rests)])
    for protocol in (2, 3):
        assert encode_stream_pairs(ids4, fields4, rests) == encode(nested, protocol)
        assert encode_stream_pairs([], [], []) == encode(StreamEntries(), protocol)
    # items at the edges of the looked-up heads (2 KiB bulk strings, 127 items an
    # entry, 41-byte ids) and past them (the per-entry formats): the same bytes
    big = [(1 << 64) - 1, (1 << 64) - 1]
    for size in (0, 9, 10, 2046, 2047, 2048, 5000):
        for items in (1, 3, 125, 127, 129):
            rest = [b"v" * size] * items
            ids2, fields2 = [b"%d-%d" % tuple(big), b"0-0"], [b"f" * size, b"g"]
            for protocol in (2, 3):
                want = encode(StreamEntries([[i, [f, *rest]] for i, f in zip(ids2, fields2)]), protocol)
                assert encode_stream_pairs(ids2, fields2, [rest, rest]) == want
                want = encode(StreamEntries([[i, [f, rest[0]]] for i, f in zip(ids2, fields2)]), protocol)
                assert encode_stream_columns(ids2, fields2, [rest[0], rest[0]]) == want
    # packed payloads as stored (encode_stream_packed): the payload after its count
    # copied; None for a msgpack payload, a field past the heads, an id too long
    from tstream.engine import xids
    for size in (0, 9, 2047, 2048, 5000):
        for items in (3, 5, 125, 126, 127):
            pairs = [b"f" * size] + [b"v" * size] * items
            payload = xids.pack_pairs(pairs)[1]
            ids2, fields2 = [b"%d-%d" % tuple(big), b"0-0"], [pairs[0], b"g"]
            want = encode(StreamEntries([[i, [f, *pairs[1:]]] for i, f in zip(ids2, fields2)]), 2)
            got = encode_stream_packed(ids2, fields2, [payload, memoryview(payload)])
            if items <= xids.PACKED_MAX and size < 2048:
                assert got == want
            else:
                assert got is None
    assert encode_stream_packed([], [], []) == encode(StreamEntries(), 2) == encode(StreamEntries(), 3)
    assert encode_stream_packed([b"9" * 48], [b"f"], [xids.pack_pairs([b"f", b"1", b"g", b"2"])[1]]) is None


def test_entries_packed_either_way_reply_alike():
    """A stream holding entries packed as RESP bulk strings (now) and as msgpack
    lists (before 2026-11-27, replayed from a log) beside one-pair entries:
    XRANGE's entries (entry_replies: a packed field array as stored, Raw, or
    unpacked) and XREADGROUP's (encode_stream_packed, else unpacked) are the
    bytes of the nested lists, in both protocols."""
    import msgpack

    from tstream.commands import xgroups as xgroup_commands
    from tstream.commands.xstreams import entry_replies
    from tstream.engine.stream import Stream
    from tstream.resp import StreamEntries, encode

    stream = Stream(node_entries=4)
    want = []
    for k in range(12):
        pairs = [b"f%d" % k, b"v" * k] + ([b"g", b"w" * (k * 200)] if k % 3 else [])
        xid = (1000 + k, 0)
        if k % 3 == 2:  # packed by msgpack, as an older build logged it
            xids.replay_add(stream, pairs[0], msgpack.packb(pairs[1:], use_bin_type=True), xid[0] * 1_000_000, xid,
                            True)
        else:
            xids.add(stream, pairs, xid[0] * 1_000_000, xid=xid)
        want.append([b"%d-%d" % xid, pairs])
    rows = [[offset, stream.get(offset).tag, stream.get(offset).data] for offset in range(1, 13)]
    got = entry_replies(stream, rows)
    for protocol in (2, 3):
        assert encode(got, protocol) == encode(StreamEntries(want), protocol)
    packed = [row for k, row in enumerate(rows) if k % 3]
    texts = [w[0] for k, w in enumerate(want) if k % 3]
    fields = [row[1] for row in packed]
    nested = StreamEntries([w for k, w in enumerate(want) if k % 3])
    assert xgroup_commands.encode_stream_packed(texts, fields, [row[2] for row in packed]) is None  # some msgpack
    new = [k for k in range(12) if k % 3 == 1]
    assert xgroup_commands.encode_stream_packed([want[k][0] for k in new], [rows[k][1] for k in new],
                                                [rows[k][2] for k in new]) == encode(StreamEntries(
                                                    [want[k] for k in new]), 2)
    assert xgroup_commands.encode_stream_pairs(texts, fields, xids.unpack_rests([row[2] for row in packed])) \
        == encode(nested, 3)


def test_xadd_short_form_replies_its_id_on_every_path(r2):
    """``XADD key * field value`` (commands.xstreams.xadd's short form): the id
    replied is the id stored, whether derived from the clock (the same
    millisecond's ``ms-`` reused), after an id ahead of the clock (sequence
    numbers past the digit table, 1024), after XSETID to the last millisecond
    (the add_auto path) or at the last possible id (refused, nothing stored)."""
    from tstream.commands import xstreams

    replies = [r2.xadd("s", {"f": str(i)}) for i in range(300)]
    assert replies == [e[0] for e in r2.xrange("s")]
    r2.xadd("h", {"f": "0"}, id="99999999999999-1020")  # ahead of the clock: its sequence goes on
    ahead = [r2.xadd("h", {"f": str(i)}) for i in range(10)]
    assert ahead == [b"99999999999999-%d" % s for s in range(1021, 1031)]
    assert xstreams._id_text(7, 5) == b"7-5" and xstreams._id_text(7, 5000) == b"7-5000"
    u64 = (1 << 64) - 1
    r2.xadd("top", {"f": "0"})
    r2.execute_command("XSETID", "top", f"{u64}-5")
    assert r2.xadd("top", {"f": "1"}) == b"%d-6" % u64
    r2.execute_command("XSETID", "top", f"{u64}-{u64}")
    with pytest.raises(redis.ResponseError, match="exhausted the last possible ID"):
        r2.xadd("top", {"f": "2"})
    assert r2.xlen("top") == 2
