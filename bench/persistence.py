#!/usr/bin/env python3
"""Persistence: durable writes, snapshot save/load, BGSAVE latency, AOF restart; tstream vs redis-server.

Three parts, each against a redis-server started in the same run, in temp directories on
the same filesystem (``--tmp``, default the system temp dir), deleted when the part ends:

1. **Durable writes.** ``redis-benchmark -c 50 -n N`` of ``TWRITE bench:key tag value`` on
   tstream with ``--appendonly yes --appendfsync always`` vs ``XADD bench:key * tag value``
   on redis-server with the same options (both ``--save ""``); median of ``--repeat``
   interleaved runs, the key deleted before each. The same with ``appendfsync everysec``
   and with the AOF off, for context. Target: tstream >= 0.6x redis with ``always``.
2. **Snapshots.** The same ``--entries`` entries (8-byte tags of 1000 distinct, 100-byte
   payloads, half English-like text with a counter, half random bytes, generated from a
   fixed seed) written to one stream in each server (tstream: pipelined ``TWRITE key
   ENTRIES`` of 1000 pairs; redis: the same entries as pipelined ``XADD key * tag
   payload``). Then ``SAVE`` timed on both (the command's round trip; both fsync the
   file), the file sizes (``dump.tsr`` vs ``dump.rdb``), then ``BGSAVE`` on both while a
   client sends PINGs one after another (max and p99 round trip while it runs; the issue
   asks that no client waits more than 100 ms), then each server is restarted on its
   file ``--restarts`` times and the time from spawning the process until it answers
   PING with the data loaded is measured (then the length is checked: TINFO length /
   XLEN). The start time of an empty server is reported next to it. Targets: tstream
   loads at least as fast as redis; its file is no larger than redis's RDB.
3. **AOF restart.** A ~``--aof-bytes`` tstream AOF (``appendfsync no`` while building,
   ``--auto-aof-rewrite-percentage 0`` so nothing compacts it), written as a mix of
   ``TWRITE key ENTRIES`` batches of 100 entries and single ``TWRITE key tag payload``
   (same payloads as above, 4 keys), then SIGKILL and a timed restart (spawn until PING
   answers; the lengths are checked). Records/s and MB/s of the replay. For context the
   same entries go to redis-server as ``XADD``s (``--aof-use-rdb-preamble no``,
   ``--auto-aof-rewrite-percentage 0``), killed and restarted the same way.

    .venv/bin/python bench/persistence.py [--quick] [--parts durable,snapshot,aof]
        [--entries 10000000] [--aof-bytes 1000000000] [--n-always 200000] [--source DIR] ...

``--parts snapshot`` (for instance) re-measures one part: the parts left out keep their
figures from the existing results file, marked as coming from that earlier run
(``earlier_parts`` in the JSON, a note in the report); ``--replace`` writes only this
run's parts instead.

About 4 minutes on the 2-core machine (``--quick``: 20 s); up to ~3 GB of disk at a time.
Wrap full runs in ``flock /tmp/tstream-bench.lock`` when other benchmarks share the machine.
``--source`` points the servers at another checkout (e.g. a clone of a commit) when the
work tree is being edited while the benchmark runs.

(This script shares its name with the ``persistence`` package: run as a script, ``bench/``
comes first on ``sys.path``, so nothing here may import the package; the servers run in
their own processes and import it from the source tree.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from common import (REDIS_SERVER, REPO, RESULTS_DIR, TSTREAM_SERVER, Client, _die_with_parent, as_map, encode,
                    free_port, machine_facts, median, percentile, save_result, script_command, sigterm_as_exit)
from throughput import benchmark_argv, run_benchmark

TAG_COUNT = 1000
PAYLOAD = 100
SENTENCE = b"The quick brown fox jumps over the lazy dog while the log keeps on growing. "
TAGS = [b"$8\r\ntag%05d\r\n" % t for t in range(TAG_COUNT)]
SOURCE = str(REPO)  # the tstream source tree the servers import (--source)
TARGETS = {"durable_always_ratio": 0.6, "load_ratio": 1.0, "file_ratio": 1.0, "bgsave_max_ping_ms": 100.0}


# --- data -------------------------------------------------------------------------------

class EntryMaker:
    """Batches of entries as pre-encoded RESP bulk strings ``$8 tag`` + ``$100 payload``.

    Half of the payloads (drawn at random) are English-like text with the entry's number in
    it, half random bytes; tags are ``tag00000``..``tag00999`` drawn at random. Seeded, so
    every run writes the same data, and each batch goes to both servers.
    """

    def __init__(self, seed: int = 11) -> None:
        self.rng = random.Random(seed)
        self.count = 0
        self.raw_bytes = 0

    def batch(self, size: int) -> list[bytes]:
        rng = self.rng
        tags = rng.choices(TAGS, k=size)
        kinds = rng.getrandbits(size)
        noise = rng.randbytes(PAYLOAD * size)
        out = []
        base = self.count
        for i in range(size):
            if (kinds >> i) & 1:
                payload = (b"entry %08d: " % (base + i) + SENTENCE * 2)[:PAYLOAD]
            else:
                payload = noise[i * PAYLOAD:(i + 1) * PAYLOAD]
            out.append(tags[i] + b"$100\r\n" + payload + b"\r\n")
        self.count += size
        self.raw_bytes += size * (8 + PAYLOAD)
        return out


def twrite_entries(key: bytes, pairs: list[bytes]) -> bytes:
    return (b"*%d\r\n$6\r\nTWRITE\r\n$%d\r\n%s\r\n$7\r\nENTRIES\r\n" % (3 + 2 * len(pairs), len(key), key)
            + b"".join(pairs))


def twrite_singles(key: bytes, pairs: list[bytes]) -> bytes:
    head = b"*4\r\n$6\r\nTWRITE\r\n$%d\r\n%s\r\n" % (len(key), key)
    return b"".join([head + p for p in pairs])


def xadds(key: bytes, pairs: list[bytes]) -> bytes:
    head = b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n" % (len(key), key)
    return b"".join([head + p for p in pairs])


class Pipe:
    """A client that keeps up to ``window`` requests groups in flight and checks their replies."""

    def __init__(self, client: Client, window: int = 4) -> None:
        self.client = client
        self.window = window
        self.inflight: list[int] = []  # replies expected per group

    def send(self, data: bytes, replies: int) -> None:
        self.client.send(data)
        self.inflight.append(replies)
        while len(self.inflight) > self.window:
            self._drain_one()

    def _drain_one(self) -> None:
        for _ in range(self.inflight.pop(0)):
            self.client.read_reply()  # raises ReplyError on an error reply

    def drain(self) -> None:
        while self.inflight:
            self._drain_one()


# --- servers on a given directory, restartable, with timed starts ------------------------

class DirServer:
    """A tstream-server or redis-server on ``directory`` (kept across restarts)."""

    def __init__(self, kind: str, directory: str, options: list[str]) -> None:
        self.kind = kind
        self.dir = directory
        self.options = options
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(directory, "server.log")
        os.makedirs(directory, exist_ok=True)

    @property
    def argv(self) -> list[str]:
        if self.kind == "tstream":
            return [TSTREAM_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                    *self.options]
        return [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--daemonize", "no", *self.options]

    def command_line(self) -> str:
        return shlex.join(self.argv)

    def start(self, timeout: float = 600.0) -> float:
        """Spawn and wait until PING answers PONG (not -LOADING); returns the seconds taken."""
        env = dict(os.environ)
        if self.kind == "tstream":
            env["PYTHONPATH"] = os.pathsep.join(p for p in (SOURCE, env.get("PYTHONPATH")) if p)
        log = open(self.log_path, "ab")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     cwd=self.dir, env=env, preexec_fn=_die_with_parent)
        log.close()
        ping = encode("PING")
        reply = None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode} at start:\n{self.log_tail()}")
            if time.perf_counter() - t0 > timeout:
                self.kill()
                raise RuntimeError(f"{self.kind} did not answer PONG in {timeout}s (last reply {reply!r}):\n"
                                   f"{self.log_tail()}")
            try:
                c = Client(self.port, timeout=10)
            except OSError:
                time.sleep(0.002)  # not listening yet (tstream loads before it listens)
                continue
            try:
                while time.perf_counter() - t0 <= timeout:
                    c.send(ping)
                    reply = c.read_reply(check=False)
                    if reply == b"PONG":
                        return time.perf_counter() - t0
                    time.sleep(0.002)  # -LOADING (redis accepts clients while it loads)
            except (OSError, ConnectionError):
                time.sleep(0.002)  # closed under us while starting: connect again
            finally:
                c.close()

    def client(self, **kw) -> Client:
        return Client(self.port, **kw)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def log_tail(self, n: int = 20) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def loaded_seconds(self) -> float | None:
        """The load time the server logged itself (last ``... loaded ...: X seconds`` line)."""
        found = None
        try:
            with open(self.log_path, "rb") as f:
                for line in f.read().decode(errors="replace").splitlines():
                    m = re.search(r"loaded.*?([0-9.]+) seconds", line)
                    if m and "incr file" not in line and "base file" not in line:
                        found = float(m.group(1))
        except OSError:
            pass
        return found


def stream_length(kind: str, client: Client, key: bytes) -> int:
    if kind == "redis":
        return int(client.execute("XLEN", key))
    return int(as_map(client.execute("TINFO", key))["length"])


def dir_size(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            if name != "server.log":
                total += os.path.getsize(os.path.join(root, name))
    return total


def file_sizes(path: str) -> dict[str, int]:
    out = {}
    for root, _dirs, files in os.walk(path):
        for name in files:
            if name != "server.log":
                full = os.path.join(root, name)
                out[os.path.relpath(full, path)] = os.path.getsize(full)
    return out


def empty_start_seconds(kind: str, tmp: str, options: list[str], times: int = 3) -> float:
    """Median spawn-to-PONG time of a server with nothing to load (the floor of a restart)."""
    d = tempfile.mkdtemp(prefix=f"bench-persist-empty-{kind}-", dir=tmp)
    try:
        out = []
        for _ in range(times):
            s = DirServer(kind, d, options)
            out.append(s.start())
            s.kill(signal.SIGTERM)
        return median(out)
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --- 1. durable writes --------------------------------------------------------------------

def part_durable(args, tmp: str) -> dict:
    twrite = ["TWRITE", "bench:key", "tag", "value"]
    xadd = ["XADD", "bench:key", "*", "tag", "value"]
    out = {"clients": args.clients, "repeat": args.repeat, "cases": []}
    for policy, n in (("always", args.n_always), ("everysec", args.n_everysec), ("off", args.n_everysec)):
        opts = (["--save", "", "--appendonly", "no"] if policy == "off"
                else ["--save", "", "--appendonly", "yes", "--appendfsync", policy])
        root = tempfile.mkdtemp(prefix="bench-persist-durable-", dir=tmp)
        srv = {"tstream": DirServer("tstream", os.path.join(root, "tstream"), opts),
               "redis": DirServer("redis", os.path.join(root, "redis"), opts)}
        try:
            for s in srv.values():
                s.start(60)
            clients = {k: s.client() for k, s in srv.items()}
            runs = {"redis": [], "tstream": []}
            argvs = {"redis": benchmark_argv(srv["redis"].port, args.clients, n, 1, xadd),
                     "tstream": benchmark_argv(srv["tstream"].port, args.clients, n, 1, twrite)}
            for i in range(args.repeat):
                for name in ("redis", "tstream"):
                    c = clients[name]
                    c.execute("DEL", "bench:key")
                    aof0 = dir_size(os.path.join(srv[name].dir, "appendonlydir"))
                    r = run_benchmark(argvs[name], args.timeout)
                    length = stream_length(name, c, b"bench:key")
                    if not n <= length <= n + args.clients:
                        raise RuntimeError(f"{name}: {n} writes sent but the stream holds {length}")
                    time.sleep(0.05)
                    r["stream_length"] = length
                    r["aof_bytes_per_write"] = round(
                        (dir_size(os.path.join(srv[name].dir, "appendonlydir")) - aof0) / length, 1)
                    runs[name].append(r)
                    print(f"  appendfsync {policy:8s} run {i + 1}/{args.repeat} {name:8s} {r['rps']:>9,.0f} req/s"
                          f"  p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  ({r['elapsed_s']} s)", flush=True)
            for c in clients.values():
                c.close()
            med = {k: median(x["rps"] for x in v) for k, v in runs.items()}
            ratio = med["tstream"] / med["redis"]
            case = {"appendfsync": policy, "n": n, "runs": runs, "median_rps": med, "ratio": ratio,
                    "target_ratio": TARGETS["durable_always_ratio"] if policy == "always" else None,
                    "commands": {k: shlex.join(["redis-benchmark", *v[1:]]) for k, v in argvs.items()},
                    "servers": {k: s.command_line() for k, s in srv.items()}}
            if policy == "always":
                case["meets_target"] = ratio >= TARGETS["durable_always_ratio"]
            out["cases"].append(case)
            print(f"appendfsync {policy}: redis {med['redis']:,.0f} req/s, tstream {med['tstream']:,.0f} req/s, "
                  f"ratio {ratio:.2f}x", flush=True)
        finally:
            for s in srv.values():
                s.kill(signal.SIGTERM)
            shutil.rmtree(root, ignore_errors=True)
    return out


# --- 2. snapshots ---------------------------------------------------------------------------

class PingProbe(threading.Thread):
    """Sends PING after PING on its own connection and records (send time, round trip)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.client = Client(port)
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        c = self.client
        ping = encode("PING")
        try:
            while not self.stop.is_set():
                t0 = time.perf_counter()
                c.send(ping)
                reply = c.read_reply()
                t1 = time.perf_counter()
                if reply != b"PONG":
                    raise RuntimeError(f"PING replied {reply!r}")
                self.samples.append((t0, t1 - t0))
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            c.close()

    def window(self, start: float, end: float) -> list[float]:
        """Round trips (ms) of the PINGs sent in [start, end], or in flight at ``start``."""
        return sorted(dt * 1000 for t, dt in self.samples if t <= end and t + dt >= start)


