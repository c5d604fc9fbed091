#!/usr/bin/env python3
"""Consumer groups: end-to-end throughput and blocked-reader wake-up latency, tstream vs redis-server.

1. Throughput. 4 producer processes each write ``--n`` messages of 100 bytes, one command per
   message (tstream ``TWRITE key tag payload``, redis ``XADD key * tag payload``), while 4
   consumer processes of one group read batches of 10 and acknowledge each batch:
       tstream  TREAD key - 10 GROUP g RETRY 30000 600000 BLOCK 1000   then  TACK key g o1 .. o10
       redis    XREADGROUP GROUP g consumer-i COUNT 10 BLOCK 1000 STREAMS key >   then  XACK key g id1 .. id10
   The group is created before the producers start (tstream ``TREAD key - 0 GROUP g``, redis
   ``XGROUP CREATE key g $ MKSTREAM``). Every client is redis-py in its own process (the GIL
   would otherwise be the bottleneck). Messages/s = 4*N / (first producer start .. last ack
   reply). Every run checks that each message was consumed exactly once (distinct offsets/ids
   and distinct producer/sequence numbers carried in the payloads both equal 4*N). Each server
   runs ``--repeat`` times, interleaved (redis, tstream, redis, ...); medians are reported.
   ``--ceiling`` adds a third server to these runs (redis, tstream, ceiling, redis, ...):
   bench/ceiling_server.py, uvloop + hiredis doing the least the T* loop needs (its docstring
   says what it does and does not do), with the same measures -- what a bare Python server
   costs in this loop. The wake-up latency part leaves it out.

2. Wake-up latency. A reader blocked in ``TREAD key $ 1 BLOCK 0`` (redis ``XREAD BLOCK 0 STREAMS
   key $``), and in a group read (``TREAD key $ 1 GROUP g RETRY 30000 600000 BLOCK 0`` / ``XREADGROUP
   GROUP g c COUNT 1 BLOCK 0 STREAMS key >``, acknowledged after the sample, untimed). Once the
   server reports the reader blocked (INFO ``blocked_clients``), a writer on another connection
   takes t0 = perf_counter_ns() and sends one write carrying t0; t1 is taken the moment the
   reader's reply arrives. Reader and writer are two raw sockets (hiredis parser) of one
   single-threaded process, so both times come from one clock; the process blocks in recv() on
   the reader's socket right after sending the write. ``--samples`` samples per case after
   ``--warmup`` discarded ones; p50/p90/p99 in microseconds.

Starts its own tstream server (``python -m server``) and redis-server on free loopback ports in
temporary directories with persistence off, and always stops them. Writes RESULTS-groups.md into bench/runs/ (the committed bench/RESULTS-groups.md with --out).

    .venv/bin/python bench/groups.py [--n 15000] [--repeat 3] [--samples 2000] [--ceiling] [--out FILE|-]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import re
import shlex
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

import hiredis
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT_DIR, ServerProcess, _cpu_model, _die_with_parent, _git  # noqa: E402
from common import loadavg as _loadavg
from common import sigterm_as_exit as _sigterm_as_exit  # noqa: E402  (bench/ is not a package)

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent

THROUGHPUT_TARGET = 0.8       # tstream/redis messages/s
LATENCY_TARGET_US = 1000.0    # tstream p50 wake-up latency
PAYLOAD_SIZE = 100
KEY = "bench:groups"
GROUP = "g"
TAG = "orders.new"


# --- process hygiene -----------------------------------------------------------------

# _die_with_parent, _sigterm_as_exit and free_port come from bench/common.py (imported above).


# --- a raw RESP client (latency test, server control) ---------------------------------

def encode(*args) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


class RawClient:
    """A blocking RESP2 client on a plain socket with hiredis for the replies."""

    def __init__(self, port: int, timeout: float = 60.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_reply(self):
        while True:
            reply = self.reader.gets()
            if reply is not False:
                break
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.reader.feed(chunk)
        if isinstance(reply, hiredis.ReplyError):
            raise RuntimeError(f"server error: {reply}")
        return reply

    def read_reply_timed(self):
        """The reply, and perf_counter_ns() taken as soon as its first bytes arrived."""
        reply = self.reader.gets()
        if reply is not False:
            return reply, time.perf_counter_ns()
        t1 = None
        while True:
            chunk = self.sock.recv(1 << 16)
            if t1 is None:
                t1 = time.perf_counter_ns()
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.reader.feed(chunk)
            reply = self.reader.gets()
            if reply is not False:
                break
        if isinstance(reply, hiredis.ReplyError):
            raise RuntimeError(f"server error: {reply}")
        return reply, t1

    def execute(self, *args):
        self.send(encode(*args))
        return self.read_reply()

    def info(self, section: str) -> dict[str, str]:
        raw = self.execute("INFO", section)
        out = {}
        for line in raw.decode(errors="replace").splitlines():
            k, sep, v = line.partition(":")
            if sep and not line.startswith("#"):
                out[k] = v.strip()
        return out


# --- servers --------------------------------------------------------------------------

class Server(ServerProcess):
    """A server of bench/common.py, with the counters this benchmark reports."""

    def cpu_seconds(self) -> tuple[float, float]:
        """(user, system) CPU time the server process used so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        tck = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tck, int(fields[12]) / tck

    def syscalls(self) -> tuple[int, int]:
        """(read-like, write-like) system calls the server process made so far (/proc/pid/io)."""
        io = {}
        with open(f"/proc/{self.proc.pid}/io") as f:
            for line in f:
                k, _, v = line.partition(":")
                io[k] = int(v)
        return io["syscr"], io["syscw"]

    def flushall(self) -> None:
        c = RawClient(self.port)
        try:
            c.execute("FLUSHALL")
        finally:
            c.close()


