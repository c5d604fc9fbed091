"""Clients blocked in ``TREAD ... BLOCK ms``, and waking them.

Two kinds of waiters:

- plain readers wait on a key for an offset: they wake when an entry at or after
  that offset exists (``next_offset > offset``), so a reader that skips ahead
  sleeps through the writes before its offset;
- group readers wait on a (key, group) queue, first come first served: when the
  group has something to hand out, the head of the queue is served; a served
  client that blocks again joins the back, which spreads entries evenly.

Writes, TACKs (through the write path's commit, commands/writes.py) and group
timers (a retry falling due, a pending entry expiring) mark keys *ready*; the
ready keys are served once per event-loop turn (like Redis's
handleClientsBlockedOnKeys), after the commands that made them ready.  Group
reads themselves wait for the end of the turn they arrive in (``defer``), then
are served after the group's blocked readers (see server.turns).  The group
moves the reads served here describe go through the same write path: it is
committed once per pass, before the turn's AOF records are written.

Timers are kept few, since creating and cancelling a loop timer costs more
than the read it guards:

- BLOCK timeouts: one heap of (deadline, sequence, waiter) and a single loop
  timer for its earliest deadline; a served waiter leaves a stale heap entry,
  skipped when it surfaces and compacted away when stale entries outnumber
  live ones (so the heap stays O(blocked clients));
- group timers: at most one per (key, group) with waiters, moved only to an
  *earlier* time; firing early is harmless (the serve finds nothing and arms
  the timer again for a later time).  Their time is a bound read off the tops
  of the group's heaps (``Group.due_bound_ms``), which may be an acknowledged
  entry's: early at worst, and no stale item popped to find it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import deque

from tstream.commands.errors import CommandError
from tstream.commands.streams import perform_read
from tstream.resp import NULL_ARRAY, encode, encode_entries, encode_error

log = logging.getLogger("tstream.blocking")

PERFORM_READ = perform_read  # (tests put a failing one in BlockingRegistry._perform_read)
UNKNOWN_DUE = -1  # a group's due_bound_ms() not looked at yet (a due time is never negative)
_new_waiter = object.__new__  # a Waiter made in place (wait_now), without its __init__ call


class Waiter:
    __slots__ = ("client", "request", "deadline", "queued")

    def __init__(self, client, request) -> None:
        self.client = client
        self.request = request  # a commands.streams.ReadRequest, offset already resolved
        self.deadline = 0.0  # loop time of the BLOCK timeout, 0.0 for none (BLOCK 0)
        self.queued = True


class BlockingRegistry:
    def __init__(self, server) -> None:
        self.server = server
        self.plain: dict[bytes, list[Waiter]] = {}
        self.groups: dict[bytes, dict[bytes, deque[Waiter]]] = {}  # key -> group -> FIFO
        self._ready: set[bytes] = set()
        self.deferred: list[Waiter] = []  # group reads held until the end of the turn
        # (key, group) -> (due time in ms, timer): moved only to an earlier time
        self._group_timers: dict[tuple[bytes, bytes], tuple[int, asyncio.TimerHandle]] = {}
        # BLOCK timeouts: a heap of (deadline, sequence, waiter) with one loop timer
        self._deadlines: list[tuple[float, int, Waiter]] = []
        self._stale_deadlines = 0  # heap entries of waiters no longer queued
        self._sequence = itertools.count()
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._deadline_armed = float("inf")
        self._loop: asyncio.AbstractEventLoop | None = None
        self.count = 0
        self._perform_read = perform_read  # commands.streams.perform_read (tests put a failing one here)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        # Cached: asyncio.get_running_loop() checks the process id on every call.
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    # --- blocking --------------------------------------------------------------------

    def block(self, client, request) -> None:
        """Park ``client`` until ``request`` can be served or its timeout passes."""
        self._park(Waiter(client, request))

    def _park(self, waiter: Waiter, group=None, due: int | None = UNKNOWN_DUE) -> None:
        """Queue ``waiter``; a group read's ``group`` and its ``due_bound_ms()``
        may be passed when known (the group timer's arming then looks neither up)."""
        request = waiter.request
        key = request.key
        waiter.queued = True
        if request.group is None:
            for key in getattr(request, "keys", (request.key,)):  # XREAD waits on several keys
                waiters = self.plain.get(key)
                if waiters is None:
                    waiters = self.plain[key] = []
                waiters.append(waiter)
                self.server.waiting_keys.add(key)
        else:
            self._queue_of(key, request.group).append(waiter)
            if group is None:
                stream = self.server.streams.get(key)
                group = stream.groups.get(request.group) if stream is not None else None
            if group is not None:
                self._arm_group_timer(key, request.group, group, due)
        self.server.waiting_keys.add(key)
        if request.block_ms:
            deadline = waiter.deadline = self.loop.time() + request.block_ms / 1000
            heapq.heappush(self._deadlines, (deadline, next(self._sequence), waiter))
            if deadline < self._deadline_armed:
                self._arm_deadline_timer(deadline)
        waiter.client.blocked = waiter
        self.count += 1

    def defer(self, client, request) -> None:
        """Hold ``client`` until the end of this loop turn, then serve the group read
        ``request`` (see server.turns): it queues behind the group's blocked readers
        and sees everything the turn wrote.  The client's next commands wait."""
        waiter = Waiter(client, request)
        waiter.queued = False  # not in a queue: forget() only clears client.blocked
        self.deferred.append(waiter)
        client.blocked = waiter
        self.server.turn_end.schedule()

    def wait_now(self, client, request) -> bool:
        """Park ``client`` at once on the group read ``request`` (which has BLOCK
        and a count) when its group certainly has nothing to hand out (no new
        entry, no retry due, no pending entry expiring) and no group read waits
        for the end of this turn; False, doing nothing, otherwise (the read is
        then deferred).  The same as the end of the turn would do: the read would
        find nothing there either and park at the back of its group's queue,
        behind the readers already blocked (the turn's deferred reads, none here,
        would go before it); what the rest of the turn writes wakes it as it
        wakes them (``key_ready``), a retry falling due later by the group timer."""
        if self.deferred:
            return False  # reads that came first are served first: this one queues behind them
        server = self.server
        key = request.key
        stream = server.streams.get(key)
        group = stream.groups.get(request.group) if stream is not None else None
        if group is None or group.next < stream.next_offset:
            return False  # a read that creates its group, or has new entries to get: deferred
        due = group.due_bound_ms()
        if due is not None and due <= time.time_ns() // 1_000_000:
            return False  # a retry due (or an entry expiring), maybe: deferred
        # _park(Waiter(client, request), group, due)'s group branch, inlined: the
        # consumer's read after its TACK (the loop's usual read) waits here, once a
        # message or so.  The group timer is only looked at when it may have to move.
        waiter = _new_waiter(Waiter)
        waiter.client = client
        waiter.request = request
        waiter.queued = True
        self._queue_of(key, request.group).append(waiter)
        if due is not None:
            armed = self._group_timers.get((key, request.group))
            if armed is None or armed[0] > due:
                self._arm_group_timer(key, request.group, group, due)
        server.waiting_keys.add(key)
        block_ms = request.block_ms
        if block_ms:
            loop = self._loop or self.loop
            deadline = waiter.deadline = loop.time() + block_ms / 1000
            heapq.heappush(self._deadlines, (deadline, next(self._sequence), waiter))
            if deadline < self._deadline_armed:
                self._arm_deadline_timer(deadline)
        else:
            waiter.deadline = 0.0
        client.blocked = waiter
        self.count += 1
        return True

    def serve_deferred(self) -> None:
        """Serve the reads deferred this turn, in arrival order; one that finds
        nothing and has BLOCK starts waiting."""
        deferred, self.deferred = self.deferred, []
        server = self.server
        for waiter in deferred:
            client = waiter.client
            if client.blocked is not waiter:  # the client left meanwhile
                continue
            client.blocked = None
            request = waiter.request
            try:
                reply = self._perform_read(server, request, blocking=request.block_ms is not None)
            except CommandError as exc:
                client.unblock(encode_error(exc.message))
                continue
            except Exception:  # a bug: this client gets an error, the others their reads
                log.exception("serving a group read on %r failed", request.key)
                client.unblock(encode_error("ERR internal error while running the command (see the server log)"))
                continue
            if reply is None:
                self._park(waiter)  # a wait now, at the back of its group's queue
            else:
                client.unblock(encode(reply, client.protocol))
        writes = server.writes
        if writes.pending:  # the group moves of these reads (commands/writes.py)
            writes.commit()

    def _arm_deadline_timer(self, deadline: float) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadline_armed = deadline
        self._deadline_timer = self.loop.call_at(deadline, self._expire_deadlines)

    def _expire_deadlines(self) -> None:
        """The deadline timer fired: answer every waiter whose BLOCK timed out."""
        self._deadline_timer = None
        self._deadline_armed = float("inf")
        heap = self._deadlines
        now = self.loop.time()
        while heap and heap[0][0] <= now:
            waiter = heapq.heappop(heap)[2]
            if not waiter.queued:
                self._stale_deadlines -= 1
                continue
            waiter.deadline = 0.0  # its heap entry is gone: not stale
            self._remove(waiter)
            waiter.client.unblock(encode(NULL_ARRAY, waiter.client.protocol))
        self._drop_stale_heads()
        if heap:
            self._arm_deadline_timer(heap[0][0])

    def _drop_stale_heads(self) -> None:
        heap = self._deadlines
        while heap and not heap[0][2].queued:
            heapq.heappop(heap)
            self._stale_deadlines -= 1

    def _deadline_removed(self) -> None:
        """A waiter with a deadline left the queue: its heap entry is now stale."""
        self._stale_deadlines += 1
        if self._stale_deadlines > len(self._deadlines) - self._stale_deadlines + 64:
            self._deadlines = [item for item in self._deadlines if item[2].queued]
            heapq.heapify(self._deadlines)
            self._stale_deadlines = 0
        if not self._deadlines and self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
            self._deadline_armed = float("inf")

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
        if waiter.deadline:  # its heap entry is now stale (_deadline_removed, its usual case inlined)
            stale = self._stale_deadlines = self._stale_deadlines + 1
            if stale > len(self._deadlines) - stale + 64:
                self._stale_deadlines -= 1
                self._deadline_removed()
        request = waiter.request
        if request.group is None:
            self._remove_plain(waiter)
            return
        key = request.key
        queues = self.groups.get(key)
        queue = queues.get(request.group) if queues is not None else None
        if queue is not None:
            queue.remove(waiter)
            if not queue:
                self._forget_queue(key, request.group)
                return
        if key not in self.plain and key not in self.groups:
            self.server.waiting_keys.discard(key)

    def _queue_of(self, key: bytes, group_name: bytes) -> deque:
        """The FIFO of the readers waiting on ``group_name`` at ``key`` (made if there is none). O(1)."""
        queues = self.groups.get(key)
        if queues is None:
            queues = self.groups[key] = {}
        queue = queues.get(group_name)
        if queue is None:
            queue = queues[group_name] = deque()
        return queue

    def _forget_queue(self, key: bytes, group_name: bytes) -> None:
        """A group's queue of waiters at ``key`` is empty: drop it (and the key's
        entries when nothing else waits there)."""
        queues = self.groups[key]
        del queues[group_name]
        if not queues:
            del self.groups[key]
        # An armed group timer stays: it may fire for nothing, which is
        # cheaper than cancelling it here and arming it at the next block.
        if key not in self.plain and key not in self.groups:
            self.server.waiting_keys.discard(key)

    def _remove_plain(self, waiter: Waiter) -> None:
        """``_remove``'s part for a plain reader: off the lists of its keys."""
        request = waiter.request
        for key in getattr(request, "keys", (request.key,)):  # XREAD waits on several keys
            waiters = self.plain.get(key)
            if waiters is not None:
                waiters.remove(waiter)
                if not waiters:
                    del self.plain[key]
            if key not in self.plain and key not in self.groups:
                self.server.waiting_keys.discard(key)

    # --- waking ----------------------------------------------------------------------

    def key_ready(self, key: bytes) -> None:
        """Something changed at ``key`` (write, TACK): serve its waiters at the end
        of this loop turn (server.turns)."""
        self._ready.add(key)
        turn_end = self.server.turn_end
        if not turn_end._scheduled:  # (schedule()'s own test, without the call: once per write)
            turn_end.schedule()

    def key_deleted(self, key: bytes) -> None:
        """DEL/FLUSHALL: group readers get an error (their group is gone); plain
        readers stay blocked and wake when the key is written again, as in Redis."""
        for queue in list(self.groups.get(key, {}).values()):
            for waiter in list(queue):
                self._remove(waiter)
                waiter.client.unblock(encode_error(
                    "UNBLOCKED the stream key no longer exists, the consumer group is gone"))

    def serve_ready(self) -> None:
        """Serve the ready keys now (the end of a loop turn) if there are any."""
        if not self._ready:
            return
        ready, self._ready = self._ready, set()
        for key in ready:
            try:
                self._serve_key(key)
            except Exception:
                log.exception("serving clients blocked on %r failed", key)
        writes = self.server.writes
        if writes.pending:  # the group moves of these reads (commands/writes.py)
            writes.commit()

    def _serve_key(self, key: bytes) -> None:  # noqa: C901 (the wake-up's one straight path, inlined)
        perform_read = self._perform_read
        server = self.server
        stream = server.streams.get(key)
        if stream is None:
            return
        waiters = self.plain.get(key)
        if waiters:
            self._serve_plain(stream, waiters)
        queues = self.groups.get(key)
        for group_name, queue in list(queues.items()) if queues else ():
            group = stream.groups.get(group_name)
            due = UNKNOWN_DUE
            # The usual read (a count, no WITHINFO, no snapshot in progress): perform_read's
            # group branch, spelled out for the group and stream at hand, and its entries
            # encoded as they come (the reply of a consumer group's loop, once a message or
            # so: a few calls less per wake-up).
            direct = group is not None and perform_read is PERFORM_READ and server.capture is None
            while queue:
                waiter = queue[0]
                request = waiter.request
                if direct and request.count and not request.withinfo:
                    entries = group.read(stream, request.count, time.time_ns() // 1_000_000, request.retry,
                                         server.config.values["group-max-pending"])
                    if not entries:
                        break  # nothing for the head of the queue: nothing for the others
                    writes = server.writes
                    if writes.sinks or writes.watched or writes.pending:
                        writes.group_moved(key, group, entries)
                    else:  # nothing to log or touch: counting the change is all (as TACK does)
                        server.dirty += 1
                    # _remove(waiter), inlined for the head of its queue (a popleft, not a
                    # search of the queue): once a wake-up.
                    queue.popleft()
                    waiter.queued = False
                    self.count -= 1
                    if waiter.deadline:  # its heap entry is now stale (as in _remove)
                        stale = self._stale_deadlines = self._stale_deadlines + 1
                        if stale > len(self._deadlines) - stale + 64:
                            self._stale_deadlines -= 1
                            self._deadline_removed()
                    if not queue:
                        self._forget_queue(key, group_name)
                    client = waiter.client
                    client.unblock(encode_entries(entries, client.protocol == 3))
                else:
                    reply = perform_read(server, request, blocking=True)
                    if reply is None:
                        break  # nothing for the head of the queue: nothing for the others
                    self._deliver(waiter, reply)
                if queue and group is not None and group.next >= stream.next_offset:
                    # Nothing new: nothing for the others either unless a retry is due
                    # (False may still mean nothing: the next read says so).  The due
                    # time is kept for the timer below.
                    due = group.due_bound_ms()
                    if due is None or due > time.time_ns() // 1_000_000:
                        break
                    due = UNKNOWN_DUE  # (the next read moves it)
            if queue and group is not None and due is not None:
                # _arm_group_timer's early returns, tested here first (no due time, or a
                # timer armed in time: the usual case once the group's loop runs).
                armed = self._group_timers.get((key, group_name)) if due != UNKNOWN_DUE else None
                if armed is None or armed[0] > due:
                    self._arm_group_timer(key, group_name, group, due)

    def _serve_plain(self, stream, waiters: list[Waiter]) -> None:
        """Serve the plain readers of ``stream`` whose offset it reached."""
        next_offset = stream.next_offset
        for waiter in [w for w in waiters if w.request.offset < next_offset]:
            perform = getattr(waiter.request, "perform", None)  # XREAD's (commands/xstreams.py)
            if perform is None:
                self._deliver(waiter, self._perform_read(self.server, waiter.request, blocking=False))
            elif (reply := perform(self.server, True)) is not None:
                self._deliver(waiter, reply)

    def _deliver(self, waiter: Waiter, reply) -> None:
        self._remove(waiter)
        client = waiter.client
        client.unblock(encode(reply, client.protocol))

    def _arm_group_timer(self, key: bytes, group_name: bytes, group, due: int | None = UNKNOWN_DUE) -> None:
        """Wake the group's waiters when its next retry falls due or pending entry
        expires, or a little earlier: ``group.due_bound_ms()`` (``due``, when the caller
        has it) may be the time of an item already acknowledged; the timer then
        finds nothing, and is armed again for a later time."""
        if due == UNKNOWN_DUE:
            due = group.due_bound_ms()
        if due is None:
            return  # an armed timer may fire for nothing: cheaper than cancelling it
        armed = self._group_timers.get((key, group_name))
        if armed is not None:
            if armed[0] <= due:
                return  # fires in time (early at worst, then re-armed)
            armed[1].cancel()
        delay = max(0.0, due / 1000 - time.time()) + 0.0005
        self._group_timers[(key, group_name)] = (due, self.loop.call_later(delay, self._group_due, key, group_name))

    def _group_due(self, key: bytes, group_name: bytes) -> None:
        self._group_timers.pop((key, group_name), None)
        self.key_ready(key)

