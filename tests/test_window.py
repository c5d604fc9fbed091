"""The MSGID duplicate window in C (``Window`` of engine/_window.c) against its
pure-Python fallback (engine/ingest.py ``PyWindow``): the same random sequences
of operations (runs claimed, new or with ids stored before or repeated; writes
added with no-id gaps and ids entered again, as a replay does; lookups; expiry
as time passes; a run truncated; the export and a load of it, across kinds)
give the same answers and the same window after every step; a MemoryError at
each allocation leaves the window as it was.

The C tests are marked ``speedups`` (.ci/run's pure-Python pass deselects them,
as tests/test_parser_speedups.py's); the fallback's own tests run in both passes.
"""

from __future__ import annotations

import contextlib
import random

import pytest

from tstream.engine import ingest as ingest_module
from tstream.engine.ingest import Ingest, PyWindow

from . import c_extensions

try:
    from tstream.engine import _window as window_module
    from tstream.engine._window import Window as CWindow
except ImportError:
    window_module = None
    CWindow = None

needs_c = c_extensions.needs_c(CWindow)


def _state(window) -> tuple:
    return window.live(), len(window), window.records()


def _random_id(rng: random.Random, pool: list) -> bytes:
    if pool and rng.random() < 0.3:
        return rng.choice(pool)
    length = rng.choice((0, 1, 3, 4, 7, 8, 12, 16, 17, 31, 32, 33, 64, 100))
    mid = bytes(rng.randrange(256) for _ in range(length)) if rng.random() < 0.3 else \
        (b"id-%d-" % rng.randrange(1 << 40) * 10)[:length]
    pool.append(mid)
    return mid


def _run_sequence(seed: int, windows: list, steps: int = 400) -> None:
    """Apply one random sequence to every window of ``windows``; after each step,
    the same answer and the same state in all of them."""
    rng = random.Random(seed)
    pool: list = []
    offset = 1
    now = 1000
    last = 0
    span = rng.choice((50, 400, 5000))  # the window's length, in the steps' time units
    for _ in range(steps):
        now += rng.choice((0, 1, 3, 10, 60))
        horizon = now - span
        kind = rng.random()
        if kind < 0.45:  # a pipelined run (up to 39 ids: past claim's 16 hashed ahead)
            ids = tuple(_random_id(rng, pool) if rng.random() < 0.2 else
                        b"run-%d-%d" % (rng.randrange(1 << 30), i) for i in range(rng.randrange(0, 40)))
            stored_ns = max(now, last)
            answers = [w.claim(ids, offset, horizon, stored_ns) for w in windows]
            if answers[0]:
                last = stored_ns
                offset += len(ids)
                if rng.random() < 0.1:  # stored in part (out of memory)
                    stored = rng.randrange(len(ids) + 1)
                    for w in windows:
                        w.truncate(stored)
                    offset -= len(ids) - stored
        elif kind < 0.6:  # a write, or a replayed record (ids entered again)
            ids = [None if rng.random() < 0.2 else _random_id(rng, pool) for _ in range(rng.randrange(0, 6))]
            answers = [w.add(ids, offset, now) for w in windows]
            offset += len(ids)
        elif kind < 0.85:
            mid = _random_id(rng, pool)
            answers = [w.seen(mid, horizon) for w in windows]
        elif kind < 0.9:
            answers = [w.expire(horizon) for w in windows]
        elif kind < 0.95:
            mid = _random_id(rng, pool)
            answers = [w.get(mid) for w in windows]
        else:  # a snapshot and its load, into a window of each kind
            pairs, counts = windows[0].live()
            for kind_of in {type(w) for w in windows}:
                loaded = kind_of()
                loaded.restore(list(pairs), [tuple(c) for c in counts])
                assert _state(loaded)[:2] == _state(windows[0])[:2]  # (records with no id left: not saved)
                _check([loaded])
            answers = [None]
        assert all(a == answers[0] for a in answers), answers
        states = [_state(w) for w in windows]
        assert all(s == states[0] for s in states)
        _check(windows)


def _layout(window) -> dict:
    """engine/_window.c ``_layout``: where a C window's memory is, its migration, its next table."""
    return window_module._layout(window)


def _table_mapping(window) -> int:
    return _layout(window)["table_mapped"]


def _blocks_mapped(window) -> tuple[int, int]:
    layout = _layout(window)
    return layout["blocks"], layout["blocks_mapped"]


def _migration(window) -> tuple[int, int]:
    layout = _layout(window)
    return layout["old_slots"], layout["moved"]


def _next_table(window) -> tuple[int, int, int, int]:
    layout = _layout(window)
    return layout["next_slots"], layout["next_ready"], layout["next_taken"], layout["next_resident"]


