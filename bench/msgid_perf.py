#!/usr/bin/env python3
"""Where MSGID's extra server CPU goes, timed: a ``perf record`` of the server during
interleaved slices of ``TWRITE key tag entry`` and ``TWRITE key tag entry MSGID id``,
split per symbol and per kind.

    .venv/bin/python bench/msgid_perf.py [--prefill 750000] [--slices 20] [--per 25000]
        [--out /tmp/msgid17/perf] [--report-only] (with --out DIR: report that recording again)

The server runs as bench/fast_ingest.py's MSGID slices run it (``--appendonly yes
--appendfsync no``, no automatic AOF rewrite), with the stream's duplicate window set
to a day (no id ages out, as none does within the bench's 40 slices; ``--window-ms``).  Its window is
first filled with ``--prefill`` ids by pipelined MSGID writes (750,000: the table is
then at 2^21 slots and stays there through the slices, up to 1,468,006 ids, so no
slice pays for a rehash; fast_ingest's later slices run with 0.5-1M ids in the window).
Then ``perf record -e cpu-clock -F 4999 -g -k CLOCK_MONOTONIC -p PID`` runs across the
``--slices`` pairs of slices (twrite/msgid, msgid/twrite, ...: fast_ingest's
``msgid_slices``, the same messages: 100-byte entries, ids ``id-S-N``, windows of 64
with two in flight), each slice's start and end noted on CLOCK_MONOTONIC, so that
each sample is charged to the kind of slice it fell in (samples between slices are
dropped).  Printed: samples a message of each kind (one sample = 1/4999 s of CPU), and
per symbol (the leaf frame: self cost) the us a message of each kind and the
difference, largest first; then the same grouped by DSO, and by a few families
(window, parser, allocator, AOF, kernel copy, ...).

Python 3.11 has no perf trampoline: every Python frame is ``_PyEval_EvalFrameDefault``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import time

from common import Client, encode, loadavg, servers, sigterm_as_exit
from fast_ingest import _pipelined as pipelined  # (two windows of 64 in flight, as the MSGID slices)

SUBJECT = b"orders.created"
PAYLOAD = b"x" * 100
RATE = 4999
SERVER_OPTIONS = ["--appendonly", "yes", "--appendfsync", "no", "--auto-aof-rewrite-percentage", "0"]


def server_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def io_counts(pid: int) -> dict[str, int]:
    """The process's read/write system calls and bytes so far (/proc/PID/io), and its
    context switches (/proc/PID/status, the main thread)."""
    counts = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            name, value = line.split(":")
            counts[name] = int(value)
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if "ctxt_switches" in line:
                name, value = line.split(":")
                counts[name] = int(value)
    return counts


def record(args) -> None:
    os.makedirs(args.out, exist_ok=True)
    with servers(("tstream", SERVER_OPTIONS)) as (ts,):
        c = Client(ts.port)
        c.execute("TWRITE", b"mi-msgid", SUBJECT, PAYLOAD, "MSGID", b"first")
        c.execute("TCONFIG", b"mi-msgid", "SET", "duplicate_window_ms", str(args.window_ms))
        c.execute("TWRITE", b"mi-twrite", SUBJECT, PAYLOAD)
        for start in range(0, args.prefill, 50_000):
            pipelined(c, [encode("TWRITE", b"mi-msgid", SUBJECT, PAYLOAD, "MSGID", b"pre-%d" % i)
                          for i in range(start, min(args.prefill, start + 50_000))])
        twrites = [encode("TWRITE", b"mi-twrite", SUBJECT, PAYLOAD)] * args.per
        pipelined(c, twrites)  # (the twrite stream's first nodes: as long as the msgid one's)
        data = os.path.join(args.out, "perf.data")
        perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", str(RATE), "-g", "-k", "CLOCK_MONOTONIC",
                                 "-p", str(ts.pid), "-o", data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # (perf attached)
        slices = []
        load = [loadavg()]
        for s in range(args.slices):
            order = ("twrite", "msgid") if s % 2 == 0 else ("msgid", "twrite")
            for kind in order:
                msgs = twrites if kind == "twrite" else [
                    encode("TWRITE", b"mi-msgid", SUBJECT, PAYLOAD, "MSGID", b"id-%d-%d" % (s, i))
                    for i in range(args.per)]
                cpu = server_cpu(ts.pid)
                io = io_counts(ts.pid)
                started = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                pipelined(c, msgs)
                ended = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                io_after = io_counts(ts.pid)
                slices.append({"kind": kind, "start": started, "end": ended, "messages": args.per,
                               "server_cpu_s": server_cpu(ts.pid) - cpu,
                               "io": {name: io_after[name] - io[name] for name in io}})
        load.append(loadavg())
        perf.send_signal(signal.SIGINT)
        perf.wait(60)
        info = c.execute("TINFO", b"mi-msgid")
        c.close()
    with open(os.path.join(args.out, "slices.json"), "w") as f:
        json.dump({"slices": slices, "load": load, "prefill": args.prefill, "tinfo": repr(info)}, f)


def in_process(args) -> None:
    """The same split without sockets: bench/ingest_cost.py's ``Shapes`` (reads of 64
    fed through ``data_received`` on a fake transport, the end of the turn run, the
    AOF on with ``appendfsync no``), its ``twrite`` and ``msgid`` shapes in
    alternating rounds of ``--per`` messages, this process recorded by perf; each
    round's thread CPU time noted too."""
    import asyncio
    import statistics
    import tempfile

    import ingest_cost

    os.makedirs(args.out, exist_ok=True)
    reads = max(1, args.per // ingest_cost.PER_READ)
    slices = []

    async def main() -> None:
        with tempfile.TemporaryDirectory(prefix="msgid17-") as directory:
            shapes = ingest_cost.Shapes(directory)
            shapes.set_msgid_window(86_400_000)
            for shape in ("twrite", "msgid"):
                for done in range(0, args.prefill, ingest_cost.PER_READ * 256):
                    shapes.run(shape, shapes.reads(shape, max(1, min(256, (args.prefill - done) // ingest_cost.PER_READ))))
            perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", str(RATE), "-g", "-k",
                                     "CLOCK_MONOTONIC", "-p", str(os.getpid()), "-o", os.path.join(args.out, "perf.data")],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
            for s in range(args.slices):
                for kind in ("twrite", "msgid") if s % 2 == 0 else ("msgid", "twrite"):
                    data = shapes.reads(kind, reads)
                    started = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                    cpu = time.thread_time_ns()
                    shapes.run(kind, data)
                    cpu = time.thread_time_ns() - cpu
                    slices.append({"kind": kind, "start": started, "end": time.clock_gettime_ns(time.CLOCK_MONOTONIC),
                                   "messages": reads * ingest_cost.PER_READ, "server_cpu_s": cpu / 1e9})
            perf.send_signal(signal.SIGINT)
            perf.wait(60)

    load = [loadavg()]
    asyncio.run(main())
    load.append(loadavg())
    for kind in ("twrite", "msgid"):
        per = [1e9 * s["server_cpu_s"] / s["messages"] for s in slices if s["kind"] == kind]
        print(f"{kind}: thread CPU ns a message, median {statistics.median(per):.0f} "
              f"({', '.join(f'{v:.0f}' for v in per)})")
    with open(os.path.join(args.out, "slices.json"), "w") as f:
        json.dump({"slices": slices, "load": load, "prefill": args.prefill, "in_process": True}, f)


SAMPLE_HEADER = re.compile(r"^\s*\d+\.\d+:\s*$")  # a sample's time stamp line of ``perf script -F time,...``


def leaf_samples(out: str):
    """(time_ns, symbol, dso) of each sample's leaf frame, from ``perf script``."""
    text = subprocess.run(["perf", "script", "-i", os.path.join(out, "perf.data"), "-F", "time,ip,sym,dso",
                           "--ns"], capture_output=True, text=True, check=True).stdout
    samples = []
    stamp = None
    for line in text.splitlines():
        if not line.strip():
            stamp = None
            continue
        if stamp is None and SAMPLE_HEADER.match(line):  # (perf pads the seconds: uptime under 10,000 s)
            seconds = line.strip().rstrip(":")
            whole, _, frac = seconds.partition(".")
            stamp = int(whole) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])
            samples.append([stamp, None, None, []])
            continue
        if samples and stamp is not None:
            parts = line.split(None, 1)
            if len(parts) < 2:
                continue
            rest = parts[1]
            dso = rest[rest.rfind("(") + 1:rest.rfind(")")] if rest.endswith(")") else "?"
            sym = rest[:rest.rfind("(")].strip() if "(" in rest else rest.strip()
            sym = sym.split("+0x")[0]
            frames = samples[-1][3]
            frames.append((sym, os.path.basename(dso)))
    for stamp, _, _, frames in samples:
        if frames:
            yield stamp, frames


FAMILIES = [  # (family, predicate on (symbol, dso)); the first that matches
    ("window (engine/_window.c)", lambda s, d: "_window" in d),
    ("columns (engine/_columns.c)", lambda s, d: "_columns" in d),
    ("parser/encoders (resp/_speedups.c)", lambda s, d: "_speedups" in d),
    ("hiredis", lambda s, d: "hiredis" in d),
    ("zstd (sealed nodes)", lambda s, d: "backend_c" in d or "zstd" in d),
    ("msgpack", lambda s, d: "msgpack" in d or "_cmsgpack" in d),
    ("zlib/crc", lambda s, d: "libz" in d or "crc32" in s),
    ("uvloop", lambda s, d: "uvloop" in d or "loop.cpython" in d),
    ("kernel copy", lambda s, d: d.startswith("[kernel") and ("copy" in s or "memcpy" in s or "memmove" in s)),
    ("kernel other", lambda s, d: d.startswith("[kernel")),
    ("libc memcpy/memmove/memset", lambda s, d: "libc" in d and ("mem" in s)),
    ("libc malloc/free", lambda s, d: "libc" in d and any(w in s for w in ("malloc", "free", "realloc", "_int_"))),
    ("libc other", lambda s, d: "libc" in d),
    ("obmalloc", lambda s, d: "python" in d and ("_PyObject_Malloc" in s or "_PyObject_Free" in s or "pymalloc" in s
                                                 or "_PyObject_Realloc" in s or s.startswith("PyObject_Free")
                                                 or s.startswith("PyObject_Malloc"))),
    ("eval loop", lambda s, d: s == "_PyEval_EvalFrameDefault"),
    ("bytes objects", lambda s, d: "python" in d and ("PyBytes" in s or "bytes_" in s)),
    ("python other", lambda s, d: "python" in d),
]


def family(sym: str, dso: str) -> str:
    for name, match in FAMILIES:
        if match(sym, dso):
            return name
    return "other"


def kernel_entry(frames: list) -> str:
    """The system call (or interrupt, or page fault) a kernel sample ran in."""
    names = [s for s, _ in frames]
    entry = next((i for i, s in enumerate(names) if s in ("do_syscall_64", "asm_sysvec_apic_timer_interrupt",
                                                         "asm_common_interrupt", "asm_exc_page_fault")), None)
    if entry is None:
        return "?"
    if names[entry] == "do_syscall_64" and entry:  # (6.x kernels: x64_sys_call dispatches every call)
        called = entry - 1
        if names[called] == "x64_sys_call" and called:
            called -= 1
        return names[called]
    return names[entry]


def classify(out: str, slices: list) -> tuple[dict, dict, dict, collections.Counter, int]:
    """Each sample charged to the kind of slice it fell in: counts per leaf symbol, per
    family, per kernel leaf and system call; the totals; the samples between slices."""
    import bisect

    starts = [s["start"] for s in slices]
    per_sym: dict[str, collections.Counter] = {"twrite": collections.Counter(), "msgid": collections.Counter()}
    per_family: dict[str, collections.Counter] = {"twrite": collections.Counter(), "msgid": collections.Counter()}
    per_caller: dict[str, collections.Counter] = {"twrite": collections.Counter(), "msgid": collections.Counter()}
    totals: collections.Counter = collections.Counter()
    dropped = 0
    for stamp, frames in leaf_samples(out):
        i = bisect.bisect_right(starts, stamp) - 1
        if i < 0 or stamp > slices[i]["end"]:
            dropped += 1
            continue
        kind = slices[i]["kind"]
        sym, dso = frames[0]
        per_sym[kind][f"{sym} [{dso}]"] += 1
        per_family[kind][family(sym, dso)] += 1
        if dso.startswith("[kernel"):  # (the C code has no frame pointers: kernel chains only)
            via = kernel_entry(frames)
            per_caller[kind][f"{sym} <- {via}"] += 1
            per_caller[kind][f"(kernel, by entry) {via}"] += 1
        totals[kind] += 1
    return per_sym, per_family, per_caller, totals, dropped


def report(out: str, top: int) -> None:
    with open(os.path.join(out, "slices.json")) as f:
        meta = json.load(f)
    slices = sorted(meta["slices"], key=lambda s: s["start"])
    messages: collections.Counter = collections.Counter()
    cpu: collections.Counter = collections.Counter()
    for s in slices:
        messages[s["kind"]] += s["messages"]
        cpu[s["kind"]] += s["server_cpu_s"]
    per_sym, per_family, per_caller, totals, dropped = classify(out, slices)
    us = 1e6 / RATE

    def per_msg(kind: str, count: int) -> float:
        return count * us / messages[kind]

    print(f"load {meta['load']}; prefill {meta['prefill']:,}; slices {len(slices)}; samples twrite "
          f"{totals['twrite']:,} msgid {totals['msgid']:,} (between slices, dropped: {dropped:,})")
    for kind in ("twrite", "msgid"):
        print(f"{kind}: {messages[kind]:,} messages, samples {per_msg(kind, totals[kind]):.3f} us a message, "
              f"/proc CPU {1e6 * cpu[kind] / messages[kind]:.3f} us a message")
    for kind in ("twrite", "msgid"):
        io = collections.Counter()
        for s in slices:
            if s["kind"] == kind:
                io.update(s.get("io", {}))
        if io:
            print(f"{kind} per 1,000 messages: " + ", ".join(f"{name} {1000 * io[name] / messages[kind]:,.1f}"
                                                          for name in sorted(io)))
    print(f"extra: {per_msg('msgid', totals['msgid']) - per_msg('twrite', totals['twrite']):+.3f} us a message")
    for title, table, limit in (("families", per_family, 40), ("symbols (self)", per_sym, top),
                                ("kernel leaf <- system call", per_caller, top)):
        print(f"\n{title}: us a message  twrite  msgid  extra")
        names = set(table["twrite"]) | set(table["msgid"])
        rows = sorted(names, key=lambda n: -abs(per_msg("msgid", table["msgid"][n]) - per_msg("twrite", table["twrite"][n])))
        for name in rows[:limit]:
            t, m = per_msg("twrite", table["twrite"][name]), per_msg("msgid", table["msgid"][name])
            print(f"  {t:7.3f} {m:7.3f} {m - t:+7.3f}  {name}")


def main() -> None:
    sigterm_as_exit()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefill", type=int, default=750_000)
    ap.add_argument("--slices", type=int, default=20, help="pairs of slices")
    ap.add_argument("--per", type=int, default=25_000, help="messages a slice")
    ap.add_argument("--out", default="/tmp/msgid17/perf")
    ap.add_argument("--top", type=int, default=45)
    ap.add_argument("--window-ms", type=int, default=86_400_000,
                    help="the MSGID stream's duplicate window (a day: nothing expires; 2000: each claim also ages "
                         "ids out, the window holding the last 2 s of ids; the server run only)")
    ap.add_argument("--report-only", action="store_true", help="report the recording in --out again")
    ap.add_argument("--in-process", action="store_true",
                    help="no server: bench/ingest_cost.py's shapes fed in this process (no sockets)")
    args = ap.parse_args()
    if args.in_process and not args.report_only:
        in_process(args)
    elif not args.report_only:
        record(args)
    report(args.out, args.top)


if __name__ == "__main__":
    sys.exit(main())
