"""The short cuts of the hot path answer exactly as the general path does.

Through a real server: pipelined runs of ``TWRITE k t v`` over several keys
(one call for the run) reply, store, log, count and wake as the same commands
sent one by one; ``TREAD k o n`` and ``TACK k g o``, parsed in their handlers
when their numbers are plain, answer every other spelling as before.  Unit
tests: ``RequestParser.read_one`` takes only a read that is exactly one plain
command, and leaves everything else to the parser, unconsumed.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import redis

from tstream.persistence.effects import APPEND, CREATE
from tstream.resp import RequestParser, encode_integers
from tstream.server.embed import ServerThread

from .test_write_path import records


def multibulk(*words) -> bytes:
    words = [w if isinstance(w, bytes) else str(w).encode() for w in words]
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


def exchange(port: int, data: bytes, replies: int) -> bytes:
    """Send ``data`` in one write; the bytes of ``replies`` replies (each one line here)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(data)
        got = b""
        while got.count(b"\r\n") < replies:
            chunk = sock.recv(65536)
            assert chunk, "connection closed early"
            got += chunk
        return got


@pytest.fixture
def served(tmp_path):
    with ServerThread(port=0, dir=tmp_path, save="", appendonly=True) as srv:
        client = redis.Redis(port=srv.port)
        yield srv, client, tmp_path
        client.close()


def test_a_run_over_several_keys_replies_stores_and_logs_as_one_by_one(served):
    srv, c, directory = served
    c.execute_command("TWRITE", "b", "t", "old")
    keys = ["a", "b", "b", "c", "a", "d", "d", "d"]
    data = b"".join(multibulk("TWRITE", key, "tag", f"v{i}") for i, key in enumerate(keys))
    replies = exchange(srv.port, data, len(keys))
    assert replies == b":1\r\n:2\r\n:3\r\n:1\r\n:2\r\n:1\r\n:2\r\n:3\r\n"
    assert c.execute_command("TREAD", "a", 1, 10) == [[1, b"tag", b"v0"], [2, b"tag", b"v4"]]
    assert [e[2] for e in c.execute_command("TREAD", "b", 1, 10)] == [b"old", b"v1", b"v2"]
    assert [e[2] for e in c.execute_command("TREAD", "d", 1, 10)] == [b"v5", b"v6", b"v7"]
    logged = [(rec[0], rec[1], rec[2], rec[4:]) for rec in records(directory) if rec[0] == APPEND]
    assert logged[1:] == [
        (APPEND, b"a", 1, [b"tag", b"v0"]),
        (APPEND, b"b", 2, [b"tag", b"v1", b"tag", b"v2"]),
        (APPEND, b"c", 1, [b"tag", b"v3"]),
        (APPEND, b"a", 2, [b"tag", b"v4"]),
        (APPEND, b"d", 1, [b"tag", b"v5", b"tag", b"v6", b"tag", b"v7"]),
    ]
    assert [rec[1] for rec in records(directory) if rec[0] == CREATE] == [b"b", b"a", b"c", b"d"]
    assert c.info("persistence")["rdb_changes_since_last_save"] == 1 + len(keys)
    stats = c.info("commandstats")["cmdstat_twrite"]
    assert stats["calls"] == 1 + len(keys) and stats["failed_calls"] == 0


def test_a_run_over_several_keys_wakes_the_readers_of_each(served):
    srv, c, _ = served
    got = {}

    def read(key):
        reader = redis.Redis(port=srv.port)
        got[key] = reader.execute_command("TREAD", key, "$", 5, "BLOCK", 0)
        reader.close()

    threads = [threading.Thread(target=read, args=(key,)) for key in ("x", "y")]
    for thread in threads:
        thread.start()
    while c.info("clients")["blocked_clients"] != 2:
        time.sleep(0.01)
    data = b"".join(multibulk("TWRITE", key, "t", key) for key in ("x", "y", "z"))
    assert exchange(srv.port, data, 3) == b":1\r\n:1\r\n:1\r\n"
    for thread in threads:
        thread.join()
    assert got == {"x": [[1, b"t", b"x"]], "y": [[1, b"t", b"y"]]}


def test_a_keyword_tag_in_a_run_over_several_keys_is_refused_alone(served):
    srv, c, _ = served
    data = b"".join([multibulk("TWRITE", "p", "t", "1"), multibulk("TWRITE", "q", "ENTRIES", "1"),
                     multibulk("TWRITE", "r", "t", "1")])
    replies = exchange(srv.port, data, 3).split(b"\r\n")
    assert replies[0] == b":1" and replies[1].startswith(b"-ERR") and replies[2] == b":1"
    assert c.exists("q") == 0


