#!/usr/bin/env python3
"""Instructions per read of the hottest shapes, counted by valgrind's callgrind:
a figure that does not move with the machine's load (timings on a shared 2-core
machine do), to compare two builds while other work runs.

    .venv/bin/python bench/instructions.py --base /tmp/base930/.venv/bin/python [--out FILE]

Each shape is fed through ``ClientConnection.data_received`` on the fake
transport of bench/hotpath.py (no sockets): its reads are run ``--small`` and
``--large`` times in two processes under callgrind, and the difference of the
two totals divided by the difference of the counts is the cost of one read
(start-up and warm-up cancel out; hash randomization is off, so that two
runs lay their dicts out alike; address-space randomization off, and the
server's wall-time turn budgets off, see ``_without_aslr`` and
``_no_turn_budgets``).  Instructions are not time: cache and branch
misses are not counted (``--cache-sim`` in callgrind shows them), so a figure
here backs a timing, it does not replace one (bench/before_after.py).
``--cache-sim "--D1=... --LL=..."`` counts them too (Ir, D1 and LL misses a read:
give the caches, a VM's reported L3 can be far larger than a real one), and
``--window-prefill 1000000`` gives msgid16_one_key's window a million ids first
(bench/fast_ingest.py's msgid run at its end), e.g.
``--shapes msgid16_one_key --window-prefill 1000000 --cache-sim "--D1=49152,12,64 --LL=33554432,16,64"``
(bench/RESULTS-fast-ingest.md, msgid15).

Shapes: ``TWRITE k t v`` (one read per command), 16 ``TWRITE`` on one key and on
16 keys in one read (``redis-benchmark -P 16``), ``XADD k * f v`` alone and 16
in a read, and the consumer-group loop (``TREAD k - 10 GROUP g RETRY ...`` then
``TACK`` of the ten offsets, per iteration; the client's parsing of the reply,
the same in both builds, is counted too), and its Redis Streams form
(``XREADGROUP GROUP g c COUNT 10 STREAMS k >`` then ``XACK`` of the ten ids);
16 ``TWRITE k t v MSGID id`` on one key in one read (every id new: MSGID's
cost against ``twrite16_one_key``; the stream's window set to a day first, so
that no id ages out during a count, whatever its wall time), 16 messages of one fast batch in one
read (``BATCH k b seq t v FAST 64 ok``), and 16 one-entry reads ``TREAD k o 1``
in one read (offsets 61 apart in a key of 2,000 entries); ``xgroup_loop_pairs``:
the X* loop on bench/xstreams.py's entries (``seq n payload <100 bytes>``: two
field-value pairs, kept packed).
The group loops' entries are written first, as many in both runs (enough for
the larger), so that their figure is the loop's alone (before 2026-11-27 it
also counted the writing of the iteration's ten entries: 16 per read, with
``TWRITE``/``XADD``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections import deque
from pathlib import Path

import callgrind

HERE = Path(__file__).resolve().parent
SHAPES = ("twrite", "twrite16_one_key", "twrite16_keys", "xadd", "xadd16", "group_loop", "xgroup_loop",
          "msgid16_one_key", "fast16_one_key", "tread16", "xgroup_loop_pairs", "group_wake")
# Shapes whose reads differ (new ids, batch-seqs): the same number of reads is built
# in every run, so that building them cancels out of the difference of two runs.
BUILT_READS = 2600
# --window-prefill, handed to the counted processes in the environment
WINDOW_PREFILL = int(os.environ.get("TSTREAM_BENCH_WINDOW_PREFILL") or 0)
MSGID_WINDOW_MS = 86_400_000  # msgid16_one_key's duplicate window: a day, longer than any count


def workload(shape: str, count: int, fill: int = 0) -> None:  # noqa: C901 (one branch per kind of shape)
    """Run ``count`` reads of ``shape`` (after a warm-up), in this process; a
    group loop first writes the entries of ``max(count, fill)`` iterations."""
    sys.path.insert(0, str(HERE))
    import hotpath

    async def main() -> None:  # noqa: C901
        bench = hotpath.Bench()
        _no_turn_budgets()
        out: list[bytes] = []
        bench.transport.write = lambda data: out.append(bytes(data))  # type: ignore[method-assign]
        feed, turn_end, request = bench.feed, bench.turn_end, hotpath.request
        if shape == "group_wake":
            step = _group_wake_step(bench, hotpath)
        elif shape in ("group_loop", "xgroup_loop", "xgroup_loop_pairs"):
            import hiredis
            if shape == "group_loop":  # TREAD GROUP 10, then TACK of the ten offsets
                feed(request(b"TREAD", b"g:k", b"-", b"0", b"GROUP", b"g"))
                write = request(b"TWRITE", b"g:k", b"tag", b"x" * 100) * 16
                read = request(b"TREAD", b"g:k", b"-", b"10", b"GROUP", b"g", b"RETRY", b"30000", b"600000",
                               b"BLOCK", b"1000")

                def ack_of(reply) -> bytes:
                    return request(b"TACK", b"g:k", b"g", *(b"%d" % entry[0] for entry in reply))
            else:  # XREADGROUP COUNT 10, then XACK of the ten ids
                write = request(b"XADD", b"g:k", b"*", b"field", b"x" * 100) * 16
                if shape == "xgroup_loop_pairs":  # bench/xstreams.py's entries: two field-value pairs
                    write = request(b"XADD", b"g:k", b"*", b"seq", b"12345", b"payload", b"x" * 100) * 16
                read = request(b"XREADGROUP", b"GROUP", b"g", b"c1", b"COUNT", b"10", b"STREAMS", b"g:k", b">")

                def ack_of(reply) -> bytes:
                    return request(b"XACK", b"g:k", b"g", *(entry[0] for entry in reply[0][1]))
            for _ in range(0, (max(count, fill) + 300) * 10, 16):
                feed(write)
                turn_end()
            if shape != "group_loop":
                feed(request(b"XGROUP", b"CREATE", b"g:k", b"g", b"0"))
                turn_end()
            out.clear()
            reader = hiredis.Reader()

            def step() -> None:
                feed(read)
                turn_end()
                reader.feed(b"".join(out))
                out.clear()
                feed(ack_of(reader.gets()))
                turn_end()
                out.clear()
        elif shape in ("msgid16_one_key", "fast16_one_key"):
            reads = iter(_varied_reads(shape, count, feed, request))
            if shape == "msgid16_one_key" and WINDOW_PREFILL:
                _prefill_window(bench, feed, request, WINDOW_PREFILL)
                # (the reads built again, after the prefill: as a socket's bytes, just
                # written; those built before it had left the simulated caches, and
                # their first parse missed them, ~14 LL misses a read in both builds)
                reads = iter(_varied_reads(shape, count, feed, request))
            def step() -> None:
                feed(next(reads))
                turn_end()
                out.clear()
        else:
            if shape == "tread16":  # the key read: 2,000 entries of 99 bytes
                for _ in range(125):
                    feed(request(b"TWRITE", b"hp:r", b"tag", b"x" * 99) * 16)
                    turn_end()
                out.clear()
            data = {
                "twrite": request(b"TWRITE", b"hp:w", b"tag", b"value"),
                "twrite16_one_key": request(b"TWRITE", b"hp:one", b"tag", b"value") * 16,
                "twrite16_keys": b"".join(request(b"TWRITE", b"hp:k%d" % k, b"tag", b"value") for k in range(16)),
                "xadd": request(b"XADD", b"hp:x", b"*", b"field", b"value"),
                "xadd16": request(b"XADD", b"hp:x16", b"*", b"field", b"value") * 16,
                "tread16": b"".join(request(b"TREAD", b"hp:r", b"%d" % (1000 + o * 61), b"1") for o in range(16)),
            }[shape]

            def step() -> None:
                feed(data)
                turn_end()
                out.clear()
        for _ in range(300):
            step()
        for _ in range(count):
            step()

    asyncio.run(main())


def _group_wake_step(bench, hotpath):
    """bench/groups.py's loop as the server sees it, on fake transports: four
    consumer connections blocked in ``TREAD k - 10 GROUP g RETRY 30000 600000
    BLOCK 1000`` (first come first served), and per step three producer
    connections' unpipelined ``TWRITE k tag <100 bytes>`` read in one loop turn
    (three sockets ready at once), whose end wakes the head consumer with the
    three entries; then the consumer woken one step before sends ``TACK`` of
    its three offsets (a turn of its own) and blocks again (another turn: its
    read finds nothing, it waits at the back of the queue).  The consumers
    overlap as in the loop, so the group always has a batch pending.  A step is
    three messages: the loop's average batch (bench/RESULTS-groups.md: ~3).
    The event loop's own work (epoll, the socket reads) is not counted: only
    what the server's Python does per turn."""
    import hiredis

    request = hotpath.request
    server, connection_module = bench.server, sys.modules[type(bench.client).__module__]
    turn_end = bench.turn_end

    def connect():
        client = connection_module.ClientConnection(server)
        transport = hotpath.CountingTransport()
        written: list[bytes] = []
        transport.write = written.append  # type: ignore[method-assign]
        client.connection_made(transport)
        return client.data_received, written

    producers = [connect() for _ in range(3)]
    consumers = [connect() for _ in range(4)]
    bench.feed(request(b"TREAD", b"w:k", b"-", b"0", b"GROUP", b"g"))
    turn_end()
    write = request(b"TWRITE", b"w:k", b"tag", b"x" * 100)
    read = request(b"TREAD", b"w:k", b"-", b"10", b"GROUP", b"g", b"RETRY", b"30000", b"600000", b"BLOCK", b"1000")
    for feed, _ in consumers:
        feed(read)
        turn_end()
    reader = hiredis.Reader()
    queue = deque(consumers)
    woken: list = []  # the consumer woken by the step before, and its TACK

    def step() -> None:
        for feed, written in producers:
            feed(write)
            written.clear()
        turn_end()  # wakes the head consumer
        consumer = queue.popleft()
        reader.feed(b"".join(consumer[1]))
        consumer[1].clear()
        ack = request(b"TACK", b"w:k", b"g", *(b"%d" % entry[0] for entry in reader.gets()))
        if woken:
            (feed, written), previous_ack = woken.pop()
            feed(previous_ack)
            turn_end()
            written.clear()
            feed(read)
            turn_end()  # the read finds nothing: blocks again, at the back
            if written:
                raise SystemExit(f"the consumer's read did not block: {written!r}")
            queue.append((feed, written))
        woken.append((consumer, ack))

    return step


