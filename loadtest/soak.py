"""Soak test: a long mixed load on a server whose data is bounded by eviction.

    .venv/bin/python loadtest/soak.py [--duration 600] [--interval 10] [--out DIR]

A run writes to a new directory ``loadtest/runs/soak-<time>/`` (ignored by git);
the committed ``loadtest/results/`` changes only when asked: ``--out loadtest/results``.

Starts its own ``tstream-server`` (a subprocess on a free loopback port, in a
temporary ``dir``, append-only file on with ``appendfsync everysec``, automatic
rewrites), sets eviction policies that bound the data (``workload.Workload.setup``:
``max_len``, ``max_age_ms``, ``max_msgs_per_subject``), and drives it with one
process per role, each paced at a fixed rate:

- producer   TWRITE single entries / ENTRIES of 10 / events
- batcher    atomic BATCH ... COMMIT of 2-6 KV updates, single TWRITEs
- consumer   TREAD GROUP ... RETRY then TACK (1% left for retries)
- reader     DGET by subject / by sequence / KV SUBJECT, MLAST, TREAD
- follower   TREAD ... BLOCK 1000 tailing the events (its times include the wait:
             reported apart, not in the latency figures)

Every ``interval`` seconds it records a row to ``soak.csv``: the server's RSS
(VmRSS from /proc/<pid>/status) and used memory, the entries held, the group's
pending count, the commands done and their rate, p50/p99/max latency of the
single-entry commands (``workload.SINGLE``) and p99 of all (non-blocking)
commands, and errors.  At the end it renders ``soak.png`` (matplotlib) and writes
``soak-summary.md`` with per-command latencies and the verdict against the bar:
zero errors, RSS flat once eviction bounds the data, p99 < 10 ms for
single-entry commands.  Latency is measured by the clients (send to reply).
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing as mp
import os
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import redis  # noqa: E402
from workload import SINGLE, Workload  # noqa: E402

# role -> (steps per second, Workload method); each step is one to six commands
ROLES = {
    "producer": (1000, "produce"),
    "batcher": (120, "publish_batch"),
    "consumer": (300, "consume"),
    "reader": (800, "read"),
    "follower": (0, "follow"),  # unpaced: blocks for new events
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(sorted_values, fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, int(round(fraction * len(sorted_values) + 0.5)) - 1))
    return sorted_values[index]


# --- the load processes ---------------------------------------------------------------

def worker(role: str, port: int, t0: float, duration: float, interval: float, out: mp.Queue) -> None:
    rate, method = ROLES[role]
    r = redis.Redis(port=port, protocol=3 if role in ("reader", "batcher") else 2, socket_timeout=10)
    lat: dict[str, array] = defaultdict(lambda: array("d"))
    errors: dict[str, int] = defaultdict(int)
    messages: list[str] = []

    def call(name, *argv):
        started = time.perf_counter()
        try:
            reply = r.execute_command(*argv)
        except redis.RedisError as exc:
            lat[name].append((time.perf_counter() - started) * 1000)
            errors[name] += 1
            if len(messages) < 5:
                messages.append(f"{name}: {exc!r}")
            return None
        lat[name].append((time.perf_counter() - started) * 1000)
        return reply

    load = Workload(call, prefix="soak")
    step = getattr(load, method)
    time.sleep(max(0.0, t0 - time.time()))
    window = 0
    end = t0 + duration
    period = 1.0 / rate if rate else 0.0
    next_at = time.perf_counter()
    while True:
        now = time.time()
        current = int((now - t0) // interval)
        if current != window or now >= end:
            out.put((role, window, {k: v.tobytes() for k, v in lat.items()}, dict(errors), list(messages)))
            lat.clear()
            errors.clear()
            messages.clear()
            window = current
            if now >= end:
                break
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - a client bug counts as an error, not a crash
            errors[f"{role} step"] += 1
            if len(messages) < 5:
                messages.append(f"{role} step: {exc!r}")
        if period:
            next_at += period
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            elif delay < -1.0:  # fell more than a second behind: don't burst to catch up
                next_at = time.perf_counter()
    out.put((role, "done", None, None, None))
    r.close()


# --- the server -----------------------------------------------------------------------

def start_server(directory: str, port: int, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "tstream.server", "--port", str(port), "--dir", directory,
               "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
               "--auto-aof-rewrite-min-size", "32mb", "--latency-monitor-threshold", "5", *extra]
    log = open(os.path.join(directory, "server.log"), "ab")
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if redis.Redis(port=port, socket_timeout=1).ping():
                return proc
        except redis.RedisError:
            time.sleep(0.05)
    raise SystemExit("server did not start")


def proc_status(pid: int) -> dict[str, int]:
    values = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                values[name] = int(rest.split()[0]) * 1024
    return values


def stream_infos(r: redis.Redis, load: Workload):
    """(key, TINFO as a dict) of each of the workload's streams that exists."""
    for key in [*load.orders, load.events, load.kv]:
        try:
            tinfo = r.execute_command("TINFO", key)
        except redis.ResponseError:
            continue
        if isinstance(tinfo, list):
            tinfo = dict(zip(tinfo[::2], tinfo[1::2]))
        yield key, tinfo


