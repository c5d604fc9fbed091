#!/usr/bin/env python3
"""Fast-ingest batches (``BATCH ... FAST``) vs pipelined ``TWRITE key tag entry``, and MSGID's cost.

A tstream-server with ``appendonly yes``, ``appendfsync no`` or ``appendfsync always``, a
fresh one for each phase (see below).  Publishers are processes (one connection each, the benchmarks' raw
RESP client: a socket and hiredis), each writing its own messages (``orders.created``, 100
bytes) to its own key, all started together:

* **TWRITE**: pipelined ``TWRITE key orders.created data``, two windows of 64 in flight
  (send 64, send 64, then read the first window's 64 replies and send the next 64, ...);
* **FAST**: the same messages as one fast batch per publisher (``FAST 64 ok``), with
  ADR-50's client: send message 1 and wait for the first flow ack, then keep at most 2 acks
  outstanding (send up to ``last acked + 2 * ack_msgs``, read replies until the next ack),
  adopt the server's ``ack_msgs``, and end with EOB.

Both send the same pre-encoded bytes per message (built before the clock starts) and read
every reply.  Figures: messages/s over the whole run (first send to last reply, all
publishers), for 1, 4 and 16 publishers; the ratio FAST/TWRITE is taken within one round
(the two phases back to back, in alternating order), ``--rounds`` rounds, every one listed.
With 16 fast publishers an interactive client sends ``TREAD`` one at a time during the
run: its latency percentiles are listed (and every publisher must end without its
connection dropped).

**Each phase has a server of its own**, started for it (empty, its AOF new) and stopped
after it (its directory, AOF included, removed), with the automatic AOF rewrite off
(``--auto-aof-rewrite-percentage 0``): both kinds meet the same conditions.  One server
for every phase of a setting (before 2026-11-28) was not fair: its AOF grew by 23.75 MB a
phase (118.5 bytes a message, both kinds), and a rewrite started each time 64 MiB more
had been written since the last one began: every ~2.8 phases, mostly every third one
(the rewrite's capture on the loop and its writer thread cost whichever phase it lands
in).  With the alternating order (twrite/fast, fast/twrite, twrite/fast) the third and
sixth phase of each publisher count are FAST's: in round 13's diagnostic runs **14 of 14
rewrites fell in FAST phases**, of rounds 2 and 3 (bench/RESULTS-fast-ingest.md): the
quiet figures' "first round high, the later ones low" (0.95, 0.67, 0.62 ...).  The AOF,
the data in memory and, with ``appendfsync no``, the page cache's writeback of pages
dirty for 30 s also grew over one server's life; a fresh server each phase has none of
it.  The rewrite's own cost is measured apart (bench/rewrite_cost.py).  ``--one-server``
runs the former method, for comparison; the table's last column names the phases an AOF
rewrite ran in (INFO persistence before and after each phase).

**MSGID**: one publisher connection, ``TWRITE key tag entry`` vs ``TWRITE key tag entry
MSGID id`` (unique ids), same windows, ``appendfsync no``: the cost is 1 - ratio.  A phase
of a few hundred thousand messages lasts under a second and the machine's speed moves
more than that between two phases, so the two kinds run in ``--msgid-slices`` short
slices of ``--msgid-per-slice`` messages, interleaved (twrite/msgid, msgid/twrite, ...) on
one connection, each slice's messages built before its clock starts.  Figures: each pair's
ratio (all listed) and their median; the ratio of the totals (all messages / all
seconds); and the server process's CPU time per message (``/proc/<pid>/task/*/schedstat``,
every thread, in ns; load moves it less than wall time), totalled over the slices of each kind.
That server runs with the automatic AOF rewrite off (``--auto-aof-rewrite-percentage
0``): with it on, a rewrite starts each time the AOF grows by 64 MB (every ~600,000
messages of 100 bytes, a few slices) and its CPU (on the loop: the export of the
duplicate window, a million ids by the end) lands in whichever slice runs then, of
either kind (2026-11-27: slices at 51-146k msg/s and 6-19 us of server CPU per
message against 1.7-2.8 us), which the median of a few dozen pairs does not
absorb.  Sizing the runs to stay under 64 MB instead would leave 40 slices of
~15,000 messages, each under 50 ms: too short to time.  The rewrite's own cost is
measured apart (bench/rewrite_cost.py, bench/RESULTS-capture.md).

    flock /tmp/tstream-bench.lock .venv/bin/python bench/fast_ingest.py [--rounds 3] [--messages 200000]

``--pin``: the publisher processes run on one core and the server (every thread) and the
interactive TREAD client on another (``os.sched_setaffinity``): the publishers' CPU kept
off the server's core; the default leaves the scheduler free (all of them share every
core).  It is not the same as publishers on other hosts: on 2 cores the 16 publishers
share one core, which caps what they can offer (FAST's msg/s pinned are below the
shared-core ones); over loopback the kernel's receive work for their data runs on their
core, where a network card would put it on the server's; and the TREAD client shares
the server's core.
``--latency-rounds N`` adds N rounds per fsync setting of the 16-publisher phases pinned
that way (``--only latency`` runs just those), for issue #16's TREAD row: on shared cores
the TREAD p99 is set by the scheduler (a runnable server or reader waits one or two 4 ms
ticks behind 17 busy processes: the p99s of 8.0 ms, TWRITE's phases without any flow
control as well as FAST's); with the publishers' CPU off the server's core it shows the
server's turns (2026-11-28: 1.5-2.3 ms).

Writes ``results/fast_ingest.json`` and ``RESULTS-fast-ingest.md`` into bench/runs/, or into
$TSTREAM_BENCH_OUT (``bench``: the committed ones).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import statistics
import time

import jetstream
from common import (
    OUT_DIR,
    Client,
    encode,
    loadavg,
    machine_facts,
    percentile,
    save_result,
    script_command,
    servers,
    sigterm_as_exit,
)

SUBJECT = b"orders.created"
PAYLOAD = b"x" * 100
WINDOW = 64
FLOW = 64
OUTSTANDING = 2


UNIQUE_PAYLOADS = False  # --unique-payloads: message i's payload starts with i (else all PAYLOAD)


def payload(i: int) -> bytes:
    """Message ``i``'s 100 bytes: PAYLOAD, or with --unique-payloads ``i`` in its first
    ten digits (no two alike, as real messages: the server's parser shares a word
    equal to the one before it, which an identical payload always is)."""
    return b"%010d" % i + PAYLOAD[10:] if UNIQUE_PAYLOADS else PAYLOAD


def _messages(kind: str, key: bytes, n: int) -> list[bytes]:
    if kind == "twrite":
        return [encode("TWRITE", key, SUBJECT, payload(i)) for i in range(1, n + 1)]
    if kind == "msgid":
        return [encode("TWRITE", key, SUBJECT, payload(i), "MSGID", b"id-%d" % i) for i in range(1, n + 1)]
    return [encode("BATCH", key, b"batch", i, SUBJECT, payload(i), "FAST", FLOW, "ok") for i in range(1, n + 1)]


def _pipelined(c: Client, msgs: list[bytes]) -> None:
    """Two windows in flight: send, send, then read one window and send the next."""
    n = len(msgs)
    sent = 0
    inflight: list[int] = []
    while sent < n or inflight:
        while sent < n and len(inflight) < OUTSTANDING:
            end = min(n, sent + WINDOW)
            c.send(b"".join(msgs[sent:end]))
            inflight.append(end - sent)
            sent = end
        c.read_replies(inflight.pop(0))


OK_REPLY = b"+OK\r\n"
ACK_HEAD = b"*6\r\n$4\r\ntype\r\n$3\r\nack\r\n$3\r\nseq\r\n:"  # a RESP2 flow ack up to its seq
ACK_MID = b"\r\n$8\r\nack_msgs\r\n:"


class FastReplies:
    """A fast publisher's replies read a stretch at a time: the ``+OK``s up to the
    next ack point compared as one byte string and the flow ack taken apart by
    hand (the server replies a run's ``+OK``s and acks in one piece), not one
    hiredis reply at a time.  Anything else (a gap, a duplicate, an error, an ack
    where it was not expected) switches to the reply-by-reply reading of
    ``Client.read_reply`` for the rest of the batch."""

    def __init__(self, c: Client) -> None:
        self.c = c
        self.buf = b""
        self.slow = False
        self.oks = {0: b""}

    def _fill(self, expected: bytes, at: int = 0) -> bool:
        """``expected`` buffered from ``at`` on; False (nothing consumed) as soon as
        what came differs (never waiting for bytes that are not coming)."""
        size = at + len(expected)
        while len(self.buf) < size:
            if not expected.startswith(self.buf[at:]):
                return False
            chunk = self.c.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        return self.buf.startswith(expected, at)

    def _to_slow(self) -> None:
        self.slow = True
        self.c.reader.feed(self.buf)
        self.buf = b""

    def read(self, count: int, ack_at: int) -> tuple[int, list | None]:
        """Up to ``count`` replies, the one at index ``ack_at`` (if < count) a flow
        ack: ``(replies read, [seq, ack_msgs] of the flow ack or None)``.  Reply
        by reply, it stops at the first flow ack, wherever it is."""
        if not self.slow:
            got = self._read_fast(count, ack_at)
            if got is not False:
                return count, got
            self._to_slow()
        read_reply = self.c.read_reply
        for i in range(count):
            reply = read_reply()
            if reply.__class__ is list:
                fields = dict(zip(reply[::2], reply[1::2]))
                if fields.get(b"type") != b"ack":
                    raise RuntimeError(f"unexpected reply {reply!r}")
                return i + 1, [fields[b"seq"], fields[b"ack_msgs"]]
        return count, None

    def release(self) -> None:
        """Back to ``Client.read_reply`` (what is buffered goes to its reader)."""
        if not self.slow:
            self._to_slow()

    def _read_fast(self, count: int, ack_at: int):
        """``read``'s answer, or False with nothing consumed (not the shape expected)."""
        if 0 <= ack_at < count - 1:  # (replies after the ack: not a stretch _fast reads)
            return False
        oks = ack_at if 0 <= ack_at < count else count
        run = self.oks.get(oks)
        if run is None:
            run = self.oks[oks] = OK_REPLY * oks
        size = len(run)
        if not self._fill(run):
            return False
        if oks == count:
            self.buf = self.buf[size:]
            return None
        if not self._fill(ACK_HEAD, size):
            return False
        while True:  # the ack, then the +OKs after it
            buf = self.buf
            mid = buf.find(ACK_MID, size + len(ACK_HEAD))
            end = buf.find(b"\r\n", mid + len(ACK_MID)) if mid > 0 else -1
            if end > 0:
                break
            if len(buf) > size + 200:
                return False
            chunk = self.c.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        try:
            ack = [int(buf[size + len(ACK_HEAD):mid]), int(buf[mid + len(ACK_MID):end])]
        except ValueError:
            return False
        self.buf = buf[end + 2:]
        return ack


def _fast(c: Client, msgs: list[bytes], key: bytes) -> None:
    """ADR-50's fast publisher: first ack, at most OUTSTANDING acks outstanding, EOB.
    The replies up to the next ack point (``acked + ack_msgs``: the server acks
    every ``ack_msgs``-th message after the last ack) are read in one call."""
    n = len(msgs)
    c.send(msgs[0])
    first = c.read_reply()
    ack = dict(zip(first[::2], first[1::2]))
    acked, k = ack[b"seq"], ack[b"ack_msgs"]
    replies = FastReplies(c)
    sent = 1
    read = 1  # replies read (the batch-seq of the last one)
    while sent < n or read < sent:
        limit = min(n, acked + k * OUTSTANDING)
        if sent < limit:
            c.send(b"".join(msgs[sent:limit]))
            sent = limit
        # read until the next ack point (acked + k) or everything sent
        count = min(sent, acked + k) - read
        if count <= 0:  # (an ack came early: reply by reply, up to the next one)
            count = sent - read
        got, ack = replies.read(count, acked + k - read - 1)
        read += got
        if ack is not None:
            acked, k = ack
    replies.release()
    done = c.execute("BATCH", key, b"batch", n + 1, "FAST", FLOW, "ok", "EOB")
    if dict(zip(done[::2], done[1::2]))[b"count"] != n:
        raise RuntimeError(f"final pub ack {done!r}")


NICE = 0  # --nice: the publishers' niceness (the server and the TREAD client keep theirs)
PIN: tuple[int, int] | None = None  # --pin: (the server's and TREAD client's core, the publishers' core)
SLICE_NS = 0  # --slice-us: the EEVDF slice asked for the server's threads and the TREAD client (0: the kernel's)


def set_slice(tid: int, slice_ns: int) -> None:
    """Ask the kernel's EEVDF scheduler (Linux 6.12+) for a slice of ``slice_ns`` for the
    thread ``tid`` (0: this one), its policy and niceness kept: sched_setattr(2) with
    SCHED_OTHER and sched_runtime, which needs no privilege.  A task with a shorter slice
    than the running one preempts it when it wakes up (instead of waiting up to a 4 ms
    scheduler tick for the core); its share of the CPU stays what its weight gives it."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    nice = os.getpriority(os.PRIO_PROCESS, tid)
    # struct sched_attr (SCHED_ATTR_SIZE_VER1): size, policy, flags, nice, priority,
    # runtime, deadline, period, util_min, util_max
    attr = ctypes.create_string_buffer(struct.pack("IIQiIQQQII", 56, 0, 0, nice, 0, slice_ns, 0, 0, 0, 0), 56)
    if libc.syscall(314, tid, attr, 0) != 0:  # SYS_sched_setattr on x86_64
        raise OSError(ctypes.get_errno(), "sched_setattr")


def slice_process(pid: int, slice_ns: int) -> None:
    """Every thread of ``pid`` (threads started later inherit it from theirs)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            set_slice(int(tid), slice_ns)
        except ProcessLookupError:
            pass


def _pin_cores() -> tuple[int, int]:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("--pin needs two cores")
    return cores[0], cores[1]


def pin_process(pid: int, core: int) -> None:
    """Every thread of ``pid`` on ``core`` (threads started later inherit it from theirs)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {core})
        except ProcessLookupError:
            pass


def _publisher(port: int, kind: str, key: bytes, n: int, barrier, out) -> None:
    if NICE:
        os.nice(NICE)
    if PIN:
        os.sched_setaffinity(0, {PIN[1]})
    msgs = _messages(kind, key, n)
    c = Client(port)
    barrier.wait()
    started = time.perf_counter()
    cpu = time.process_time()
    try:
        if kind == "fast":
            _fast(c, msgs, key)
        else:
            _pipelined(c, msgs)
        out.put((started, time.perf_counter(), None, time.process_time() - cpu))
    except Exception as exc:  # reported, not raised: the parent checks every publisher
        out.put((started, time.perf_counter(), repr(exc), time.process_time() - cpu))
    finally:
        c.close()


def _run_queue_wait() -> int:
    """This thread's time runnable but not running (ns, cumulative: /proc/thread-self/schedstat)."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1])


def _reader(port: int, key: bytes, stop, out) -> None:
    if PIN:
        os.sched_setaffinity(0, {PIN[0]})
    if SLICE_NS:
        set_slice(0, SLICE_NS)
    c = Client(port)
    probe = os.environ.get("TSTREAM_TURN_PROBE")  # the server's turn probe (server/turns.py) is on
    if probe:
        c.execute("CLIENT", "SETNAME", "turn-probe")  # the server records this client's waits
    lat = []
    sent = []
    while not stop.is_set():
        if probe:  # (this process's run-queue wait, read before the clock starts: the reader's own wait for a core)
            waited = _run_queue_wait()
        t0 = time.perf_counter()
        s0 = time.monotonic_ns()
        c.execute("TREAD", key, 1, 10)
        lat.append((time.perf_counter() - t0) * 1000)
        if probe:
            sent.append((s0, time.monotonic_ns(), _run_queue_wait() - waited))
        time.sleep(0.001)
    c.close()
    if probe:  # the client's side of each TREAD, next to the server's file:
        # [sent, received, the reader's run-queue wait meanwhile] (ns)
        with open(probe + ".reader", "a") as f:
            f.write(json.dumps(sent) + "\n")
    lat.sort()
    out.put(lat)


def phase(port: int, kind: str, pubs: int, per: int, tag: str, reader: bool = False, pid: int = 0) -> dict:
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(pubs)
    out = ctx.Queue()
    procs = [ctx.Process(target=_publisher, args=(port, kind, b"%s-%s-%d" % (tag.encode(), kind.encode(), i),
                                                  per, barrier, out)) for i in range(pubs)]
    stop = ctx.Event()
    lat_q = ctx.Queue()
    rproc = None
    if reader:
        c = Client(port)
        c.execute("TWRITE", "interactive", "t", "x")
        c.close()
        rproc = ctx.Process(target=_reader, args=(port, b"interactive", stop, lat_q))
        rproc.start()
    aof_before = _aof_state(port)
    server_cpu = _server_cpu(pid) if pid else 0.0
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    server_cpu = _server_cpu(pid) - server_cpu if pid else 0.0
    for p in procs:
        p.join()
    errors = [e for _, _, e, _ in results if e]
    if errors:
        raise RuntimeError(f"{kind}: publisher failed: {errors[0]}")
    start = min(s for s, _, _, _ in results)
    end = max(e for _, e, _, _ in results)
    messages = pubs * per
    res = {"msgs_per_s": messages / (end - start), "seconds": end - start,
           # CPU per message, us: the publishers' (process time from first send to last reply,
           # all of them) and the server's (/proc, from the publishers' start to their last report)
           "client_cpu_us": 1e6 * sum(c for _, _, _, c in results) / messages,
           "server_cpu_us": 1e6 * server_cpu / messages if pid else None,
           "aof_rewrite": _aof_rewrite_during(aof_before, _aof_state(port))}
    if rproc is not None:
        stop.set()
        lat = lat_q.get(timeout=60)
        rproc.join()
        res["tread_ms"] = {"n": len(lat), "p50": percentile(lat, 50), "p99": percentile(lat, 99),
                           "max": lat[-1] if lat else 0}
    return res


# The ingest phases' servers: no automatic AOF rewrite (see the module docstring).
INGEST_SERVER_OPTIONS = ["--auto-aof-rewrite-percentage", "0"]


def _aof_state(port: int) -> tuple[str, str]:
    """(aof_rewrite_in_progress, aof_base_size) of INFO persistence."""
    c = Client(port)
    try:
        info = c.info("persistence")
    finally:
        c.close()
    return info.get("aof_rewrite_in_progress", "0"), info.get("aof_base_size", "0")


def _aof_rewrite_during(before: tuple[str, str], after: tuple[str, str]) -> bool:
    """Whether an AOF rewrite ran during a phase (in progress at either end, or a new base)."""
    return before[0] != "0" or after[0] != "0" or before[1] != after[1]


def fresh_server_phase(extra: list[str], kind: str, pubs: int, per: int, tag: str) -> dict:
    """``phase`` on a server of its own, started for it and stopped after it (module
    docstring: one server for every phase was not fair)."""
    with servers(("tstream", extra)) as (ts,):
        if PIN:
            pin_process(ts.pid, PIN[0])
        if SLICE_NS:
            slice_process(ts.pid, SLICE_NS)
        return phase(ts.port, kind, pubs, per, tag, reader=pubs == 16, pid=ts.pid)


def ingest_rounds(args, results: dict, fsync: str, extra: list[str], ts) -> None:
    """The rounds of one ``appendfsync`` setting: each phase on a fresh server started with
    ``extra``, or all on the server ``ts`` (--one-server)."""
    for pubs in args.pubs:
        per = max(1000, args.messages // pubs)
        for rnd in range(args.rounds):
            order = ("twrite", "fast") if rnd % 2 == 0 else ("fast", "twrite")
            got = {}
            for kind in order:
                tag = f"{fsync}{pubs}r{rnd}"
                got[kind] = (phase(ts.port, kind, pubs, per, tag, reader=pubs == 16, pid=ts.pid)
                             if ts is not None else fresh_server_phase(extra, kind, pubs, per, tag))
            row = {"appendfsync": fsync, "fsync_thread": bool(args.fsync_thread),
                   "fresh_server": ts is None, "pinned": bool(PIN), "slice_us": SLICE_NS // 1000,
                   "publishers": pubs, "messages": pubs * per, "round": rnd + 1,
                   "order": "/".join(order), "twrite": got["twrite"], "fast": got["fast"],
                   "ratio": got["fast"]["msgs_per_s"] / got["twrite"]["msgs_per_s"]}
            results["ingest"].append(row)
            print(f"appendfsync {fsync:6} {pubs:2} pub round {rnd + 1}: TWRITE "
                  f"{got['twrite']['msgs_per_s']:10,.0f}/s  FAST {got['fast']['msgs_per_s']:10,.0f}/s  "
                  f"ratio {row['ratio']:.2f}  CPU us/msg client {got['twrite']['client_cpu_us']:.2f}/"
                  f"{got['fast']['client_cpu_us']:.2f} server {got['twrite']['server_cpu_us']:.2f}/"
                  f"{got['fast']['server_cpu_us']:.2f} (twrite/fast)"
                  + (f"  TREAD p99 {got['fast']['tread_ms']['p99']:.2f} ms (fast), "
                     f"{got['twrite']['tread_ms']['p99']:.2f} ms (twrite)" if pubs == 16 else "")
                  + "".join(f"  AOF rewrite during {kind.upper()}" for kind in order if got[kind]["aof_rewrite"]),
                  flush=True)


def run(args) -> dict:
    results: dict = {"ingest": [], "msgid": [], "latency": []}
    for fsync in ("no", "always") if args.only in (None, "ingest") else ():
        extra = _ingest_extra(args, fsync)
        ts = None
        with contextlib.ExitStack() as stack:
            if args.one_server:  # (the former method, automatic rewrites on: see the module docstring)
                (ts,) = stack.enter_context(servers(("tstream", extra)))
                if PIN:
                    pin_process(ts.pid, PIN[0])
                if SLICE_NS:
                    slice_process(ts.pid, SLICE_NS)
            ingest_rounds(args, results, fsync, [*extra, *INGEST_SERVER_OPTIONS], ts)
    if args.only in (None, "ingest", "latency") and args.latency_rounds:  # (a part of the ingest rounds)
        results["latency"] = latency_rounds(args)
    with servers(("tstream", ["--appendonly", "yes", "--appendfsync", "no", *MSGID_SERVER_OPTIONS])) as (ts,):
        facts = machine_facts(ts)  # (its loadavg_at_start: before the MSGID slices)
        if args.only in (None, "msgid"):
            results["msgid"] = msgid_slices(ts.port, ts.pid, args.msgid_slices, args.msgid_per_slice)
        facts["loadavg_at_end"] = loadavg()
        results["facts"] = facts
    return results


def _ingest_extra(args, fsync: str) -> list[str]:
    """The ingest servers' persistence options for ``appendfsync fsync``."""
    extra = ["--appendonly", "yes", "--appendfsync", fsync]
    if args.fsync_thread:  # (a build before the option existed refuses it: leave it off for those)
        extra += ["--aof-fsync-in-thread", "yes"]
    return extra


def latency_rounds(args) -> list[dict]:
    """The interactive TREAD latency under 16 fast publishers with the server (every
    thread) and the TREAD client on one core and the publishers on the other (their CPU
    off the server's core; see the module docstring for how that differs from other
    hosts): ``--latency-rounds`` rounds of each fsync
    setting, TWRITE and FAST phases as in ``ingest_rounds``, each on a fresh server.
    On shared cores (the ingest rounds) a runnable server or reader can wait a
    scheduler tick or two (4 ms each here) behind 17 other processes, in TWRITE's
    phases as in FAST's: that wait is the kernel's, not the server's turn."""
    global PIN
    saved, PIN = PIN, _pin_cores()
    pinned = argparse.Namespace(**{**vars(args), "pubs": [16], "rounds": args.latency_rounds})
    rows: dict = {"ingest": []}
    try:
        for fsync in ("no", "always"):
            ingest_rounds(pinned, rows, fsync, [*_ingest_extra(args, fsync), *INGEST_SERVER_OPTIONS], None)
    finally:
        PIN = saved
    return rows["ingest"]


def _server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid``'s live threads have used: the
    sum of their ``/proc/<pid>/task/<tid>/schedstat`` run times, in ns (``/proc/<pid>/stat``
    counts 10 ms ticks: 0.4 us a message in a slice of 25,000).  A thread that ended
    is not counted (the server's loop, fsync and writer threads live as long as it)."""
    total = read = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
            read += 1
        except (FileNotFoundError, ProcessLookupError):  # (the thread ended meanwhile)
            pass
    if not read:
        raise RuntimeError(f"no /proc/{pid}/task/*/schedstat to read (a kernel without schedstats?)")
    return total / 1e9


def msgid_slices(port: int, pid: int, slices: int, per: int) -> list[dict]:
    """TWRITE vs TWRITE MSGID in ``slices`` interleaved slices of ``per`` messages
    each, on one connection (see the module docstring); a row per slice."""
    c = Client(port)
    twrites = ([encode("TWRITE", b"mi-twrite", SUBJECT, payload(i)) for i in range(per)] if UNIQUE_PAYLOADS
               else [encode("TWRITE", b"mi-twrite", SUBJECT, PAYLOAD)] * per)
    rows = []
    try:
        for s in range(slices):
            order = ("twrite", "msgid") if s % 2 == 0 else ("msgid", "twrite")
            row: dict = {"slice": s + 1, "order": "/".join(order)}
            for kind in order:
                msgs = twrites if kind == "twrite" else [
                    encode("TWRITE", b"mi-msgid", SUBJECT, payload(i), "MSGID", b"id-%d-%d" % (s, i))
                    for i in range(per)]
                cpu = _server_cpu(pid)
                started = time.perf_counter()
                _pipelined(c, msgs)
                seconds = time.perf_counter() - started
                row[kind] = {"msgs_per_s": per / seconds, "seconds": seconds, "server_cpu_s": _server_cpu(pid) - cpu}
            row["ratio"] = row["msgid"]["msgs_per_s"] / row["twrite"]["msgs_per_s"]
            rows.append(row)
            print(f"MSGID slice {s + 1}: TWRITE {row['twrite']['msgs_per_s']:10,.0f}/s  "
                  f"TWRITE MSGID {row['msgid']['msgs_per_s']:10,.0f}/s  ratio {row['ratio']:.2f}", flush=True)
    finally:
        c.close()
    return rows


def msgid_summary(rows: list[dict]) -> dict:
    """MSGID's cost from the slices: the median pair ratio, the ratio of the totals,
    and the server's CPU per message of each kind."""
    per = {kind: sum(r[kind]["seconds"] for r in rows) for kind in ("twrite", "msgid")}
    cpu = {kind: sum(r[kind]["server_cpu_s"] for r in rows) for kind in ("twrite", "msgid")}
    messages = sum(r["twrite"]["msgs_per_s"] * r["twrite"]["seconds"] for r in rows)
    return {"median_ratio": statistics.median(r["ratio"] for r in rows), "total_ratio": per["twrite"] / per["msgid"],
            "cpu_us": {kind: 1e6 * cpu[kind] / messages for kind in cpu},
            "cpu_ratio": cpu["twrite"] / cpu["msgid"] if cpu["msgid"] else 0.0}


# The MSGID slices' server: no automatic AOF rewrite (see the module docstring).
MSGID_SERVER_OPTIONS = ["--auto-aof-rewrite-percentage", "0"]

NATS_WINDOWS = (64, 256, 1024)
FAST_FLOWS = (64, 256)  # the fast publisher's flow (its largest ack interval) in the nats comparison


async def _nats_publish(port: int, seconds: float, window: int) -> float:
    """nats-py acked publish, pipelined: ``publish_async`` a window, then wait for its pub acks."""
    import nats
    from nats.js import api
    nc = await nats.connect(f"nats://127.0.0.1:{port}", max_reconnect_attempts=0)
    try:
        js = nc.jetstream()
        try:
            await js.add_stream(api.StreamConfig(name="PUB", subjects=["orders.>"],
                                                 storage=api.StorageType.MEMORY))
        except Exception:  # noqa: BLE001 (already there from an earlier round)
            pass
        return await jetstream.n_publish_async(js, seconds, window)
    finally:
        await nc.close()


def _nats_phase(port: int, seconds: float, window: int, out) -> None:
    loop, _ = jetstream.setup_loop()
    try:
        out.put(loop.run_until_complete(_nats_publish(port, seconds, window)))
    finally:
        loop.close()


def run_nats(args) -> list[dict]:
    """FAST from one process vs nats-py's fastest acked publish from one process (both
    servers in memory: tstream without AOF, nats-server with memory storage)."""
    rows = []
    ctx = mp.get_context("fork")
    nats_server = jetstream.NatsServer().start()
    try:
        with servers(("tstream", [])) as (ts,):
            for rnd in range(args.rounds):
                got = {}
                for window in NATS_WINDOWS:
                    out = ctx.Queue()
                    proc = ctx.Process(target=_nats_phase, args=(nats_server.port, args.seconds, window, out))
                    proc.start()
                    got[window] = out.get(timeout=120)
                    proc.join()
                fast = {}
                for flow in FAST_FLOWS:  # (the phases fork: they see the flow set here)
                    global FLOW
                    FLOW, saved = flow, FLOW
                    try:
                        fast[flow] = phase(ts.port, "fast", 1, args.messages, f"nats{rnd}f{flow}")["msgs_per_s"]
                    finally:
                        FLOW = saved
                best = max(got.values())
                row = {"round": rnd + 1, "nats": got, "nats_best": best, "fast_flows": fast,
                       "fast": max(fast.values()), "ratio": max(fast.values()) / best}
                rows.append(row)
                print(f"nats round {rnd + 1}: nats publish_async "
                      + " ".join(f"w{w} {v:,.0f}/s" for w, v in got.items()) + "  FAST "
                      + " ".join(f"flow {f} {v:,.0f}/s" for f, v in fast.items())
                      + f"  ratio {row['ratio']:.1f}x", flush=True)
            rows.append({"nats_server": nats_server.version()})
    finally:
        nats_server.stop()
    return rows


def lat_text(lat) -> str:
    """A phase's TREAD ``p50 / p99 / max`` ms (empty without a reader)."""
    return f"{lat['p50']:.2f} / {lat['p99']:.2f} / {lat['max']:.1f}" if lat else ""


def latency_report(rows: list | None, args) -> list[str]:
    """The report's lines for ``latency_rounds``' rows (none without them)."""
    if not rows:
        return []
    lines: list[str] = []
    cores = _pin_cores()
    lines += ["", "## TREAD latency under 16 fast publishers on their own core", "",
              f"`--latency-rounds {args.latency_rounds}`: the server (every thread) and the TREAD client on core "
              f"{cores[0]}, the 16 publishers on core {cores[1]} (their CPU off the server's core; on 2 cores "
              "they share one, and their loopback receive work runs there too); each phase on a fresh "
              "server, TWRITE and FAST in alternating order.", "",
              "| appendfsync | round | order | TWRITE msg/s | FAST msg/s | TREAD p50/p99/max ms during FAST | "
              "during TWRITE |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['appendfsync']} | {row['round']} | {row['order']} | "
                     f"{row['twrite']['msgs_per_s']:,.0f} | {row['fast']['msgs_per_s']:,.0f} | "
                     f"{lat_text(row['fast'].get('tread_ms'))} | {lat_text(row['twrite'].get('tread_ms'))} |")
    for fsync in ("no", "always"):
        p99s = [row["fast"]["tread_ms"]["p99"] for row in rows if row["appendfsync"] == fsync]
        if p99s:
            lines += ["", f"TREAD p99 during FAST, publishers on their own core, appendfsync {fsync}: median "
                      f"**{statistics.median(p99s):.2f} ms**, worst round **{max(p99s):.2f} ms**"]
    return lines


def cpu_text(row: dict, side: str) -> str:
    """``TWRITE / FAST`` CPU us per message of ``side`` (client or server) in a round."""
    got = [row[kind].get(f"{side}_cpu_us") for kind in ("twrite", "fast")]
    return " / ".join(f"{v:.2f}" for v in got) if None not in got else ""


def report(results: dict, args) -> str:
    lines = ["# Fast-ingest batches vs pipelined TWRITE, and MSGID's cost", "",
             f"`{script_command()}`", "",
             "Same server, same messages (100-byte `orders.created`), same durability; the ratio is "
             "FAST/TWRITE within one round (phases back to back, alternating order, "
             + ("on one server per setting, automatic AOF rewrites on (--one-server)" if args.one_server else
                "each on a fresh server without automatic AOF rewrite") + "). Every round is listed.",
             "CPU us/msg: the publishers' process time and the server's (every thread), per message, "
             "TWRITE / FAST."
             + (f" **Pinned** (--pin): publishers on core {PIN[1]}, the server and the TREAD client on core "
                f"{PIN[0]}." if PIN else "")
             + (f" **Slices** (--slice-us): {SLICE_NS // 1000} us for the server's threads and the TREAD client."
                if SLICE_NS else ""),
             "", "| appendfsync | publishers | messages | round | order | TWRITE msg/s | FAST msg/s | ratio | "
             "client CPU us/msg | server CPU us/msg | TREAD p50/p99/max ms during FAST | during TWRITE | AOF rewrite during |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    for row in results["ingest"]:
        lines.append(f"| {row['appendfsync']} | {row['publishers']} | {row['messages']:,} | {row['round']} | "
                     f"{row['order']} | {row['twrite']['msgs_per_s']:,.0f} | {row['fast']['msgs_per_s']:,.0f} | "
                     f"{row['ratio']:.2f} | {cpu_text(row, 'client')} | {cpu_text(row, 'server')} | "
                     f"{lat_text(row['fast'].get('tread_ms'))} | "
                     f"{lat_text(row['twrite'].get('tread_ms'))} | "
                     + " ".join(kind for kind in ("twrite", "fast") if row[kind].get("aof_rewrite")) + " |")
    lines += ["", "Median ratio per configuration:", ""]
    seen = []
    for row in results["ingest"]:
        cfg = (row["appendfsync"], row["publishers"])
        if cfg not in seen:
            seen.append(cfg)
    for fsync, pubs in seen:
        ratios = [r["ratio"] for r in results["ingest"] if (r["appendfsync"], r["publishers"]) == (fsync, pubs)]
        lines.append(f"- appendfsync {fsync}, {pubs} publisher(s): **{statistics.median(ratios):.2f}x**")
    for fsync in ("no", "always"):
        p99s = [row["fast"]["tread_ms"]["p99"] for row in results["ingest"]
                if row["fast"].get("tread_ms") and row["appendfsync"] == fsync]
        if p99s:
            lines += ["", f"TREAD p99 during FAST with 16 publishers, appendfsync {fsync}, median of the rounds: "
                      f"**{statistics.median(p99s):.2f} ms** (range {min(p99s):.2f}-{max(p99s):.2f})"]
    lines += latency_report(results.get("latency"), args)
    lines += ["", "## MSGID", "", f"{args.msgid_slices} interleaved slices of {args.msgid_per_slice:,} messages "
              "each, one connection:", "",
              "| slice | order | TWRITE msg/s | TWRITE MSGID msg/s | ratio | cost | server CPU us/msg TWRITE | MSGID |",
              "|---|---|---|---|---|---|---|---|"]
    for row in results["msgid"]:
        per = args.msgid_per_slice
        lines.append(f"| {row['slice']} | {row['order']} | {row['twrite']['msgs_per_s']:,.0f} | "
                     f"{row['msgid']['msgs_per_s']:,.0f} | {row['ratio']:.2f} | {100 * (1 - row['ratio']):.0f}% | "
                     f"{1e6 * row['twrite']['server_cpu_s'] / per:.2f} | {1e6 * row['msgid']['server_cpu_s'] / per:.2f} |")
    if results["msgid"]:
        summary = msgid_summary(results["msgid"])
        ratios = [row["ratio"] for row in results["msgid"]]
        lines += ["", f"Median cost of the slices: **{100 * (1 - summary['median_ratio']):.1f}%** (slices "
                  f"{100 * (1 - max(ratios)):.0f}% to {100 * (1 - min(ratios)):.0f}%); cost of the totals: "
                  f"**{100 * (1 - summary['total_ratio']):.1f}%**; server CPU per message "
                  f"{summary['cpu_us']['twrite']:.2f} us (TWRITE) vs {summary['cpu_us']['msgid']:.2f} us (MSGID): "
                  f"cost **{100 * (1 - summary['cpu_ratio']):.1f}%**"]
    if results.get("nats"):
        rows = [r for r in results["nats"] if "round" in r]
        version = next((r["nats_server"] for r in results["nats"] if "nats_server" in r), "nats-server")
        lines += ["", "## FAST vs nats-server's acked publish", "",
                  f"{version}, JetStream, memory storage; nats-py `js.publish_async` in windows of "
                  + ", ".join(str(w) for w in NATS_WINDOWS) + " (wait for the window's pub acks, next "
                  "window), one process; tstream without AOF, one FAST publisher process "
                  f"({args.messages:,} messages) with flow " + " and ".join(map(str, FAST_FLOWS))
                  + ". Ratio: the best FAST flow / the best nats window of the round.", "",
                  "| round | " + " | ".join(f"nats w{w} msg/s" for w in NATS_WINDOWS) + " | "
                  + " | ".join(f"FAST flow {f} msg/s" for f in FAST_FLOWS) + " | ratio |",
                  "|---|" + "---|" * (len(NATS_WINDOWS) + len(FAST_FLOWS) + 1)]
        for r in rows:
            flows = r.get("fast_flows", {FAST_FLOWS[0]: r["fast"]})
            lines.append(f"| {r['round']} | " + " | ".join(f"{r['nats'][w]:,.0f}" for w in NATS_WINDOWS) + " | "
                         + " | ".join(f"{flows[f]:,.0f}" if f in flows else "" for f in FAST_FLOWS)
                         + f" | {r['ratio']:.1f}x |")
        lines += ["", f"Median ratio: **{statistics.median(r['ratio'] for r in rows):.1f}x**"]
    facts = results.get("facts", {})
    lines += ["", "Machine: " + ", ".join(f"{k} {v}" for k, v in facts.items() if k in (
        "cpu", "cpus", "python", "tstream_event_loop", "loadavg_at_start", "loadavg_at_end", "git_commit")), ""]
    return "\n".join(lines)


def main() -> None:
    sigterm_as_exit()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=200_000, help="messages per configuration")
    parser.add_argument("--only", choices=("ingest", "latency", "msgid", "none"), help="run only this part")
    parser.add_argument("--latency-rounds", type=int, default=0,
                        help="also this many rounds per fsync setting of 16 publishers on one core and the server "
                             "and the TREAD client on the other, for the TREAD latency (latency_rounds); default 0")
    parser.add_argument("--nats", action="store_true", help="also FAST vs nats-server's acked publish")
    parser.add_argument("--pubs", type=lambda text: [int(x) for x in text.split(",")], default=[1, 4, 16],
                        help="publisher counts (default 1,4,16)")
    parser.add_argument("--nice", type=int, default=0,
                        help="niceness of the publisher processes (the server and the TREAD client keep "
                             "theirs): on a machine with fewer cores than publishers, the TREAD latency "
                             "then shows the server's turns rather than the client waiting for a core")
    parser.add_argument("--fsync-thread", action="store_true",
                        help="start the server with aof-fsync-in-thread yes (appendfsync always: the fsync in a "
                             "thread, reads of keys with no unsynced change answered at once); default: the "
                             "server's default (no: the fsync on the event loop)")
    parser.add_argument("--pin", action="store_true",
                        help="publishers on one core, the server (every thread) and the TREAD client on "
                             "another (the publishers' CPU off the server's core); default: not pinned")
    parser.add_argument("--slice-us", type=int, default=0,
                        help="ask Linux's EEVDF scheduler (6.12+) for slices of this many us for the server's "
                             "threads and the TREAD client (sched_setattr, no privilege needed): woken up, they "
                             "preempt a publisher instead of waiting for a scheduler tick; default: the kernel's")
    parser.add_argument("--one-server", action="store_true",
                        help="the former method: one server for every ingest phase of a setting, automatic AOF "
                             "rewrites on (they fell in FAST's phases: see the module docstring); default: a "
                             "fresh server for each phase, without automatic rewrites")
    parser.add_argument("--unique-payloads", action="store_true",
                        help="every message's payload different (its number in the first ten bytes); default: "
                             "all the same 100 bytes, which the server's parser shares from one command to the next")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per nats-server run")
    parser.add_argument("--msgid-slices", type=int, default=40, help="MSGID: interleaved slices of each kind")
    parser.add_argument("--msgid-per-slice", type=int, default=25_000, help="MSGID: messages per slice")
    args = parser.parse_args()
    if args.only == "latency" and not args.latency_rounds:
        parser.error("--only latency needs --latency-rounds N (N > 0)")
    global NICE, PIN, SLICE_NS, UNIQUE_PAYLOADS
    NICE = args.nice
    UNIQUE_PAYLOADS = args.unique_payloads
    SLICE_NS = args.slice_us * 1000
    PIN = _pin_cores() if args.pin else None
    results = run(args)
    if args.nats:
        results["nats"] = run_nats(args)
    save_result("fast_ingest", results)
    text = report(results, args)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "RESULTS-fast-ingest.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
