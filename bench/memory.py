#!/usr/bin/env python3
"""Memory per entry: 1M entries in one tstream stream vs one redis-server stream.

Entries have 8-byte tags (1000 distinct, ``tag00000``..``tag00999``, drawn at random) and
100-byte payloads. Three payload mixes, each on freshly started servers:

- ``mixed``: half repetitive English text with a counter in it, half ``os.urandom`` bytes;
- ``text``: all repetitive text (compression's best case);
- ``random``: all random bytes (compression's worst case).

tstream gets ``TWRITE key ENTRIES tag entry ...`` batches of 1000 pairs, redis-server the
same entries as 1000 pipelined ``XADD key * tag entry``. Reported per entry: tstream's own
estimate (TINFO ``bytes``), redis's ``MEMORY USAGE key SAMPLES 0``, and for both the growth
of the server process's RSS (/proc/<pid>/status VmRSS, before and after).

    .venv/bin/python bench/memory.py [--entries 1000000] [--variants mixed,text,random]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

from common import as_map, encode, machine_facts, save_result, script_command, servers, sigterm_as_exit

SENTENCE = b"The quick brown fox jumps over the lazy dog while the log keeps on growing. "
PAYLOAD = 100
TAG_COUNT = 1000
KEY = b"bench:mem"


def text_payload(i: int) -> bytes:
    return (b"entry %08d: " % i + SENTENCE * 2)[:PAYLOAD]


def make_batch(rng: random.Random, start: int, size: int, variant: str) -> list[bytes]:
    """A flat [tag, payload, tag, payload, ...] list of ``size`` entries."""
    pairs = []
    for i in range(start, start + size):
        tag = b"tag%05d" % rng.randrange(TAG_COUNT)
        if variant == "text" or (variant == "mixed" and rng.random() < 0.5):
            payload = text_payload(i)
        else:
            payload = os.urandom(PAYLOAD)
        pairs.append(tag)
        pairs.append(payload)
    return pairs


def run_variant(variant: str, entries: int, batch: int, node_entries: list[str]) -> dict:
    rng = random.Random(11)
    with servers(("tstream", node_entries), ("redis", [])) as (ts, rs):
        tc, rc = ts.client(), rs.client()
        redis_cfg = as_map(rc.execute("CONFIG", "GET", "stream-node-max-*"))
        time.sleep(0.2)
        rss0 = {"tstream": ts.rss_bytes(), "redis": rs.rss_bytes()}
        used0 = int(rc.info("memory")["used_memory"])
        spent = {"tstream": 0.0, "redis": 0.0, "client": 0.0}
        payload_bytes = 0
        written = 0
        while written < entries:
            size = min(batch, entries - written)
            t0 = time.perf_counter()
            pairs = make_batch(rng, written, size, variant)
            tcmd = encode(b"TWRITE", KEY, b"ENTRIES", *pairs)
            rcmd = b"".join(encode(b"XADD", KEY, b"*", pairs[j], pairs[j + 1]) for j in range(0, len(pairs), 2))
            t1 = time.perf_counter()
            tc.send(tcmd)
            first = tc.read_reply()
            t2 = time.perf_counter()
            rc.send(rcmd)
            rc.read_replies(size)
            t3 = time.perf_counter()
            if first != written + 1:
                raise RuntimeError(f"TWRITE replied offset {first}, expected {written + 1}")
            spent["client"] += t1 - t0
            spent["tstream"] += t2 - t1
            spent["redis"] += t3 - t2
            payload_bytes += sum(len(p) for p in pairs)
            written += size
        time.sleep(0.5)
        tinfo = as_map(tc.execute("TINFO", KEY))
        xlen = rc.execute("XLEN", KEY)
        if int(tinfo["length"]) != entries or xlen != entries:
            raise RuntimeError(f"lengths after the writes: tstream {tinfo['length']}, redis {xlen}")
        usage = rc.execute("MEMORY", "USAGE", KEY, "SAMPLES", "0")
        used1 = int(rc.info("memory")["used_memory"])
        rss1 = {"tstream": ts.rss_bytes(), "redis": rs.rss_bytes()}
        tc.close()
        rc.close()
    res = {
        "variant": variant,
        "entries": entries,
        "raw_bytes_per_entry": payload_bytes / entries,
        "tstream_tinfo_bytes": int(tinfo["bytes"]),
        "tstream_nodes": int(tinfo.get("nodes", 0) or 0),
        "redis_memory_usage": int(usage),
        "redis_used_memory_growth": used1 - used0,
        "rss_growth": {k: rss1[k] - rss0[k] for k in rss0},
        "rss_before": rss0,
        "rss_after": rss1,
        "write_seconds": {k: round(v, 2) for k, v in spent.items()},
        "redis_stream_config": {k: v.decode() if isinstance(v, bytes) else v for k, v in redis_cfg.items()},
    }
    per = lambda b: b / entries  # noqa: E731
    res["per_entry"] = {
        "tstream_tinfo": per(res["tstream_tinfo_bytes"]),
        "redis_memory_usage": per(res["redis_memory_usage"]),
        "tstream_rss": per(res["rss_growth"]["tstream"]),
        "redis_rss": per(res["rss_growth"]["redis"]),
        "redis_used_memory": per(res["redis_used_memory_growth"]),
    }
    res["ratio_estimate"] = res["per_entry"]["tstream_tinfo"] / res["per_entry"]["redis_memory_usage"]
    res["ratio_rss"] = res["per_entry"]["tstream_rss"] / res["per_entry"]["redis_rss"]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--variants", default="mixed,text,random")
    ap.add_argument("--node-entries", type=int, default=None, help="tstream --node-entries (default: its own)")
    args = ap.parse_args()
    sigterm_as_exit()
    extra = ["--node-entries", str(args.node_entries)] if args.node_entries else []

    with servers(("tstream", extra), ("redis", [])) as (ts, rs):
        facts = machine_facts(ts, rs)
        cmdlines = {"tstream": ts.command_line(), "redis": rs.command_line()}
    result = {"benchmark": "memory", "command": script_command(), "machine": facts, "servers": cmdlines,
              "batch": args.batch, "variants": []}
    for variant in args.variants.split(","):
        t0 = time.monotonic()
        res = run_variant(variant, args.entries, args.batch, extra)
        res["elapsed_s"] = round(time.monotonic() - t0, 1)
        result["variants"].append(res)
        p = res["per_entry"]
        print(f"{variant:6s}: tstream {p['tstream_tinfo']:7.1f} B/entry (TINFO) {p['tstream_rss']:7.1f} (RSS) | "
              f"redis {p['redis_memory_usage']:7.1f} B/entry (MEMORY USAGE) {p['redis_rss']:7.1f} (RSS) | "
              f"ratio {res['ratio_estimate']:.2f}x est, {res['ratio_rss']:.2f}x RSS | "
              f"load s: {res['write_seconds']} ({res['elapsed_s']} s)", flush=True)
    path = save_result("memory", result)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