def server_figures(r: redis.Redis, load: Workload) -> dict:
    info = r.info()
    held = sum(int(tinfo[b"length"]) for _, tinfo in stream_infos(r, load))
    pending = 0
    for key in load.orders:
        try:
            for group in r.execute_command("TINFO", key, "GROUPS"):
                if isinstance(group, list):
                    group = dict(zip(group[::2], group[1::2]))
                pending += int(group[b"pending"])
        except redis.ResponseError:
            pass
    return {"used_memory": int(info["used_memory"]), "entries_held": held, "pending": pending,
            "aof_size": int(info.get("aof_current_size", 0)), "server_ops": int(info["instantaneous_ops_per_sec"]),
            "repl_offset": int(info.get("master_repl_offset", 0))}


def replica_lag(primary_offset: int, replicas: list[redis.Redis]) -> int:
    """The largest replica lag in bytes of replication stream (the primary's
    offset, sampled first, minus each replica's), -1 for a replica not linked."""
    worst = 0
    for r in replicas:
        info = r.info("replication")
        if info.get("master_link_status") != "up":
            return -1
        worst = max(worst, primary_offset - int(info["slave_repl_offset"]))
    return worst


def replica_state(r: redis.Redis, load: Workload) -> dict:
    """What must be equal on the primary and a replica once it caught up."""
    state = {}
    for key, tinfo in stream_infos(r, load):
        state[key] = {k: v for k, v in tinfo.items() if k != b"bytes"}  # (bytes: memory, not data)
        if key in load.orders:
            state[key, "groups"] = r.execute_command("TINFO", key, "GROUPS")
    return state


def converge(admin: redis.Redis, replicas: list[redis.Redis], load: Workload, timeout: float = 60.0) -> dict:
    """After the load: wait until every replica acked the primary's offset, then
    compare what each holds with the primary."""
    started = time.monotonic()
    target = int(admin.info("replication")["master_repl_offset"])
    caught = False
    while time.monotonic() - started < timeout:
        if replica_lag(target, replicas) == 0:
            caught = True
            break
        time.sleep(0.05)
    seconds = time.monotonic() - started
    expected = replica_state(admin, load)
    equal = caught and all(replica_state(r, load) == expected for r in replicas)
    return {"caught_up": caught, "seconds": seconds, "equal": equal, "offset": target}


# --- the run --------------------------------------------------------------------------

COLUMNS = ["elapsed_s", "rss_mb", "rss_hwm_mb", "used_memory_mb", "entries_held", "group_pending",
           "aof_mb", "commands", "commands_per_s", "single_p50_ms", "single_p99_ms", "single_max_ms",
           "all_p99_ms", "errors", "replica_lag_kb"]


