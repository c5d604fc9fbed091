#!/usr/bin/env python3
"""Two tstream builds against redis-server, interleaved: did a change cost speed?

Runs bench/throughput.py (TWRITE vs XADD, unpipelined and ``-P 16``) and
bench/groups.py (the consumer-group loop) once per round for each build, in the
order A B B A A B ..., each run against its own redis-server started in the same
run, and reports every run's tstream/redis ratio and the median per build.  Same-run
ratios cancel most of what a shared machine does to absolute figures.

    .venv/bin/python bench/before_after.py --before /path/to/old/.venv/bin/tstream-server \\
        [--after .venv/bin/tstream-server] [--rounds 5] [--out bench/RESULTS-before-after.md]

A build is a ``tstream-server`` executable (a venv of a checkout of that commit).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import loadavg, machine_facts

HERE = Path(__file__).resolve().parent


def run_throughput(server: str, n: int, n_pipelined: int) -> dict[str, float]:
    """tstream/redis ratio per pipeline depth, from one throughput.py run."""
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, TSTREAM_SERVER=server, TSTREAM_BENCH_OUT=out)
        subprocess.run([sys.executable, str(HERE / "throughput.py"), "--repeat", "1", "--no-ceiling",
                        "--n", str(n), "--n-pipelined", str(n_pipelined)],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        result = json.loads(next(Path(out).rglob("throughput.json")).read_text())
    ratios = {}
    for case in result["cases"]:
        runs = case["runs"]
        ratios[f"TWRITE/XADD -P {case['pipeline']}" if case["pipeline"] > 1 else "TWRITE/XADD unpipelined"] = \
            runs["tstream"][0]["rps"] / runs["redis"][0]["rps"]
    return ratios


THROUGHPUT_LINE = re.compile(r"throughput (\w+) run \d+: ([\d,]+) msgs/s")


def run_groups(server: str, n: int) -> dict[str, float]:
    """tstream/redis ratio of the consumer-group loop, from one groups.py run."""
    env = dict(os.environ, TSTREAM_SERVER=server)
    done = subprocess.run([sys.executable, str(HERE / "groups.py"), "--repeat", "1", "--skip-latency",
                           "--n", str(n), "--out", "-"], env=env, check=True, capture_output=True, text=True)
    rates = {kind: float(rate.replace(",", "")) for kind, rate in THROUGHPUT_LINE.findall(done.stdout)}
    return {"group loop vs XREADGROUP+XACK": rates["tstream"] / rates["redis"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="tstream-server of the old build")
    ap.add_argument("--after", default=str(Path(sys.executable).parent / "tstream-server"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=200_000, help="unpipelined TWRITEs per run")
    ap.add_argument("--n-pipelined", type=int, default=1_000_000, help="-P 16 TWRITEs per run")
    ap.add_argument("--group-n", type=int, default=15_000, help="messages per producer per group run")
    ap.add_argument("--out", default="-", help="markdown file to write ('-': print only)")
    args = ap.parse_args()

    builds = {"before": args.before, "after": args.after}
    runs: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    load_start = loadavg()
    for rnd in range(args.rounds):
        order = ["before", "after"] if rnd % 2 == 0 else ["after", "before"]
        for label in order:
            ratios = run_throughput(builds[label], args.n, args.n_pipelined)
            ratios.update(run_groups(builds[label], args.group_n))
            for name, ratio in ratios.items():
                runs[label].setdefault(name, []).append(ratio)
            print(f"round {rnd + 1} {label}: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()), flush=True)
    load_end = loadavg()

    lines = ["# Before and after: same-run ratios against redis-server", "",
             f"- before: `{args.before}`", f"- after: `{args.after}`",
             f"- machine: {json.dumps(machine_facts())}",
             f"- load average at start: {load_start}; at end: {load_end}",
             f"- {args.rounds} rounds, builds interleaved (A B, B A, ...); each run has its own redis-server", "",
             "| measure | before (median) | after (median) | after/before | before, every run | after, every run |",
             "| --- | ---: | ---: | ---: | --- | --- |"]
    for name in runs["before"]:
        b, a = runs["before"][name], runs["after"][name]
        mb, ma = statistics.median(b), statistics.median(a)
        lines.append(f"| {name} | {mb:.2f}x | {ma:.2f}x | {ma / mb:.2f} | "
                     f"{', '.join(f'{x:.2f}' for x in b)} | {', '.join(f'{x:.2f}' for x in a)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out != "-":
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
