#!/usr/bin/env python3
"""What a transaction costs: MULTI + 10 TWRITE + EXEC against ten pipelined TWRITEs.

One client sends a batch, reads all its replies, and repeats (closed loop, one
connection, so the server's own cost dominates); per batch it measures the
wall time and the server process's CPU time (utime + stime from /proc).  Four
shapes per server, each run interleaved with the others, ``--rounds`` times:

    pipelined, 1 key     10 x TWRITE k t v                  (redis: XADD k * t v)
    MULTI/EXEC, 1 key    MULTI, 10 x TWRITE k t v, EXEC
    pipelined, 10 keys   TWRITE k0 t v ... TWRITE k9 t v
    MULTI/EXEC, 10 keys  MULTI, the same, EXEC

Target (issue #15): a MULTI/EXEC of 10 TWRITEs costs at most 1.5x ten pipelined
TWRITEs.  redis-server runs the same shapes with XADD, for reference.

    .venv/bin/python bench/multi.py [--rounds 5] [--batches 5000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import encode, loadavg, machine_facts, save_result, script_command, servers  # noqa: E402

SHAPES = ["pipelined, 1 key", "MULTI/EXEC, 1 key", "pipelined, 10 keys", "MULTI/EXEC, 10 keys"]


def batch(kind: str, shape: str) -> tuple[bytes, int]:
    keys = ["bench:k"] * 10 if "1 key" in shape else [f"bench:k{i}" for i in range(10)]
    if kind == "redis":
        writes = [encode("XADD", key, "*", "t", "v") for key in keys]
    else:
        writes = [encode("TWRITE", key, "t", "v") for key in keys]
    if shape.startswith("MULTI"):
        return encode("MULTI") + b"".join(writes) + encode("EXEC"), 12
    return b"".join(writes), 10


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(server, shape: str, batches: int) -> tuple[float, float]:
    """µs per batch: wall time, server CPU time."""
    client = server.client()
    payload, replies = batch(server.kind, shape)
    for _ in range(200):  # warm-up
        client.send(payload)
        client.read_replies(replies)
    client.execute("FLUSHALL")
    cpu0, wall0 = cpu_seconds(server.pid), time.perf_counter()
    for _ in range(batches):
        client.send(payload)
        client.read_replies(replies)
    wall, cpu = time.perf_counter() - wall0, cpu_seconds(server.pid) - cpu0
    client.close()
    return wall / batches * 1e6, cpu / batches * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=5000)
    args = parser.parse_args()
    started = loadavg()
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with servers(("tstream", []), ("redis", [])) as (tstream, redis):
        facts = machine_facts(tstream, redis)
        for _ in range(args.rounds):
            for shape in SHAPES:
                for server in (tstream, redis):
                    runs.setdefault((server.kind, shape), []).append(run(server, shape, args.batches))
    print(f"# MULTI/EXEC vs pipelined writes ({args.rounds} rounds x {args.batches} batches; "
          f"load {started} -> {loadavg()})\n")
    print("| server | shape | wall µs/batch (median) | server CPU µs/batch (median) | every run (wall/CPU) |")
    print("| --- | --- | ---: | ---: | --- |")
    medians = {}
    for (kind, shape), values in runs.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        medians[(kind, shape)] = (wall, cpu)
        every = ", ".join(f"{w:.0f}/{c:.0f}" for w, c in values)
        print(f"| {kind} | {shape} | {wall:.1f} | {cpu:.1f} | {every} |")
    print("\n| server | keys | MULTI/EXEC / pipelined, wall | same, server CPU | target |")
    print("| --- | --- | ---: | ---: | --- |")
    for kind in ("tstream", "redis"):
        for keys in ("1 key", "10 keys"):
            multi, plain = medians[(kind, f"MULTI/EXEC, {keys}")], medians[(kind, f"pipelined, {keys}")]
            target = "<= 1.5x" if kind == "tstream" else "(reference)"
            print(f"| {kind} | {keys} | {multi[0] / plain[0]:.2f}x | {multi[1] / plain[1]:.2f}x | {target} |")
    save_result("multi", {"facts": facts, "command": script_command(), "runs": {
        f"{kind}: {shape}": values for (kind, shape), values in runs.items()}})


if __name__ == "__main__":
    main()
