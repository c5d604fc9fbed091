"""Randomised tests of engine.Stream against a plain-dict model, plus glob and
SCAN properties of engine.Keyspace."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tstream.engine import BlockCache, Keyspace, Stream, glob_match
from tstream.engine import blocks as blocks_mod
from tstream.engine import keyspace as keyspace_mod
from tstream.engine import stream as stream_mod


@pytest.fixture(autouse=True)
def tiny_cache(monkeypatch):
    """A 2-block decoded cache makes decompression paths run constantly."""
    for module in (stream_mod, keyspace_mod):
        monkeypatch.setattr(module, "BlockCache", lambda: BlockCache(2, 1 << 30))


class Model:
    """The obvious implementation: a dict of held entries."""

    def __init__(self) -> None:
        self.entries: dict[int, tuple[bytes, bytes, int]] = {}
        self.next = 1
        self.last_time = 0
        self.max_len = 0
        self.max_age_ms = 0

    @property
    def first(self) -> int:
        return min(self.entries) if self.entries else self.next

    def _time(self, now: int) -> int:
        self.last_time = max(self.last_time, now)
        return self.last_time

    def append(self, tag, data, now) -> int:
        off = self.next
        t = self._time(now)
        self.entries[off] = (tag, data, t)
        self.next += 1
        self.limits(t)
        return off

    def append_many(self, pairs, now) -> int:
        off = self.next
        if not pairs:
            return off
        t = self._time(now)
        for tag, data in pairs:
            self.entries[self.next] = (tag, data, t)
            self.next += 1
        self.limits(t)
        return off

    def limits(self, now) -> int:
        n = 0
        if self.max_len:
            n += self.evict_below(self.next - self.max_len)
        if self.max_age_ms:
            n += self.evict_older(now - self.max_age_ms * 1_000_000)
        return n

    def evict_below(self, bound) -> int:
        gone = [o for o in self.entries if o < bound]
        for o in gone:
            del self.entries[o]
        return len(gone)

    def evict_older(self, cutoff) -> int:
        gone = [o for o, e in self.entries.items() if e[2] < cutoff]
        for o in gone:
            del self.entries[o]
        return len(gone)

    def read(self, off, count):
        out = []
        for o in range(off, min(off + count, self.next)):
            e = self.entries.get(o)
            out.append(None if e is None else [o, e[0], e[1]])
        return out


def payload(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.1:
        return b""
    if kind < 0.6:
        return (b"hello world %d " % rng.randrange(5)) * rng.randrange(1, 8)
    return rng.randbytes(rng.randrange(1, 60))


def compare(s: Stream, m: Model) -> None:
    s._check()
    assert s.next_offset == m.next
    assert s.first == m.first
    assert s.length == len(m.entries)
    assert s.last == m.next - 1


def run_random(seed: int, steps: int, node_entries: int, node_max_bytes: int = 1 << 20) -> None:  # noqa: C901 (over the limit when it came in)
    rng = random.Random(seed)
    s = Stream(node_entries, node_max_bytes=node_max_bytes)
    m = Model()
    ntags = rng.choice([1, 3, 50, 10_000])  # 10_000: mostly unique tags
    now = 1_000_000_000
    for _ in range(steps):
        op = rng.random()
        now += rng.choice([0, 0, 1, 1000, 5_000_000, -3_000_000])  # clock may step back
        tag = b"t%d" % rng.randrange(ntags)
        if op < 0.35:
            data = payload(rng)
            assert s.append(tag, data, now) == m.append(tag, data, now)
        elif op < 0.45:
            pairs = [(b"t%d" % rng.randrange(ntags), payload(rng))
                     for _ in range(rng.randrange(0, 3 * node_entries + 2))]
            flat = [b"junk"] * (lead := rng.randrange(3))
            for p in pairs:
                flat += p
            assert s.append_many(flat, now, lead) == m.append_many(pairs, now)
        elif op < 0.55:
            off = rng.randrange(1, m.next + 3)
            cnt = rng.randrange(0, 3 * node_entries + 3)
            assert s.read(off, cnt) == m.read(off, cnt)
        elif op < 0.60:
            off = rng.randrange(0, m.next + 3)
            assert s.evict_through(off) == m.evict_below(min(off, m.next - 1) + 1)
        elif op < 0.63:
            n = rng.randrange(0, 3 * node_entries + 2)
            assert s.evict_keep(n) == m.evict_below(m.next - n)
        elif op < 0.70:
            off = rng.randrange(1, m.next + 2)
            assert s.delete(off) == (m.entries.pop(off, None) is not None)
        elif op < 0.74:
            cutoff = now - rng.randrange(0, 20_000_000)
            assert s.evict_older_than(cutoff) == m.evict_older(cutoff)
        elif op < 0.80:
            off = rng.randrange(1, m.next + 2)
            e = m.entries.get(off)
            got = s.get(off)
            assert (got is None) if e is None else tuple(got) == (off, *e)
        elif op < 0.85:
            off = rng.randrange(1, m.next + 2)
            it = s.iter_from(off)
            want = sorted(o for o in m.entries if o >= off)[:2 * node_entries + 1]
            got = [next(it, None) for _ in want]
            assert [tuple(g) for g in got] == [(o, *m.entries[o]) for o in want]
        elif op < 0.87:
            t = now - rng.randrange(0, 20_000_000)
            want = min((o for o, e in m.entries.items() if e[2] >= t), default=m.next)
            got = s.offset_at_time(t)
            # Deleted entries may come first: all entries between hold no older
            # held entry.
            assert got <= want and all(m.entries[o][2] < t or o >= got for o in m.entries)
        elif op < 0.89:
            m.max_len = s.config.max_len = rng.choice([0, 0, 1, node_entries, 2 * node_entries + 1])
            m.max_age_ms = s.config.max_age_ms = rng.choice([0, 0, 0, 10])
        elif op < 0.90:
            state = s.export_state()
            s = Stream.from_state(state, check=rng.random() < 0.5, node_max_bytes=node_max_bytes)
            s.config.max_len, s.config.max_age_ms = m.max_len, m.max_age_ms
        else:
            assert s.enforce_limits(now) == m.limits(now)
        compare(s, m)
    # the whole log at the end
    assert s.read(1, m.next + 5) == m.read(1, m.next + 5)
    assert [tuple(e) for e in s.iter_from(1)] == [(o, *e) for o, e in sorted(m.entries.items())]


@pytest.mark.parametrize("node_entries", [1, 2, 3, 5, 16])
@pytest.mark.parametrize("seed", range(4))
def test_random_against_model(seed, node_entries):
    run_random(seed * 1000 + node_entries, 700, node_entries)


@pytest.mark.parametrize("block_bytes", [1, 60, 200])
@pytest.mark.parametrize("node_entries", [5, 16, 40])
@pytest.mark.parametrize("seed", range(2))
def test_random_against_model_small_blocks(seed, node_entries, block_bytes, monkeypatch):
    """Sealed nodes of many blocks (1 byte: one entry per block)."""
    monkeypatch.setattr(blocks_mod, "BLOCK_BYTES", block_bytes)
    run_random(seed * 1000 + node_entries + 7 * block_bytes, 500, node_entries)


@pytest.mark.parametrize("node_max_bytes", [1, 30, 100])
@pytest.mark.parametrize("node_entries", [3, 16])
@pytest.mark.parametrize("seed", range(3))
def test_random_against_model_nodes_sealed_by_bytes(seed, node_entries, node_max_bytes):
    """node-max-bytes: short nodes sharing ranges (1 byte: one entry per node)."""
    run_random(seed * 1000 + node_entries + 11 * node_max_bytes, 600, node_entries, node_max_bytes)


def test_random_long_unique_tags_do_not_leak():
    s = Stream(4)
    for i in range(5000):
        s.append(b"unique-%d" % i, b"x" * (i % 7), i)
        s.evict_keep(10)
        if i % 97 == 0:
            s._check()
    s._check()
    assert s.tag_count() <= 10 + 4
    assert len(s._tag_list) <= 10 + 4 + 4  # ids are reused


# ---------------------------------------------------------------------------
# hypothesis stateful test
# ---------------------------------------------------------------------------

TAGS = st.sampled_from([b"a", b"b", b"c.d", b""])
DATA = st.binary(max_size=24)


class StreamMachine(RuleBasedStateMachine):
    @initialize(node_entries=st.integers(1, 6), block_bytes=st.sampled_from([4096, 40, 1]))
    def setup(self, node_entries, block_bytes):
        self.old_block_bytes = blocks_mod.BLOCK_BYTES
        blocks_mod.BLOCK_BYTES = block_bytes  # small: nodes of several blocks
        self.s = Stream(node_entries)
        self.m = Model()
        self.now = 10**12

    @rule(tag=TAGS, data=DATA, dt=st.integers(-10**6, 10**7))
    def append(self, tag, data, dt):
        self.now += dt
        assert self.s.append(tag, data, self.now) == self.m.append(tag, data, self.now)

    @rule(pairs=st.lists(st.tuples(TAGS, DATA), max_size=14))
    def append_many(self, pairs):
        flat = [x for p in pairs for x in p]
        assert self.s.append_many(flat, self.now) == self.m.append_many(pairs, self.now)

    @rule(off=st.integers(1, 60), count=st.integers(0, 20))
    def read(self, off, count):
        assert self.s.read(off, count) == self.m.read(off, count)

    @rule(off=st.integers(0, 60))
    def evict_through(self, off):
        assert self.s.evict_through(off) == self.m.evict_below(min(off, self.m.next - 1) + 1)

    @rule(n=st.integers(0, 20))
    def evict_keep(self, n):
        assert self.s.evict_keep(n) == self.m.evict_below(self.m.next - n)

    @rule(back=st.integers(0, 3 * 10**7))
    def evict_older_than(self, back):
        cutoff = self.now - back
        assert self.s.evict_older_than(cutoff) == self.m.evict_older(cutoff)

    @rule(off=st.integers(1, 60))
    def delete(self, off):
        assert self.s.delete(off) == (self.m.entries.pop(off, None) is not None)

    @rule(off=st.integers(1, 60))
    def iterate(self, off):
        got = [tuple(e) for e in self.s.iter_from(off)]
        assert got == [(o, *e) for o, e in sorted(self.m.entries.items()) if o >= off]

    @rule(max_len=st.integers(0, 8))
    def set_max_len(self, max_len):
        self.s.config.max_len = self.m.max_len = max_len

    @rule()
    def snapshot_roundtrip(self):
        cfg = self.s.config
        self.s = Stream.from_state(self.s.export_state())
        assert self.s.config == cfg

    @invariant()
    def consistent(self):
        if hasattr(self, "s"):
            compare(self.s, self.m)

    def teardown(self):
        if hasattr(self, "old_block_bytes"):
            blocks_mod.BLOCK_BYTES = self.old_block_bytes


StreamMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestStreamMachine = StreamMachine.TestCase


# ---------------------------------------------------------------------------
# Keyspace: glob and SCAN
# ---------------------------------------------------------------------------

def redis_stringmatch(p: bytes, s: bytes) -> bool:  # noqa: C901 (over the limit when it came in)
    """Straight port of Redis stringmatchlen() (case sensitive)."""
    pi = si = 0
    plen, slen = len(p), len(s)
    while pi < plen and si < slen:
        c = p[pi]
        if c == ord("*"):
            while pi + 1 < plen and p[pi + 1] == ord("*"):
                pi += 1
            if pi + 1 == plen:
                return True
            for k in range(si, slen):
                if redis_stringmatch(p[pi + 1:], s[k:]):
                    return True
            return False
        elif c == ord("?"):
            si += 1
        elif c == ord("["):
            pi += 1
            neg = pi < plen and p[pi] == ord("^")
            if neg:
                pi += 1
            match = False
            while True:
                if pi < plen and p[pi] == ord("\\") and plen - pi >= 2:
                    pi += 1
                    if p[pi] == s[si]:
                        match = True
                elif pi < plen and p[pi] == ord("]"):
                    break
                elif pi >= plen:
                    pi -= 1
                    break
                elif plen - pi >= 3 and p[pi + 1] == ord("-"):
                    lo, hi = sorted((p[pi], p[pi + 2]))
                    pi += 2
                    if lo <= s[si] <= hi:
                        match = True
                elif p[pi] == s[si]:
                    match = True
                pi += 1
            if neg:
                match = not match
            if not match:
                return False
            si += 1
        else:
            if c == ord("\\") and plen - pi >= 2:
                pi += 1
            if p[pi] != s[si]:
                return False
            si += 1
        pi += 1
        if si == slen:
            while pi < plen and p[pi] == ord("*"):
                pi += 1
            break
    return pi == plen and si == slen


GLOB_ALPHABET = st.sampled_from(list(b"ab*?[]^-\\c"))


@given(st.lists(GLOB_ALPHABET, max_size=8).map(bytes),
       st.lists(st.sampled_from(list(b"abc-]^\\[*?")), max_size=6).map(bytes))
@settings(max_examples=1500, deadline=None)
def test_glob_matches_redis_port(pattern, string):
    # KEYS/SCAN short-cut the pattern "*" to "every key" before matching.
    want = pattern == b"*" or redis_stringmatch(pattern, string)
    assert glob_match(pattern, string) == want, (pattern, string)


def test_scan_returns_every_stable_key_once():
    rng = random.Random(7)
    ks = Keyspace()
    for i in range(300):
        ks.get_or_create(b"k%d" % i)
    stable = {b"k%d" % i for i in range(0, 300, 3)}
    seen: list[bytes] = []
    cursor = 0
    n = 300
    steps = 0
    while True:
        cursor, keys = ks.scan(cursor, rng.randrange(1, 25))
        seen += keys
        steps += 1
        # churn: delete and create non-stable keys during the scan
        for _ in range(5):
            victim = b"k%d" % rng.randrange(n)
            if victim not in stable:
                ks.delete(victim)
            ks.get_or_create(b"k%d" % n)
            n += 1
        if cursor == 0:
            break
        assert steps < 10_000
    assert stable <= set(seen)
    assert len(seen) == len(set(seen)), "no key is returned twice"


def test_scan_match_and_keys_agree():
    ks = Keyspace()
    names = [b"user:%d" % i for i in range(50)] + [b"order:%d" % i for i in range(50)]
    for k in names:
        ks.get_or_create(k)
    cursor, got = 0, []
    while True:
        cursor, keys = ks.scan(cursor, 7, b"user:1*")
        got += keys
        if cursor == 0:
            break
    assert sorted(got) == sorted(ks.keys(b"user:1*"))
    assert sorted(got) == sorted(k for k in names if re.fullmatch(rb"user:1\d*", k))
