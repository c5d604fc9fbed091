#!/usr/bin/env python3
"""How long BGSAVE holds other clients up: the worst PING round trip during a BGSAVE.

Two shapes, each loaded into tstream and into redis-server (XADD, the same
entries), then BGSAVE while a probe client sends one PING every millisecond
and records each round trip, from the BGSAVE until the save has finished:

    one key    --entries entries (default 10,000,000: 10,000 macro nodes) in one stream
    many keys  --keys keys (default 1,000,000) of one entry each

tstream captures the keyspace a slice at a time on its event loop and writes it
from a worker thread; redis forks (the fork copies the page tables: its stall).
Prints the worst and p99 probe round trip during the save and while idle (the
same server after the save, as many probes as during it), per server and shape,
and the save's duration; and a bare uvloop PING server's (bench/ceiling_server.py)
over as many probes as tstream's save: on this shared VM a loop that does nothing
also waits a few ms now and then (a core busy elsewhere: bench/capture_trace.py
splits each long wait), the floor under the figures.

    .venv/bin/python bench/capture_stall.py [--entries 10000000] [--keys 1000000]
"""

from __future__ import annotations

import argparse
import time

from common import (
    Client,
    encode,
    in_probe_process,
    loadavg,
    machine_facts,
    percentile,
    save_result,
    script_command,
    servers,
)


