"""A background snapshot (BGSAVE, the base of an AOF rewrite) that never holds the loop.

    event loop                                     worker thread
    ----------                                     -------------
    SnapshotJob.start()  -- picture's moment --
    step(), about 1 ms each:                       snapshot.write_chunks(queue):
      capture keys (copy-on-write per key)           writes, fsyncs
      frame them (snapshot.Framer) --chunks-->         (calls that release the GIL)
    (call_soon) step() ...                           rename
    commands: capture.before_change(key)           returns the size
    last step: end, aux, footer    --None--->      done callback (on the loop): release

The loop captures a slice at a time (persistence.snapshot.IncrementalCapture:
copy-on-write per key, the dispatcher and group reads hand over the keys they
are about to change; a big key's nodes are read as they are framed, a slice at
a time too) and frames what it captured in the same slices into the file's
bytes, checksums included, in chunks of 256 KiB; the writer thread only writes
them and fsyncs, so it needs the GIL a few times per chunk, for microseconds.
All the Python work is on the loop: a writer thread framing records, or
checksumming small pieces, in Python held the GIL in the loop's way, and the
loop waited for it in the middle of its own slices (bench/RESULTS-capture.md).
When the writer falls behind by ``MAX_QUEUED`` bytes the walk pauses for 1 ms
(the loop idles: the writer runs; the keys the walk has not reached are still
captured before they change).  Until the writer is done the garbage collector
is off (the capture makes a few objects per key, freed by reference counting
once framed).

The GIL: the writer needs it for a few microseconds after each write (its
Python between two writes), and takes it when the loop lets go of it between
two callbacks (uvloop runs libuv without it), about every step.  A writer that
waited longer than the switch interval forces the loop to hand it over in the
middle of a step, and the loop then waits until the writer thread is running
again (CPython's forced switch): on a busy machine, until the OS gives it a
core.  The interval stays at Python's 5 ms during a save: 0.5 ms (the interval
of earlier builds, chosen when the writer framed records in Python) made the
loop wait for the GIL 3-30 times as often (bench/RESULTS-capture.md).  The
writer thread is started with the server (``start_writer_thread``): a thread
started by the BGSAVE command made its turn wait for the new thread to run.
"""

from __future__ import annotations

import asyncio
import gc
import queue
import sys
import time

from tstream.persistence import snapshot
from tstream.persistence.framing import PersistenceError

CAPTURE_SLICE_NS = 1_000_000  # loop time the capture and framing take per turn
WALK_SHARE = 3  # the walk takes at most 1/WALK_SHARE of what is left of a slice (framing the rest)
WRITER_SWITCH_INTERVAL = 0.005  # sys.setswitchinterval while a writer thread runs (Python's default)
MAX_QUEUED = 16 << 20  # framed bytes the writer may be behind before the walk waits for it
_FAILED = object()  # put on the queue when the walk failed: the writer gives up


class SnapshotJob:
    """Capture ``server``'s keyspace as it is at ``start`` and write it to ``path``."""

    running = 0  # writer threads running in this process (they share the switch interval)
    switch_interval = sys.getswitchinterval()

    def __init__(self, server, path: str, file_ops) -> None:
        self.server = server
        self.path = path
        self.file_ops = file_ops
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        # (the replication id and offset of the picture: its moment is now)
        self.aux = server.replication.snapshot_aux()
        self.framer = snapshot.Framer(self.queue.put, aux=self.aux)
        self.capture = snapshot.IncrementalCapture(server.keyspace, self.framer.add)
        self.gc_was_enabled = gc.isenabled()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.ended = False  # the writer took the end of the queue
        self.written = 0  # bytes the writer has written (set by the writer thread)
        self.pauses = 0  # times the walk waited for the writer

    @staticmethod
    def start_writer_thread() -> None:
        """Start the loop's default executor's first thread now (at startup, on the
        loop), so that a BGSAVE finds it waiting: the first job started it in its
        own turn, and ``Thread.start`` waits until the new thread runs (3-4 ms of
        the BGSAVE command's turn on a busy machine: bench/RESULTS-capture.md).
        Each job takes an idle thread, or the executor starts one (two at once:
        a BGSAVE and a replica's sync).  Nothing without a running loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.run_in_executor(None, int)  # (the thread then waits for work, the GIL released)

    def start(self) -> asyncio.Future:
        """Start capturing and writing; the future gives the file's size."""
        self.loop = asyncio.get_running_loop()
        self.server.capture = self.capture
        self.server.update_refusing()
        gc.disable()
        cls = type(self)
        cls.running += 1
        if cls.running == 1:
            cls.switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(WRITER_SWITCH_INTERVAL)
        future = self.loop.run_in_executor(None, self._write)
        future.add_done_callback(self._written)
        self.loop.call_soon(self._step)  # (a step that fails fails the future, not the caller)
        return future

    # --- the loop's side ------------------------------------------------------------

    def _step(self) -> None:
        capture, framer = self.capture, self.framer
        if capture.abandoned:  # the writer gave up: stop capturing
            self._walk_done()
            self.queue.put(None)
            return
        clock = time.perf_counter_ns
        deadline = clock() + CAPTURE_SLICE_NS
        waiting = False
        try:
            while framer.run(deadline):
                if capture.done:  # (every capture framed: no lazy one owes its bitmaps)
                    framer.finish()
                    self._walk_done()
                    self.queue.put(None)
                    return
                now = clock()
                if now >= deadline:
                    break
                if framer.sent - self.written > MAX_QUEUED:
                    waiting = True  # the writer is behind: let it catch up
                    break
                capture.step((deadline - now) // WALK_SHARE)
        except BaseException:
            self._walk_done()
            self.queue.put(_FAILED)  # the writer removes its temp file
            raise
        if waiting:
            self.pauses += 1
            self.loop.call_later(0.001, self._step)
        else:
            self.loop.call_soon(self._step)

    def _walk_done(self) -> None:
        """The walk is over: commands no longer hand their keys over."""
        if self.server.capture is self.capture:
            self.server.capture = None
            self.server.update_refusing()

    def _written(self, _: asyncio.Future) -> None:
        self.capture.release()
        if self.gc_was_enabled:  # the captures are written and freed: a collection finds few
            gc.enable()
        cls = type(self)
        cls.running -= 1
        if not cls.running:
            sys.setswitchinterval(cls.switch_interval)

    # --- the worker thread's side ---------------------------------------------------

    def _items(self):
        recycle = self.framer.recycle
        while (item := self.queue.get()) is not None:
            if item is _FAILED:
                self.ended = True
                raise PersistenceError("the snapshot's capture failed (see the log)", self.path)
            yield item
            recycle(item)  # written (write_chunks asks for the next one after): reuse its buffer
        self.ended = True

    def _wrote(self, size: int) -> None:
        self.written = size

    def _write(self) -> int:
        try:
            return snapshot.write_chunks(self._items(), self.path, self.file_ops, written=self._wrote)
        except BaseException:
            if not self.ended:  # the walk goes on: stop it, and wait for its end
                self.capture.abandoned = True
                while (item := self.queue.get()) is not None and item is not _FAILED:
                    pass
            raise
