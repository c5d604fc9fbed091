#!/usr/bin/env python3
"""Where a BGSAVE's loop stalls come from, in process: the server on a thread's
event loop, a probe task on that same loop measuring its own lateness (it asks
to wake every millisecond), then BGSAVE of ``--keys`` one-entry keys.

Instrumented: every capture step on the loop (its duration, wall and the loop
thread's CPU), the writer thread's writes and fsyncs (duration and size), the
garbage collector's runs (gc.callbacks), and the probe's late wakes, all on one
clock, so that each long wait can be put next to what ran then; and the
context switches of the loop and writer threads during the save (Linux's
/proc/self/task/<tid>/status): a *voluntary* switch of the loop thread while it
steps is a wait (for the GIL, mostly: it never sleeps otherwise, except when the
job pauses for the writer, counted apart), an involuntary one a preemption by
the OS (the machine's load).  Options try the suspects one at a time:

    --switch S      sys.setswitchinterval while the writer runs (default: the server's)
    --slice-us N    loop time per capture step

    .venv/bin/python bench/capture_inprocess.py [--keys 1000000] [--entries 0]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import sys
import tempfile
import threading
import time
from array import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Client, encode, loadavg  # noqa: E402

from tstream.server import snapshotjob  # noqa: E402
from tstream.server.embed import ServerThread  # noqa: E402


class Events:
    """(start s, what, duration ms, size) of each instrumented call, in arrays:
    no tracked objects made while the collector is off (a list of tuples made
    the first collection after the save a long one of its own)."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.clear()

    def clear(self) -> None:
        self.start, self.kind, self.ms, self.size = array("d"), array("b"), array("d"), array("q")

    def append(self, event: tuple) -> None:
        start, kind, ms, size = event
        if kind not in self.kinds:
            self.kinds.append(kind)
        self.start.append(start)
        self.kind.append(self.kinds.index(kind))
        self.ms.append(ms)
        self.size.append(size)

    def __iter__(self):
        for i in range(len(self.start)):
            yield self.start[i], self.kinds[self.kind[i]], self.ms[i], self.size[i]


EVENTS = Events()
SAVED = threading.Event()  # set when a snapshot job's writer is done (on the loop)
THREADS: dict = {}  # native thread ids, context switches


class StepDetails:
    """What each capture step did, in arrays (index: the step's number - 1):
    keys captured, the loop thread's CPU in the walk and in the framing (ns),
    fresh buffers the framer took (not recycled ones), and the thread's minor
    page faults, voluntary and involuntary context switches during it
    (getrusage(RUSAGE_THREAD))."""

    FIELDS = ("keys", "walk_ns", "frame_ns", "fresh", "faults", "voluntary", "involuntary")

    def __init__(self) -> None:
        self.current = dict.fromkeys(self.FIELDS, 0)  # the step under way's counts
        self.clear()

    def clear(self) -> None:
        for name in self.FIELDS:
            setattr(self, name, array("q"))

    def line(self, i: int) -> str:
        return (f"{self.keys[i]} keys, walk {self.walk_ns[i] / 1e6:.2f} ms + framing {self.frame_ns[i] / 1e6:.2f} ms CPU, "
                f"{self.fresh[i]} fresh buffers, {self.faults[i]} page faults, "
                f"{self.voluntary[i]}/{self.involuntary[i]} vol./invol. switches")


DETAILS = StepDetails()


