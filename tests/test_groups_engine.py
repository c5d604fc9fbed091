"""Unit tests of engine.groups.Group: its lazily cleaned indexes against a plain model.

The model keeps the pending list as a dict offset -> [deliveries, retry_at, expire_at,
retry_ms] and recomputes everything by brute force; the Group must agree with it after
every step, and ``Group._check()`` must hold (every pending entry live exactly once in
each index, stale counters right, compaction bounds).
"""

from __future__ import annotations

import random

import pytest

from tstream.engine import Stream
from tstream.engine import groups as groups_mod
from tstream.engine.groups import SLACK, Group  # SLACK: the default, 64

T0 = 1_700_000_000_000_000_000


class Entry:
    __slots__ = ("offset", "tag", "data")

    def __init__(self, offset: int) -> None:
        self.offset, self.tag, self.data = offset, b"t%d" % (offset % 3), b"d%d" % offset


class FakeStream:
    """What Group uses of a stream: first, next_offset, get, iter_from, read_held (plus append/evict/delete)."""

    def __init__(self) -> None:
        self.first = 1
        self.next_offset = 1
        self.held: set[int] = set()

    def append(self, n: int = 1) -> None:
        for _ in range(n):
            self.held.add(self.next_offset)
            self.next_offset += 1

    def evict_through(self, offset: int) -> None:
        self.held = {o for o in self.held if o > offset}
        self.first = max(self.first, min(offset + 1, self.next_offset))

    def delete(self, offset: int) -> None:
        self.held.discard(offset)

    def get(self, offset: int):
        return Entry(offset) if offset >= self.first and offset in self.held else None

    def iter_from(self, offset: int):
        for o in range(max(offset, self.first), self.next_offset):
            if o in self.held:
                yield Entry(o)

    def read_held(self, offset: int, count: int):
        rows = []
        for entry in self.iter_from(offset):
            rows.append([entry.offset, entry.tag, entry.data])
            if len(rows) == count:
                return rows, entry.offset + 1
        return rows, self.next_offset


class RealStream:
    """engine.Stream with the same little driver interface as FakeStream."""

    def __init__(self) -> None:
        self.s = Stream(8)

    def __getattr__(self, name):
        return getattr(self.s, name)

    def append(self, n: int = 1) -> None:
        for _ in range(n):
            o = self.s.next_offset
            self.s.append(b"t%d" % (o % 3), b"d%d" % o, T0 + o)

    def evict_through(self, offset: int) -> None:
        self.s.evict_through(offset)

    def delete(self, offset: int) -> None:
        self.s.delete(offset)

    def get(self, offset: int):
        return self.s.get(offset)

    def iter_from(self, offset: int):
        return self.s.iter_from(offset)


class Model:
    """The group's behaviour by brute force."""

    def __init__(self, next_offset: int) -> None:
        self.next = next_offset
        self.pending: dict[int, list] = {}  # offset -> [deliveries, retry_at, expire_at, retry_ms]
        self.delivered = 0
        self.acked = 0

    def purge(self, stream, now: int) -> int:
        gone = [o for o, (_, _, expire_at, _) in self.pending.items()
                if expire_at <= now or o < stream.first]
        for o in gone:
            del self.pending[o]
        return len(gone)

    def read(self, stream, count: int, now: int, retry, max_pending: int) -> list:
        self.purge(stream, now)
        out = []
        handed = set()  # a read hands each due entry out once, even with a retry time of 0
        while len(out) < count:
            due = [(p[1], o) for o, p in self.pending.items() if p[1] <= now and o not in handed]
            if not due:
                break
            _, o = min(due)
            entry = stream.get(o)
            if entry is None:
                del self.pending[o]
                continue
            p = self.pending[o]
            if retry is not None:
                p[3] = retry[0]
            p[0] += 1
            p[1] = now + p[3]
            handed.add(o)
            out.append([o, entry.tag, entry.data])
        room = count - len(out)
        if retry is not None:
            room = min(room, max_pending - len(self.pending))
        if room > 0:
            self.next = max(self.next, stream.first)
            taken, last = 0, self.next - 1
            for o in range(self.next, stream.next_offset):
                entry = stream.get(o)
                if entry is None:
                    continue
                if taken == room:
                    break
                out.append([o, entry.tag, entry.data])
                last, taken = o, taken + 1
                if retry is not None:
                    self.pending[o] = [1, now + retry[0], now + retry[1], retry[0]]
            if taken < room:
                last = stream.next_offset - 1
            self.next = last + 1
        self.delivered += len(out)
        return out

    def has_ready(self, stream, now: int, max_pending: int, retry: bool) -> bool:
        self.purge(stream, now)
        if any(p[1] <= now for p in self.pending.values()):
            return True
        if retry and len(self.pending) >= max_pending:
            return False
        return any(stream.get(o) is not None
                   for o in range(max(self.next, stream.first), stream.next_offset))

    def next_due_ms(self):
        times = [t for p in self.pending.values() for t in (p[1], p[2])]
        return min(times) if times else None

    def ack(self, offsets) -> int:
        n = 0
        for o in offsets:
            if self.pending.pop(o, None) is not None:
                n += 1
        self.acked += n
        return n

    def offsets(self, start: int = 1, end=None) -> list:
        return sorted(o for o in self.pending if o >= start and (end is None or o <= end))

    def state(self) -> list:
        return [(o, *self.pending[o]) for o in sorted(self.pending)]


