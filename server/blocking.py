"""Clients blocked in ``TREAD ... BLOCK ms``, and waking them.

Two kinds of waiters:

- plain readers wait on a key for an offset: they wake when an entry at or after
  that offset exists (``next_offset > offset``), so a reader that skips ahead
  sleeps through the writes before its offset;
- group readers wait on a (key, group) queue, first come first served: when the
  group has something to hand out, the head of the queue is served; a served
  client that blocks again joins the back, which spreads entries evenly.

Writes, TACKs and group timers (a retry falling due, a pending entry expiring)
mark keys *ready*; the ready keys are served once per event-loop turn (like
Redis's handleClientsBlockedOnKeys), after the commands that made them ready.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from resp import NULL_ARRAY, encode, encode_error

log = logging.getLogger("tstream.blocking")


class Waiter:
    __slots__ = ("client", "request", "timer", "queued")

    def __init__(self, client, request) -> None:
        self.client = client
        self.request = request  # a commands.streams.ReadRequest, offset already resolved
        self.timer: asyncio.TimerHandle | None = None
        self.queued = True


class BlockingRegistry:
    def __init__(self, server) -> None:
        self.server = server
        self.plain: dict[bytes, list[Waiter]] = {}
        self.groups: dict[bytes, dict[bytes, deque[Waiter]]] = {}  # key -> group -> FIFO
        self._ready: set[bytes] = set()
        self._scheduled = False
        # (key, group) -> (due time in ms, timer): re-armed only when the due time changes
        self._group_timers: dict[tuple[bytes, bytes], tuple[int, asyncio.TimerHandle]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.count = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        # Cached: asyncio.get_running_loop() checks the process id on every call.
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    # --- blocking --------------------------------------------------------------------

    def block(self, client, request) -> None:
        """Park ``client`` until ``request`` can be served or its timeout passes."""
        waiter = Waiter(client, request)
        key = request.key
        if request.group is None:
            self.plain.setdefault(key, []).append(waiter)
        else:
            self.groups.setdefault(key, {}).setdefault(request.group, deque()).append(waiter)
            self._arm_group_timer(key, request.group)
        self.server.waiting_keys.add(key)
        if request.block_ms:
            waiter.timer = self.loop.call_later(request.block_ms / 1000, self._timed_out, waiter)
        client.blocked = waiter
        self.count += 1

    def _timed_out(self, waiter: Waiter) -> None:
        waiter.timer = None
        self._remove(waiter)
        waiter.client.unblock(encode(NULL_ARRAY, waiter.client.protocol))

    def forget(self, client) -> None:
        """The client left (disconnect, CLIENT KILL, SHUTDOWN): drop its wait, consume nothing."""
        waiter = client.blocked
        if waiter is not None:
            self._remove(waiter)
            client.blocked = None

    def _remove(self, waiter: Waiter) -> None:
        if not waiter.queued:
            return
        waiter.queued = False
        self.count -= 1
        if waiter.timer is not None:
            waiter.timer.cancel()
            waiter.timer = None
        request = waiter.request
        key = request.key
        if request.group is None:
            waiters = self.plain.get(key)
            if waiters is not None:
                waiters.remove(waiter)
                if not waiters:
                    del self.plain[key]
        else:
            queues = self.groups.get(key)
            queue = queues.get(request.group) if queues is not None else None
            if queue is not None:
                queue.remove(waiter)
                if not queue:
                    del queues[request.group]
                    if not queues:
                        del self.groups[key]
                    armed = self._group_timers.pop((key, request.group), None)
                    if armed is not None:
                        armed[1].cancel()
        if key not in self.plain and key not in self.groups:
            self.server.waiting_keys.discard(key)

    # --- waking ----------------------------------------------------------------------

    def key_ready(self, key: bytes) -> None:
        """Something changed at ``key`` (write, TACK): serve its waiters this loop turn."""
        self._ready.add(key)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._serve_ready)

    def key_deleted(self, key: bytes) -> None:
        """DEL/FLUSHALL: group readers get an error (their group is gone); plain
        readers stay blocked and wake when the key is written again, as in Redis."""
        for queue in list(self.groups.get(key, {}).values()):
            for waiter in list(queue):
                self._remove(waiter)
                waiter.client.unblock(encode_error(
                    "UNBLOCKED the stream key no longer exists, the consumer group is gone"))

    def _serve_ready(self) -> None:
        self._scheduled = False
        ready, self._ready = self._ready, set()
        for key in ready:
            try:
                self._serve_key(key)
            except Exception:
                log.exception("serving clients blocked on %r failed", key)

    def _serve_key(self, key: bytes) -> None:
        from commands.streams import perform_read

        server = self.server
        stream = server.streams.get(key)
        if stream is None:
            return
        waiters = self.plain.get(key)
        if waiters:
            next_offset = stream.next_offset
            for waiter in [w for w in waiters if w.request.offset < next_offset]:
                self._deliver(waiter, perform_read(server, waiter.request, blocking=False))
        for group_name, queue in list(self.groups.get(key, {}).items()):
            while queue:
                waiter = queue[0]
                reply = perform_read(server, waiter.request, blocking=True)
                if reply is None:
                    break  # nothing for the head of the queue: nothing for the others
                self._deliver(waiter, reply)
            if queue:
                self._arm_group_timer(key, group_name)

    def _deliver(self, waiter: Waiter, reply) -> None:
        self._remove(waiter)
        client = waiter.client
        client.unblock(encode(reply, client.protocol))

    def _arm_group_timer(self, key: bytes, group_name: bytes) -> None:
        """Wake the group's waiters when its next retry falls due or pending entry expires."""
        stream = self.server.streams.get(key)
        group = stream.groups.get(group_name) if stream is not None else None
        due = group.next_due_ms() if group is not None else None
        armed = self._group_timers.get((key, group_name))
        if armed is not None:
            if armed[0] == due:
                return  # already set for that time
            armed[1].cancel()
            del self._group_timers[(key, group_name)]
        if due is None:
            return
        delay = max(0.0, due / 1000 - time.time()) + 0.0005
        self._group_timers[(key, group_name)] = (due, self.loop.call_later(delay, self._group_due, key, group_name))

    def _group_due(self, key: bytes, group_name: bytes) -> None:
        self._group_timers.pop((key, group_name), None)
        self.key_ready(key)
