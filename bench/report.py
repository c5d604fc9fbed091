#!/usr/bin/env python3
"""Render results/*.json (written by the benchmark scripts) as RESULTS.md.

    .venv/bin/python bench/report.py [--out FILE] [--total-seconds N]

Reads and writes bench/runs/ (ignored by git), or $TSTREAM_BENCH_OUT: with
TSTREAM_BENCH_OUT=bench it renders the committed bench/results/ into bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from common import OUT_DIR, RESULTS_DIR


def load(name: str) -> dict | None:
    path = RESULTS_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def mib(b: float) -> str:
    return f"{b / 1024 / 1024:,.1f} MiB"


def machine_section(results: list[dict], total: str | None) -> list[str]:
    m = {}
    for r in reversed(results):  # the first benchmark's facts win (its date is the start)
        m.update(r.get("machine", {}))
    uv = m.get("tstream_multiplexing_api", "?")
    lines = [
        "# tstream benchmarks",
        "",
        f"- Date: {m.get('date', time.strftime('%Y-%m-%d %H:%M:%S %Z'))}",
        f"- Machine: {m.get('nproc', '?')} cores, {m.get('cpu', '?')}, Linux {m.get('kernel', '?')}",
        f"- Python: {m.get('python', '?')} (`{m.get('python_executable', '?')}`)",
        f"- Event loop: tstream INFO `multiplexing_api:{uv}` "
        f"({'uvloop' if uv == 'uvloop' else 'not uvloop'}); uvloop installed: {m.get('uvloop_installed', '?')}",
        f"- redis-server {m.get('redis_version', '?')} ({m.get('redis_multiplexing_api', '?')}), "
        f"persistence off (`--save \"\" --appendonly no`) on both servers "
        f"except in the persistence section",
        f"- tstream commit: {m.get('git_commit', '?')}{' (with uncommitted changes)' if m.get('git_dirty') else ''}",
    ]
    if total:
        lines.append(f"- Total run time of `bench/run_all.sh`: {total}")
    lines += [
        "",
        "Everything ran on one machine over loopback: the server under test, redis-server and the",
        "load generator share the cores, so figures are for comparison on this machine, not absolutes.",
        "Produced by `bench/run_all.sh`; raw figures in `bench/results/*.json`.",
        "",
    ]
    return lines


def load_line(r: dict) -> list[str]:
    m = r.get("machine", {})
    return [f"Load average (1/5/15 min) when this benchmark started: {m.get('loadavg_at_start', '?')}, "
            f"when it ended: {r.get('loadavg_at_end', '?')} (the benchmark itself raises it; anything "
            f"well above ~1-2 means other work shared the 2 cores).", ""]


def throughput_section(r: dict) -> list[str]:
    ceiling = all("ceiling" in c["median_rps"] for c in r["cases"])
    lines = [
        "## Write throughput: TWRITE vs XADD (redis-benchmark, 50 clients)",
        "",
        f"Median of {r['repeat']} runs per server, interleaved redis/tstream"
        + ("/ceiling" if ceiling else "") + "; the key is deleted before each run.",
        "",
        "| pipeline | requests/run | redis XADD req/s | tstream TWRITE req/s | ratio tstream/redis | target | met |"
        + (" ceiling req/s (ceiling/redis) |" if ceiling else ""),
        "| --- | ---: | ---: | ---: | ---: | ---: | :---: |" + (" ---: |" if ceiling else ""),
    ]
    for c in r["cases"]:
        med = c["median_rps"]
        lines.append(
            f"| {'none' if c['pipeline'] == 1 else '-P ' + str(c['pipeline'])} | {c['n']:,} "
            f"| {med['redis']:,.0f} | {med['tstream']:,.0f} | **{c['ratio']:.2f}x** "
            f"| >= {c['target_ratio']}x | {'yes' if c['meets_target'] else 'NO'} |"
            + (f" {med['ceiling']:,.0f} ({med['ceiling'] / med['redis']:.2f}x) |" if ceiling else ""))
    if ceiling:
        lines += ["", "*ceiling*: `bench/ceiling_server.py`, uvloop + hiredis appending each TWRITE's "
                  "entry to a Python list and replying its length, nothing else: what Python's event "
                  "loop and parser alone reach here, for context."]
    lines += [""] + load_line(r)
    lines += ["All runs (req/s, p50 latency as redis-benchmark reports it):", ""]
    lines += ["| pipeline | server | runs |", "| --- | --- | --- |"]
    names = ("redis", "tstream", "ceiling") if ceiling else ("redis", "tstream")
    for c in r["cases"]:
        for name in names:
            runs = ", ".join(f"{x['rps']:,.0f} (p50 {x['p50_ms']:.2f} ms)" for x in c["runs"][name])
            lines.append(f"| {c['pipeline']} | {name} | {runs} |")
    lines += ["", "Commands:", "", "```", r["command"]]
    for c in r["cases"]:
        lines += [c["commands"][name] for name in names]
    lines += [r["servers"][name] for name in ("tstream", "redis", "ceiling") if name in r["servers"]]
    lines += ["```", ""]
    return lines


def memory_section(r: dict) -> list[str]:
    v0 = r["variants"][0]
    cfg = v0.get("redis_stream_config", {})
    lines = [
        f"## Memory per entry ({v0['entries']:,} entries, 8-byte tags x 1000 distinct, 100-byte payloads)",
        "",
        "Bytes per entry. *Estimate*: tstream's TINFO `bytes`, redis's `MEMORY USAGE key SAMPLES 0`. "
        "*RSS*: growth of the server process's VmRSS over the load. Target: tstream at most redis's "
        "bytes/entry; clearly less where the payloads compress.",
        "",
        "| payloads | raw tag+payload | tstream estimate | redis estimate | ratio (estimate) | tstream RSS | redis RSS | ratio (RSS) | target | met |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    names = {"mixed": "half text, half random", "text": "all repetitive text", "random": "all random"}
    for v in r["variants"]:
        p = v["per_entry"]
        target = "< 1.0x, clearly" if v["variant"] == "text" else "<= 1.0x"
        met = v["ratio_estimate"] <= 1.0 and v["ratio_rss"] <= 1.0
        if v["variant"] == "text":
            met = met and v["ratio_estimate"] < 0.75
        lines.append(
            f"| {names.get(v['variant'], v['variant'])} | {v['raw_bytes_per_entry']:.0f} "
            f"| {p['tstream_tinfo']:.1f} | {p['redis_memory_usage']:.1f} | **{v['ratio_estimate']:.2f}x** "
            f"| {p['tstream_rss']:.1f} | {p['redis_rss']:.1f} | **{v['ratio_rss']:.2f}x** | {target} "
            f"| {'yes' if met else 'NO'} |")
    lines += [""] + load_line(r)
    lines += [f"Load time (s) of the {v0['entries']:,} entries, per server (client-side encoding time excluded), "
              "and other figures:", "",
              "| payloads | tstream load s | redis load s | tstream nodes | redis used_memory growth/entry |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for v in r["variants"]:
        lines.append(f"| {v['variant']} | {v['write_seconds']['tstream']} | {v['write_seconds']['redis']} "
                     f"| {v['tstream_nodes']:,} | {v['per_entry']['redis_used_memory']:.1f} |")
    lines += ["", f"redis stream node limits: {', '.join(f'{k} {v}' for k, v in sorted(cfg.items()))}; "
              f"tstream batches: TWRITE ENTRIES of {r['batch']} pairs; redis: {r['batch']} pipelined XADD.",
              "", "Commands:", "", "```", r["command"], r["servers"]["tstream"], r["servers"]["redis"],
              "```", ""]
    return lines


def seek_section(r: dict) -> list[str]:
    ld, lat, ratio = r["load"], r["latency"], r["ratio"]
    lines = [
        f"## Seek latency: TREAD key offset {r['count']} on a {ld['entries']:,}-entry log",
        "",
        f"Load: {ld['entries']:,} entries (8-byte tags, 16-byte payloads) in TWRITE ENTRIES batches of "
        f"{ld['batch']} took **{ld['seconds']} s** ({ld['entries_per_s']:,.0f} entries/s)"
        f"{'; CUT SHORT of the ' + format(ld['requested_entries'], ',') + ' asked by the time limit' if ld['cut_short'] else ''}. "
        f"TINFO: {ld['nodes']:,} nodes, {mib(ld['tinfo_bytes'])} "
        f"({ld['tinfo_bytes'] / max(ld['entries'], 1):.1f} B/entry); RSS growth {mib(ld['rss_growth'])}.",
        "",
        f"One client, one request at a time, random and head requests alternating; "
        f"{lat['random']['n']:,} timed requests of each kind after a warm-up. Round trip in microseconds.",
        "",
        "| offsets | p50 µs | p90 µs | p99 µs | mean µs | max µs |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for k, label in (("random", "random over the whole log"), ("head", "head (newest 1000)"),
                     ("ping", "PING (round-trip floor)")):
        s = lat[k]
        lines.append(f"| {label} | {s['p50_us']:.1f} | {s['p90_us']:.1f} | {s['p99_us']:.1f} "
                     f"| {s['mean_us']:.1f} | {s['max_us']:.1f} |")
    lines.append(f"| **ratio random/head** | **{ratio['p50_us']:.2f}x** | **{ratio['p90_us']:.2f}x** "
                 f"| **{ratio['p99_us']:.2f}x** | | |")
    met = ratio["p50_us"] <= 1.25
    less = r.get("p50_minus_ping_us")
    if less:
        lines += ["", f"Server-side share (p50 less PING p50): random {less['random']:.1f} µs, "
                  f"head {less['head']:.1f} µs."]
    lines += [""] + load_line(r)
    lines += [f"Target: the same within noise (ratio ~1.0x; taken here as p50 ratio <= 1.25x): "
              f"{'met' if met else 'NOT met'}.", "", "Commands:", "", "```", r["command"],
              r["servers"]["tstream"], "```", ""]
    return lines


def _fmt_s(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def persistence_section(r: dict) -> list[str]:
    t = r.get("targets", {})
    lines = ["## Persistence: durable writes, snapshots, AOF restart (tstream vs redis-server)", ""]
    if r.get("quick"):
        lines += ["**Quick (smoke) run: sizes far below the issue's; not the real figures.**", ""]
    m = r.get("machine", {})
    lines += [f"Server directories in `{m.get('tmp_dir', '?')}` ({m.get('tmp_filesystem', '?')}), "
              "the same filesystem for both servers; each part's directories are deleted when it ends. "
              f"tstream code measured: `{m.get('tstream_source', '?')}` at commit "
              f"{m.get('tstream_source_commit', '?')}.", ""]
    earlier = r.get("earlier_parts") or {}
    if earlier:
        names = {"durable": "durable writes", "snapshot": "snapshots", "aof": "AOF restart"}
        fresh = [names[p] for p in names if r.get(p) and p not in earlier]
        lines += ["This run re-measured only " + ", ".join(f"*{n}*" for n in fresh) + "; the other parts' "
                  "figures are carried over from earlier runs: " + "; ".join(
                      f"*{names.get(p, p)}* from {e.get('date', '?')} (tstream commit "
                      f"{e.get('tstream_source_commit', '?')}, load average at its start/end "
                      f"{e.get('loadavg_at_start', '?')} / {e.get('loadavg_at_end', '?')}, `{e.get('command', '?')}`)"
                      for p, e in earlier.items()) + ".", ""]
    d = r.get("durable")
    if d:
        lines += [
            f"### Durable writes (redis-benchmark, {d['clients']} clients, no pipelining)",
            "",
            "tstream `TWRITE bench:key tag value` vs redis `XADD bench:key * tag value`, both with "
            "`--appendonly yes --save \"\"` and the fsync policy below (*AOF off*: `--appendonly no`, the "
            "baseline); "
            f"median of {d['repeat']} runs per server, interleaved redis/tstream, the key deleted before each run.",
            "",
            "| appendfsync | requests/run | redis XADD req/s | tstream TWRITE req/s | ratio tstream/redis | target | met |",
            "| --- | ---: | ---: | ---: | ---: | ---: | :---: |",
        ]
        for c in d["cases"]:
            target = f">= {c['target_ratio']}x" if c.get("target_ratio") else "(context)"
            met = ("yes" if c["meets_target"] else "NO") if "meets_target" in c else ""
            policy = "AOF off" if c["appendfsync"] == "off" else c["appendfsync"]
            lines.append(f"| {policy} | {c['n']:,} | {c['median_rps']['redis']:,.0f} "
                         f"| {c['median_rps']['tstream']:,.0f} | **{c['ratio']:.2f}x** | {target} | {met} |")
        lines += ["", "All runs (req/s, p50 / p99 latency as redis-benchmark reports it, AOF bytes per write):", "",
                  "| appendfsync | server | runs |", "| --- | --- | --- |"]
        for c in d["cases"]:
            for name in ("redis", "tstream"):
                runs = ", ".join(f"{x['rps']:,.0f} ({x['p50_ms']:.2f} / {x['p99_ms']:.2f} ms, "
                                 f"{x.get('aof_bytes_per_write', 0):.0f} B)" for x in c["runs"][name])
                lines.append(f"| {c['appendfsync']} | {name} | {runs} |")
        lines += [""]
    s = r.get("snapshot")
    if s:
        fb, sv, med, es = s["file_bytes"], s["save_seconds"], s["restart_median_seconds"], s["empty_start_seconds"]
        ld = s["load"]
        met = s["meets_target"]
        lines += [
            f"### Snapshots: SAVE, file size and load of {s['entries']:,} entries",
            "",
            f"One stream, 8-byte tags x 1000 distinct, 100-byte payloads (half English-like text with a counter, "
            f"half random bytes), the same entries in both: tstream got `TWRITE key ENTRIES` batches of "
            f"{s['batch']} pairs, redis the same entries as pipelined `XADD key * tag payload` "
            f"(both servers written at once: {ld['seconds']} s). *Restart*: from spawning the process until it "
            f"answers PING (redis answers `-LOADING` meanwhile) with the data loaded (the length is then checked); "
            f"median of {len(s['restarts']['tstream'])} restarts, the file in the page cache.",
            "",
            "| | redis | tstream | ratio tstream/redis | target | met |",
            "| --- | ---: | ---: | ---: | ---: | :---: |",
            f"| `SAVE` (command round trip, s) | {sv['redis']:.2f} | {sv['tstream']:.2f} "
            f"| {sv['tstream'] / sv['redis']:.2f}x | | |",
            f"| file (`dump.rdb` / `dump.tsr`) | {mib(fb['redis'])} | {mib(fb['tstream'])} "
            f"| **{s['file_ratio']:.2f}x** | <= {t.get('file_ratio', 1.0)}x | {'yes' if met['file'] else 'NO'} |",
            f"| file bytes per entry | {fb['redis'] / s['entries']:.1f} | {fb['tstream'] / s['entries']:.1f} | | | |",
            f"| restart to PING with data (s) | {med['redis']:.2f} | {med['tstream']:.2f} "
            f"| **{s['load_ratio']:.2f}x** | <= 1.0x (at least as fast) | {'yes' if met['load'] else 'NO'} |",
            f"| load time the server logged (s, median) "
            f"| {_fmt_s(median_of(s['restarts']['redis'], 'logged_load_seconds'))} "
            f"| {_fmt_s(median_of(s['restarts']['tstream'], 'logged_load_seconds'))} | | | |",
            f"| start of an empty server (s, median of 3) | {es['redis']:.2f} | {es['tstream']:.2f} | | | |",
            f"| RSS after the restart | {mib(s['restarts']['redis'][-1]['rss'])} "
            f"| {mib(s['restarts']['tstream'][-1]['rss'])} | | | |",
            "",
            "All restarts (s): " + "; ".join(
                f"{k} " + ", ".join(f"{x['seconds']:.2f}" for x in s["restarts"][k]) for k in ("redis", "tstream")),
            "",
            "`BGSAVE` while another client sends PING after PING (one in flight): round trips of the PINGs "
            "in flight while the save ran, and over the second before it (baseline). The issue requires that "
            f"no tstream client waits more than {t.get('bgsave_max_ping_ms', 100):.0f} ms.",
            "",
            "| server | BGSAVE s | BGSAVE reply ms | PINGs during | p50 ms | p99 ms | max ms | baseline p99 / max ms | met |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |",
        ]
        for k in ("redis", "tstream"):
            b = s["bgsave"][k]
            p, base = b["ping_during"], b["ping_baseline"]
            ok = ("yes" if met["bgsave_ping"] else "NO") if k == "tstream" else ""
            lines.append(f"| {k} | {b['seconds']:.2f} | {b['bgsave_reply_ms']:.1f} | {p.get('n', 0):,} "
                         f"| {p.get('p50_ms', 0):.2f} | {p.get('p99_ms', 0):.2f} | **{p.get('max_ms', 0):.2f}** "
                         f"| {base.get('p99_ms', 0):.2f} / {base.get('max_ms', 0):.2f} | {ok} |")
        lines += [""]
    a = r.get("aof")
    if a:
        lines += [
            "### Restart from a large append-only file",
            "",
            f"{a['entries']:,} entries (same payload mix as above) written to {a['keys']} keys as "
            f"`TWRITE key ENTRIES` batches of {a['batch']} entries, each followed by {a['singles']} single "
            f"`TWRITE key tag payload` ({a['commands']:,} commands), with `appendfsync no` and "
            "`auto-aof-rewrite-percentage 0`; redis-server got the same entries as single `XADD`s "
            "(`aof-use-rdb-preamble no`). Then SIGKILL and a restart, timed from spawning the process until "
            "PING answers with the data loaded (every key's length checked). *Records*: tstream's effect "
            "records (one per command, or per pipelined run of simple TWRITEs on one key, which the "
            "server appends as one batch), redis's commands.",
            "",
            "| server | AOF size | entries | records | restart s | server-logged load s | records/s | entries/s | MB/s | empty start s |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for k in ("tstream", "redis"):
            if k not in a.get("restarts", {}):
                continue
            rt = a["rates"][k]
            lines.append(
                f"| {k} | {mib(a['aof_bytes'][k])} | {a['entries']:,} | {rt['records']:,} "
                f"| **{a['restart_median_seconds'][k]:.2f}** | {_fmt_s(median_of(a['restarts'][k], 'logged_load_seconds'))} "
                f"| {rt['records_per_s']:,.0f} | {rt['entries_per_s']:,.0f} | {rt['mb_per_s']:,.1f} "
                f"| {a['empty_start_seconds'].get(k, 0):.2f} |")
        lines += ["", f"Building the files took {a['build_seconds']} s.", ""]
    lines += load_line(r)
    lines += ["Commands:", "", "```", r["command"]]
    if d:
        for c in d["cases"]:
            lines += [c["commands"]["redis"], c["commands"]["tstream"], c["servers"]["redis"], c["servers"]["tstream"]]
    for part in (s, a):
        if part:
            lines += list(part["servers"].values())
    lines += ["```", ""]
    return lines


def median_of(runs: list[dict], field: str):
    values = sorted(x[field] for x in runs if x.get(field) is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(OUT_DIR / "RESULTS.md"))
    ap.add_argument("--total-seconds", type=float, default=None)
    args = ap.parse_args()
    results = {n: load(n) for n in ("throughput", "memory", "seek_latency", "persistence")}
    have = [r for r in results.values() if r]
    if not have:
        print("no results in bench/results/", file=sys.stderr)
        return 1
    total = f"{args.total_seconds / 60:.1f} min" if args.total_seconds else None
    lines = machine_section(have, total)
    for name, fn in (("throughput", throughput_section), ("memory", memory_section), ("seek_latency", seek_section),
                     ("persistence", persistence_section)):
        if results[name]:
            lines += fn(results[name])
        else:
            lines += [f"## {name}", "", "(not run or failed: see the output of run_all.sh)", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
