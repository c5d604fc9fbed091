#!/usr/bin/env python3
"""Scale and fairness: many keys, an idle server, a probe client, a 100k pipeline.

Per run, one server (tstream, then redis-server, alternating which goes first) is
started empty and:

1. *load*: ``--keys`` keys (``k:%012d``), one small entry each (``TWRITE k tag
   value`` / ``XADD k * tag value``, pipelined 10,000 at a time); on tstream a
   fraction of the keys get a ``max_age_ms`` (one hour: due times exist, nothing
   ages out during the run) and a smaller fraction a consumer group with a
   pending entry (``TREAD k 1 1 GROUP g RETRY 60000 3600000``); redis gets
   ``XGROUP CREATE`` on the same keys.  Memory per key is the RSS growth / keys;
   a probe process sends PINGs, one at a time every 2 ms, during the load;
2. *idle CPU*: the server's user+system CPU over ``--idle-seconds`` with no client;
3. *probe idle*: a probe process alternates ``PING`` and a one-entry read
   (``TREAD k 1 1`` / ``XRANGE k - + COUNT 1``) on random keys, one at a time,
   every 2 ms, for ``--probe-seconds``: p50 / p99 / max round trip;
4. *writes*: ``redis-benchmark -c 50 -P 16 -r keys`` of ``TWRITE k:__rand_int__
   tag value`` / ``XADD k:__rand_int__ * tag value`` (writes spread over the keys),
   with the probe running: requests/s and the probe's latency under writers;
5. *pipeline stall*: one client sends ``--pipeline`` writes to one key in a single
   burst while the probe runs: the probe's max / p99 during the burst.

Each server runs ``--repeat`` times, interleaved (tstream, redis, redis, tstream,
...); ratios tstream/redis are taken within each round and their median reported,
with every run listed and the load average before and after.  Results go to
bench/results/scale.json and bench/RESULTS-scale.md.

    flock /tmp/tstream-bench.lock .venv/bin/python bench/scale.py [--quick] [--repeat N] [--keys N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import shlex
import subprocess
import sys
import threading
import time

from common import (
    REDIS_BENCHMARK,
    REDIS_SERVER,
    Client,
    encode,
    loadavg,
    machine_facts,
    median,
    percentile,
    save_result,
    script_command,
    servers,
    sigterm_as_exit,
)

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REDIS_CLI = os.environ.get("REDIS_CLI") or "redis-cli"
TARGETS = {"idle_cpu_percent": 5.0, "probe_p99_ms": 10.0, "write_ratio": 0.5}


def key_name(i: int) -> bytes:
    return b"k:%012d" % i  # what redis-benchmark's __rand_int__ expands to


# --- load --------------------------------------------------------------------------------

def load_payload(kind: str, keys: int, age_every: int, group_every: int) -> list[tuple[bytes, int]]:
    """The load's commands, as (bytes, command count) chunks of about 10,000 commands."""
    chunks, chunk = [], []
    for i in range(keys):
        k = key_name(i)
        if kind == "tstream":
            chunk.append(encode(b"TWRITE", k, b"tag", b"value"))
            if age_every and i % age_every == 0:
                chunk.append(encode(b"TCONFIG", k, b"SET", b"max_age_ms", b"3600000"))
            if group_every and i % group_every == 0:
                chunk.append(encode(b"TREAD", k, b"1", b"1", b"GROUP", b"g", b"RETRY", b"60000", b"3600000"))
        else:
            chunk.append(encode(b"XADD", k, b"*", b"tag", b"value"))
            if group_every and i % group_every == 0:
                chunk.append(encode(b"XGROUP", b"CREATE", k, b"g", b"0"))
        if len(chunk) >= 10_000 or i == keys - 1:
            chunks.append((b"".join(chunk), len(chunk)))
            chunk = []
    return chunks


def pipe_load(port: int, chunks: list[tuple[bytes, int]]) -> float:
    """Send the load a chunk at a time, reading each chunk's replies before the next
    (the same client for both servers); returns seconds."""
    client = Client(port)
    t0 = time.monotonic()
    errors = 0
    for data, n in chunks:
        client.send(data)
        errors += sum(1 for reply in client.read_replies(n, check=False) if isinstance(reply, Exception))
    elapsed = time.monotonic() - t0
    client.close()
    if errors:
        raise RuntimeError(f"{errors} errors while loading")
    return elapsed