def _check(windows) -> None:
    """The C windows' invariants (engine/_window.c ``_check``: tables, migration, entries)."""
    for w in windows:
        if not isinstance(w, PyWindow):
            window_module._check(w)


@pytest.mark.parametrize("seed", range(4))
def test_the_fallback_keeps_its_own_state_alike(seed):
    _run_sequence(seed, [PyWindow(), PyWindow()], 200)


@needs_c
@pytest.mark.parametrize("seed", range(12))
def test_random_sequences_as_the_python_fallback(seed):
    _run_sequence(seed, [PyWindow(), CWindow()])


@needs_c
def test_a_growing_table_migrates_a_few_slots_an_id_while_every_call_works():
    """A table past 0.7 full is not rehashed at once: the bigger one takes the new ids
    and each call that enters ids moves about 64 old slots an id (whole clusters),
    the old table freed once all are moved.  Meanwhile claims, refusals (of ids in
    either table), gets, adds of ids sitting in the old table, truncation and expiry
    answer as PyWindow's, and the invariants hold after every call."""
    windows = [PyWindow(), CWindow()]
    offset, now = 1, 10
    def claim(ids):
        nonlocal offset, now
        now += 1
        answers = [w.claim(ids, offset, 0, now) for w in windows]
        assert answers[0] == answers[1]
        if answers[0]:
            offset += len(ids)
        _check(windows)
        return answers[0]
    while _migration(windows[1])[0] != 4096:  # (the tables of 64 to 2,048 slots moved too)
        assert claim(tuple(b"g-%d" % (offset + i) for i in range(8)))
    old_slots, moved = _migration(windows[1])
    assert 8 * 64 <= moved < old_slots // 4  # (grown at 2,868 ids, by a claim of 8: only a start moved)
    rounds = 0
    while _migration(windows[1]) != (0, 0):
        rounds += 1
        before = _migration(windows[1])[1]
        assert claim((b"n-%d" % offset,))
        after = _migration(windows[1])
        assert after == (0, 0) or 64 <= after[1] - before < 64 + 100  # (64 an id, then to a cluster's end)
        early = b"g-%d" % (1 + 8 * rounds)  # entered before the growth: most likely not moved yet
        assert not claim((b"fresh-%d" % rounds, early))  # refused: the early id is stored
        assert windows[0].get(early) == windows[1].get(early) == 1 + 8 * rounds
        if rounds % 3 == 0:  # a replay enters an early id again: its slot moves to the new table
            for w in windows:
                w.add([early, None, b"x-%d" % rounds], offset, now)
            offset += 3
            _check(windows)
        if rounds % 5 == 0:
            assert claim(tuple(b"t-%d" % (offset + i) for i in range(8)))
            for w in windows:
                w.truncate(3)
            offset -= 5
            _check(windows)
        if rounds == 8:  # the oldest runs age out, from both tables; an expiry moves 4,096 slots
            for w in windows:
                w.expire(15)
            _check(windows)
            assert _migration(windows[1]) == (0, 0)
        assert _state(windows[0]) == _state(windows[1])
    assert rounds == 8  # (each claim, refused ones too, moved its 64 slots an id)
    for w in windows:
        w.expire(1 << 40)
    _check(windows)
    assert _state(windows[0]) == _state(windows[1]) == (([], []), 0, 0)


@needs_c
def test_a_window_that_stops_taking_ids_ends_its_migration_as_it_is_checked():
    """No id entered: each ``seen`` (and ``expire``) moves 4,096 old slots, and once
    the window is empty the old table goes at once, with a truncation too."""
    window = CWindow()
    offset = 1
    while _migration(window)[0] != 8192:
        assert window.claim(tuple(b"s-%d" % (offset + i) for i in range(8)), offset, 0, offset)
        offset += 8
    calls = 0
    while _migration(window) != (0, 0):
        before = _migration(window)[1]
        assert window.seen(b"s-1", 0) == 1
        after = _migration(window)
        assert after == (0, 0) or 4096 <= after[1] - before < 4096 + 100
        window_module._check(window)
        calls += 1
    assert calls == 2
    for stop in ("expire", "truncate"):  # emptied mid-migration: the old table goes too
        window = CWindow()
        offset = 1
        while _migration(window)[0] != 8192:
            assert window.claim(tuple(b"e-%d" % (offset + i) for i in range(8)), offset, 0, offset)
            offset += 8
        if stop == "expire":
            window.expire(1 << 40)
        else:  # all but the last run age out (4,096 slots moved: not all), then it is taken back
            assert window.seen(b"e-1", offset - 9) is None and len(window) == 8
            assert _migration(window)[0] == 8192
            window.truncate(0)
        assert len(window) == 0 and _migration(window) == (0, 0)
        window_module._check(window)