@pytest.mark.parametrize("offset, count", [
    ("1", "2"), ("0", "2"), ("-", "2"), ("$", "2"), ("01", "2"), ("2", "02"), ("2", "0"), ("+1", "2"),
    (" 1", "2"), ("1", "-2"), ("-1", "2"), ("9223372036854775807", "1"), ("99999999999999999999", "1"),
    ("3", "100"), ("1", "9223372036854775807"),
])
def test_tread_answers_as_its_general_parser(served, offset, count):
    _, c, _ = served
    for i in range(3):
        c.execute_command("TWRITE", "r", "t", str(i))
    c.execute_command("TEVICT", "r", 1)
    for key in ("r", "missing"):
        fast = _reply(c, "TREAD", key, offset, count)
        # The same words and WITHINFO take the general parser: the same entries after the info, or the same error.
        general = _reply(c, "TREAD", key, offset, count, "WITHINFO")
        if isinstance(fast, Exception):
            assert str(fast) == str(general)
        else:
            assert fast == general[1:]


@pytest.mark.parametrize("offset", ["1", "2", "0", "01", "+1", " 1", "x", "99999999999999999999",
                                    "9223372036854775807", "1234567890123456789"])
def test_tack_of_one_offset_answers_as_a_list_of_offsets(served, offset):
    _, c, _ = served
    for name in ("one", "many"):
        for i in range(3):
            c.execute_command("TWRITE", name, "t", str(i))
        c.execute_command("TREAD", name, 1, 3, "GROUP", "g", "RETRY", 60000, 60000)
    fast = _reply(c, "TACK", "one", "g", offset)
    general = _reply(c, "TACK", "many", "g", offset, "3")  # two offsets: the general parser
    if isinstance(general, Exception):
        assert str(fast) == str(general)
    else:
        assert fast == general - 1
    assert c.execute_command("TACK", "one", "g", "2-3") == 2 - (offset == "2")  # a range: not the short cut


def _reply(client, *args):
    try:
        return client.execute_command(*args)
    except redis.ResponseError as exc:
        return exc


def test_read_one_takes_exactly_one_plain_command():
    parser = RequestParser()
    assert parser.read_one(multibulk("TWRITE", "k", "t", "v")) == [b"TWRITE", b"k", b"t", b"v"]
    assert parser.read_one(multibulk("PING")) == [b"PING"]
    assert parser.pull() == [] and not parser.has_input()


@pytest.mark.parametrize("data", [
    multibulk("PING") * 2,  # two commands
    multibulk("TWRITE", "k", "t", "v")[:-3],  # incomplete
    b"PING\r\n",  # inline
    b"*1\r\n:1\r\n",  # not a bulk string
    b"*2\r\n$4\r\nPING\r\n*1\r\n$1\r\nx\r\n",  # a nested array
    b"*12345\r\n",  # a count hiredis must not see
    b"*-1\r\n",
])
def test_read_one_leaves_anything_else_to_the_parser(data):
    parser = RequestParser()
    assert parser.read_one(data) is None
    parser.feed(data)
    reference = RequestParser()
    reference.feed(data)
    assert _pulled(parser) == _pulled(reference)


def test_read_one_waits_behind_input_already_fed():
    parser = RequestParser()
    parser.feed(b"*1\r\n$4\r\nPI")
    assert parser.read_one(multibulk("PING")) is None
    parser.feed(b"NG\r\n")
    assert parser.pull() == [[b"PING"]]


def test_read_many_takes_a_read_of_whole_plain_commands():
    parser = RequestParser()
    commands = [["TWRITE", "k", "t", str(i)] for i in range(20)] + [["XADD", "x", "*", "f", "v"], ["PING"],
                                                                     ["SET", "a", "b", "EX", "10", "NX"]]
    commands += [["BATCH", "k", "b", str(i), "s", "d", "FAST", "64", "ok"] for i in range(1, 4)]
    data = b"".join(multibulk(*c) for c in commands)
    assert parser.read_many(data) == [[w.encode() for w in c] for c in commands]
    assert parser.pull() == [] and not parser.has_input()


