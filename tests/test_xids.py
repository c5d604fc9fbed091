"""Redis ids beside the dense offsets (engine/xids.py): a seeded model check.

A model keeps every entry's id as Redis would give it (``XADD *`` from the top
id and the clock, explicit ids, ``ms-*``, XSETID) while the stream stores only
anchors; after every operation each held offset's id, ranges of ids, lookups
by id and the invariants are compared, with small nodes so that sealing,
blocks and node drops (eviction) all happen, and snapshots are reloaded.
"""

from __future__ import annotations

import random

import pytest

from tstream.engine import xids
from tstream.engine.stream import Stream


def auto_id(top, t, ms=None):
    if ms is None:
        return (t, 0) if t > top[0] else (top[0], top[1] + 1)
    return (ms, 0) if ms > top[0] else (ms, top[1] + 1)


class Model:
    def __init__(self):
        self.ids = {}      # offset -> id, every entry ever appended and not dropped
        self.pairs = {}    # offset -> flat pairs
        self.top = (0, 0)
        self.clock = 1_000_000_000
        self.last_time = 0


def step(rng, stream, model):  # noqa: C901 (one branch per operation of the model)
    op = rng.random()
    model.clock += rng.choice([0, 0, 1, 3, 400_000, 1_000_000, 2_500_000, -2_000_000, 40_000_000])
    now = model.clock
    t = max(now, model.last_time) // 1_000_000
    if op < 0.35:  # TWRITE: an auto id
        offset = stream.append(b"tag%d" % rng.randrange(3), b"v%d" % rng.randrange(100), now)
        model.ids[offset] = auto_id(model.top, t)
        model.pairs[offset] = [b"tag", b"v"]
    elif op < 0.45:  # a pipelined run: auto ids
        n = rng.randrange(1, 6)
        first = stream.append_columns([b"r"] * n, [b"x%d" % i for i in range(n)], now)
        top = model.top
        for offset in range(first, first + n):
            top = model.ids[offset] = auto_id(top, t)
        model.top = top
        model.last_time = max(now, model.last_time)
        return
    elif op < 0.65:  # XADD *, or ms-*, or an explicit id (maybe refused)
        kind = rng.random()
        pairs = [b"f1", b"a"] if rng.random() < 0.5 else [b"f1", b"a", b"f2", b"b", b"f3", b"c"]
        try:
            if kind < 0.4:
                offset, got = xids.add(stream, pairs, now)
                want = auto_id(model.top, t)
            elif kind < 0.6:
                ms = max(0, model.top[0] + rng.choice([-1, 0, 0, 1, 5]))
                offset, got = xids.add(stream, pairs, now, ms=ms)
                want = auto_id(model.top, t, ms)
                assert want > model.top
            else:
                base = model.top[0] if rng.random() < 0.3 else t  # near the top, or near the clock
                xid = (max(0, base + rng.choice([-1, 0, 0, 2, 30])), rng.randrange(4))
                offset, got = xids.add(stream, pairs, now, xid=xid)
                want = xid
                assert xid > model.top
        except xids.IdError:
            return
        assert got == want
        model.ids[offset] = want
        model.pairs[offset] = pairs
    elif op < 0.67:  # XSETID above the top
        xids.set_last_id(stream, (model.top[0] + rng.choice([0, 1, 30]), model.top[1] + 1))
        model.top = stream._x.top
        return
    elif op < 0.8 and model.ids:  # delete a held entry
        offset = rng.choice(sorted(model.ids))
        if stream.is_held(offset):
            stream.delete(offset)
        return
    elif op < 0.9:  # evict
        if rng.random() < 0.5:
            stream.evict_keep(rng.randrange(0, 30))
        else:
            stream.evict_through(stream.first + rng.randrange(0, 10))
        return
    else:
        return
    model.top = max(model.top, model.ids[offset])
    model.last_time = max(now, model.last_time)