def latency_stats(ms: list[float]) -> dict:
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99),
            "p999_ms": percentile(ms, 99.9), "max_ms": ms[-1]}


def bgsave_with_pings(kind: str, server: DirServer, baseline_s: float = 1.0) -> dict:
    """BGSAVE while a PingProbe runs; latency before (baseline) and while the save runs."""
    probe = PingProbe(server.port)
    ctl = server.client()
    probe.start()
    try:
        time.sleep(baseline_s)
        t_base_end = time.perf_counter()
        t0 = time.perf_counter()
        reply = ctl.execute("BGSAVE")
        t_reply = time.perf_counter()
        if not (isinstance(reply, bytes) and b"started" in reply.lower()):
            raise RuntimeError(f"{kind} BGSAVE replied {reply!r}")
        while True:
            info = ctl.info("persistence")
            if info.get("rdb_bgsave_in_progress") == "0":
                break
            time.sleep(0.01)
        t1 = time.perf_counter()
        ok = info.get("rdb_last_bgsave_status") == "ok"
        time.sleep(0.2)
    finally:
        probe.stop.set()
        probe.join(30)
        ctl.close()
    if probe.error is not None:
        raise RuntimeError(f"{kind}: the PING probe failed: {probe.error!r}")
    base = [dt * 1000 for t, dt in probe.samples if t < t_base_end - 0.1]
    during = probe.window(t0, t1)
    return {"seconds": round(t1 - t0, 3), "status_ok": ok, "bgsave_reply_ms": round((t_reply - t0) * 1000, 2),
            "ping_during": latency_stats(during), "ping_baseline": latency_stats(sorted(base))}


