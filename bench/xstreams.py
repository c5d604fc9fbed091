#!/usr/bin/env python3
"""The Redis Streams commands through tstream and through redis-server: the same commands, both servers.

Three measures (issue #15's targets), every case run ``--repeat`` times with the
servers interleaved (redis, tstream, redis, ...), medians and every run listed:

1. **XADD throughput**: ``redis-benchmark -c 50 XADD bench:x * field value``,
   unpipelined and ``-P 16``; target tstream >= 0.8x redis.
2. **Consumer loop**: ``--entries`` entries are written first (pipelined XADD,
   untimed); then ``--consumers`` processes of one group each loop
   ``XREADGROUP GROUP g c<i> COUNT 10 STREAMS k >`` followed by ``XACK k g
   <the ten ids>`` until the group has nothing left; entries/s from the first
   read to the last ack; target tstream >= 0.8x redis.  The run checks that
   every entry was acknowledged exactly once (the ids consumers saw are all
   distinct and as many as written) and that the group has no pending entry.
3. **Memory per entry**: ``--mem-entries`` entries written with XADD (the same
   five field-value pairs, ids by the server), memory growth per entry
   measured as the server process's RSS growth (the same method for both;
   redis's ``used_memory`` growth is printed beside it); target tstream <= 0.6x
   redis.

Raw sockets (bench/common.Client, hiredis) in every client: as little client
overhead as Python allows.  Starts its own servers on free loopback ports with
persistence off, and always stops them.

    .venv/bin/python bench/xstreams.py [--repeat 5] [--out FILE|-]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REDIS_BENCHMARK, Client, encode, loadavg, machine_facts, save_result, script_command, servers  # noqa: E402
from throughput import benchmark_argv, run_benchmark  # noqa: E402

KEY = "bench:x"
GROUP = "g"
FIELDS = ["user", "u123456", "action", "click", "page", "/products/42", "ms", "1732400000000",
          "ref", "campaign-7"]
TARGETS = {"xadd": 0.8, "loop": 0.8, "memory": 0.6}


# --- 1. XADD under redis-benchmark --------------------------------------------------------

def xadd_rps(server, n: int, pipeline: int, clients: int) -> float:
    c = server.client()
    c.execute("DEL", KEY)
    c.close()
    argv = benchmark_argv(server.port, clients, n, pipeline, ["XADD", KEY, "*", "field", "value"])
    return run_benchmark(argv, timeout=600)["rps"]


# --- 2. the consumer loop ------------------------------------------------------------------

def fill(port: int, entries: int) -> None:
    c = Client(port)
    c.execute("DEL", KEY)
    c.execute("XGROUP", "CREATE", KEY, GROUP, "$", "MKSTREAM")
    batch = 1000
    for start in range(0, entries, batch):
        count = min(batch, entries - start)
        c.send(b"".join(encode("XADD", KEY, "*", "seq", str(start + i), "payload", "x" * 100)
                        for i in range(count)))
        c.read_replies(count)
    c.close()


def consume(port: int, name: str, go, out) -> None:
    c = Client(port)
    go.wait()
    seen = []
    read = encode("XREADGROUP", "GROUP", GROUP, name, "COUNT", 10, "STREAMS", KEY, ">")
    while True:
        c.send(read)
        reply = c.read_reply()
        if not reply:
            break
        entries = reply[0][1]
        if not entries:
            break
        ids = [entry[0] for entry in entries]
        c.send(encode("XACK", KEY, GROUP, *ids))
        c.read_reply()
        seen.extend(ids)
    out.put((name, time.perf_counter(), seen))
    c.close()


def loop_rate(server, entries: int, consumers: int) -> float:
    fill(server.port, entries)
    ctx = mp.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=consume, args=(server.port, f"c{i}", go, out)) for i in range(consumers)]
    for p in procs:
        p.start()
    time.sleep(0.3)  # every consumer connected
    started = time.perf_counter()
    go.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(30)
    ended = max(r[1] for r in results)
    ids = [i for r in results for i in r[2]]
    if len(ids) != entries or len(set(ids)) != entries:
        raise RuntimeError(f"{server.kind}: {len(ids)} acknowledged ({len(set(ids))} distinct) of {entries}")
    c = server.client()
    pending = c.execute("XPENDING", KEY, GROUP)
    c.close()
    if pending[0] not in (0, b"0"):
        raise RuntimeError(f"{server.kind}: {pending[0]} entries still pending")
    return entries / (ended - started)


# --- 3. memory per entry -------------------------------------------------------------------

def memory_per_entry(server, entries: int) -> tuple[float, float]:
    c = server.client()
    c.execute("DEL", KEY)
    time.sleep(0.2)
    rss0 = server.rss_bytes()
    used0 = int(c.info("memory").get("used_memory", 0))
    batch = 1000
    command = encode("XADD", KEY, "*", *FIELDS)
    for start in range(0, entries, batch):
        count = min(batch, entries - start)
        c.send(command * count)
        c.read_replies(count)
    time.sleep(0.5)
    rss1 = server.rss_bytes()
    used1 = int(c.info("memory").get("used_memory", 0))
    if int(c.execute("XLEN", KEY)) != entries:
        raise RuntimeError(f"{server.kind}: XLEN is not {entries}")
    c.execute("DEL", KEY)
    c.close()
    return (rss1 - rss0) / entries, (used1 - used0) / entries


def target_of(case: str) -> str:
    if case.startswith("memory per entry, RSS"):
        return f"<= {TARGETS['memory']}x"
    if case.startswith("memory"):
        return "(reference)"
    return f">= {TARGETS['xadd' if case.startswith('XADD') else 'loop']}x"


def report(runs: dict, facts: dict, load_before: str) -> str:
    """The markdown table: medians, ratio, target and every run of each case."""
    lines = [f"# Redis Streams commands: tstream vs redis-server {facts.get('redis_version', '')}".rstrip(),
             "",
             f"Command: `{script_command()}` on {facts['date']}, {facts['nproc']} cores ({facts['cpu']}), "
             f"git {facts['git_commit']}{' (dirty)' if facts['git_dirty'] else ''}; "
             f"load average {load_before} before, {loadavg()} after.",
             "",
             "| measure | redis (median) | tstream (median) | tstream/redis | target | redis, every run "
             "| tstream, every run |",
             "| --- | ---: | ---: | ---: | --- | --- | --- |"]
    for case, by_kind in runs.items():
        r, t = statistics.median(by_kind["redis"]), statistics.median(by_kind["tstream"])
        ratio = t / r if r else float("nan")
        every_r = ", ".join(f"{v:,.0f}" for v in by_kind["redis"])
        every_t = ", ".join(f"{v:,.0f}" for v in by_kind["tstream"])
        lines.append(f"| {case} | {r:,.0f} | {t:,.0f} | {ratio:.2f}x | {target_of(case)} | {every_r} | {every_t} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--n", type=int, default=200_000, help="XADDs per unpipelined run")
    ap.add_argument("--n-pipelined", type=int, default=1_000_000, help="XADDs per -P 16 run")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--entries", type=int, default=100_000, help="entries per consumer-loop run")
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--mem-entries", type=int, default=1_000_000)
    ap.add_argument("--only", choices=["xadd", "loop", "memory"], action="append")
    ap.add_argument("--out", help="write the markdown here too ('-': stdout only)")
    args = ap.parse_args()
    only = set(args.only or ["xadd", "loop", "memory"])
    load_before = loadavg()
    runs: dict[str, dict[str, list[float]]] = {}

    def add(case: str, kind: str, value: float) -> None:
        runs.setdefault(case, {}).setdefault(kind, []).append(value)
        print(f"  {case}: {kind} {value:,.1f}", file=sys.stderr, flush=True)

    with servers(("redis", []), ("tstream", [])) as (redis_server, tstream_server):
        facts = machine_facts(tstream_server, redis_server)
        for _ in range(args.repeat):
            for server in (redis_server, tstream_server):
                if "xadd" in only:
                    add("XADD, unpipelined (requests/s)", server.kind,
                        xadd_rps(server, args.n, 1, args.clients))
                    add("XADD, -P 16 (requests/s)", server.kind,
                        xadd_rps(server, args.n_pipelined, 16, args.clients))
                if "loop" in only:
                    add(f"XREADGROUP COUNT 10 + XACK, {args.consumers} consumers (entries/s)", server.kind,
                        loop_rate(server, args.entries, args.consumers))
    if "memory" in only:
        for _ in range(max(1, min(args.repeat, 3))):
            # Fresh servers each round: memory freed by a DEL is reused, not returned to the system.
            with servers(("redis", []), ("tstream", [])) as pair:
                for server in pair:
                    rss, used = memory_per_entry(server, args.mem_entries)
                    add("memory per entry, RSS growth (bytes)", server.kind, rss)
                    add("memory per entry, used_memory growth (bytes)", server.kind, used)
    text = report(runs, facts, load_before)
    print(text)
    if args.out and args.out != "-":
        Path(args.out).write_text(text)
    save_result("xstreams", {"facts": facts, "command": script_command(), "runs": runs,
                             "redis_benchmark": REDIS_BENCHMARK})
    return 0


if __name__ == "__main__":
    sys.exit(main())
