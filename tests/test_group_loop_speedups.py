"""resp/_speedups.c's ``integer_reply`` (the dispatcher's integer replies) and
``plain_positive_ints`` (TACK's offsets in one call) against their pure-Python
forms, on random inputs, and under forced MemoryErrors; and the server's
TACK/TWRITE replies through them, over TCP (the same on the pure-Python pass,
.ci/run)."""

from __future__ import annotations

import random

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
