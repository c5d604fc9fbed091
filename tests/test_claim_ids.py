"""The duplicate window's run claim in C (``claim_ids`` of engine/_window.c)
against its pure-Python fallback (engine/ingest.py ``_claim_ids_python``): on
random tables and runs (new ids, ids stored before, ids repeated within the
run, empty runs), the same answer, the same table afterwards, in the same
order, and the same records; a MemoryError at each allocation it makes leaves
the table and the records as they were.

The C tests are marked ``speedups`` (.ci/run's pure-Python pass deselects them,
as tests/test_parser_speedups.py's); the fallback's own tests run in both passes.
"""

from __future__ import annotations

import gc
import random
from collections import deque

import pytest

from tstream.engine import ingest as ingest_module
from tstream.engine.ingest import Ingest, _claim_ids_python

from . import c_extensions

try:
    from tstream.engine._window import claim_ids as c_claim_ids
except ImportError:
    c_claim_ids = None

needs_c = c_extensions.needs_c(c_claim_ids)


def _c():
    if c_claim_ids is None:
        pytest.fail("the C extension is not built: deselect these tests with -m 'not speedups'")
    return c_claim_ids


def _random_case(rng: random.Random) -> tuple[dict, tuple, int]:
    """A window table (ids -> offsets below ``offset``, oldest first) and a run to claim."""
    offset = rng.choice((1, 2, 200, 257, 1000, 1 << 40))
    stored = [b"id-%d" % rng.randrange(10_000) for _ in range(rng.randrange(0, 40))]
    table: dict = {}
    for i, mid in enumerate(stored):
        table.pop(mid, None)
        table[mid] = max(0, offset - len(stored) + i)
    pool = stored + [b"new-%d" % rng.randrange(10_000) for _ in range(60)]
    length = rng.randrange(0, 20)
    if rng.random() < 0.5:  # mostly new ids, the usual run
        run = tuple(b"run-%d-%d" % (rng.randrange(1 << 30), i) for i in range(length))
        if run and rng.random() < 0.5:  # one id stored before, or repeated, somewhere
            at = rng.randrange(len(run))
            twin = rng.choice(stored) if stored and rng.random() < 0.5 else run[rng.randrange(len(run))]
            run = run[:at] + (twin,) + run[at + 1:]
    else:
        run = tuple(rng.choice(pool) for _ in range(length))
    return table, run, offset


@needs_c
@pytest.mark.parametrize("seed", range(6))
def test_random_runs_claim_as_the_python_fallback(seed):
    claim = _c()
    rng = random.Random(seed)
    for _ in range(400):
        table, run, offset = _random_case(rng)
        expected_table = dict(table)
        runs, expected_runs = deque([(1, (), 1)]), deque([(1, (), 1)])
        expected = _claim_ids_python(expected_table, run, offset, expected_runs, 77)
        got = claim(table, run, offset, runs, 77)
        assert got is expected
        assert list(table.items()) == list(expected_table.items())  # the same entries, in the same order
        assert runs == expected_runs
        if got:
            assert runs[-1][1] is run


def _enters_new_ids_and_refuses_any_other(claim) -> None:
    table = {b"a": 1, b"b": 2}
    runs: deque = deque()
    assert claim(table, (b"c", b"d"), 3, runs, 10) is True
    assert table == {b"a": 1, b"b": 2, b"c": 3, b"d": 4}
    assert list(runs) == [(10, (b"c", b"d"), 3)]
    for run in ((b"e", b"a"), (b"e", b"f", b"e"), (b"d",)):
        before = list(table.items())
        assert claim(table, run, 5, runs, 20) is False
        assert list(table.items()) == before and len(runs) == 1
    assert claim(table, (), 5, runs, 30) is True
    # small offsets (cached ints): a repeat is still told from a new id
    table = {}
    assert claim(table, (b"x", b"x"), 1, runs, 40) is False and table == {}


def test_the_fallback_enters_new_ids_and_refuses_any_other():
    _enters_new_ids_and_refuses_any_other(_claim_ids_python)


@needs_c
def test_the_c_claim_enters_new_ids_and_refuses_any_other():
    _enters_new_ids_and_refuses_any_other(_c())


