#!/usr/bin/env python3
"""The MSGID window's claim of new ids into a window of a million: the thread's CPU
time per id, in process, and the memory the window's table sits on (huge pages or not).

    .venv/bin/python bench/window_claims.py                       # one run, this build
    .venv/bin/python bench/window_claims.py --compare /tmp/s36/main2/.venv/bin/python .venv/bin/python
    .venv/bin/python bench/window_claims.py --compare A B --arms A,B,B-off --rounds 9

One run: engine/_window.c's ``Window`` gets ``--prefill`` ids (``pre-N``, through its
own ``add``, in records of 128, all kept: nothing expires), then ``--blocks`` blocks of
``--runs`` claims of ``--run`` (16) new ids each (``id-N``); each block's ids are made just before
it is timed (as the server's parser makes a run's ids just before the claim: they
are in the cache, the window's table is not), and only the claims are timed, in the
thread's CPU time (``time.thread_time_ns``: another process's load moves it less
than wall time, though it still shares the caches).  The window's table stays at its
size through the run (2^21 slots from 734,004 ids to 1,468,006), so no block pays
for a rehash.  Printed: ns an id (all the claims; and the median of the blocks),
the process's RSS and AnonHugePages (/proc/self/smaps_rollup), and the length of
the table's mapping (0: not mapped: from PyMem_Calloc, or a build before round 16).

``--compare PY...``: runs of one script in each interpreter (each imports its own
build's tree: ``/tmp/s36/main2/.venv/bin/python`` the frozen main), alternated, the
order swapped every round (A B, B A, ...), each run a fresh process, with the load
average read before it; every run is listed, then the medians.  An arm ``PY-off``
runs PY with the table's mapping turned off (``_set_mapping``: the same build on
4 KiB pages from PyMem_Calloc), where the build has it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def smaps_rollup() -> dict[str, int]:
    """kB figures of /proc/self/smaps_rollup (empty where there is none)."""
    figures: dict[str, int] = {}
    try:
        with open("/proc/self/smaps_rollup") as rollup:
            for line in rollup:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    figures[parts[0].rstrip(":")] = int(parts[1])
    except OSError:
        pass
    return figures


def one_run(prefill: int, blocks: int, runs: int, mapping_off: bool, steady: bool, run: int = 16) -> dict:
    from tstream.engine import _window

    if mapping_off:
        if not hasattr(_window, "_set_mapping"):
            raise SystemExit("this build maps no table: no -off arm")
        _window._set_mapping(1 << 62, False)
    window = _window.Window()
    record = run if steady else 128
    for start in range(0, prefill, record):
        window.add([b"pre-%d" % i for i in range(start, min(start + record, prefill))], start + 1, 1 + start // record)
    offset = prefill + 1
    now = 1 + prefill // record + 1
    # (steady: a record of ``run`` ids a nanosecond, and each claim's horizon ages the oldest out)
    span = now - 1 if steady else now
    block_ns: list[float] = []
    total_ns = 0
    for _ in range(blocks):
        block = [tuple(b"id-%d" % i for i in range(offset + run * r, offset + run * r + run)) for r in range(runs)]
        claim = window.claim
        started = time.thread_time_ns()
        for ids in block:
            claim(ids, offset, now - span, now)
            offset += run
            now += steady
        elapsed = time.thread_time_ns() - started
        total_ns += elapsed
        block_ns.append(elapsed / (run * runs))
    assert len(window) == (prefill if steady else prefill + run * runs * blocks), "a claim was refused"
    memory = smaps_rollup()
    if hasattr(_window, "_layout"):
        mapped = _window._layout(window)["table_mapped"]
    else:  # (a build before session 38's, or before round 16's: none)
        mapped = _window._table_mapping(window) if hasattr(_window, "_table_mapping") else 0
    return {
        "ns_per_id": total_ns / (run * runs * blocks),
        "block_median_ns": statistics.median(block_ns),
        "rss_kb": memory.get("Rss", 0),
        "anon_huge_kb": memory.get("AnonHugePages", 0),
        "table_mapped_kb": mapped // 1024,
        "ids": len(window),
    }


def compare(arms: list[str], rounds: int, extra: list[str]) -> None:
    script = os.path.abspath(__file__)
    results: dict[str, list[dict]] = {arm: [] for arm in arms}
    print(f"{'round':>5} {'arm':<40} {'load1':>5} {'ns/id':>7} {'block med':>9} {'RSS MiB':>8} "
          f"{'AnonHuge MiB':>12} {'mapped MiB':>10}")
    for r in range(rounds):
        order = arms if r % 2 == 0 else list(reversed(arms))
        for arm in order:
            python = os.path.abspath(arm.removesuffix("-off"))
            command = [python, script, "--json", *extra] + (["--mapping-off"] if arm.endswith("-off") else [])
            load = os.getloadavg()[0]
            # (cwd: the script's folder, so that each interpreter imports its own build's tree)
            output = subprocess.run(command, capture_output=True, text=True, check=True,
                                    cwd=os.path.dirname(script)).stdout
            figures = json.loads(output.strip().splitlines()[-1])
            figures["load"] = load
            results[arm].append(figures)
            print(f"{r + 1:>5} {arm:<40} {load:>5.2f} {figures['ns_per_id']:>7.1f} "
                  f"{figures['block_median_ns']:>9.1f} {figures['rss_kb'] / 1024:>8.1f} "
                  f"{figures['anon_huge_kb'] / 1024:>12.1f} {figures['table_mapped_kb'] / 1024:>10.1f}", flush=True)
    print()
    first = statistics.median(f["ns_per_id"] for f in results[arms[0]])
    for arm in arms:
        per_id = [f["ns_per_id"] for f in results[arm]]
        median = statistics.median(per_id)
        print(f"{arm:<40} median {median:6.1f} ns/id (min {min(per_id):.1f}, max {max(per_id):.1f}), "
              f"x{median / first:.3f} of the first arm")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefill", type=int, default=1_000_000, help="ids in the window before the claims")
    ap.add_argument("--blocks", type=int, default=25, help="blocks timed")
    ap.add_argument("--runs", type=int, default=500, help="claims a block")
    ap.add_argument("--run", type=int, default=16,
                    help="ids a claim (64: a pipelined window of bench/fast_ingest.py; give --runs 125 to claim as many ids)")
    ap.add_argument("--steady", action="store_true",
                    help="records of --run ids, each claim ageing the oldest out: the window stays at --prefill")
    ap.add_argument("--mapping-off", action="store_true", help="this build's table on PyMem_Calloc (no huge pages)")
    ap.add_argument("--json", action="store_true", help="one JSON line (what --compare reads)")
    ap.add_argument("--compare", nargs="+", metavar="PYTHON", help="interpreters to alternate")
    ap.add_argument("--arms", help="comma-separated arms (default: the --compare interpreters; PY-off: mapping off)")
    ap.add_argument("--rounds", type=int, default=9, help="alternations (with --compare)")
    args = ap.parse_args()
    if not args.steady and args.blocks * args.runs * args.run + args.prefill >= 1_468_006 and args.prefill >= 734_004:
        print("note: the table grows during the claims (a rehash is timed)", file=sys.stderr)
    if args.compare:
        arms = args.arms.split(",") if args.arms else args.compare
        extra = ["--prefill", str(args.prefill), "--blocks", str(args.blocks), "--runs", str(args.runs),
                 "--run", str(args.run)]
        extra += ["--steady"] if args.steady else []
        compare(arms, args.rounds, extra)
        return
    figures = one_run(args.prefill, args.blocks, args.runs, args.mapping_off, args.steady, args.run)
    if args.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name}: {value:.1f}" if isinstance(value, float) else f"{name}: {value}")


if __name__ == "__main__":
    main()
