"""Replication's cost and lag: unpipelined TWRITE throughput (redis-benchmark, 50
clients) on a lone primary and on a primary with one replica, in alternating
rounds of the same run, and the replica's lag under that load: a probe writes
one entry on the primary every 20 ms and a client on the replica waits for it
(TREAD ... BLOCK), so each sample is write-to-visible-on-the-replica time
(the primary's own reply time included).

    flock /tmp/tstream-bench.lock .venv/bin/python bench/replication.py [--requests 100000] [--rounds 3]
        [--replica-nice -10]    # the replica given a core's worth of CPU, as on a host of its own
    flock /tmp/tstream-bench.lock .venv/bin/python bench/replication.py --redis --rounds 5   # redis-server: XADD
    flock /tmp/tstream-bench.lock .venv/bin/python bench/replication.py --reads [--write-rate 2000]

``--redis``: the same measurement on redis-server (a lone redis-server vs
redis-server with one redis-server replica, ``XADD bench * t <100 bytes>``
from the same redis-benchmark clients; the probe's XADD waited for on the
replica with ``XREAD BLOCK``), so that redis's own ratio on this machine stands
beside tstream's: both run 3 processes on the same cores.

``--reads``: the read scale-out, DGET (redis-benchmark, unpipelined) served by a
lone primary vs by a replica, while the primary takes ``--write-rate`` TWRITEs
per second, alternating in the same run.

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


def twrite_rate(port: int, requests: int, clients: int, kind: str = "tstream") -> float:
    if kind == "redis":
        return benchmark_rate(port, requests, clients, "XADD", "bench", "*", "t", "x" * 100)
    return benchmark_rate(port, requests, clients, "TWRITE", "bench", "t", "x" * 100)


def benchmark_rate(port: int, requests: int, clients: int, *command: str) -> float:
    out = subprocess.run([REDIS_BENCHMARK, "-p", str(port), "-c", str(clients), "-n", str(requests), "-q",
                          *command],
                         capture_output=True, text=True, timeout=600).stdout
    # "TWRITE bench t xxx...: 12345.67 requests per second, p50=..."
    for part in out.replace("\r", "\n").split("\n"):
        if "requests per second" in part:
            return float(part.split(":")[-1].split("requests")[0].strip().split()[-1])
    raise RuntimeError(f"no rate in redis-benchmark's output: {out[-300:]!r}")


def probe(primary: int, replica: int, stop: threading.Event, lags: list[float],
          after_reply: list[float] | None = None, kind: str = "tstream") -> None:
    """``lags``: from sending the write to the primary to the entry visible on the
    replica; ``after_reply``: from the primary's reply to visible on the replica
    (the replication delay alone, the primary's queueing under load left out).
    redis-server (``kind``): XADD, then XREAD BLOCK after the previous probe's id."""
    p, r = Client(primary), Client(replica)
    last_id: bytes = b"0-0"
    try:
        while not stop.is_set():
            started = time.perf_counter()
            if kind == "redis":
                xid = p.execute("XADD", "probe", "*", "t", "x")
                replied = time.perf_counter()
                got = r.execute("XREAD", "BLOCK", 2000, "STREAMS", "probe", last_id)
                last_id = xid
            else:
                offset = p.execute("TWRITE", "probe", "t", "x")
                replied = time.perf_counter()
                got = r.execute("TREAD", "probe", offset, 1, "BLOCK", 2000)
            if got:
                now = time.perf_counter()
                lags.append((now - started) * 1000)
                if after_reply is not None:
                    after_reply.append((now - replied) * 1000)
            time.sleep(0.02)
    finally:
        p.close()
        r.close()


def start_replica(primary: ServerProcess, nice: int = 0) -> ServerProcess:
    if primary.kind == "redis":
        replica = ServerProcess("redis", ["--replicaof", "127.0.0.1", str(primary.port)]).start()
    else:
        replica = ServerProcess("tstream", ["--replicaof", f"127.0.0.1 {primary.port}"]).start()
    if nice:  # (a replica given a core's worth of CPU, as on a host of its own)
        os.setpriority(os.PRIO_PROCESS, replica.pid, nice)
    return replica


def run_round(with_replica: bool, requests: int, clients: int, nice: int = 0, kind: str = "tstream") -> dict:
    primary = ServerProcess(kind).start()
    replica = None
    try:
        if with_replica:
            replica = start_replica(primary, nice)
            c = replica.client()
            deadline = time.monotonic() + 30
            while c.info("replication").get("master_link_status") != "up":
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica did not link")
                time.sleep(0.05)
            c.close()
        lags: list[float] = []
        after_reply: list[float] = []
        stop = threading.Event()
        thread = None
        if replica is not None:
            thread = threading.Thread(target=probe, args=(primary.port, replica.port, stop, lags, after_reply, kind))
            thread.start()
        try:
            rate = twrite_rate(primary.port, requests, clients, kind)
        finally:
            stop.set()
            if thread is not None:
                thread.join(10)
        result = {"server": kind, "with_replica": with_replica, "twrite_per_sec": rate}
        if replica is not None:
            p, r = primary.client(), replica.client()
            p.execute("WAIT", 1, 5000)
            result["primary_offset"] = int(p.info("replication")["master_repl_offset"])
            result["replica_offset"] = int(r.info("replication")["slave_repl_offset"])
            p.close()
            r.close()
            lags.sort()
            after_reply.sort()
            result.update({"lag_samples": len(lags), "lag_p50_ms": percentile(lags, 50),
                           "lag_p99_ms": percentile(lags, 99), "lag_max_ms": lags[-1] if lags else None,
                           "after_reply_p50_ms": percentile(after_reply, 50),
                           "after_reply_p99_ms": percentile(after_reply, 99), "replica_nice": nice})
        return result
    finally:
        if replica is not None:
            replica.stop()
        primary.stop()


def paced_writes(port: int, rate: int, stop: threading.Event) -> None:
    """``rate`` TWRITEs per second on ``port``, a pipeline of rate/100 every 10 ms."""
    c = Client(port)
    per_tick = max(1, rate // 100)
    command = encode("TWRITE", "w", "t", "x" * 100) * per_tick
    next_at = time.perf_counter()
    try:
        while not stop.is_set():
            c.send(command)
            c.read_replies(per_tick)
            next_at += 0.01
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    finally:
        c.close()


def read_round(on_replica: bool, requests: int, clients: int, write_rate: int) -> dict:
    """DGET rate (redis-benchmark, ``clients`` unpipelined) while the primary
    takes ``write_rate`` TWRITEs per second: served by the primary itself, or by
    a replica of it."""
    primary = ServerProcess("tstream").start()
    replica = None
    writer = None
    try:
        c = primary.client()
        for i in range(1000):
            c.execute("TWRITE", "bench", f"t{i % 8}", "x" * 100)
        target = primary
        if on_replica:
            replica = start_replica(primary)
            r = replica.client()
            deadline = time.monotonic() + 30
            while r.info("replication").get("master_link_status") != "up":
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica did not link")
                time.sleep(0.05)
            r.close()
            target = replica
        stop = threading.Event()
        writer = threading.Thread(target=paced_writes, args=(primary.port, write_rate, stop))
        writer.start()
        time.sleep(1)
        before = int(c.info("replication")["master_repl_offset"]) if on_replica else 0
        written_before = c.execute("TINFO", "w")
        rate = benchmark_rate(target.port, requests, clients, "DGET", "bench", "SEQ", "500")
        written_after = c.execute("TINFO", "w")
        c.close()
        return {"on_replica": on_replica, "dget_per_sec": rate, "write_rate": write_rate,
                "writes_during": _length(written_after) - _length(written_before), "repl_offset_before": before}
    finally:
        if writer is not None:
            stop.set()
            writer.join(10)
        if replica is not None:
            replica.stop()
        primary.stop()


def _length(tinfo) -> int:
    fields = dict(zip(tinfo[::2], tinfo[1::2]))
    return int(fields[b"length"])


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
    parser.add_argument("--replica-nice", type=int, default=0, metavar="N",
                        help="run the replica at this nice value (negative: a core's worth of CPU for it, "
                             "as on a host of its own)")
    parser.add_argument("--reads", action="store_true",
                        help="only: DGET rate on a replica vs on a lone primary, while the primary takes writes")
    parser.add_argument("--write-rate", type=int, default=2000, help="--reads: TWRITEs per second on the primary")
    parser.add_argument("--redis", action="store_true",
                        help="the write measurement on redis-server (XADD; redis-server replica) instead of tstream")
    args = parser.parse_args()
    load_before = os.getloadavg()
    if args.reads:
        rounds = []
        for i in range(args.rounds):
            for on_replica in (False, True):
                result = read_round(on_replica, args.requests, args.clients, args.write_rate)
                rounds.append(result)
                print(f"round {i + 1} DGET on {'a replica     ' if on_replica else 'a lone primary'}: "
                      f"{result['dget_per_sec']:>10,.0f} DGET/s ({result['writes_during']:,} writes on the "
                      f"primary meanwhile)", flush=True)
        alone = [r["dget_per_sec"] for r in rounds if not r["on_replica"]]
        paired = [r["dget_per_sec"] for r in rounds if r["on_replica"]]
        ratios = [b / a for a, b in zip(alone, paired)]
        summary = {"ratios_same_round": ratios, "median_ratio": statistics.median(ratios),
                   "load_before": load_before, "load_after": os.getloadavg()}
        print(f"replica / lone primary DGET rate per round: {', '.join(f'{x:.2f}x' for x in ratios)} "
              f"(median {summary['median_ratio']:.2f}x); load average before {load_before[0]:.2f}, "
              f"after {summary['load_after'][0]:.2f}")
        save_result("replication-reads", {"command": script_command(), "facts": machine_facts(),
                                          "args": vars(args), "rounds": rounds, "summary": summary})
        return
    if args.resync:
        result = resync_vs_load(args.resync)
        print(f"{result['entries']:,} entries ({result['snapshot_bytes']:,} bytes of snapshot): load at start "
              f"{result['load_s']:.2f} s (process start included), full resync {result['full_resync_s']:.2f} s: "
              f"{result['ratio']:.2f}x")
        save_result("replication-resync", {"command": script_command(), "facts": machine_facts(),
                                           "args": vars(args), "result": result})
        return
    kind = "redis" if args.redis else "tstream"
    command = "XADD" if args.redis else "TWRITE"
    rounds = []
    for i in range(args.rounds):
        for with_replica in (False, True):
            result = run_round(with_replica, args.requests, args.clients, args.replica_nice, kind)
            rounds.append(result)
            extra = (f"  replica lag p50 {result['lag_p50_ms']:.2f} ms p99 {result['lag_p99_ms']:.2f} ms "
                     f"(after the primary's reply: p50 {result['after_reply_p50_ms']:.2f} p99 "
                     f"{result['after_reply_p99_ms']:.2f}; {result['lag_samples']} samples)" if with_replica else "")
            print(f"round {i + 1} {'primary + 1 replica' if with_replica else 'lone primary       '}: "
                  f"{result['twrite_per_sec']:>10,.0f} {command}/s{extra}", flush=True)
    alone = [r["twrite_per_sec"] for r in rounds if not r["with_replica"]]
    paired = [r["twrite_per_sec"] for r in rounds if r["with_replica"]]
    ratios = [b / a for a, b in zip(alone, paired)]
    p99s = [r["lag_p99_ms"] for r in rounds if r["with_replica"]]
    summary = {"median_alone": statistics.median(alone), "median_with_replica": statistics.median(paired),
               "ratios_same_round": ratios, "median_ratio": statistics.median(ratios),
               "lag_p99_ms_per_round": p99s, "load_before": load_before, "load_after": os.getloadavg()}
    print(f"with one replica / alone, per round: {', '.join(f'{x:.2f}x' for x in ratios)} "
          f"(median {summary['median_ratio']:.2f}x); replica lag p99 per round: "
          f"{', '.join(f'{x:.2f}' for x in p99s)} ms; load average before {load_before[0]:.2f}, "
          f"after {summary['load_after'][0]:.2f}")
    save_result("replication-redis" if args.redis else "replication", {"command": script_command(), "facts": machine_facts(), "args": vars(args),
                                "rounds": rounds, "summary": summary})


if __name__ == "__main__":
    main()
