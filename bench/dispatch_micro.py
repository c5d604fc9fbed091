#!/usr/bin/env python3
"""In-process cost of the dispatcher's hot paths, without sockets: ns per command.

Runs the commands through ``commands.dispatch.execute_at`` on a Server built in
this process, with a stand-in connection (what the dispatcher and handlers read
of a ClientConnection), so that a change to the dispatch or write path can be
measured before and after without the noise of the network and the event loop:

- TWRITE key tag entry, one command at a time;
- the same pipelined by 16 (one ``twrite_run``);
- TACK of one pending offset (with the group reads that hand it out);
- group reads: 8 consumers each with a deferred ``TREAD ... GROUP``, then the end
  of the turn (BlockingRegistry.serve_deferred) that serves them;

each without and with an effect sink (a stand-in for the AOF that packs every
record, as persistence does).

    .venv/bin/python bench/dispatch_micro.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time

from tstream.commands.dispatch import execute_at
from tstream.persistence.framing import pack
from tstream.server.app import Server
from tstream.server.embed import make_config

OFFSET = re.compile(rb"\*3\r\n:(\d+)")


class Sink:
    """Packs every record as the AOF would, and keeps nothing."""

    def __init__(self, server) -> None:
        self.server = server
        self.count = 0

    def log(self, record: list) -> None:
        pack(record)
        self.count += 1


class Connection:
    """What the dispatcher and the handlers use of a ClientConnection."""

    def __init__(self, server) -> None:
        self.server = server
        self.protocol = 2
        self.gate = None
        self.user = None
        self.blocked = None
        self.replies = 0
        self.addr = "127.0.0.1:0"  # a command slower than slowlog-log-slower-than is logged with these
        self.name = b""
        self.multi = None  # not in MULTI (commands/transactions.py)
        self.multi_failed = False
        self.in_exec = False
        self.reply_mode = 0  # CLIENT REPLY ON
        self.pushed = None
        self.replica = None

    def unblock(self, reply: bytes) -> None:
        self.blocked = None
        self.replies += 1
        found = OFFSET.search(reply)
        self.offset = int(found.group(1)) if found else 0


def timed(fn, n: int) -> float:
    started = time.perf_counter_ns()
    fn(n)
    return (time.perf_counter_ns() - started) / n


def scenarios(server: Server) -> dict:  # noqa: C901 (over the limit when it came in)
    conn = Connection(server)
    single = [[b"TWRITE", b"bench:one", b"tag", b"x" * 16]]
    run16 = [[b"TWRITE", b"bench:run", b"tag", b"x" * 16] for _ in range(16)]

    def twrite(n):
        for _ in range(n):
            execute_at(conn, single, 0)

    def twrite_run(n):
        for _ in range(n // 16):
            execute_at(conn, run16, 0)

    def tack(n):
        # every consumer acks what its group read handed out
        for consumer in consumers:
            consumer.acks = []
        for _ in range(n // 8):
            execute_at(conn, feed8, 0)
            for consumer in consumers:
                consumer.offsets = None
                execute_at(consumer, ack_read, 0)
            server.blocking.serve_deferred()
            for consumer in consumers:
                execute_at(conn, [[b"TACK", b"bench:ack", b"g", b"%d" % consumer.offset]], 0)

    consumers = [Connection(server) for _ in range(8)]
    feed8 = [[b"TWRITE", b"bench:ack", b"tag", b"x" * 16] for _ in range(8)]
    ack_read = [[b"TREAD", b"bench:ack", b"-", b"1", b"GROUP", b"g"]]
    group_read = [[b"TREAD", b"bench:group", b"-", b"10", b"GROUP", b"g"]]
    feed = [[b"TWRITE", b"bench:group", b"tag", b"x" * 16] for _ in range(80)]

    def group_reads(n):
        for _ in range(n // 8):
            execute_at(conn, feed, 0)
            for consumer in consumers:
                execute_at(consumer, group_read, 0)
            server.blocking.serve_deferred()

    return {"TWRITE": twrite, "TWRITE x16 run": twrite_run, "TACK (+ its group read)": tack, "group read (8 per turn)": group_reads}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=64_000)
    args = parser.parse_args()
    for with_sink in (False, True):
        server = Server(make_config(save=""))
        if with_sink:
            server.aof = Sink(server)
        best: dict[str, float] = {}
        for _ in range(args.rounds):
            for name, fn in scenarios(server).items():
                ns = timed(fn, args.n)
                best[name] = min(best.get(name, ns), ns)
            server.keyspace.flush()
        label = "with an effect sink" if with_sink else "no sink"
        for name, ns in best.items():
            print(f"{label:20} {name:26} {ns:8.0f} ns/command")


if __name__ == "__main__":
    asyncio.run(main())
