#!/usr/bin/env python3
"""Reading a whole stream into Arrow: through TNODES (nodes as stored, decoded
by the reader), through TREAD pages (the server builds every entry), and from
the snapshot file with no server (the offline reader); 1 and 2 readers.

Issue #18 asks for a server-backed read >= 0.8x the offline snapshot read and
>= 1.5x faster with 2 readers than with 1.  This measures the mechanism
without Spark (each reader is a process doing what a Spark task does:
``pipeline.nodes_read.read_nodes``, ``pipeline.offline.read``, or TREAD pages
turned into Arrow), so the figures show where the time goes; the ratios are
of runs of the same round, rounds interleaved, every run listed.

    .venv/bin/python bench/nodes_read.py [--entries 1000000] [--rounds 5] [--out FILE|-]
    .venv/bin/python bench/nodes_read.py --breakdown [--entries 1000000] [--rounds 5]

``--breakdown``: where the time of one reader goes (CPU seconds of receiving,
decoding, building the Arrow batches; the server's CPU per node), no Spark.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ServerProcess, loadavg, machine_facts, script_command  # noqa: E402

KEY = "bench:nodes"


def fill(port: int, entries: int) -> None:
    import redis

    c = redis.Redis(port=port)
    batch = 1000
    for start in range(0, entries, batch):
        words = []
        for i in range(start, min(start + batch, entries)):
            words += [f"tag{i % 1000}", f'{{"id": {i}, "user": "u{i % 5000}", "action": "click", "page": "/p/{i % 97}"}}']
        c.execute_command("TWRITE", KEY, "ENTRIES", *words)
    c.execute_command("SAVE")
    c.close()


def _count_tnodes(port: int, lo: int, hi: int, queue, read_ahead: bool = True) -> None:
    import redis

    from tstream.pipeline.nodes_read import read_nodes
    c = redis.Redis(port=port)
    started = time.perf_counter()
    rows = sum(batch.num_rows for batch in read_nodes(c, KEY, lo, hi, read_ahead=read_ahead))
    queue.put((rows, time.perf_counter() - started))


def _count_tnodes_serial(port: int, lo: int, hi: int, queue) -> None:
    """TNODES one call at a time (no request in flight while a reply is decoded)."""
    _count_tnodes(port, lo, hi, queue, read_ahead=False)


def _count_tread(port: int, lo: int, hi: int, queue) -> None:
    import pyarrow as pa
    import redis

    c = redis.Redis(port=port)
    started = time.perf_counter()
    rows = 0
    page = 10_000
    at = lo
    while at <= hi:
        got = c.execute_command("TREAD", KEY, at, min(page, hi - at + 1))
        if not got:
            break
        batch = pa.RecordBatch.from_pydict({"offset": [e[0] for e in got], "tag": [e[1] for e in got],
                                            "entry": [e[2] for e in got]})
        rows += batch.num_rows
        at = got[-1][0] + 1
    queue.put((rows, time.perf_counter() - started))


def _count_offline(path: str, lo: int, hi: int, queue) -> None:
    from tstream.pipeline import offline
    from tstream.pipeline.common import Options

    started = time.perf_counter()
    options = Options.parse({"path": path, "key": KEY, "startingOffset": str(lo), "endingOffset": str(hi)})
    rows = 0
    for part in offline.plan(options):
        rows += sum(batch.num_rows for batch in offline.read(part))
    queue.put((rows, time.perf_counter() - started))


def run(kind: str, readers: int, port: int, path: str, entries: int) -> float:
    """Rows per second of ``readers`` processes reading the stream's halves at once."""
    target = {"tnodes": _count_tnodes, "tnodes-serial": _count_tnodes_serial, "tread": _count_tread,
              "offline": _count_offline}[kind]
    queue: mp.Queue = mp.Queue()
    bounds = [1 + entries * i // readers for i in range(readers + 1)]
    procs = [mp.Process(target=target, args=(path if kind == "offline" else port, a, b - 1, queue))
             for a, b in zip(bounds, bounds[1:])]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    rows = sum(r for r, _ in results)
    if rows != entries:
        raise SystemExit(f"{kind} x{readers}: read {rows} rows, expected {entries}")
    # Each reader times its own read, after its imports (a Spark task's worker is
    # warm): the readers run at once, so the slowest one's time is the read's.
    return rows / max(elapsed for _, elapsed in results)


# --- where the time goes (--breakdown) ----------------------------------------------

def _server_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stage(server_pid: int, fn) -> tuple[dict, object]:
    """Run ``fn``: its wall time, this process's CPU seconds and the server's."""
    s0, c0, w0 = _server_cpu(server_pid), time.process_time(), time.perf_counter()
    out = fn()
    w1, c1, s1 = time.perf_counter(), time.process_time(), _server_cpu(server_pid)
    return {"wall": w1 - w0, "client": c1 - c0, "server": s1 - s0}, out


def _fetch_redis_py(port: int, entries: int) -> list:
    """Every TNODES reply of the stream through redis-py (hiredis parser), one request
    in flight while the last reply is taken (the reader's read-ahead), nothing decoded."""
    import redis

    c = redis.Redis(port=port, protocol=3)
    conn = c.connection_pool.get_connection()
    replies = []
    conn.send_command("TNODES", KEY, 1, "COUNT", 16, "MAXBYTES", 8 << 20)
    while True:
        reply = conn.read_response()
        replies.append(reply)
        if reply[1] > entries:
            break
        conn.send_command("TNODES", KEY, reply[1], "COUNT", 16, "MAXBYTES", 8 << 20)
    c.connection_pool.release(conn)
    c.close()
    return replies


def _fetch_raw(port: int, starts: list[int], size: int) -> int:
    """The same TNODES calls over a plain socket, every reply received with
    ``recv_into`` a preallocated buffer of the replies' known total ``size``, not
    parsed: what receiving costs without a RESP parser's copies."""
    import socket

    from tstream.resp.encode import encode

    sock = socket.create_connection(("127.0.0.1", port))
    try:
        sock.sendall(encode([b"HELLO", b"3"], 3))  # RESP3, as the reader
        hello = bytearray(1 << 16)
        sock.recv_into(hello)  # the HELLO map is small: one recv
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        for at in starts:
            sock.sendall(b"*7\r\n$6\r\nTNODES\r\n$%d\r\n%s\r\n$%d\r\n%d\r\n$5\r\nCOUNT\r\n$2\r\n16\r\n"
                         b"$8\r\nMAXBYTES\r\n$7\r\n8388608\r\n" % (len(KEY), KEY.encode(), len(str(at)), at))
        while got < size:
            n = sock.recv_into(view[got:])
            if not n:
                raise SystemExit("raw receive: connection closed early")
            got += n
        return got
    finally:
        sock.close()


def _breakdown_round(server, client, entries: int, path: str, steps: dict) -> tuple[list, int, int]:
    """One round of ``breakdown``: each step once, its costs appended to ``steps``."""
    from tstream.engine.node import Node
    from tstream.pipeline import offline
    from tstream.pipeline.common import Options
    from tstream.pipeline.nodes_read import read_nodes, reply_batches
    from tstream.pipeline.snapshot_reader import iter_keys, iter_node_blobs, open_snapshot
    from tstream.resp.encode import encode

    cost, replies = _stage(server.pid, lambda: _fetch_redis_py(server.port, entries))
    steps.setdefault("receive: redis-py (hiredis), read-ahead", []).append(cost)
    nodes = sum(len(r) - 4 for r in replies)
    size = sum(len(encode(r, 3)) for r in replies)
    starts = [1] + [r[1] for r in replies[:-1]]
    cost, _ = _stage(server.pid, lambda: _fetch_raw(server.port, starts, size))
    steps.setdefault("receive: raw socket, recv_into a preallocated buffer, no parsing", []).append(cost)

    def decode():
        for r in replies:
            for header, body, _ in r[4:]:
                Node.from_parts(header, body, r[2], check=False).decoded()
    cost, _ = _stage(server.pid, decode)
    steps.setdefault("decode: Node.from_parts + decoded() (the engine's decoder)", []).append(cost)
    cost, _ = _stage(server.pid, lambda: [reply_batches(r, 1, entries, KEY) for r in replies])
    steps.setdefault("decode + Arrow batches (nodes_read.reply_batches)", []).append(cost)
    cost, rows = _stage(server.pid, lambda: sum(b.num_rows for b in read_nodes(client, KEY, 1, entries)))
    assert rows == entries, rows
    steps.setdefault("TNODES read end to end (read_nodes: receive, decode, Arrow)", []).append(cost)

    def offline_decode():
        data = open_snapshot(path)
        item = next(i for i in iter_keys(data, path) if i.key == KEY.encode())
        for blob, _ in iter_node_blobs(data, item.node_pos[0], len(item.node_pos), path):
            Node.from_blob(blob, item.node_entries, check=False).decoded()
    cost, _ = _stage(server.pid, offline_decode)
    steps.setdefault("offline: file checks + Node.from_blob + decoded()", []).append(cost)
    options = Options.parse({"path": path, "key": KEY, "copySnapshot": "false"})
    cost, rows = _stage(server.pid, lambda: sum(b.num_rows for p in offline.plan(options)
                                                for b in offline.read(p)))
    assert rows == entries, rows
    steps.setdefault("offline read end to end (plan + read: decode, Arrow)", []).append(cost)
    return replies, size, nodes


def breakdown(entries: int, rounds: int, out: str) -> None:
    """CPU seconds of each step of a TNODES read and of the offline read, one process,
    no Spark: receive (redis-py; a raw socket), decode (the engine's node decoder,
    the offline reader's), the Arrow batches, and the server's CPU per node."""
    import redis

    load_start = loadavg()
    steps: dict[str, list[dict]] = {}
    with ServerProcess("tstream") as server:
        fill(server.port, entries)
        path = os.path.join(server.dir, "dump.tsr")
        facts = machine_facts(server)
        client = redis.Redis(port=server.port, protocol=3)
        for _ in range(rounds):
            replies, size, nodes = _breakdown_round(server, client, entries, path, steps)
        client.close()
    per_m = 1_000_000 / entries
    lines = ["# Where the time of a TNODES read goes (no Spark, one process)", "",
             f"- command: `{script_command()}`",
             f"- machine: {facts}",
             f"- load average at start: {load_start}; at end: {loadavg()}",
             f"- {entries:,} entries, {nodes} nodes, {len(replies)} TNODES calls of up to 16 nodes, "
             f"{size / 2**20:.1f} MiB of replies; {rounds} rounds; CPU seconds (process_time; the "
             "server's from /proc/PID/stat) per million entries, median (every round)", "",
             "| step | client CPU s | server CPU s | wall s | client CPU, every round |",
             "| --- | ---: | ---: | ---: | --- |"]
    for name, costs in steps.items():
        med = {k: statistics.median(c[k] for c in costs) * per_m for k in ("client", "server", "wall")}
        lines.append(f"| {name} | {med['client']:.3f} | {med['server']:.3f} | {med['wall']:.3f} | "
                     + ", ".join(f"{c['client'] * per_m:.3f}" for c in costs) + " |")
    server_per_node = statistics.median(c["server"] for c in steps["receive: redis-py (hiredis), read-ahead"])
    lines += ["", f"The server's CPU per node: {server_per_node / nodes * 1e6:.0f} µs "
              f"({size / nodes / 1024:.1f} KiB a node on the wire).", ""]
    text = "\n".join(lines)
    print(text)
    if out != "-":
        Path(out).write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="-")
    ap.add_argument("--breakdown", action="store_true",
                    help="CPU seconds of each step of one reader (receive, decode, Arrow; the server's)")
    args = ap.parse_args()
    if args.breakdown:
        breakdown(args.entries, args.rounds, args.out)
        return
    load_start = loadavg()
    cases = [("offline", 1), ("tnodes", 1), ("tnodes-serial", 1), ("tnodes", 2), ("tread", 1), ("tread", 2),
             ("offline", 2)]
    runs: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
    with ServerProcess("tstream") as server:
        fill(server.port, args.entries)
        path = os.path.join(server.dir, "dump.tsr")
        copy = path + ".copy"  # the offline reader reads a copy, as docs/spark.md advises for a live server
        with open(path, "rb") as src, open(copy, "wb") as dst:
            dst.write(src.read())
        facts = machine_facts(server)
        for r in range(args.rounds):
            order = cases if r % 2 == 0 else cases[::-1]
            for case in order:
                rate = run(case[0], case[1], server.port, copy, args.entries)
                runs[case].append(rate)
                print(f"round {r + 1} {case[0]} x{case[1]}: {rate:,.0f} rows/s", flush=True)
    med = {case: statistics.median(values) for case, values in runs.items()}
    ratios = [[runs[("tnodes", 1)][i] / runs[("offline", 1)][i] for i in range(args.rounds)],
              [runs[("tnodes", 2)][i] / runs[("tnodes", 1)][i] for i in range(args.rounds)],
              [runs[("tnodes", 1)][i] / runs[("tread", 1)][i] for i in range(args.rounds)],
              [runs[("tnodes-serial", 1)][i] / runs[("offline", 1)][i] for i in range(args.rounds)],
              [runs[("tnodes", 1)][i] / runs[("tnodes-serial", 1)][i] for i in range(args.rounds)]]
    lines = [
        "# Reading a stream into Arrow: TNODES, TREAD pages, the snapshot file",
        "",
        f"- command: `{script_command()}`",
        f"- machine: {facts}",
        f"- load average at start: {load_start}; at end: {loadavg()}",
        f"- {args.entries:,} entries (1,000 tags, ~80-byte JSON payloads), one stream; each reader a "
        "process; rounds interleaved (order reversed every other round)",
        "",
        "| reader | readers | rows/s (median) | every run |",
        "| --- | ---: | ---: | --- |",
        *[f"| {kind} | {n} | {med[(kind, n)]:,.0f} | {', '.join(f'{v:,.0f}' for v in runs[(kind, n)])} |"
          for kind, n in cases],
        "",
        "| same-run ratio | median | every run | target |",
        "| --- | ---: | --- | --- |",
        f"| TNODES / offline snapshot read, 1 reader | {statistics.median(ratios[0]):.2f}x | "
        f"{', '.join(f'{v:.2f}' for v in ratios[0])} | >= 0.8x |",
        f"| TNODES 2 readers / 1 reader | {statistics.median(ratios[1]):.2f}x | "
        f"{', '.join(f'{v:.2f}' for v in ratios[1])} | >= 1.5x |",
        f"| TNODES / TREAD pages, 1 reader | {statistics.median(ratios[2]):.2f}x | "
        f"{', '.join(f'{v:.2f}' for v in ratios[2])} | |",
        f"| TNODES one call at a time / offline, 1 reader | {statistics.median(ratios[3]):.2f}x | "
        f"{', '.join(f'{v:.2f}' for v in ratios[3])} | |",
        f"| TNODES read-ahead / one call at a time, 1 reader | {statistics.median(ratios[4]):.2f}x | "
        f"{', '.join(f'{v:.2f}' for v in ratios[4])} | |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out != "-":
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
