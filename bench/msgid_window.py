#!/usr/bin/env python3
"""MSGID's duplicate window when it is full: the CPU of ``Ingest.claim_run`` (its
record kept with it) per pipelined run of 16 new ids, in process, while every run ages
the oldest one out -- the steady state of a publisher that writes longer than
``duplicate_window_ms``, which bench/fast_ingest.py and bench/instructions.py
never reach (their runs last seconds; the default window is 120 s).

    .venv/bin/python bench/msgid_window.py --ids 160000 --blocks 40
    flock /tmp/tstream-bench.lock .venv/bin/python bench/msgid_window.py --ids 1000000 --blocks 63

The window holds ``--ids`` ids (one run of 16 per nanosecond of a window of
``ids / 16`` ns); then ``--blocks`` blocks of 1,000 runs are entered, each run
one nanosecond later than the last, and the CPU time per run of each block is
printed (microseconds).  A flat row is the cost of the run alone; a row that
climbs block by block until it drops back shows an expiry walking past the ids
it deleted earlier (as before 2026-11-27 round 7, when the oldest ids were
found by iterating the table: from its first slot, past every deleted one,
until the dict was resized; now each record drops its own ids).

Each block's ids are made just before it is timed (as the server's parser makes
a run's ids just before the claim: they are in the cache, the window's table and
the ids that age out are not): the figure is cache-sensitive, which instruction
counts are not.  ``Ingest.claim_run`` has the same signature on main before
round 11 (a dict and a deque) and after (engine/_window.c's ``Window``), so the
script runs as it is against either build: ``/tmp/<main>/.venv/bin/python
bench/msgid_window.py`` imports that build's tree.  For a count that does not
move with the machine's load, run it under cachegrind twice (``--blocks`` 4 and
24, the same ``--ids``) and take the difference, less that of two runs with
``--skip-claims`` (the making of the ids): the instructions and the simulated
cache misses per run (bench/RESULTS-fast-ingest.md, round 11).
"""

from __future__ import annotations

import argparse
import time

from tstream.engine.ingest import Ingest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ids", type=int, default=160_000, help="ids the window holds")
    ap.add_argument("--blocks", type=int, default=40, help="blocks of 1,000 runs of 16 measured")
    ap.add_argument("--skip-claims", action="store_true",
                    help="make each block's ids but claim none (what the cachegrind difference subtracts)")
    args = ap.parse_args()
    ingest = Ingest()
    window = args.ids // 16
    offset = 1
    for t in range(window):
        assert ingest.claim_run(tuple(b"id-%d" % i for i in range(offset, offset + 16)), offset, t, window, t)
        offset += 16
    now = window
    per_run = []
    for _ in range(args.blocks):
        runs = [tuple(b"id-%d" % i for i in range(offset + 16 * r, offset + 16 * r + 16)) for r in range(1000)]
        start = time.process_time()
        if args.skip_claims:
            offset += 16 * len(runs)
            now += len(runs)
            runs = []
        for ids in runs:
            now += 1
            if not ingest.claim_run(ids, offset, now, window, now):
                raise SystemExit("a new id was refused")
            offset += 16
        per_run.append((time.process_time() - start) / 1000 * 1e6)
        del runs
    held = len(ingest.window) if hasattr(ingest, "window") else len(ingest.ids)  # (main before round 11: a dict)
    print(f"window of {args.ids:,} ids ({held:,} held at the end): CPU us per run of 16, "
          f"per block of 1,000 runs:")
    print(" ".join(f"{x:.0f}" for x in per_run))
    mean = sum(per_run) / len(per_run)
    print(f"mean {mean:.1f} us per run ({mean / 16 * 1000:.0f} ns per id), "
          f"min {min(per_run):.0f}, max {max(per_run):.0f}")


if __name__ == "__main__":
    main()
