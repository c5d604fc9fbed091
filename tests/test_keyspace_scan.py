"""SCAN over the keyspace's chunks of ids (engine/keyspace.py), against a model."""

from __future__ import annotations

import random

from tstream.engine import Keyspace
from tstream.engine.keyspace import SCAN_CHUNK


def full_scan(ks: Keyspace, count: int) -> list[bytes]:
    cursor, seen = 0, []
    while True:
        cursor, keys = ks.scan(cursor, count)
        assert len(keys) <= count
        seen += keys
        if cursor == 0:
            return seen


def test_scan_matches_creation_order_with_churn():
    rng = random.Random(3)
    ks = Keyspace()
    model: dict[bytes, int] = {}  # key -> its creation number (SCAN order)
    made = 0
    for step in range(4000):
        roll = rng.random()
        if roll < 0.55 or not model:
            key = b"k%d" % rng.randrange(600)
            if key not in model:
                made += 1
                model[key] = made
            ks.get_or_create(key)
        elif roll < 0.999:
            key = rng.choice(list(model))
            assert ks.delete(key) is True
            del model[key]
        else:
            ks.flush()
            model.clear()
        if step % 97 == 0:
            want = sorted(model, key=model.__getitem__)
            assert full_scan(ks, rng.randrange(1, 40)) == want
            assert ks.scan(0, 10 ** 6) == (0, want)
    # Chunks whose ids are all deleted are dropped: memory follows the live keys.
    assert len(ks._chunks) <= len(model) + 1


def test_scan_cursor_is_stable_across_deletes_of_other_keys():
    ks = Keyspace()
    for i in range(5 * SCAN_CHUNK):
        ks.get_or_create(b"k%04d" % i)
    cursor, first = ks.scan(0, SCAN_CHUNK + 3)
    # delete everything already returned and a whole chunk ahead of the cursor
    for key in first:
        ks.delete(key)
    for i in range(2 * SCAN_CHUNK, 3 * SCAN_CHUNK):
        ks.delete(b"k%04d" % i)
    rest = []
    while cursor:
        cursor, keys = ks.scan(cursor, 50)
        rest += keys
    assert rest == [b"k%04d" % i for i in range(SCAN_CHUNK + 3, 5 * SCAN_CHUNK)
                    if not 2 * SCAN_CHUNK <= i < 3 * SCAN_CHUNK]
    assert ks.scan(0, 10 ** 6) == (0, rest)


def test_flush_then_scan_with_an_old_cursor_returns_only_new_keys_once():
    ks = Keyspace()
    for i in range(10):
        ks.get_or_create(b"old%d" % i)
    cursor, _ = ks.scan(0, 3)
    ks.flush()
    for i in range(5):
        ks.get_or_create(b"new%d" % i)
    seen = []
    while cursor:
        cursor, keys = ks.scan(cursor, 2)
        seen += keys
    assert seen == [b"new%d" % i for i in range(5)]


def test_deleted_stream_lets_go_of_its_chunk():
    ks = Keyspace()
    stream = ks.get_or_create(b"a")
    assert stream.key_slot is not None
    ks.delete(b"a")
    assert stream.key_slot is None and ks.scan(0, 10) == (0, [])
