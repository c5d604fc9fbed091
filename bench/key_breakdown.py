#!/usr/bin/env python3
"""Where the bytes of a key go: bench/scale.py's load, in-process, under tracemalloc.

Starts an embedded server (``ServerThread``, persistence off), sends it the load of
bench/scale.py (``--keys`` keys of one entry, 1 in ``--age-every`` with a
``max_age_ms``, 1 in ``--group-every`` with a consumer group and a pending entry)
over TCP, then reports the bytes Python allocated per key (tracemalloc: what is
still allocated after the load, so request garbage does not count) grouped by the
source line that allocated them, and the RSS growth per key.  ``--no-trace``:
RSS only (tracemalloc itself costs memory and time).

    .venv/bin/python bench/key_breakdown.py [--keys 100000] [--top 25]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Client  # noqa: E402
from scale import load_payload  # noqa: E402

from tstream.server.embed import ServerThread  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--age-every", type=int, default=10)
    ap.add_argument("--group-every", type=int, default=100)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--frames", type=int, default=1, help="traceback depth to group by")
    args = ap.parse_args()
    chunks = load_payload("tstream", args.keys, args.age_every, args.group_every)
    with ServerThread(port=0, save="", appendonly=False) as srv:
        client = Client(srv.port)
        client.execute("PING")
        gc.collect()
        if not args.no_trace:
            tracemalloc.start(args.frames)
        before = rss_bytes()
        snap0 = tracemalloc.take_snapshot() if not args.no_trace else None
        t0 = time.perf_counter()
        for data, n in chunks:
            client.send(data)
            client.read_replies(n, check=True)
        elapsed = time.perf_counter() - t0
        client.execute("PING")
        gc.collect()
        grown = rss_bytes() - before
        print(f"{args.keys:,} keys loaded in {elapsed:.1f} s; RSS growth {grown / args.keys:,.0f} B/key"
              + (" (with tracemalloc)" if not args.no_trace else ""))
        if not args.no_trace:
            snap1 = tracemalloc.take_snapshot()
            traced = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            stats = snap1.compare_to(snap0, "traceback" if args.frames > 1 else "lineno")
            total = sum(s.size_diff for s in stats)
            print(f"allocated and kept: {total / args.keys:,.1f} B/key (traced now {traced:,} B)")
            for s in stats[:args.top]:
                where = " <- ".join(f"{os.path.relpath(f.filename)}:{f.lineno}"
                                    for f in s.traceback[:args.frames])
                print(f"{s.size_diff / args.keys:8.1f} B/key {s.count_diff / args.keys:6.2f} blocks/key  {where}")
        client.close()


if __name__ == "__main__":
    main()