@pytest.mark.parametrize("data", [
    multibulk("PING") * 3 + multibulk("TWRITE", "k", "t", "v")[:-3],  # the last one incomplete
    multibulk("PING") + b"*1\r\n$4\r\nPI",  # a header and part of a word
    multibulk("PING") + b"*1",  # part of a header
    multibulk("PING") + b"PING\r\n",  # inline after a command
    b"PING\r\n" + multibulk("PING"),  # inline first
    multibulk("PING") + b"*1\r\n:1\r\n",  # not a bulk string
    multibulk("PING") + b"*2\r\n$4\r\nPING\r\n*1\r\n$1\r\nx\r\n",  # a nested array
    multibulk("PING") + b"*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n*1\r\n$1\r\nx\r\n",  # nested, 4 words
    # 9 words (BATCH ... FAST), one of them not a bulk string: an integer, a nil, a nested array
    multibulk("BATCH", "k", "b", "1", "s", "d", "FAST", "64", "ok") + b"*9\r\n" + multibulk("x")[4:] * 8 + b":1\r\n",
    multibulk("BATCH", "k", "b", "1", "s", "d", "FAST", "64", "ok") + b"*9\r\n$-1\r\n" + multibulk("x")[4:] * 8,
    multibulk("BATCH", "k", "b", "1", "s", "d", "FAST", "64", "ok") + b"*9\r\n" + multibulk("x")[4:] * 4
    + b"*1\r\n$1\r\nx\r\n" + multibulk("x")[4:] * 4,
    multibulk("PING") + b"*12345\r\n",  # a big count, incomplete
    multibulk("PING") + b"*2147483647\r\n$1\r\nx\r\n",  # a huge count: Redis's error
    multibulk("PING") + b"*0\r\n" + multibulk("PING"),  # ignored by Redis
    multibulk("PING") + b"*-1\r\n" + multibulk("PING"),
    multibulk("PING") + b"\r\n" + multibulk("PING"),  # a blank line (redis-cli --pipe)
    multibulk("PING") + b"$4\r\nPING\r\n",  # a bulk string where a command goes
])
def test_read_many_leaves_anything_else_to_the_parser(data):
    parser = RequestParser()
    assert parser.read_many(data) is None  # (and fed)
    reference = RequestParser()
    reference.feed(data)
    assert _pulled(parser) == _pulled(reference)
    assert parser.has_input() == reference.has_input()


def test_read_many_waits_behind_input_already_fed():
    parser = RequestParser()
    parser.feed(b"*1\r\n$4\r\nPI")
    assert parser.read_many(b"NG\r\n" + multibulk("PING")) is None
    assert parser.pull() == [[b"PING"], [b"PING"]]


def test_the_strict_parser_never_takes_the_short_cuts():
    """Before AUTH a connection parses with the strict parser: every read is fed."""
    from tstream.resp.strict import StrictRequestParser
    parser = StrictRequestParser()
    assert parser.read_one(multibulk("PING")) is None  # (nothing consumed: the caller feeds it)
    assert parser.read_many(multibulk("PING") * 2) is None  # (fed)
    assert [parser.next_command() for _ in range(3)] == [[b"PING"], [b"PING"], None]


def test_huge_counts_in_pipelined_reads_cost_no_memory(served):
    """A huge multibulk count in a pipelined read never reaches hiredis (which
    fills the list it reserves for a header: seconds and gigabytes for
    ``*2147483647``): the read is framed by the strict parser, which reserves
    nothing for the half-received command; other clients never notice."""
    srv, c, _ = served
    before = _rss(srv)
    socks = []
    try:
        for _ in range(100):
            sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            socks.append(sock)
            sock.sendall(multibulk("PING") + b"*2147483647\r\n$4\r\nPING\r\n")
            assert sock.recv(65536) == b"+PONG\r\n"
        assert _rss(srv) - before < 16 << 20
        assert c.ping()
        socks[0].sendall(b"*1\r\n")  # the rest is refused as Redis does: "$" expected
        assert socks[0].recv(65536) == b"-ERR Protocol error: expected '$', got '*'\r\n"
    finally:
        for sock in socks:
            sock.close()


def _rss(srv) -> int:
    with open("/proc/self/status") as status:  # (the embedded server runs in this process)
        return next(int(line.split()[1]) << 10 for line in status if line.startswith("VmRSS:"))


def _pulled(parser):
    try:
        return parser.pull()
    except Exception as exc:  # a protocol error: compared by its text
        return str(exc)


def test_encode_integers():
    assert encode_integers([]) == b""
    assert encode_integers([5, 1, 300]) == b":5\r\n:1\r\n:300\r\n"
    assert encode_integers(list(range(100))) == b"".join(b":%d\r\n" % n for n in range(100))


