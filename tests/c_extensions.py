"""What the tests of the optional C extensions share (resp/_speedups.c, engine/_window.c).

Each C function is tested against its pure-Python fallback; the tests of a C
function itself are marked ``speedups``, which the pure-Python pass of .ci/run
deselects. Anywhere else they fail, not skip, when the extension is off or was
not built: the README's install builds it.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest


def needs_c(function):
    """A decorator for the tests of the C ``function`` itself (None where the
    extension is off or not built): marked ``speedups``, and failing without it."""

    def decorate(test):
        @functools.wraps(test)
        def run(*args, **kwargs):
            if function is None:
                pytest.fail("the C extension is off (TSTREAM_PURE_PYTHON) or not built: "
                            "deselect these tests with -m 'not speedups'")
            return test(*args, **kwargs)

        return pytest.mark.speedups(run)

    return decorate


def memory_error_count(call, allocations: int) -> int:
    """Call ``call()`` once per allocation index below ``allocations``, with that
    allocation failing (``_testcapi.set_nomemory``); how many calls raised
    MemoryError. A crash, or any other error, fails the test."""
    import _testcapi

    failures = 0
    for start in range(allocations):
        _testcapi.set_nomemory(start, start + 1)
        try:
            call()
        except MemoryError:
            failures += 1
        finally:
            _testcapi.remove_mem_hooks()
    return failures


def probe_words(probe: str, *, pure: bool) -> list[str]:
    """The words ``python -c probe`` prints in a fresh interpreter, with
    ``TSTREAM_PURE_PYTHON=1`` (pure) or without it."""
    env = {k: v for k, v in os.environ.items() if k != "TSTREAM_PURE_PYTHON"}
    if pure:
        env["TSTREAM_PURE_PYTHON"] = "1"
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          check=True).stdout.split()
