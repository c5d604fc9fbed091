#!/usr/bin/env python3
"""What the worst waits of bench/capture_stall.py's probe are: every probe sample
over ``--over`` ms during a BGSAVE, split into where its time went, with what the
server's loop and writer threads were doing then.

The same probe as capture_stall.py (a process PINGing every ms over TCP while
this one polls INFO), but the server runs under this script's
``--serve`` mode: tstream-server with its loop instrumented, all on one clock
(CLOCK_MONOTONIC: ``time.perf_counter_ns`` in both processes):

- every capture step: wall, the loop thread's CPU (its thread clock) and its
  run delay (time runnable but waiting for a core: /proc/thread-self/schedstat),
  its page faults and context switches, and what is left: in a step with a
  voluntary context switch, a sleep, i.e. a wait for the GIL (the step does no
  I/O); in a step without one, time the thread neither ran nor waited for a
  core nor slept: the virtual CPU not running at all (the host's; /proc/stat's
  steal counts some of it);
- the loop's time between two steps (uvloop's I/O, the commands) the same way;
- every ``data_received`` of a client connection (when the PING got to the
  loop, and when its reply was written);
- the collector's passes (gc.callbacks);
- the writer thread's writes and fsyncs, and its Python between them (the part
  that needs the GIL): wall, CPU, run delay.

So each long sample splits into *in* (the PING sent -> the loop reads it: the
loop was busy, waiting for a core or the GIL), *server* (the command) and *out*
(the reply written -> the probe has it: the probe's process waiting for a core
or for its own GIL), with the probe thread's own run delay.  Then the same
number of samples with the server idle, and against bench/ceiling_server.py (a
bare uvloop + hiredis PING server): the machine's own worst wait.

    .venv/bin/python bench/capture_trace.py [--shape many|one] [--keys 1000000] [--over 3]

TSTREAM_SERVER picks the build (its venv's python runs ``--serve``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from array import array

SCHEDSTAT = "/proc/thread-self/schedstat"


def _sched(fd: int) -> tuple[int, int]:
    """(CPU ns, run delay ns) of the calling thread, whose schedstat ``fd`` is.
    The CPU from the thread's clock: schedstat's CPU is only brought up to date
    at a tick or a switch (4 ms steps here); its run delay is exact (it grows
    when the thread is switched back in)."""
    delay = os.pread(fd, 100, 0).split()[1]
    return time.thread_time_ns(), int(delay)


def _peer_port(connection, ports: dict) -> int:
    peer = connection.transport.get_extra_info("peername") if connection.transport else None
    port = ports[id(connection)] = peer[1] if peer else 0
    return port


def _trace_connections(cls, clock, recv: array) -> None:
    """Record each data_received of a client connection: (start, end, the client's port)."""
    received = cls.data_received

    ports: dict[int, int] = {}  # id of a connection -> its client's port

    def traced_received(self, data):
        start = clock()
        try:
            received(self, data)
        finally:
            recv.extend((start, clock(), ports.get(id(self)) or _peer_port(self, ports)))

    cls.data_received = traced_received  # type: ignore[method-assign]
    lost = cls.connection_lost

    def traced_lost(self, exc):
        ports.pop(id(self), None)  # (its id may be a later connection's)
        lost(self, exc)

    cls.connection_lost = traced_lost  # type: ignore[method-assign]


def _yielding(step):
    """``step``, or with --yield, ``step`` then os.sched_yield() (an experiment)."""
    if not os.environ.get("TSTREAM_TRACE_YIELD"):
        return step

    def yielding(self):
        step(self)
        os.sched_yield()
    return yielding


# --- the server side (--serve): tstream-server, instrumented ----------------------------

def serve(argv: list[str]) -> int:
    import gc
    import resource

    from tstream.persistence.fileops import FileOps
    from tstream.server import connection, snapshotjob
    from tstream.server.main import main as server_main

    out = os.environ["TSTREAM_TRACE_OUT"]
    slice_us = os.environ.get("TSTREAM_TRACE_SLICE_US")  # (--slice-us: try another slice)
    snapshotjob.CAPTURE_SLICE_NS = int(slice_us) * 1000 if slice_us else snapshotjob.CAPTURE_SLICE_NS
    clock = time.perf_counter_ns
    rusage, THREAD = resource.getrusage, resource.RUSAGE_THREAD
    steps = array("q")  # start, end, cpu0, cpu1, delay0, delay1, faults, voluntary, involuntary
    recv = array("q")  # start, end, the client's port
    gcs = array("q")  # start, end, generation
    ops = array("q")  # kind (0 write, 1 fsync), start, end, size, cpu0, cpu1, delay0, delay1
    fds = {}

    step = _yielding(snapshotjob.SnapshotJob._step)

    def traced_step(self):
        fd = fds.get("loop")
        if fd is None:
            fd = fds["loop"] = os.open(SCHEDSTAT, os.O_RDONLY)
        before = rusage(THREAD)
        cpu0, delay0 = _sched(fd)
        start = clock()
        try:
            step(self)
        finally:
            end = clock()
            cpu1, delay1 = _sched(fd)
            after = rusage(THREAD)
            steps.extend((start, end, cpu0, cpu1, delay0, delay1, after.ru_minflt - before.ru_minflt,
                          after.ru_nvcsw - before.ru_nvcsw, after.ru_nivcsw - before.ru_nivcsw))

    snapshotjob.SnapshotJob._step = traced_step  # type: ignore[method-assign]

    _trace_connections(connection.ClientConnection, clock, recv)

    def traced_op(kind, fn):
        def wrapper(self, *args, **kwargs):
            fd = fds.get("writer")
            if fd is None:
                fd = fds["writer"] = os.open(SCHEDSTAT, os.O_RDONLY)
            cpu0, delay0 = _sched(fd)
            start = clock()
            result = fn(self, *args, **kwargs)
            end = clock()
            cpu1, delay1 = _sched(fd)
            ops.extend((kind, start, end, result if kind == 0 else 0, cpu0, cpu1, delay0, delay1))
            return result
        return wrapper

    FileOps.write = traced_op(0, FileOps.write)  # type: ignore[method-assign]
    FileOps.fsync = traced_op(1, FileOps.fsync)  # type: ignore[method-assign]
    gc_start = [0]

    def on_gc(phase, info):
        if phase == "start":
            gc_start[0] = clock()
        else:
            gcs.extend((gc_start[0], clock(), info["generation"]))

    gc.callbacks.append(on_gc)
    written = snapshotjob.SnapshotJob._written

    def traced_written(self, future):
        written(self, future)
        trace = {"dumped": clock(), "steps": steps.tolist(), "recv": recv.tolist(), "gc": gcs.tolist(), "ops": ops.tolist()}
        with open(out + ".tmp", "w") as handle:
            json.dump(trace, handle)
        os.rename(out + ".tmp", out)
        for a in (steps, recv, gcs, ops):
            del a[:]
        writer = fds.pop("writer", None)
        if writer is not None:
            os.close(writer)

    snapshotjob.SnapshotJob._written = traced_written  # type: ignore[method-assign]
    return server_main(argv)


# --- the bench side ---------------------------------------------------------------------

def probe(port, stop, count: int, pipe, ready) -> None:
    """PING every ms (as capture_stall.py), in a process of its own (no GIL shared
    with the INFO polling): per sample, sent and answered (ns), and this thread's
    CPU and run delay during it; sent down ``pipe`` with the client's port."""
    from common import Client

    client = Client(port)
    fd = os.open(SCHEDSTAT, os.O_RDONLY)
    clock = time.perf_counter_ns
    out = array("q")
    while not stop.is_set() and (not count or len(out) < 4 * count):
        cpu0, delay0 = _sched(fd)
        sent = clock()
        client.execute("PING")
        answered = clock()
        cpu1, delay1 = _sched(fd)
        out.extend((sent, answered, cpu1 - cpu0, delay1 - delay0))
        ready.set()
        time.sleep(0.001)
    os.close(fd)
    pipe.send((client.sock.getsockname()[1], out.tobytes()))
    client.close()


def samples(port, count: int = 0, until=None) -> list[tuple[int, int, int, int]]:
    from common import in_probe_process

    samples.port, raw = in_probe_process(probe, port, count, until)  # type: ignore[attr-defined]
    values = array("q")
    values.frombytes(raw)
    return [tuple(values[i:i + 4]) for i in range(0, len(values), 4)]  # type: ignore[misc]


def summary(rows) -> str:
    from common import percentile

    rtts = sorted((b - a) / 1e6 for a, b, _, _ in rows)
    return (f"{len(rtts)} samples: max {rtts[-1]:.2f} ms, p99 {percentile(rtts, 99):.2f}, "
            f"p99.9 {percentile(rtts, 99.9):.2f}, over 3 ms: {sum(r > 3 for r in rtts)}, "
            f"over 5 ms: {sum(r > 5 for r in rtts)}")


def who_ran(data: str, pid: int, over_ms: float = 1.0) -> str:
    """From ``perf sched timehist``: what ran on the loop thread's core while
    the loop was runnable but waiting for it longer than ``over_ms``."""
    import collections
    import re

    text = subprocess.run(["perf", "sched", "timehist", "--state", "-i", data], capture_output=True,
                          text=True).stdout
    rows, loop, preempted = [], f"[{pid}]", {}
    for raw in text.splitlines()[3:]:
        p = raw.split()
        try:
            end, cpu, task, wait, sched_delay, run = float(p[0]), p[1], " ".join(p[2:-4]), *map(float, p[-4:-1])
        except (ValueError, IndexError):
            continue
        # runnable all along since its last run if that ended preempted (R), else since its wake-up
        rows.append((end, cpu, task, 0.0, wait if preempted.get(task) else sched_delay, run))
        preempted[task] = p[-1] == "R"
    by_cpu = collections.defaultdict(list)
    for row in rows:
        by_cpu[row[1]].append(row)
    ran: collections.Counter = collections.Counter()
    waits, total = 0, 0.0
    for end, cpu, task, _, delay, run in rows:
        if not task.endswith(loop) or delay < over_ms:
            continue
        waits += 1
        total += delay
        began = end - run / 1000
        for o_end, _, other, _, _, o_run in by_cpu[cpu]:
            o_start = o_end - o_run / 1000
            if other != task and o_start < began and o_end > began - delay / 1000:
                m = re.match(r"(.*?)\[(\d+)(?:/(\d+))?\]", other)
                label = other
                if m and int(m.group(3) or m.group(2)) == pid:
                    label = "this server's writer thread" if m.group(3) else "?"
                elif m:
                    label = f"{m.group(1)} (pid {m.group(3) or m.group(2)})"
                ran[label] += (min(o_end, began) - max(o_start, began - delay / 1000)) * 1000
    lines = [f"perf sched: the loop waited for a core > {over_ms} ms {waits} times, {total:.0f} ms in all; "
             f"what ran on its core then (ms; this process is pid {os.getpid()}):"]
    lines += [f"  {ms:8.1f}  {label}" for label, ms in ran.most_common(12)]
    return "\n".join(lines)


def steps_summary(trace: dict) -> str:
    """How the capture steps' wall time splits: how many waited for a core or
    for the GIL inside, and how long (ms)."""
    steps = trace["steps"]
    delays, sleeps, lost = [], [0.0], [0.0]
    for i in range(0, len(steps), 9):
        wall, cpu, delay = steps[i + 1] - steps[i], steps[i + 3] - steps[i + 2], steps[i + 5] - steps[i + 4]
        delays.append(delay / 1e6)
        (sleeps if steps[i + 7] else lost).append(max(0, wall - cpu - delay) / 1e6)
    parts = []
    for name, values in (("waited for a core", delays), ("waited for the GIL", sleeps),
                         ("lost (no switch: the vCPU stopped)", lost)):
        values.sort()
        parts.append(f"{name}: > 0.5 ms {sum(v > 0.5 for v in values)}, > 1 ms {sum(v > 1 for v in values)}, "
                     f"> 2 ms {sum(v > 2 for v in values)}, max {values[-1]:.2f}, total {sum(values):.0f} ms")
    return "capture steps " + "; ".join(parts)


def overlap(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 < b1 and b0 < a1


def explain(rows, trace: dict, over_ms: float, t0: int, port: int) -> list[dict]:
    """One record per sample over ``over_ms``: where its time went."""
    import bisect

    steps = [trace["steps"][i:i + 9] for i in range(0, len(trace["steps"]), 9)]
    recv = [r for r in (trace["recv"][i:i + 3] for i in range(0, len(trace["recv"]), 3)) if r[2] == port]
    gcs = [trace["gc"][i:i + 3] for i in range(0, len(trace["gc"]), 3)]
    ops = [trace["ops"][i:i + 8] for i in range(0, len(trace["ops"]), 8)]
    step_starts = [s[0] for s in steps]
    op_starts = [op[1] for op in ops]
    recv_starts = [r[0] for r in recv]
    found = []
    for sent, answered, probe_cpu, probe_delay in rows:
        if answered - sent < over_ms * 1e6:
            continue
        i = bisect.bisect_left(recv_starts, sent)
        got = recv[i] if i < len(recv) and recv[i][0] < answered else None
        read_at = got[0] if got else answered
        # the loop between the PING's sending and its reading: steps and gaps
        j = max(0, bisect.bisect_right(step_starts, sent) - 1)
        loop = {"steps": 0, "step_wall": 0, "step_cpu": 0, "step_delay": 0, "step_sleep": 0, "step_lost": 0,
                "gap_wall": 0,
                "gap_cpu": 0, "gap_delay": 0, "longest_step": None, "faults": 0, "invol": 0}
        previous = steps[j - 1] if j > 0 else None
        # (through the first step after the read: the gap before it, where the loop
        # read the PING, counts with the run delay the next step's start reads)
        while j < len(steps) and (steps[j][0] < read_at or (previous is not None and previous[1] < read_at)):
            s = steps[j]
            if previous is not None and overlap(previous[1], s[0], sent, read_at):
                loop["gap_wall"] += s[0] - previous[1]
                loop["gap_cpu"] += max(0, min(s[2] - previous[3], s[0] - previous[1] - (s[4] - previous[5])))
                loop["gap_delay"] += s[4] - previous[5]
            if overlap(s[0], s[1], sent, read_at):
                wall, delay = s[1] - s[0], s[5] - s[4]
                # (a step preempted for a scheduler tick shows the tick as CPU too on this VM)
                cpu = max(0, min(s[3] - s[2], wall - delay))
                loop["steps"] += 1
                loop["step_wall"] += wall
                loop["step_cpu"] += cpu
                loop["step_delay"] += delay
                loop["step_sleep" if s[7] else "step_lost"] += max(0, wall - cpu - delay)
                loop["faults"] += s[6]
                loop["invol"] += s[8]
                if loop["longest_step"] is None or wall > loop["longest_step"][0]:
                    loop["longest_step"] = (wall, cpu, delay, max(0, wall - cpu - delay), s[7])
            previous = s
            j += 1
        writer = {"writes": 0, "fsyncs": 0, "py_wall": 0, "py_cpu": 0, "py_delay": 0, "fsync_wall": 0}
        for k in range(max(0, bisect.bisect_left(op_starts, sent) - 2), bisect.bisect_right(op_starts, answered)):
            op = ops[k]
            if overlap(op[1], op[2], sent, answered):
                writer["writes" if op[0] == 0 else "fsyncs"] += 1
                if op[0] == 1:
                    writer["fsync_wall"] += op[2] - op[1]
            if k and overlap(ops[k - 1][2], op[1], sent, answered):  # its Python before this op
                writer["py_wall"] += op[1] - ops[k - 1][2]
                writer["py_cpu"] += op[4] - ops[k - 1][5]
                writer["py_delay"] += op[6] - ops[k - 1][7]
        passes = [(g[1] - g[0], g[2]) for g in gcs if overlap(g[0], g[1], sent, answered)]
        found.append({
            "at_ms": (sent - t0) / 1e6, "rtt": (answered - sent) / 1e6,
            "in": (read_at - sent) / 1e6, "server": ((got[1] - got[0]) / 1e6) if got else None,
            "out": ((answered - got[1]) / 1e6) if got else None,
            "probe_cpu": probe_cpu / 1e6, "probe_delay": probe_delay / 1e6,
            "loop": loop, "writer": writer, "gc": passes})
    return found


def clean(found: list[dict]) -> str:
    """The samples during which nothing but the code held the PING up: the loop
    neither waited for a core nor for the GIL nor lost its vCPU, the probe did
    not wait for a core; their *in* + *server* (the wait up to the reply's
    write: what is left of the slice under way, and the command), without *out*
    (the kernel's delivery to the probe)."""
    waits = sorted(f["in"] + (f["server"] or 0) for f in found if f["server"] is not None and not (
        f["loop"]["step_delay"] > 50_000 or f["loop"]["gap_delay"] > 50_000 or f["loop"]["step_sleep"] > 50_000
        or f["loop"]["step_lost"] > 50_000 or f["probe_delay"] > 0.05))
    if not waits:
        return "no sample without a wait of the machine's"
    worst = max((f for f in found if f["server"] is not None and f["in"] + f["server"] == waits[-1]),
                key=lambda f: f["rtt"])
    print("  the worst of them:" + line(worst)[1:])
    return (f"{len(waits)} of {len(found)} samples without a wait of the machine's: their wait up to the reply "
            f"(the code's own) max {waits[-1]:.2f} ms, p99 {waits[int(len(waits) * 0.99)]:.2f}, "
            f"p99.9 {waits[int(len(waits) * 0.999)]:.2f}")


def line(f: dict) -> str:
    ms = 1e6
    lp, wr = f["loop"], f["writer"]
    longest = lp["longest_step"]
    text = (f"  t={f['at_ms']:8.0f} rtt {f['rtt']:5.2f} = in {f['in']:5.2f} + server "
            f"{(f['server'] or 0):4.2f} + out {(f['out'] or 0):4.2f} | probe delay {f['probe_delay']:4.2f} | "
            f"loop before the read: {lp['steps']} steps wall {lp['step_wall'] / ms:.2f} (cpu {lp['step_cpu'] / ms:.2f}, "
            f"core wait {lp['step_delay'] / ms:.2f}, GIL wait {lp['step_sleep'] / ms:.2f}, lost "
            f"{lp['step_lost'] / ms:.2f}), between steps "
            f"{lp['gap_wall'] / ms:.2f} (cpu {lp['gap_cpu'] / ms:.2f}, core wait {lp['gap_delay'] / ms:.2f})")
    if longest:
        text += (f"; longest step {longest[0] / ms:.2f} (cpu {longest[1] / ms:.2f}, core {longest[2] / ms:.2f}, "
                 f"{'GIL' if longest[4] else 'lost'} {longest[3] / ms:.2f}), faults {lp['faults']}, preempted {lp['invol']}")
    text += (f" | writer: {wr['writes']} writes {wr['fsyncs']} fsyncs ({wr['fsync_wall'] / ms:.1f}), Python "
             f"{wr['py_wall'] / ms:.2f} (cpu {wr['py_cpu'] / ms:.2f}, core wait {wr['py_delay'] / ms:.2f})")
    if f["gc"]:
        text += " | gc " + ", ".join(f"gen{g} {d / ms:.2f}" for d, g in f["gc"])
    return text


def cause(f: dict) -> str:
    """The largest part of a long sample, named."""
    lp = f["loop"]
    parts = {
        "probe side (out)": f["out"] or 0,
        "loop waiting for a core": (lp["step_delay"] + lp["gap_delay"]) / 1e6,
        "loop waiting for the GIL": lp["step_sleep"] / 1e6,
        "loop's vCPU not running (lost)": lp["step_lost"] / 1e6,
        "loop CPU in capture steps": lp["step_cpu"] / 1e6,
        "loop CPU between steps": lp["gap_cpu"] / 1e6,
    }
    return max(parts, key=parts.__getitem__)


def steal_ms() -> float:
    """The machine's steal time so far (/proc/stat, all CPUs), ms."""
    with open("/proc/stat") as handle:
        return int(handle.readline().split()[8]) * 1000 / os.sysconf("SC_CLK_TCK")


def traced_save(args, trace_path: str) -> dict:
    """Load the shape into a traced server, BGSAVE under the probe, then probe
    the idle server as many times: the samples, the trace, the save's ends."""
    from capture_stall import load_many_keys, load_one_key
    from common import TSTREAM_SERVER, Client, ServerProcess

    os.environ["TSTREAM_TRACE_OUT"] = trace_path
    server = ServerProcess("tstream")
    server.argv = [os.path.join(os.path.dirname(TSTREAM_SERVER), "python"), os.path.abspath(__file__), "--serve",
                   *server.argv[1:]]
    out: dict = {"pid": None}
    with server:
        out["pid"] = server.pid
        (load_many_keys if args.shape == "many" else load_one_key)(server, args.keys if args.shape == "many"
                                                                   else args.entries)
        control = Client(server.port)
        time.sleep(args.settle)

        def save():
            out["t0"], out["steal0"] = time.perf_counter_ns(), steal_ms()
            control.execute("BGSAVE")
            while control.info("persistence").get("rdb_bgsave_in_progress") != "0":
                time.sleep(0.01)
            out["t1"], out["steal1"] = time.perf_counter_ns(), steal_ms()

        recorder = None
        if args.perf:
            recorder = subprocess.Popen(["perf", "sched", "record", "-a", "-o", trace_path + ".perf"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
        try:
            rows = samples(server.port, until=save)
            out["probe_port"] = samples.port  # type: ignore[attr-defined]
        finally:
            if recorder is not None:
                recorder.send_signal(signal.SIGINT)
                recorder.wait()
        for _ in range(500):
            if os.path.exists(trace_path):
                break
            time.sleep(0.01)
        with open(trace_path) as handle:
            out["trace"] = json.load(handle)
        os.unlink(trace_path)
        # (from the BGSAVE to the save's end, before this trace was written on the loop)
        out["rows"] = [r for r in rows if out["t0"] <= r[0] and r[1] <= min(out["t1"], out["trace"]["dumped"])]
        time.sleep(1.0)
        out["idle"] = samples(server.port, count=len(out["rows"]))
        control.close()
    return out


def bench() -> None:
    import argparse
    import collections

    from common import TSTREAM_SERVER, loadavg, servers

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=("many", "one"), default="many")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--entries", type=int, default=10_000_000)
    parser.add_argument("--over", type=float, default=3.0, help="explain samples longer than this (ms)")
    parser.add_argument("--no-ceiling", action="store_true")
    parser.add_argument("--settle", type=float, default=1.0,
                        help="seconds between the load and the BGSAVE (capture_stall.py: none)")
    parser.add_argument("--perf", action="store_true",
                        help="perf sched record the save: who ran on the loop's core while it waited for one")
    parser.add_argument("--yield", dest="yield_", action="store_true",
                        help="os.sched_yield() after each capture step (an experiment)")
    parser.add_argument("--slice-us", type=int, help="the capture's slice (the build's own by default)")
    parser.add_argument("--keep", help="write the trace and the probe's samples to this JSON file")
    args = parser.parse_args()
    print(f"server {TSTREAM_SERVER}; load average {loadavg()}", flush=True)
    trace_path = os.path.join("/tmp", f"capture-trace-{os.getpid()}.json")
    if args.slice_us:
        os.environ["TSTREAM_TRACE_SLICE_US"] = str(args.slice_us)
    if args.yield_:
        os.environ["TSTREAM_TRACE_YIELD"] = "1"
    run = traced_save(args, trace_path)
    trace, rows, t0 = run["trace"], run["rows"], run["t0"]
    ceiling = []
    if not args.no_ceiling:
        with servers(("ceiling", [])) as (bare,):
            ceiling = samples(bare.port, count=len(rows))
    every = explain(rows, trace, 0.0, t0, run["probe_port"])
    found = [f for f in every if f["rtt"] >= args.over]
    steps = trace["steps"]
    walls = sorted((steps[i + 1] - steps[i]) / 1e6 for i in range(0, len(steps), 9))
    cpus = sorted((steps[i + 3] - steps[i + 2]) / 1e6 for i in range(0, len(steps), 9))
    passes = [g for i, g in enumerate(trace["gc"]) if i % 3 == 0 and t0 <= g <= run["t1"]]
    print(f"BGSAVE {(run['t1'] - t0) / 1e9:.2f} s, {len(walls)} capture steps: wall max {walls[-1]:.2f} ms "
          f"(p99 {walls[int(len(walls) * 0.99)]:.2f}), CPU max {cpus[-1]:.2f} ms; gc passes during: {len(passes)}; "
          f"the machine's steal time during: {run['steal1'] - run['steal0']:.0f} ms")
    print(steps_summary(trace))
    print(f"during BGSAVE: {summary(rows)}")
    print(f"  of which {clean(every)}")
    print(f"idle tstream:  {summary(run['idle'])}")
    if ceiling:
        print(f"bare uvloop:   {summary(ceiling)}")
    print(f"\nsamples over {args.over} ms during the save (t in ms from BGSAVE; times in ms):")
    for f in found:
        print(line(f) + f"  => {cause(f)}")
    counts = collections.Counter(cause(f) for f in found)
    print(f"\nlargest part of each sample over {args.over} ms: "
          + ", ".join(f"{k}: {v}" for k, v in counts.most_common()))
    worst = max(found, key=lambda f: f["rtt"], default=None)
    if worst:
        print(f"the worst: {worst['rtt']:.2f} ms => {cause(worst)}")
    print(f"load average {loadavg()}")
    if args.perf:
        print(who_ran(trace_path + ".perf", run["pid"]))
        os.unlink(trace_path + ".perf")
    if args.keep:
        run["ceiling"] = ceiling
        with open(args.keep, "w") as handle:
            json.dump(run, handle)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        sys.exit(serve(sys.argv[2:]))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    bench()
