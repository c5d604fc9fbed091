#!/usr/bin/env python3
"""Per-command cost of the server's hot path, in process: ns from ``data_received``
to the reply handed to the transport, for the hottest shapes.

A Server and a ClientConnection are built in this process with a stand-in
transport (it counts writes and drops them) and fed the exact bytes a client
sends; the event loop runs between rounds, so replies held to the end of a turn
are flushed as in the server.  Best of ``--rounds`` rounds of ``--n`` reads each,
per shape:

    TWRITE          one ``TWRITE k t v`` per read (an unpipelined client)
    TREAD           one ``TREAD k 1 1`` per read
    TACK            one ``TACK k g <offset>`` per read, on entries a group read handed out
    16 TWRITE 1 key a read of 16 ``TWRITE k t v`` (redis-benchmark -P 16), per command
    16 TWRITE keys  a read of 16 ``TWRITE k<i> t v`` on 16 keys, per command

It also runs against an older tree whose packages are not under ``tstream.``
(``--namespace ''`` from that tree's directory, with its venv), so a change can be
compared with a base build in the same session:

    .venv/bin/python bench/hotpath.py [--rounds 9] [--n 50000]
    (cd /tmp/base && .venv/bin/python /path/to/bench/hotpath.py --namespace '')
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
import time

# bench/ holds a persistence.py: a tree from before the namespace must not import it.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]


class Transport(asyncio.Transport):
    """What the connection uses of a transport; writes are counted and dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data) -> None:
        self.writes += 1

    def writelines(self, chunks) -> None:
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


def encode(*words) -> bytes:
    out = [b"*%d\r\n" % len(words)]
    for word in words:
        word = word if isinstance(word, bytes) else str(word).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(word), word))
    return b"".join(out)


async def measure(namespace: str, rounds: int, n: int) -> dict[str, float]:
    app = importlib.import_module(namespace + "server.app")
    connection = importlib.import_module(namespace + "server.connection")
    config_module = importlib.import_module(namespace + "server.config")
    config = config_module.Config()
    config.set("save", "")
    server = app.Server(config)
    client = connection.ClientConnection(server)
    client.connection_made(Transport())

    async def best(reads: list[bytes], commands_per_read: int) -> float:
        fastest = float("inf")
        for _ in range(rounds):
            started = time.perf_counter()
            for data in reads:
                client.data_received(data)
            fastest = min(fastest, (time.perf_counter() - started) / (len(reads) * commands_per_read))
            await asyncio.sleep(0)  # replies held to the end of the turn go now
        return fastest * 1e9

    results = {}
    results["TWRITE"] = await best([encode("TWRITE", "k", "t", "value")] * n, 1)
    results["TREAD"] = await best([encode("TREAD", "k", 1, 1)] * n, 1)
    # TACK: entries handed out by group reads (served at the end of each turn), then acked one by one.
    total = rounds * n
    client.data_received(encode("TWRITE", "acks", "ENTRIES", *(["t", "v"] * total)))
    await asyncio.sleep(0)
    for _ in range(0, total, 10_000):
        client.data_received(encode("TREAD", "acks", 1, 10_000, "GROUP", "g", "RETRY", 600_000, 1_200_000))
        await asyncio.sleep(0)
    acks = [encode("TACK", "acks", "g", offset) for offset in range(1, total + 1)]
    fastest = float("inf")
    for r in range(rounds):
        chunk = acks[r * n:(r + 1) * n]
        started = time.perf_counter()
        for data in chunk:
            client.data_received(data)
        fastest = min(fastest, (time.perf_counter() - started) / len(chunk))
        await asyncio.sleep(0)
    results["TACK"] = fastest * 1e9
    burst = encode("TWRITE", "k", "t", "value") * 16
    results["16 TWRITE 1 key"] = await best([burst] * (n // 16), 16)
    keys = b"".join(encode("TWRITE", f"k{i}", "t", "value") for i in range(16))
    results["16 TWRITE keys"] = await best([keys] * (n // 16), 16)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--namespace", default="tstream.", help="'' for a tree from before the tstream namespace")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--n", type=int, default=50_000)
    args = parser.parse_args()
    results = asyncio.run(measure(args.namespace, args.rounds, args.n))
    for shape, ns in results.items():
        print(f"{shape:16s} {ns:7.0f} ns/command")


if __name__ == "__main__":
    main()