def _no_turn_budgets() -> None:
    """Turn off the server's wall-time budgets (a connection's 1 ms per turn, the
    turn's 1 ms in all; server/connection.py, server/turns.py) in this process.
    Under callgrind a read of 16 commands takes milliseconds of wall time, so the
    budgets cut the read's run short and defer the rest to the next turn, more or
    less often as the machine is more or less loaded: the figure moved with the
    load (twrite16_one_key by ~2,500 a read, msgid16_one_key by ~1,300, in
    opposite directions).  Without them every run does the same work.
    Likewise the fast-ingest flow control's turn marks (engine/ingest.py
    ``TURN_HIGH_NS``, ``TURN_LOW_NS``): it halves or raises a batch's ack
    interval from the loop turns' CPU time, which under callgrind is near the
    marks and moves with the load, and so did fast16_one_key's figure (by up to
    ~10,000 a read: more or fewer flow acks); with the marks out of reach every
    run's ack interval grows to the flow (64), as on a quiet machine."""
    for name, module in list(sys.modules.items()):
        if name.endswith(("server.connection", "server.turns")):
            for budget in ("TURN_BUDGET_NS", "TURN_TOTAL_NS"):
                if hasattr(module, budget):
                    setattr(module, budget, 1 << 62)
        if name.endswith("engine.ingest"):
            for mark in ("TURN_HIGH_NS", "TURN_LOW_NS"):
                if hasattr(module, mark):
                    setattr(module, mark, 1 << 62)


