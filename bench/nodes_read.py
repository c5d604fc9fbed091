#!/usr/bin/env python3
"""Reading a whole stream into Arrow: through TNODES (nodes as stored, decoded
by the reader), through TREAD pages (the server builds every entry), and from
the snapshot file with no server (the offline reader); 1 and 2 readers.

Issue #18 asks for a server-backed read >= 0.8x the offline snapshot read and
>= 1.5x faster with 2 readers than with 1.  This measures the mechanism
without Spark (each reader is a process doing what a Spark task does:
``pipeline.nodes_read.read_nodes``, ``pipeline.offline.read``, or TREAD pages
turned into Arrow), so the figures show where the time goes; the ratios are
of runs of the same round, rounds interleaved, every run listed.

    .venv/bin/python bench/nodes_read.py [--entries 1000000] [--rounds 5] [--out FILE|-]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ServerProcess, loadavg, machine_facts, script_command  # noqa: E402

KEY = "bench:nodes"


def fill(port: int, entries: int) -> None:
    import redis

    c = redis.Redis(port=port)
    batch = 1000
    for start in range(0, entries, batch):
        words = []
        for i in range(start, min(start + batch, entries)):
            words += [f"tag{i % 1000}", f'{{"id": {i}, "user": "u{i % 5000}", "action": "click", "page": "/p/{i % 97}"}}']
        c.execute_command("TWRITE", KEY, "ENTRIES", *words)
    c.execute_command("SAVE")
    c.close()


def _count_tnodes(port: int, lo: int, hi: int, queue, read_ahead: bool = True) -> None:
    import redis

    from tstream.pipeline.nodes_read import read_nodes
    c = redis.Redis(port=port)
    started = time.perf_counter()
    rows = sum(batch.num_rows for batch in read_nodes(c, KEY, lo, hi, read_ahead=read_ahead))
    queue.put((rows, time.perf_counter() - started))


def _count_tnodes_serial(port: int, lo: int, hi: int, queue) -> None:
    """TNODES one call at a time (no request in flight while a reply is decoded)."""
    _count_tnodes(port, lo, hi, queue, read_ahead=False)


def _count_tread(port: int, lo: int, hi: int, queue) -> None:
    import pyarrow as pa
    import redis

    c = redis.Redis(port=port)
    started = time.perf_counter()
    rows = 0
    page = 10_000
    at = lo
    while at <= hi:
        got = c.execute_command("TREAD", KEY, at, min(page, hi - at + 1))
        if not got:
            break
        batch = pa.RecordBatch.from_pydict({"offset": [e[0] for e in got], "tag": [e[1] for e in got],
                                            "entry": [e[2] for e in got]})
        rows += batch.num_rows
        at = got[-1][0] + 1
    queue.put((rows, time.perf_counter() - started))


def _count_offline(path: str, lo: int, hi: int, queue) -> None:
    from tstream.pipeline import offline
    from tstream.pipeline.common import Options

    started = time.perf_counter()
    options = Options.parse({"path": path, "key": KEY, "startingOffset": str(lo), "endingOffset": str(hi)})
    rows = 0
    for part in offline.plan(options):
        rows += sum(batch.num_rows for batch in offline.read(part))
    queue.put((rows, time.perf_counter() - started))


def run(kind: str, readers: int, port: int, path: str, entries: int) -> float:
    """Rows per second of ``readers`` processes reading the stream's halves at once."""
    target = {"tnodes": _count_tnodes, "tnodes-serial": _count_tnodes_serial, "tread": _count_tread,
              "offline": _count_offline}[kind]
    queue: mp.Queue = mp.Queue()
    bounds = [1 + entries * i // readers for i in range(readers + 1)]
    procs = [mp.Process(target=target, args=(path if kind == "offline" else port, a, b - 1, queue))
             for a, b in zip(bounds, bounds[1:])]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    rows = sum(r for r, _ in results)
    if rows != entries:
        raise SystemExit(f"{kind} x{readers}: read {rows} rows, expected {entries}")
    # Each reader times its own read, after its imports (a Spark task's worker is
    # warm): the readers run at once, so the slowest one's time is the read's.
    return rows / max(elapsed for _, elapsed in results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    load_start = loadavg()
    cases = [("offline", 1), ("tnodes", 1), ("tnodes-serial", 1), ("tnodes", 2), ("tread", 1), ("tread", 2),
             ("offline", 2)]
    runs: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
    with ServerProcess("tstream") as server:
        fill(server.port, args.entries)
        path = os.path.join(server.dir, "dump.tsr")
        copy = path + ".copy"  # the offline reader reads a copy, as docs/spark.md advises for a live server
        with open(path, "rb") as src, open(copy, "wb") as dst:
            dst.write(src.read())
        facts = machine_facts(server)
        for r in range(args.rounds):
            order = cases if r % 2 == 0 else cases[::-1]
            for case in order:
                rate = run(case[0], case[1], server.port, copy, args.entries)
                runs[case].append(rate)
                print(f"round {r + 1} {case[0]} x{case[1]}: {rate:,.0f} rows/s", flush=True)
    med = {case: statistics.median(values) for case, values in runs.items()}
    ratios = [[runs[("tnodes", 1)][i] / runs[("offline", 1)][i] for i in range(args.rounds)],
              [runs[("tnodes", 2)][i] / runs[("tnodes", 1)][i] for i in range(args.rounds)],
              [runs[("tnodes", 1)][i] / runs[("tread", 1)][i] for i in range(args.rounds)],
              [runs[("tnodes-serial", 1)][i] / runs[("offline", 1)][i] for i in range(args.rounds)],
              [runs[("tnodes", 1)][i] / runs[("tnodes-serial", 1)][i] for i in range(args.rounds)]]
    lines = [
        "# Reading a stream into Arrow: TNODES, TREAD pages, the snapshot file",
        "",
        f"- command: `{script_command()}`",
        f"- machine: {facts}",
        f"- load average at start: {load_start}; at end: {loadavg()}",
        f"- {args.entries:,} entries (1,000 tags, ~80-byte JSON payloads), one stream; each reader a "
        "process; rounds interleaved (order reversed every other round)",
        "",
        "| reader | readers | rows/s (median) | every run |",
        "| --- | ---: | ---: | --- |",
        *[f"| {kind} | {n} | {med[(kind, n)]:,.0f} | {', '.join(f'{v:,.0f}' for v in runs[(kind, n)])} |"
          for kind, n in cases],
        "",
        "| same-run ratio | median | every run | target |",
        "| --- | ---: | --- | --- |",
        f"| TNODES / offline snapshot read, 1 reader | {statistics.median(ratios[0]):.2f}x | "
        f"{', '.join(f'{v:.2f}' for v in ratios[0])} | >= 0.8x |",
        f"| TNODES 2 readers / 1 reader | {statistics.median(ratios[1]):.2f}x | "
        f"{', '.join(f'{v:.2f}' for v in ratios[1])} | >= 1.5x |",
        f"| TNODES / TREAD pages, 1 reader | {statistics.median(ratios[2]):.2f}x | "
        f"{', '.join(f'{v:.2f}' for v in ratios[2])} | |",
        f"| TNODES one call at a time / offline, 1 reader | {statistics.median(ratios[3]):.2f}x | "
        f"{', '.join(f'{v:.2f}' for v in ratios[3])} | |",
        f"| TNODES read-ahead / one call at a time, 1 reader | {statistics.median(ratios[4]):.2f}x | "
        f"{', '.join(f'{v:.2f}' for v in ratios[4])} | |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out != "-":
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
