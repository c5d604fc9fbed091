"""DGET pages written from the log's tables (resp.encode_table_page, engine
Stream.read_tables): the C encoder (resp/_speedups.c) against its
pure-Python fallback and against encode_message_page, on random pages.

The C function takes the decoded tables of the blocks (or of the active
node) that hold a page and writes the page's messages in one buffer; its
fallback, ``encode_table_page_python``, builds each message with
``encode_batched_message`` and the times with ``time.strftime``.  Both must
give the same bytes for every page (RESP2/RESP3, ends of 'I' and 'Q', bytes
and bytearray buffers, times anywhere in int64's range, MAX_BYTES cuts), and
those bytes with the end-of-batch map must be ``encode_message_page``'s.  The
C error paths (a MemoryError at each allocation, bad arguments) are driven
here too; the pages over TCP are tests/test_jetstream.py's.
"""

from __future__ import annotations

import random
import time
from array import array

import pytest

from tstream.resp import encode, encode_batched_message, encode_eob, encode_message_page
from tstream.resp.encode import TABLE_PAGES_IN_C, encode_table_page, encode_table_page_python

from . import c_extensions

if TABLE_PAGES_IN_C:
    from tstream.resp._speedups import encode_table_page as c_encode_table_page
else:
    c_encode_table_page = None


needs_c = c_extensions.needs_c(c_encode_table_page)


INT64 = (-(1 << 63), (1 << 63) - 1)


def random_tables(rng: random.Random, subjects: list) -> list:
    """A few tables as Stream.read_tables gives them: consecutive seqs, each
    table a random range of its own random block."""
    tables = []
    seq = rng.choice((1, rng.randrange(1, 1 << 40)))
    for _ in range(rng.randrange(0, 5)):
        held = rng.randrange(1, 40)
        datas = [bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 9, 10, 99, 100, 1000))))
                 for _ in range(held)]
        ends = array(rng.choice("IQ"), [0])
        for data in datas:
            ends.append(ends[-1] + len(data))
        buf = b"".join(datas)
        if rng.random() < 0.3:
            buf = bytearray(buf)  # the active node's
        tags = array("I", (rng.randrange(1, len(subjects)) for _ in range(held)))
        base = rng.choice((0, 1_700_000_000_000_000_000, rng.randrange(*INT64)))
        spread = rng.choice((0, 1_000, 10 ** 9, 10 ** 12, 1 << 62))
        times = array("q", (min(max(base + rng.randrange(-spread, spread + 1), INT64[0]), INT64[1])
                            for _ in range(held)))
        i = rng.randrange(0, held)
        j = rng.randrange(i, held + 1)
        tables.append((buf, ends, tags, times, i, j, seq))
        seq += j - i
    return tables


def random_subjects(rng: random.Random) -> list | tuple:
    subjects = [None] + [rng.choice((b"t.%d" % k, b"x" * rng.randrange(1, 300), b"a.b.c%", b"k"))
                         for k in range(rng.randrange(1, 12))]
    return tuple(subjects) if rng.random() < 0.3 else subjects


def columns(tables: list, subjects, budget: int) -> tuple[list, list, list, list]:
    """The entries a page of ``tables`` takes under ``budget``, as columns."""
    seqs, tags, datas, times = [], [], [], []
    used = 0
    for buf, ends, tag_ids, tms, i, j, first in tables:
        for k in range(i, j):
            if used >= budget:
                return seqs, tags, datas, times
            seqs.append(first + k - i)
            tags.append(subjects[tag_ids[k]])
            datas.append(bytes(buf[ends[k]:ends[k + 1]]))
            times.append(tms[k])
            used += len(tags[-1]) + len(datas[-1])
    return seqs, tags, datas, times


def time_text(ns: int) -> bytes:
    sec, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)).encode() + b".%09dZ" % frac


@pytest.mark.parametrize("seed", range(6))
def test_the_python_fallback_is_encode_message_page(seed):
    """The fallback's page and the end-of-batch map are encode_message_page's bytes."""
    rng = random.Random(seed)
    for _ in range(80):
        subjects = random_subjects(rng)
        tables = random_tables(rng, subjects)
        protocol = rng.choice((2, 3))
        stream = rng.choice((b"s", b"pg", b"key%with%", b"k" * 300))
        budget = rng.choice((1, 50, 1_000, 1 << 20))
        pending = rng.randrange(0, 1 << 40)
        last_seq = rng.choice((0, rng.randrange(1 << 40)))
        body, n = encode_table_page_python(protocol, stream, tables, subjects, pending, last_seq, budget)
        seqs, tags, datas, times = columns(tables, subjects, budget)
        assert n == len(seqs)
        tail = {"status": 204, "description": "EOB", "num_pending": pending - n, "last_seq": seqs[-1] if seqs else 0}
        expected = encode_message_page(protocol, stream, seqs, tags, list(map(time_text, times)), datas,
                                       pending, last_seq, tail)
        assert body + encode(tail, protocol) == expected


