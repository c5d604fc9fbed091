"""The C request parser (resp/_speedups.c) against the plain-Python path.

The C parser takes a read of whole multibulks of bulk strings in one call and
returns None for anything else, leaving it to the hiredis + strict path, so a
``RequestParser`` must behave the same with it and without it
(``TSTREAM_PURE_PYTHON=1``), for every input: the same commands, the same
protocol errors, the same state after.  Here both run side by side in one
process (the module's ``parse_many``/``parse_one`` set to None for the pure
one) on thousands of random valid, truncated and garbled reads, fed the way
the server feeds them (``read_one``, else ``read_many``, else ``pull``).
``TSTREAM_FUZZ_EXAMPLES`` raises the number of cases (a long run: with ``-o timeout=0``).
The error paths in C (MemoryError at each allocation) are driven with
``_testcapi.set_nomemory``.
"""

from __future__ import annotations

import os
import random
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tstream.resp import ProtocolError, StrictRequestParser
from tstream.resp import parser as parser_module
from tstream.resp.parser import RequestParser

from . import c_extensions

if parser_module.SPEEDUPS:
    from tstream.resp import _speedups as speedups
else:
    speedups = None
needs_c = c_extensions.needs_c(speedups)

EXAMPLES = int(os.environ.get("TSTREAM_FUZZ_EXAMPLES", "0")) or None


@contextmanager
def pure_python():
    """The module's C entry points set aside: parsers run the plain-Python path."""
    saved = parser_module.parse_many, parser_module.parse_one, parser_module.parse_read
    parser_module.parse_many = parser_module.parse_one = parser_module.parse_read = None
    try:
        yield
    finally:
        parser_module.parse_many, parser_module.parse_one, parser_module.parse_read = saved