def test_a_short_pipelined_read_waits_behind_a_command_that_blocks(served):
    srv, c, _ = served
    with socket.create_connection(("127.0.0.1", srv.port)) as sock:
        sock.sendall(multibulk("TREAD", "w", "$", 1, "BLOCK", 0) + multibulk("TWRITE", "w2", "t", "v")
                     + multibulk("PING"))
        while c.info("clients")["blocked_clients"] != 1:
            time.sleep(0.01)
        assert c.exists("w2") == 0  # the commands after the blocked one wait for it
        c.execute_command("TWRITE", "w", "t", "x")
        got = b""
        expected = b"*1\r\n*3\r\n:1\r\n$1\r\nt\r\n$1\r\nx\r\n:1\r\n+PONG\r\n"
        while len(got) < len(expected):
            chunk = sock.recv(65536)
            assert chunk
            got += chunk
        assert got == expected


@pytest.fixture
def small_nodes(tmp_path):
    """A server whose streams have nodes of 50 entries (several blocks each)."""
    with ServerThread(port=0, dir=tmp_path, save="", appendonly=True, node_entries=50) as srv:
        client = redis.Redis(port=srv.port)
        yield srv, client
        client.close()


def _replies_alone(port: int, requests: list, protocol: int) -> bytes:
    """The replies of ``requests`` sent one at a time (each read alone), on one connection."""
    got = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        if protocol == 3:
            sock.sendall(multibulk("HELLO", 3))
            _read_replies(sock, 1)
        for request in requests:
            sock.sendall(request)
            got.append(_read_replies(sock, 1))
    return b"".join(got)