# --- throughput: client processes ------------------------------------------------------

def _connect(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=120)


def _payload(producer: int, seq: int) -> bytes:
    head = b"%d:%d:" % (producer, seq)
    return head + b"x" * (PAYLOAD_SIZE - len(head))


def producer_main(kind, port, index, n, barrier, out_q) -> None:
    _die_with_parent()
    try:
        r = _connect(port)
        r.ping()
        execute = r.execute_command
        barrier.wait()
        t_start = time.perf_counter_ns()
        if kind != "redis":  # tstream and the ceiling server
            for seq in range(n):
                execute("TWRITE", KEY, TAG, _payload(index, seq))
        else:
            for seq in range(n):
                execute("XADD", KEY, "*", TAG, _payload(index, seq))
        t_end = time.perf_counter_ns()
        r.close()
        out_q.put(("producer", index, t_start, t_end, None))
    except BaseException as exc:  # noqa: BLE001 - report whatever failed to the parent
        out_q.put(("error", index, 0, 0, f"producer {index}: {exc!r}"))
        barrier.abort()


def _redis_entries(reply) -> list:
    """XREADGROUP reply (RESP2 list or RESP3 dict, as redis-py parses it) -> [(id, fields)]."""
    if not reply:
        return []
    if isinstance(reply, dict):
        streams = reply.values()
    else:
        streams = [s[1] for s in reply]
    out = []
    for entries in streams:
        if entries and isinstance(entries[0], list) and entries[0] and isinstance(entries[0][0], tuple):
            entries = entries[0]  # RESP3 parser wraps the entries list once more
        out.extend(entries)
    return out