def check(group: Group, stream) -> None:
    if group.next <= max(group._by_offset, default=0):
        # next was moved back below pending entries (a replayed record may do that): _check's
        # "pending below next" holds again once reads pass them; check the rest meanwhile
        saved, group.next = group.next, stream.next_offset
        group._check(stream)
        group.next = saved
    else:
        group._check(stream)


def agree(group: Group, model: Model, stream, now: int) -> None:
    check(group, stream)
    assert group.next == model.next
    assert group.pending_count == len(model.pending) == group.info()["pending"]
    assert (group.delivered, group.acked) == (model.delivered, model.acked)
    state = [(o, d, r, e, ms) for o, d, r, e, ms in model.state()]
    assert [group.pending_state(o) for o, *_ in state] == state
    assert group.pending_offsets() == [o for o, *_ in state]
    assert group.pending_list(now) == [[o, d, max(0, r - now)] for o, d, r, _, _ in state]
    assert group.export_state()["pending"] == state
    bound = group.due_bound_ms()  # (before next_due_ms pops the stale tops)
    assert group.next_due_ms() == model.next_due_ms()
    assert model.next_due_ms() is None or bound is not None and bound <= model.next_due_ms()
    check(group, stream)


def run_random(seed: int, steps: int, stream_cls) -> Group:  # noqa: C901 (over the limit when it came in)
    rng = random.Random(seed)
    stream = stream_cls()
    stream.append(rng.randrange(0, 20))
    start = rng.randrange(1, stream.next_offset + 1)
    group, model = Group(b"g", start), Model(start)
    now = 1_000
    max_pending = rng.choice([3, 10, 40, 10**9])
    for _ in range(steps):
        r = rng.random()
        if r < 0.10:
            stream.append(rng.randrange(1, 25))
        elif r < 0.40:  # read, mostly with RETRY
            count = rng.randrange(0, 12)
            retry = None if rng.random() < 0.25 else (rng.choice([0, 1, 5, 30, 200]),
                                                       rng.choice([0, 3, 50, 400, 10**6]))
            got = group.read(stream, count, now, retry, max_pending)
            assert got == model.read(stream, count, now, retry, max_pending)
        elif r < 0.55:  # ack a list: pending, acked, never delivered, duplicates
            pool = list(model.pending) + [rng.randrange(1, stream.next_offset + 3) for _ in range(3)]
            offsets = rng.sample(pool, min(len(pool), rng.randrange(0, 6)))
            offsets += offsets[:rng.randrange(0, 2)]
            assert group.ack(offsets) == model.ack(offsets)
        elif r < 0.62:  # ack a range (TACK key g start-end)
            a = rng.randrange(1, stream.next_offset + 2)
            b = a + rng.randrange(-2, 30)
            offsets = group.pending_offsets(a, b)
            assert offsets == model.offsets(a, b)
            assert group.ack(offsets) == model.ack(offsets)
        elif r < 0.72:  # time passes: retries fall due, entries expire
            now += rng.choice([0, 1, 3, 20, 100, 500, 5000])
            if rng.random() < 0.5:
                assert group.purge(stream, now) == model.purge(stream, now)
            else:
                retry = rng.random() < 0.5
                assert group.has_ready(stream, now, max_pending, retry) == \
                    model.has_ready(stream, now, max_pending, retry)
        elif r < 0.77:  # eviction / deletion
            if rng.random() < 0.6:
                stream.evict_through(stream.first + rng.randrange(0, 6) - 1)
            elif stream.next_offset > stream.first:
                stream.delete(rng.randrange(stream.first, stream.next_offset))
        elif r < 0.87:  # replay of logged group moves, in any order
            if group.next > 1:
                for _ in range(rng.randrange(1, 6)):
                    o = rng.randrange(max(1, group.next - 40), group.next)
                    old = model.pending.get(o)
                    if old is not None and rng.random() < 0.3:  # same times, new deliveries
                        args = (o, old[0] + 1, old[1], old[2], old[3])
                    else:
                        args = (o, rng.randrange(1, 5), now + rng.randrange(-50, 300),
                                now + rng.randrange(0, 3000), rng.randrange(0, 100))
                    group.restore_pending(*args)
                    model.pending[o] = list(args[1:])
        elif r < 0.90:  # a replayed record moves next (back, occasionally below pending entries)
            new = min(max(1, model.next + rng.randrange(-15, 5)), stream.next_offset)
            new = max(new, max(model.pending, default=0) + 1) if rng.random() < 0.8 else new
            group.next = model.next = new
        elif r < 0.95:  # snapshot round trip (counters are not part of the state)
            state = group.export_state()
            assert state == {"name": b"g", "next": model.next, "pending": model.state()}
            group = Group.from_state(state)
            model.delivered = model.acked = 0
        else:
            has = group.has_ready(stream, now, max_pending, True)
            assert has == model.has_ready(stream, now, max_pending, True)
        agree(group, model, stream, now)
    return group


