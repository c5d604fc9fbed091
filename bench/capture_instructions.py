#!/usr/bin/env python3
"""Instructions per key of a BGSAVE of one-entry keys, split between the event
loop and the writer thread, counted by valgrind's callgrind (load does not move
them; see bench/instructions.py).

Three processes per build under callgrind, each building ``--keys`` one-entry
streams: ``setup`` stops there, ``loop`` also runs what the event loop does
(the capture, and with a ``Framer`` the framing), ``all`` also runs what the
writer thread does (framing in the old build, checksums and writes).  Loop
instructions are ``loop - setup``, the writer's ``all - loop``.

    .venv/bin/python bench/capture_instructions.py [--keys 20000] [--base /path/to/old/pythonpath]

``--base``: a directory holding an older tree as ``tstream`` (PYTHONPATH), to
compare with the one this script runs from.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile


def workload(mode: str, keys: int) -> None:
    import gc

    from tstream.engine import Keyspace
    from tstream.persistence import snapshot

    gc.disable()  # as during a BGSAVE (server/snapshotjob.py)
    keyspace = Keyspace()
    for k in range(keys):
        keyspace.get_or_create(b"k%d" % k, 1000).append(b"t", b"v", 1_000 + k)
    if mode == "setup":
        return
    path = os.path.join(tempfile.mkdtemp(), "dump.tsr")
    framer = getattr(snapshot, "Framer", None)
    if framer is None:  # the old build: the loop captures, the writer frames and writes
        taken: list = []
        capture = snapshot.IncrementalCapture(keyspace, taken.append)
        while not capture.step(10**12):
            pass
        if mode == "all":
            snapshot.write(taken, path)
    else:
        out: list = []
        fr = framer(out.append)
        capture = snapshot.IncrementalCapture(keyspace, fr.add)
        while not (fr.run(10**30) and capture.step(10**12)):
            pass
        fr.run(10**30)
        fr.finish()
        if mode == "all":
            snapshot.write_pieces(out, path)
    capture.release()


def count(mode: str, keys: int, pythonpath: str | None) -> int:
    env = dict(os.environ, PYTHONHASHSEED="0")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                           os.path.abspath(__file__), "--run", mode, "--keys", str(keys)],
                          capture_output=True, text=True, env=env)
    match = re.search(r"Collected : (\d+)", done.stderr)
    if not match:
        raise SystemExit(f"no callgrind total for {mode}:\n{done.stderr[-2000:]}")
    return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--base", default=None)
    parser.add_argument("--run", default=None)
    args = parser.parse_args()
    if args.run:
        workload(args.run, args.keys)
        return
    builds = [("base", args.base)] if args.base else []
    builds.append(("this", None))
    print("| build | loop instructions / key | writer thread instructions / key |")
    print("| --- | ---: | ---: |")
    for name, pythonpath in builds:
        setup, loop, total = (count(mode, args.keys, pythonpath) for mode in ("setup", "loop", "all"))
        print(f"| {name} | {(loop - setup) / args.keys:,.0f} | {(total - loop) / args.keys:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