def consumer_main(kind, port, index, total, batch, barrier, acked_total, done, out_q) -> None:
    _die_with_parent()
    try:
        r = _connect(port)
        r.ping()
        execute = r.execute_command
        ids = []
        tags = []
        reads = 0  # reads that returned something
        t_last_ack = 0
        consumer = f"consumer-{index}"
        barrier.wait()
        while not done.is_set():
            if kind != "redis":  # tstream and the ceiling server
                reply = execute("TREAD", KEY, "-", batch, "GROUP", GROUP, "RETRY", 30000, 600000,
                                "BLOCK", 1000)
                if not reply:
                    continue
                offsets = [e[0] for e in reply]
                for e in reply:
                    tags.append(bytes(e[2][:e[2].index(b":", e[2].index(b":") + 1)]))
                acked = execute("TACK", KEY, GROUP, *offsets)
            else:
                reply = execute("XREADGROUP", "GROUP", GROUP, consumer, "COUNT", batch, "BLOCK", 1000,
                                "STREAMS", KEY, ">")
                entries = _redis_entries(reply)
                if not entries:
                    continue
                offsets = [e[0] for e in entries]
                for _, fields in entries:
                    data = fields[TAG.encode()] if isinstance(fields, dict) else fields[1]
                    tags.append(bytes(data[:data.index(b":", data.index(b":") + 1)]))
                acked = execute("XACK", KEY, GROUP, *offsets)
            t_last_ack = time.perf_counter_ns()
            reads += 1
            if acked != len(offsets):
                raise RuntimeError(f"acked {acked} of {len(offsets)}")
            ids.extend(offsets)
            with acked_total.get_lock():
                acked_total.value += len(offsets)
                finished = acked_total.value >= total
            if finished:
                done.set()
        r.close()
        out_q.put(("consumer", index, t_last_ack, len(ids), (ids, tags, reads)))
    except BaseException as exc:  # noqa: BLE001
        out_q.put(("error", index, 0, 0, f"consumer {index}: {exc!r}"))
        done.set()
        barrier.abort()


def throughput_run(server: Server, n: int, producers: int, consumers: int, batch: int,  # noqa: C901
                   timeout: float) -> dict:
    server.flushall()
    c = RawClient(server.port)
    try:
        if server.kind != "redis":  # tstream and the ceiling server
            c.execute("TREAD", KEY, "-", 0, "GROUP", GROUP)
        else:
            c.execute("XGROUP", "CREATE", KEY, GROUP, "$", "MKSTREAM")
    finally:
        c.close()
    total = n * producers
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(producers + consumers + 1)
    acked_total = ctx.Value("q", 0)
    done = ctx.Event()
    out_q = ctx.Queue()
    procs = [ctx.Process(target=consumer_main, args=(server.kind, server.port, i, total, batch, barrier,
                                                     acked_total, done, out_q), daemon=True)
             for i in range(consumers)]
    procs += [ctx.Process(target=producer_main, args=(server.kind, server.port, i, n, barrier, out_q),
                          daemon=True)
              for i in range(producers)]
    for p in procs:
        p.start()
    try:
        children0 = os.times()
        barrier.wait(timeout=60)
        cpu0, sys0 = server.cpu_seconds(), server.syscalls()
        wall0 = time.perf_counter_ns()
        cpu1 = wall1 = None
        results = []
        deadline = time.monotonic() + timeout
        while len(results) < len(procs):
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{server.kind} run did not finish in {timeout}s "
                                   f"({acked_total.value} of {total} acked)")
            if cpu1 is None and done.is_set():
                cpu1, sys1, wall1 = server.cpu_seconds(), server.syscalls(), time.perf_counter_ns()
            try:
                item = out_q.get(timeout=min(left, 0.01 if cpu1 is None else 5))
            except Exception:  # queue.Empty
                if any(p.exitcode not in (None, 0) for p in procs):
                    raise RuntimeError(f"a client process died: {[p.exitcode for p in procs]}") from None
                continue
            if item[0] == "error":
                raise RuntimeError(item[4])
            results.append(item)
        if cpu1 is None:
            cpu1, sys1, wall1 = server.cpu_seconds(), server.syscalls(), time.perf_counter_ns()
        for p in procs:
            p.join(10)
        children1 = os.times()
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5)
    prod = [x for x in results if x[0] == "producer"]
    cons = [x for x in results if x[0] == "consumer"]
    t_start = min(x[2] for x in prod)
    t_producers_end = max(x[3] for x in prod)
    t_end = max(x[2] for x in cons)
    all_ids = [i for x in cons for i in x[4][0]]
    all_tags = [t for x in cons for t in x[4][1]]
    distinct_ids = len(set(all_ids))
    distinct_msgs = len(set(all_tags))
    exactly_once = len(all_ids) == distinct_ids == distinct_msgs == total
    elapsed = (t_end - t_start) / 1e9
    cpu = (cpu1[0] - cpu0[0]) + (cpu1[1] - cpu0[1])
    reads = sum(x[4][2] for x in cons)
    client_cpu = ((children1.children_user + children1.children_system)
                  - (children0.children_user + children0.children_system))
    return {
        "server": server.kind,
        "messages": total,
        "consumed": len(all_ids),
        "distinct_ids": distinct_ids,
        "distinct_messages": distinct_msgs,
        "exactly_once": exactly_once,
        "per_consumer": [x[3] for x in sorted(cons, key=lambda x: x[1])],
        "elapsed_s": elapsed,
        "producers_s": (t_producers_end - t_start) / 1e9,
        "msgs_per_s": total / elapsed,
        # server CPU from the start barrier until the last ack (sampled within 10 ms of it)
        "server_cpu_pct": 100.0 * cpu / ((wall1 - wall0) / 1e9),
        "server_cpu_us_per_msg": 1e6 * cpu / total,
        "server_sys_share_pct": 100.0 * (cpu1[1] - cpu0[1]) / cpu if cpu else 0.0,
        # all client processes together, over their whole life (connect .. last BLOCK timeout)
        "client_cpu_us_per_msg": 1e6 * client_cpu / total,
        "avg_batch": len(all_ids) / reads if reads else 0.0,
        "server_reads_per_msg": (sys1[0] - sys0[0]) / total,
        "server_writes_per_msg": (sys1[1] - sys0[1]) / total,
    }


