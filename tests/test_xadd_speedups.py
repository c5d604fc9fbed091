"""The C encoder of a pipelined XADD run's replies (resp/_speedups.c
``encode_stream_id_run``) against its pure-Python reference
(resp/xentries.encode_stream_id_run, what ``TSTREAM_PURE_PYTHON=1`` runs).

``resp.xentries.encode_stream_id_run_u64`` is the C function when the
extension is built and on, else the Python one: over the 64-bit range both
give the same bytes, the ids formatted one by one.  The C function's own tests
are marked ``speedups`` (the pure-Python CI pass deselects them) and fail, not
skip, where the extension is off or missing; its MemoryError path is driven
with ``_testcapi.set_nomemory``.
"""

from __future__ import annotations

import os
import random
import sys

import pytest

from tstream.resp import encode_stream_ids, xentries
from tstream.resp.xentries import encode_stream_id_run, encode_stream_id_run_u64

from . import c_extensions

try:
    if os.environ.get("TSTREAM_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("TSTREAM_PURE_PYTHON is set")
    from tstream.resp._speedups import encode_stream_id_run as c_encode_stream_id_run
except ImportError:
    c_encode_stream_id_run = None

U64 = (1 << 64) - 1


needs_c = c_extensions.needs_c(c_encode_stream_id_run)


def formatted(ms: int, first: int, count: int) -> bytes:
    """The reference: every id formatted on its own."""
    return b"".join(b"$%d\r\n%d-%d\r\n" % (len(b"%d-%d" % (ms, s)), ms, s) for s in range(first, first + count))


def cases(rng: random.Random, n: int):
    """Random (ms, first_seq, count) within 64 bits, biased to the edges: widths
    changing within the run (9, 99, 10**k - 1), hundreds, the largest values."""
    for _ in range(n):
        ms = rng.choice([0, 1, 9, 10, 99, 1764222222222, rng.randrange(1 << 64), U64, 10 ** rng.randrange(20) - 1])
        count = rng.choice([0, 1, 2, 16, 17, 100, 101, 256, rng.randrange(300)])
        first = rng.choice([0, rng.randrange(300), rng.randrange(1 << 20), rng.randrange(1 << 64),
                            max(0, 10 ** rng.randrange(20) - rng.randrange(40)), U64 - rng.randrange(300)])
        first = min(first, max(0, U64 - count + 1))
        yield ms, first, count


def test_the_run_encoder_in_use_gives_every_id_formatted():
    """Whichever encoder is in use (C, or Python with TSTREAM_PURE_PYTHON=1)."""
    for ms, first, count in cases(random.Random(15), 3000):
        expected = formatted(ms, first, count)
        assert encode_stream_id_run_u64(ms, first, count) == expected, (ms, first, count)
        assert encode_stream_id_run(ms, first, count) == expected


@needs_c
def test_the_c_encoder_agrees_with_the_python_one():
    rng = random.Random(2026)
    for ms, first, count in cases(rng, 20000):
        assert c_encode_stream_id_run(ms, first, count) == encode_stream_id_run(ms, first, count), (ms, first, count)
    for ms in (0, 7, 1764222222222, U64):
        for first in [*range(0, 230), 999, 1000, 9999, 10 ** 19 - 3, U64 - 2]:
            for count in (1, 2, 9, 16, 64, 100, 101):
                if first + count - 1 <= U64:
                    assert c_encode_stream_id_run(ms, first, count) == encode_stream_ids(ms, first, count)
    assert xentries.encode_stream_id_run_u64 is c_encode_stream_id_run


@needs_c
def test_the_c_encoder_refuses_what_is_not_64_bits():
    assert c_encode_stream_id_run(5, 3, 0) == b""
    assert c_encode_stream_id_run(5, 3, -4) == b""
    with pytest.raises(ValueError):
        c_encode_stream_id_run(5, U64, 2)  # the last sequence number past 64 bits
    with pytest.raises(OverflowError):
        c_encode_stream_id_run(U64 + 1, 0, 1)
    with pytest.raises(OverflowError):
        c_encode_stream_id_run(-1, 0, 1)
    with pytest.raises(OverflowError):
        c_encode_stream_id_run(1, -1, 1)
    with pytest.raises(TypeError):
        c_encode_stream_id_run(1, b"0", 1)
    with pytest.raises(TypeError):
        c_encode_stream_id_run(1, 0)
    with pytest.raises((MemoryError, OverflowError)):
        c_encode_stream_id_run(1, 0, sys.maxsize)  # its size is no Py_ssize_t: refused before any allocation


@needs_c
def test_the_c_encoder_survives_memory_errors():
    """MemoryError at its one allocation: raised, never a crash, and the same call
    then succeeds."""
    expected = formatted(1764222222222, 95, 16)
    assert c_extensions.memory_error_count(lambda: c_encode_stream_id_run(1764222222222, 95, 16), 8) > 0
    assert c_encode_stream_id_run(1764222222222, 95, 16) == expected


def test_the_environment_variable_turns_the_c_encoder_off():
    probe = ("import tstream.resp.xentries as x; "
             "print(x.encode_stream_id_run_u64 is x.encode_stream_id_run)")
    assert c_extensions.probe_words(probe, pure=True) == ["True"]