@needs_c
def test_the_c_claim_untracks_records_of_bytes_only():
    """A record of bytes ids (the server's only kind) is left to no collection;
    one holding anything else stays tracked."""
    claim = _c()
    runs: deque = deque()
    ids = tuple(b"id-%d" % i for i in range(4))
    assert claim({}, ids, 10, runs, 5)
    assert not gc.is_tracked(runs[-1]) and not gc.is_tracked(ids)
    class Tracked:  # (hashable, and tracked: not an id the server makes)
        pass
    other = (b"a", Tracked())
    assert claim({}, other, 10, runs, 5)
    assert gc.is_tracked(runs[-1]) and gc.is_tracked(other)


@needs_c
def test_bad_arguments_raise():
    claim = _c()
    runs: deque = deque()
    with pytest.raises(TypeError):
        claim({}, [b"a"], 1, runs, 0)
    with pytest.raises(TypeError):
        claim({}, (b"a",), 1, runs)

    class Offset:  # an __index__ object could reach the record the collector no longer sees
        def __index__(self):
            return 1

    for offset in (Offset(), True, 1.0):  # only an exact int is an offset
        with pytest.raises(TypeError):
            claim({}, (b"a",), offset, runs, 0)
    with pytest.raises(OverflowError):
        claim({}, (b"a",), -1, runs, 0)
    with pytest.raises(OverflowError):
        claim({}, (b"a",), 1 << 70, runs, 0)
    table = {b"a": 1}
    with pytest.raises(TypeError):  # unhashable: the ids entered before it taken back
        claim(table, (b"b", [1]), 5, runs, 0)
    assert table == {b"a": 1}
    with pytest.raises(AttributeError):  # no append: the ids taken back
        claim(table, (b"b", b"c"), 5, None, 0)
    assert table == {b"a": 1} and not runs


@needs_c
def test_memory_errors_at_every_allocation_leave_the_table_as_it_was():
    """MemoryError at each allocation (the ints, the table's resizes): raised, never a
    crash, the table as before; the same call then succeeds."""
    claim = _c()
    import _testcapi
    run = tuple(b"fresh-%d" % i for i in range(40))  # enough to resize a table of 5
    failures = 0
    for start in range(0, 80):
        table = {b"s-%d" % i: 1000 + i for i in range(5)}
        before = list(table.items())
        runs: deque = deque([(1, (), 1)] * 63)  # (the next append needs a new block of the deque)
        _testcapi.set_nomemory(start, start + 1)
        try:
            result = claim(table, run, 2000, runs, 3)
        except MemoryError:
            result = None
        finally:
            _testcapi.remove_mem_hooks()
        if result is None:
            failures += 1
            assert list(table.items()) == before and len(runs) == 63
        else:
            assert result is True and len(table) == 45 and runs[-1] == (3, run, 2000)
    assert failures > 0
    table = {}
    runs = deque()
    assert claim(table, run, 2000, runs, 3) is True and table == {mid: 2000 + i for i, mid in enumerate(run)}


def test_claim_run_uses_the_c_claim_unless_turned_off():
    probe = ("import tstream.engine.ingest as i; "
             "print(i.claim_ids is i._claim_ids_python)")
    assert c_extensions.probe_words(probe, pure=True) == ["True"]
    if c_claim_ids is not None:
        assert c_extensions.probe_words(probe, pure=False) == ["False"]


@needs_c
def test_an_ingest_claims_runs_and_expires_them_in_c(monkeypatch):
    test_an_ingest_claims_runs_and_expires_them(monkeypatch, c_claim_ids)


def test_an_ingest_claims_runs_and_expires_them(monkeypatch, claim=_claim_ids_python):
    """Ingest.claim_run with either claim (the Python one here, the C one above):
    new runs entered, a run with an id within the window refused, the ids aged
    out dropped first."""
    monkeypatch.setattr(ingest_module, "claim_ids", claim)
    ingest = Ingest()
    window = 1000
    assert ingest.claim_run((b"a", b"b"), 1, 0, window, 0)
    assert not ingest.claim_run((b"c", b"a"), 3, 500, window, 500)
    assert ingest.ids == {b"a": 1, b"b": 2} and len(ingest.runs) == 1
    assert ingest.claim_run((b"c", b"a", b"d"), 3, 1000, window, 1000)  # a and b aged out first
    ingest.truncate_run(2)  # d was not stored
    assert ingest.ids == {b"c": 3, b"a": 4}
    assert ingest.export() == {"batches": [], "ids": [(b"c", 3), (b"a", 4)], "runs": [[1000, 2]]}