def load_stream(servers_: dict[str, DirServer], entries: int, batch: int, key: bytes) -> dict:
    maker = EntryMaker()
    pipes = {k: Pipe(s.client(), window=4) for k, s in servers_.items()}
    t0 = time.perf_counter()
    last = t0
    written = 0
    while written < entries:
        size = min(batch, entries - written)
        pairs = maker.batch(size)
        pipes["tstream"].send(twrite_entries(key, pairs), 1)
        pipes["redis"].send(xadds(key, pairs), size)
        written += size
        now = time.perf_counter()
        if now - last > 15:
            print(f"    written {written:,} entries in {now - t0:.0f} s", flush=True)
            last = now
    for p in pipes.values():
        p.drain()
        p.client.close()
    return {"entries": written, "seconds": round(time.perf_counter() - t0, 1),
            "raw_bytes_per_entry": maker.raw_bytes / max(written, 1)}


def timed_restarts(server: DirServer, key: bytes | None, expect: int, times: int,
                   keys: dict[bytes, int] | None = None) -> list[dict]:
    out = []
    for _ in range(times):
        server.kill(signal.SIGTERM)  # save "" on both: nothing is saved at exit
        seconds = server.start()
        c = server.client()
        try:
            for k, n in (keys or {key: expect}).items():
                got = stream_length(server.kind, c, k)
                if got != n:
                    raise RuntimeError(f"{server.kind} after restart: {k!r} holds {got}, expected {n}")
            rss = _rss(server.proc.pid)
        finally:
            c.close()
        out.append({"seconds": round(seconds, 3), "logged_load_seconds": server.loaded_seconds(), "rss": rss})
        print(f"    {server.kind:8s} restart: PONG with the data after {seconds:.2f} s "
              f"(its log: {server.loaded_seconds()} s)", flush=True)
    return out


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def part_snapshot(args, tmp: str) -> dict:
    key = b"bench:snap"
    root = tempfile.mkdtemp(prefix="bench-persist-snapshot-", dir=tmp)
    opts = ["--save", "", "--appendonly", "no"]
    srv = {"tstream": DirServer("tstream", os.path.join(root, "tstream"), opts),
           "redis": DirServer("redis", os.path.join(root, "redis"), opts)}
    out: dict = {"entries": args.entries, "batch": 1000,
                 "servers": {k: s.command_line() for k, s in srv.items()}}
    try:
        out["empty_start_seconds"] = {k: round(empty_start_seconds(k, tmp, opts), 3) for k in srv}
        for s in srv.values():
            s.start(60)
        print(f"  writing {args.entries:,} entries to both servers ...", flush=True)
        out["load"] = load_stream(srv, args.entries, 1000, key)
        clients = {k: s.client() for k, s in srv.items()}
        for k, c in clients.items():
            n = stream_length(k, c, key)
            if n != args.entries:
                raise RuntimeError(f"{k} holds {n} entries after the writes, expected {args.entries}")
        out["rss_before_save"] = {k: _rss(s.proc.pid) for k, s in srv.items()}
        out["redis_rdbcompression"] = as_map(clients["redis"].execute("CONFIG", "GET", "rdbcompression"))
        print(f"  written in {out['load']['seconds']} s; SAVE ...", flush=True)
        save = {}
        for k in ("redis", "tstream"):
            t0 = time.perf_counter()
            reply = clients[k].execute("SAVE")
            save[k] = round(time.perf_counter() - t0, 3)
            if reply != b"OK":
                raise RuntimeError(f"{k} SAVE replied {reply!r}")
            print(f"    {k:8s} SAVE {save[k]:.2f} s", flush=True)
        out["save_seconds"] = save
        files = {"tstream": os.path.join(srv["tstream"].dir, "dump.tsr"),
                 "redis": os.path.join(srv["redis"].dir, "dump.rdb")}
        out["file_bytes"] = {k: os.path.getsize(p) for k, p in files.items()}
        out["file_ratio"] = out["file_bytes"]["tstream"] / out["file_bytes"]["redis"]
        print(f"    files: dump.tsr {out['file_bytes']['tstream']:,} B, dump.rdb {out['file_bytes']['redis']:,} B "
              f"({out['file_ratio']:.2f}x)", flush=True)
        for c in clients.values():
            c.close()
        out["bgsave"] = {}
        for k in ("tstream", "redis"):
            out["bgsave"][k] = b = bgsave_with_pings(k, srv[k])
            d = b["ping_during"]
            print(f"    {k:8s} BGSAVE {b['seconds']:.2f} s; PING while it ran: n={d.get('n')} "
                  f"p99 {d.get('p99_ms', 0):.2f} ms max {d.get('max_ms', 0):.2f} ms "
                  f"(baseline max {b['ping_baseline'].get('max_ms', 0):.2f} ms); BGSAVE reply "
                  f"{b['bgsave_reply_ms']} ms", flush=True)
        out["file_bytes_after_bgsave"] = {k: os.path.getsize(p) for k, p in files.items()}
        print("  restarts ...", flush=True)
        out["restarts"] = {}
        for k in ("redis", "tstream"):
            out["restarts"][k] = timed_restarts(srv[k], key, args.entries, args.restarts)
        med = {k: median(r["seconds"] for r in v) for k, v in out["restarts"].items()}
        out["restart_median_seconds"] = med
        out["load_ratio"] = med["tstream"] / med["redis"]  # < 1: tstream faster
        out["meets_target"] = {"load": med["tstream"] <= med["redis"],
                               "file": out["file_ratio"] <= TARGETS["file_ratio"],
                               "bgsave_ping": out["bgsave"]["tstream"]["ping_during"].get("max_ms", 0)
                               <= TARGETS["bgsave_max_ping_ms"]}
        print(f"  restart medians: redis {med['redis']:.2f} s, tstream {med['tstream']:.2f} s "
              f"(tstream/redis {out['load_ratio']:.2f}x)", flush=True)
    finally:
        for s in srv.values():
            s.kill(signal.SIGTERM)
        shutil.rmtree(root, ignore_errors=True)
    return out


