#!/usr/bin/env python3
"""The Python ceiling for bench/throughput.py and bench/groups.py: uvloop + hiredis and nothing else.

A server that parses requests with hiredis, keeps each key's entries in a Python list
and does the least a server must do to run the two benchmarks' commands correctly,
with no command table, engine, statistics, limits or persistence.  Measured beside
tstream and redis-server in the same run, it shows how much of the gap to
redis-server is Python's event loop and parsing (this server) and how much is
tstream's own work per command (the rest).  Not a server to use.

    .venv/bin/python bench/ceiling_server.py PORT            # bench/throughput.py's
    .venv/bin/python bench/ceiling_server.py PORT --groups   # bench/groups.py's

Two servers in one file.  Without ``--groups`` (bench/throughput.py): any command of
4 words (``TWRITE key tag value``) appends its last word to one Python list and
replies the list's length; PING, DEL (empties the list), TINFO (the length, as
tstream's TINFO map) and CONFIG (an empty array, for redis-benchmark's probe) are
answered; nothing else is looked at.  That is the least per write, the bound the
throughput rows are read against (a per-key lookup and a kept tag, as below, cost
it ~18% at ``-P 16``: 945k -> 770k req/s, 2026-11-28).  With ``--groups``
(bench/groups.py), the consumer-group loop, with replies shaped as tstream's (byte
for byte where redis-py parses them):

- ``TWRITE key tag payload``: appends the request's words to the key's list and
  replies the list's length (the entry's offset, from 1).  No ids, no limits, no
  deduplication, no other form of TWRITE.
- ``TREAD key START COUNT GROUP g [RETRY a b] [BLOCK ms]``: the group's reader.  The
  group (created by the first read of it, from the key's start: ``START`` is not
  read) keeps the offset of the next entry it has not delivered, and the offsets
  delivered and not acknowledged (a set).  The read hands out up to COUNT
  undelivered entries (``[offset, tag, payload]`` each) at once; with none and
  BLOCK it parks the connection at the back of the group's FIFO of waiters,
  which the end of the loop turn that wrote to the key serves (head first, each
  waiter up to its COUNT: ``loop.call_soon`` once per turn, as Redis and tstream
  serve blocked clients before they sleep).  A read that finds entries (or
  arrives behind such a read in the same turn) is served at the end of its turn
  too, after the FIFO's, in arrival order, with everything the turn wrote: tstream's
  policy (server/turns.py), which makes the batches bigger; at the BLOCK timeout
  (``loop.call_later``) it replies the null reply (RESP3 ``_``, RESP2 ``*-1``).
  What it does not do: RETRY (nothing is redelivered; the pending set only
  answers TACK), plain reads (no GROUP), ``$``/offset starts, several groups'
  queues being fair to each other, tstream's "wait at once" shortcut's due-time
  checks (there are no retries).
- ``TACK key g o1 ...``: removes the offsets from the group's pending set and
  replies how many it removed.
- Around the loop: HELLO [2|3] (tstream's map, RESP2 or RESP3), CLIENT SETINFO /
  SETNAME (``+OK``; other CLIENT subcommands tstream's error), PING, FLUSHALL, DEL
  (number of keys removed), INFO (``blocked_clients`` only), TINFO (``length``
  only), CONFIG (an empty array, for redis-benchmark's probe); anything else
  tstream's unknown-command error.

A connection parked in a group read runs no further commands until it is served
(its later requests stay in the parser), as tstream and Redis do.
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque

import hiredis
import uvloop

HELLO_FIELDS = (b"$6\r\nserver\r\n$7\r\ntstream\r\n$7\r\nversion\r\n$5\r\n0.1.0\r\n$5\r\nproto\r\n:%d\r\n"
                b"$2\r\nid\r\n:%d\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
                b"$7\r\nmodules\r\n*0\r\n")
ENTRY = b"*3\r\n:%d\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"  # [offset, tag, payload]


class Group:
    __slots__ = ("next", "pending", "waiters")

    def __init__(self) -> None:
        self.next = 0  # index in the key's list of the first entry not delivered yet
        self.pending: set[int] = set()  # offsets delivered and not acknowledged
        self.waiters: deque = deque()  # the parked reads (waiter lists, see run_commands), FIFO


class Stream:
    __slots__ = ("entries", "tags", "groups")

    def __init__(self) -> None:
        # The entries' payloads and tags: two lists of bytes, which the garbage collector
        # does not track (a list per entry would be, and its collections grow with them).
        self.entries: list[bytes] = []
        self.tags: list[bytes] = []
        self.groups: dict[bytes, Group] = {}


streams: dict[bytes, Stream] = {}
ready: set[bytes] = set()  # keys written this turn that have parked readers
deferred: list = []  # the group reads that arrived this turn, served at its end
turn_end = [False]  # whether end_of_turn is scheduled
connection_ids = iter(range(1, 1 << 62))


def take(stream: Stream, group: Group, count: int) -> bytes:
    """The reply handing out up to ``count`` undelivered entries (at least one is there)."""
    entries, tags = stream.entries, stream.tags
    start = group.next
    end = min(start + count, len(entries))
    group.next = end
    group.pending.update(range(start + 1, end + 1))
    out = [b"*%d\r\n" % (end - start)]
    for offset in range(start, end):
        tag, payload = tags[offset], entries[offset]
        out.append(ENTRY % (offset + 1, len(tag), tag, len(payload), payload))
    return b"".join(out)


def schedule_turn_end() -> None:
    if not turn_end[0]:
        turn_end[0] = True
        asyncio.get_running_loop().call_soon(end_of_turn)


def park(waiter: list) -> None:
    """Put a group read that found nothing at the back of its group's FIFO, with its BLOCK timer."""
    conn, block_ms, group = waiter[0], waiter[3], waiter[5]
    if block_ms:
        waiter[2] = asyncio.get_running_loop().call_later(block_ms / 1000, conn.timed_out, waiter)
    waiters = group.waiters
    while waiters and waiters[0][0].parked is not waiters[0]:
        waiters.popleft()  # timed out or gone (the rest are skipped when served)
    waiters.append(waiter)