def check(rng, stream, model):
    stream._check()
    nodes = stream.node_list()
    physical = nodes[0].start if nodes else stream.next_offset
    for offset in list(model.ids):
        if offset < physical:
            del model.ids[offset]
    held = [o for o in sorted(model.ids)]
    for offset in held:
        assert xids.id_of(stream, offset) == model.ids[offset], offset
    if held:
        a = rng.choice(held)
        b = rng.choice(held)
        a, b = min(a, b), max(a, b) + 1
        assert xids.ids_between(stream, a, b) == [model.ids[o] for o in range(a, b)]
        probe = rng.choice(held)
        target = model.ids[probe]
        target = (target[0], target[1] + rng.choice([0, 0, 1])) if rng.random() < 0.8 else (target[0] - 1, 0)
        want = next((o for o in held if model.ids[o] >= target), stream.next_offset)
        assert xids.offset_at_or_after(stream, target) == want
    if stream.next_offset > 1:
        assert xids.top_id(stream) == model.top


@pytest.mark.parametrize("seed", range(12))
def test_ids_follow_the_model(seed):
    rng = random.Random(seed)
    stream = Stream(node_entries=rng.choice([1, 3, 7, 50]), node_max_bytes=rng.choice([0, 40]))
    model = Model()
    for i in range(600):
        step(rng, stream, model)
        check(rng, stream, model)
        if i % 97 == 96:  # a snapshot reloaded keeps every id
            stream = Stream.from_state(stream.export_state())
            check(rng, stream, model)


@pytest.mark.parametrize("seed", range(6))
def test_ids_between_from_the_id_before_follow_the_model(seed):
    """``ids_between`` given the id before the range (XREADGROUP's reads, right
    after the last one handed out): the same ids as the model's, whether the
    range shares one millisecond (derived at once) or not, across stored ids."""
    rng = random.Random(1000 + seed)
    stream = Stream(node_entries=rng.choice([1, 3, 7, 50]), node_max_bytes=rng.choice([0, 40]))
    model = Model()
    for _ in range(600):
        step(rng, stream, model)
        nodes = stream.node_list()
        physical = nodes[0].start if nodes else stream.next_offset
        held = sorted(o for o in model.ids if o > physical)
        for _ in range(3 if held else 0):
            a = rng.choice(held)
            b = min(a + rng.randrange(1, 12), stream.next_offset)
            assert xids.ids_between(stream, a, b, model.ids[a - 1]) == [model.ids[o] for o in range(a, b)]


def test_twrite_only_streams_store_nothing():
    stream = Stream(node_entries=4)
    for i in range(100):
        stream.append(b"t", b"v", 1_000_000_000 + i * 300_000)
    assert stream._x is None
    ids = xids.ids_between(stream, 1, 101)
    assert ids == sorted(set(ids)) and ids[0] == (1000, 0)
    stream.evict_keep(10)  # nodes dropped: the last id dropped is stored, nothing else
    assert stream._x is not None and len(stream._x.offs) == 1
    assert xids.ids_between(stream, stream.first, 101) == ids[stream.first - 1:]


def test_packed_pairs_round_trip_and_are_marked():
    stream = Stream(node_entries=3)
    offset, _ = xids.add(stream, [b"a", b"1", b"b", b"2"], 5_000_000)
    single, _ = xids.add(stream, [b"c", b"3"], 5_000_000)
    entry = stream.get(offset)
    assert xids.is_packed(stream, offset) and not xids.is_packed(stream, single)
    assert xids.unpack_pairs(entry.tag, entry.data) == [b"a", b"1", b"b", b"2"]
    assert stream.get(single)[1:3] == (b"c", b"3")
    assert xids.packed_flags(stream, offset, single + 1) == [True, False]


@pytest.mark.parametrize("seed", range(4))
def test_packed_span_says_what_packed_flags_list(seed):
    """``packed_span`` (0 none, 1 every one, 2 some, by bisection) agrees with
    ``packed_flags`` on every range of a stream of mixed runs; and
    ``unpack_rests`` is ``unpack_pairs`` without the tag."""
    rng = random.Random(seed)
    stream = Stream(node_entries=4)
    for _ in range(40):
        pairs = [b"a", b"1"] + ([b"b", b"2"] * rng.randrange(3) if rng.random() < 0.5 else [])
        xids.add(stream, pairs, 5_000_000)
    end = stream.next_offset
    for start in range(1, end + 1):
        for stop in range(start, end + 1):
            flags = xids.packed_flags(stream, start, stop)
            want = 0 if flags is None or not any(flags) else 1 if all(flags) else 2
            assert xids.packed_span(stream, start, stop) == want, (start, stop, flags)
    packed = [o for o in range(1, end) if xids.is_packed(stream, o)]
    entries = [stream.get(o) for o in packed]
    assert xids.unpack_rests([e.data for e in entries]) == [xids.unpack_pairs(e.tag, e.data)[1:] for e in entries]
    assert xids.packed_span(Stream(), 1, 5) == 0


