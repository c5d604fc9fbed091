#!/usr/bin/env python3
"""Server cost per message of a DGET page against a TREAD page of the same
messages (issue #19: DGET pages at most 1.5x TREAD's), in process.

    .venv/bin/python bench/pages.py                  # CPU time, interleaved rounds
    .venv/bin/python bench/pages.py --instructions   # callgrind instruction counts
    .venv/bin/python bench/pages.py --base /tmp/base/.venv/bin/python --instructions

A key of ``--entries`` entries (100 tags, 99-byte payloads, written in
pipelined bursts as a client would) is read page by page, every page of
``--page`` messages from the next offset on, wrapping around:

- ``tread``: ``TREAD key offset n`` (``[offset, tag, data]`` per message);
- ``dget``:  ``DGET key SEQ offset BATCH n`` (a message map per message with
  subject, seq, RFC 3339 time, data, num_pending, last_seq, then the
  end-of-batch map);
- ``mlast``: ``MLAST key SUBJECTS t.*`` (the newest message of each of the 100
  tags: a page of 100 messages found through the subject index);
- ``dget1`` / ``tread1``: ``dget`` / ``tread`` with a decoded-block cache of 2
  blocks, so that every page decompresses its blocks afresh: each page is a
  *first* read of its blocks (a tail reader's cost).  In ``dget`` the pages
  are read again and again (the 200 warm-up pages read 5,000 entries 4 times
  over), so while the key's blocks fit in the cache, blocks kept rendered
  serve them (with 20,000 entries, 580 blocks, the default 512-block cache
  evicts each block before it is read again: every read is a first one);
- ``dget2``: every ``dget`` page read twice in a row, with a cache that holds
  the whole key: the cost of a block read exactly twice (its first read, then
  the one that renders it and is served from its pieces), averaged over both.
  Give ``--entries`` of at least 100 x (200 + ``--large``) / 2 (e.g. 40,000
  with ``--large 200``, pages of 100) so that no page is read a third time.

Each request goes through ``ClientConnection.data_received`` on the fake
transport of bench/hotpath.py (parse, dispatch, the handler, the encoding, the
write), so the figure is the server's own Python per message, without sockets.

The timed mode runs the shapes in turn, ``--rounds`` times, and prints every
round's CPU ns per message (process time: load from other processes mostly drops
out) and the median ratio dget/tread.  ``--instructions`` runs each shape
``--small`` and ``--large`` pages in two processes under valgrind's callgrind
(hash randomization off) and prints the difference per message: a figure the
machine's load does not move.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import callgrind

HERE = Path(__file__).resolve().parent
SHAPES = ("tread", "dget", "mlast")
FIRST_READS = {"dget1": "dget", "tread1": "tread"}  # a 2-block cache: every page decompresses
PAYLOAD = b'{"id": 12345, "user": "u621", "amount": 345, "note": "some text to make the entry a little longer"}'


def make_bench(entries: int, protocol: int, shape: str = ""):
    sys.path.insert(0, str(HERE))
    import hotpath

    bench = hotpath.Bench()
    out: list[bytes] = []
    bench.transport.write = lambda data: out.append(bytes(data))  # type: ignore[method-assign]
    request = hotpath.request
    if protocol == 3:
        bench.feed(request(b"HELLO", b"3"))
    for first in range(0, entries, 16):
        bench.feed(b"".join(request(b"TWRITE", b"pg", b"t.%d" % ((first + i) % 100), PAYLOAD)
                            for i in range(min(16, entries - first))))
        bench.turn_end()
    bench.turn_end()
    out.clear()
    if shape in FIRST_READS:
        bench.server.keyspace.cache.set_limits(2, 1 << 30)
    elif shape == "dget2":
        bench.server.keyspace.cache.set_limits(1 << 20, 1 << 40)
    return bench, out, request


def page_requests(shape: str, entries: int, page: int, request) -> list[bytes]:
    if shape == "dget2":
        return [req for req in page_requests("dget", entries, page, request) for req in (req, req)]
    shape = FIRST_READS.get(shape, shape)
    if shape == "mlast":
        return [request(b"MLAST", b"pg", b"SUBJECTS", b"t.*")]
    verb = ((lambda o: request(b"TREAD", b"pg", b"%d" % o, b"%d" % page)) if shape == "tread"
            else (lambda o: request(b"DGET", b"pg", b"SEQ", b"%d" % o, b"BATCH", b"%d" % page)))
    return [verb(o) for o in range(1, entries - page + 2, page)]


def per_page(shape: str, page: int) -> int:
    return 100 if shape == "mlast" else page


def workload(shape: str, count: int, entries: int, page: int, protocol: int) -> None:
    """``count`` pages of ``shape`` after a warm-up, in this process (under callgrind)."""

    async def main() -> None:
        bench, out, request = make_bench(entries, protocol, shape)
        reqs = page_requests(shape, entries, page, request)
        feed, turn_end = bench.feed, bench.turn_end
        for i in range(200 + count):
            feed(reqs[i % len(reqs)])
            turn_end()
            out.clear()

    asyncio.run(main())


def count_instructions(python: str, shape: str, count: int, args) -> int:
    return callgrind.total([python, str(Path(__file__).resolve()), "--run", shape, str(count),
                            "--entries", str(args.entries), "--page", str(args.page),
                            "--protocol", str(args.protocol)], shape)


def instructions(args) -> None:
    builds = {"this": args.this} if not args.base else {"base": args.base, "this": args.this}
    figures: dict[str, dict[str, float]] = {}
    for name, python in builds.items():
        for shape in args.shapes.split(","):
            small = count_instructions(python, shape, args.small, args)
            large = count_instructions(python, shape, args.large, args)
            figures.setdefault(name, {})[shape] = (large - small) / ((args.large - args.small)
                                                                     * per_page(shape, args.page))
    print(f"instructions per message (pages of {args.page}, RESP{args.protocol}, "
          f"{args.large} - {args.small} pages, PYTHONHASHSEED=0)")
    print("| shape | " + " | ".join(builds) + " |")
    print("| --- |" + " ---: |" * len(builds))
    for shape in args.shapes.split(","):
        print(f"| {shape} | " + " | ".join(f"{figures[name][shape]:,.0f}" for name in builds) + " |")
    for name in builds:
        f = figures[name]
        ratios = ", ".join(f"{shape}/tread {f[shape] / f['tread']:.2f}x" for shape in f if shape != "tread")
        print(f"{name}: {ratios}")


def timed(args) -> None:
    async def main() -> None:
        bench, out, request = make_bench(args.entries, args.protocol)
        feed, turn_end = bench.feed, bench.turn_end
        shapes = args.shapes.split(",")
        reqs = {shape: page_requests(shape, args.entries, args.page, request) for shape in shapes}
        runs: dict[str, list[float]] = {shape: [] for shape in shapes}
        clock = time.process_time_ns
        print("load average before:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
        for _ in range(args.rounds):
            for shape in shapes:
                pages = reqs[shape]
                for data in pages[:20]:  # warm
                    feed(data)
                    turn_end()
                    out.clear()
                n = 0
                started = clock()
                while n < args.pages:
                    feed(pages[n % len(pages)])
                    turn_end()
                    out.clear()
                    n += 1
                runs[shape].append((clock() - started) / (n * per_page(shape, args.page)))
        print("load average after:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
        print(f"CPU ns per message (pages of {args.page}, RESP{args.protocol}, {args.pages} pages a round)")
        for shape in shapes:
            print(f"{shape}: median {statistics.median(runs[shape]):,.0f}; runs "
                  + ", ".join(f"{x:,.0f}" for x in runs[shape]))
        for shape in shapes:
            if shape != "tread" and "tread" in runs:
                ratios = [a / b for a, b in zip(runs[shape], runs["tread"])]
                print(f"{shape}/tread: median {statistics.median(ratios):.2f}x; runs "
                      + ", ".join(f"{x:.2f}" for x in ratios))

    asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--page", type=int, default=100)
    ap.add_argument("--protocol", type=int, choices=(2, 3), default=2)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--pages", type=int, default=2000, help="pages per shape and round (timed mode)")
    ap.add_argument("--instructions", action="store_true")
    ap.add_argument("--base", help="python of another build's venv (instruction counts of both)")
    ap.add_argument("--this", default=sys.executable)
    ap.add_argument("--small", type=int, default=100)
    ap.add_argument("--large", type=int, default=400)
    ap.add_argument("--run", nargs=2, metavar=("SHAPE", "COUNT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        workload(args.run[0], int(args.run[1]), args.entries, args.page, args.protocol)
    elif args.instructions:
        instructions(args)
    else:
        timed(args)


if __name__ == "__main__":
    main()
