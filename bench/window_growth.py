#!/usr/bin/env python3
"""How long a growing MSGID window holds the loop: the worst call while the window
grows from empty, in process and in the server.

    .venv/bin/python bench/window_growth.py                      # in process, this build
    .venv/bin/python bench/window_growth.py --server             # through a server, this build
    .venv/bin/python bench/window_growth.py --compare BASE/.venv/bin/python .venv/bin/python [--server | --faults]

In process: engine/_window.c's ``Window`` claims ``--ids`` new ids (``id-N``) from
empty, ``--run`` (64) a call, as a pipelined MSGID writer's runs are claimed; each
run's ids are made before the timing starts.  Printed: the thread's CPU time per id
over all the claims, the worst claim's wall time, and every claim that took over
``--over-ms``, with the window's size then (the table grows past 0.7 full of 2^k
slots: 45,875, 91,750, ..., 734,004, 1,468,006 ids).

``--server``: a tstream server (``--appendonly yes --appendfsync no``, as
bench/fast_ingest.py's MSGID slices) gets ``TWRITE key tag entry MSGID id`` (100-byte
entries, unique ids) in pipelined windows of ``--run``, one window in flight; every
window's round trip over ``--over-ms`` is listed with the ids stored before it.  A
round trip is the loop's hold plus the client's own time, so the server's other
stalls (node seals, the AOF's writes) show as well: read the rows at the growth
points.

``--faults``: the page faults a server takes for ``--ids`` pipelined ``TWRITE key
tag entry`` and, in a second server, as many ``TWRITE key tag entry MSGID id``: what
the window's growing memory adds (its blocks of ids, its tables).  Two counts: the
faults taken as traps (``perf stat -e page-faults``: what each first write to a
fresh page costs, ~1-2 us in this VM), and the pages made (``minflt`` of
/proc/PID/stat, which also counts pages made ahead with MADV_POPULATE_WRITE,
without a trap each).

``--compare PY...``: the same run in each interpreter (each imports its own build's
tree and, with ``--server``, starts its own ``tstream-server``), alternated, the
order reversed every round, each a fresh process; every run is listed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time


def in_process(ids: int, run: int, over_ms: float) -> dict:
    from tstream.engine import _window

    window = _window.Window()
    runs = [tuple(b"id-%d" % (start + i) for i in range(run)) for start in range(1, ids + 1, run)]
    slow = []
    worst = 0
    cpu = 0
    offset = 1
    for ids_run in runs:
        started_cpu = time.thread_time_ns()
        started = time.perf_counter_ns()
        if not window.claim(ids_run, offset, 0, 1 << 60):
            raise AssertionError("a new id was refused")
        wall = time.perf_counter_ns() - started
        cpu += time.thread_time_ns() - started_cpu
        worst = max(worst, wall)
        if wall > over_ms * 1e6:
            slow.append([offset - 1, round(wall / 1e6, 2)])
        offset += len(ids_run)
    return {"ns_per_id": cpu / (offset - 1), "worst_ms": worst / 1e6, "slow": slow}


def _command(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


def through_server(ids: int, run: int, over_ms: float) -> dict:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import servers

    entry = b"x" * 100
    slow = []
    worst = 0
    with servers(("tstream", ["--appendonly", "yes", "--appendfsync", "no",
                              "--auto-aof-rewrite-percentage", "0"])) as (ts,):
        sock = socket.create_connection(("127.0.0.1", ts.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        replies = sock.makefile("rb")
        started_all = time.perf_counter()
        for start in range(1, ids + 1, run):
            count = min(run, ids + 1 - start)
            window = b"".join(_command(b"TWRITE", b"growth", b"t", entry, b"MSGID", b"id-%d" % (start + i))
                              for i in range(count))
            started = time.perf_counter_ns()
            sock.sendall(window)
            for _ in range(count):
                reply = replies.readline()
                if not reply.startswith(b":"):
                    raise AssertionError(f"unexpected reply {reply!r}")
            wall = time.perf_counter_ns() - started
            worst = max(worst, wall)
            if wall > over_ms * 1e6:
                slow.append([start - 1, round(wall / 1e6, 2)])
        seconds = time.perf_counter() - started_all
        sock.close()
    return {"msgs_per_s": ids / seconds, "worst_ms": worst / 1e6, "slow": slow}


def _minor_faults(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[7])  # (minflt: field 10)


def faults(ids: int, run: int) -> dict:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import servers

    entry = b"x" * 100
    counts, traps = {}, {}
    for kind in ("twrite", "msgid"):
        with servers(("tstream", ["--appendonly", "yes", "--appendfsync", "no",
                                  "--auto-aof-rewrite-percentage", "0"])) as (ts,):
            sock = socket.create_connection(("127.0.0.1", ts.port))
            replies = sock.makefile("rb")
            before = _minor_faults(ts.pid)
            perf = subprocess.Popen(["perf", "stat", "-x", ",", "-e", "page-faults", "-p", str(ts.pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)  # (perf attached)
            for start in range(1, ids + 1, run):
                count = min(run, ids + 1 - start)
                tail = (lambda i: (b"MSGID", b"id-%d" % i)) if kind == "msgid" else (lambda i: ())
                sock.sendall(b"".join(_command(b"TWRITE", b"faults", b"t", entry, *tail(start + i))
                                      for i in range(count)))
                for _ in range(count):
                    replies.readline()
            counts[kind] = _minor_faults(ts.pid) - before
            perf.send_signal(signal.SIGINT)
            report = perf.communicate()[1]
            traps[kind] = int(report.strip().splitlines()[-1].split(",")[0])
            sock.close()
    return {"twrite_faults": counts["twrite"], "msgid_faults": counts["msgid"],
            "twrite_traps": traps["twrite"], "msgid_traps": traps["msgid"], "worst_ms": 0.0, "slow": []}


def one(args) -> dict:
    if args.faults:
        return faults(args.ids, args.run)
    if args.server:
        return through_server(args.ids, args.run, args.over_ms)
    return in_process(args.ids, args.run, args.over_ms)


def show(figures: dict, label: str = "") -> None:
    if "msgid_faults" in figures:
        print(f"{label}page faults as traps: TWRITE {figures['twrite_traps']:,}, TWRITE MSGID "
              f"{figures['msgid_traps']:,} ({figures['msgid_traps'] / max(1, figures['twrite_traps']):.2f}x); "
              f"pages made (minflt): {figures['twrite_faults']:,}, {figures['msgid_faults']:,}", flush=True)
        return
    rate = (f"{figures['ns_per_id']:.1f} ns/id (thread CPU)" if "ns_per_id" in figures
            else f"{figures['msgs_per_s']:,.0f} msg/s")
    print(f"{label}{rate}, worst {figures['worst_ms']:.2f} ms; over the limit (ids before, ms): "
          + (", ".join(f"{at:,}: {ms}" for at, ms in figures["slow"]) or "none"), flush=True)


def compare(pythons: list[str], rounds: int, extra: list[str]) -> None:
    script = os.path.abspath(__file__)
    pythons = [os.path.abspath(python) for python in pythons]
    results: dict[str, list[dict]] = {python: [] for python in pythons}
    for r in range(rounds):
        for python in (pythons if r % 2 == 0 else list(reversed(pythons))):
            load = os.getloadavg()[0]
            # (cwd: the script's folder, so that each interpreter imports its own build's tree)
            output = subprocess.run([python, script, "--json", *extra], capture_output=True, text=True,
                                    check=True, cwd=os.path.dirname(script)).stdout
            figures = json.loads(output.strip().splitlines()[-1])
            results[python].append(figures)
            show(figures, f"round {r + 1} {python} (load {load:.2f}): ")
    print()
    for python in pythons:
        if "msgid_faults" in results[python][0]:
            print(f"{python}: page faults as traps, medians: TWRITE "
                  f"{statistics.median(f['twrite_traps'] for f in results[python]):,.0f}, MSGID "
                  f"{statistics.median(f['msgid_traps'] for f in results[python]):,.0f}; pages made (minflt): "
                  f"{statistics.median(f['twrite_faults'] for f in results[python]):,.0f}, "
                  f"{statistics.median(f['msgid_faults'] for f in results[python]):,.0f}")
            continue
        worst = [f["worst_ms"] for f in results[python]]
        key = "ns_per_id" if "ns_per_id" in results[python][0] else "msgs_per_s"
        print(f"{python}: worst call median {statistics.median(worst):.2f} ms (runs {', '.join(f'{w:.2f}' for w in worst)}); "
              f"{key} median {statistics.median(f[key] for f in results[python]):,.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ids", type=int, default=1_600_000, help="ids claimed from empty (past 1,468,006: six growths)")
    parser.add_argument("--run", type=int, default=64, help="ids a call (a pipelined window)")
    parser.add_argument("--over-ms", type=float, default=1.0, help="list the calls that took longer")
    parser.add_argument("--server", action="store_true", help="through a tstream server (round trips)")
    parser.add_argument("--faults", action="store_true", help="page faults of a TWRITE and a MSGID server")
    parser.add_argument("--json", action="store_true", help="one JSON line (what --compare reads)")
    parser.add_argument("--compare", nargs="+", metavar="PYTHON", help="interpreters to alternate")
    parser.add_argument("--rounds", type=int, default=3, help="alternations (with --compare)")
    args = parser.parse_args()
    if args.compare:
        extra = ["--ids", str(args.ids), "--run", str(args.run), "--over-ms", str(args.over_ms)]
        compare(args.compare, args.rounds,
                extra + (["--server"] if args.server else []) + (["--faults"] if args.faults else []))
        return
    figures = one(args)
    if args.json:
        print(json.dumps(figures))
    else:
        show(figures)


if __name__ == "__main__":
    main()
