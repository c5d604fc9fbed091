"""Embedding tstream in a Python program, talking to it with redis-py.

    python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/python examples/embedded.py

(``pip install -e .`` brings redis-py too; tstream imports as ``tstream.*`` only once installed.)

1. In an asyncio program: ``async with tstream_server(...)`` serves on the
   program's own event loop; redis.asyncio talks to it.
2. In a synchronous program (or a test suite): ``with ServerThread(...)`` runs
   the server in a background thread; plain redis.Redis talks to it.

Both bind a free port (``port=0``) and keep their data in a directory: the
second part finds what the first one wrote, loaded from the final snapshot
written when the first server stopped.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path

import redis
import redis.asyncio

from tstream.client import AsyncTStream, TStream
from tstream.server.embed import ServerThread, tstream_server


async def asyncio_program(data_dir: str) -> None:
    async with tstream_server(port=0, dir=data_dir, appendonly=False) as srv:
        print(f"[asyncio] tstream serving on {srv.url}")
        r = redis.asyncio.Redis(port=srv.port, protocol=3)
        first = await r.execute_command("TWRITE", "orders", "ENTRIES",
                                        "orders.eu.created", b'{"id": 1}',
                                        "orders.us.created", b'{"id": 2}')
        await r.execute_command("TWRITE", "orders", "orders.eu.paid", b'{"id": 1}')
        print(f"[asyncio] wrote offsets {first}..{first + 2}")

        # The typed helper on the same connection: a consumer group with retries.
        ts = AsyncTStream(r)
        batch = await ts.tread("orders", "-", 10, group="billing", retry=(30_000, 600_000))
        for entry in batch:
            print(f"[asyncio] billing got {entry.offset} {entry.tag.decode()} {entry.data.decode()}")
        acked = await ts.tack("orders", "billing", *(entry.offset for entry in batch))
        print(f"[asyncio] acknowledged {acked}")
        await r.aclose()
    # Leaving the block stopped the server: clients closed, final snapshot written.
    print(f"[asyncio] stopped; files in {data_dir}: {sorted(p.name for p in Path(data_dir).iterdir())}")


def sync_program(data_dir: str) -> None:
    with ServerThread(port=0, dir=data_dir) as srv:
        print(f"[thread]  tstream serving on {srv.url} (loaded from {data_dir})")
        r = redis.Redis(port=srv.port, decode_responses=True)
        print("[thread] ", r.execute_command("TREAD", "orders", "-", 10))
        ts = TStream(r)
        info = ts.tinfo("orders")
        print(f"[thread]  orders: {info.length} entries, offsets {info.first}..{info.last}, "
              f"groups {ts.tinfo_groups('orders')}")
        msg = ts.dget_subject("orders", "orders.eu.>")
        print(f"[thread]  newest orders.eu.> message: seq {msg.seq} {msg.subject} at {msg.time.isoformat()}")
        r.close()
    print("[thread]  stopped")


def main() -> None:
    logging.basicConfig(level=logging.WARNING)  # the host program owns logging
    with tempfile.TemporaryDirectory(prefix="tstream-example-") as data_dir:
        asyncio.run(asyncio_program(data_dir))
        sync_program(data_dir)


if __name__ == "__main__":
    main()
