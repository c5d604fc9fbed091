#!/usr/bin/env python3
"""Where does tstream spend its time under a redis-benchmark load? A py-spy sampling profile.

Starts a tstream-server, attaches ``py-spy record`` to it, runs redis-benchmark with the
given command, then prints the hottest functions (self and inclusive time) and lines.
Not part of run_all.sh: py-spy is not a project dependency (``pip install py-spy``).

    .venv/bin/python bench/profile_server.py [--pipeline 16] [--n 2000000]
        [--svg /tmp/flame.svg] [--] [command ...]      # default: TWRITE bench:key tag value

Caveat: without ``--native`` the time of C code (socket syscalls, hiredis, zstd, the
uvloop loop) is charged to the Python line that called it; uvloop's own loop shows as
``Runner.run``.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from common import REDIS_BENCHMARK, servers, sigterm_as_exit

FRAME = re.compile(r"(?P<func>.*) \((?P<file>.*?):(?P<line>\d+)\)$")


def short(frame: str, with_line: bool) -> str:
    m = FRAME.match(frame)
    if not m:
        return frame
    path = m["file"]
    for marker in ("/work/main/", "site-packages/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{m['func']} ({path}:{m['line']})" if with_line else f"{m['func']} ({path})"


def summarize(raw_path: str, top: int) -> None:
    self_f, incl_f, self_l = collections.Counter(), collections.Counter(), collections.Counter()
    total = 0
    with open(raw_path) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            if not stack:
                continue
            n = int(n)
            total += n
            frames = stack.split(";")
            funcs = [short(x, False) for x in frames]
            self_f[funcs[-1]] += n
            self_l[short(frames[-1], True)] += n
            for x in set(funcs):
                incl_f[x] += n
    if not total:
        print("no samples")
        return
    for title, counter in (("self time by function", self_f), ("inclusive time by function", incl_f),
                           ("self time by line", self_l)):
        print(f"--- {title} ({total} samples)")
        for k, v in counter.most_common(top):
            print(f"{100.0 * v / total:5.1f}%  {k}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    ap.add_argument("--svg", help="also write a flame graph here")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("command", nargs="*", default=["TWRITE", "bench:key", "tag", "value"])
    args = ap.parse_args()
    sigterm_as_exit()
    pyspy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(pyspy):
        print("py-spy not found: pip install py-spy", file=sys.stderr)
        return 2
    outs = []
    with servers(("tstream", [])) as (ts,), tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "profile.txt")
        fmts = [("raw", raw)] + ([("flamegraph", args.svg)] if args.svg else [])
        for fmt, path in fmts:
            argv = [pyspy, "record", "--pid", str(ts.pid), "--rate", str(args.rate), "--format", fmt,
                    "-o", path] + (["--native"] if args.native else ["--nonblocking"])
            outs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        try:
            time.sleep(1.5)  # let py-spy attach
            bench = [REDIS_BENCHMARK, "-h", "127.0.0.1", "-p", str(ts.port), "-c", str(args.clients),
                     "-n", str(args.n), "-P", str(args.pipeline), "-q", *args.command]
            res = subprocess.run(bench, capture_output=True, text=True, timeout=600)
            print(res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr)
        finally:
            for p in outs:
                p.send_signal(signal.SIGINT)
            for p in outs:
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
        if not os.path.exists(raw):
            print("py-spy wrote no profile:\n" + outs[0].stderr.read().decode(errors="replace"), file=sys.stderr)
            return 1
        summarize(raw, args.top)
        if args.svg:
            print(f"flame graph: {args.svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
