"""engine/_columns.c ``msgid_columns``: a pipelined MSGID run's tags, datas and
ids, with its one key and MSGID words checked in C (commands/streams.py
``_msgid_run``), against what the Python fallback computes with ``zip``.  The
run path itself, C or not, is tested through the server in
tests/test_fast_ingest.py (test_pipelined_msgid_runs_reply_as_one_by_one, run
without C too by .ci/run's pure-Python pass)."""

from __future__ import annotations

import random

import pytest

from . import c_extensions

try:
    from tstream.engine._columns import msgid_columns
except ImportError:
    msgid_columns = None

needs_c = c_extensions.needs_c(msgid_columns)


def _reference(rows):
    """The fallback's checks and columns (commands/streams.py ``_msgid_run`` without C)."""
    if not rows or any(len(row) != 6 for row in rows):
        return None
    _, keys, tags, datas, words, ids = zip(*rows)
    if keys.count(keys[0]) != len(rows) or any(word.lower() != b"msgid" for word in words):
        return None
    return tags, datas, ids


def _random_rows(rng: random.Random) -> list:
    key = rng.choice((b"k", b"key:1", b""))
    rows = []
    for i in range(rng.randint(1, 40)):
        row = [b"TWRITE", bytes(key), b"t%d" % rng.randrange(3), b"d%d" % i,
               rng.choice((b"MSGID", b"msgid", b"MsgId")), b"id-%d" % i]
        roll = rng.random()
        if roll < 0.03:
            row[1] = key + b"x"  # another key
        elif roll < 0.06:
            row[4] = rng.choice((b"MSGIDS", b"MSGI", b"BACKLOG", b"msgie", b"NSGID"))
        elif roll < 0.08:
            row = row[:4]  # a plain TWRITE
        elif roll < 0.09:
            row[1] = key.decode()  # (not bytes: None, as another key)
        rows.append(tuple(row) if rng.random() < 0.3 else row)
    return rows


@needs_c
def test_msgid_columns_is_the_fallback_on_random_runs():
    rng = random.Random(1613)
    fitting = 0
    for _ in range(3000):
        rows = _random_rows(rng)
        expected = _reference(rows) if all(type(row[1]) is bytes for row in rows) else None
        got = msgid_columns(rows)
        assert got == expected
        fitting += got is not None
    assert 300 < fitting < 2700  # both outcomes drawn often
    assert msgid_columns([]) is None
    with pytest.raises(TypeError):
        msgid_columns(iter([]))


@needs_c
def test_msgid_columns_out_of_memory_leaves_nothing_behind():
    rows = [[b"TWRITE", b"k", b"t", b"d%d" % i, b"MSGID", b"id-%d" % i] for i in range(20)]
    expected = msgid_columns(rows)
    results = []

    def call():
        results.append(msgid_columns(rows))

    import sys

    before = [sys.getrefcount(word) for word in rows[7]]
    failures = c_extensions.memory_error_count(call, 8)
    assert failures >= 1 and all(r == expected for r in results)  # (a tuple not from the free list can fail)
    results.clear()
    assert [sys.getrefcount(word) for word in rows[7]] == before  # nothing kept of a failed call
    assert msgid_columns(rows) == expected