def end_of_turn() -> None:
    """What the end of a loop turn does, as tstream's (server/turns.py): the heads of the
    written keys' groups' FIFOs get what is there, then the turn's group reads are served in
    arrival order (one that finds nothing parks at the back of its FIFO)."""
    turn_end[0] = False
    keys = list(ready)
    ready.clear()
    for key in keys:
        stream = streams.get(key)
        if stream is None:
            continue
        for group in stream.groups.values():
            waiters = group.waiters
            while waiters and group.next < len(stream.entries):
                waiter = waiters.popleft()
                conn = waiter[0]
                if conn.parked is not waiter:  # timed out or gone
                    continue
                if waiter[2] is not None:
                    waiter[2].cancel()
                conn.unpark(take(stream, group, waiter[1]))
    reads = deferred[:]
    deferred.clear()
    for waiter in reads:
        conn, stream, group = waiter[0], waiter[4], waiter[5]
        if conn.parked is not waiter:  # gone
            continue
        if group.next < len(stream.entries):
            conn.unpark(take(stream, group, waiter[1]))
        elif waiter[3] is not None:
            park(waiter)
        else:
            conn.unpark(b"_\r\n" if conn.protocol == 3 else b"*-1\r\n")


class Ceiling(asyncio.Protocol):
    """bench/throughput.py's server (no ``--groups``): every 4-word command a write."""

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


