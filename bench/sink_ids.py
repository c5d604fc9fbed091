#!/usr/bin/env python3
"""What exactly-once costs the Spark sink: a task's rows written by
``pipeline.sink.write_rows`` (what a Spark task runs, without Spark) as plain
``TWRITE key ENTRIES`` chunks (``exactlyOnce=false``) and as ``TWRITE key
MSGIDS ... ENTRIES`` chunks (the default: one message id per row), into a fresh
stream each run; rounds interleaved (order reversed every other round), every
run listed.

    flock /tmp/tstream-bench.lock .venv/bin/python bench/sink_ids.py [--rows 200000] [--rounds 5] [--out FILE|-]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ServerProcess, loadavg, machine_facts, script_command  # noqa: E402


def batches(rows: int, size: int = 10_000):
    import pyarrow as pa

    for lo in range(0, rows, size):
        hi = min(lo + size, rows)
        yield pa.record_batch([pa.array([f"tag{i % 100}" for i in range(lo, hi)]),
                               pa.array([b'{"id": %d, "user": "u%d", "action": "click"}' % (i, i % 5000)
                                         for i in range(lo, hi)])], names=["tag", "entry"])


def write(port: int, key: str, rows: int, ids: bool) -> float:
    from tstream.pipeline.common import Options
    from tstream.pipeline.sink import write_prefix, write_rows

    options = Options.parse({"url": f"redis://127.0.0.1:{port}", "key": key, "exactlyOnce": str(ids).lower()})
    data = list(batches(rows))
    started = time.perf_counter()
    message = write_rows(options, iter(data), prefix=write_prefix(key.replace(":", ""), 7) if ids else None,
                         partition=3)
    elapsed = time.perf_counter() - started
    assert message.rows == rows
    return rows / elapsed


def main() -> None:
    import redis

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    load_start = loadavg()
    runs: dict[str, list[float]] = {"plain": [], "ids": []}
    with ServerProcess("tstream") as server:
        c = redis.Redis(port=server.port)
        facts = machine_facts(server)
        for r in range(args.rounds):
            order = ["plain", "ids"] if r % 2 == 0 else ["ids", "plain"]
            for kind in order:
                key = f"sink:{kind}:{r}"
                rate = write(server.port, key, args.rows, kind == "ids")
                runs[kind].append(rate)
                print(f"round {r + 1} {kind}: {rate:,.0f} rows/s", flush=True)
                c.delete(key)
    ratios = [i / p for i, p in zip(runs["ids"], runs["plain"])]
    lines = [
        "# The Spark sink: exactly once (message ids) against plain chunks",
        "",
        f"- command: `{script_command()}`",
        f"- machine: {facts}",
        f"- load average at start: {load_start}; at end: {loadavg()} (a shared machine: other jobs ran)",
        f"- {args.rows:,} rows (~45-byte JSON entries, 100 tags) per run, one task (`write_rows`), "
        "chunks of 500 rows; each run into a new stream",
        "",
        "| sink | rows/s (median) | every run |",
        "| --- | ---: | --- |",
        *[f"| {kind} | {statistics.median(v):,.0f} | {', '.join(f'{x:,.0f}' for x in v)} |"
          for kind, v in (("TWRITE ENTRIES (exactlyOnce=false)", runs["plain"]),
                          ("TWRITE MSGIDS ... ENTRIES (exactly once)", runs["ids"]))],
        "",
        "| same-run ratio | median | every run |",
        "| --- | ---: | --- |",
        f"| exactly once / plain | {statistics.median(ratios):.2f}x | {', '.join(f'{x:.2f}' for x in ratios)} |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out != "-":
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