# --- wake-up latency ----------------------------------------------------------------------

def _wait_blocked(ctl: RawClient, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while int(ctl.info("clients").get("blocked_clients", "0")) < 1:
        if time.monotonic() > deadline:
            raise RuntimeError("the reader did not block")


def latency_case(server: Server, mode: str, samples: int, warmup: int) -> list[float]:
    """Wake-up latencies in microseconds, ``mode`` 'plain' or 'group'."""
    server.flushall()
    reader, writer = RawClient(server.port), RawClient(server.port)
    tstream = server.kind == "tstream"
    try:
        if tstream:
            writer.execute("TWRITE", KEY, TAG, b"init")
            if mode == "group":
                writer.execute("TREAD", KEY, "$", 0, "GROUP", GROUP)
            read_cmd = (encode("TREAD", KEY, "$", 1, "BLOCK", 0) if mode == "plain" else
                        encode("TREAD", KEY, "$", 1, "GROUP", GROUP, "RETRY", 30000, 600000, "BLOCK", 0))
        else:
            writer.execute("XADD", KEY, "*", TAG, b"init")
            if mode == "group":
                writer.execute("XGROUP", "CREATE", KEY, GROUP, "$")
            read_cmd = (encode("XREAD", "BLOCK", 0, "STREAMS", KEY, "$") if mode == "plain" else
                        encode("XREADGROUP", "GROUP", GROUP, "c1", "COUNT", 1, "BLOCK", 0, "STREAMS", KEY, ">"))
        out = []
        for i in range(samples + warmup):
            reader.send(read_cmd)
            _wait_blocked(writer)
            t0 = time.perf_counter_ns()
            if tstream:
                writer.send(encode("TWRITE", KEY, TAG, b"%d" % t0))
            else:
                writer.send(encode("XADD", KEY, "*", TAG, b"%d" % t0))
            reply, t1 = reader.read_reply_timed()
            writer.read_reply()
            if tstream:
                entry_id, data = reply[0][0], reply[0][2]
            else:
                entry_id, fields = reply[0][1][0]
                data = fields[1]
            if int(data) != t0:
                raise RuntimeError(f"reader got {data!r}, expected {t0}")
            if mode == "group":
                ack = ("TACK" if tstream else "XACK", KEY, GROUP, entry_id)
                if writer.execute(*ack) != 1:
                    raise RuntimeError("ack failed")
            if i >= warmup:
                out.append((t1 - t0) / 1000.0)
        return out
    finally:
        reader.close()
        writer.close()


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of a sorted list."""
    k = max(0, min(len(sorted_values) - 1, int(round(p / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def summarize(lat: list[float]) -> dict:
    s = sorted(lat)
    return {"n": len(s), "p50": percentile(s, 50), "p90": percentile(s, 90), "p99": percentile(s, 99),
            "min": s[0], "max": s[-1], "mean": statistics.fmean(s)}


# --- other work on the machine -------------------------------------------------------------

OTHER_BENCH = re.compile(r"redis-benchmark|bench/(throughput|memory|seek_latency)|pytest")


class Watcher(threading.Thread):
    """Notes other benchmarks/test runs that start while this one runs (they skew the figures),
    and the CPU time the hypervisor stole (/proc/stat)."""

    def __init__(self, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.seen: dict[int, str] = {}
        self._stop_event = threading.Event()
        self.steal0 = self._cpu_stat()

    @staticmethod
    def _cpu_stat() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields), (fields[7] if len(fields) > 7 else 0)

    def run(self) -> None:
        me = os.getpid()
        while not self._stop_event.wait(self.interval):
            for entry in os.listdir("/proc"):
                if not entry.isdigit() or int(entry) == me or int(entry) in self.seen:
                    continue
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                except OSError:
                    continue
                if OTHER_BENCH.search(cmd):
                    self.seen[int(entry)] = cmd[:120]
                    print(f"note: other work started during this benchmark: {cmd[:120]}",
                          file=sys.stderr, flush=True)

    def stop(self) -> dict:
        self._stop_event.set()
        total, steal = self._cpu_stat()
        dt = total - self.steal0[0]
        return {"others": sorted(set(self.seen.values())),
                "steal_pct": 100.0 * (steal - self.steal0[1]) / dt if dt else 0.0}


# --- report ----------------------------------------------------------------------------



def _command() -> str:
    script = os.path.relpath(os.path.abspath(sys.argv[0]), REPO)
    py = os.path.relpath(sys.executable, REPO) if sys.executable.startswith(str(REPO)) else sys.executable
    return shlex.join([py, script, *sys.argv[1:]])


def _fmt(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def render(facts: dict, args, runs: list[dict], latency: dict, servers_cmd: dict) -> str:
    L = []
    L.append("# tstream benchmark: consumer groups")
    L.append("")
    L.append(f"- Date: {facts['date']}")
    L.append(f"- Machine: {facts['nproc']} cores (nproc), {facts['cpu']}, Linux {facts['kernel']}, "
             f"load average at start {facts['load_start']}, at end {facts['load_end']}")
    L.append(f"- Python: {facts['python']} (`{facts['python_executable']}`), redis-py {redis.__version__} "
             f"(RESP{facts['protocol']}), hiredis {facts['hiredis']}")
    L.append(f"- tstream: `python -m server`, event loop `{facts['tstream_loop']}`, "
             f"commit {facts['git_commit']}{' (with uncommitted changes)' if facts['git_dirty'] else ''}")
    L.append(f"- redis-server {facts['redis_version']}; persistence off on both servers")
    L.append(f"- Total run time: {facts['total_s']:.0f} s; other benchmarks or test runs seen meanwhile: "
             f"{', '.join('`%s`' % o for o in facts['others']) or 'none'}; CPU time stolen by the hypervisor: "
             f"{facts['steal_pct']:.1f}%")
    L.append("")
    L.append("Everything runs on one machine over loopback: the server under test and all client")
    L.append("processes share the cores, so the figures compare the two servers on this machine.")
    L.append("")
    L.append("Command:")
    L.append("")
    L.append("```")
    L.append(facts["command"])
    L.append("# servers it started:")
    for kind in servers_cmd:
        L.append(servers_cmd[kind])
    L.append("```")
    L.append("")
    L.append("## Summary")
    L.append("")
    L.append("| benchmark | target | redis-server | tstream | ratio tstream/redis | met |")
    L.append("| --- | --- | ---: | ---: | ---: | :---: |")
    if runs:
        med = {k: statistics.median(r["msgs_per_s"] for r in runs if r["server"] == k) for k in ("redis", "tstream")}
        ratio = med["tstream"] / med["redis"]
        ok = all(r["exactly_once"] for r in runs)
        L.append(f"| group throughput, msgs/s (median of {args.repeat}) | >= {THROUGHPUT_TARGET}x redis "
                 f"| {_fmt(med['redis'])} | {_fmt(med['tstream'])} | **{ratio:.2f}x** "
                 f"| {'yes' if ratio >= THROUGHPUT_TARGET else 'NO'} |")
        L.append(f"| every message consumed exactly once (all runs) | yes | | | | {'yes' if ok else 'NO'} |")
        L.extend(_ceiling_summary(runs, args.repeat))
    for mode, label in (("plain", "wake-up p50, plain blocked read, µs"),
                        ("group", "wake-up p50, group blocked read, µs")):
        if mode in latency:
            t, r = latency[mode]["tstream"], latency[mode]["redis"]
            L.append(f"| {label} | tstream < {LATENCY_TARGET_US:.0f} µs | {r['p50']:.0f} | {t['p50']:.0f} "
                     f"| {t['p50'] / r['p50']:.2f}x | {'yes' if t['p50'] < LATENCY_TARGET_US else 'NO'} |")
    L.append("")
    if runs:
        L.append("## End-to-end consumer-group throughput")
        L.append("")
        L.append(f"{args.producers} producer processes x {_fmt(args.n)} messages ({PAYLOAD_SIZE}-byte payloads, "
                 f"one command per message) and {args.consumers} consumer processes in one group, batches of "
                 f"{args.batch} acknowledged per batch; every client is redis-py in its own process. "
                 "Time from the first producer's start to the reply of the last ack. Runs interleaved, "
                 "redis first.")
        L.append("")
        L.append("- tstream: `TWRITE key tag payload`; `TREAD key - 10 GROUP g RETRY 30000 600000 BLOCK 1000`, "
                 "`TACK key g o1 ... o10`; group created by `TREAD key - 0 GROUP g`")
        L.append("- redis: `XADD key * tag payload`; `XREADGROUP GROUP g consumer-i COUNT 10 BLOCK 1000 "
                 "STREAMS key >`, `XACK key g id1 ... id10`; group created by `XGROUP CREATE key g $ MKSTREAM`")
        if any(r["server"] == "ceiling" for r in runs):
            L.append("- ceiling (`--ceiling`): bench/ceiling_server.py, uvloop + hiredis doing the least the tstream "
                     "commands above need (entries in a list, a group's next undelivered index and pending set, "
                     "a FIFO of parked reads served at the end of the loop turn; no RETRY, engine, limits or "
                     "persistence): what a bare Python server costs in this loop")
        L.append("")
        L.append("| run | server | messages | seconds | msgs/s | producers done (s) | server CPU | "
                 "server CPU µs/msg (system share) | clients CPU µs/msg | avg batch read | server read/write syscalls per msg "
                 "| per consumer | exactly once |")
        L.append("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | :---: |")
        kinds_per_round = len({r["server"] for r in runs})
        for i, r in enumerate(runs):
            L.append(f"| {i // kinds_per_round + 1} | {r['server']} | {_fmt(r['messages'])} | {r['elapsed_s']:.2f} "
                     f"| {_fmt(r['msgs_per_s'])} | {r['producers_s']:.2f} | {r['server_cpu_pct']:.0f}% "
                     f"| {r['server_cpu_us_per_msg']:.1f} ({r['server_sys_share_pct']:.0f}% sys) | {r['client_cpu_us_per_msg']:.0f} | {r['avg_batch']:.2f} "
                     f"| {r['server_reads_per_msg']:.2f} / {r['server_writes_per_msg']:.2f} "
                     f"| {' / '.join(_fmt(x) for x in r['per_consumer'])} "
                     f"| {'yes' if r['exactly_once'] else 'NO (%d consumed, %d distinct ids, %d distinct msgs)' % (r['consumed'], r['distinct_ids'], r['distinct_messages'])} |")
        L.append("")
        L.append("Server CPU: the server process's CPU time from the start barrier until the last message was")
        L.append("acked, over that wall time (100% = one core), and per message. Clients CPU: all 8 client")
        L.append("processes' CPU time per message (whole life, connect to exit). Avg batch read: messages per")
        L.append("non-empty group read (10 at most); consumers that keep up with the producers get smaller")
        L.append("batches, hence more reads and acks per message. Server syscalls: read-like and write-like")
        L.append("system calls of the server process per message (`syscr`/`syscw` of /proc/PID/io).")
        L.append("")
    if latency:
        L.append("## Wake-up latency of a blocked reader")
        L.append("")
        L.append(f"{args.samples} samples per case, taken in {args.rounds} rounds that interleave the servers "
                 f"and cases ({args.warmup} discarded per round and case); percentiles over all samples, and the "
                 "p50 of each round to show the drift. The reader's connection "
                 "is blocked (INFO `blocked_clients` >= 1); the writer, another connection of the same "
                 "single-threaded process, takes t0 = `time.perf_counter_ns()`, sends one write carrying t0, "
                 "and the process waits in recv() on the reader's socket; t1 is taken as its reply arrives. "
                 "Latency = t1 - t0 in µs (includes encoding the write, ~2 µs, and the write's own handling). "
                 "Group reads are acknowledged after each sample, untimed.")
        L.append("")
        L.append("- plain: tstream `TREAD key $ 1 BLOCK 0`; redis `XREAD BLOCK 0 STREAMS key $`")
        L.append("- group: tstream `TREAD key $ 1 GROUP g RETRY 30000 600000 BLOCK 0`; redis "
                 "`XREADGROUP GROUP g c1 COUNT 1 BLOCK 0 STREAMS key >`")
        L.append("")
        L.append("| read | server | p50 µs | p90 µs | p99 µs | min µs | max µs | p50 of each round µs | target |")
        L.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
        for mode in ("plain", "group"):
            if mode not in latency:
                continue
            for kind in ("redis", "tstream"):
                s = latency[mode][kind]
                target = (f"p50 < {LATENCY_TARGET_US:.0f}: {'yes' if s['p50'] < LATENCY_TARGET_US else 'NO'}"
                          if kind == "tstream" else "")
                L.append(f"| {mode} | {kind} | {s['p50']:.0f} | {s['p90']:.0f} | {s['p99']:.0f} "
                         f"| {s['min']:.0f} | {s['max']:.0f} "
                         f"| {', '.join('%.0f' % x for x in s.get('round_p50', []))} | {target} |")
        L.append("")
    return "\n".join(L) + "\n"


def _ceiling_summary(runs: list[dict], repeat: int) -> list[str]:
    """The summary's rows for the ceiling server (``--ceiling``), none without it."""
    ceiling = [r for r in runs if r["server"] == "ceiling"]
    if not ceiling:
        return []

    def med(kind: str, field: str) -> float:
        return statistics.median(r[field] for r in runs if r["server"] == kind)

    rows = [f"| ceiling server (uvloop + hiredis only) msgs/s (median of {repeat}) | (a bound, no target) "
            f"| {_fmt(med('redis', 'msgs_per_s'))} | ceiling {_fmt(med('ceiling', 'msgs_per_s'))} "
            f"| **{med('ceiling', 'msgs_per_s') / med('redis', 'msgs_per_s'):.2f}x** | |"]
    rows.append("| server CPU µs/msg (median; system share) | tstream <= redis | "
                f"{med('redis', 'server_cpu_us_per_msg'):.1f} ({med('redis', 'server_sys_share_pct'):.0f}% sys) "
                f"| tstream {med('tstream', 'server_cpu_us_per_msg'):.1f} "
                f"({med('tstream', 'server_sys_share_pct'):.0f}% sys), ceiling "
                f"{med('ceiling', 'server_cpu_us_per_msg'):.1f} ({med('ceiling', 'server_sys_share_pct'):.0f}% sys) "
                f"| ceiling/redis {med('ceiling', 'server_cpu_us_per_msg') / med('redis', 'server_cpu_us_per_msg'):.2f}x "
                f"| {'yes' if med('tstream', 'server_cpu_us_per_msg') <= med('redis', 'server_cpu_us_per_msg') else 'NO'} |")
    return rows


# --- main --------------------------------------------------------------------------------

def main() -> int:  # noqa: C901 (over the limit when it came in)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=15_000, help="messages per producer per run")
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--samples", type=int, default=2000, help="wake-up latency samples per case")
    ap.add_argument("--rounds", type=int, default=4,
                    help="latency samples are taken in this many rounds, interleaving the servers")
    ap.add_argument("--warmup", type=int, default=25, help="latency samples discarded per round and case")
    ap.add_argument("--timeout", type=float, default=300, help="seconds allowed for one throughput run")
    ap.add_argument("--ceiling", action="store_true",
                    help="a third server in the throughput runs: bench/ceiling_server.py (uvloop + hiredis only)")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--out", default=str(OUT_DIR / "RESULTS-groups.md"),
                    help="results file ('-': print only)")
    args = ap.parse_args()
    _sigterm_as_exit()

    t_begin = time.monotonic()
    facts = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "hiredis": getattr(hiredis, "__version__", "?"),
        "git_commit": _git("rev-parse", "--short", "HEAD") or "(none)",
        "git_dirty": bool(_git("status", "--porcelain")),
        "load_start": _loadavg(),
        "command": _command(),
    }
    srv = {"tstream": Server("tstream"), "redis": Server("redis")}
    if args.ceiling:
        srv["ceiling"] = Server("ceiling", ["--groups"])  # (ceiling_server.py's group-loop server)
    throughput_kinds = ("redis", "tstream", "ceiling") if args.ceiling else ("redis", "tstream")
    runs: list[dict] = []
    latency: dict = {}
    watcher = Watcher()
    watcher.start()
    try:
        for s in srv.values():
            s.start()
        c = RawClient(srv["tstream"].port)
        facts["tstream_loop"] = c.info("server").get("multiplexing_api", "?")
        c.close()
        c = RawClient(srv["redis"].port)
        facts["redis_version"] = c.info("server").get("redis_version", "?")
        c.close()
        r = _connect(srv["redis"].port)
        facts["protocol"] = int(r.client_info().get("resp", 2))  # what redis-py negotiated by default
        r.close()

        if not args.skip_throughput:
            for rep in range(args.repeat):
                for kind in throughput_kinds:
                    res = throughput_run(srv[kind], args.n, args.producers, args.consumers, args.batch,
                                         args.timeout)
                    runs.append(res)
                    print(f"throughput {kind} run {rep + 1}: {res['msgs_per_s']:,.0f} msgs/s "
                          f"({res['messages']:,} in {res['elapsed_s']:.2f} s, producers done "
                          f"{res['producers_s']:.2f} s, server CPU {res['server_cpu_pct']:.0f}% "
                          f"{res['server_cpu_us_per_msg']:.1f} µs/msg ({res['server_sys_share_pct']:.0f}% sys), clients {res['client_cpu_us_per_msg']:.0f} µs/msg, "
                          f"avg batch {res['avg_batch']:.2f}, server syscalls/msg "
                          f"r {res['server_reads_per_msg']:.2f} w {res['server_writes_per_msg']:.2f}, "
                          f"exactly once: {res['exactly_once']})", flush=True)
        if not args.skip_latency:
            pooled = {(m, k): [] for m in ("plain", "group") for k in ("redis", "tstream")}
            round_p50 = {key: [] for key in pooled}
            per_round = -(-args.samples // args.rounds)
            for rnd in range(args.rounds):
                for mode in ("plain", "group"):
                    for kind in ("redis", "tstream"):
                        n = min(per_round, args.samples - len(pooled[(mode, kind)]))
                        lat = latency_case(srv[kind], mode, n, args.warmup)
                        pooled[(mode, kind)].extend(lat)
                        round_p50[(mode, kind)].append(summarize(lat)["p50"])
                        print(f"wake-up round {rnd + 1} {mode} {kind}: p50 {round_p50[(mode, kind)][-1]:.0f} µs",
                              flush=True)
            for (mode, kind), lat in pooled.items():
                s = summarize(lat)
                s["round_p50"] = round_p50[(mode, kind)]
                latency.setdefault(mode, {})[kind] = s
                print(f"wake-up {mode} {kind}: p50 {s['p50']:.0f} µs, p90 {s['p90']:.0f} µs, "
                      f"p99 {s['p99']:.0f} µs", flush=True)
    except BaseException:
        for s in srv.values():
            if s.proc is not None and (s.kind == "tstream" or s.proc.poll() is not None):
                tail = s.log_tail()
                if tail:
                    print(f"--- last lines of the {s.kind} server's log:\n{tail}", file=sys.stderr)
        raise
    finally:
        for s in srv.values():
            s.stop()

    facts.update(watcher.stop())
    facts["load_end"] = _loadavg()
    facts["total_s"] = time.monotonic() - t_begin
    text = render(facts, args, runs, latency, {k: s.command_line() for k, s in srv.items()})
    if args.out == "-":
        print(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    failed = bool(runs) and not all(r["exactly_once"] for r in runs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