class GroupCeiling(asyncio.Protocol):
    """bench/groups.py's server (``--groups``): the consumer-group loop, see the module docstring."""

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.reader = hiredis.Reader()
        self.protocol = 2
        self.parked = None  # the waiter of this connection's parked group read
        self.id = next(connection_ids)

    def connection_lost(self, exc) -> None:
        self.parked = None
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        if self.parked is None:
            self.run_commands()

    def unpark(self, reply: bytes) -> None:
        self.parked = None
        if self.transport is not None:
            self.transport.write(reply)
            self.run_commands()  # whatever came in behind the read

    def timed_out(self, waiter) -> None:
        if self.parked is waiter:
            self.unpark(b"_\r\n" if self.protocol == 3 else b"*-1\r\n")

    def run_commands(self) -> None:  # noqa: C901 - one flat dispatch, on purpose
        out = []
        gets = self.reader.gets
        while (command := gets()) is not False:
            name = command[0]
            if (name == b"TWRITE" or name.upper() == b"TWRITE") and len(command) == 4:  # TWRITE key tag payload
                key = command[1]
                stream = streams.get(key)
                if stream is None:
                    stream = streams[key] = Stream()
                stream.tags.append(command[2])
                entries = stream.entries
                entries.append(command[3])
                out.append(b":%d\r\n" % len(entries))
                if stream.groups and key not in ready:
                    for group in stream.groups.values():
                        if group.waiters:
                            ready.add(key)
                            schedule_turn_end()
                            break
                continue
            name = name.upper()
            if name == b"TREAD":
                if len(command) < 6 or command[4].upper() != b"GROUP":
                    out.append(b"-ERR the ceiling server only serves TREAD key start count GROUP g ...\r\n")
                    continue
                key = command[1]
                stream = streams.get(key)
                if stream is None:
                    stream = streams[key] = Stream()
                group = stream.groups.get(command[5])
                if group is None:
                    group = stream.groups[command[5]] = Group()
                count = int(command[3])
                if count == 0:
                    out.append(b"*0\r\n")
                    continue
                block_ms = int(command[-1]) if len(command) >= 8 and command[-2].upper() == b"BLOCK" else None
                # [connection, count, BLOCK timer, BLOCK ms or None, stream, group]
                waiter = [self, count, None, block_ms, stream, group]
                if group.next < len(stream.entries) or deferred:
                    # Served at the end of the turn, after the reads that came first, with
                    # everything the turn wrote (tstream's policy: bigger batches).
                    deferred.append(waiter)
                    schedule_turn_end()
                elif block_ms is not None:
                    park(waiter)  # nothing there and no read before it: it waits at once
                else:
                    out.append(b"_\r\n" if self.protocol == 3 else b"*-1\r\n")
                    continue
                self.parked = waiter  # the replies so far go first, the commands behind wait
                break
            elif name == b"TACK":
                stream = streams.get(command[1])
                group = stream.groups.get(command[2]) if stream is not None else None
                if group is None:
                    out.append(b":0\r\n")
                else:
                    pending = group.pending
                    before = len(pending)
                    pending.difference_update(map(int, command[3:]))
                    out.append(b":%d\r\n" % (before - len(pending)))
            elif name == b"PING":
                out.append(b"+PONG\r\n")
            elif name == b"HELLO":
                if len(command) > 1:
                    self.protocol = int(command[1])
                fields = HELLO_FIELDS % (self.protocol, self.id)
                out.append((b"%7\r\n" if self.protocol == 3 else b"*14\r\n") + fields)
            elif name == b"CLIENT":
                sub = command[1].upper() if len(command) > 1 else b""
                if sub in (b"SETINFO", b"SETNAME"):
                    out.append(b"+OK\r\n")
                else:
                    out.append(b"-ERR unknown subcommand '%s'. Try CLIENT HELP.\r\n" % command[1])
            elif name == b"FLUSHALL":
                streams.clear()
                out.append(b"+OK\r\n")
            elif name == b"DEL":
                out.append(b":%d\r\n" % sum(streams.pop(key, None) is not None for key in command[1:]))
            elif name == b"INFO":
                blocked = sum(w[0].parked is w for s in streams.values() for g in s.groups.values()
                              for w in g.waiters)
                text = b"# Clients\r\nblocked_clients:%d\r\n" % blocked
                out.append(b"$%d\r\n%s\r\n" % (len(text), text))
            elif name == b"TINFO":
                stream = streams.get(command[1])
                length = len(stream.entries) if stream is not None else 0
                out.append((b"%1\r\n" if self.protocol == 3 else b"*2\r\n") + b"$6\r\nlength\r\n:%d\r\n" % length)
            elif name == b"CONFIG":
                out.append(b"*0\r\n")
            else:
                out.append(b"-ERR unknown command '%s', with args beginning with: \r\n" % command[0])
        if out:
            self.transport.write(b"".join(out))


async def serve(port: int, protocol: type) -> None:
    await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", port)
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1]), GroupCeiling if "--groups" in sys.argv[2:] else Ceiling))