@pytest.mark.parametrize("slack", [SLACK, 3, 0])
@pytest.mark.parametrize("seed", range(6))
def test_group_against_model(seed, slack, monkeypatch):
    monkeypatch.setattr(groups_mod, "SLACK", slack)  # small: compactions all the time
    run_random(seed * 10 + slack, 1500, FakeStream)


@pytest.mark.parametrize("seed", range(3))
def test_group_against_model_real_stream(seed, monkeypatch):
    monkeypatch.setattr(groups_mod, "SLACK", seed)
    run_random(1000 + seed, 800, RealStream)


def test_next_moved_back_hands_pending_out_again_as_new():
    stream = FakeStream()
    stream.append(10)
    group, model = Group(b"g", 1), Model(1)
    assert group.read(stream, 5, 0, (100, 1000), 99) == model.read(stream, 5, 0, (100, 1000), 99)
    group.ack([2])
    model.ack([2])
    group.next = model.next = 2  # 3, 4, 5 pending: replaced by fresh deliveries
    assert group.read(stream, 5, 10, (7, 70), 99) == model.read(stream, 5, 10, (7, 70), 99)
    agree(group, model, stream, 10)
    assert group.pending_state(3) == (3, 1, 17, 80, 7)


def test_restore_after_ack_with_same_times():
    """An acked offset restored with the very same times: its old heap items stay stale."""
    stream = FakeStream()
    stream.append(5)
    group = Group(b"g", 1)
    group.read(stream, 3, 0, (10, 100), 99)
    assert group.ack([2]) == 1
    group.restore_pending(2, 1, 10, 100, 10)  # what a replayed GROUP record after the ack could say
    group._check(stream)
    assert group.pending_offsets() == [1, 2, 3]
    assert group.read(stream, 5, 10, None, 99) == [[o, b"t%d" % (o % 3), b"d%d" % o] for o in (1, 2, 3, 4, 5)]
    group._check(stream)
    assert [group.pending_state(o)[1] for o in (1, 2, 3)] == [2, 2, 2]
    assert group.ack(range(1, 6)) == 3
    group._check(stream)
    assert group.next_due_ms() is None and group.pending_count == 0