def _varied_reads(shape: str, count: int, feed, request) -> list[bytes]:
    """BUILT_READS reads of a shape whose reads differ (whatever ``count``)."""
    if count + 300 > BUILT_READS:
        raise SystemExit(f"at most {BUILT_READS - 300} reads of {shape}")
    if shape == "msgid16_one_key":  # 16 TWRITE k t v MSGID id, every id new
        # A window of a day: no id ages out within any count.  With the default
        # (120 s) the expiry started inside the count whenever callgrind's run
        # lasted over 120 s, so the figure moved with the machine's load (by
        # ~6,000 a read): now every run enters the same ids into the same table.
        feed(request(b"TCONFIG", b"hp:m", b"SET", b"duplicate_window_ms", b"%d" % MSGID_WINDOW_MS))
        return [b"".join(request(b"TWRITE", b"hp:m", b"tag", b"value", b"MSGID", b"id-%d" % i)
                         for i in range(r * 16, r * 16 + 16)) for r in range(BUILT_READS)]
    # 16 messages of one fast batch (flow 64, gap ok), consecutive batch-seqs
    feed(request(b"TCONFIG", b"hp:f", b"SET", b"allow_batched", b"yes"))
    return [b"".join(request(b"BATCH", b"hp:f", b"b", b"%d" % i, b"tag", b"value", b"FAST", b"64", b"ok")
                     for i in range(r * 16 + 1, r * 16 + 17)) for r in range(BUILT_READS)]