# --- CPU and probe -------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def probe_main(port: int, kind: str, keys: int, ping_only: bool, stop, out) -> None:
    """Probe process: one request at a time every 2 ms until ``stop``; sends
    (start_time, rtt_seconds) pairs back."""
    client = Client(port)
    rng = random.Random(1)
    samples = []
    ping = encode("PING")
    i = 0
    while not stop.is_set():
        if i % 2 and not ping_only:
            k = key_name(rng.randrange(keys))
            request = encode("TREAD", k, 1, 1) if kind == "tstream" else encode("XRANGE", k, "-", "+", "COUNT", 1)
        else:
            request = ping
        t0 = time.perf_counter()
        client.send(request)
        client.read_reply()
        samples.append((t0, time.perf_counter() - t0))
        i += 1
        time.sleep(0.002)
    client.close()
    out.send(samples)
    out.close()


class Probe:
    def __init__(self, port: int, kind: str, keys: int, ping_only: bool = False) -> None:
        ctx = multiprocessing.get_context("fork")
        self.stop_event = ctx.Event()
        self.parent, child = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=probe_main, args=(port, kind, keys, ping_only, self.stop_event, child), daemon=True)
        self.proc.start()

    def finish(self) -> list[tuple[float, float]]:
        self.stop_event.set()
        samples = self.parent.recv()
        self.proc.join(10)
        return samples


def latency_summary(samples: list[tuple[float, float]], start: float | None = None,
                    end: float | None = None) -> dict:
    """p50/p99/max in ms of the probes that started in [start, end] (or overlapped it)."""
    rtts = sorted(rtt for t0, rtt in samples
                  if (start is None or t0 + rtt >= start) and (end is None or t0 <= end))
    if not rtts:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    return {"n": len(rtts), "p50_ms": round(percentile(rtts, 50) * 1000, 3),
            "p99_ms": round(percentile(rtts, 99) * 1000, 3), "max_ms": round(rtts[-1] * 1000, 3)}


# --- writers -------------------------------------------------------------------------------