def switches(tid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of thread ``tid`` so far."""
    try:
        with open(f"/proc/self/task/{tid}/status") as handle:
            fields = dict(line.split(":", 1) for line in handle if "ctxt_switches" in line)
        return int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"])
    except OSError:
        return 0, 0


def now() -> float:
    return time.perf_counter()


def instrument() -> None:
    """Wrap the capture step, the writer's file calls and the collector."""
    step = snapshotjob.SnapshotJob._step
    current = DETAILS.current
    rusage = resource.getrusage
    thread = resource.RUSAGE_THREAD

    def timed_step(self):
        if not THREADS.get("loop"):
            THREADS["loop"] = threading.get_native_id()
            THREADS["loop-start"] = switches(THREADS["loop"])
        current["walk_ns"] = current["frame_ns"] = current["fresh"] = 0
        keys = self.capture.count
        before = rusage(thread)
        started, cpu = now(), time.thread_time_ns()
        step(self)
        EVENTS.append((started, "capture-step", (now() - started) * 1000, time.thread_time_ns() - cpu))
        after = rusage(thread)
        THREADS.setdefault("walk-start", (before.ru_nvcsw, before.ru_nivcsw))
        THREADS["walk-end"] = (after.ru_nvcsw, after.ru_nivcsw)
        THREADS["pauses"] = getattr(self, "pauses", 0)
        DETAILS.keys.append(self.capture.count - keys)
        DETAILS.walk_ns.append(current["walk_ns"])
        DETAILS.frame_ns.append(current["frame_ns"])
        DETAILS.fresh.append(current["fresh"])
        DETAILS.faults.append(after.ru_minflt - before.ru_minflt)
        DETAILS.voluntary.append(after.ru_nvcsw - before.ru_nvcsw)
        DETAILS.involuntary.append(after.ru_nivcsw - before.ru_nivcsw)

    snapshotjob.SnapshotJob._step = timed_step  # type: ignore[method-assign]
    from tstream.persistence import snapshot

    walk, frame, flush = snapshot.IncrementalCapture.step, snapshot.Framer.run, snapshot.Framer.flush

    def timed_walk(self, budget_ns=1_000_000):
        cpu = time.thread_time_ns()
        try:
            return walk(self, budget_ns)
        finally:
            current["walk_ns"] += time.thread_time_ns() - cpu

    def timed_frame(self, deadline_ns):
        cpu = time.thread_time_ns()
        try:
            return frame(self, deadline_ns)
        finally:
            current["frame_ns"] += time.thread_time_ns() - cpu

    def counted_flush(self):
        current["fresh"] += bool(self.pos and not self.free)
        flush(self)

    snapshot.IncrementalCapture.step = timed_walk  # type: ignore[method-assign]
    snapshot.Framer.run = timed_frame  # type: ignore[method-assign]
    snapshot.Framer.flush = counted_flush  # type: ignore[method-assign]
    write_job = snapshotjob.SnapshotJob._write

    def timed_write_job(self):
        tid = threading.get_native_id()
        before = switches(tid)
        started, cpu = now(), time.thread_time_ns()
        try:
            return write_job(self)
        finally:
            EVENTS.append((started, "writer-thread", (now() - started) * 1000, time.thread_time_ns() - cpu))
            after = switches(tid)
            THREADS["writer"] = (after[0] - before[0], after[1] - before[1])

    snapshotjob.SnapshotJob._write = timed_write_job  # type: ignore[method-assign]
    instrument_writer_calls()
    instrument_file_calls()

    gc_started = [0.0]

    def gc_callback(phase, info):
        if phase == "start":
            gc_started[0] = now()
        else:
            EVENTS.append((gc_started[0], f"gc-gen{info['generation']}", (now() - gc_started[0]) * 1000,
                           info.get("collected", 0)))

    gc.callbacks.append(gc_callback)


def instrument_writer_calls() -> None:
    """Count the writer's calls that let go of the GIL."""
    # The writer's calls that let go of the GIL (each return takes it back: a
    # moment the loop may have to wait for the writer): its waits on the
    # queue (a get that found it empty), writes, fsyncs and fault-ins.
    job_init = snapshotjob.SnapshotJob.__init__

    class CountingQueue:
        def __init__(self, real) -> None:
            self.real = real
            self.put = real.put

        def get(self):
            if self.real.empty():
                THREADS["writer-waits"] = THREADS.get("writer-waits", 0) + 1
            THREADS["writer-gets"] = THREADS.get("writer-gets", 0) + 1
            return self.real.get()

    def counting_init(self, *args, **kwargs):
        job_init(self, *args, **kwargs)
        self.queue = CountingQueue(self.queue)
        self.framer.out = self.queue.put

    snapshotjob.SnapshotJob.__init__ = counting_init  # type: ignore[method-assign]
    from tstream.persistence import snapshot as snapshot_module

    fault_in = getattr(snapshot_module, "fault_in", None)
    if fault_in is not None:
        def counted_fault_in(buffer):
            THREADS["fault-ins"] = THREADS.get("fault-ins", 0) + 1
            fault_in(buffer)

        snapshot_module.fault_in = counted_fault_in


def instrument_file_calls() -> None:
    """Time the writer's writes and fsyncs."""
    from tstream.persistence.fileops import FileOps

    write, fsync = FileOps.write, FileOps.fsync

    def timed_write(self, fd, data, step=""):
        started = now()
        n = write(self, fd, data, step=step)
        EVENTS.append((started, "writer-write", (now() - started) * 1000, n))
        return n

    def timed_fsync(self, fd, step=""):
        started = now()
        fsync(self, fd, step=step)
        EVENTS.append((started, "writer-fsync", (now() - started) * 1000, 0))

    FileOps.write, FileOps.fsync = timed_write, timed_fsync  # type: ignore[method-assign]


def instrument_ends() -> None:
    """Time the loop's work at the save's two ends."""
    # The loop's work at the save's two ends: the job's start (the picture's
    # moment: the key list copied), and its end (the written callback: the
    # collector back on, the persistence's done callback).
    from tstream.server import persist

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            started, cpu = now(), time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                EVENTS.append((started, name, (now() - started) * 1000, time.thread_time_ns() - cpu))
        return wrapper

    snapshotjob.SnapshotJob.start = timed("job-start", snapshotjob.SnapshotJob.start)  # type: ignore[method-assign]
    written = timed("job-written", snapshotjob.SnapshotJob._written)

    def written_and_told(self, future):
        written(self, future)
        SAVED.set()

    snapshotjob.SnapshotJob._written = written_and_told  # type: ignore[method-assign]
    persist.Persistence.start_bgsave = timed("start-bgsave", persist.Persistence.start_bgsave)  # type: ignore[method-assign]


def load(port: int, keys: int, entries: int) -> None:
    client = Client(port)
    chunk = 1000
    for start in range(0, keys, chunk):
        client.send(b"".join(encode("TWRITE", "k%d" % k, "t", "v") for k in range(start, min(keys, start + chunk))))
        client.read_replies(min(chunk, keys - start))
    if entries:
        pairs: list[str] = []
        for i in range(1000):
            pairs += ["t%d" % (i % 100), "x" * 16]
        one = encode("TWRITE", "big", "ENTRIES", *pairs)
        for _ in range(entries // 1000):
            client.send(one)
            client.read_replies(1)
    client.close()


async def probe(stop: asyncio.Event, out: array) -> None:
    """Sleep 1 ms at a time; record when and how late (ms), in pairs."""
    while not stop.is_set():
        asked = now()
        await asyncio.sleep(0.001)
        out.append(asked)
        out.append((now() - asked) * 1000 - 1.0)


def pairs(values: array) -> list[tuple[float, float]]:
    return list(zip(values[::2], values[1::2]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--entries", type=int, default=0)
    parser.add_argument("--switch", type=float, default=None, help="writer switch interval (s)")
    parser.add_argument("--slice-us", type=int, default=None)
    parser.add_argument("--waits", type=int, default=40, help="longest waits to list")
    parser.add_argument("--top", type=int, default=8, help="longest steps (CPU) to list")
    parser.add_argument("--show", type=float, default=5.0, help="list waits longer than this (ms)")
    parser.add_argument("--after", type=float, default=0.5, help="seconds probed after the save's end")
    args = parser.parse_args()
    if args.switch is not None:
        snapshotjob.WRITER_SWITCH_INTERVAL = args.switch
    if args.slice_us is not None:
        snapshotjob.CAPTURE_SLICE_NS = args.slice_us * 1000
    instrument()
    instrument_ends()
    print(f"load average {loadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp, ServerThread(port=0, dir=tmp, save="") as srv:
        started = now()
        load(srv.port, args.keys, args.entries)
        print(f"loaded {args.keys} keys + {args.entries} entries in {now() - started:.1f} s", flush=True)
        loop = srv._loop
        stop = asyncio.Event()
        late_values, idle_values = array("d"), array("d")
        task = asyncio.run_coroutine_threadsafe(probe(stop, idle_values), loop)
        time.sleep(1.0)
        loop.call_soon_threadsafe(stop.set)
        task.result()
        stop = asyncio.Event()
        EVENTS.clear()
        DETAILS.clear()
        THREADS.pop("walk-start", None)
        task = asyncio.run_coroutine_threadsafe(probe(stop, late_values), loop)
        time.sleep(0.1)
        t0 = now()
        SAVED.clear()
        srv.call(srv.server.persistence.start_bgsave)
        # (waits for the job's end without a thread of its own taking the GIL
        # meanwhile: polling INFO-like state every 10 ms from here took it
        # ~300 times a second, each a moment the loop might wait for it)
        SAVED.wait()
        while srv.call(lambda: srv.server.persistence.bgsave_started) is not None:
            time.sleep(0.01)
        t1 = now()
        loop_after = switches(THREADS["loop"])
        time.sleep(args.after)  # (the probe goes on: what follows the save's end, a collection)
        loop.call_soon_threadsafe(stop.set)
        task.result()
        size = os.path.getsize(os.path.join(tmp, srv.config["dbfilename"]))
    lateness, idle = pairs(late_values), pairs(idle_values)
    during = sorted(x for t, x in lateness if t0 <= t <= t1)
    after = sorted(x for t, x in lateness if t > t1)
    idle_sorted = sorted(x for _, x in idle)
    steps = sorted(e[2] for e in EVENTS if e[1] == "capture-step")
    steps_at = [e[0] for e in EVENTS if e[1] == "capture-step"]
    print(f"BGSAVE {t1 - t0:.2f} s, file {size / 1e6:.1f} MB; load average {loadavg()}")
    print(f"probe lateness during: max {during[-1]:.2f} ms p99 {during[int(len(during) * 0.99)]:.2f} ms "
          f"({len(during)} wakes, {sum(x > 5 for x in during)} over 5 ms); idle max {idle_sorted[-1]:.2f} ms; "
          f"in the {args.after:g} s after the save: max {after[-1] if after else 0:.2f} ms")
    if steps:
        cpu = sum(e[3] for e in EVENTS if e[1] == "capture-step") / 1e6
        cpus = sorted(e[3] / 1e6 for e in EVENTS if e[1] == "capture-step")
        print(f"capture steps: {len(steps)}, max {steps[-1]:.2f} ms, p99 {steps[int(len(steps) * 0.99)]:.2f} ms, "
              f"total {sum(steps):.0f} ms wall, {cpu:.0f} ms CPU of the loop thread; "
              f"step CPU max {cpus[-1]:.2f} ms, p99 {cpus[int(len(cpus) * 0.99)]:.2f} ms")
        over = [sum(x > limit for x in cpus) for limit in (1.0, 1.2, 1.5, 2.0)]
        print(f"steps over 1.0 / 1.2 / 1.5 / 2.0 ms CPU: {' / '.join(map(str, over))}; "
              f"keys per step: median {sorted(DETAILS.keys)[len(DETAILS.keys) // 2]}, max {max(DETAILS.keys)}; "
              f"fresh buffers {sum(DETAILS.fresh)}; steps whose CPU time exceeds their wall time by 0.05 ms: "
              f"{sum(e[3] / 1e6 > e[2] + 0.05 for e in EVENTS if e[1] == 'capture-step')} (a loaded VM's clock)")
        top = sorted((e for e in EVENTS if e[1] == "capture-step"), key=lambda e: -e[3])[:args.top]
        print("longest steps by CPU:")
        for e in top:
            i = steps_at.index(e[0])
            print(f"  {e[3] / 1e6:.2f} ms CPU ({e[2]:.2f} wall) at {(e[0] - t0) * 1000:.0f} ms (step {i + 1}): "
                  + DETAILS.line(i))
        walk_start, walk_end = THREADS["walk-start"], THREADS["walk-end"]
        print(f"loop thread from its first step to its last (the loop's work; then it idles until the "
              f"writer is done): {walk_end[0] - walk_start[0]} voluntary context switches "
              f"({sum(DETAILS.voluntary)} of them inside steps), {walk_end[1] - walk_start[1]} involuntary")
        start = THREADS["loop-start"]
        print(f"loop thread context switches during the save: {loop_after[0] - start[0]} voluntary "
              f"({THREADS.get('pauses', 0)} of them pauses for the writer, at most), {loop_after[1] - start[1]} involuntary; "
              f"writer thread: {THREADS.get('writer', ('?', '?'))[0]} voluntary, "
              f"{THREADS.get('writer', ('?', '?'))[1]} involuntary")
    writes = sum(e[1] == "writer-write" for e in EVENTS)
    fsyncs = sum(e[1] == "writer-fsync" for e in EVENTS)
    waits_ = THREADS.get("writer-waits", 0)
    fault_ins = THREADS.get("fault-ins", 0)
    print(f"writer GIL re-takes (calls that released it): {waits_ + writes + fsyncs + fault_ins} = "
          f"{waits_} queue waits (of {THREADS.get('writer-gets', 0)} gets) + {writes} writes + {fsyncs} fsyncs "
          f"+ {fault_ins} fault-ins")
    for _, _, ms, cpu_ns in (e for e in EVENTS if e[1] == "writer-thread"):
        print(f"writer thread: {ms:.0f} ms wall, {cpu_ns / 1e6:.0f} ms CPU")
    for kind in sorted({e[1] for e in EVENTS} - {"capture-step", "writer-thread"}):
        durations = sorted(e[2] for e in EVENTS if e[1] == kind)
        sizes = sum(e[3] for e in EVENTS if e[1] == kind)
        print(f"{kind}: {len(durations)} calls, max {durations[-1]:.2f} ms, total {sum(durations):.0f} ms, "
              f"sum of sizes {sizes:,}")
    loop_events = [e for e in EVENTS if e[1].startswith(("gc-", "job-", "start-")) and e[2] > 0.5]
    print("the loop's other calls over 0.5 ms (t from BGSAVE start; the save ended at "
          f"{(t1 - t0) * 1000:.0f} ms): " + "; ".join(
              f"{e[1]} {e[2]:.2f} ms@{(e[0] - t0) * 1000:.0f}" for e in loop_events))
    print(f"switch interval while writing {snapshotjob.WRITER_SWITCH_INTERVAL * 1000:g} ms, "
          f"slice {snapshotjob.CAPTURE_SLICE_NS / 1e6:g} ms")
    waits = sorted((x, t) for t, x in lateness if x > args.show and t0 <= t)[-args.waits:]
    print(f"\nthe {len(waits)} longest waits over {args.show} ms (t from BGSAVE start) and what overlapped them:")
    long_events = [e for e in EVENTS if 0.5 < e[2] < 1000]  # (once: a loaded run has thousands of waits)
    for x, t in sorted(waits, key=lambda w: w[1]):
        start, end = t, t + (x + 1) / 1000
        near = [f"{e[1]} {e[2]:.1f}ms@{(e[0] - t0) * 1000:.0f}"
                + (f" (CPU {e[3] / 1e6:.1f})" if e[1] == "capture-step" else "")
                for e in long_events if e[0] < end and e[0] + e[2] / 1000 > start]
        print(f"  t={(t - t0) * 1000:8.0f} ms late {x:6.2f} ms  {'; '.join(near[:6])}")
    print(f"threads: {threading.active_count()}")


if __name__ == "__main__":
    main()