def _prefill_window(bench, feed, request, ids: int) -> None:
    """Enter ``ids`` message ids into msgid16_one_key's window before the warm-up
    (``--window-prefill``): the table then has the size it has at the end of
    bench/fast_ingest.py's msgid run (a million ids), and its probes miss the
    caches as there.  Through the window's ``add`` (the C ``Window`` or
    ``PyWindow``): a million TWRITEs under callgrind would take many minutes.
    In records of 128 ids: with 64 (~15,600 records) the record ring's doubling
    at 16,384 fell between the two counts' ends, and its copy (~14 LL misses a
    read) counted as the reads'; with 128 it falls in the warm-up of both."""
    import time
    feed(request(b"TWRITE", b"hp:m", b"tag", b"value", b"MSGID", b"prefill-first"))
    bench.turn_end()
    window = bench.server.streams.get(b"hp:m")._ingest.window
    now = time.time_ns()
    for start in range(0, ids, 128):
        window.add([b"pre-%d" % i for i in range(start, min(ids, start + 128))], 1_000_000_000 + start, now)


def cache_counts(python: str, shape: str, count: int, fill: int, caches: list[str]) -> dict[str, int]:
    """Callgrind's totals with its cache simulation (``--cache-sim=yes`` and the
    given ``--D1=``/``--LL=`` options): Ir, and the D1 and LL misses (data reads
    and writes; LL also the instruction fetches that missed it)."""
    argv = [python, str(Path(__file__).resolve()), "--run", shape, str(count), str(fill)]
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--cache-sim=yes",
                           *caches, *argv], capture_output=True, text=True, check=True, cwd="/",
                          env=dict(os.environ, PYTHONHASHSEED="0", TSTREAM_BENCH_WINDOW_PREFILL=str(WINDOW_PREFILL)))
    events = re.search(r"Events\s*:\s*(.*)", done.stderr)
    collected = re.search(r"Collected\s*:\s*(.*)", done.stderr)
    if events is None or collected is None:
        raise SystemExit(f"no callgrind totals for {shape}:\n{done.stderr[-2000:]}")
    got = dict(zip(events.group(1).split(), map(int, collected.group(1).split())))
    return {"Ir": got["Ir"], "D1": got["D1mr"] + got["D1mw"], "LL": got["DLmr"] + got["DLmw"] + got["ILmr"]}