def test_explicit_id_errors_are_redis_texts():
    stream = Stream()
    xids.add(stream, [b"f", b"v"], 0, xid=(5, 5))
    with pytest.raises(xids.IdError, match="equal or smaller than the target stream top item"):
        xids.add(stream, [b"f", b"v"], 0, xid=(5, 5))
    with pytest.raises(xids.IdError, match="equal or smaller"):
        xids.add(stream, [b"f", b"v"], 0, ms=4)
    with pytest.raises(xids.IdError, match="must be greater than 0-0"):
        xids.add(Stream(), [b"f", b"v"], 0, xid=(0, 0))
    full = Stream()
    xids.add(full, [b"f", b"v"], 0, xid=xids.MAX_ID)
    with pytest.raises(xids.IdError, match="exhausted the last possible ID"):
        xids.add(full, [b"f", b"v"], 0)


@pytest.mark.parametrize("seed", range(6))
def test_group_deliveries_spell_the_model_ids(seed):
    """XREADGROUP's deliveries (``xgroups.deliver_columns``: ids derived from the
    times of the entries read, a millisecond at a time, when they follow the last
    delivery with no deleted entry nor stored id among them, else through
    ``ids_between``) spell every entry's id as the model's, across stored ids,
    XSETID, deletions, evictions and reads of one or many milliseconds."""
    from tstream.engine import xgroups

    rng = random.Random(2000 + seed)
    stream = Stream(node_entries=rng.choice([1, 3, 7, 50]), node_max_bytes=rng.choice([0, 40]))
    model = Model()
    group = xgroups.create(stream, b"g", (0, 0))
    owner = xgroups.consumer(group, b"c", 0)
    last = 0
    for i in range(800):
        step(rng, stream, model)
        if rng.random() < 0.5:
            before = list(stream.read_held(max(group.next, stream.first), 1 << 30)[0])
            offsets, tags, datas, texts = xgroups.deliver_columns(stream, group, owner, rng.randrange(1, 12), i,
                                                                  rng.random() < 0.2)
            assert texts == [b"%d-%d" % model.ids[o] for o in offsets]
            assert [[o, t, bytes(d)] for o, t, d in zip(offsets, tags, datas)] == \
                [[o, t, bytes(d)] for o, t, d in before[:len(offsets)]]
            assert all(o > last for o in offsets)
            last = offsets[-1] if offsets else last
            group.purge(stream, i)
            group._check(stream)


def test_packed_payloads_are_resp_bulk_strings_and_msgpack_ones_still_read():
    """An entry of several pairs is packed as its count of items then the items
    as RESP bulk strings (up to 126 items; more, and payloads packed before
    2026-11-27, are a msgpack list): both forms unpack to the same items, from
    bytes or a memoryview, at the edges of the looked-up heads (2 KiB items)."""
    import msgpack

    for size in (0, 1, 2047, 2048, 5000):
        for items in (3, 5, 125, 126, 127, 201):
            pairs = [b"f"] + [b"%d" % k + b"\r\n$" * (size // 3) for k in range(items)]
            tag, payload = xids.pack_pairs(pairs)
            assert tag == b"f"
            if items <= xids.PACKED_MAX:
                assert payload[0] == items
                assert payload[1:] == b"".join(b"$%d\r\n%s\r\n" % (len(v), v) for v in pairs[1:])
            else:
                assert payload == msgpack.packb(pairs[1:], use_bin_type=True)
            old = msgpack.packb(pairs[1:], use_bin_type=True)  # a payload packed before 2026-11-27
            for form in (payload, memoryview(payload), old, memoryview(old)):
                assert xids.unpack_pairs(tag, form) == pairs
                assert xids.unpack_rests([form, form]) == [pairs[1:], pairs[1:]]
    with pytest.raises(ValueError):
        xids.unpack_pairs(b"f", b"\x03$1\r\na\r\n")  # cut short: refused
    assert xids.unpack_pairs(b"f", xids.pack_pairs([b"f", b"1", b"g", b"2"])[1]) == [b"f", b"1", b"g", b"2"]
