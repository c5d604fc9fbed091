#!/usr/bin/env python3
"""100,000 pipelined one-entry reads in one write: ``TREAD key o 1`` on tstream
against ``XRANGE key o-1 + COUNT 1`` on redis-server (issue #19: total time <=
redis's).

    .venv/bin/python bench/pipelined_reads.py [--reads 100000] [--runs 5]

Each server holds one key of ``--reads`` entries (tag/field ``t``, a 99-byte
payload; redis ids ``o-1`` for offset ``o``).  One client sends every read, one
per offset, in a single ``sendall`` (from a thread, so that the replies are read
while the requests are still being sent: a server that stops reading while its
replies wait to be read does not deadlock the benchmark) and the clock stops at
the last byte of the last reply.  The client does not parse the timed replies:
it counts bytes up to the reply length of an untimed first pass, whose replies
are parsed (hiredis) and checked, so that the client's Python is not in the
figure.  The servers take turns, ``--runs`` rounds; the figure is the median of
the per-round ratios tstream/redis, every run listed, with the load average
before and after.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import threading
import time

import hiredis
from common import encode, servers

PAYLOAD = b'{"id": 12345, "user": "u621", "amount": 345, "note": "some text to make the entry a little longer"}'


def fill(port: int, kind: str, n: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    reader = hiredis.Reader()
    for first in range(1, n + 1, 1000):
        last = min(first + 1000, n + 1)
        if kind == "tstream":
            data = b"".join(encode("TWRITE", "pr", "t", PAYLOAD) for _ in range(first, last))
        else:
            data = b"".join(encode("XADD", "pr", b"%d-1" % o, "t", PAYLOAD) for o in range(first, last))
        sock.sendall(data)
        got = 0
        while got < last - first:
            reply = reader.gets()
            if reply is False:
                reader.feed(sock.recv(1 << 20))
                continue
            if isinstance(reply, hiredis.ReplyError):
                raise RuntimeError(reply)
            got += 1
    sock.close()


def requests(kind: str, n: int) -> bytes:
    if kind == "tstream":
        return b"".join(encode("TREAD", "pr", b"%d" % o, "1") for o in range(1, n + 1))
    return b"".join(encode("XRANGE", "pr", b"%d-1" % o, "+", "COUNT", "1") for o in range(1, n + 1))


def burst(port: int, payload: bytes, expect: int | None, n: int) -> tuple[float, int]:
    """Send ``payload`` in one sendall; (seconds to the last reply byte, reply bytes)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sender = threading.Thread(target=sock.sendall, args=(payload,))
    reader = hiredis.Reader() if expect is None else None
    got = replies = 0
    started = time.perf_counter()
    sender.start()
    recv = sock.recv
    while True:
        chunk = recv(1 << 20)
        if not chunk:
            raise RuntimeError("server closed the connection")
        got += len(chunk)
        if reader is None:
            if got >= expect:
                break
        else:
            reader.feed(chunk)
            while (reply := reader.gets()) is not False:
                if isinstance(reply, hiredis.ReplyError) or len(reply) != 1:
                    raise RuntimeError(f"unexpected reply {reply!r}")
                replies += 1
            if replies == n:
                break
    elapsed = time.perf_counter() - started
    sender.join()
    sock.close()
    return elapsed, got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reads", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    n = args.reads
    print("load average before:", " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    with servers(("tstream", []), ("redis", [])) as (tstream, redis):
        ports = {"tstream": tstream.port, "redis": redis.port}
        payloads = {}
        expect = {}
        for kind, port in ports.items():
            fill(port, kind, n)
            payloads[kind] = requests(kind, n)
            _, expect[kind] = burst(port, payloads[kind], None, n)  # checked, untimed
        times: dict[str, list[float]] = {"tstream": [], "redis": []}
        for r in range(args.runs):
            order = ("tstream", "redis") if r % 2 == 0 else ("redis", "tstream")
            for kind in order:
                elapsed, got = burst(ports[kind], payloads[kind], expect[kind], n)
                if got != expect[kind]:
                    raise RuntimeError(f"{kind}: {got} reply bytes, expected {expect[kind]}")
                times[kind].append(elapsed)
            print(f"run {r + 1}: tstream {times['tstream'][-1]:.3f} s, redis {times['redis'][-1]:.3f} s", flush=True)
    print("load average after:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    ratios = [a / b for a, b in zip(times["tstream"], times["redis"])]
    print(f"{n:,} reads in one write: tstream median {statistics.median(times['tstream']):.3f} s "
          f"({', '.join(f'{x:.3f}' for x in times['tstream'])}); redis median {statistics.median(times['redis']):.3f} s "
          f"({', '.join(f'{x:.3f}' for x in times['redis'])})")
    print(f"tstream/redis: median {statistics.median(ratios):.2f}x ({', '.join(f'{x:.2f}' for x in ratios)})")


if __name__ == "__main__":
    sys.exit(main())
