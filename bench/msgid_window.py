#!/usr/bin/env python3
"""MSGID's duplicate window when it is full: the CPU of ``Ingest.claim_run`` (its
record kept with it) per pipelined run of 16 new ids, in process, while every run ages
the oldest one out -- the steady state of a publisher that writes longer than
``duplicate_window_ms``, which bench/fast_ingest.py and bench/instructions.py
never reach (their runs last seconds; the default window is 120 s).

    .venv/bin/python bench/msgid_window.py --ids 160000 --blocks 40

The window holds ``--ids`` ids (one run of 16 per nanosecond of a window of
``ids / 16`` ns); then ``--blocks`` blocks of 1,000 runs are entered, each run
one nanosecond later than the last, and the CPU time per run of each block is
printed (microseconds).  A flat row is the cost of the run alone; a row that
climbs block by block until it drops back shows an expiry walking past the ids
it deleted earlier (as before 2026-11-27 round 7, when the oldest ids were
found by iterating the table: from its first slot, past every deleted one,
until the dict was resized; now each record drops its own ids).
"""

from __future__ import annotations

import argparse
import time

from tstream.engine.ingest import Ingest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ids", type=int, default=160_000, help="ids the window holds")
    ap.add_argument("--blocks", type=int, default=40, help="blocks of 1,000 runs of 16 measured")
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
        for ids in runs:
            now += 1
            if not ingest.claim_run(ids, offset, now, window, now):
                raise SystemExit("a new id was refused")
            offset += 16
        per_run.append((time.process_time() - start) / 1000 * 1e6)
    print(f"window of {args.ids:,} ids ({len(ingest.ids):,} held at the end): CPU us per run of 16, "
          f"per block of 1,000 runs:")
    print(" ".join(f"{x:.0f}" for x in per_run))
    print(f"mean {sum(per_run) / len(per_run):.0f} us per run ({sum(per_run) / len(per_run) / 16:.1f} us per id), "
          f"min {min(per_run):.0f}, max {max(per_run):.0f}")


if __name__ == "__main__":
    main()
