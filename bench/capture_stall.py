#!/usr/bin/env python3
"""How long BGSAVE holds other clients up: the worst PING round trip during a BGSAVE.

Two shapes, each loaded into tstream and into redis-server (XADD, the same
entries), then BGSAVE while a probe client sends one PING every millisecond
and records each round trip, from the BGSAVE until the save has finished:

    one key    --entries entries (default 10,000,000: 10,000 macro nodes) in one stream
    many keys  --keys keys (default 1,000,000) of one entry each

tstream captures the keyspace a slice at a time on its event loop and writes it
from a worker thread; redis forks (the fork copies the page tables: its stall).
Prints the worst and p99 probe round trip during the save and while idle, per
server and shape, and the save's duration.

    .venv/bin/python bench/capture_stall.py [--entries 10000000] [--keys 1000000]
"""

from __future__ import annotations

import argparse
import threading
import time

from common import Client, encode, loadavg, machine_facts, percentile, save_result, script_command, servers


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


def probe(port: int, stop: threading.Event, out: list) -> None:
    client = Client(port)
    while not stop.is_set():
        started = time.perf_counter()
        client.execute("PING")
        out.append((time.perf_counter() - started) * 1000)
        time.sleep(0.001)
    client.close()


def measure(server) -> dict:
    """Probe round trips (ms) while idle for 1 s, then during a BGSAVE."""
    results = {}
    control = server.client()
    for phase in ("idle", "bgsave"):
        stop, rtts = threading.Event(), []
        thread = threading.Thread(target=probe, args=(server.port, stop, rtts))
        thread.start()
        time.sleep(0.2)
        started = time.perf_counter()
        if phase == "idle":
            time.sleep(1.0)
        else:
            control.execute("BGSAVE")
            while control.info("persistence").get("rdb_bgsave_in_progress") != "0":
                time.sleep(0.01)
        elapsed = time.perf_counter() - started
        stop.set()
        thread.join()
        rtts.sort()
        results[phase] = {"max_ms": rtts[-1], "p99_ms": percentile(rtts, 99), "probes": len(rtts),
                          "seconds": elapsed}
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
                      f"(idle max {result['idle']['max_ms']:.2f} ms p99 {result['idle']['p99_ms']:.2f} ms)",
                      flush=True)
    print(f"\nload average {started} -> {loadavg()}\n")
    print("| shape | size | server | BGSAVE s | probe max during BGSAVE (ms) | p99 (ms) | idle max (ms) | idle p99 (ms) |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for shape, size, kind, r in table:
        print(f"| {shape} | {size:,} | {kind} | {r['bgsave']['seconds']:.2f} | {r['bgsave']['max_ms']:.2f} | "
              f"{r['bgsave']['p99_ms']:.2f} | {r['idle']['max_ms']:.2f} | {r['idle']['p99_ms']:.2f} |")
    save_result("capture_stall", {"facts": facts, "command": script_command(),
                                  "runs": [list(row) for row in table]})


if __name__ == "__main__":
    main()