def _replies_pipelined(port: int, requests: list, protocol: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        if protocol == 3:
            sock.sendall(multibulk("HELLO", 3))
            _read_replies(sock, 1)
        sock.sendall(b"".join(requests))
        return _read_replies(sock, len(requests))


def _fill_with_holes(c) -> None:
    """Key "h": 600 entries in nodes of 50 (sealed in blocks, and the active node's
    last entries), the first 123 evicted (up to the middle of a block), every
    entry tagged "dup" but the last deleted (max_msgs_per_subject 1 deletes older
    ones of a tag), and 40 more entries in the active node."""
    pairs = [w for i in range(600) for w in ("dup" if i % 7 == 3 else "t%d" % i, "v%d-" % i + "x" * 200)]
    c.execute_command("TWRITE", "h", "ENTRIES", *pairs)
    c.execute_command("TEVICT", "h", 123)
    c.execute_command("TCONFIG", "h", "SET", "max_msgs_per_subject", 1)  # deletes the older "dup"
    c.execute_command("TCONFIG", "h", "SET", "max_msgs_per_subject", 0)
    for i in range(40):
        c.execute_command("TWRITE", "h", "dup" if i % 9 == 4 else "a%d" % i, "w%d" % i)


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_run_of_one_entry_reads_replies_as_each_read_alone(small_nodes, protocol):
    """Pipelined ``TREAD k o 1`` of one key are served by one lookup pass over the
    run (``Stream.read_each``) and one reply format: every reply is byte for byte
    the one the read gets alone, in RESP2 and RESP3, for offsets held in sealed
    blocks and in the active node, across node and block boundaries, in order,
    backwards, repeated, evicted (below ``first``, inside a block), deleted,
    past the end, and in runs longer than the dispatcher's window (256)."""
    srv, c = small_nodes
    for i in range(600):
        c.execute_command("TWRITE", "s", "t%d" % (i % 3), "v%d-" % i + "y" * 150)
    _fill_with_holes(c)
    assert c.execute_command("TINFO", "h")[b"nodes"] >= 10
    offsets = (list(range(1, 700)) + list(range(650, 100, -3)) + [700, 5, 5, 5, 640, 641, 2**40, 124, 123]
               + [o * 37 % 680 + 1 for o in range(300)])
    for key in ("h", "s"):
        requests = [multibulk("TREAD", key, o, 1) for o in offsets]
        expected = _replies_alone(srv.port, requests, protocol)
        assert _replies_pipelined(srv.port, requests, protocol) == expected
        assert expected.count(b"*0\r\n") >= 3  # past the end
        if key == "h":  # evicted and deleted
            assert expected.count(b"*1\r\n$-1\r\n" if protocol == 2 else b"*1\r\n_\r\n") > 200


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_run_of_one_entry_reads_with_odd_words_replies_as_each_read_alone(small_nodes, protocol):
    """A run of ``TREAD k o 1`` with an odd word in it (a bad number in the middle,
    a leading zero, zero, a sign, a space, an empty word, ``-``/``$``, a count
    other than 1, another key, a missing key, a huge offset) is answered read by
    read, each reply (errors in their places) what the read gets alone, and INFO
    commandstats counts every read and every failure."""
    srv, c = small_nodes
    _fill_with_holes(c)
    good = [multibulk("TREAD", "h", o, 1) for o in range(120, 180)]
    odd = [b"x", b"07", b"0", b"+5", b"-5", b" 5", b"5 ", b"", b"-", b"$", b"1_0", b"5" * 19, b"9" * 18,
           "\u0665".encode()]
    runs = [good[:30] + [multibulk("TREAD", "h", word, 1)] + good[30:] for word in odd]
    runs += [good[:10] + [multibulk("TREAD", "h", 150, count)] + good[10:] for count in (0, 2, "01", "x", "-1")]
    runs += [good[:10] + [multibulk("TREAD", key, 150, 1)] + good[10:] for key in ("nokey", "s", b"h\x00")]
    runs += [[multibulk("TREAD", "nokey", o, 1) for o in range(1, 40)]]
    before = c.info("commandstats").get("cmdstat_tread", {"calls": 0, "failed_calls": 0})
    sent = errors = 0
    for requests in runs:
        expected = _replies_alone(srv.port, requests, protocol)
        assert _replies_pipelined(srv.port, requests, protocol) == expected
        sent += len(requests)
        errors += expected.count(b"\r\n-ERR")
    after = c.info("commandstats")["cmdstat_tread"]
    assert errors >= 8
    assert (after["calls"], after["failed_calls"]) == (before["calls"] + 2 * sent, before["failed_calls"] + 2 * errors)


def _read_replies(sock, count: int) -> bytes:
    """The bytes of ``count`` whole replies from ``sock`` (parsed with hiredis to find their ends)."""
    import hiredis
    reader, got, seen = hiredis.Reader(), b"", 0
    while seen < count:
        chunk = sock.recv(65536)
        assert chunk, "connection closed early"
        got += chunk
        reader.feed(chunk)
        while reader.gets() is not False:
            seen += 1
    return got


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_run_of_reads_replies_as_each_read_alone(served, protocol):
    """Pipelined ``TREAD k o n`` are answered as one run: every reply is byte for
    byte the one the same read gets alone, whatever its spelling (``-``, ``$``,
    zero, a bad number, a deleted entry, a missing key, past the end), in
    RESP2 and RESP3, and INFO commandstats counts every read."""
    srv, c, _ = served
    c.execute_command("TWRITE", "r", "ENTRIES", *[w for i in range(300) for w in ("t%d" % (i % 3), "v%d" % i)])
    c.execute_command("TEVICT", "r", 5)
    reads = [("r", 7, 1), ("r", 1, 1), ("r", 3, 4), ("r", 6, 3), ("r", 299, 5), ("r", 301, 1), ("r", "-", 2),
             ("r", "$", 1), ("r", 0, 1), ("r", "x", 1), ("r", 7, "-1"), ("r", "07", 1), ("nokey", 1, 1),
             ("r", 150, 20), ("r", 2**70, 1)]
    hello = multibulk("HELLO", 3) if protocol == 3 else b""

    def alone(read) -> bytes:
        with socket.create_connection(("127.0.0.1", srv.port)) as sock:
            if hello:
                sock.sendall(hello)
                _read_replies(sock, 1)
            sock.sendall(multibulk("TREAD", *read))
            return _read_replies(sock, 1)

    before = c.info("commandstats").get("cmdstat_tread", {"calls": 0, "failed_calls": 0})
    expected = b"".join(alone(read) for read in reads)
    with socket.create_connection(("127.0.0.1", srv.port)) as sock:
        if hello:
            sock.sendall(hello)
            _read_replies(sock, 1)
        sock.sendall(b"".join(multibulk("TREAD", *read) for read in reads))
        assert _read_replies(sock, len(reads)) == expected
    after = c.info("commandstats")["cmdstat_tread"]
    errors = expected.count(b"-ERR")
    assert errors >= 3  # (the bad spellings were refused, each in its place)
    assert (after["calls"], after["failed_calls"]) == (before["calls"] + 2 * len(reads),
                                                       before["failed_calls"] + 2 * errors)