# --- 3. AOF restart --------------------------------------------------------------------------

def part_aof(args, tmp: str) -> dict:
    keys = [b"bench:aof:%d" % i for i in range(4)]
    root = tempfile.mkdtemp(prefix="bench-persist-aof-", dir=tmp)
    t_opts = ["--save", "", "--appendonly", "yes", "--appendfsync", "no", "--auto-aof-rewrite-percentage", "0"]
    r_opts = t_opts + ["--aof-use-rdb-preamble", "no"]
    srv = {"tstream": DirServer("tstream", os.path.join(root, "tstream"), t_opts)}
    if args.aof_redis:
        srv["redis"] = DirServer("redis", os.path.join(root, "redis"), r_opts)
    out: dict = {"target_bytes": args.aof_bytes, "batch": args.aof_batch, "singles": args.aof_singles,
                 "keys": len(keys), "servers": {k: s.command_line() for k, s in srv.items()}}
    try:
        for s in srv.values():
            s.start(60)
        aofdir = os.path.join(srv["tstream"].dir, "appendonlydir")
        maker = EntryMaker(seed=12)
        pipes = {k: Pipe(s.client(), window=4) for k, s in srv.items()}
        lengths = dict.fromkeys(keys, 0)
        commands = 0
        chunk = 0
        t0 = time.perf_counter()
        last = t0
        print(f"  building a ~{args.aof_bytes / 1e6:,.0f} MB tstream AOF"
              f"{' (and the same XADDs to redis)' if args.aof_redis else ''} ...", flush=True)
        while True:
            key = keys[chunk % len(keys)]
            pairs = maker.batch(args.aof_batch + args.aof_singles)
            batch, singles = pairs[:args.aof_batch], pairs[args.aof_batch:]
            pipes["tstream"].send(twrite_entries(key, batch) + twrite_singles(key, singles), 1 + len(singles))
            if "redis" in pipes:
                pipes["redis"].send(xadds(key, pairs), len(pairs))
            lengths[key] += len(pairs)
            commands += 1 + len(singles)
            chunk += 1
            if chunk % 64 == 0:
                size = dir_size(aofdir)
                now = time.perf_counter()
                if now - last > 15:
                    print(f"    {size / 1e6:,.0f} MB, {maker.count:,} entries, {now - t0:.0f} s", flush=True)
                    last = now
                if size >= args.aof_bytes:
                    break
        for p in pipes.values():
            p.drain()
            c = p.client
            c.execute("PING")  # a later loop turn: the last turn's records are written
            for k, n in lengths.items():
                got = stream_length("redis" if p is pipes.get("redis") else "tstream", c, k)
                if got != n:
                    raise RuntimeError(f"{k!r} holds {got} entries, expected {n}")
            c.close()
        out["build_seconds"] = round(time.perf_counter() - t0, 1)
        out["entries"] = maker.count
        out["commands"] = commands
        time.sleep(0.5)
        out["files"] = {k: file_sizes(os.path.join(s.dir, "appendonlydir")) for k, s in srv.items()}
        out["aof_bytes"] = {k: dir_size(os.path.join(s.dir, "appendonlydir")) for k, s in srv.items()}
        out["rss_before_kill"] = {k: _rss(s.proc.pid) for k, s in srv.items()}
        print(f"  built in {out['build_seconds']} s: {maker.count:,} entries, {commands:,} TWRITEs; AOF bytes "
              f"{out['aof_bytes']}", flush=True)
        out["empty_start_seconds"] = {k: round(empty_start_seconds(k, tmp, opts), 3)
                                      for k, opts in (("tstream", t_opts), ("redis", r_opts)) if k in srv}
        out["restarts"] = {}
        for k in ("tstream", "redis"):
            if k not in srv:
                continue
            srv[k].kill(signal.SIGKILL)
            runs = []
            for i in range(args.aof_restarts):
                if i:
                    srv[k].kill(signal.SIGKILL)
                seconds = srv[k].start()
                c = srv[k].client()
                try:
                    for key, n in lengths.items():
                        got = stream_length(k, c, key)
                        if got != n:
                            raise RuntimeError(f"{k} after restart: {key!r} holds {got}, expected {n}")
                finally:
                    c.close()
                logged = srv[k].loaded_seconds()
                runs.append({"seconds": round(seconds, 3), "logged_load_seconds": logged,
                             "rss": _rss(srv[k].proc.pid)})
                print(f"    {k:8s} restart after SIGKILL: PONG with the data after {seconds:.2f} s "
                      f"(its log: {logged} s)", flush=True)
            out["restarts"][k] = runs
        if "tstream" in srv:
            m = re.findall(r"(\d+) records", open(srv["tstream"].log_path, errors="replace").read())
            out["tstream_records"] = int(m[-1]) if m else None
        med = {k: median(r["seconds"] for r in v) for k, v in out["restarts"].items()}
        out["restart_median_seconds"] = med
        out["rates"] = {}
        for k, secs in med.items():
            records = out["tstream_records"] if k == "tstream" and out.get("tstream_records") else (
                commands if k == "tstream" else maker.count)
            out["rates"][k] = {"records": records, "records_per_s": records / secs,
                               "entries_per_s": maker.count / secs, "mb_per_s": out["aof_bytes"][k] / 1e6 / secs}
            r = out["rates"][k]
            print(f"  {k}: {secs:.2f} s for {out['aof_bytes'][k] / 1e6:,.0f} MB: {r['records_per_s']:,.0f} records/s, "
                  f"{r['entries_per_s']:,.0f} entries/s, {r['mb_per_s']:,.1f} MB/s", flush=True)
    finally:
        for s in srv.values():
            s.kill(signal.SIGTERM)
        shutil.rmtree(root, ignore_errors=True)
    return out


