"""Per-command cost of the hottest shapes, in process: CPU ns per command fed
through ``ClientConnection.data_received`` on a fake transport (no sockets, no
kernel, no event-loop wake-ups: what the server's own Python costs).

    .venv/bin/python bench/hotpath.py                       # this tree
    .venv/bin/python bench/hotpath.py --base /tmp/base930/.venv/bin/python
                                                            # and another build, interleaved
    .venv/bin/python bench/hotpath.py --stages              # where the time goes, stage by stage

Shapes (each command in its own read, as an unpipelined client sends it, or 16
in one read as ``redis-benchmark -P 16`` does):

- ``TWRITE k t v``: one append;
- ``TREAD k o n``: one entry read back;
- ``TACK k g o``: one pending entry of a group acknowledged (the entries are
  handed out by a group read before the timed part);
- ``16x TWRITE, 16 keys`` / ``16x TWRITE, 1 key``: a pipelined burst; its held
  replies are released by running the end of the loop turn
  (``server.turn_end.run()``), which is timed with it.

Each figure is the best of ``--rounds`` rounds (CPU time of this process, so
load from other processes mostly drops out).  The script imports
``tstream.server.*`` when it can, else the top-level ``server.*`` of the builds
before the one namespace (930cefd), so one script measures both.  ``--base``
runs the other build's interpreter and this one in turn, ``--repeat`` times,
and prints the best of each as a table.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import subprocess
import sys
import time


def server_modules(namespace: str | None = None):
    """(server.app, server.connection, server.config) of whichever build is
    installed (or of ``namespace``: "tstream." or "" for the old top-level packages)."""
    # bench/ itself must not shadow an older build's top-level packages.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    for prefix in ("tstream.", "") if namespace is None else (namespace,):
        try:
            return tuple(importlib.import_module(prefix + name)
                         for name in ("server.app", "server.connection", "server.config"))
        except ImportError:
            continue
    raise SystemExit("neither tstream.server nor server is importable")


class CountingTransport(asyncio.Transport):
    """Takes the replies and counts the writes; never fills up."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data) -> None:
        self.writes += 1

    def writelines(self, data) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 1234), "sockname": ("127.0.0.1", 6380)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_write_buffer_limits(self):
        return (16384, 65536)

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass


def request(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


class Bench:
    def __init__(self, namespace: str | None = None) -> None:
        app, connection, config_module = server_modules(namespace)
        config = config_module.Config()
        config.set("save", "")
        config.set("group-max-pending", "100000000")  # every TACK round's entries pending at once
        self.server = app.Server(config)
        self.client = connection.ClientConnection(self.server)
        self.transport = CountingTransport()
        self.client.connection_made(self.transport)
        self.feed = self.client.data_received
        self.turn_end = self.server.turn_end.run
        self.acks = 0

    def settle(self) -> None:
        self.turn_end()

    def prepare_acks(self, n: int) -> list[bytes]:
        """n TACK requests, each of an entry now pending in group g of a fresh key."""
        self.acks += 1
        key = b"hp:ack%d" % self.acks
        for _ in range(n):
            self.feed(request(b"TWRITE", key, b"tag", b"v"))
        self.settle()
        # RETRY: the entries handed out stay pending until acknowledged.
        self.feed(request(b"TREAD", key, b"1", b"%d" % n, b"GROUP", b"g", b"RETRY", b"3600000", b"7200000"))
        self.settle()
        return [request(b"TACK", key, b"g", b"%d" % offset) for offset in range(1, n + 1)]

    def time_reads(self, reads: list[bytes], per_read: int, settle: bool) -> float:
        feed, turn_end = self.feed, self.turn_end
        clock = time.process_time_ns
        started = clock()
        if settle:
            for data in reads:
                feed(data)
                turn_end()
        else:
            for data in reads:
                feed(data)
        return (clock() - started) / (len(reads) * per_read)


def measure(n: int, rounds: int, namespace: str | None = None) -> dict[str, float]:
    bench = Bench(namespace)
    for i in range(200):
        bench.feed(request(b"TWRITE", b"hp:read", b"tag", b"value%d" % i))
    bench.settle()
    burst_keys = b"".join(request(b"TWRITE", b"hp:k%d" % k, b"tag", b"value") for k in range(16))
    burst_one = request(b"TWRITE", b"hp:one", b"tag", b"value") * 16
    shapes = {
        "TWRITE k t v": lambda: ([request(b"TWRITE", b"hp:w", b"tag", b"value")] * n, 1, False),
        "TREAD k o n": lambda: ([request(b"TREAD", b"hp:read", b"100", b"1")] * n, 1, False),
        "TACK k g o": lambda: (bench.prepare_acks(n), 1, False),
        "16x TWRITE, 16 keys": lambda: ([burst_keys] * (n // 16), 16, True),
        "16x TWRITE, 1 key": lambda: ([burst_one] * (n // 16), 16, True),
    }
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, make in shapes.items():
            reads, per_read, settle = make()
            bench.settle()
            ns = bench.time_reads(reads, per_read, settle)
            bench.settle()
            best[name] = min(ns, best.get(name, ns))
    return best


def best_ns(step, n: int, rounds: int) -> float:
    """Best CPU ns of one ``step()`` over ``rounds`` rounds of ``n``."""
    clock = time.process_time_ns
    best = float("inf")
    for _ in range(rounds):
        started = clock()
        for _ in range(n):
            step()
        best = min(best, (clock() - started) / n)
    return best


def stages(n: int, rounds: int, namespace: str | None = None) -> dict[str, float]:
    """Where one unpipelined ``TWRITE k t v`` and one read of 16 on one key spend
    their time: each stage timed on its own (so the stages of a build add up to
    about its total), the connection's share being what is left."""
    bench = Bench(namespace)
    prefix = "tstream." if bench.server.__class__.__module__.startswith("tstream.") else ""
    resp = importlib.import_module(prefix + "resp")
    dispatch = importlib.import_module(prefix + "commands.dispatch")
    streams = importlib.import_module(prefix + "commands.streams")
    client = bench.client
    read = request(b"TWRITE", b"hp:stage", b"tag", b"value")
    argv = [b"TWRITE", b"hp:stage", b"tag", b"value"]
    bench.feed(read)
    stream = bench.server.streams[b"hp:stage"]
    parser = resp.RequestParser()
    if hasattr(parser, "read_one"):
        def parse():
            parser.read_one(read)
    else:
        def parse():
            parser.feed(read)
            parser.pull()
    if "execute_at(client, [argv], 0)" in open(dispatch.__file__).read():  # execute() wraps execute_at()
        def run():
            dispatch.execute_at(client, [argv], 0)
    else:
        def run():
            dispatch.execute(client, argv)
    now = time.time_ns()
    out = {"TWRITE: total": best_ns(lambda: bench.feed(read), n, rounds),
           "TWRITE: parse": best_ns(parse, n, rounds),
           "TWRITE: dispatch and handler": best_ns(run, n, rounds),
           "TWRITE: handler": best_ns(lambda: streams.twrite(client, argv), n, rounds),
           "TWRITE: engine append": best_ns(lambda: stream.append(b"tag", b"value", now), n, rounds)}
    bench.settle()
    burst = request(b"TWRITE", b"hp:run", b"tag", b"value") * 16
    parser = resp.RequestParser()

    if hasattr(parser, "read_many"):  # a read of whole commands, parsed in one pass
        def parse_burst():
            return parser.read_many(burst)
    else:
        def parse_burst():
            parser.feed(burst)
            return parser.pull()

    commands = parse_burst()
    turn_end = bench.server.turn_end

    def feed_burst():
        bench.feed(burst)
        bench.settle()

    def hold_and_release():
        turn_end.hold(client, b":1\r\n", False)
        turn_end.run()

    bursts = max(1, n // 16)
    out["16x 1 key: total"] = best_ns(feed_burst, bursts, rounds)
    out["16x 1 key: parse"] = best_ns(parse_burst, bursts, rounds)
    out["16x 1 key: dispatch and run"] = best_ns(lambda: dispatch.execute_at(client, commands, 0), bursts, rounds)
    tags, datas = [b"tag"] * 16, [b"value"] * 16
    run_stream = bench.server.streams[b"hp:run"]
    out["16x 1 key: engine append_columns"] = best_ns(lambda: run_stream.append_columns(tags, datas, now),
                                                      bursts, rounds)
    out["16x 1 key: reply held, end of turn"] = best_ns(hold_and_release, bursts, rounds)
    bench.settle()
    return out


def print_stages(results: dict[str, float]) -> None:
    """The stages as a breakdown: each stage's own time, the connection's as the rest."""
    one = {
        "parse": results["TWRITE: parse"],
        "dispatch": results["TWRITE: dispatch and handler"] - results["TWRITE: handler"],
        "handler and write path": results["TWRITE: handler"] - results["TWRITE: engine append"],
        "engine append": results["TWRITE: engine append"],
    }
    one["connection (the rest)"] = results["TWRITE: total"] - results["TWRITE: parse"] \
        - results["TWRITE: dispatch and handler"]
    burst = {
        "parse": results["16x 1 key: parse"],
        "dispatch and run": results["16x 1 key: dispatch and run"] - results["16x 1 key: engine append_columns"],
        "engine append_columns": results["16x 1 key: engine append_columns"],
        "reply held, end of turn": results["16x 1 key: reply held, end of turn"],
    }
    burst["connection (the rest)"] = results["16x 1 key: total"] - sum(burst.values())
    print(f"one TWRITE k t v: {results['TWRITE: total']:.0f} ns; "
          + "; ".join(f"{name} {ns:.0f}" for name, ns in one.items()))
    print(f"16 TWRITE on one key, per read: {results['16x 1 key: total']:.0f} ns; "
          + "; ".join(f"{name} {ns:.0f}" for name, ns in burst.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20_000, help="commands per shape and round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--namespace", help="'tstream.' or '' (a tree from before the namespace); default: either")
    parser.add_argument("--base", metavar="PYTHON", help="another build's interpreter, run in turn with this one")
    parser.add_argument("--repeat", type=int, default=3, help="with --base: runs of each build")
    parser.add_argument("--stages", action="store_true",
                        help="where one TWRITE and one read of 16 spend their time (this build only)")
    args = parser.parse_args()
    if args.stages:
        print_stages(asyncio.run(_in_loop(stages, args.n, args.rounds, args.namespace)))
        return
    if not args.base:
        results = asyncio.run(_measure_in_loop(args.n, args.rounds, args.namespace))
        if args.json:
            print(json.dumps(results))
        else:
            for name, ns in results.items():
                print(f"{name:22} {ns:8.0f} ns/command")
        return
    builds = {"base": args.base, "this": sys.executable}
    best: dict[str, dict[str, float]] = {"base": {}, "this": {}}
    for _ in range(args.repeat):
        for build, python in builds.items():
            out = subprocess.run([python, os.path.abspath(__file__), "--json", "--n", str(args.n),
                                  "--rounds", str(args.rounds)], check=True, capture_output=True, text=True,
                                 cwd="/").stdout
            for name, ns in json.loads(out).items():
                best[build][name] = min(ns, best[build].get(name, ns))
    print("| shape | base ns/cmd | this ns/cmd | this/base |\n| --- | ---: | ---: | ---: |")
    for name, ns in best["this"].items():
        base = best["base"][name]
        print(f"| {name} | {base:.0f} | {ns:.0f} | {ns / base:.2f} |")


async def _measure_in_loop(n: int, rounds: int, namespace: str | None) -> dict[str, float]:
    return measure(n, rounds, namespace)  # the server wants a running loop (call_soon of the turn's end)


async def _in_loop(function, *args):
    return function(*args)


if __name__ == "__main__":
    main()