def multibulk(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


class Served:
    """A parser fed as server/connection.py feeds it: ``read_first`` (one
    command, or a pipelined read's commands), else ``read_many``, else (fed)
    ``pull`` until it has nothing; records every command and the first protocol
    error's text.  ``first=False``: ``read_one`` in its place (the two must
    agree)."""

    def __init__(self, max_bulk: int = 512 << 20, first: bool = True) -> None:
        self.parser = RequestParser(max_bulk=max_bulk)
        self.first = first
        self.commands: list = []
        self.error: str | None = None
        self.taken: list = []  # the commands read_one/read_many took at once (or None), read by read

    def read(self, data: bytes) -> None:
        if self.error is not None:
            return
        parser = self.parser
        one = parser.read_first(data) if self.first else parser.read_one(data)
        if one.__class__ is tuple:  # (commands,): several, parsed at once
            self.taken.append(one[0])
            self.commands += one[0]
            return
        if one is not None:
            self.taken.append([one])
            self.commands.append(one)
            return
        many = parser.read_many(data)
        self.taken.append(many)
        if many is not None:
            self.commands += many
            return
        self.pull_all()

    def pull_all(self) -> None:
        parser = self.parser
        try:
            while (pulled := parser.pull()):
                self.commands += pulled
        except ProtocolError as exc:
            self.error = str(exc)

    def state(self) -> tuple:
        parser = self.parser
        return parser.has_input(), parser.pending_bytes()


def run_both(reads: list[bytes], max_bulk: int = 512 << 20) -> tuple[Served, Served]:
    fast = Served(max_bulk)
    with pure_python():
        pure = Served(max_bulk)
    by_one = Served(max_bulk, first=False)  # the C path through read_one: the same again
    for data in reads:
        fast.read(data)
        by_one.read(data)
        assert by_one.commands == fast.commands and by_one.error == fast.error
        assert by_one.state() == fast.state() and by_one.taken == fast.taken
        with pure_python():
            pure.read(data)
        assert fast.commands == pure.commands
        assert fast.error == pure.error
        assert fast.state() == pure.state()
        # What the pure path took at once, the C path takes at once too, the same
        # (the C path may take more at once: a "*12345" inside a payload).
        assert len(fast.taken) == len(pure.taken)
        if pure.taken and pure.taken[-1] is not None:
            assert fast.taken[-1] == pure.taken[-1]
    return fast, pure


# Words that look like protocol: headers, CRLFs, a huge count inside a payload.
_TRICKY = [b"", b"*", b"$", b"\r\n", b"*12345", b"*2147483647\r\n", b"$-1", b"\r", b"\n", b"*1\r\n$1\r\nx",
           b"+OK", b":1", b"FAST", b"0", b"-1"]


def random_word(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.15:
        return rng.choice(_TRICKY)
    if kind < 0.2:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
    if kind < 0.22:
        return b"x" * rng.randrange(100, 3000)
    return bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789-:*$") for _ in range(rng.randrange(0, 12)))


def random_command(rng: random.Random) -> bytes:
    shape = rng.random()
    if shape < 0.3:  # the hot shapes
        size = rng.choice([4, 5, 6, 9])
    else:
        size = rng.randrange(1, 12)
    return multibulk(*(random_word(rng) for _ in range(size)))


_JUNK = [b"*0\r\n", b"*-1\r\n", b"*-2\r\n", b"*01\r\n$1\r\nx\r\n", b"*1\r\n$01\r\nx\r\n", b"*+1\r\n$1\r\nx\r\n",
         b"*1\r\n$-1\r\n", b"*1\r\n:5\r\n", b"*1\r\n+OK\r\n", b"*2\r\n$1\r\nx\r\n*1\r\n$1\r\ny\r\n",
         b"*1\r\n$1\r\nxYZ", b"*1\r\n$1\r\nx\n\r", b"PING\r\n", b"\r\n", b"\n", b"*12345\r\n", b"*2147483647\r\n",
         b"*3000000000\r\n", b"$4\r\nPING\r\n", b"*1\r\n$99999999999999999999\r\n", b"*1 \r\n$1\r\nx\r\n",
         b"*1\r\n$ 1\r\nx\r\n", b"*1\n$1\r\nx\r\n", b"*1\r\n$1\nx\r\n", b"*1\r\n$1\r\n", b"*",
         b"*1\r\n$3\r\n\r\n\r\n", b"-ERR x\r\n", b"*1\r\n_\r\n", b"*1\r\n%0\r\n"]


def random_read(rng: random.Random) -> bytes:
    """A read: whole commands, often with junk, a cut, or a garbled byte."""
    parts = [random_command(rng) for _ in range(rng.choice([1, 1, 2, 3, 16, rng.randrange(1, 40)]))]
    if rng.random() < 0.25:
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(_JUNK))
    data = b"".join(parts)
    roll = rng.random()
    if roll < 0.15:  # truncated
        data = data[:rng.randrange(1, len(data) + 1)]
    elif roll < 0.25:  # a byte garbled
        at = rng.randrange(len(data))
        data = data[:at] + bytes([rng.randrange(256)]) + data[at + 1:]
    elif roll < 0.3:  # a byte dropped or added
        at = rng.randrange(len(data))
        data = data[:at] + data[at + 1:] if rng.random() < 0.5 else data[:at] + bytes([rng.choice(b"*$\r\n0")]) + data[at:]
    return data or b"*"


def split_randomly(rng: random.Random, data: bytes) -> list[bytes]:
    if rng.random() < 0.6:
        return [data]
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(1, 4)))) if len(data) > 1 else []
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


@needs_c
@pytest.mark.parametrize("seed", range(8))
def test_random_reads_parse_as_the_pure_python_path(seed):
    """Thousands of reads (valid, truncated, garbled; whole or split anywhere):
    the same commands, errors and state with the C parser as without."""
    rng = random.Random(seed)
    for _ in range((EXAMPLES or 4000) // 8):
        reads: list[bytes] = []
        for _ in range(rng.randrange(1, 5)):
            reads += split_randomly(rng, random_read(rng))
        max_bulk = rng.choice([512 << 20, 512 << 20, 16, 3000])
        run_both(reads, max_bulk)


@needs_c
@settings(max_examples=EXAMPLES or 1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.binary(max_size=10) | st.sampled_from(_TRICKY), min_size=1, max_size=10).map(
    lambda words: multibulk(*words)) | st.sampled_from(_JUNK) | st.binary(max_size=8), min_size=1, max_size=12),
    st.lists(st.integers(1, 60), max_size=6))
def test_hypothesis_reads_parse_as_the_pure_python_path(pieces, cuts):
    data = b"".join(pieces)
    reads, pos = [], 0
    for cut in cuts:
        if pos + cut < len(data):
            reads.append(data[pos:pos + cut])
            pos += cut
    reads.append(data[pos:])
    run_both([r for r in reads if r] or [b"*"])


