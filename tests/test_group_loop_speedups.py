"""resp/_speedups.c's ``integer_reply`` (the dispatcher's integer replies) and
``plain_positive_ints`` (TACK's offsets in one call) against their pure-Python
forms, on random inputs, and under forced MemoryErrors; and the server's
TACK/TWRITE replies through them, over TCP (the same on the pure-Python pass,
.ci/run)."""

from __future__ import annotations

import random
import time

import pytest
import redis

from tstream.commands import dispatch, streams
from tstream.resp import encode_integer

from .c_extensions import memory_error_count, needs_c

try:
    from tstream.resp._speedups import integer_reply as c_integer_reply
    from tstream.resp._speedups import plain_positive_ints as c_plain_positive_ints
except ImportError:
    c_integer_reply = c_plain_positive_ints = None
if streams.plain_positive_ints is streams.plain_positive_ints_python:  # (TSTREAM_PURE_PYTHON=1)
    c_integer_reply = c_plain_positive_ints = None

python_plain_positive_ints = streams.plain_positive_ints_python


def _random_integers(rng: random.Random, n: int) -> list[int]:
    edges = [0, 1, -1, 9, 10, -10, 2 ** 63 - 1, -2 ** 63, 2 ** 63, -2 ** 63 - 1, 10 ** 18, 10 ** 19, 2 ** 200,
             -(2 ** 200)]
    return edges + [rng.choice((1, -1)) * rng.randrange(0, 10 ** rng.randrange(1, 25)) for _ in range(n)]


def _random_word(rng: random.Random) -> bytes:
    kind = rng.randrange(10)
    if kind < 6:  # a plain number, 1 to 20 digits (19 and 20: too long)
        return b"%d" % rng.randrange(1, 10 ** rng.randrange(1, 21))
    if kind == 6:
        return rng.choice((b"", b"0", b"00", b"01", b"-1", b"+1", b" 1", b"1 ", b"1-5", b"\xd9\xa1", b"1\x00"))
    return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 4)))


def test_the_integer_reply_is_encode_integer():
    """The dispatcher's integer reply (C or its fallback) is encode_integer's, byte for byte."""
    rng = random.Random(19)
    for value in _random_integers(rng, 2000):
        assert dispatch.integer_reply(value) == encode_integer(value) == b":%d\r\n" % value


@needs_c(c_integer_reply)
def test_the_c_integer_reply_against_the_format():
    rng = random.Random(20)
    for value in _random_integers(rng, 5000):
        assert c_integer_reply(value) == b":%d\r\n" % value, value
    assert c_integer_reply(True) == b":1\r\n"
    for bad in (1.0, b"1", "1", None):
        with pytest.raises(TypeError):
            c_integer_reply(bad)


@needs_c(c_integer_reply)
def test_the_c_integer_reply_survives_memory_errors():
    # one allocation for a 64-bit value (the bytes); the text, its UTF-8 and the bytes past 64 bits
    assert memory_error_count(lambda: c_integer_reply(123456), 1) == 1
    assert memory_error_count(lambda: c_integer_reply(2 ** 100), 4) >= 1
    assert c_integer_reply(2 ** 100) == b":%d\r\n" % 2 ** 100 and c_integer_reply(-7) == b":-7\r\n"


def test_plain_positive_ints_python_is_to_positive_lists_plain_answer():
    """The fallback: the ints when every word is plain, else None (to_positive_list
    then gives the error or the value), [] for no word."""
    from tstream.commands.args import to_positive_list
    from tstream.commands.errors import CommandError

    rng = random.Random(21)
    for _ in range(3000):
        words = [b"TACK", b"k", b"g"] + [_random_word(rng) for _ in range(rng.randrange(0, 12))]
        got = python_plain_positive_ints(words, 3)
        if got is not None:
            assert got == to_positive_list(words[3:], "offset")
            assert all(1 <= value < 10 ** 18 for value in got)
        else:
            assert any(not w.isdigit() or w[:1] == b"0" or len(w) > 18 for w in words[3:])
            try:
                to_positive_list(words[3:], "offset")
            except CommandError:
                pass
    assert python_plain_positive_ints([b"TACK", b"k", b"g"], 3) == []