@needs_c
def test_a_table_that_must_grow_again_finishes_its_migration_at_once():
    """One call of more ids than the migrating table has room for: the migration ends
    at once, and a new one begins into a table big enough (and, the call's ids being
    many, ends in the same call)."""
    windows = [PyWindow(), CWindow()]
    ids = [b"b-%d" % i for i in range(20_000)]
    offset = 1
    while _migration(windows[1])[0] != 4096:
        assert all(w.claim(tuple(ids[offset - 1:offset + 15]), offset, 0, offset) for w in windows)
        offset += 16
    assert 0 < _migration(windows[1])[1] < 4096
    assert all(w.claim(tuple(ids[offset - 1:]), offset, 0, 1 << 30) for w in windows)
    _check(windows)
    assert _migration(windows[1]) == (0, 0)
    assert _state(windows[0]) == _state(windows[1]) and len(windows[1]) == 20_000
    assert all(windows[1].get(mid) == 1 + i for i, mid in enumerate(ids))


class _Claims:
    """PyWindow and CWindow side by side, claiming runs of new ids (``p-N``), each run
    at its own time (1, 2, ...), so that the oldest runs can be aged out one by one."""

    def __init__(self) -> None:
        self.windows = [PyWindow(), CWindow()]
        self.offset = 1
        self.sizes: list[int] = []

    def claim(self, count: int, check: bool = False) -> None:
        ids = tuple(b"p-%d" % (self.offset + i) for i in range(count))
        self.sizes.append(count)
        assert all(w.claim(ids, self.offset, 0, len(self.sizes)) for w in self.windows)
        self.offset += count
        if check:
            _check(self.windows)

    def fill_below(self, percent: int, size: int) -> None:
        """Claim until one more run of 16 would pass ``percent`` of ``size`` slots."""
        for run in (512, 16):
            while (len(self.windows[1]) + run) * 100 <= size * percent:
                self.claim(run)

    def expire_to(self, percent: int, size: int) -> None:
        """Age out the oldest runs until the windows hold ``percent`` of ``size`` slots or less."""
        left, runs = len(self.windows[1]), 0
        while left * 100 > size * percent:
            left -= self.sizes[runs]
            runs += 1
        for w in self.windows:
            w.expire(runs)
        _check(self.windows)