def main(argv: list[str] | None = None) -> int:  # noqa: C901 (over the limit when it came in)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load (default 600)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds per recorded row (default 10)")
    parser.add_argument("--out", default=None,
                        help="directory of soak.csv/soak.png/soak-summary.md (default: a new "
                             "loadtest/runs/soak-<time>/; loadtest/results updates the committed ones)")
    parser.add_argument("--keep-dir", action="store_true", help="keep the server's data directory")
    parser.add_argument("--render-only", action="store_true", help="redraw soak.png from soak.csv, run nothing")
    parser.add_argument("--no-render", action="store_true", help="no soak.png (matplotlib not needed)")
    parser.add_argument("--replicas", type=int, default=2,
                        help="replicas of the server (default 2): their lag is recorded, and after the "
                             "load they must catch up and hold what the primary holds")
    args = parser.parse_args(argv)

    if args.out is None and args.render_only:
        parser.error("--render-only needs --out DIR (the directory holding soak.csv)")
    out_dir = Path(args.out) if args.out else HERE / "runs" / time.strftime("soak-%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.render_only:
        rows = [{k: (float(v) if v not in ("", None) else 0.0) for k, v in row.items()}
                for row in csv.DictReader(open(out_dir / "soak.csv", newline=""))]
        args.duration = rows[-1]["elapsed_s"] if rows else args.duration
        render(rows, out_dir / "soak.png", args)
        return 0
    directory = tempfile.mkdtemp(prefix="tstream-soak-")
    port = free_port()
    server = start_server(directory, port)
    replica_procs: list[subprocess.Popen] = []
    replicas: list[redis.Redis] = []
    for i in range(args.replicas):
        replica_dir = os.path.join(directory, f"replica{i}")
        os.mkdir(replica_dir)
        replica_port = free_port()
        replica_procs.append(start_server(replica_dir, replica_port, "--replicaof", f"127.0.0.1 {port}"))
        replicas.append(redis.Redis(port=replica_port, socket_timeout=10))
    admin = redis.Redis(port=port, socket_timeout=10)
    Workload(lambda name, *argv: admin.execute_command(*argv), prefix="soak").setup()
    probe = Workload(lambda *a: None, prefix="soak")

    ctx = mp.get_context("fork")
    results: mp.Queue = ctx.Queue()
    t0 = time.time() + 1.0
    procs = [ctx.Process(target=worker, args=(role, port, t0, args.duration, args.interval, results),
                         name=f"soak-{role}", daemon=True) for role in ROLES]
    for proc in procs:
        proc.start()
    print(f"soak: server pid {server.pid} port {port} dir {directory}; {len(replicas)} replicas; "
          f"{len(procs)} load processes, {args.duration:.0f} s, a row every {args.interval:.0f} s", flush=True)

    windows: dict[int, dict] = defaultdict(lambda: {"lat": defaultdict(lambda: array("d")), "errors": defaultdict(int), "roles": set()})
    totals: dict[str, array] = defaultdict(lambda: array("d"))
    error_totals: dict[str, int] = defaultdict(int)
    error_messages: list[str] = []
    samples: dict[int, dict] = {}
    rows: list[dict] = []
    done_roles: set[str] = set()
    n_windows = int(args.duration // args.interval)
    csv_path = out_dir / "soak.csv"
    handle = open(csv_path, "w", newline="")
    writer = csv.DictWriter(handle, fieldnames=COLUMNS)
    writer.writeheader()
    next_row = 0
    server_exit = None

    def take_sample(window: int) -> None:
        figures = proc_status(server.pid)
        figures.update(server_figures(admin, probe))
        if replicas:
            figures["replica_lag"] = replica_lag(figures["repl_offset"], replicas)
        samples[window] = figures

    def flush_rows(final: bool) -> None:
        nonlocal next_row
        while next_row < n_windows and (len(windows[next_row]["roles"]) == len(ROLES) or final):
            w = windows.pop(next_row)
            lat = w["lat"]
            single = sorted(x for name, values in lat.items() if name in SINGLE for x in values)
            nonblocking = sorted(x for name, values in lat.items() if name != "TREAD BLOCK" for x in values)
            count = sum(len(v) for v in lat.values())
            sample = samples.get(next_row, {})
            row = {
                "elapsed_s": int((next_row + 1) * args.interval),
                "rss_mb": round(sample.get("VmRSS", 0) / 2**20, 1),
                "rss_hwm_mb": round(sample.get("VmHWM", 0) / 2**20, 1),
                "used_memory_mb": round(sample.get("used_memory", 0) / 2**20, 1),
                "entries_held": sample.get("entries_held", ""),
                "group_pending": sample.get("pending", ""),
                "aof_mb": round(sample.get("aof_size", 0) / 2**20, 1),
                "commands": count,
                "commands_per_s": round(count / args.interval),
                "single_p50_ms": round(percentile(single, 0.50), 3),
                "single_p99_ms": round(percentile(single, 0.99), 3),
                "single_max_ms": round(single[-1], 3) if single else "",
                "all_p99_ms": round(percentile(nonblocking, 0.99), 3),
                "errors": sum(w["errors"].values()),
                # (-1: a replica's link was down at the sample)
                "replica_lag_kb": (round(sample["replica_lag"] / 1024, 1) if sample.get("replica_lag", -1) >= 0
                                   else (-1.0 if "replica_lag" in sample else "")),
            }
            rows.append(row)
            writer.writerow(row)
            handle.flush()
            print("  ".join(f"{k}={row[k]}" for k in ("elapsed_s", "rss_mb", "entries_held", "commands_per_s",
                                                       "single_p50_ms", "single_p99_ms", "all_p99_ms", "errors",
                                                       "replica_lag_kb")),
                  flush=True)
            next_row += 1

    try:
        sampled = -1
        while len(done_roles) < len(ROLES):
            now = time.time()
            window_now = int((now - t0) // args.interval) if now >= t0 else -1
            # sample the server at the end of each window (just before the next starts)
            if window_now - 1 > sampled and window_now - 1 < n_windows:
                sampled = window_now - 1
                take_sample(sampled)
            if now >= t0 + args.duration and sampled < n_windows - 1:
                sampled = n_windows - 1
                take_sample(sampled)
            try:
                role, window, lat, errors, messages = results.get(timeout=0.5)
            except queue.Empty:
                if server.poll() is not None:
                    server_exit = server.returncode
                    print(f"soak: the server exited with {server_exit}!", flush=True)
                    break
                if not any(p.is_alive() for p in procs) and results.empty():
                    break
                continue
            if window == "done":
                done_roles.add(role)
                continue
            if window >= n_windows:
                window = n_windows - 1  # the last partial instant belongs to the last row
            slot = windows[window]
            slot["roles"].add(role)
            for name, raw in lat.items():
                values = array("d")
                values.frombytes(raw)
                slot["lat"][name].extend(values)
                totals[name].extend(values)
            for name, n in errors.items():
                slot["errors"][name] += n
                error_totals[name] += n
            error_messages.extend(m for m in messages if len(error_messages) < 20)
            flush_rows(final=False)
        flush_rows(final=True)
    finally:
        handle.close()
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
        latency_events = []
        convergence = None
        if replicas and server.poll() is None:
            try:
                convergence = converge(admin, replicas, probe)
            except redis.RedisError as exc:
                convergence = {"caught_up": False, "seconds": 0.0, "equal": False, "offset": 0, "error": str(exc)}
        for replica in replica_procs:
            if replica.poll() is None:
                replica.send_signal(signal.SIGTERM)
                try:
                    replica.wait(30)
                except subprocess.TimeoutExpired:
                    replica.kill()
        if server.poll() is None:
            try:
                latency_events = admin.execute_command("LATENCY", "LATEST")
            except redis.RedisError:
                pass
            server.send_signal(signal.SIGTERM)
            try:
                server_exit = server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server_exit = "killed after 30 s"
        if not args.keep_dir:
            shutil.rmtree(directory, ignore_errors=True)

    summary = summarize(rows, totals, error_totals, error_messages, latency_events, server_exit, args, convergence)
    (out_dir / "soak-summary.md").write_text(summary)
    print(summary, flush=True)
    if not args.no_render:
        render(rows, out_dir / "soak.png", args)
    print(f"soak: wrote {csv_path}, {'' if args.no_render else str(out_dir / 'soak.png') + ', '}"
          f"{out_dir / 'soak-summary.md'}", flush=True)
    ok = not error_totals and server_exit == 0 and (convergence is None or convergence["equal"])
    return 0 if ok else 1


def flat_rss(rows: list[dict]) -> tuple[float, float, float]:
    """RSS over the second half of the run: (min MB, max MB, slope MB per minute)."""
    half = rows[len(rows) // 2:]
    xs = [r["elapsed_s"] / 60 for r in half]
    ys = [r["rss_mb"] for r in half]
    if len(half) < 2:
        return (ys[0], ys[0], 0.0) if ys else (0.0, 0.0, 0.0)
    slope = statistics.linear_regression(xs, ys).slope
    return min(ys), max(ys), slope


def summarize(rows, totals, error_totals, error_messages, latency_events, server_exit, args,
              convergence: dict | None = None) -> str:
    duration = args.duration
    total_commands = sum(len(v) for v in totals.values())
    single = sorted(x for name, v in totals.items() if name in SINGLE for x in v)
    p99_windows = [r["single_p99_ms"] for r in rows]
    lo, hi, slope = flat_rss(rows)
    first_half_peak = max((r["rss_mb"] for r in rows[: len(rows) // 2]), default=0)
    lines = [
        "| figure | value | bar | met |",
        "| --- | ---: | --- | :---: |",
        f"| duration, rows | {duration:.0f} s, {len(rows)} rows of {args.interval:.0f} s | | |",
        f"| commands (all roles) | {total_commands:,} ({total_commands / duration:,.0f}/s) | | |",
        f"| errors | {sum(error_totals.values())} | 0 | {'yes' if not error_totals else 'no'} |",
        f"| server exit code after SIGTERM | {server_exit} | 0 | {'yes' if server_exit == 0 else 'no'} |",
        f"| RSS, second half (min-max) | {lo:.1f}-{hi:.1f} MB (peak in first half {first_half_peak:.1f} MB) | flat | "
        f"{'yes' if abs(slope) < 0.5 and hi - lo < max(8.0, 0.1 * hi) else 'no'} |",
        f"| RSS slope, second half | {slope:+.2f} MB/min | ~0 | |",
        f"| single-entry p50 / p99 (whole run) | {percentile(single, .5):.3f} / {percentile(single, .99):.3f} ms "
        f"| p99 < 10 ms | {'yes' if percentile(single, .99) < 10 else 'no'} |",
        f"| single-entry p99, worst 10 s row | {max(p99_windows, default=float('nan')):.3f} ms | < 10 ms | "
        f"{'yes' if max(p99_windows, default=99) < 10 else 'no'} |",
    ]
    if convergence is not None:
        lags = [r["replica_lag_kb"] for r in rows if isinstance(r["replica_lag_kb"], float) and r["replica_lag_kb"] >= 0]
        lines += [
            f"| replica lag, {args.replicas} replicas (max of the rows' samples) | "
            f"{max(lags, default=float('nan')):.1f} KB of stream; a link down in "
            f"{sum(1 for r in rows if r['replica_lag_kb'] == -1.0)} rows | | |",
            f"| replicas converge after the load | caught up with offset {convergence['offset']:,} in "
            f"{convergence['seconds']:.2f} s; data equal: {'yes' if convergence['equal'] else 'no'} | equal | "
            f"{'yes' if convergence['equal'] else 'no'} |",
        ]
    lines += [
        "",
        "Per command (client-side latency, ms; TREAD BLOCK includes the wait for new events):",
        "",
        "| command | count | per s | p50 | p99 | p99.9 | max | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in sorted(totals, key=lambda n: -len(totals[n])):
        values = sorted(totals[name])
        lines.append(f"| {name}{' (single)' if name in SINGLE else ''} | {len(values):,} | {len(values) / duration:,.0f} | "
                     f"{percentile(values, .5):.3f} | {percentile(values, .99):.3f} | {percentile(values, .999):.3f} | "
                     f"{values[-1]:.3f} | {error_totals.get(name, 0)} |")
    if latency_events:
        lines += ["", "Server LATENCY LATEST (events >= 5 ms): " + "; ".join(
            f"{e[0].decode() if isinstance(e[0], bytes) else e[0]} latest {e[2]} ms max {e[3]} ms" for e in latency_events)]
    if error_messages:
        lines += ["", "First errors:", ""] + [f"- `{m}`" for m in error_messages]
    return "\n".join(lines) + "\n"


def render(rows: list[dict], path: Path, args) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["elapsed_s"] / 60 for r in rows]
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    fig.suptitle(f"tstream soak: {args.duration / 60:.0f} min mixed load, eviction-bounded data "
                 f"({ROLES['producer'][0]} producer, {ROLES['batcher'][0]} batch, {ROLES['consumer'][0]} group, "
                 f"{ROLES['reader'][0]} reader steps/s)", fontsize=10)
    ax1.plot(t, [r["rss_mb"] for r in rows], label="server RSS (VmRSS)", color="tab:blue")
    ax1.plot(t, [r["used_memory_mb"] for r in rows], label="INFO used_memory", color="tab:cyan", linestyle="--")
    ax1.set_ylabel("MB")
    ax1.set_ylim(bottom=0)
    ax1b = ax1.twinx()
    ax1b.plot(t, [r["entries_held"] or 0 for r in rows], label="entries held", color="tab:gray", alpha=0.6)
    ax1b.set_ylabel("entries held")
    ax1b.set_ylim(bottom=0)
    lines = ax1.get_legend_handles_labels()
    lines2 = ax1b.get_legend_handles_labels()
    ax1.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="lower right", fontsize=8)
    ax1.set_title("memory", fontsize=9)

    ax2.plot(t, [r["single_p50_ms"] for r in rows], label="single-entry p50", color="tab:green")
    ax2.plot(t, [r["single_p99_ms"] for r in rows], label="single-entry p99", color="tab:orange")
    ax2.plot(t, [r["all_p99_ms"] for r in rows], label="all commands p99", color="tab:red", alpha=0.5)
    ax2.axhline(10, color="black", linestyle=":", linewidth=1, label="bar: p99 10 ms")
    ax2.set_ylabel("ms (client-side)")
    ax2.set_ylim(bottom=0)
    ax2.legend(loc="upper right", fontsize=8)
    ax2.set_title("latency per 10 s", fontsize=9)

    ax3.plot(t, [r["commands_per_s"] for r in rows], label="commands/s", color="tab:purple")
    ax3.set_ylabel("commands/s")
    ax3.set_ylim(bottom=0)
    ax3b = ax3.twinx()
    ax3b.bar(t, [r["errors"] for r in rows], width=0.1, color="tab:red", label="errors")
    ax3b.set_ylabel("errors")
    ax3b.set_ylim(0, max(1, max((r["errors"] for r in rows), default=0)) * 1.2)
    total_errors = sum(r["errors"] for r in rows)
    ax3.text(0.02, 0.08, f"errors in total: {total_errors:.0f}", transform=ax3.transAxes, fontsize=9,
             color="tab:red" if total_errors else "black")
    lines = ax3.get_legend_handles_labels()
    lines2 = ax3b.get_legend_handles_labels()
    ax3.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="lower right", fontsize=8)
    ax3.set_title("throughput and errors", fontsize=9)
    ax3.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
