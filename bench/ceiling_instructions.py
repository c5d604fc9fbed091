#!/usr/bin/env python3
"""Instructions per message of bench/ceiling_server.py in bench/instructions.py's
``group_wake`` step, to set beside tstream's figure for that shape.

The step is group_wake's (bench/instructions.py ``_group_wake_step``), on fake
transports (no sockets): three producer connections' unpipelined
``TWRITE k tag <100 bytes>``, the end of the turn waking the head of four
consumers blocked in ``TREAD k - 10 GROUP g RETRY 30000 600000 BLOCK 1000``
with the three entries, then the consumer woken one step before sends ``TACK``
of its three offsets and blocks again.  Three messages a step.  It runs in
uvloop's loop, as the server does, and the end of a turn is one iteration of it
(``asyncio.sleep(0)``: the server's ``call_soon`` of its end of turn runs, with
nothing to poll), counted in the harness's figure too; group_wake runs tstream
in asyncio's loop and calls its end of turn directly.

Like group_wake's, the figure includes the harness's own work (building the
requests, parsing the woken consumer's reply with hiredis): it is counted alone
too (canned replies, no server), to be taken off both figures.

    PYTHONHASHSEED=0 .venv/bin/python bench/ceiling_instructions.py [--small 200] [--large 800]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
from collections import deque
from pathlib import Path

import hiredis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import callgrind  # noqa: E402
import ceiling_server as ceiling  # noqa: E402
from hotpath import request  # noqa: E402

WARMUP = 300
CANNED_WAKE = b"*3\r\n" + b"".join(b"*3\r\n:%d\r\n$3\r\ntag\r\n$100\r\n%s\r\n" % (i, b"x" * 100) for i in (1, 2, 3))


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.write = self.written.append


class Canned:
    """The harness alone: a connection that answers TACK and nothing else."""

    def __init__(self, written: list[bytes]) -> None:
        self.written = written

    def data_received(self, data: bytes) -> None:
        if b"TACK" in data:
            self.written.append(b":3\r\n")


def run(count: int, harness: bool) -> None:  # noqa: C901 (group_wake's step, checks included)
    async def main() -> None:  # noqa: C901
        def connect():
            transport = Transport()
            if harness:
                return Canned(transport.written).data_received, transport.written
            conn = ceiling.GroupCeiling()
            conn.connection_made(transport)
            return conn.data_received, transport.written

        async def turn_end() -> None:
            # One loop iteration: the server's end of turn (call_soon) runs, and so do
            # uvloop's handle closes (a cancelled BLOCK timer is freed only then: with
            # end_of_turn called directly they piled up, and so did the GC's work).
            await asyncio.sleep(0)

        connect()[0](request(b"TREAD", b"w:k", b"-", b"0", b"GROUP", b"g"))
        await turn_end()
        producers = [connect() for _ in range(3)]
        consumers = [connect() for _ in range(4)]
        write = request(b"TWRITE", b"w:k", b"tag", b"x" * 100)
        read = request(b"TREAD", b"w:k", b"-", b"10", b"GROUP", b"g", b"RETRY", b"30000", b"600000",
                       b"BLOCK", b"1000")
        for feed, _ in consumers:
            feed(read)
            await turn_end()
        reader = hiredis.Reader()
        queue = deque(consumers)
        woken: list = []

        async def step() -> None:
            for feed, written in producers:
                feed(write)
                written.clear()
            await turn_end()  # wakes the head consumer
            consumer = queue.popleft()
            if harness:
                consumer[1].append(CANNED_WAKE)
            reader.feed(b"".join(consumer[1]))
            consumer[1].clear()
            entries = reader.gets()
            if len(entries) != 3:
                raise SystemExit(f"the woken consumer got {entries!r}")
            ack = request(b"TACK", b"w:k", b"g", *(b"%d" % entry[0] for entry in entries))
            if woken:
                (feed, written), previous_ack = woken.pop()
                feed(previous_ack)
                await turn_end()
                if written != [b":3\r\n"]:
                    raise SystemExit(f"TACK replied {written!r}")
                written.clear()
                feed(read)
                await turn_end()  # finds nothing: parks at the back of the queue
                if written:
                    raise SystemExit(f"the consumer's read did not block: {written!r}")
                queue.append((feed, written))
            woken.append((consumer, ack))

        for _ in range(WARMUP + count):
            await step()

    import uvloop
    uvloop.run(main())


def per_message(small: int, large: int, harness: bool) -> float:
    argv = [sys.executable, str(Path(__file__).resolve())] + (["--harness"] if harness else [])
    counts = [callgrind.total([*argv, "--run", str(n)], f"ceiling {n}") for n in (small, large)]
    return (counts[1] - counts[0]) / (large - small) / 3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=200)
    ap.add_argument("--large", type=int, default=800)
    ap.add_argument("--harness", action="store_true", help=argparse.SUPPRESS)  # with --run: no server
    ap.add_argument("--run", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run is not None:
        run(args.run, args.harness)
        return
    if not os.environ.get("TSTREAM_BENCH_NO_ASLR") and shutil.which("setarch"):  # as bench/instructions.py
        os.environ["TSTREAM_BENCH_NO_ASLR"] = "1"
        os.execvp("setarch", ["setarch", "-R", sys.executable, *sys.argv])
    for harness in (False, True):
        label = "harness alone (canned replies)" if harness else "ceiling server + harness"
        print(f"group_wake, {label}: {per_message(args.small, args.large, harness):,.0f} instructions/message",
              flush=True)


if __name__ == "__main__":
    main()
