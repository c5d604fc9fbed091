#!/usr/bin/env python3
"""What a BGSAVE's first turn on the event loop costs, step by step, in process.

bench/capture_stall.py's longest wait is usually at t=0: the BGSAVE command's
own turn (the job's set-up, the writer thread's start) and the first capture
slices.  This script loads ``--keys`` one-entry keys (or one key of
``--entries`` entries) into an embedded server (server.embed.ServerThread),
sends BGSAVE over TCP and records, on one clock (``time.perf_counter_ns``) with
the calling thread's CPU (``time.thread_time_ns``):

- the BGSAVE connection's ``data_received`` (the whole command's turn), and in
  it each step of the job's start: the replication aux, the Framer, the
  IncrementalCapture, the executor's submit (the thread's start inside it);
- the writer thread: when its first Python runs, when it first waits for a
  chunk (its first ``queue.get``), its CPU until then;
- the first ``--steps`` capture steps: wall, CPU, and the gap before each;
- a probe task on the loop (asks to wake every 0.25 ms): its longest lateness
  in the first 20 ms of the save.

Wall minus CPU on the loop thread is time it waited: for a core (the
machine's load) or for the GIL (the writer thread holding it).  Each
``--runs`` run is a fresh process (a first save in a process is the one
capture_stall.py measures: the executor's thread is started by it).

    .venv/bin/python bench/capture_firstturn.py [--keys 1000000 | --entries 10000000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

EVENTS: list = []  # (label, start ns, wall ns, cpu ns, thread name)


def clock() -> int:
    return time.perf_counter_ns()


def timed(owner, name: str, label: str) -> None:
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start, cpu = clock(), time.thread_time_ns()
        try:
            return original(*args, **kwargs)
        finally:
            EVENTS.append((label, start, clock() - start, time.thread_time_ns() - cpu,
                           threading.current_thread().name))

    setattr(owner, name, wrapper)


def instrument() -> None:
    import concurrent.futures

    from tstream.persistence import snapshot
    from tstream.server import persist, replication, snapshotjob
    from tstream.server.connection import ClientConnection as Connection
    timed(Connection, "data_received", "command turn (data_received)")
    timed(persist.Persistence, "start_bgsave", "start_bgsave")
    timed(snapshotjob.SnapshotJob, "start", "SnapshotJob.start")
    timed(replication.Replication, "snapshot_aux", "replication.snapshot_aux")
    timed(snapshot.Framer, "__init__", "Framer.__init__")
    timed(snapshot.IncrementalCapture, "__init__", "IncrementalCapture.__init__")
    timed(concurrent.futures.ThreadPoolExecutor, "submit", "executor.submit")
    timed(threading.Thread, "start", "Thread.start")
    timed(snapshotjob.SnapshotJob, "_step", "step")
    write, items = snapshotjob.SnapshotJob._write, snapshotjob.SnapshotJob._items

    def traced_write(self):
        EVENTS.append(("writer: first Python", clock(), 0, time.thread_time_ns(), "writer"))
        return write(self)

    def traced_items(self):
        EVENTS.append(("writer: first queue.get", clock(), 0, time.thread_time_ns(), "writer"))
        yield from items(self)

    snapshotjob.SnapshotJob._write = traced_write
    snapshotjob.SnapshotJob._items = traced_items


async def probe(stop: asyncio.Event, out: list) -> None:
    while not stop.is_set():
        asked = clock()
        await asyncio.sleep(0.00025)
        out.append((asked, clock() - asked - 250_000))


def load(srv, keys: int, entries: int) -> None:
    """Straight into the keyspace, on the loop, in slices (faster than TWRITE over TCP)."""
    def some(start: int, end: int) -> None:
        keyspace = srv.server.keyspace
        for k in range(start, end):
            keyspace.get_or_create(b"k%d" % k, 1000).append(b"t", b"v", 1_000 + k)

    for start in range(0, keys, 20_000):
        srv.call(some, start, min(keys, start + 20_000))
    if entries:
        flat: list = []
        for i in range(1000):
            flat += [b"t%d" % (i % 100), b"x" * 16]

        def big(start: int, end: int) -> None:
            stream = srv.server.keyspace.get_or_create(b"big", 1000)
            for j in range(start, end):
                stream.append_many(flat, 1_000_000 + j)

        for start in range(0, entries // 1000, 500):
            srv.call(big, start, min(entries // 1000, start + 500))


def one_run(keys: int, entries: int, steps: int) -> dict:
    instrument()
    from common import Client

    from tstream.server.embed import ServerThread

    with tempfile.TemporaryDirectory(prefix="firstturn-", dir="/tmp") as tmp, \
            ServerThread(port=0, dir=tmp, save="") as srv:
        load(srv, keys, entries)
        client = Client(srv.port)
        client.execute("PING")
        stop = asyncio.Event()
        lateness: list = []
        task = asyncio.run_coroutine_threadsafe(probe(stop, lateness), srv._loop)
        time.sleep(0.2)
        EVENTS.clear()
        t0 = clock()
        client.execute("BGSAVE")
        while srv.call(lambda: srv.server.persistence.bgsave_started) is not None:
            time.sleep(0.01)
        t1 = clock()
        srv._loop.call_soon_threadsafe(stop.set)
        task.result()
        client.close()
    events = sorted(EVENTS, key=lambda e: e[1])
    turn = next(e for e in events if e[0].startswith("command turn") and e[1] + e[2] > t0
                and any(x[0] == "start_bgsave" and e[1] <= x[1] <= e[1] + e[2] for x in events))
    base = turn[1]
    lines = []
    step_count = 0
    previous_end = None
    for label, start, wall, cpu, thread in events:
        if start < base:
            continue
        if label == "step":
            step_count += 1
            if step_count > steps:
                continue
            gap = (start - previous_end) / 1e6 if previous_end else 0
            lines.append(f"  {(start - base) / 1e6:8.3f} ms  step {step_count}: wall {wall / 1e6:.3f} ms, CPU "
                         f"{cpu / 1e6:.3f} ms (gap before it {gap:.3f} ms)")
            previous_end = start + wall
            continue
        if label.startswith("command turn"):
            if start != base:
                continue
            previous_end = start + wall
        if label.startswith("writer:"):
            lines.append(f"  {(start - base) / 1e6:8.3f} ms  {label} (thread CPU so far {cpu / 1e6:.3f} ms)")
        else:
            lines.append(f"  {(start - base) / 1e6:8.3f} ms  {label}: wall {wall / 1e6:.3f} ms, CPU {cpu / 1e6:.3f} ms"
                         + ("" if thread == "MainThread" or "server" in thread.lower() else f" [{thread}]"))
    early = [late / 1e6 for asked, late in lateness if base - 1_000_000 <= asked <= base + 20_000_000]
    step_walls = [e[2] / 1e6 for e in events if e[0] == "step"]
    step_cpus = [e[3] / 1e6 for e in events if e[0] == "step"]
    return {"lines": lines, "turn_wall_ms": turn[2] / 1e6, "turn_cpu_ms": turn[3] / 1e6,
            "probe_max_first_20ms": max(early) if early else 0.0,
            "probe_max": max(late / 1e6 for asked, late in lateness if t0 <= asked <= t1),
            "steps": len(step_walls), "step_wall_max": max(step_walls), "step_cpu_max": max(step_cpus),
            "seconds": (t1 - t0) / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--entries", type=int, default=0, help="one key of this many entries (then --keys 0)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4, help="capture steps to list")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.entries:
        args.keys = 0 if args.keys == 1_000_000 else args.keys
    if args.child:
        print(json.dumps(one_run(args.keys, args.entries, args.steps)))
        return
    from common import loadavg

    print(f"keys {args.keys:,}, entries {args.entries:,}; load average {loadavg()}")
    for run in range(args.runs):
        out = subprocess.run([sys.executable, __file__, "--child", "--keys", str(args.keys), "--entries",
                              str(args.entries), "--steps", str(args.steps)],
                             capture_output=True, text=True, check=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        print(f"run {run + 1}: command turn wall {result['turn_wall_ms']:.3f} ms, CPU {result['turn_cpu_ms']:.3f} ms; "
              f"probe (loop task) max late {result['probe_max_first_20ms']:.3f} ms in the first 20 ms, "
              f"{result['probe_max']:.3f} ms in all; steps {result['steps']}, max wall "
              f"{result['step_wall_max']:.3f} ms, max CPU {result['step_cpu_max']:.3f} ms; BGSAVE "
              f"{result['seconds']:.2f} s")
        print("\n".join(result["lines"]), flush=True)
    print(f"load average {loadavg()}")


if __name__ == "__main__":
    main()
