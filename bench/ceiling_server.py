#!/usr/bin/env python3
"""The Python ceiling for bench/throughput.py: uvloop + hiredis and nothing else.

A server that parses requests with hiredis and answers a write (any command of 4
words, as ``TWRITE key tag value``) by appending its last word to a Python list
and replying the list's length, with no command table, engine, statistics or
limits.  Measured beside tstream and redis-server in the same run, it shows how
much of the gap to redis-server is Python's event loop and parsing (this server)
and how much is tstream's own work per command (the rest).  Not a server to use.

    .venv/bin/python bench/ceiling_server.py PORT

Besides writes it answers PING, DEL (empties the list), TINFO (the length, as
tstream's TINFO map) and CONFIG (an empty array, for redis-benchmark's probe).
"""

from __future__ import annotations

import asyncio
import sys

import hiredis
import uvloop


class Ceiling(asyncio.Protocol):
    entries: list[bytes] = []

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.reader = hiredis.Reader()

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        entries = self.entries
        out = []
        while (command := self.reader.gets()) is not False:
            if len(command) == 4:
                entries.append(command[3])
                out.append(b":%d\r\n" % len(entries))
                continue
            name = command[0].upper()
            if name == b"PING":
                out.append(b"+PONG\r\n")
            elif name == b"DEL":
                entries.clear()
                out.append(b":1\r\n")
            elif name == b"TINFO":
                out.append(b"*2\r\n$6\r\nlength\r\n:%d\r\n" % len(entries))
            else:
                out.append(b"*0\r\n")
        self.transport.write(b"".join(out))


async def serve(port: int) -> None:
    await asyncio.get_running_loop().create_server(Ceiling, "127.0.0.1", port)
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