def cache_per_read(python: str, shape: str, small: int, large: int, caches: list[str]) -> dict[str, float]:
    big = cache_counts(python, shape, large, large, caches)
    little = cache_counts(python, shape, small, large, caches)
    return {name: (big[name] - little[name]) / (large - small) for name in big}


def count_instructions(python: str, shape: str, count: int, fill: int) -> int:
    return callgrind.total([python, str(Path(__file__).resolve()), "--run", shape, str(count), str(fill)], shape)


def per_read(python: str, shape: str, small: int, large: int) -> float:
    return ((count_instructions(python, shape, large, large) - count_instructions(python, shape, small, large))
            / (large - small))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="python of another build's venv (compared shape by shape)")
    ap.add_argument("--this", default=sys.executable, help="python of the build measured (default: this one)")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--small", type=int, default=500)
    ap.add_argument("--large", type=int, default=2000)
    ap.add_argument("--out", default="-", help="markdown file to write ('-': print only)")
    ap.add_argument("--cache-sim", metavar="OPTIONS", nargs="?", const="",
                    help="count cache misses too (callgrind --cache-sim=yes, plus these space-separated "
                         "options, e.g. '--LL=33554432,16,64'): Ir, D1 and LL misses a read, for each build")
    ap.add_argument("--window-prefill", type=int, default=0, metavar="IDS",
                    help="msgid16_one_key: ids entered into the window before the warm-up (1000000: "
                         "bench/fast_ingest.py's msgid run at its end)")
    ap.add_argument("--run", nargs=3, metavar=("SHAPE", "COUNT", "FILL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    global WINDOW_PREFILL
    WINDOW_PREFILL = args.window_prefill or WINDOW_PREFILL
    if args.run:
        workload(args.run[0], int(args.run[1]), int(args.run[2]))
        return
    _without_aslr()
    builds = {"this": args.this} if not args.base else {"base": args.base, "this": args.this}
    shapes = [shape for shape in args.shapes.split(",")
              if not (shape in ("xadd", "xadd16") and args.base and not _has_xadd(args.base))]
    if args.cache_sim is not None:
        caches = args.cache_sim.split()
        print("| shape | build | Ir/read | D1 misses/read | LL misses/read |\n| --- | --- | ---: | ---: | ---: |")
        for shape in shapes:
            for name, python in builds.items():
                got = cache_per_read(python, shape, args.small, args.large, caches)
                print(f"| {shape} | {name} | {got['Ir']:,.0f} | {got['D1']:,.1f} | {got['LL']:,.1f} |", flush=True)
        return
    callgrind.compare(builds, shapes, lambda python, shape: per_read(python, shape, args.small, args.large),
                   "instructions/read", out=args.out)


def _without_aslr() -> None:
    """Run again under ``setarch -R`` (once; the counted processes inherit it):
    with the address space laid out at random, the dicts and sets keyed by
    object identity collide differently in each run, and a figure moved by
    ~1,000-2,500 instructions per read between two runs of the same build."""
    if os.environ.get("TSTREAM_BENCH_NO_ASLR") or not shutil.which("setarch"):
        return
    os.environ["TSTREAM_BENCH_NO_ASLR"] = "1"
    os.execvp("setarch", ["setarch", "-R", sys.executable, *sys.argv])


def _has_xadd(python: str) -> bool:
    """Whether the build at ``python`` knows XADD (builds before the X* commands do not)."""
    probe = ("import importlib\n"
             "for p in ('tstream.commands.xstreams', 'commands.xstreams'):\n"
             "    try:\n        importlib.import_module(p); print('yes'); break\n"
             "    except ImportError:\n        pass\n")
    env = dict(os.environ)
    return "yes" in subprocess.run([python, "-c", probe], capture_output=True, text=True, env=env, cwd="/").stdout


if __name__ == "__main__":
    main()
