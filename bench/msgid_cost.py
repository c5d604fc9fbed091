#!/usr/bin/env python3
"""MSGID's extra server CPU a message, in process, with a window of ~1M ids: the thread
CPU time of pipelined ``TWRITE key tag entry`` and ``TWRITE ... MSGID id`` reads, and of
MSGID reads with the stream's window taken out (``stub``: its ``claim`` a C builtin that
does nothing), so that the window's share and the rest are told apart.

    .venv/bin/python bench/msgid_cost.py                     # one run, this build
    .venv/bin/python bench/msgid_cost.py --compare /tmp/s37/main/.venv/bin/python .venv/bin/python

One run: bench/ingest_cost.py's ``Shapes`` (an embedded server, the AOF on with
``appendfsync no``, reads of 64 commands fed through ``data_received`` on a fake
transport and the end of the loop turn run, as bench/ingest_cost.py measures them);
the MSGID stream's duplicate window set to a day (``--window-ms``); ``--prefill`` messages of each shape
first (750,000: the window's table at 2^21 slots, where it stays up to 1,468,006 ids,
so no round pays for a rehash; bench/fast_ingest.py's later slices run with 0.5-1M
ids); then ``--rounds`` rounds of ``--reads`` reads of each kind, in an order reversed
every round, each timed with ``time.thread_time_ns``.  Printed: the medians (ns a
message) of twrite, msgid and stub, and of the paired extras (msgid - twrite: MSGID's
extra; msgid - stub: the window's part; stub - twrite: the rest: the parse of two more
words, the ids' objects, the run's Python, the INGEST record's ids in the AOF).

``--compare PY...``: a fresh process of each interpreter in turn (each imports its own
build's tree), the order swapped every round, ``--runs`` times; every run listed, then
the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KINDS = ("twrite", "msgid", "stub")


class NoWindow:
    """A window whose claim does nothing (a C builtin taking four arguments and giving
    something true, so that no Python frame is added)."""

    claim = itertools.chain


def one_run(prefill: int, rounds: int, reads: int, window_ms: int = 86_400_000) -> dict:
    sys.path.insert(0, str(HERE))
    import ingest_cost

    per = ingest_cost.PER_READ
    figures: dict[str, list[float]] = {kind: [] for kind in KINDS}

    async def main() -> None:
        with tempfile.TemporaryDirectory(prefix="msgid-cost-") as directory:
            shapes = ingest_cost.Shapes(directory)
            shapes.set_msgid_window(window_ms)
            for shape in ("twrite", "msgid"):
                for done in range(0, prefill, per * 256):
                    shapes.run(shape, shapes.reads(shape, max(1, min(256, (prefill - done) // per))))
            ingest = shapes.server.streams.get(b"cost:msgid")._ingest
            window = ingest.window
            for r in range(rounds):
                for kind in KINDS if r % 2 == 0 else KINDS[::-1]:
                    shape = "twrite" if kind == "twrite" else "msgid"
                    data = shapes.reads(shape, reads)
                    ingest.window = NoWindow if kind == "stub" else window
                    started = time.thread_time_ns()
                    shapes.run(shape, data)
                    figures[kind].append((time.thread_time_ns() - started) / (reads * per))
            ingest.window = window

    asyncio.run(main())
    pairs = {
        "extra": [m - t for m, t in zip(figures["msgid"], figures["twrite"])],
        "window": [m - s for m, s in zip(figures["msgid"], figures["stub"])],
        "rest": [s - t for s, t in zip(figures["stub"], figures["twrite"])],
    }
    result = {kind: statistics.median(values) for kind, values in figures.items()}
    result.update({name: statistics.median(values) for name, values in pairs.items()})
    return result


def compare(pythons: list[str], runs: int, extra: list[str]) -> None:
    script = str(Path(__file__).resolve())
    results: dict[str, list[dict]] = {python: [] for python in pythons}
    names = ("twrite", "msgid", "stub", "extra", "window", "rest")
    print(f"{'run':>3} {'build':<40} {'load1':>5} " + " ".join(f"{n:>7}" for n in names))
    for r in range(runs):
        for python in pythons if r % 2 == 0 else pythons[::-1]:
            load = os.getloadavg()[0]
            output = subprocess.run([os.path.abspath(python), script, "--json", *extra], capture_output=True, text=True, check=True,
                                    cwd=str(HERE)).stdout
            figures = json.loads(output.strip().splitlines()[-1])
            results[python].append(figures)
            print(f"{r + 1:>3} {python:<40} {load:>5.2f} " + " ".join(f"{figures[n]:>7.1f}" for n in names),
                  flush=True)
    print()
    for python in pythons:
        print(f"{python:<40} medians: " + ", ".join(
            f"{n} {statistics.median(f[n] for f in results[python]):.1f}" for n in names))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefill", type=int, default=750_000, help="messages of each shape before the rounds")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--reads", type=int, default=300, help="reads of 64 a kind and round")
    ap.add_argument("--window-ms", type=int, default=86_400_000,
                    help="the MSGID stream's duplicate window (a day: nothing expires; 1000: the window holds "
                         "the last second's ids, and each claim also ages ids out)")
    ap.add_argument("--json", action="store_true", help="one JSON line (what --compare reads)")
    ap.add_argument("--compare", nargs="+", metavar="PYTHON", help="interpreters to alternate")
    ap.add_argument("--runs", type=int, default=5, help="alternations (with --compare)")
    args = ap.parse_args()
    extra = ["--prefill", str(args.prefill), "--rounds", str(args.rounds), "--reads", str(args.reads),
             "--window-ms", str(args.window_ms)]
    if args.compare:
        compare(args.compare, args.runs, extra)
        return
    figures = one_run(args.prefill, args.rounds, args.reads, args.window_ms)
    if args.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name}: {value:.1f} ns a message")


if __name__ == "__main__":
    main()