def load_one_key(server, entries: int) -> None:
    client = server.client()
    batch = 1000
    if server.kind == "redis":
        one = b"".join(encode("XADD", "big", "*", "t%d" % (i % 100), "x" * 16) for i in range(batch))
        per_send = batch
    else:
        pairs = []
        for i in range(batch):
            pairs += ["t%d" % (i % 100), "x" * 16]
        one = encode("TWRITE", "big", "ENTRIES", *pairs)
        per_send = 1
    for _ in range(entries // batch):
        client.send(one)
        client.read_replies(per_send)
    client.close()


def load_many_keys(server, keys: int) -> None:
    client = server.client()
    chunk = 1000
    for start in range(0, keys, chunk):
        if server.kind == "redis":
            data = b"".join(encode("XADD", "k%d" % k, "*", "t", "v") for k in range(start, start + chunk))
        else:
            data = b"".join(encode("TWRITE", "k%d" % k, "t", "v") for k in range(start, start + chunk))
        client.send(data)
        client.read_replies(chunk)
    client.close()


def probe(port: int, stop, count: int, pipe, ready) -> None:
    client = Client(port)
    out: list[float] = []
    while not stop.is_set() and (not count or len(out) < 2 * count):
        started = time.perf_counter()  # (CLOCK_MONOTONIC: the same clock in every process)
        client.execute("PING")
        out.append(started)
        out.append((time.perf_counter() - started) * 1000)
        ready.set()
        time.sleep(0.001)
    client.close()
    pipe.send(out)


def probed(port: int, count: int = 0, during=None) -> list:
    """Probe round trips (ms): while ``during()`` runs, or ``count`` of them.  The
    probe is a process of its own: a thread of this one shared its GIL with the
    INFO polling, and read a reply late whenever the polling thread held the GIL
    while it waited for a core (100 ms under load: bench/capture_trace.py)."""
    pairs = in_probe_process(probe, port, count, during)
    since = probed.since if during is not None else pairs[0]  # type: ignore[attr-defined]
    # (rtt ms, when it was sent: ms from the BGSAVE, or from the first idle probe)
    return sorted((pairs[i + 1], (pairs[i] - since) * 1000) for i in range(0, len(pairs), 2) if pairs[i] >= since)


def figures(samples: list, seconds: float = 0.0) -> dict:
    """Max, p99, count; and the three longest waits with when each began (ms from
    the BGSAVE): at the start, in the middle, or at the end of the save."""
    rtts = [rtt for rtt, _ in samples]
    return {"max_ms": rtts[-1], "p99_ms": percentile(rtts, 99), "probes": len(rtts), "seconds": seconds,
            "worst": [[round(rtt, 2), round(at, 1)] for rtt, at in samples[:-4:-1]]}


def worst(result: dict) -> str:
    return ", ".join(f"{rtt:.2f} ms at t={at:.0f}" for rtt, at in result["worst"])


def measure(server) -> dict:
    """Probe round trips (ms) during a BGSAVE, then as many with the server idle
    (the machine's own worst wait over the same number of samples)."""
    control = server.client()
    marks = []

    def bgsave():
        marks.append(time.perf_counter())
        probed.since = marks[0]  # type: ignore[attr-defined]  (the probes from the BGSAVE on)
        control.execute("BGSAVE")
        while control.info("persistence").get("rdb_bgsave_in_progress") != "0":
            time.sleep(0.01)
        marks.append(time.perf_counter())

    results = {"bgsave": figures(probed(server.port, during=bgsave), marks[1] - marks[0])}
    time.sleep(1.0)
    results["idle"] = figures(probed(server.port, count=results["bgsave"]["probes"]))
    control.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    args = parser.parse_args()
    started = loadavg()
    table = []
    for shape, load, size in (("one key", load_one_key, args.entries), ("many keys", load_many_keys, args.keys)):
        for kind in ("tstream", "redis"):
            with servers((kind, [])) as (server,):
                load(server, size)
                result = measure(server)
                facts = machine_facts(server if kind == "tstream" else None, server if kind == "redis" else None)
                table.append((shape, size, kind, result))
                print(f"{shape:9s} {kind:7s} BGSAVE {result['bgsave']['seconds']:.2f} s: probe max "
                      f"{result['bgsave']['max_ms']:.2f} ms p99 {result['bgsave']['p99_ms']:.2f} ms "
                      f"(idle, {result['idle']['probes']} probes: max {result['idle']['max_ms']:.2f} ms "
                      f"p99 {result['idle']['p99_ms']:.2f} ms)", flush=True)
                print(f"{'':17s} longest during the save (t: ms from the BGSAVE, which lasted "
                      f"{result['bgsave']['seconds'] * 1000:.0f} ms): {worst(result['bgsave'])}", flush=True)
            if kind == "tstream":
                # the machine's own worst wait: a bare uvloop PING server, as many probes
                with servers(("ceiling", [])) as (bare,):
                    rtts = figures(probed(bare.port, count=result["bgsave"]["probes"]))
                bare_result = {"bgsave": {"seconds": 0.0, "max_ms": 0.0, "p99_ms": 0.0}, "idle": rtts}
                print(f"{shape:9s} bare uvloop server, {rtts['probes']} probes: max {rtts['max_ms']:.2f} ms "
                      f"p99 {rtts['p99_ms']:.2f} ms", flush=True)
        table.append((shape, size, "bare uvloop", bare_result))
    print(f"\nload average {started} -> {loadavg()}\n")
    print("idle: the same server after the save, as many probes as during it; bare uvloop: "
          "bench/ceiling_server.py, as many probes as tstream's save (no save: the machine's own worst wait)\n")
    print("| shape | size | server | BGSAVE s | probe max during BGSAVE (ms) | p99 (ms) | probes | idle max (ms) "
          "| idle p99 (ms) |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for shape, size, kind, r in table:
        save = ("-", "-", "-") if kind == "bare uvloop" else (
            f"{r['bgsave']['seconds']:.2f}", f"{r['bgsave']['max_ms']:.2f}", f"{r['bgsave']['p99_ms']:.2f}")
        print(f"| {shape} | {size:,} | {kind} | {' | '.join(save)} | {r['idle']['probes']:,} | "
              f"{r['idle']['max_ms']:.2f} | {r['idle']['p99_ms']:.2f} |")
    save_result("capture_stall", {"facts": facts, "command": script_command(),
                                  "runs": [list(row) for row in table]})


if __name__ == "__main__":
    main()
