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


def build(keys: int, entries: int):
    from tstream.engine import Keyspace

    keyspace = Keyspace()
    for k in range(keys):
        keyspace.get_or_create(b"k%d" % k, 1000).append(b"t", b"v", 1_000 + k)
    if entries:  # one stream of 1000-entry nodes, as capture_stall.py's one key
        flat: list = []
        for i in range(1000):
            flat += [b"t%d" % (i % 100), b"x" * 16]
        big = keyspace.get_or_create(b"big", 1000)
        for j in range(entries // 1000):
            big.append_many(flat, 1_000_000 + j)
    return keyspace


def workload(mode: str, keys: int, entries: int = 0) -> None:
    import gc

    from tstream.persistence import snapshot

    gc.disable()  # as during a BGSAVE (server/snapshotjob.py)
    keyspace = build(keys, entries)
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
    elif not hasattr(snapshot, "write_chunks"):  # 3e833e9..79273a7: the writer checksums and writes pieces
        out: list = []
        fr = framer(out.append)
        capture = frame_all(snapshot, keyspace, fr)
        if mode == "all":
            snapshot.write_pieces(out, path)
    else:  # the Framer makes the whole file; the writer writes its chunks and hands their buffers back
        chunks: list = []

        def written(piece) -> None:  # ("all": a copy kept for write_chunks, counted as the writer's)
            if mode == "all":
                chunks.append(bytes(piece))
            fr.recycle(piece)

        fr = framer(written)
        capture = frame_all(snapshot, keyspace, fr)
        if mode == "all":
            snapshot.write_chunks(chunks, path)
    capture.release()


def frame_all(snapshot, keyspace, fr):
    capture = snapshot.IncrementalCapture(keyspace, fr.add)
    while not (fr.run(10**30) and capture.step(10**12)):
        pass
    fr.run(10**30)
    fr.finish()
    return capture


def count(mode: str, keys: int, entries: int, pythonpath: str | None) -> int:
    env = dict(os.environ, PYTHONHASHSEED="0")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                           os.path.abspath(__file__), "--run", mode, "--keys", str(keys),
                           "--entries", str(entries)],
                          capture_output=True, text=True, env=env)
    match = re.search(r"Collected : (\d+)", done.stderr)
    if not match:
        raise SystemExit(f"no callgrind total for {mode}:\n{done.stderr[-2000:]}")
    return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--entries", type=int, default=0,
                        help="one stream of this many entries instead of the keys (figures per node)")
    parser.add_argument("--base", default=None)
    parser.add_argument("--run", default=None)
    args = parser.parse_args()
    if args.run:
        workload(args.run, args.keys, args.entries)
        return
    builds = [("base", args.base)] if args.base else []
    builds.append(("this", None))
    if args.entries:
        args.keys, unit, per = 0, "node", args.entries // 1000
    else:
        unit, per = "key", args.keys
    print(f"| build | loop instructions / {unit} | writer thread instructions / {unit} |")
    print("| --- | ---: | ---: |")
    for name, pythonpath in builds:
        setup, loop, total = (count(mode, args.keys, args.entries, pythonpath) for mode in ("setup", "loop", "all"))
        print(f"| {name} | {(loop - setup) / per:,.0f} | {(total - loop) / per:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
