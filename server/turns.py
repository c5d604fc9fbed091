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
   AOF records (group commit: one write per turn, see server.persist); with
   ``appendfsync always`` the fsync goes to a thread and the turn's held
   replies wait for it (``_waiting``: released by ``synced`` when it returns,
   a connection's later replies behind them), while the loop serves the
   other connections;
4. release the held replies, in the order they were held, except that the
   connections whose replies include a pipelined read's (``bulk_held``) get
   theirs after the others: a write to a connection can wake its client,
   which then competes with the server for the cores, and an interactive
   client's reply should not wait behind sixteen publishers' (each
   connection's replies keep their order; the order across connections was
   never promised, Redis's neither).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
from collections import deque
from time import monotonic, monotonic_ns, thread_time_ns

# A turn's work after which the connections with a backlog wait for the next turn.  An
# interactive client's command that arrives during a turn waits for the rest of it, plus
# the end of the turn and one window of commands that started before the total was spent
# (a FAST run of up to 256 messages): with 0.5 ms, about 1 ms of server CPU (1 ms: turns
# of 1.8-1.9 ms of CPU at p99 under 16 fast publishers, 1.3-1.4 ms with 0.5 ms;
# bench/RESULTS-fast-ingest.md, "p99" section of 2026-11-28).
TURN_TOTAL_NS = 500_000
# A commit (AOF write, no fsync on the loop) whose wall time passes this waited for
# something (a core, the kernel's dirty-page throttling): the turn's CPU measure
# cannot use its wall time and skips that turn (TurnEnd._end_turn).
COMMIT_WALL_BOUND = 0.0005
PROBE_ENV = "TSTREAM_TURN_PROBE"  # a file: per-turn timings are appended to it (diagnostics; off by default)
PROBE_NAME = b"turn-probe"  # CLIENT SETNAME of the client whose commands the probe follows


def _schedstat() -> list:
    """This thread's CPU time and time spent runnable but not running (ns, since it started)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return [int(x) for x in f.read().split()[:2]]
    except OSError:
        return [0, 0]


class TurnEnd:
    def __init__(self, server) -> None:
        self.server = server
        self._held: list[tuple[object, bytes, bool]] = []
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # monotonic() when this turn's work began: float seconds, whose arithmetic is
        # cheaper than that of monotonic_ns()'s many-digit ints (over() runs per read)
        self._scheduled_at = 0.0
        self.busy_ns = 0  # the turns' work, from the first held reply or record to the replies out (average)
        # The same work in the loop thread's CPU time (average), measured while fast batches
        # are active: what the fast-ingest flow control reads (commands/ingest.py).  A loop
        # waiting for a core has long turns in wall time; smaller acks would not shorten them.
        self.busy_cpu_ns = 0
        self._scheduled_cpu = 0  # the thread's CPU time when this turn's work began (0: not measured)
        # Connections whose parsed commands wait for a later turn, in the order they go
        # (round robin: one that used its share goes to the back, one the turn's total
        # stopped before it ran keeps its place at the front).
        self.backlog: deque = deque()
        self._drain_scheduled = False
        # appendfsync always: the turns' held replies waiting for an fsync, in order, as
        # (the last unit written at their turn's end, replies); and each connection
        # with replies there -> its last such unit (its later replies wait behind).
        self._waiting: deque[tuple[int, list]] = deque()
        self._waiting_last: dict = {}
        path = os.environ.get(PROBE_ENV)
        if path:
            _Probe(self, path)

    def schedule(self) -> None:
        """Make sure the end of this turn runs (once)."""
        if not self._scheduled:
            self._scheduled = True
            self._scheduled_at = monotonic()
            if self.server.fast.active:
                self._scheduled_cpu = thread_time_ns()
            if self._loop is None:  # cached: get_running_loop() checks the process id each call
                self._loop = asyncio.get_running_loop()
            self._loop.call_soon(self.run)

    def over(self, budget_ns: int) -> bool:
        """Whether this turn's work (from its first held reply or record) passed ``budget_ns``."""
        return self._scheduled and (monotonic() - self._scheduled_at) * 1e9 > budget_ns

    def defer(self, connection) -> None:
        """Run ``connection``'s waiting commands (``_resume_commands``) in a later turn."""
        self.backlog.append(connection)
        if not self._drain_scheduled:
            self._drain_scheduled = True
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            self._loop.call_soon(self._drain)

    def _drain(self) -> None:
        """Resume the connections deferred before this turn, in order, until the turn's
        work passes TURN_TOTAL_NS; the rest keep their places for the next turn."""
        self._drain_scheduled = False
        if self._scheduled:
            # The end of the turn before is due (its call comes after this one in the
            # loop's queue): ended first, the resumed connections get a whole turn,
            # not what is left of that turn's total.
            self.run()
        backlog = self.backlog
        count = len(backlog)  # (those deferred while this runs go in a later turn)
        try:
            while count and backlog and not self.over(TURN_TOTAL_NS):
                count -= 1
                backlog.popleft()._resume_commands()
        finally:
            if backlog and not self._drain_scheduled:
                self._drain_scheduled = True
                self._loop.call_soon(self._drain)  # type: ignore[union-attr]

    def hold(self, connection, data: bytes, close: bool) -> None:
        """Keep a reply (and whether to close after it) until the end of the turn."""
        self._held.append((connection, data, close))
        if not self._scheduled:
            self.schedule()

    def run(self) -> None:
        """Serve the ready blocked clients and the turn's group reads, commit the
        AOF records, release the replies."""
        server = self.server
        if not self._scheduled:
            # Nothing waits for this turn's end: whatever needs it (a held reply, an AOF
            # record, a ready key, a deferred group read) schedules it.  This call is a
            # second one in a turn (_drain ran the end first) or a caller's that ends a
            # turn that had nothing to end: it costs no clock reads, and does not count
            # a turn's work twice.  What may still wait without having scheduled it is
            # done as before: replication records (they keep their own timer) are
            # packed, and an AOF write that failed is tried again (SHUTDOWN's last run).
            if server.replication.records:
                server.replication.flush()
            if server.persistence.file is not None:
                server.persistence.commit_turn()
            return
        blocking = server.blocking
        persistence = server.persistence
        if (persistence.file is None and persistence.written <= persistence.synced
                and not server.replication.records):
            # The usual turn of a server without the AOF (redis-benchmark's pipelined
            # writes, a consumer group's loop, fast batches): the blocked clients to serve,
            # then only replies to release.  The steps below, each of which would find
            # nothing to do (serving reads makes no records without a replica or the AOF:
            # no sinks), and their clock reads, skipped; the turn's work is still measured
            # (in CPU time too while a fast batch is active: there is no commit to leave out).
            if blocking._ready or blocking.deferred:
                blocking.serve_ready()
                while blocking.deferred:
                    blocking.serve_deferred()
                    blocking.serve_ready()  # keys written by the commands the reads had held up
                if server.replication.records:  # (not without sinks: the usual steps, to be sure)
                    self._end_turn()
                    return
            self._scheduled = False
            held, self._held = self._held, []
            self.release(held)
            busy = int((monotonic() - self._scheduled_at) * 1e9)
            self.busy_ns += (busy - self.busy_ns) >> 3
            started_cpu = self._scheduled_cpu
            if started_cpu:
                self._scheduled_cpu = 0
                self.busy_cpu_ns += (thread_time_ns() - started_cpu - self.busy_cpu_ns) >> 3
            return
        blocking.serve_ready()
        while blocking.deferred:
            blocking.serve_deferred()
            blocking.serve_ready()  # keys written by the commands the reads had held up
        self._end_turn()

    def _end_turn(self) -> None:
        """The rest of ``run`` once the blocked clients are served: the turn's records
        packed and written, the held replies released (or kept for the fsync)."""
        server = self.server
        persistence = server.persistence
        self._scheduled = False
        server.replication.flush()  # the turn's records to the backlog and the replicas (and packed for the AOF)
        committing = monotonic()
        started_cpu = self._scheduled_cpu
        # The commit's CPU time is left out of the turn's (below).  Only an fsync on the
        # loop (appendfsync always without aof-fsync-in-thread) makes its wall time much
        # longer than its CPU time: then it is read from the thread's CPU clock, a system
        # call each (not in the vDSO), else its wall time stands for it -- a buffered
        # write, CPU work unless preempted -- which saves two of the turn's four system
        # calls (FAST: ~0.04 clock_gettime calls a message at one publisher, ~10 ns;
        # RESULTS-fast-ingest.md).
        commit_cpu = (started_cpu and persistence.file is not None and persistence.file.fsync_policy == "always"
                      and not persistence.tracking)
        if commit_cpu:
            committing_cpu = thread_time_ns()
        persistence.commit_turn()
        committed = monotonic()
        if commit_cpu:
            committed_cpu = thread_time_ns()
        held, self._held = self._held, []
        if persistence.written > persistence.synced:  # an fsync to wait for (appendfsync always)
            if held:
                need = persistence.written
                self._waiting.append((need, held))
                last = self._waiting_last
                for entry in held:
                    last[entry[0]] = need
        else:
            self.release(held)
        # the turn's work, not the wait for the disk (paid once per turn, however much it holds),
        # as a moving average over the last 8 or so turns: one slow turn is not a trend
        busy = int((monotonic() - committed + committing - self._scheduled_at) * 1e9)
        self.busy_ns += (busy - self.busy_ns) >> 3
        if started_cpu:  # (the same, in CPU time: the commit's write and fsync left out as above)
            self._scheduled_cpu = 0
            if commit_cpu:
                busy = thread_time_ns() - committed_cpu + committing_cpu - started_cpu
            elif committed - committing < COMMIT_WALL_BOUND:
                busy = max(0, thread_time_ns() - started_cpu - int((committed - committing) * 1e9))
            else:  # the write waited (preempted, throttled): its wall time is no measure of its CPU, and
                return  # taking it out would read the turn as cheap: this turn is left out of the average
            self.busy_cpu_ns += (busy - self.busy_cpu_ns) >> 3

    def synced(self, unit: int) -> None:
        """The records of every unit up to ``unit`` are on disk: release the replies
        that waited for them (server.persist, on the loop)."""
        waiting = self._waiting
        if not waiting or waiting[0][0] > unit:
            return
        held = waiting.popleft()[1]
        while waiting and waiting[0][0] <= unit:
            held = held + waiting.popleft()[1]
        self.release(held)
        last = self._waiting_last
        for entry in held:
            connection = entry[0]
            need = last.get(connection)
            if need is not None:
                if need > unit:
                    connection._holding = True  # (write_now cleared it) more of its replies wait
                else:
                    del last[connection]
        for entry in self._held:  # (this turn's, not ended yet: later replies still go behind them)
            entry[0]._holding = True

    def release(self, held: list) -> None:
        """Write the held replies ``held`` (see the module docstring for the order)."""
        bulk = None
        for entry in held:
            connection = entry[0]
            if connection.bulk_held:  # a pipelined read's replies: after the others'
                if bulk is None:
                    bulk = [entry]
                else:
                    bulk.append(entry)
                continue
            connection.write_now(entry[1], entry[2])
        if bulk is not None:
            for connection, data, close in bulk:
                connection.bulk_held = False
                connection.write_now(data, close)


class _Probe:
    """Per-turn timings for diagnosing long turns (``TSTREAM_TURN_PROBE=<file>``): replaces
    the TurnEnd's ``run`` and ``hold`` on that instance only, so that nothing is paid
    without it.  Every second it appends one JSON line to the file: ``turns``, a list of
    [scheduled_at, start, commit_ns, end, held replies, their connections, commands, gc_ns,
    select_ns, gc_passes] per turn (monotonic ns; ``gc_ns``, ``select_ns``: the collector's
    and the loop's select's time since the last turn; ``gc_passes``: one byte per
    generation), and ``probe``: [executed_at, released_at, cpu, run_queue] of each command
    of the client named ``turn-probe`` (a reply sent at once, a read ``Persistence.settled``
    lets go before the fsync, counts as [executed_at, executed_at, ...]; cpu and run_queue
    as below, when it executed); each turn ends with the thread's CPU time
    (thread_time_ns, the probe's dumps left out) and run-queue wait time
    (/proc/thread-self/schedstat), cumulative ns."""

    def __init__(self, turn_end: TurnEnd, path: str) -> None:
        self.turn_end = turn_end
        self.path = path
        self.turns: list = []
        self.waits: list = []
        self.pending: list = []  # the probe client's held replies: executed_at
        self.gc_ns = 0
        self.gc_passes = 0
        self._gc_started = 0
        self.select_ns = 0
        self.last_dump = monotonic_ns()
        self.commands = 0
        self.commit_ns = 0
        self.own_cpu = 0  # the thread's CPU spent writing the probe's file (left out of the turns')
        self._run = turn_end.run
        self._hold = turn_end.hold
        turn_end.run = self.run  # type: ignore[method-assign]
        turn_end.hold = self.hold  # type: ignore[method-assign]
        gc.callbacks.append(self._on_gc)
        self._selector_wrapped = False

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = monotonic_ns()
        elif self._gc_started:
            self.gc_ns += monotonic_ns() - self._gc_started
            self.gc_passes += 1 << (8 * info["generation"])  # counts per generation, in bytes of one int

    def _wrap_selector(self) -> None:
        self._selector_wrapped = True
        probe = self
        loop = asyncio.get_running_loop()
        persistence = self.turn_end.server.persistence
        commit_turn = persistence.commit_turn
        self._settled = persistence.settled
        persistence.settled = self.settled

        def timed_commit() -> None:
            started = monotonic_ns()
            try:
                commit_turn()
            finally:
                probe.commit_ns += monotonic_ns() - started

        persistence.commit_turn = timed_commit
        selector = getattr(loop, "_selector", None)
        if selector is None:
            return
        select = selector.select

        def timed_select(timeout=None):
            started = monotonic_ns()
            try:
                return select(timeout)
            finally:
                probe.select_ns += monotonic_ns() - started

        selector.select = timed_select

    def settled(self, client, argv: list) -> bool:
        if not self._settled(client, argv):
            return False
        if client.name == PROBE_NAME:
            now = monotonic_ns()
            self.waits.append([now, now, *self._stat()])
            self.turn_end.schedule()  # (a turn, to dump the waits when nothing else runs)
        return True

    def hold(self, connection, data: bytes, close: bool) -> None:
        if connection.name == PROBE_NAME:
            self.pending.append([monotonic_ns(), *self._stat()])
        self._hold(connection, data, close)

    def run(self) -> None:
        if not self._selector_wrapped:
            self._wrap_selector()
        turn_end = self.turn_end
        server = turn_end.server
        start = monotonic_ns()
        scheduled_at = int(turn_end._scheduled_at * 1e9)  # (monotonic ns, as the probe's other times)
        held = turn_end._held
        connections = len({id(c) for c, _, _ in held})
        count = len(held)
        pending, self.pending = self.pending, []
        self._run()
        end = monotonic_ns()
        commands = server.stats.commands - self.commands
        self.commands = server.stats.commands
        self.turns.append([scheduled_at, start, self.commit_ns, end, count, connections, commands, self.gc_ns,
                           self.select_ns, self.gc_passes, *self._stat()])
        self.gc_ns = self.select_ns = self.gc_passes = self.commit_ns = 0
        for executed, cpu, run_queue in pending:
            self.waits.append([executed, end, cpu, run_queue])
        if end - self.last_dump > 1_000_000_000:
            self.last_dump = end
            dumping = thread_time_ns()
            with open(self.path, "a") as f:
                f.write(json.dumps({"turns": self.turns, "probe": self.waits}) + "\n")
            self.turns, self.waits = [], []
            self.own_cpu += thread_time_ns() - dumping

    def _stat(self) -> list:
        """[the thread's CPU time, its run-queue wait] (ns).  The CPU time is
        thread_time_ns(), exact when read: schedstat's is brought up to date only at the
        scheduler's ticks and switches (4 ms apart), too coarse for turns of a
        millisecond.  The probe's own dumps are left out of it (a dump of a second's
        turns takes a few ms: counted, it would make the turn after it look long)."""
        return [thread_time_ns() - self.own_cpu, _schedstat()[1]]