def write_benchmark(port: int, kind: str, keys: int, n: int, clients: int, pipeline: int,
                    timeout: float) -> dict:
    command = (["TWRITE", "k:__rand_int__", "tag", "value"] if kind == "tstream"
               else ["XADD", "k:__rand_int__", "*", "tag", "value"])
    argv = [REDIS_BENCHMARK, "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-n", str(n),
            "-P", str(pipeline), "-r", str(keys), "-q", *command]
    t0 = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    elapsed = time.monotonic() - t0
    if done.returncode != 0 or "ERR" in done.stdout:
        raise RuntimeError(f"{shlex.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    # -q prints "<command>: <rps> requests per second, p50=..." (the command holds colons too)
    found = re.findall(r"([0-9.]+) requests per second", done.stdout)
    if not found:
        raise RuntimeError(f"unexpected redis-benchmark output:\n{done.stdout}")
    rps = float(found[-1])
    return {"rps": rps, "elapsed_s": round(elapsed, 2), "command": shlex.join(["redis-benchmark", *argv[1:]])}


def pipeline_burst(port: int, kind: str, count: int) -> tuple[float, float]:
    """One client sends ``count`` writes to one key in one burst and reads every reply;
    returns (start, end) perf_counter times."""
    one = (encode("TWRITE", "pipe:key", "tag", "value") if kind == "tstream"
           else encode("XADD", "pipe:key", "*", "tag", "value"))
    payload = one * count
    client = Client(port)
    sender = threading.Thread(target=client.send, args=(payload,))
    start = time.perf_counter()
    sender.start()
    replies = client.read_replies(count)
    end = time.perf_counter()
    sender.join()
    client.close()
    if len(replies) != count:
        raise RuntimeError("missing replies")
    return start, end


# --- one run ----------------------------------------------------------------------------------

def one_run(kind: str, args, chunks: list) -> dict:
    run = {"server": kind, "loadavg_before": loadavg()}
    with servers((kind, [])) as (server,):
        rss0 = server.rss_bytes()
        probe = Probe(server.port, kind, 1, ping_only=True)
        time.sleep(0.2)
        run["load_s"] = round(pipe_load(server.port, chunks), 2)
        run["probe_during_load"] = latency_summary(probe.finish())
        run["load_commands"] = sum(n for _, n in chunks)
        time.sleep(1.0)
        rss1 = server.rss_bytes()
        run["rss_bytes"] = rss1
        run["bytes_per_key"] = round((rss1 - rss0) / args.keys, 1)
        c0, t0 = cpu_seconds(server.pid), time.monotonic()
        time.sleep(args.idle_seconds)
        run["idle_cpu_percent"] = round(100 * (cpu_seconds(server.pid) - c0) / (time.monotonic() - t0), 2)

        probe = Probe(server.port, kind, args.keys)
        time.sleep(args.probe_seconds)
        run["probe_idle"] = latency_summary(probe.finish())

        probe = Probe(server.port, kind, args.keys)
        time.sleep(0.2)
        w_start = time.perf_counter()
        run["writes"] = write_benchmark(server.port, kind, args.keys, args.writes, args.clients,
                                        args.depth, args.timeout)
        w_end = time.perf_counter()
        samples = probe.finish()
        run["probe_under_writers"] = latency_summary(samples, w_start, w_end)

        probe = Probe(server.port, kind, args.keys)
        time.sleep(0.3)
        b_start, b_end = pipeline_burst(server.port, kind, args.pipeline)
        time.sleep(0.1)
        samples = probe.finish()
        run["pipeline_burst_s"] = round(b_end - b_start, 3)
        run["probe_during_pipeline"] = latency_summary(samples, b_start, b_end)
    run["loadavg_after"] = loadavg()
    return run


def show(run: dict) -> str:
    pi, pw, pp = run["probe_idle"], run["probe_under_writers"], run["probe_during_pipeline"]
    pl = run["probe_during_load"]
    return (f"{run['server']:8s} load {run['load_s']:6.1f}s (probe p99 {pl['p99_ms']} max {pl['max_ms']} ms)  "
            f"{run['bytes_per_key']:7.0f} B/key  "
            f"idle CPU {run['idle_cpu_percent']:5.1f}%  probe idle p99 {pi['p99_ms']} max {pi['max_ms']} ms  "
            f"writes {run['writes']['rps']:,.0f}/s probe p99 {pw['p99_ms']} max {pw['max_ms']} ms  "
            f"pipeline max {pp['max_ms']} ms  (load {run['loadavg_before']} -> {run['loadavg_after']})")


METRICS = [
    ("idle CPU %", lambda r: r["idle_cpu_percent"]),
    ("memory per key (B, RSS growth)", lambda r: r["bytes_per_key"]),
    ("load time (s)", lambda r: r["load_s"]),
    ("probe (PING) during the load p99 (ms)", lambda r: r["probe_during_load"]["p99_ms"]),
    ("probe (PING) during the load max (ms)", lambda r: r["probe_during_load"]["max_ms"]),
    ("probe idle p50 (ms)", lambda r: r["probe_idle"]["p50_ms"]),
    ("probe idle p99 (ms)", lambda r: r["probe_idle"]["p99_ms"]),
    ("probe idle max (ms)", lambda r: r["probe_idle"]["max_ms"]),
    ("writes/s across the keys", lambda r: r["writes"]["rps"]),
    ("probe under writers p50 (ms)", lambda r: r["probe_under_writers"]["p50_ms"]),
    ("probe under writers p99 (ms)", lambda r: r["probe_under_writers"]["p99_ms"]),
    ("probe under writers max (ms)", lambda r: r["probe_under_writers"]["max_ms"]),
    ("probe during 100k pipeline p99 (ms)", lambda r: r["probe_during_pipeline"]["p99_ms"]),
    ("probe during 100k pipeline max (ms)", lambda r: r["probe_during_pipeline"]["max_ms"]),
    ("100k pipeline duration (s)", lambda r: r["pipeline_burst_s"]),
]


def summarize(runs: list[dict]) -> dict:
    by = {"tstream": [r for r in runs if r["server"] == "tstream"],
          "redis": [r for r in runs if r["server"] == "redis"]}
    table = {}
    for name, get in METRICS:
        t = [get(r) for r in by["tstream"]]
        rd = [get(r) for r in by["redis"]]
        ratios = [a / b for a, b in zip(t, rd) if a is not None and b]
        table[name] = {"tstream_median": median(x for x in t if x is not None) if t else None,
                       "redis_median": median(x for x in rd if x is not None) if rd else None,
                       "ratio_median": round(median(ratios), 3) if ratios else None,
                       "tstream_runs": t, "redis_runs": rd}
    return table


def write_markdown(result: dict, path: str) -> None:
    m = result["machine"]
    table = result["summary"]
    lines = [
        "# Scale and fairness: tstream vs redis-server",
        "",
        f"Command: `{result['command']}`  ",
        f"Date: {m['date']}; {m['nproc']} CPUs ({m['cpu']}); Python {m['python']}; "
        f"redis {m.get('redis_version', '?')}; git {m['git_commit']}{' (dirty)' if m['git_dirty'] else ''}.  ",
        f"Load average at start {m['loadavg_at_start']}, at end {result.get('loadavg_at_end', '?')} "
        "(the machine was shared: other work skews the figures, the ratios less).",
        "",
        f"{result['keys']:,} keys, one small entry each; tstream: 1 in {result['age_every']} keys with "
        f"max_age_ms, 1 in {result['group_every']} with a consumer group and a pending entry (redis: "
        f"XGROUP CREATE on the same keys).  Writes: redis-benchmark -c {result['clients']} -P {result['depth']} "
        f"-n {result['writes']:,} -r {result['keys']:,} over the keys.  Pipeline: one client sends "
        f"{result['pipeline']:,} writes to one key in one burst.  The probe sends one PING or one-entry "
        "read at a time, every 2 ms.  Medians of "
        f"{result['repeat']} interleaved runs per server; ratio = median of the per-round tstream/redis ratios.",
        "",
        "| metric | tstream | redis | tstream/redis | target |",
        "|---|---:|---:|---:|---|",
    ]
    targets = {"idle CPU %": f"< {TARGETS['idle_cpu_percent']}%",
               "probe idle p99 (ms)": f"< {TARGETS['probe_p99_ms']} ms",
               "probe under writers p99 (ms)": f"< {TARGETS['probe_p99_ms']} ms",
               "writes/s across the keys": f">= {TARGETS['write_ratio']}x redis"}
    for name, row in table.items():
        def fmt(v):
            return "-" if v is None else (f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}")
        lines.append(f"| {name} | {fmt(row['tstream_median'])} | {fmt(row['redis_median'])} | "
                     f"{fmt(row['ratio_median'])} | {targets.get(name, '')} |")
    lines += ["", "Every run (in the order run):", "", "```"]
    lines += [show(r) for r in result["runs"]]
    lines += ["```", "", NOTES]
    with open(path, "w") as f:
        f.write("\n".join(lines))


NOTES = """\
## Reading the figures

- *probe during 100k pipeline*: the probes that overlapped the burst (about 50): p99 and max are
  the same probe.  Before the per-connection turn budget (server/connection.py) the whole pipeline
  ran in one turn: 85-290 ms for the other clients at 100k keys (same script, `--quick`, code at
  426489d: idle CPU 30%, probe idle p99 31.5 ms / max 183 ms, pipeline stall 289 ms, writes
  0.34x redis; redis: 0%, 1.0 ms, 2.2 ms).
- *idle CPU*: before the due-time heap (engine/agetimers.py) the 100 ms housekeeping pass walked
  every key (30% CPU at 100k keys, above).  /proc's CPU time has a 10 ms tick: 0.2% over 10 s is
  two ticks.
- *probe during the load*: 1M keys created at run time.  Before server/collector.py froze the new
  long-lived objects, full collections walked them all: at 1M keys (`--quick --keys 1000000
  --servers tstream`, code at e1f27bc) the load took 35.2 s with a 2,665 ms worst probe; with the
  policy (5065143) 18.1 s and 322 ms on the same busy machine.  What remains (tens of ms) is not
  the collector (no full pass over 5 ms was logged): likely the keyspace's dicts resizing at once
  (CPython has no incremental rehash), and the machine's load.
- *probe under writers*: one event-loop turn serves 50 pipelined connections x 16 commands; the
  probe waits for that turn (a few ms in Python).  Its p99 moves with the machine's load.
- *memory per key*: RSS growth / keys; redis's includes the stream, its radix tree, and the group.
  Where a tstream key's bytes go (`bench/key_breakdown.py`: this load at 100k keys in an
  embedded server, tracemalloc, what the load left allocated, per key):

  | per key of one entry | before (6c46df7) | now |
  |---|---:|---:|
  | Stream object (23 slots) | 216 | 216 |
  | active node (compact: no tables) | 120 | 120 |
  | bytes kept from the request: key + tag before; key + payload now (the tag is one per keyspace, `BlockCache.intern`; the compact node keeps the writer's payload object) | 90 | 92 |
  | payload copy in a bytearray | 62 | 0 |
  | StreamConfig (now one shared read-only default until TCONFIG SET) | 72 | 0 |
  | tag table `[None, tag]` (now one shared tuple per tag) | 72 | 0 |
  | node list `[node]` | 64 | 64 |
  | keyspace dict entry (52 at 100k keys, 42 at 1M) | 52 | 52 |
  | SCAN order: SortedDict entry + int id (now a slot in a chunk of 128) | 93 | 9 |
  | the entry's time (an int) | 36 | 36 |
  | first node's end offset `1001` (now one int per keyspace) | 32 | 0 |
  | max_age_ms due time (1 in 10 keys), group (1 in 100), the rest | 35 | 43 |
  | **allocated, per key** | **944** | **632** |

  RSS through the server at 1M keys: 1,027 B before, 690 B now (in-process, `bench/keys_memory.py`:
  898 B before, 600 B now).  What is left is CPython's floor for a few objects per key.
- *writes across the keys*: the cost of an append to a key not in the CPU cache is its cache
  (and TLB) misses: the stream, its node, the tables, the time.  The changes above touch fewer
  objects (no config, shared tag table and end offset), `ActiveNode.expand` (the second entry of
  a key) copies template arrays, and server/collector.py freezes what reached the old
  generation: before, 1M writes over 1M keys left 1.3M tracked arrays (the keys' new node
  tables) for one 100 ms full collection (the probe's 100 ms worst case under writers).
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--age-every", type=int, default=10, help="1 in N keys gets max_age_ms (tstream)")
    ap.add_argument("--group-every", type=int, default=100, help="1 in N keys gets a consumer group")
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--probe-seconds", type=float, default=5.0)
    ap.add_argument("--writes", type=int, default=1_000_000, help="redis-benchmark -n")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--depth", type=int, default=16, help="redis-benchmark -P")
    ap.add_argument("--pipeline", type=int, default=100_000, help="commands in the one-client burst")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--quick", action="store_true", help="100k keys, 3 s idle, 200k writes, 1 round")
    ap.add_argument("--servers", default="tstream,redis", help="which servers to run (tstream,redis)")
    ap.add_argument("--output", default="scale", help="results name (bench/results/NAME.json)")
    args = ap.parse_args()
    if args.quick:  # smaller defaults; options given explicitly win
        quick = {"keys": 100_000, "idle_seconds": 3.0, "probe_seconds": 2.0, "writes": 200_000, "repeat": 1}
        for name, value in quick.items():
            if "--" + name.replace("_", "-") not in sys.argv:
                setattr(args, name, value)
    sigterm_as_exit()
    result = {"benchmark": "scale", "command": script_command(), "keys": args.keys,
              "age_every": args.age_every, "group_every": args.group_every, "writes": args.writes,
              "clients": args.clients, "depth": args.depth, "pipeline": args.pipeline,
              "repeat": args.repeat, "runs": []}
    result["machine"] = machine_facts()
    try:  # no server is running yet: ask the binary
        version = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True).stdout
        result["machine"]["redis_version"] = re.search(r"v=(\S+)", version).group(1)
    except (OSError, AttributeError):
        result["machine"]["redis_version"] = "?"
    payloads = {kind: load_payload(kind, args.keys, args.age_every, args.group_every)
                for kind in args.servers.split(",")}
    for i in range(args.repeat):
        order = ("tstream", "redis") if i % 2 == 0 else ("redis", "tstream")
        for kind in (k for k in order if k in args.servers.split(",")):
            run = one_run(kind, args, payloads[kind])
            run["round"] = i + 1
            result["runs"].append(run)
            print(show(run), flush=True)
    result["summary"] = summarize(result["runs"])
    result["loadavg_at_end"] = loadavg()
    for name, row in result["summary"].items():
        print(f"{name:40s} tstream {row['tstream_median']}  redis {row['redis_median']}  "
              f"ratio {row['ratio_median']}")
    path = save_result(args.output, result)
    md = os.path.join(BENCH_DIR, "RESULTS-scale.md" if args.output == "scale" else f"RESULTS-{args.output}.md")
    write_markdown(result, md)
    print(f"wrote {path} and {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