def test_out_of_order_restores_sort_lazily():
    group = Group(b"g", 1000)
    offsets = list(range(1, 500, 3))
    random.Random(5).shuffle(offsets)
    for i, o in enumerate(offsets):
        group.restore_pending(o, 1, 50 + i % 7, 900 + i % 11, 10)
    group._check()
    assert group._unsorted
    assert group.pending_offsets(100, 200) == [o for o in range(1, 500, 3) if 100 <= o <= 200]
    assert not group._unsorted
    group._check()
    assert group.next_due_ms() == 50
    stream = FakeStream()
    stream.append(1000)
    stream.evict_through(250)
    assert group.purge(stream, 0) == len(range(1, 251, 3))
    group._check(stream)
    assert group.pending_offsets() == list(range(253, 500, 3))
    clone = Group.from_state(group.export_state())
    clone._check(stream)
    assert clone.export_state() == group.export_state()


def index_sizes(group: Group) -> tuple[int, int, int]:
    return len(group._by_due), len(group._by_expiry), len(group._order) - group._head


def test_stale_entries_are_compacted():
    """A long run of read + ack keeps every index O(pending), around a pending set that stays."""
    stream = FakeStream()
    stream.append(50_000)
    group = Group(b"g", 1)
    group.read(stream, 100, 0, (10**9, 10**10), 10**9)  # 100 entries pending for the whole run
    held = group.pending_count
    now = 0
    rng = random.Random(9)
    for i in range(4000):
        out = group.read(stream, rng.randrange(1, 11), now, (30_000, 600_000), 10**9)
        offsets = [e[0] for e in out]
        rng.shuffle(offsets)
        keep = offsets[:1] if i % 50 == 0 else []  # a few stay pending
        assert group.ack(offsets[len(keep):]) == len(offsets) - len(keep)
        held += len(keep)
        assert group.pending_count == held
        bound = 2 * group.pending_count + SLACK + 11
        assert max(len(group._by_due), len(group._by_expiry), len(group._order)) <= bound, index_sizes(group)
        runs = {id(p): p for p in group._by_offset.values() if hasattr(p, "live") and hasattr(p, "offsets")}
        assert sum(len(run.offsets) for run in runs.values()) <= bound  # a delivery's acked offsets go too
        now += 1
        if i % 500 == 0:
            group._check(stream)
    group._check(stream)
    assert group.pending_count == 100 + 80
    # everything acked: the indexes shrink back to a handful of items
    assert group.ack(group.pending_offsets()) == 180
    group.read(stream, 1, now, None, 10**9)
    group.next_due_ms()
    assert max(len(group._by_due), len(group._by_expiry), len(group._order)) <= SLACK + 1
    group._check(stream)


def test_stale_heads_are_popped_for_next_due_and_has_ready():
    stream = FakeStream()
    stream.append(10)
    group = Group(b"g", 1)
    group.read(stream, 2, 0, (5, 50), 99)     # 1, 2: due at 5, expire at 50
    group.read(stream, 2, 1, (100, 200), 99)  # 3, 4: due at 101, expire at 201
    assert group.next_due_ms() == 5
    group.ack([1, 2])
    assert group.next_due_ms() == 101  # not a stale 5 (nor 50)
    assert group._due_stale == 0 and len(group._by_due) == 1  # one item for the delivery of 3, 4
    group.read(stream, 10, 2, None, 99)  # the rest, not pending
    assert not group.has_ready(stream, 6, 99, False)  # stale 5s are not due retries
    assert group.has_ready(stream, 101, 99, False)
    group._check(stream)


def test_deleted_due_entry_is_dropped():
    stream = FakeStream()
    stream.append(3)
    group = Group(b"g", 1)
    group.read(stream, 3, 0, (5, 500), 99)
    stream.delete(2)
    assert [e[0] for e in group.read(stream, 3, 5, None, 99)] == [1, 3]
    assert group.pending_offsets() == [1, 3]
    group._check(stream)


def test_module_has_no_sortedcontainers():
    assert not hasattr(groups_mod, "SortedDict") and not hasattr(groups_mod, "SortedList")


