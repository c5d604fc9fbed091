#!/usr/bin/env python3
"""Summarize a turn probe (server/turns.py): where the loop's turns and an interactive
client's waits went.

    TSTREAM_TURN_PROBE=/tmp/probe.jsonl .venv/bin/python bench/fast_ingest.py --only ingest --pubs 16 --nice 10
    .venv/bin/python bench/turn_probe.py /tmp/probe.jsonl

Per turn (between two consecutive ends of turn, idle gaps over 0.5 s left out): the
server thread's CPU time and run-queue wait (runnable, not running: the machine's other
processes had the cores), the AOF commit (write + fsync), the reply writes, gc, the rest
(commands, parsing, the loop's I/O).  Per TREAD of the client named ``turn-probe``
(``.reader`` file written by bench/fast_ingest.py): its wait before the server executed
it, its hold until the end of the turn, the time after the release, the turns it crossed,
the server's run-queue wait during it, and the server thread's CPU time from the end of
the turn before it was sent to the end of the turn that released it (what it waits for
on an idle machine, where the server never waits for a core).

The split of each TREAD's wait (probes written since 2026-11-28): (a) the server thread's
CPU and (b) its run-queue wait from the last turn end before the TREAD was sent to its
execution, (c) the reader process's own run-queue wait from its send to its receive
(the reader reads its /proc/thread-self/schedstat around each TREAD).  And the count of
turns over 1, 2 and 4 ms of the server thread's CPU, per second of that CPU: a figure of
the server's own work that the machine's load moves far less than a percentile of wall
times (the probe's own file writes are left out of it).
"""
import bisect
import json
import statistics
import sys


def pct(xs: list, p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))] if xs else 0


def load(path: str) -> tuple[list, list, list]:
    turns, waits, reads = [], [], []
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            turns += d["turns"]
            waits += d["probe"]
    try:
        with open(path + ".reader") as f:
            for line in f:
                reads += json.loads(line)
    except FileNotFoundError:
        pass
    turns.sort(key=lambda t: t[3])
    waits.sort()
    return turns, waits, reads


def per_turn(turns: list) -> list[dict]:
    rows = []
    for a, b in zip(turns, turns[1:]):
        gap = b[3] - a[3]
        if gap > 500e6:
            continue
        sched, start, commit, end, held, conns, cmds, gc_ns, _, _, cpu, rq = b
        run = end - start
        rows.append({"gap": gap / 1e6, "cpu": (cpu - a[10]) / 1e6, "rqwait": (rq - a[11]) / 1e6,
                     "commit": commit / 1e6, "writes": (run - commit) / 1e6, "gc": gc_ns / 1e6,
                     "rest": (gap - gc_ns - run) / 1e6, "held": held, "conns": conns, "cmds": cmds})
    return rows


def per_read(turns: list, waits: list, reads: list) -> list[tuple]:
    ends = [t[3] for t in turns]
    executed = [w[0] for w in waits]
    out = []
    for read in reads:
        sent, received = read[0], read[1]
        i = bisect.bisect_left(executed, sent)
        if i >= len(executed) or executed[i] > received:
            continue
        ex, released = waits[i][:2]
        crossed = bisect.bisect_right(ends, released) - bisect.bisect_right(ends, sent)
        j0 = max(0, bisect.bisect_right(ends, sent) - 1)
        j1 = min(len(turns) - 1, bisect.bisect_left(ends, received))
        rq = (turns[j1][11] - turns[j0][11]) / 1e6
        k = min(len(turns) - 1, bisect.bisect_left(ends, released))  # the turn that released it
        cpu = (turns[k][10] - turns[j0][10]) / 1e6
        # The split of the wait (newer probes only): (a) the server thread's CPU and (b) its
        # run-queue wait from the last turn end before the TREAD was sent to its execution
        # (upper bounds: the turn it arrived in counts whole), (c) the reader's own
        # run-queue wait from its send to its receive.
        split = (None, None, None)
        if len(waits[i]) >= 4 and len(read) >= 3:
            j = max(0, bisect.bisect_right(ends, sent) - 1)
            split = ((waits[i][2] - turns[j][10]) / 1e6, (waits[i][3] - turns[j][11]) / 1e6, read[2] / 1e6)
        out.append(((received - sent) / 1e6, (ex - sent) / 1e6, (released - ex) / 1e6,
                    (received - released) / 1e6, crossed, rq, cpu, *split))
    return out


def main() -> None:
    turns, waits, reads = load(sys.argv[1])
    rows = per_turn(turns)
    print(f"turns: {len(rows)} (ms, except held/conns/cmds)")
    for k in ("gap", "cpu", "rqwait", "commit", "writes", "gc", "rest", "held", "conns", "cmds"):
        xs = [r[k] for r in rows]
        print(f"  {k:8} p50 {pct(xs, 50):8.3f}  p90 {pct(xs, 90):8.3f}  p99 {pct(xs, 99):8.3f}  "
              f"max {max(xs):9.3f}  mean {statistics.mean(xs):8.3f}")
    seconds = (turns[-1][3] - turns[0][3]) / 1e9 if len(turns) > 1 else 0
    busy = sum(r["cpu"] for r in rows) / 1e3
    for limit in (1, 2, 4):  # the server's own CPU per turn: what load moves least
        over = [r for r in rows if r["cpu"] > limit]
        print(f"  turns over {limit} ms of server CPU: {len(over)} of {len(rows)} "
              f"({len(over) / busy if busy else 0:.1f} per second of server CPU)")
    print(f"  ({seconds:.1f} s of probe, {busy:.2f} s of server loop CPU in the turns)")
    print("longest turns:")
    for r in sorted(rows, key=lambda r: -r["gap"])[:8]:
        print("  " + "  ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))
    out = per_read(turns, waits, reads)
    if not out:
        return
    slow = [o for o in out if o[0] > 5]
    print(f"TREADs matched: {len(out)} of {len(reads)}; over 5 ms: {len(slow)} ({100 * len(slow) / len(out):.1f}%)")
    names = ("total", "before executed", "held", "after release", "turn ends crossed", "server run-queue wait",
             "server CPU until reply", "(a) server CPU to exec", "(b) server rq to exec", "(c) reader rq wait")
    for idx, name in enumerate(names):
        xs, ys = [o[idx] for o in out if o[idx] is not None], [o[idx] for o in slow if o[idx] is not None]
        if not xs:
            continue
        print(f"  {name:22} all p50 {pct(xs, 50):7.2f} p99 {pct(xs, 99):7.2f} | over 5 ms: p50 {pct(ys, 50):7.2f} "
              f"max {max(ys) if ys else 0:7.2f}")


if __name__ == "__main__":
    main()