@needs_c
@pytest.mark.parametrize("seed", range(10))
def test_random_pages_are_the_python_fallbacks(seed):
    rng = random.Random(1000 + seed)
    for _ in range(120):
        subjects = random_subjects(rng)
        tables = random_tables(rng, subjects)
        args = (rng.choice((2, 3)), rng.choice((b"s", b"", b"key%with%", b"k" * 300)), tables, subjects,
                rng.choice((0, 5, rng.randrange(INT64[0] // 2, INT64[1] // 2))),
                rng.choice((0, -1, rng.randrange(INT64[0] // 2, INT64[1] // 2))),
                rng.choice((-5, 0, 1, 50, 1_000, 1 << 20, 1 << 62)))
        assert c_encode_table_page(*args) == encode_table_page_python(*args)


@needs_c
def test_times_across_the_calendar_are_strftimes():
    """Every 7th day of 1677-2262 (int64 ns: 30,000 days, every weekday and
    date of the month) and the nanoseconds around each day's edge, one message
    each: the C calendar is time.gmtime's."""
    day = 86_400 * 10 ** 9
    times = []
    for ns in range(INT64[0] + day - INT64[0] % day, INT64[1] - day, 7 * day):
        times += (ns - 1, ns, ns + 1, ns + 43_199_999_999_999)
    times += [INT64[0], INT64[1], 0, -1, 1, 951_782_400 * 10 ** 9]  # (2000-02-29)
    n = len(times)
    datas = b"x" * n
    table = (datas, array("Q", range(n + 1)), array("I", [1] * n), array("q", times), 0, n, 1)
    assert c_encode_table_page(2, b"s", [table], [None, b"t"], n, 0, 1 << 62) == \
        encode_table_page_python(2, b"s", [table], [None, b"t"], n, 0, 1 << 62)


@needs_c
def test_bad_arguments_raise():
    good = (b"ab", array("I", [0, 1, 2]), array("I", [1, 1]), array("q", [5, 6]), 0, 2, 1)
    subjects = [None, b"t"]
    assert c_encode_table_page(2, b"s", [good], subjects, 2, 0, 100)[1] == 2
    cases = [
        ((4, b"s", [good], subjects, 2, 0, 100), ValueError),  # protocol
        ((2, "s", [good], subjects, 2, 0, 100), TypeError),
        ((2, b"s", (good,), subjects, 2, 0, 100), TypeError),
        ((2, b"s", [good[:6]], subjects, 2, 0, 100), TypeError),
        ((2, b"s", [good], {1: b"t"}, 2, 0, 100), TypeError),
        ((2, b"s", [good], [None], 2, 0, 100), ValueError),  # a tag id past the subjects
        ((2, b"s", [good], [None, "t"], 2, 0, 100), ValueError),  # a subject not bytes
        ((2, b"s", [good[:4] + (1, 0, 1)], subjects, 2, 0, 100), ValueError),  # j < i
        ((2, b"s", [good[:4] + (0, 3, 1)], subjects, 2, 0, 100), ValueError),  # past the ends
        ((2, b"s", [(b"a",) + good[1:]], subjects, 2, 0, 100), ValueError),  # ends past the buffer
        ((2, b"s", [(good[0], array("H", [0, 1, 2])) + good[2:]], subjects, 2, 0, 100), TypeError),
        ((2, b"s", [good[:2] + (array("i", [1, 1]),) + good[3:]], subjects, 2, 0, 100), TypeError),
        ((2, b"s", [good[:3] + (array("d", [5, 6]),) + good[4:]], subjects, 2, 0, 100), TypeError),
        ((2, b"s", [(object(),) + good[1:]], subjects, 2, 0, 100), TypeError),
        ((2, b"s", [good], subjects, 1 << 70, 0, 100), OverflowError),
        ((2, b"s", [good[:4] + (False, 2, 1)], subjects, 2, 0, 100), TypeError),  # ints only, exact
        ((2, b"s", [good[:6] + ((1 << 63) - 2,)], subjects, 2, 0, 100), ValueError),  # a seq past 2**63-1
        ((2, b"s", [good[:6] + (-1,)], subjects, 2, 0, 100), ValueError),
        ((2, b"s", [good], subjects, 2, 0), TypeError),
    ]
    for args, error in cases:
        with pytest.raises(error):
            c_encode_table_page(*args)
    reversed_ends = (b"ab", array("I", [0, 2, 1]), array("I", [1, 1]), array("q", [5, 6]), 0, 2, 1)
    with pytest.raises(ValueError):
        c_encode_table_page(2, b"s", [reversed_ends], subjects, 2, 0, 100)


@needs_c
def test_memory_errors_at_every_allocation_leave_no_damage():
    """A MemoryError at each allocation the C encoder makes: raised, never a
    crash, and the same call then gives the same bytes."""
    rng = random.Random(7)
    subjects = random_subjects(rng)
    tables = []
    while len(tables) < 2:
        tables = random_tables(rng, subjects)
    args = (3, b"pg", tables, subjects, 500, 0, 1 << 20)
    expected = c_encode_table_page(*args)
    assert c_extensions.memory_error_count(lambda: c_encode_table_page(*args), 40) > 0
    assert c_encode_table_page(*args) == expected


def test_the_environment_variable_turns_the_c_encoder_off():
    probe = ("import importlib; e = importlib.import_module('tstream.resp.encode'); "
             "print(e.TABLE_PAGES_IN_C, e.encode_table_page is e.encode_table_page_python)")
    assert c_extensions.probe_words(probe, pure=True) == ["False", "True"]
    assert c_extensions.probe_words(probe, pure=False) == ["True", "False"]  # (the README's install builds the extension)


def test_table_pages_in_use():
    """The server's DGET pages go through encode_table_page when it is in C
    (tests/test_jetstream.py's pages then check its bytes over TCP)."""
    assert encode_table_page is (c_encode_table_page or encode_table_page_python)
    assert encode_batched_message  # (the fallback's message encoder)


def test_encode_eob_is_encode_of_the_map():
    for protocol in (2, 3):
        for pending, last in ((0, 0), (5, 7), (1 << 40, 123), (-1, -2)):
            tail = {"status": 204, "description": "EOB", "num_pending": pending, "last_seq": last}
            assert encode_eob(protocol, pending, last) == encode(tail, protocol)