@pytest.mark.parametrize("seed", range(4))
def test_redis_streams_deliveries_keep_the_indexes_right(seed, monkeypatch):
    """X* deliveries (engine/xgroups.deliver: owned pending entries that are
    never due, made in one batch) mixed with TREAD group reads, acks, claims,
    evictions and snapshot round trips: ``_check()`` holds after every step,
    every X* pending entry is a Pending owned by its reader, and an exported
    and re-imported group has the same pending list."""
    from tstream.engine import xgroups
    from tstream.engine.groups import NEVER

    monkeypatch.setattr(groups_mod, "SLACK", seed)  # small: compactions all the time
    rng = random.Random(seed)
    stream = Stream()
    group = xgroups.create(stream, b"g", (0, 0))
    stream.groups[b"g"] = group
    now = 1_000
    for _ in range(1200):
        now += rng.randrange(0, 20)
        r = rng.random()
        if r < 0.3:
            stream.append_many([b"t", b"x%d" % stream.next_offset] * rng.randrange(1, 8), T0 + now * 1_000_000)
        elif r < 0.55:
            owner = xgroups.consumer(group, b"c%d" % rng.randrange(3), now)
            rows, ids = xgroups.deliver(stream, group, owner, rng.randrange(1, 12), now, rng.random() < 0.1)
            assert len(rows) == len(ids)
            for row in rows:
                pending = group.pending_get(row[0])
                assert pending is None or (pending.__class__ is groups_mod.Pending and pending.owner == owner.name
                                           and pending.retry_at == pending.expire_at == NEVER)
        elif r < 0.65:
            group.read(stream, rng.randrange(1, 6), now, (rng.randrange(0, 50), rng.randrange(50, 500)), 10_000)
        elif r < 0.8:
            pending = group.pending_offsets()
            if pending:
                group.ack(rng.sample(pending, rng.randrange(1, min(len(pending), 6) + 1)))
        elif r < 0.88:
            pending = group.pending_offsets()
            if pending:
                owner = xgroups.consumer(group, b"c%d" % rng.randrange(3), now)
                xgroups.take_pending(stream, group, rng.choice(pending), owner, now, rng.randrange(1, 4))
        elif r < 0.93:
            if stream.next_offset > stream.first:
                stream.evict_through(stream.first + rng.randrange(0, 4) - 1)
                group.purge(stream, now)
        else:
            state = group.export_state()
            again = Group.from_state(state)
            assert again.export_state()["pending"] == state["pending"]
        group._check(stream)


def test_redis_streams_id_map_stays_within_the_pending_entries():
    """The ids X* deliveries hand out are mapped to their offsets for XACK; acks
    that do not take them out (TACK, XGROUP DELCONSUMER) leave them, and the
    map is rebuilt before it holds over twice the pending entries (plus SLACK),
    so it does not grow with every entry ever read.  X* entries are in no heap."""
    from tstream.engine import xgroups

    stream = Stream()
    group = xgroups.create(stream, b"g", (0, 0))
    owner = xgroups.consumer(group, b"c", 0)
    most = 0
    for i in range(400):
        stream.append_many([b"t", b"x"] * 10, T0 + i * 1_000_000)
        rows, ids = xgroups.deliver(stream, group, owner, 10, i, False)
        assert ids == [b"%d-%d" % xgroups.id_of(stream, row[0]) for row in rows]
        assert group.x is not None and len(group.x.by_id) <= 2 * group.pending_count + SLACK
        most = max(most, len(group.x.by_id))
        group.ack([row[0] for row in rows][:9])  # one of each ten stays pending
        group._check(stream)
    assert group.pending_count == 400 and most <= 2 * 400 + SLACK
    assert not group._by_due and not group._by_expiry  # never due, never expiring: in no heap


def test_a_delivery_is_one_record_acked_one_entry_at_a_time():
    """The entries one read with RETRY hands out are one Delivery with one item in
    each heap; acks take its entries out one by one, a partial ack leaves the rest
    due at the same time, and the retry hands out only the unacknowledged ones."""
    from tstream.engine.groups import Delivery

    stream = FakeStream()
    stream.append(20)
    group = Group(b"g", 1)
    assert [e[0] for e in group.read(stream, 5, 0, (100, 1000), 99)] == [1, 2, 3, 4, 5]
    runs = {id(p) for p in group._by_offset.values()}
    assert len(runs) == 1 and group._by_offset[1].__class__ is Delivery
    assert len(group._by_due) == 1 and len(group._by_expiry) == 1
    assert group.ack([2, 4]) == 2  # a partial ack: nothing stale yet
    assert (group._due_stale, group._exp_stale) == (0, 0)
    assert group.pending_list(50) == [[1, 1, 50], [3, 1, 50], [5, 1, 50]]
    assert group.next_due_ms() == 100
    assert not group.has_ready(stream, 99, 3, True)  # not due yet (and the pending list full at 3)
    group._check(stream)
    assert [e[0] for e in group.read(stream, 2, 100, (300, 1000), 99)] == [1, 3]  # the count cuts it
    assert group.pending_state(1) == (1, 2, 400, 1000, 300)
    assert group.pending_state(5) == (5, 1, 100, 1000, 100)  # the rest is still due
    group._check(stream)
    assert [e[0] for e in group.read(stream, 1, 101, None, 99)] == [5]
    assert group.pending_state(5) == (5, 2, 201, 1000, 100)
    assert group.ack([1, 3, 5]) == 3
    assert group.pending_count == 0
    group._check(stream)
    group.next_due_ms()  # pops the stale items
    assert not group._by_due and not group._by_expiry


