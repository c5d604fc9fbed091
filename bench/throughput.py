#!/usr/bin/env python3
"""Write throughput: tstream ``TWRITE bench:key tag value`` vs redis-server ``XADD bench:key * tag value``.

redis-benchmark drives both (50 clients), unpipelined and with ``-P 16``. Each case runs
``--repeat`` times, interleaved (redis, tstream, ceiling, redis, ...), and the median
requests/s of each server and the ratio tstream/redis are reported. The key is deleted
before every run so each starts from an empty stream.

*ceiling* is bench/ceiling_server.py, uvloop + hiredis appending to a Python list and
nothing else, driven with the same TWRITE: what Python's event loop and parser alone
reach on this machine, for context (``--no-ceiling`` leaves it out).

    .venv/bin/python bench/throughput.py [--n 200000] [--n-pipelined 2000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import csv
import io
import shlex
import subprocess
import sys
import time

from common import REDIS_BENCHMARK, as_map, machine_facts, median, save_result, script_command, servers, sigterm_as_exit

TARGETS = {1: 0.6, 16: 0.5}  # minimum tstream/redis ratio per pipeline depth


def benchmark_argv(port: int, clients: int, n: int, pipeline: int, command: list[str]) -> list[str]:
    argv = [REDIS_BENCHMARK, "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-n", str(n)]
    if pipeline > 1:
        argv += ["-P", str(pipeline)]
    return argv + ["--csv", *command]


def run_benchmark(argv: list[str], timeout: float) -> dict:
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
    rows = list(csv.reader(io.StringIO(proc.stdout)))
    header = next((r for r in rows if r and r[0] == "test"), None)
    data = [r for r in rows if r and r[0] != "test"]
    if header is None or not data:
        raise RuntimeError(f"unexpected redis-benchmark output:\n{proc.stdout}\n{proc.stderr}")
    row = dict(zip(header, data[-1]))
    if "ERR" in proc.stdout or "ERR" in proc.stderr:
        raise RuntimeError(f"redis-benchmark reported errors:\n{proc.stdout}\n{proc.stderr}")
    return {"rps": float(row["rps"]), "p50_ms": float(row.get("p50_latency_ms", "nan")),
            "p99_ms": float(row.get("p99_latency_ms", "nan")), "elapsed_s": round(elapsed, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000, help="requests per unpipelined run")
    ap.add_argument("--n-pipelined", type=int, default=2_000_000, help="requests per -P 16 run")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=240, help="seconds allowed for one run")
    ap.add_argument("--no-ceiling", action="store_true", help="skip bench/ceiling_server.py")
    args = ap.parse_args()
    sigterm_as_exit()

    twrite = ["TWRITE", "bench:key", "tag", "value"]
    xadd = ["XADD", "bench:key", "*", "tag", "value"]
    cases = [(1, args.n), (args.pipeline, args.n_pipelined)]
    result = {"benchmark": "throughput", "command": script_command(), "clients": args.clients,
              "repeat": args.repeat, "cases": []}

    specs = [("tstream", []), ("redis", [])] + ([] if args.no_ceiling else [("ceiling", [])])
    with servers(*specs) as started:
        ts, rs = started[:2]
        cs = started[2] if len(started) > 2 else None
        result["machine"] = machine_facts(ts, rs)
        result["servers"] = {"tstream": ts.command_line(), "redis": rs.command_line()}
        tc, rc = ts.client(), rs.client()
        order = [("redis", rc), ("tstream", tc)]
        if cs is not None:
            result["servers"]["ceiling"] = cs.command_line()
            order.append(("ceiling", cs.client()))
        print(f"tstream on :{ts.port} ({result['machine']['tstream_multiplexing_api']}), "
              f"redis on :{rs.port}", flush=True)
        for pipeline, n in cases:
            runs = {name: [] for name, _ in order}
            argvs = {"redis": benchmark_argv(rs.port, args.clients, n, pipeline, xadd),
                     "tstream": benchmark_argv(ts.port, args.clients, n, pipeline, twrite)}
            if cs is not None:
                argvs["ceiling"] = benchmark_argv(cs.port, args.clients, n, pipeline, twrite)
            for i in range(args.repeat):
                for name, client in order:
                    client.execute("DEL", "bench:key")
                    r = run_benchmark(argvs[name], args.timeout)
                    length = (client.execute("XLEN", "bench:key") if name == "redis"
                              else as_map(client.execute("TINFO", "bench:key"))["length"])
                    # redis-benchmark may send up to a pipeline's worth more per client than -n.
                    if not n <= int(length) <= n + args.clients * pipeline:
                        raise RuntimeError(f"{name}: {n} writes sent but the stream holds {length}")
                    r["stream_length"] = int(length)
                    runs[name].append(r)
                    print(f"  P={pipeline:<2} run {i + 1}/{args.repeat} {name:8s} "
                          f"{r['rps']:>11,.0f} req/s  p50 {r['p50_ms']:.3f} ms  ({r['elapsed_s']} s)",
                          flush=True)
            med = {k: median(x["rps"] for x in v) for k, v in runs.items()}
            ratio = med["tstream"] / med["redis"]
            if "ceiling" in med:
                print(f"P={pipeline}: ceiling (uvloop + hiredis only) {med['ceiling']:,.0f} req/s, "
                      f"{med['ceiling'] / med['redis']:.2f}x redis", flush=True)
            target = TARGETS.get(pipeline, TARGETS[16] if pipeline > 1 else TARGETS[1])
            case = {"pipeline": pipeline, "n": n, "runs": runs,
                    "median_rps": med, "ratio": ratio, "target_ratio": target, "meets_target": ratio >= target,
                    "commands": {k: shlex.join(["redis-benchmark", *v[1:]]) for k, v in argvs.items()}}
            result["cases"].append(case)
            print(f"P={pipeline}: redis {med['redis']:,.0f} req/s, tstream {med['tstream']:,.0f} req/s, "
                  f"ratio {ratio:.2f}x (target >= {target}x: {'met' if ratio >= target else 'MISSED'})",
                  flush=True)
        for _, client in order:
            client.close()
    path = save_result("throughput", result)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