@needs_c(c_plain_positive_ints)
def test_the_c_plain_positive_ints_against_python():
    rng = random.Random(22)
    for _ in range(20000):
        words = [_random_word(rng) for _ in range(rng.randrange(0, 14))]
        start = rng.randrange(0, 4)
        assert c_plain_positive_ints(words, start) == python_plain_positive_ints(words, start), (words, start)
    assert c_plain_positive_ints([b"1", "2"], 0) is None and c_plain_positive_ints([b"1", bytearray(b"2")], 0) is None
    assert c_plain_positive_ints([b"5"], 9) == []
    with pytest.raises(TypeError):
        c_plain_positive_ints((b"1",), 0)
    with pytest.raises(ValueError):
        c_plain_positive_ints([b"1"], -1)
    with pytest.raises(TypeError):
        c_plain_positive_ints([b"1"])


@needs_c(c_plain_positive_ints)
def test_the_c_plain_positive_ints_survive_memory_errors():
    words = [b"TACK", b"k", b"g"] + [b"%d" % (10 ** 12 + i) for i in range(10)]
    # the list, then each of the ten ints
    assert memory_error_count(lambda: c_plain_positive_ints(words, 3), 11) == 11
    assert c_plain_positive_ints(words, 3) == [10 ** 12 + i for i in range(10)]


def test_tack_and_twrite_replies_through_the_server(server):
    """TWRITE's offsets and TACK's counts as integer replies, every TACK form (plain
    offsets, one offset, a range, bad offsets: Redis-like errors), over TCP."""
    r = redis.Redis(port=server.port)
    assert [r.execute_command("TWRITE", "loop", "t", b"x%d" % i) for i in range(1, 13)] == list(range(1, 13))
    entries = r.execute_command("TREAD", "loop", "-", "10", "GROUP", "g", "RETRY", "30000", "600000")
    assert [entry[0] for entry in entries] == list(range(1, 11))
    assert r.execute_command("TACK", "loop", "g", "1", "2", "3") == 3
    assert r.execute_command("TACK", "loop", "g", "1", "2", "3") == 0
    assert r.execute_command("TACK", "loop", "g", "4") == 1
    assert r.execute_command("TACK", "loop", "g", "5-7") == 3
    assert r.execute_command("TACK", "loop", "g", "8", "99999999999999999") == 1
    for bad in (("0",), ("01",), ("-1",), ("9", "x"), ("9", ""), ("5-",)):
        with pytest.raises(redis.ResponseError):
            r.execute_command("TACK", "loop", "g", *bad)
    assert r.execute_command("TACK", "loop", "g", "9", "10") == 2
    assert r.execute_command("TACK", "nokey", "g", "1") == 0
    r.close()


# ---- encode_entries (TREAD's reply) ----

from tstream.resp import Entries  # noqa: E402
from tstream.resp import encode as encode_reply  # noqa: E402
from tstream.resp.encode import encode_entries_python  # noqa: E402

try:
    from tstream.resp._speedups import encode_entries as c_encode_entries
except ImportError:
    c_encode_entries = None
if c_integer_reply is None:  # (TSTREAM_PURE_PYTHON=1)
    c_encode_entries = None


def _random_entries(rng: random.Random) -> list:
    entries = []
    for _ in range(rng.choice((0, 1, 1, 2, 3, 10, rng.randrange(0, 40)))):
        if rng.random() < 0.15:
            entries.append(None)
            continue
        offset = rng.choice((1, 9, 10, rng.randrange(1, 10 ** rng.randrange(1, 19)), 2 ** 63 - 1))
        tag = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12)))
        data = bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 9, 10, 99, 100, rng.randrange(0, 3000)))))
        kind = rng.randrange(6)
        if kind == 4:
            data = bytearray(data)
        elif kind == 5:
            data = memoryview(data)
        entries.append((offset, tag, data) if rng.random() < 0.5 else [offset, tag, data])
    return entries


