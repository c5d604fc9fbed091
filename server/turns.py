"""The end of an event-loop turn: what waits for it, and in which order it happens.

Replies are held (``hold``) until the end of the turn when the turn's effects must
reach the append-only file first (every reply, with ``appendonly yes``) and for
pipelined reads (see ClientConnection._run_commands).  The end of the turn then
does what Redis does before it sleeps:

1. serve the clients blocked on keys the turn changed (their replies and
   records join this turn's);
2. serve the group reads that arrived during the turn (BlockingRegistry.defer),
   in arrival order (one that finds nothing and has BLOCK starts waiting, at
   the back of its group's queue), then serve again the keys written by the
   commands they had held up.  A group read waits for the end of its turn so
   that it queues behind the readers already blocked on its group (FIFO
   across old and new readers) and gets everything the turn wrote: busy
   consumers read bigger batches, hence fewer reads and acks per entry (1.1x
   the messages/s of bench/groups.py).  Its reply waits for the rest of the
   turn's work, microseconds; Redis too writes its replies only before it
   sleeps;
3. pack the turn's records once: onto the replication stream (backlog and
   replicas, server.replication) and into the AOF's buffer; write the turn's
   AOF records, fsynced with ``appendfsync always`` (group commit: one write
   and one fsync per turn, see server.persist);
4. release the held replies, in the order they were held.
"""

from __future__ import annotations

import asyncio
from time import monotonic_ns


class TurnEnd:
    def __init__(self, server) -> None:
        self.server = server
        self._held: list[tuple[object, bytes, bool]] = []
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled_at = 0
        self.busy_ns = 0  # the turns' work, from the first held reply or record to the replies out (average)

    def schedule(self) -> None:
        """Make sure the end of this turn runs (once)."""
        if not self._scheduled:
            self._scheduled = True
            self._scheduled_at = monotonic_ns()
            if self._loop is None:  # cached: get_running_loop() checks the process id each call
                self._loop = asyncio.get_running_loop()
            self._loop.call_soon(self.run)

    def over(self, budget_ns: int) -> bool:
        """Whether this turn's work (from its first held reply or record) passed ``budget_ns``."""
        return self._scheduled and monotonic_ns() - self._scheduled_at > budget_ns

    def hold(self, connection, data: bytes, close: bool) -> None:
        """Keep a reply (and whether to close after it) until the end of the turn."""
        self._held.append((connection, data, close))
        if not self._scheduled:
            self.schedule()

    def run(self) -> None:
        """Serve the ready blocked clients and the turn's group reads, commit the
        AOF records, release the replies."""
        server = self.server
        blocking = server.blocking
        blocking.serve_ready()
        while blocking.deferred:
            blocking.serve_deferred()
            blocking.serve_ready()  # keys written by the commands the reads had held up
        self._scheduled = False
        server.replication.flush()  # the turn's records to the backlog and the replicas (and packed for the AOF)
        committing = monotonic_ns()
        server.persistence.commit_turn()
        committed = monotonic_ns()
        held, self._held = self._held, []
        for connection, data, close in held:
            connection.write_now(data, close)
        # the turn's work, not the wait for the disk (paid once per turn, however much it holds),
        # as a moving average over the last 8 or so turns: one slow turn is not a trend
        busy = monotonic_ns() - committed + committing - self._scheduled_at
        self.busy_ns += (busy - self.busy_ns) >> 3