@needs_c
def test_parse_many_returns_whole_reads_and_none_for_anything_else():
    data = multibulk(b"TWRITE", b"k", b"t", b"v") * 3 + multibulk(b"SET", b"a", b"")
    assert speedups.parse_many(data, 512 << 20) == [[b"TWRITE", b"k", b"t", b"v"]] * 3 + [[b"SET", b"a", b""]]
    assert speedups.parse_many(bytearray(data), 512 << 20) == speedups.parse_many(memoryview(data), 512 << 20)
    for junk in _JUNK:
        assert speedups.parse_many(multibulk(b"PING") + junk, 512 << 20) is None, junk
    size = len(multibulk(b"TWRITE", b"k", b"t", b"v"))
    for cut in range(1, len(data)):
        expected = None if cut % size or cut > 3 * size else [[b"TWRITE", b"k", b"t", b"v"]] * (cut // size)
        assert speedups.parse_many(data[:cut], 512 << 20) == expected, cut
    assert speedups.parse_many(b"", 512 << 20) is None
    assert speedups.parse_many(multibulk(b"x" * 17), 16) is None  # over max_bulk: the strict parser's error
    assert speedups.parse_many(multibulk(b"x" * 16), 16) == [[b"x" * 16]]


@needs_c
def test_a_word_repeated_at_the_same_place_is_one_object():
    """A run's repeated words (name, key, tag) are shared, not copied: equal
    values either way, and the run paths' ``count``/``is`` tests hit at once."""
    commands = speedups.parse_many(multibulk(b"TWRITE", b"k", b"t", b"v1") + multibulk(b"TWRITE", b"k", b"u", b"v2")
                                   + multibulk(b"PING", b"k"), 512 << 20)
    assert commands == [[b"TWRITE", b"k", b"t", b"v1"], [b"TWRITE", b"k", b"u", b"v2"], [b"PING", b"k"]]
    assert commands[0][0] is commands[1][0] and commands[0][1] is commands[1][1] is commands[2][1]
    assert commands[0][3] is not commands[1][3]


@needs_c
def test_parse_one_takes_exactly_one_command():
    assert speedups.parse_one(multibulk(b"PING"), 512 << 20) == [b"PING"]
    assert speedups.parse_one(multibulk(b"PING") * 2, 512 << 20) is None
    assert speedups.parse_one(multibulk(b"PING") + b"\r\n", 512 << 20) is None
    assert speedups.parse_one(b"*2147483647\r\n$1\r\nx\r\n", 512 << 20) is None  # nothing reserved
    assert speedups.parse_one(b"", 512 << 20) is None


@needs_c
def test_parse_read_is_parse_one_else_parse_many():
    """parse_read: the command when the read is exactly one, ``(commands,)`` when
    it is several whole ones (words shared as parse_many shares them), else None."""
    assert speedups.parse_read(multibulk(b"PING"), 512 << 20) == [b"PING"]
    data = multibulk(b"TWRITE", b"k", b"t", b"v1") * 2 + multibulk(b"PING", b"k")
    parsed = speedups.parse_read(data, 512 << 20)
    assert parsed.__class__ is tuple and parsed == (speedups.parse_many(data, 512 << 20),)
    assert parsed[0][0][1] is parsed[0][1][1] is parsed[0][2][1]
    assert speedups.parse_read(b"", 512 << 20) is None
    assert speedups.parse_read(multibulk(b"PING") + b"\r\n", 512 << 20) is None
    assert speedups.parse_read(b"*2147483647\r\n$1\r\nx\r\n", 512 << 20) is None
    assert speedups.parse_read(multibulk(b"x" * 17) * 2, 16) is None
    rng = random.Random(7)
    for _ in range(3000):
        read = b"".join(random_read(rng) for _ in range(rng.randrange(1, 4)))
        for data in split_randomly(rng, read):
            max_bulk = rng.choice([512 << 20, 16])
            one, many = speedups.parse_one(data, max_bulk), speedups.parse_many(data, max_bulk)
            expected = one if one is not None else (many,) if many is not None else None
            assert speedups.parse_read(data, max_bulk) == expected, data


@needs_c
def test_run_end_finds_the_run_the_python_loop_finds():
    """run_end (C) against the plain-Python fallback on random command lists:
    the run of commands with as many words and the same first word."""
    from tstream.resp.parser import _run_end
    assert speedups.run_end([[b"TWRITE", b"k", b"t", b"v"]] * 16, 0) == 16
    assert speedups.run_end([[b"A", b"k"], [b"A", b"k"], [b"a", b"k"], [b"A"]], 0) == 2
    assert speedups.run_end([[b"A"], [], "x", [b"A"]], 0) == 1
    with pytest.raises(IndexError):
        speedups.run_end([[b"A"]], 1)
    with pytest.raises(TypeError):
        speedups.run_end(([b"A"],), 0)
    rng = random.Random(11)
    names = [b"TWRITE", b"twrite", b"TREAD", bytearray(b"TWRITE"), b"TWRITE"[:3] + b"ITE"]
    for _ in range(3000):
        commands = [[rng.choice(names)] + [b"w"] * rng.choice([3, 3, 3, 5]) for _ in range(rng.randrange(1, 20))]
        at = rng.randrange(len(commands))
        assert speedups.run_end(commands, at) == _run_end(commands, at), (commands, at)


@needs_c
def test_bad_arguments_raise():
    with pytest.raises(TypeError):
        speedups.parse_many(b"*1\r\n$1\r\nx\r\n")
    with pytest.raises(TypeError):
        speedups.parse_one("*1\r\n$1\r\nx\r\n", 10)
    with pytest.raises(TypeError):
        speedups.parse_many(b"*1\r\n$1\r\nx\r\n", "10")
    with pytest.raises(TypeError):
        speedups.parse_read(b"*1\r\n$1\r\nx\r\n")
    with pytest.raises(OverflowError):
        speedups.parse_one(b"*1\r\n$1\r\nx\r\n", 1 << 70)


@needs_c
def test_memory_errors_at_every_allocation_leave_no_damage():
    """MemoryError at each allocation the C parser makes: raised, never a crash,
    and the same call then succeeds (refcounts intact: PYTHONMALLOC=debug and a
    debug build would catch a double free)."""
    data = multibulk(b"TWRITE", b"key", b"tag", b"value") * 4 + multibulk(b"BATCH", *[b"w%d" % i for i in range(8)])
    expected = speedups.parse_many(data, 512 << 20)
    one = multibulk(b"TWRITE", b"key", b"tag", b"value")
    for call, argument in ((speedups.parse_many, data), (speedups.parse_read, data),
                           (speedups.parse_one, one), (speedups.parse_read, one)):
        assert c_extensions.memory_error_count(lambda: call(argument, 512 << 20), 60) > 0  # noqa: B023 (called at once)
    assert speedups.parse_many(data, 512 << 20) == expected
    assert speedups.parse_read(data, 512 << 20) == (expected,)


def test_the_environment_variable_turns_the_c_parser_off():
    probe = "import tstream.resp.parser as p; print(p.SPEEDUPS, p.parse_many is None)"
    assert c_extensions.probe_words(probe, pure=True) == ["False", "True"]
    # The README's install builds it (setup.py); a machine without a compiler runs without it.
    assert c_extensions.probe_words(probe, pure=False) == ["True", "False"]


def test_the_strict_parser_agrees_on_whole_reads():
    """Whole reads of plain commands: whatever path takes them, the strict parser
    (the reference) decodes the same commands."""
    rng = random.Random(7)
    for _ in range(300):
        commands = [random_command(rng) for _ in range(rng.randrange(1, 20))]
        data = b"".join(commands)
        served = Served()
        served.read(data)
        strict = StrictRequestParser()
        strict.feed(data)
        decoded = []
        while (command := strict.next_command()) is not None:
            decoded.append(command)
        assert served.commands == decoded and served.error is None


def _like_run(rng: random.Random) -> bytes:
    """A pipelined run of commands like one another (parse_like's path): a
    model's words, each command changing a few of them (a seq, a payload, one
    byte, a length), now and then a command of another length or over 16
    words, and the run cut or garbled at the end now and then."""
    width = rng.choice([1, 2, 4, 9, 9, 9, 16, 17, 20])
    model = [rng.choice([b"BATCH", b"k", b"b", b"orders", b"x" * rng.randrange(0, 120), b"FAST", b"64", b"ok",
                         b"", b"\r\n", b"$3"]) for _ in range(width)]
    commands = []
    for n in range(rng.randrange(1, 40)):
        words = list(model)
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            at = rng.randrange(len(words))
            kind = rng.random()
            if kind < 0.4:
                words[at] = b"%d" % (n + rng.randrange(3))
            elif kind < 0.6 and words[at]:
                i = rng.randrange(len(words[at]))
                words[at] = words[at][:i] + bytes([rng.randrange(256)]) + words[at][i + 1:]
            elif kind < 0.8:
                words[at] = words[at] + b"y" * rng.randrange(1, 12)
            else:
                words[at] = random_word(rng)
        if rng.random() < 0.1:
            words = words[:rng.randrange(1, len(words) + 1)] + [b"z"] * rng.randrange(0, 3)
        if rng.random() < 0.3:
            model = words  # (the next commands follow this one)
        commands.append(multibulk(*words))
    data = b"".join(commands)
    roll = rng.random()
    if roll < 0.1:  # truncated
        data = data[:rng.randrange(1, len(data) + 1)]
    elif roll < 0.2:  # a byte garbled (a header's, a CRLF's, a word's)
        at = rng.randrange(len(data))
        data = data[:at] + bytes([rng.choice([rng.randrange(256), *b"*$\r\n0"])]) + data[at + 1:]
    return data


@needs_c
@pytest.mark.parametrize("seed", range(4))
def test_runs_of_like_commands_parse_as_the_pure_python_path(seed):
    """parse_like (a command compared with the one before by stretches of bytes):
    random runs of like commands, changed here and there, whole or split, parse
    to the pure path's commands, errors and state."""
    rng = random.Random(1000 + seed)
    for _ in range((EXAMPLES or 2000) // 4):
        data = _like_run(rng)
        run_both(split_randomly(rng, data), rng.choice([512 << 20, 512 << 20, 64, 5]))
        commands = speedups.parse_many(data, 512 << 20)
        if commands is not None:  # the words the command before had at the same place are its objects
            for before, command in zip(commands, commands[1:]):
                if len(before) == len(command):
                    for old, new in zip(before, command):
                        assert (old is new) == (old == new)


@needs_c
def test_a_run_of_fast_batches_shares_all_but_its_seqs():
    run = b"".join(multibulk(b"BATCH", b"k", b"b", b"%d" % n, b"orders", b"x" * 100, b"FAST", b"64", b"ok")
                   for n in range(8, 13))
    commands = speedups.parse_many(run, 512 << 20)
    assert [c[3] for c in commands] == [b"8", b"9", b"10", b"11", b"12"]
    for before, command in zip(commands, commands[1:]):
        assert [old is new for old, new in zip(before, command)] == [True] * 3 + [False] + [True] * 5
    # a stretch that differs (the payload) is parsed word by word: the others still shared
    changed = run + multibulk(b"BATCH", b"k", b"b", b"13", b"orders", b"y" * 100, b"FAST", b"64", b"ok")
    before, last = speedups.parse_read(changed, 512 << 20)[0][-2:]
    assert last == [b"BATCH", b"k", b"b", b"13", b"orders", b"y" * 100, b"FAST", b"64", b"ok"]
    assert [old is new for old, new in zip(before, last)] == [True] * 3 + [False, True, False] + [True] * 3


@needs_c
def test_memory_errors_in_a_run_of_like_commands_leave_no_damage():
    data = b"".join(multibulk(b"BATCH", b"k", b"b", b"%d" % n, b"orders", b"x" * 100, b"FAST", b"64", b"ok")
                    for n in range(6)) + multibulk(b"BATCH", b"k", b"b", b"7", b"orders", b"y" * 100, b"FAST",
                                                   b"64", b"ok")
    expected = speedups.parse_many(data, 512 << 20)
    for call in (speedups.parse_many, speedups.parse_read):
        assert c_extensions.memory_error_count(lambda: call(data, 512 << 20), 60) > 0  # noqa: B023 (called at once)
    assert speedups.parse_many(data, 512 << 20) == expected
    assert speedups.parse_read(data, 512 << 20) == (expected,)