@needs_c(c_encode_entries)
def test_the_c_encode_entries_against_python():
    rng = random.Random(23)
    for _ in range(3000):
        entries = _random_entries(rng)
        for resp3 in (False, True):
            want = encode_entries_python(Entries(entries), resp3)
            assert c_encode_entries(Entries(entries), resp3) == want
            assert c_encode_entries(entries, resp3) == want and c_encode_entries(tuple(entries), resp3) == want
    for bad in ([(1, b"t")], [(1, b"t", b"d", 4)], [("1", b"t", b"d")], [(1, "t", b"d")], [(1, b"t", 5)], [5],
                [(1.0, b"t", b"d")]):
        with pytest.raises(TypeError):
            c_encode_entries(bad, False)
    with pytest.raises(OverflowError):
        c_encode_entries([(2 ** 64, b"t", b"d")], False)
    with pytest.raises(TypeError):
        c_encode_entries(iter([]), False)


@needs_c(c_encode_entries)
def test_the_c_encode_entries_survives_memory_errors():
    entries = Entries([(7, b"tag", b"x" * 100), None, [8, b"tag", bytearray(b"y" * 50)]])
    assert memory_error_count(lambda: c_encode_entries(entries, True), 1) == 1  # its one allocation
    assert c_encode_entries(entries, True) == encode_entries_python(entries, True)


def test_encode_entries_through_encode():
    """encode() of an Entries reply (C or fallback) is the fallback's, both protocols."""
    rng = random.Random(24)
    for _ in range(300):
        entries = Entries(_random_entries(rng))
        assert encode_reply(entries, 2) == encode_entries_python(entries, False)
        assert encode_reply(entries, 3) == encode_entries_python(entries, True)


def test_tread_replies_through_the_server(server):
    """TREAD's replies (plain, group, a woken group reader's), RESP2 and RESP3, byte for byte."""
    import socket

    from .conftest import read_until_quiet

    def mb(*args: bytes) -> bytes:
        return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)

    with socket.create_connection(("127.0.0.1", server.port)) as c:
        c.sendall(mb(b"TWRITE", b"er", b"ENTRIES", b"t", b"one", b"tag2", b"x" * 200))
        assert read_until_quiet(c, 0.05) == b":1\r\n"
        c.sendall(mb(b"TREAD", b"er", b"1", b"5"))
        assert read_until_quiet(c, 0.05) == (b"*2\r\n*3\r\n:1\r\n$1\r\nt\r\n$3\r\none\r\n"
                                              b"*3\r\n:2\r\n$4\r\ntag2\r\n$200\r\n" + b"x" * 200 + b"\r\n")
        c.sendall(mb(b"TREAD", b"er", b"-", b"1", b"GROUP", b"g", b"RETRY", b"30000", b"600000"))
        assert read_until_quiet(c, 0.05) == b"*1\r\n*3\r\n:1\r\n$1\r\nt\r\n$3\r\none\r\n"
        c.sendall(mb(b"HELLO", b"3"))
        read_until_quiet(c, 0.05)
        c.sendall(mb(b"TEVICT", b"er", b"1") + mb(b"TREAD", b"er", b"1", b"3"))
        assert read_until_quiet(c, 0.05) == b":1\r\n*2\r\n_\r\n*3\r\n:2\r\n$4\r\ntag2\r\n$200\r\n" + b"x" * 200 + b"\r\n"
        read = mb(b"TREAD", b"er", b"-", b"5", b"GROUP", b"g", b"RETRY", b"30000", b"600000", b"BLOCK", b"2000")
        c.sendall(read)
        assert read_until_quiet(c, 0.05) == b"*1\r\n*3\r\n:2\r\n$4\r\ntag2\r\n$200\r\n" + b"x" * 200 + b"\r\n"
        c.sendall(read)  # nothing left: blocks, then is woken by the write
        time.sleep(0.05)
        with socket.create_connection(("127.0.0.1", server.port)) as w:
            w.sendall(mb(b"TWRITE", b"er", b"t3", b"woken"))
            assert read_until_quiet(w, 0.05) == b":3\r\n"
        assert read_until_quiet(c, 0.2) == b"*1\r\n*3\r\n:3\r\n$2\r\nt3\r\n$5\r\nwoken\r\n"
