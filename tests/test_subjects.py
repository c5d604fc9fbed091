"""Unit tests of the JetStream subject index (engine/subjects.py) and its stream hooks."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tstream.engine import Stream
from tstream.engine.subjects import (
    InvalidSubject,
    SubjectIndex,
    TooManySubjects,
    held_from,
    index_of,
    parse_filter,
    peek,
)

T0 = 1_700_000_000_000_000_000


def stream_of(*tags, node_entries=3) -> Stream:
    s = Stream(node_entries)
    for i, tag in enumerate(tags):
        s.append(tag, b"v%d" % (i + 1), T0 + i)
    return s


# ---------------------------------------------------------------------------
# filters
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("raw, why", [
    (b"", "empty subject"),
    (b"a..b", "empty token"),
    (b".a", "empty token"),
    (b"a.", "empty token"),
    (b"a b", "whitespace"),
    (b"a\tb", "whitespace"),
    (b"a.\r\n", "whitespace"),
    (b">.a", "'>' must be the last token"),
    (b"a.>.b", "'>' must be the last token"),
])
def test_invalid_filters_say_why(raw, why):
    with pytest.raises(InvalidSubject, match=why):
        parse_filter(raw)


@pytest.mark.parametrize("flt, subject, expected", [
    (b"a.b", b"a.b", True),
    (b"a.b", b"a.b.c", False),
    (b"a.*", b"a.b", True),
    (b"a.*", b"a", False),
    (b"a.*", b"a.b.c", False),
    (b"a.>", b"a.b", True),
    (b"a.>", b"a.b.c.d", True),
    (b"a.>", b"a", False),
    (b">", b"a", True),
    (b">", b"a.b.c", True),
    (b"*", b"a", True),
    (b"*", b"a.b", False),
    (b"*.b.*", b"x.b.y", True),
    (b"*.b.*", b"x.c.y", False),
    (b"*.b.>", b"x.b.y.z", True),
    (b"a*", b"a*", True),       # a token that merely contains * is a literal
    (b"a*", b"ab", False),
    (b"a.>b", b"a.>b", True),
    (b"a.>b", b"a.xb", False),
    (b"ab.*", b"a.b.c", False),
])
def test_matching(flt, subject, expected):
    assert parse_filter(flt).matches(subject) is expected


def test_literal_prefix_of_filters():
    assert parse_filter(b"kv.user.7.>").prefix == b"kv.user.7."
    assert parse_filter(b"orders.*.eu").prefix == b"orders."
    assert parse_filter(b"*.x").prefix == b""
    assert parse_filter(b">").prefix == b""
    f = parse_filter(b"a.b")
    assert f.literal and f.prefix == b""


# ---------------------------------------------------------------------------
# the index and the hooks
# ---------------------------------------------------------------------------

def test_streams_without_jetstream_have_no_index():
    s = stream_of(b"a", b"b", b"a", node_entries=2)
    s.append_many([b"c", b"x", b"d", b"y"], T0 + 10)
    s.delete(2)
    s.evict_through(1)
    assert peek(s) is None and s._subjects is None


def test_built_lazily_then_maintained():
    s = stream_of(b"a.1", b"b.1", b"a.1", b"a.2", node_entries=2)
    s.delete(3)
    index = index_of(s)
    assert peek(s) is index
    assert index.count(b"a.1") == 1 and index.last(b"a.1") == 1
    s.append(b"a.1", b"x", T0 + 9)
    s.append_many([b"a.2", b"x", b"c", b"y"], T0 + 10)
    assert index.last(b"a.1") == 5 and index.last(b"a.2") == 6 and index.count(b"c") == 1
    assert [subject for subject, _ in index.entries(parse_filter(b"a.*"))] == [b"a.1", b"a.2"]
    index.check()


def test_newest_at_or_below():
    s = stream_of(*[b"k"] * 10)
    index = index_of(s)
    assert index.last(b"k", 5) == 5
    assert index.last(b"k", 0) == 0
    assert index.last(b"k", 100) == 10
    s.delete(5)
    assert index.last(b"k", 5) == 4
    assert index.last(b"nope") == 0


def test_eviction_is_exact_at_once_and_memory_follows_nodes():
    s = stream_of(b"a", b"b", b"a", b"b", b"a", b"c", b"c", node_entries=3)
    index = index_of(s)
    s.evict_through(4)  # first = 5: node 1..3 dropped, 4 evicted inside node 4..6
    assert index.count(b"b") == 0 and index.last(b"b") == 0
    assert index.count(b"a") == 1 and index.count(b"c") == 2
    assert index.entries(parse_filter(b">")) == [(b"a", index.subjects[b"a"]), (b"c", index.subjects[b"c"])]
    index.check()
    s.evict_through(6)  # node 4..6 dropped: b disappears from the index
    assert b"b" not in index.subjects and b"a" not in index.subjects
    assert list(index.subjects) == [b"c"]
    index.check()


def test_unique_subjects_do_not_leak():
    s = Stream(10)
    s.config.max_len = 20
    index_of(s)
    for i in range(2000):
        s.append(b"u.%d" % i, b"", T0 + i)
    assert len(index_of(s)) <= 40
    index_of(s).check()


def test_delete_in_the_middle_and_oldest():
    s = stream_of(*[b"k"] * 6, node_entries=100)
    index = index_of(s)
    s.delete(3)
    s.delete(1)
    assert index.subjects[b"k"].seqs[index.subjects[b"k"].head:].tolist() == [2, 4, 5, 6]
    assert index.count(b"k") == 4
    for off in (2, 4, 5, 6):
        s.delete(off)
    assert b"k" not in index.subjects
    index.check()


def test_per_subject_limit_keeps_the_newest():
    s = stream_of(b"a", b"b", b"a", b"a", b"b", b"a", node_entries=2)
    s.config.max_msgs_per_subject = 2
    assert s.enforce_limits(T0 + 100) == 2  # a: 1 and 3 deleted; b holds 2: untouched
    index = peek(s)
    assert index is not None
    assert [e[0] if e else None for e in s.read(1, 10)] == [None, 2, None, 4, 5, 6]
    assert sorted(index.take_deleted()) == [1, 3]
    assert s.first == 2
    s.append(b"b", b"new", T0 + 200)   # b now has 3: 2 is deleted
    assert s.read(1, 10)[1] is None
    assert index.count(b"b") == 2 and index.take_deleted() == [2]
    s.append_many([b"a", b"1", b"a", b"2", b"a", b"3"], T0 + 300)
    assert index.count(b"a") == 2 and index.last(b"a") == 10
    assert sorted(index.take_deleted()) == [4, 6, 8]
    index.check()
    s._check()


def test_per_subject_limit_applies_on_append_without_a_built_index():
    s = stream_of(b"a", b"a", b"a")
    s.config.max_msgs_per_subject = 1  # set as a replay would: no enforce call
    s.append(b"a", b"x", T0 + 5)
    assert [e[0] if e else None for e in s.read(1, 10)] == [None, None, None, 4]
    assert peek(s) is not None
    s._check()


def test_per_subject_limit_lowered_and_disabled():
    s = stream_of(*[b"k"] * 5)
    s.config.max_msgs_per_subject = 4
    s.enforce_limits(T0)
    assert index_of(s).count(b"k") == 4
    s.config.max_msgs_per_subject = 2
    s.enforce_limits(T0)
    assert index_of(s).count(b"k") == 2
    s.config.max_msgs_per_subject = 0
    for i in range(3):
        s.append(b"k", b"", T0 + i)
    assert index_of(s).count(b"k") == 5
    s.config.max_msgs_per_subject = 3
    s.enforce_limits(T0)
    assert index_of(s).count(b"k") == 3
    index_of(s).check()


def test_multi_last_limit_and_order():
    s = Stream(50)
    for i in range(30):
        s.append(b"m.%02d" % i, b"", T0 + i)
    s.append(b"m.05", b"", T0 + 99)
    index = index_of(s)
    seqs = index.multi_last([parse_filter(b"m.*"), parse_filter(b"m.05")], s.last, 30)
    assert seqs == sorted(seqs) and len(seqs) == 30 and 31 in seqs and 6 not in seqs
    with pytest.raises(TooManySubjects):
        index.multi_last([parse_filter(b"m.>")], s.last, 29)
    assert index.multi_last([parse_filter(b"m.*")], 10, 1024) == list(range(1, 11))


def test_iteration_helpers():
    s = stream_of(b"a", b"b", b"a", b"c", b"b", b"a", node_entries=4)
    index = index_of(s)
    subjects = index.entries(parse_filter(b"a")) + index.entries(parse_filter(b"b"))
    assert list(index.iter_from(subjects, 2)) == [2, 3, 5, 6]
    assert index.count_from(subjects, 2) == 4
    assert index.first_from(subjects, 4) == 5
    assert held_from(s, 3) == 4
    s.delete(4)
    assert held_from(s, 3) == 3


def test_snapshot_rebuilds_lazily():
    s = stream_of(b"a", b"b", b"a")
    s.config.max_msgs_per_subject = 5
    s.enforce_limits(T0)
    t = Stream.from_state(s.export_state())
    assert peek(t) is None
    assert index_of(t).last(b"a") == 3
    index_of(t).check()


# ---------------------------------------------------------------------------
# model test: appends, evictions, deletes, per-subject limits
# ---------------------------------------------------------------------------

TOKENS = [b"a", b"b", b"c"]
SUBJECTS = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=3).map(b".".join)
FILTERS = st.lists(st.sampled_from(TOKENS + [b"*"]), min_size=1, max_size=3).flatmap(
    lambda toks: st.sampled_from([b".".join(toks), b".".join(toks + [b">"])]))


class IndexMachine(RuleBasedStateMachine):
    """The stream with its index against a model: offset -> subject of the held entries."""

    @initialize(node_entries=st.integers(1, 5), built=st.booleans())
    def setup(self, node_entries, built):
        self.s = Stream(node_entries)
        self.held: dict[int, bytes] = {}
        self.limit = 0
        self.now = T0
        if built:
            index_of(self.s)

    def _apply_limit(self):
        if not self.limit:
            return
        per: dict[bytes, list[int]] = {}
        for off in sorted(self.held):
            per.setdefault(self.held[off], []).append(off)
        for offs in per.values():
            for off in offs[:-self.limit]:
                del self.held[off]

    @rule(subject=SUBJECTS)
    def append(self, subject):
        self.now += 1
        off = self.s.append(subject, b"x", self.now)
        self.held[off] = subject
        self._apply_limit()

    @rule(subjects=st.lists(SUBJECTS, max_size=6))
    def append_many(self, subjects):
        flat = []
        for subject in subjects:
            flat += [subject, b"y"]
        off = self.s.append_many(flat, self.now)
        for i, subject in enumerate(subjects):
            self.held[off + i] = subject
        self._apply_limit()

    @rule(off=st.integers(0, 60))
    def evict_through(self, off):
        self.s.evict_through(off)
        self.held = {o: t for o, t in self.held.items() if o > off}

    @rule(n=st.integers(0, 12))
    def evict_keep(self, n):
        self.s.evict_keep(n)
        self.held = {o: t for o, t in self.held.items() if o >= self.s.next_offset - n}

    @rule(off=st.integers(1, 60))
    def delete(self, off):
        assert self.s.delete(off) == (self.held.pop(off, None) is not None)

    @rule(limit=st.integers(0, 3))
    def set_limit(self, limit):
        self.s.config.max_msgs_per_subject = self.limit = limit
        self.s.enforce_limits(self.now)
        self._apply_limit()

    @rule()
    def build(self):
        index_of(self.s)

    @precondition(lambda self: peek(self.s) is not None)
    @rule(flt=FILTERS, upto=st.integers(0, 70))
    def queries(self, flt, upto):
        index = peek(self.s)
        f = parse_filter(flt)
        matching = sorted({t for t in self.held.values() if f.matches(t)})
        assert [subject for subject, _ in index.entries(f)] == matching
        expected = {}
        for off, t in self.held.items():
            if off <= upto and f.matches(t):
                expected[t] = max(expected.get(t, 0), off)
        assert index.multi_last([f], upto, 1024) == sorted(expected.values())
        assert index.last_matching(f, upto) == max(expected.values(), default=0)
        entries = index.entries(f)
        after = sorted(o for o, t in self.held.items() if o >= upto and f.matches(t))
        assert list(index.iter_from(entries, upto)) == after
        assert index.count_from(entries, upto) == len(after)
        assert index.first_from(entries, upto) == (after[0] if after else 0)

    @invariant()
    def consistent(self):
        if not hasattr(self, "s"):
            return
        s = self.s
        assert {o: e[1] for o in range(1, s.next_offset) for e in [s.get(o)] if e} == self.held
        assert held_from(s, 0) == len(self.held)
        index = peek(s)
        if index is not None:
            index.check()
            for t in set(self.held.values()):
                assert index.count(t) == sum(1 for x in self.held.values() if x == t)
                assert index.last(t) == max(o for o, x in self.held.items() if x == t)
        s._check()


TestIndexMachine = IndexMachine.TestCase
TestIndexMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])


def test_pending_registry_is_per_keyspace_and_cleared_by_take():
    from tstream.engine import Keyspace

    loose = stream_of(b"a", b"a")  # in no keyspace: the deletions only wait in the index
    loose.config.max_msgs_per_subject = 1
    loose.enforce_limits(T0)
    assert peek(loose).limit_deleted == [1] and loose.limit_pending is None
    one, two = Keyspace(), Keyspace()
    for keyspace in (one, two):
        s = keyspace.get_or_create(b"k")
        s.append(b"a", b"x", T0)
        s.append(b"a", b"y", T0)
    s = one.get(b"k")
    s.config.max_msgs_per_subject = 1
    s.enforce_limits(T0)
    index = peek(s)
    assert isinstance(index, SubjectIndex)
    assert one.limit_pending == {index} and two.limit_pending == set()  # two servers, one process
    assert index.take_deleted() == [1]
    assert one.limit_pending == set()
    s.append(b"a", b"z", T0)  # appends keep the limit: 2 deleted, queued again
    assert one.limit_pending == {index}
    one.delete(b"k")
    assert one.limit_pending == set() and s.limit_pending is None
    one.put(b"k2", loose)  # a stream that comes in with deletions queued is registered
    assert one.limit_pending == {peek(loose)}
    one.flush()
    assert one.limit_pending == set()