def test_retries_of_interleaved_deliveries_come_in_offset_order():
    """Two deliveries due at the same time whose entries interleave (redeliveries
    of one read) are handed out entry by entry in offset order, as separate
    pending entries would be, and a count stops in the middle of either."""
    stream = FakeStream()
    stream.append(8)
    group = Group(b"g", 1)
    group.read(stream, 4, 0, (10, 10_000), 99)    # 1-4 due at 10
    group.read(stream, 4, 5, (5, 10_000), 99)     # 5-8 due at 10 too
    group.ack([1, 3, 6, 8])
    # 2, 4 (first delivery) and 5, 7 (second): all due at 10, by offset
    assert [e[0] for e in group.read(stream, 10, 10, (50, 10_000), 99)] == [2, 4, 5, 7]
    group._check(stream)
    # now two deliveries, both due at 60: 2, 4 and 5, 7 -- make them interleave
    group.restore_pending(3, 1, 60, 10_000, 50)
    group.restore_pending(6, 1, 60, 10_000, 50)
    group._check(stream)
    assert [e[0] for e in group.read(stream, 3, 60, (50, 10_000), 99)] == [2, 3, 4]
    assert [e[0] for e in group.read(stream, 3, 60, (50, 10_000), 99)] == [5, 6, 7]
    group._check(stream)
    assert [p[0] for p in group.pending_list(60)] == [2, 3, 4, 5, 6, 7]
    assert group.pending_get(4).deliveries == 3 and group.pending_get(3).deliveries == 2
    group._check(stream)


def test_a_delivery_is_saved_as_its_entries():
    """A snapshot holds one pending record per entry, as before deliveries were
    kept as one object; loading it gives the same pending list."""
    stream = FakeStream()
    stream.append(10)
    group = Group(b"g", 1)
    group.read(stream, 6, 0, (100, 1000), 99)
    group.ack([2, 5])
    state = group.export_state()
    assert state["pending"] == [(1, 1, 100, 1000, 100), (3, 1, 100, 1000, 100), (4, 1, 100, 1000, 100),
                                (6, 1, 100, 1000, 100)]
    again = Group.from_state(state)
    again._check(stream)
    assert again.export_state() == state
    assert [e[0] for e in again.read(stream, 10, 100, None, 99)] == [1, 3, 4, 6, 7, 8, 9, 10]


def test_a_big_hand_out_is_cut_into_bounded_deliveries_retried_a_few_at_a_time():
    """10,000 entries handed out by one read become deliveries of at most
    DELIVERY_MAX entries (a partial retry copies the rest of its delivery: bounded
    that way, not O(n) a read); retried one by one they come back in offset order,
    each once, and the acks leave nothing pending."""
    s = Stream(1000)
    n = 10_000
    for _ in range(n):
        s.append(b"t", b"x", 1)
    g = Group(b"g", 1)
    assert len(g.read(s, n, 1000, (10, 10**9), 10**9)) == n
    g._check(s)
    sizes = {len(p.offsets) for p in g._holders.values()}
    assert max(sizes) == groups_mod.DELIVERY_MAX
    seen = []
    for i in range(n):
        rows = g.read(s, 1, 2000, (10**6, 10**9), 10**9)
        seen.append(rows[0][0])
        if i % 997 == 0:
            g._check(s)
    assert seen == list(range(1, n + 1))
    assert g.ack(seen) == n
    g._check(s)
    assert not g._by_offset