# --- main ---------------------------------------------------------------------------------------

ALL_PARTS = ("durable", "snapshot", "aof")


def carry_over_parts(result: dict, path, skipped: list[str]) -> None:
    """Copy the ``skipped`` parts' figures from the results file at ``path`` (an earlier
    run) into ``result``, with where they came from under ``earlier_parts``."""
    if not skipped or not path.exists():
        return
    old = json.loads(path.read_text())
    if old.get("quick") != result.get("quick"):
        return
    earlier = dict(result.get("earlier_parts", {}))
    for part in skipped:
        if part not in old:
            continue
        result[part] = old[part]
        m = old.get("machine", {})
        earlier[part] = old.get("earlier_parts", {}).get(part) or {
            "command": old.get("command"), "date": m.get("date"), "loadavg_at_start": m.get("loadavg_at_start"),
            "loadavg_at_end": old.get("loadavg_at_end"), "tstream_source": m.get("tstream_source"),
            "tstream_source_commit": m.get("tstream_source_commit")}
    if earlier:
        result["earlier_parts"] = earlier


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke test of the whole script")
    ap.add_argument("--parts", default="durable,snapshot,aof")
    ap.add_argument("--tmp", default=tempfile.gettempdir(), help="where the servers' directories go")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n-always", type=int, default=200_000, help="requests per appendfsync always run")
    ap.add_argument("--n-everysec", type=int, default=200_000,
                    help="requests per appendfsync everysec run (and per AOF-off run)")
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--entries", type=int, default=10_000_000, help="entries of the snapshot part")
    ap.add_argument("--restarts", type=int, default=3, help="timed restarts per server (snapshot part)")
    ap.add_argument("--aof-bytes", type=int, default=1_000_000_000, help="tstream AOF size to build")
    ap.add_argument("--aof-batch", type=int, default=100, help="entries per TWRITE ENTRIES (AOF part)")
    ap.add_argument("--aof-singles", type=int, default=20, help="single TWRITEs after each batch (AOF part)")
    ap.add_argument("--aof-restarts", type=int, default=2, help="timed restarts per server (AOF part)")
    ap.add_argument("--no-aof-redis", dest="aof_redis", action="store_false",
                    help="skip redis-server in the AOF part")
    ap.add_argument("--source", default=str(REPO),
                    help="tstream source tree the servers import (default: this work tree; e.g. a "
                         "`git worktree add --detach DIR COMMIT` to measure a commit while the tree changes)")
    ap.add_argument("--out", default="persistence", help="results file name in the results/ directory (bench/runs/results unless TSTREAM_BENCH_OUT)")
    ap.add_argument("--replace", action="store_true",
                    help="with --parts leaving parts out: do not carry their figures over from the existing "
                         "results file")
    args = ap.parse_args()
    global SOURCE
    SOURCE = os.path.abspath(args.source)
    if args.quick:
        args.n_always, args.n_everysec = 5_000, 20_000
        args.entries, args.restarts, args.aof_restarts = 200_000, 2, 1
        args.aof_bytes = 30_000_000
        if args.out == "persistence":
            args.out = "persistence-quick"
    sigterm_as_exit()
    parts = args.parts.split(",")
    free = shutil.disk_usage(args.tmp).free
    print(f"temp dirs in {args.tmp} ({free / 1e9:.1f} GB free)", flush=True)

    facts = machine_facts()
    facts_dir = tempfile.mkdtemp(prefix="bench-persist-facts-", dir=args.tmp)
    try:
        for kind in ("tstream", "redis"):
            s = DirServer(kind, os.path.join(facts_dir, kind), ["--save", "", "--appendonly", "no"])
            s.start(60)
            try:
                c = s.client()
                info = c.info("server")
                c.close()
            finally:
                s.kill(signal.SIGTERM)
            if kind == "tstream":
                facts["tstream_version"] = info.get("tstream_version") or info.get("redis_version", "")
                facts["tstream_multiplexing_api"] = info.get("multiplexing_api", "?")
            else:
                facts["redis_version"] = info.get("redis_version", "")
                facts["redis_multiplexing_api"] = info.get("multiplexing_api", "?")
    finally:
        shutil.rmtree(facts_dir, ignore_errors=True)
    facts["tstream_source"] = SOURCE
    src_commit = subprocess.run(["git", "-C", SOURCE, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    src_dirty = subprocess.run(["git", "-C", SOURCE, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
    facts["tstream_source_commit"] = (src_commit or "?") + (" (with uncommitted changes)" if src_dirty else "")
    fs = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", args.tmp], capture_output=True, text=True)
    facts["tmp_dir"] = args.tmp
    facts["tmp_filesystem"] = " ".join(fs.stdout.split()) or "?"
    result = {"benchmark": "persistence", "command": script_command(), "machine": facts, "quick": args.quick,
              "targets": TARGETS}
    t_all = time.monotonic()
    unknown = [p for p in parts if p not in ALL_PARTS]
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}; parts: {', '.join(ALL_PARTS)}")
    for part, fn in (("durable", part_durable), ("snapshot", part_snapshot), ("aof", part_aof)):
        if part not in parts:
            continue
        print(f"=== {part}", flush=True)
        t0 = time.monotonic()
        result[part] = fn(args, args.tmp)
        result[part]["elapsed_s"] = round(time.monotonic() - t0, 1)
        print(f"=== {part} done in {result[part]['elapsed_s']} s", flush=True)
    result["elapsed_s"] = round(time.monotonic() - t_all, 1)
    if not args.replace:
        carry_over_parts(result, RESULTS_DIR / f"{args.out}.json", [p for p in ALL_PARTS if p not in parts])
    path = save_result(args.out, result)
    print(f"wrote {path} ({result['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
