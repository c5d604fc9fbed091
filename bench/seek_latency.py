#!/usr/bin/env python3
"""Seek latency: ``TREAD key <offset> 10`` at random offsets of a 10M-entry log vs at its head.

The log is written first with pipelined ``TWRITE key ENTRIES ...`` batches of 1000 small
entries (8-byte tags, 16-byte payloads); the load time is reported. Then one client sends
TREADs one at a time (no pipelining) on a plain socket, alternating a random offset over
the whole log (almost always a different, sealed and compressed macro node), an offset
among the newest 1000 entries (the open head node) and a PING (the round-trip floor), and
times each request round trip.
Reported: p50/p90/p99 in microseconds for each and the ratio random/head.

    .venv/bin/python bench/seek_latency.py [--entries 10000000] [--requests 5000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from common import as_map, encode, machine_facts, percentile, save_result, script_command, servers, sigterm_as_exit

KEY = b"bench:seek"
TAGS = [b"$8\r\ntag%05d\r\n" % t for t in range(1000)]


def batch_command(start: int, size: int) -> bytes:
    """TWRITE KEY ENTRIES with ``size`` entries whose payloads are their 0-based index."""
    head = b"*%d\r\n$6\r\nTWRITE\r\n$%d\r\n%s\r\n$7\r\nENTRIES\r\n" % (3 + 2 * size, len(KEY), KEY)
    return head + b"".join([TAGS[i % 1000] + b"$16\r\n%016d\r\n" % i for i in range(start, start + size)])


def load(client, entries: int, batch: int, window: int, max_seconds: float) -> tuple[int, float, bool]:
    """Write up to ``entries`` entries; stops early past ``max_seconds``. Returns (written, seconds, cut)."""
    t0 = time.perf_counter()
    sent = outstanding = written = 0
    expect = []
    cut = False
    last_report = t0
    while written < entries:
        while sent < entries and outstanding < window and not cut:
            size = min(batch, entries - sent)
            client.send(batch_command(sent, size))
            expect.append(sent + 1)
            sent += size
            outstanding += 1
        if outstanding == 0:
            break
        reply = client.read_reply()
        want = expect.pop(0)
        if reply != want:
            raise RuntimeError(f"TWRITE replied offset {reply}, expected {want}")
        outstanding -= 1
        written = (expect[0] - 1) if expect else sent
        now = time.perf_counter()
        if now - last_report > 10:
            print(f"  loaded {written:,} entries in {now - t0:.0f} s ({written / (now - t0):,.0f}/s)", flush=True)
            last_report = now
        if now - t0 > max_seconds:
            cut = True
    return written, time.perf_counter() - t0, cut


def summarize(samples_ns: list[int]) -> dict:
    s = sorted(x / 1000.0 for x in samples_ns)
    return {"n": len(s), "p50_us": percentile(s, 50), "p90_us": percentile(s, 90),
            "p99_us": percentile(s, 99), "mean_us": sum(s) / len(s), "max_us": s[-1]}


def main() -> int:  # noqa: C901 (over the limit when it came in)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=1000, help="entries per TWRITE ENTRIES")
    ap.add_argument("--window", type=int, default=8, help="TWRITE commands in flight while loading")
    ap.add_argument("--requests", type=int, default=5000, help="timed TREADs of each kind")
    ap.add_argument("--warmup", type=int, default=500, help="untimed TREADs of each kind first")
    ap.add_argument("--count", type=int, default=10, help="TREAD count")
    ap.add_argument("--max-write-seconds", type=float, default=300,
                    help="stop loading after this long and measure the log as it is")
    ap.add_argument("--node-entries", type=int, default=None, help="tstream --node-entries (default: its own)")
    args = ap.parse_args()
    sigterm_as_exit()
    extra = ["--node-entries", str(args.node_entries)] if args.node_entries else []

    result = {"benchmark": "seek_latency", "command": script_command(), "count": args.count}
    with servers(("tstream", extra)) as (ts,):
        result["machine"] = machine_facts(ts)
        result["servers"] = {"tstream": ts.command_line()}
        c = ts.client()
        rss0 = ts.rss_bytes()
        print(f"loading {args.entries:,} entries into tstream :{ts.port} ...", flush=True)
        written, load_s, cut = load(c, args.entries, args.batch, args.window, args.max_write_seconds)
        tinfo = as_map(c.execute("TINFO", KEY))
        last = int(tinfo["last"])
        if last != written:
            raise RuntimeError(f"TINFO last {last} after writing {written}")
        result["load"] = {"requested_entries": args.entries, "entries": written, "seconds": round(load_s, 1),
                          "entries_per_s": written / load_s, "cut_short": cut, "batch": args.batch,
                          "tinfo_bytes": int(tinfo["bytes"]), "nodes": int(tinfo.get("nodes", 0) or 0),
                          "rss_growth": ts.rss_bytes() - rss0}
        print(f"loaded {written:,} entries in {load_s:.1f} s ({written / load_s:,.0f}/s)"
              f"{' (CUT SHORT by --max-write-seconds)' if cut else ''}; TINFO nodes={tinfo.get('nodes')} "
              f"bytes={tinfo.get('bytes')}", flush=True)

        rng = random.Random(42)
        hi = last - args.count + 1  # the highest start that still returns `count` entries
        head_lo = max(1, last - 999)

        def offsets(n):
            return [(rng.randint(1, hi), rng.randint(head_lo, hi)) for _ in range(n)]

        sock, reader = c.sock, c.reader
        samples = {"random": [], "head": [], "ping": []}

        def timed_read(offset: int, kind: str | None) -> None:
            cmd = encode(b"TREAD", KEY, offset, args.count)
            t0 = time.perf_counter_ns()
            sock.sendall(cmd)
            reply = reader.gets()
            while reply is False:
                reader.feed(sock.recv(1 << 16))
                reply = reader.gets()
            t1 = time.perf_counter_ns()
            if not isinstance(reply, list) or len(reply) != args.count or reply[0][0] != offset:
                raise RuntimeError(f"TREAD {offset} {args.count} replied {reply!r:.200}")
            if reply[0][2] != b"%016d" % (offset - 1):
                raise RuntimeError(f"TREAD {offset}: wrong entry {reply[0]!r}")
            if kind:
                samples[kind].append(t1 - t0)

        ping = encode(b"PING")

        def timed_ping(kind: str | None) -> None:
            t0 = time.perf_counter_ns()
            sock.sendall(ping)
            reply = reader.gets()
            while reply is False:
                reader.feed(sock.recv(1 << 16))
                reply = reader.gets()
            t1 = time.perf_counter_ns()
            if reply != b"PONG":
                raise RuntimeError(f"PING replied {reply!r}")
            if kind:
                samples[kind].append(t1 - t0)

        for r, h in offsets(args.warmup):
            timed_read(r, None)
            timed_read(h, None)
            timed_ping(None)
        t0 = time.monotonic()
        for r, h in offsets(args.requests):
            timed_read(r, "random")
            timed_read(h, "head")
            timed_ping("ping")
        result["measure_seconds"] = round(time.monotonic() - t0, 1)
        c.close()

    stats = {k: summarize(v) for k, v in samples.items()}
    result["latency"] = stats
    result["ratio"] = {p: stats["random"][p] / stats["head"][p] for p in ("p50_us", "p90_us", "p99_us")}
    # Server-side share: the round trip less that of a PING on the same connection (median).
    base = stats["ping"]["p50_us"]
    result["p50_minus_ping_us"] = {k: stats[k]["p50_us"] - base for k in ("random", "head")}
    for k in ("random", "head", "ping"):
        s = stats[k]
        print(f"{k:6s}: p50 {s['p50_us']:7.1f} us  p90 {s['p90_us']:7.1f} us  p99 {s['p99_us']:7.1f} us  "
              f"(n={s['n']})")
    print(f"p50 less PING p50: random {result['p50_minus_ping_us']['random']:.1f} us, "
          f"head {result['p50_minus_ping_us']['head']:.1f} us")
    print("random/head: " + "  ".join(f"{p.split('_')[0]} {v:.2f}x" for p, v in result["ratio"].items()))
    path = save_result("seek_latency", result)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