@needs_c
def test_the_next_mapped_table_is_made_ready_in_step_with_the_ids_from_068_full():
    """With tables mapped, the call that takes a table past 0.68 full maps its
    successor and starts making its pages, then each call makes them in step with the
    ids entered up to 0.7 full, at least a huge page a call (engine/_window.c
    ``prepare_next``; the kernel's count of resident pages keeps up); the growth takes
    that very table; a window that shrinks to 0.66 full keeps it, to 0.62 lets it go.
    Answers as PyWindow's."""
    huge = 2 << 20
    size = 2 ** 18  # (2 MiB: its successor 4 MiB, two huge pages)
    populates = window_module._POPULATES
    with _tables_mapped(0, False):
        claims = _Claims()
        c_window = claims.windows[1]
        claims.fill_below(68, size)
        assert _migration(c_window) == (0, 0)
        taken = _next_table(c_window)[2]
        assert _next_table(c_window) == (0, 0, taken, 0)
        claims.claim(16, True)  # past 0.68: mapped, and a huge page made
        slots, ready, _, resident = _next_table(c_window)
        assert (slots, ready) == (2 * size, huge if populates else 0) and resident >= ready
        band = size * 70 // 100 - size * 68 // 100
        while (len(c_window) + 16) * 10 <= size * 7:
            claims.claim(16)
            passed = (len(c_window) - size * 68 // 100) / band
            _, ready, _, resident = _next_table(c_window)
            assert not populates or ready >= min(1.0, passed) * 2 * huge - huge  # (in step, whole by 0.7 full)
            assert resident >= ready
        assert _next_table(c_window)[1] == (2 * huge if populates else 0)
        claims.claim(16, True)
        assert _migration(c_window)[0] == size
        assert _next_table(c_window) == (0, 0, taken + 1, 0)  # (taken by the growth)
        size *= 2
        claims.fill_below(68, size)
        claims.claim(16, True)
        assert _next_table(c_window)[0] == 2 * size
        claims.expire_to(66, size)
        assert size * 64 < len(c_window) * 100 and _next_table(c_window)[0] == 2 * size  # (kept)
        claims.expire_to(62, size)
        assert _next_table(c_window)[0] == 0  # (let go, by the expiry)
        assert _state(claims.windows[0]) == _state(c_window)


@needs_c
def test_a_call_far_into_the_band_makes_the_next_table_in_proportion():
    """One call of half the band (0.68 to 0.69 full of 2^20 slots: the next table 16 MiB,
    eight huge pages) makes about half of the next table's pages at once, not one
    huge page (the rest then due at once) nor all of it."""
    huge = 2 << 20
    size = 2 ** 20
    window = CWindow()
    offset = 1
    def claim(count):
        nonlocal offset
        assert window.claim(tuple(b"h-%d" % (offset + i) for i in range(count)), offset, 0, 1)
        offset += count
    while len(window) + 4096 <= size * 68 // 100:
        claim(4096)
    claim(size * 68 // 100 - len(window))
    assert _next_table(window)[0] == 0
    claim(size // 100 + 16)  # (to just past 0.69 full)
    slots, ready, _, resident = _next_table(window)
    assert slots == 2 * size and resident >= ready
    if window_module._POPULATES:
        assert 4 * huge <= ready <= 6 * huge
    claim(size * 70 // 100 - len(window))
    assert _next_table(window)[1] == (8 * huge if window_module._POPULATES else 0)
    window_module._check(window)


@needs_c
def test_no_next_table_with_mappings_failing_or_for_small_tables():
    """Every mapping failing, or tables under the mapped size (from PyMem_Calloc): no
    table is made ready ahead; the growth allocates its own."""
    with _tables_mapped(0, True):
        claims = _Claims()
        claims.fill_below(68, 2 ** 14)
        migrated = set()
        for _ in range(40):
            claims.claim(16)
            assert _next_table(claims.windows[1]) == (0, 0, 0, 0)
            migrated.add(_migration(claims.windows[1])[0])
        assert 2 ** 14 in migrated  # (the table grew, into one of its own)
        _check(claims.windows)
        assert _state(claims.windows[0]) == _state(claims.windows[1])
    window = CWindow()
    for start in range(0, 5000, 50):
        assert window.claim(tuple(b"u-%d" % (start + i) for i in range(50)), 1 + start, 0, 1)
        assert _next_table(window)[0] == 0


@needs_c
def test_a_large_window_expires_as_the_fallback():
    """Many runs over a short window: the C table and entries grow, move their live
    part to the front and shrink back, with the same answers."""
    windows = [PyWindow(), CWindow()]
    offset = 1
    for t in range(3000):
        ids = tuple(b"m-%d" % (offset + i) for i in range(16))
        assert all(w.claim(ids, offset, t - 200, t) for w in windows)
        offset += 16
        if t % 500 == 0:
            assert windows[0].live() == windows[1].live()
    assert windows[0].live() == windows[1].live() and len(windows[1]) == 200 * 16
    for w in windows:
        w.expire(10_000)
    assert _state(windows[0]) == _state(windows[1]) == (([], []), 0, 0)
    assert all(w.claim((b"again",), offset, 0, 10_001) for w in windows)
    assert windows[0].live() == windows[1].live() == ([(b"again", offset)], [[10_001, 1]])


@needs_c
@pytest.mark.parametrize("seed", range(3))
def test_ids_about_and_over_a_block_as_the_fallback(seed):
    """Ids near and over the C window's block (64 KiB: an entry never straddles two;
    a longer one has a block of its own), claimed, added, truncated, expired and
    loaded, as the fallback does."""
    rng = random.Random(seed)
    windows = [PyWindow(), CWindow()]
    offset = 1
    for t in range(120):
        lengths = [rng.choice((1, 40, 30_000, 65_000, 65_488, 65_511, 65_512, 65_513, 65_536, 70_000, 200_000))
                   for _ in range(rng.randrange(1, 5))]
        ids = tuple(bytes([rng.randrange(256)]) * n + b"%d" % (offset + i) for i, n in enumerate(lengths))
        if rng.random() < 0.7:
            answers = [w.claim(ids, offset, t - 30, t) for w in windows]
            if answers[0] and rng.random() < 0.2:
                stored = rng.randrange(len(ids) + 1)
                for w in windows:
                    w.truncate(stored)
        else:
            answers = [w.add(list(ids) + [None, ids[0]], offset, t) for w in windows]
        assert answers[0] == answers[1]
        offset += len(ids) + 2
        assert _state(windows[0]) == _state(windows[1])
        assert [w.seen(ids[-1], t - 30) for w in windows] == [windows[0].get(ids[-1])] * 2
    pairs, counts = windows[1].live()
    loaded = CWindow()
    loaded.restore(pairs, [tuple(c) for c in counts])
    assert loaded.live() == windows[0].live()


def _enters_new_ids_and_refuses_any_other(window) -> None:
    window.add([b"a", b"b"], 1, 5)
    assert window.claim((b"c", b"d"), 3, 0, 10) is True
    assert window.live() == ([(b"a", 1), (b"b", 2), (b"c", 3), (b"d", 4)], [[5, 2], [10, 2]])
    for run in ((b"e", b"a"), (b"e", b"f", b"e"), (b"d",)):
        before = _state(window)
        assert window.claim(run, 5, 0, 20) is False
        assert _state(window) == before
    assert window.claim((), 5, 0, 30) is True and window.records() == 3
    assert window.seen(b"c", 9) == 3 and window.get(b"zz") is None
    assert window.seen(b"c", 10) is None and window.get(b"a") is None and len(window) == 0  # aged out
    window.add([b"x"], 6, 40)
    window.add([b"x", None, b"x"], 7, 41)  # entered again: the newest offset
    assert window.live() == ([(b"x", 9)], [[41, 1]]) and window.get(b"x") == 9
    with pytest.raises(ValueError):
        type(window)().restore([(b"a", 1), (b"a", 2)], [(1, 2)])  # an id twice
    for counts in ([(1, 1)], [(1, 3)], [(1, 1), (2, -1), (3, 2)]):
        with pytest.raises(ValueError):
            type(window)().restore([(b"a", 1), (b"b", 2)], counts)


@needs_c
@pytest.mark.speedups
@pytest.mark.parametrize("where", [0, 1, 15, 16, 17, 31, 32, 63, 64, 199])
def test_long_runs_refused_at_any_id_as_the_fallback(where):
    """claim hashes 16 ids ahead of its probe (engine/_window.c CLAIM_AHEAD): a run of
    200 refused by its id at ``where`` (stored before, or a repeat of an earlier
    id of the run) is refused whole, and a new run of 200 entered, as the fallback does."""
    for repeat in (False, True):
        windows = [PyWindow(), CWindow()]
        for w in windows:
            assert w.claim(tuple(b"old-%d" % i for i in range(100)), 1, 0, 5)
        ids = [b"new-%d" % i for i in range(200)]
        ids[where] = ids[where // 2] if repeat and where else b"old-%d" % (where % 100)
        if repeat and not where:
            ids[1] = ids[0]
        assert [w.claim(tuple(ids), 101, 0, 6) for w in windows] == [False, False]
        assert _state(windows[0]) == _state(windows[1])
        fresh = tuple(b"fresh-%d" % i for i in range(200))
        assert [w.claim(fresh, 101, 0, 6) for w in windows] == [True, True]
        assert _state(windows[0]) == _state(windows[1])
        assert [w.get(b"fresh-150") for w in windows] == [251, 251]


@needs_c
@pytest.mark.speedups
@pytest.mark.parametrize("seed", range(3))
def test_runs_of_any_length_crossing_blocks_and_expiring_as_the_fallback(seed):
    """Runs of 0-300 ids of 0-100 bytes (past the claim's 16 prefetched ahead, and ending
    at and crossing the 64 KiB blocks' ends), some refused by an id at any place (stored
    before, or repeated in the run), and the window sliding over them (the expiry's
    slot deletes prefetched ahead, engine/_window.c drop_entries), then emptied: the
    same answers and state as the fallback's."""
    rng = random.Random(seed)
    windows = [PyWindow(), CWindow()]
    offset = 1
    stored: list = []
    for t in range(700):
        length = rng.choice((0, 1, 2, 15, 16, 17, 64, 128, 255, 256, 257, 300))
        size = rng.choice((0, 3, 10, 24, 100))
        ids = [b"r%d-%d-" % (t, i) + b"x" * rng.randrange(size + 1) for i in range(length)]
        if ids and stored and rng.random() < 0.15:
            ids[rng.randrange(length)] = rng.choice(stored)
        elif length > 1 and rng.random() < 0.1:
            where = rng.randrange(1, length)
            ids[where] = ids[rng.randrange(where)]
        answers = [w.claim(tuple(ids), offset, t - 40, t) for w in windows]
        assert answers[0] == answers[1]
        if answers[0]:
            offset += length
            stored += rng.sample(ids, min(3, length))
            del stored[:-500]
        assert _state(windows[0]) == _state(windows[1])
    for w in windows:
        w.expire(10_000)
    assert _state(windows[0]) == _state(windows[1]) == (([], []), 0, 0)


def test_the_fallback_enters_new_ids_and_refuses_any_other():
    _enters_new_ids_and_refuses_any_other(PyWindow())


@needs_c
def test_the_c_window_enters_new_ids_and_refuses_any_other():
    _enters_new_ids_and_refuses_any_other(CWindow())


@needs_c
def test_bad_arguments_raise():
    window = CWindow()
    with pytest.raises(TypeError):
        window.claim([b"a"], 1, 0, 0)  # a list: the server's runs are tuples
    with pytest.raises(TypeError):
        window.claim((b"a",), 1, 0)
    with pytest.raises(TypeError):
        window.claim((b"a", "b"), 1, 0, 0)  # only bytes are ids
    with pytest.raises(TypeError):
        window.claim((b"a",), 1.0, 0, 0)
    with pytest.raises(OverflowError):
        window.claim((b"a",), -1, 0, 0)
    with pytest.raises(OverflowError):
        window.claim((b"a",), 1 << 70, 0, 0)
    with pytest.raises(TypeError):
        window.add([b"a", 3], 1, 0)
    with pytest.raises(TypeError):
        window.seen("a", 0)
    with pytest.raises(IndexError):
        window.truncate(0)  # no record
    with pytest.raises(TypeError):
        CWindow(1)
    assert _state(window) == (([], []), 0, 0)
    window.add([b"a"], 1, 0)
    with pytest.raises(ValueError):
        window.restore([], [])  # only into an empty window


def _memory_errors_leave_the_window(call, window) -> int:
    """MemoryError at each allocation of ``call(window)``: raised, never a crash, the
    window as before; how many allocations failed."""
    import _testcapi

    failures = 0
    before = _state(window)
    for start in range(120):
        _testcapi.set_nomemory(start, start + 1)
        try:
            call(window)
            ok = True
        except MemoryError:
            ok = False
        finally:
            _testcapi.remove_mem_hooks()
        if not ok:
            failures += 1
            assert _state(window) == before
            _check([window])
            continue
        return failures
    raise AssertionError("the call never succeeded")


def _memory_errors_everywhere(mapped: bool = False) -> int:
    """The claim's and the add's growth of the table, the entries and the records
    (each from empty, and each from full), and the load: MemoryError, the window
    unchanged, then the same call succeeds; how many allocations failed in all.
    (``mapped``: the tables are mapped, which _testcapi cannot fail: a call whose
    only allocation is its table fails at none.)"""
    total = 0
    run = tuple(b"fresh-%d" % i for i in range(60))  # more than a table of 64 slots holds
    for prefill in (0, 16, 44):
        for method in ("claim", "add"):
            window = CWindow()
            for r in range(prefill):  # (16 records fill the first ring)
                window.claim((b"s-%d" % r,), 1000 + r, 0, 5)
            if method == "claim":
                failures = _memory_errors_leave_the_window(lambda w: w.claim(run, 2000, 0, 7), window)
            else:
                failures = _memory_errors_leave_the_window(lambda w: w.add(list(run), 2000, 7), window)
            assert failures > 0 or mapped
            total += failures
            assert len(window) == prefill + 60 and window.get(b"fresh-59") == 2059
    window = CWindow()
    window.claim((b"a" * 70_000,), 1, 0, 1)
    window.truncate(0)  # (its block stays, to be made longer)
    long_run = (b"b" * 200_000, b"c" * 100, b"d" * 65_500)
    failures = _memory_errors_leave_the_window(lambda w: w.claim(long_run, 2, 0, 3), window)
    assert failures > 0
    total += failures
    assert window.live() == ([(long_run[0], 2), (long_run[1], 3), (long_run[2], 4)], [[3, 3]])
    source = CWindow()
    source.claim(run, 1, 0, 3)
    pairs, counts = source.live()
    loaded = CWindow()
    failures = _memory_errors_leave_the_window(lambda w: w.restore(pairs, [tuple(c) for c in counts]), loaded)
    assert failures > 0
    total += failures
    assert _state(loaded) == _state(source)
    return total


@needs_c
def test_memory_errors_at_every_allocation_leave_the_window_as_it_was():
    _memory_errors_everywhere()


@contextlib.contextmanager
def _tables_mapped(min_bytes: int, fail: bool):
    """Tables of ``min_bytes`` or more mapped on huge pages (engine/_window.c
    ``table_alloc``; 2 MiB outside this), every mapping failing with ``fail``."""
    before = window_module._set_mapping(min_bytes, fail)
    try:
        yield
    finally:
        window_module._set_mapping(*before)


@needs_c
@pytest.mark.parametrize("fail", (False, True))
def test_memory_errors_in_the_middle_of_a_migration_leave_the_window_as_it_was(fail):
    """A window migrating its table: a claim that must grow the table again (its
    migration finished at once, a new one begun), an add, and a claim of new blocks
    of entries, each failing at every allocation: MemoryError, the window as it was
    (and its invariants), then the call succeeds."""
    with _tables_mapped(0 if not fail else 1 << 62, fail):
        big = tuple(b"big-%d" % i for i in range(9000))  # (made before: the calls allocate only their own)
        replayed = [b"a-1", None, b"m-5"]
        long_ids = (b"L" * 70_000, b"l" * 200)
        calls = {
            "grow again": lambda w: w.claim(big, 10_000, 0, 1 << 30),
            "add": lambda w: w.add(replayed, 10_000, 1 << 30),
            "long ids": lambda w: w.claim(long_ids, 10_000, 0, 1 << 30),
        }
        for name, call in calls.items():
            window = CWindow()
            offset = 1
            while _migration(window)[0] != 4096:
                assert window.claim(tuple(b"m-%d" % (offset + i) for i in range(8)), offset, 0, offset)
                offset += 8
            assert 0 < _migration(window)[1] < 4096
            failures = _memory_errors_leave_the_window(call, window)
            assert failures > 0 or not fail or name == "add"  # (mapped tables and blocks cannot be failed; the add needs no room)
            window_module._check(window)


@needs_c
def test_memory_errors_with_every_table_mapped_or_its_mapping_failing():
    """Every table mapped (the allocations _testcapi fails are the rest: fewer of
    them), and every mapping failing (the tables from PyMem_Calloc and every block
    of entries from PyMem_Malloc, which fail in turn: more than by default, where
    the blocks after a window's first are mappings): MemoryError, the window as it
    was."""
    default = _memory_errors_everywhere()
    with _tables_mapped(0, False):
        mapped = _memory_errors_everywhere(mapped=True)
    with _tables_mapped(0, True):
        mapping_failed = _memory_errors_everywhere()
    assert mapped < default < mapping_failed


@needs_c
@pytest.mark.parametrize("fail", (False, True))
def test_blocks_after_the_first_are_mappings_of_their_own(fail):
    """A window's first block of entries comes from PyMem_Malloc, the later ones are
    mappings (engine/_window.c ``chunk_alloc``; PyMem_Malloc's when mapping fails):
    the same answers and state as PyWindow's through growth over a dozen blocks,
    refused runs, a truncation, expiry of the older blocks and emptying."""
    with _tables_mapped(2 << 20, fail):
        windows = [PyWindow(), CWindow()]
        ids = [b"%05d-" % i + b"m" * 1000 for i in range(800)]  # (~64 ids a 64 KiB block)
        for start in range(0, 800, 40):
            run = tuple(ids[start:start + 40])
            assert [w.claim(run, 1 + start, 0, 1 + start) for w in windows] == [True, True]
            assert [w.claim(run[:1], 5000, 0, 1 + start) for w in windows] == [False, False]
        assert _state(windows[0]) == _state(windows[1])
        blocks, mapped = _blocks_mapped(windows[1])
        assert blocks >= 12 and mapped == (0 if fail else blocks - 1)
        for w in windows:
            w.truncate(10)
        assert _state(windows[0]) == _state(windows[1])
        for w in windows:
            w.expire(400)  # the first ten runs age out: their blocks are freed
        assert _state(windows[0]) == _state(windows[1]) and len(windows[1]) == 370
        assert _blocks_mapped(windows[1])[0] < blocks
        assert [w.claim((ids[0],), 9000, 400, 9000) for w in windows] == [True, True]
        assert [w.get(ids[5]) for w in windows] == [None, None] and windows[1].get(ids[0]) == 9000
        for w in windows:
            w.expire(1 << 40)
        assert _state(windows[0]) == _state(windows[1]) == (([], []), 0, 0)
    with pytest.raises(TypeError):
        _blocks_mapped(PyWindow())


@needs_c
@pytest.mark.parametrize("fail", (False, True))
@pytest.mark.parametrize("seed", range(6))
def test_mapped_tables_as_the_python_fallback(seed, fail):
    """Every table mapped (or every mapping failing: the fallback's PyMem_Calloc):
    the same answers and window as PyWindow's, through growth, emptying and loads."""
    with _tables_mapped(0, fail):
        windows = [PyWindow(), CWindow()]
        _run_sequence(seed, windows)
        for w in windows:  # (a table, whatever the sequence left)
            w.add([b"last"], 1 << 40, 1 << 40)
        assert _state(windows[0]) == _state(windows[1])
        assert _table_mapping(windows[1]) == (0 if fail else 2 << 20)


@needs_c
def test_a_large_table_is_mapped_on_huge_pages():
    """A table of 2 MiB (2^18 slots: over 91,750 ids) or more is a mapping of whole
    huge pages, unmapped when it grows, and when the window empties."""
    window = CWindow()
    ids = [b"h-%d" % i for i in range(200_000)]
    for start in range(0, 90_048, 64):
        assert window.claim(tuple(ids[start:start + 64]), 1 + start, 0, 1 + start // 64)
    assert _table_mapping(window) == 0  # (1 MiB: from PyMem_Calloc)
    for start in range(90_048, 100_032, 64):
        assert window.claim(tuple(ids[start:start + 64]), 1 + start, 0, 1 + start // 64)
    assert _table_mapping(window) == 2 << 20
    for start in range(100_032, 200_000, 64):
        assert window.claim(tuple(ids[start:start + 64]), 1 + start, 0, 1 + start // 64)
    assert _table_mapping(window) == 4 << 20
    assert len(window) == 200_000 and all(window.get(mid) == 1 + i for i, mid in enumerate(ids))
    assert not window.claim((ids[0],), 300_000, 0, 10_000)
    window.expire(1 << 40)
    assert _state(window) == (([], []), 0, 0) and _table_mapping(window) == 0
    assert window.claim((ids[0],), 300_000, 0, 1 << 41) and window.get(ids[0]) == 300_000
    with pytest.raises(TypeError):
        _table_mapping(PyWindow())


def test_an_ingest_uses_the_c_window_unless_turned_off():
    probe = ("import tstream.engine.ingest as i; "
             "print(i.Window is i.PyWindow, type(i.Ingest().window).__name__)")
    assert c_extensions.probe_words(probe, pure=True) == ["True", "PyWindow"]
    if CWindow is not None:
        assert c_extensions.probe_words(probe, pure=False) == ["False", "Window"]


@needs_c
def test_an_ingest_claims_runs_and_expires_them_in_c(monkeypatch):
    test_an_ingest_claims_runs_and_expires_them(monkeypatch, CWindow)


def test_an_ingest_claims_runs_and_expires_them(monkeypatch, kind=PyWindow):
    """Ingest.claim_run with either window (the Python one here, the C one above):
    new runs entered, a run with an id within the window refused, the ids aged
    out dropped first; the export, and a load of it, alike."""
    monkeypatch.setattr(ingest_module, "Window", kind)
    ingest = Ingest()
    assert type(ingest.window) is kind
    window = 1000
    assert ingest.claim_run((b"a", b"b"), 1, 0, window, 0)
    assert not ingest.claim_run((b"c", b"a"), 3, 500, window, 500)
    assert ingest.offsets() == [[b"a", 1], [b"b", 2]] and ingest.window.records() == 1
    assert ingest.claim_run((b"c", b"a", b"d"), 3, 1000, window, 1000)  # a and b aged out first
    ingest.truncate_run(2)  # d was not stored
    assert ingest.offsets() == [[b"c", 3], [b"a", 4]]
    assert ingest.export() == {"batches": [], "ids": [(b"c", 3), (b"a", 4)], "runs": [[1000, 2]]}
    loaded = Ingest.load(b"k", {b"ids": [[b"c", 3], [b"a", 4]], b"runs": [[1000, 2]]})  # (msgpack's lists)
    assert type(loaded.window) is kind and loaded.export() == ingest.export() and loaded
    assert ingest.seen(b"a", 1999, window) == 4 and ingest.seen(b"a", 2000, window) is None and not ingest


@needs_c
def test_the_c_window_takes_no_arguments():
    with pytest.raises(TypeError, match="takes no arguments"):
        CWindow(1)
    with pytest.raises(TypeError, match="takes no arguments"):
        CWindow(size=1)
    assert len(CWindow()) == 0


@needs_c
def test_ids_whose_32_bit_hashes_collide_are_never_taken_for_each_other():
    """The C table keeps a 32-bit hash a slot and compares an id's bytes only when
    the hashes are equal: among 300,000 ids some hashes collide (~10 pairs
    expected), and every id is still new to the window, found at its own
    offset, refused when claimed again, and gone once its record ages out."""
    window = CWindow()
    ids = [b"c-%d" % i for i in range(300_000)]
    for start in range(0, len(ids), 64):
        assert window.claim(tuple(ids[start:start + 64]), 1 + start, 0, 1 + start // 64)
    assert len(window) == len(ids)
    assert all(window.get(mid) == 1 + i for i, mid in enumerate(ids))
    assert not any(window.claim((mid,), 10_000_000, 0, 10_000) for mid in ids[::997])
    assert window.get(b"c-300000") is None and window.get(b"c-") is None
    window.expire(len(ids) // 128)  # the older half of the records
    half = (len(ids) // 128) * 64
    assert len(window) == len(ids) - half
    assert window.get(ids[half - 1]) is None and window.get(ids[half]) == 1 + half
    pairs, counts = window.live()
    assert pairs == [(mid, 1 + half + i) for i, mid in enumerate(ids[half:])]
    window.expire(1 << 40)
    assert _state(window) == (([], []), 0, 0)
