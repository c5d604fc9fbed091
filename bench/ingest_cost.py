#!/usr/bin/env python3
"""Server-side cost per message of pipelined ``TWRITE``, ``TWRITE ... MSGID`` and
``BATCH ... FAST``, in process, with the AOF on (``appendfsync no``): what the
server's own Python costs per message, without sockets and without the load of
the machine's other work.

    .venv/bin/python bench/ingest_cost.py                   # CPU ns per message, interleaved
    .venv/bin/python bench/ingest_cost.py --instructions    # instructions per message (callgrind)

Each shape is a read of 64 commands on one key fed through
``ClientConnection.data_received`` on the fake transport of bench/hotpath.py,
then the end of the loop turn (replies released, the turn's AOF records packed
and written):

- ``twrite``: 64 ``TWRITE key orders.created <100 bytes>``;
- ``msgid``: the same with ``MSGID id-N`` (every id new);
- ``fast``: 64 messages of one fast batch, ``BATCH key b N orders.created <100 bytes> FAST 64 ok``.

``--instructions`` runs each shape ``--small`` and ``--large`` times in two
processes under valgrind's callgrind (hash randomization off) and divides the
difference of the totals by the messages in between (start-up, warm-up and
the building of the requests, the same in both processes, cancel out), as
bench/instructions.py does.  The CPU figure is the median over
``--rounds`` interleaved rounds (process time, so other processes mostly drop
out; the machine's caches do not).  ``--prefill 1000000`` first writes a
million messages per shape: the MSGID window then holds a million ids, as at
the end of bench/fast_ingest.py's timed run (its probes miss the caches).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import callgrind

HERE = Path(__file__).resolve().parent
SHAPES = ("twrite", "msgid", "fast")
PER_READ = 64
PAYLOAD = b"x" * 100
SUBJECT = b"orders.created"


class Shapes:
    """One embedded server with an AOF and one connection per shape."""

    def __init__(self, directory: str, aof: bool = True) -> None:
        sys.path.insert(0, str(HERE))
        import hotpath

        app, connection, config_module = hotpath.server_modules()
        config = config_module.Config()
        config.set("save", "")
        config.set("dir", directory)
        config.set("appendonly", "yes" if aof else "no")
        config.set("appendfsync", "no")
        self.server = app.Server(config)
        self.server.persistence.load()
        self.server.persistence.attach()
        self.request = hotpath.request
        self.clients = {}
        for shape in SHAPES:
            client = connection.ClientConnection(self.server)
            client.connection_made(hotpath.CountingTransport())
            self.clients[shape] = client
        self.next = dict.fromkeys(SHAPES, 0)

    def reads(self, shape: str, count: int) -> list[bytes]:
        """``count`` reads of ``shape``, continuing its ids and batch-seqs."""
        request, key = self.request, b"cost:" + shape.encode()
        out = []
        for _ in range(count):
            n = self.next[shape]
            if shape == "twrite":
                data = request(b"TWRITE", key, SUBJECT, PAYLOAD) * PER_READ
            elif shape == "msgid":
                data = b"".join(request(b"TWRITE", key, SUBJECT, PAYLOAD, b"MSGID", b"id-%d" % (n + i))
                                for i in range(PER_READ))
            else:
                data = b"".join(request(b"BATCH", key, b"b", b"%d" % (n + i + 1), SUBJECT, PAYLOAD, b"FAST",
                                        b"64", b"ok") for i in range(PER_READ))
            self.next[shape] = n + PER_READ
            out.append(data)
        return out

    def run(self, shape: str, reads: list[bytes]) -> None:
        feed, turn_end = self.clients[shape].data_received, self.server.turn_end.run
        for data in reads:
            feed(data)
            turn_end()

    def set_msgid_window(self, window_ms: int) -> None:
        """The twrite and msgid shapes' streams made (a read each) and the msgid
        stream's duplicate window set to ``window_ms`` (bench/msgid_cost.py and
        msgid_perf.py compare those two shapes)."""
        for shape in ("twrite", "msgid"):
            self.run(shape, self.reads(shape, 1))
        self.clients["msgid"].data_received(self.request(b"TCONFIG", b"cost:msgid", b"SET",
                                                         b"duplicate_window_ms", b"%d" % window_ms))
        self.server.turn_end.run()


    def parse(self, reads: list[bytes]) -> None:
        """Only the parse of each read (``RequestParser.read_many``)."""
        from tstream.resp.parser import RequestParser
        read_many = RequestParser().read_many
        for data in reads:
            if read_many(data) is None:
                raise SystemExit("read_many did not parse a read")

    def execute(self, shape: str, parsed: list[list]) -> None:
        """Only the execution of each parsed read (``commands.dispatch.execute_at``:
        the run handler, the commit of its effects) and the end of the turn."""
        from tstream.commands.dispatch import execute_at
        client, turn_end = self.clients[shape], self.server.turn_end.run
        for commands in parsed:
            execute_at(client, commands, 0)
            turn_end()


BUILT = 400  # reads built by every --run, whatever its count: the building's instructions cancel out
STAGES = ("all", "parse", "execute", "execute-noaof")


def workload(shape: str, count: int, stage: str = "all") -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory() as directory:
            shapes = Shapes(directory, aof=stage != "execute-noaof")
            reads = shapes.reads(shape, 100 + max(count, BUILT))  # (ids and batch-seqs formatted here)
            if stage == "parse":
                shapes.parse(reads[:100])
                shapes.parse(reads[100:100 + count])
                return
            if stage.startswith("execute"):
                from tstream.resp.parser import RequestParser
                parsed = [RequestParser().read_many(data) for data in reads]
                shapes.execute(shape, parsed[:100])
                shapes.execute(shape, parsed[100:100 + count])
                return
            shapes.run(shape, reads[:100])
            shapes.run(shape, reads[100:100 + count])
    asyncio.run(main())


def count_instructions(shape: str, count: int, stage: str = "all") -> int:
    return callgrind.total([sys.executable, str(Path(__file__).resolve()), "--run", shape, str(count), stage],
                           shape)


def cpu_ns(rounds: int, reads: int, prefill: int = 0) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {shape: [] for shape in SHAPES}

    async def main() -> None:
        with tempfile.TemporaryDirectory() as directory:
            shapes = Shapes(directory)
            for shape in SHAPES:
                shapes.run(shape, shapes.reads(shape, 100))
                for done in range(0, prefill, PER_READ * 256):  # (in parts of 256 reads: their bytes not all kept)
                    shapes.run(shape, shapes.reads(shape, max(1, min(256, (prefill - done) // PER_READ))))
            for rnd in range(rounds):
                order = SHAPES if rnd % 2 == 0 else SHAPES[::-1]
                for shape in order:
                    data = shapes.reads(shape, reads)
                    started = time.process_time_ns()
                    shapes.run(shape, data)
                    figures[shape].append((time.process_time_ns() - started) / (reads * PER_READ))
    asyncio.run(main())
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instructions", action="store_true", help="count instructions with callgrind")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reads", type=int, default=300, help="reads of 64 per shape and round (CPU mode)")
    ap.add_argument("--small", type=int, default=50)
    ap.add_argument("--large", type=int, default=250)
    ap.add_argument("--stages", action="store_true",
                    help="with --instructions: also the parse alone, the execution alone, with and without the AOF")
    ap.add_argument("--prefill", type=int, default=0,
                    help="CPU mode: messages written per shape before the rounds (1000000: the MSGID window of "
                         "bench/fast_ingest.py's end, a million ids, whose probes miss the caches)")
    ap.add_argument("--run", nargs="+", metavar="SHAPE COUNT [STAGE]", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        workload(args.run[0], int(args.run[1]), args.run[2] if len(args.run) > 2 else "all")
        return
    print(f"load average at start: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    if args.instructions:
        per = {}
        for shape in SHAPES:
            per[shape] = ((count_instructions(shape, args.large) - count_instructions(shape, args.small))
                          / ((args.large - args.small) * PER_READ))
        print("| shape | instructions/message | vs twrite |\n| --- | ---: | ---: |")
        for shape in SHAPES:
            print(f"| {shape} | {per[shape]:,.0f} | {per[shape] / per['twrite']:.2f} |")
        if args.stages:
            print("\n| shape | " + " | ".join(STAGES[1:]) + " | connection (all - parse - execute) | AOF (execute - noaof) |")
            print("| --- |" + " ---: |" * (len(STAGES) + 1))
            for shape in SHAPES:
                stage = {name: (count_instructions(shape, args.large, name) - count_instructions(shape, args.small, name))
                         / ((args.large - args.small) * PER_READ) for name in STAGES[1:]}
                rest = per[shape] - stage["parse"] - stage["execute"]
                aof = stage["execute"] - stage["execute-noaof"]
                print(f"| {shape} | " + " | ".join(f"{v:,.0f}" for v in stage.values()) + f" | {rest:,.0f} | {aof:,.0f} |",
                      flush=True)
    else:
        figures = cpu_ns(args.rounds, args.reads, args.prefill)
        print("| shape | CPU ns/message (median) | vs twrite | rounds |\n| --- | ---: | ---: | --- |")
        base = statistics.median(figures["twrite"])
        for shape in SHAPES:
            med = statistics.median(figures[shape])
            print(f"| {shape} | {med:,.0f} | {med / base:.2f} | {', '.join(f'{v:,.0f}' for v in figures[shape])} |")
    print(f"load average at end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
