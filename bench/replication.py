"""Replication's cost and lag: unpipelined TWRITE throughput (redis-benchmark, 50
clients) on a lone primary and on a primary with one replica, in alternating
rounds of the same run, and the replica's lag under that load: a probe writes
one entry on the primary every 20 ms and a client on the replica waits for it
(TREAD ... BLOCK), so each sample is write-to-visible-on-the-replica time
(the primary's own reply time included).

    flock /tmp/tstream-bench.lock .venv/bin/python bench/replication.py [--requests 100000] [--rounds 3]

Both servers run on this machine's 2 cores with the benchmark client: the
replica takes CPU from the primary, which a deployment on separate hosts does
not pay.  Prints the figures and writes results/replication.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import threading
import time

from common import (
    REDIS_BENCHMARK,
    Client,
    ServerProcess,
    encode,
    machine_facts,
    percentile,
    save_result,
    script_command,
    sigterm_as_exit,
)


def twrite_rate(port: int, requests: int, clients: int) -> float:
    out = subprocess.run([REDIS_BENCHMARK, "-p", str(port), "-c", str(clients), "-n", str(requests), "-q",
                          "TWRITE", "bench", "t", "x" * 100],
                         capture_output=True, text=True, timeout=600).stdout
    # "TWRITE bench t xxx...: 12345.67 requests per second, p50=..."
    for part in out.replace("\r", "\n").split("\n"):
        if "requests per second" in part:
            return float(part.split(":")[-1].split("requests")[0].strip().split()[-1])
    raise RuntimeError(f"no rate in redis-benchmark's output: {out[-300:]!r}")


def probe(primary: int, replica: int, stop: threading.Event, lags: list[float]) -> None:
    p, r = Client(primary), Client(replica)
    try:
        while not stop.is_set():
            started = time.perf_counter()
            offset = p.execute("TWRITE", "probe", "t", "x")
            got = r.execute("TREAD", "probe", offset, 1, "BLOCK", 2000)
            if got:
                lags.append((time.perf_counter() - started) * 1000)
            time.sleep(0.02)
    finally:
        p.close()
        r.close()


def run_round(with_replica: bool, requests: int, clients: int) -> dict:
    primary = ServerProcess("tstream").start()
    replica = None
    try:
        if with_replica:
            replica = ServerProcess("tstream", ["--replicaof", f"127.0.0.1 {primary.port}"]).start()
            c = replica.client()
            deadline = time.monotonic() + 30
            while c.info("replication").get("master_link_status") != "up":
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica did not link")
                time.sleep(0.05)
            c.close()
        lags: list[float] = []
        stop = threading.Event()
        thread = None
        if replica is not None:
            thread = threading.Thread(target=probe, args=(primary.port, replica.port, stop, lags))
            thread.start()
        try:
            rate = twrite_rate(primary.port, requests, clients)
        finally:
            stop.set()
            if thread is not None:
                thread.join(10)
        result = {"with_replica": with_replica, "twrite_per_sec": rate}
        if replica is not None:
            p, r = primary.client(), replica.client()
            p.execute("WAIT", 1, 5000)
            result["primary_offset"] = int(p.info("replication")["master_repl_offset"])
            result["replica_offset"] = int(r.info("replication")["slave_repl_offset"])
            p.close()
            r.close()
            lags.sort()
            result.update({"lag_samples": len(lags), "lag_p50_ms": percentile(lags, 50),
                           "lag_p99_ms": percentile(lags, 99), "lag_max_ms": lags[-1] if lags else None})
        return result
    finally:
        if replica is not None:
            replica.stop()
        primary.stop()


def resync_vs_load(entries: int) -> dict:
    """A primary with ``entries`` entries in one stream: the time a fresh server
    takes to load its snapshot at startup (process start to PING answered) vs
    the time a fresh replica takes to be linked after REPLICAOF (full resync:
    capture, write, send, load)."""
    primary = ServerProcess("tstream").start()
    try:
        c = primary.client()
        batch = 1000
        for start in range(0, entries, batch * 16):
            commands = []
            for b in range(start, min(entries, start + batch * 16), batch):
                args = ["TWRITE", "big", "ENTRIES"]
                for i in range(b, min(entries, b + batch)):
                    args += [f"t{i % 8}", f"payload-{i:010d}-" + "x" * 40]
                commands.append(encode(*args))
            c.send(b"".join(commands))
            c.read_replies(len(commands))
        c.execute("SAVE")
        loader = ServerProcess("tstream")
        shutil.copy(os.path.join(primary.dir, "dump.tsr"), os.path.join(loader.dir, "dump.tsr"))
        started = time.perf_counter()
        loader.start(timeout=600)
        load_s = time.perf_counter() - started
        length = loader.client().execute("TINFO", "big")
        loader.stop()
        replica = ServerProcess("tstream").start()
        try:
            r = replica.client()
            started = time.perf_counter()
            r.execute("REPLICAOF", "127.0.0.1", str(primary.port))
            while r.info("replication").get("master_link_status") != "up":
                time.sleep(0.01)
            resync_s = time.perf_counter() - started
        finally:
            replica.stop()
        c.close()
        return {"entries": entries, "snapshot_bytes": os.path.getsize(os.path.join(primary.dir, "dump.tsr")),
                "load_s": load_s, "full_resync_s": resync_s, "ratio": resync_s / load_s,
                "tinfo_loaded": str(length[:2])}
    finally:
        primary.stop()


def main() -> None:
    sigterm_as_exit()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--resync", type=int, default=0, metavar="ENTRIES",
                        help="only: full resync of a stream of ENTRIES entries vs loading its snapshot")
    args = parser.parse_args()
    if args.resync:
        result = resync_vs_load(args.resync)
        print(f"{result['entries']:,} entries ({result['snapshot_bytes']:,} bytes of snapshot): load at start "
              f"{result['load_s']:.2f} s (process start included), full resync {result['full_resync_s']:.2f} s: "
              f"{result['ratio']:.2f}x")
        save_result("replication-resync", {"command": script_command(), "facts": machine_facts(),
                                           "args": vars(args), "result": result})
        return
    rounds = []
    for i in range(args.rounds):
        for with_replica in (False, True):
            result = run_round(with_replica, args.requests, args.clients)
            rounds.append(result)
            extra = (f"  replica lag p50 {result['lag_p50_ms']:.2f} ms p99 {result['lag_p99_ms']:.2f} ms "
                     f"({result['lag_samples']} samples)" if with_replica else "")
            print(f"round {i + 1} {'primary + 1 replica' if with_replica else 'lone primary       '}: "
                  f"{result['twrite_per_sec']:>10,.0f} TWRITE/s{extra}", flush=True)
    alone = [r["twrite_per_sec"] for r in rounds if not r["with_replica"]]
    paired = [r["twrite_per_sec"] for r in rounds if r["with_replica"]]
    ratios = [b / a for a, b in zip(alone, paired)]
    p99s = [r["lag_p99_ms"] for r in rounds if r["with_replica"]]
    summary = {"median_alone": statistics.median(alone), "median_with_replica": statistics.median(paired),
               "ratios_same_round": ratios, "median_ratio": statistics.median(ratios),
               "lag_p99_ms_per_round": p99s}
    print(f"with one replica / alone, per round: {', '.join(f'{x:.2f}x' for x in ratios)} "
          f"(median {summary['median_ratio']:.2f}x); replica lag p99 per round: "
          f"{', '.join(f'{x:.2f}' for x in p99s)} ms")
    save_result("replication", {"command": script_command(), "facts": machine_facts(), "args": vars(args),
                                "rounds": rounds, "summary": summary})


if __name__ == "__main__":
    main()
