"""A background snapshot (BGSAVE, the base of an AOF rewrite) that never holds the loop.

    event loop                                   worker thread
    ----------                                   -------------
    SnapshotJob.start()  -- picture's moment --
    step(): capture keys for 1 ms  --queue-->    snapshot.write(items from the queue)
    (call_soon) step() ...         --queue-->      frames each stream, writes, fsyncs,
    commands: capture.before_change(key)           renames
    last step: end of the queue    --None--->    returns the size
                                                 done callback (on the loop): release

The loop captures a slice at a time (persistence.snapshot.IncrementalCapture:
copy-on-write per key, the dispatcher and group reads hand over the keys they
are about to change) and the writer writes as the captures come.  Until the
writer is done the garbage collector is off (the capture makes a few objects
per key, freed by reference counting as they are written; a collection meeting
a million of them waiting in the queue would hold the loop for tens of ms), and while a writer runs Python hands the GIL over
every 0.5 ms instead of every 5 ms (the writer is Python code too: the loop
would otherwise wait for it up to 5 ms between two clients' commands).
"""

from __future__ import annotations

import asyncio
import gc
import queue
import sys

from tstream.persistence import snapshot

CAPTURE_SLICE_NS = 1_000_000  # loop time the capture takes per turn
WRITER_SWITCH_INTERVAL = 0.0005  # sys.setswitchinterval while a writer thread runs


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
        self.capture = snapshot.IncrementalCapture(server.keyspace, self.queue.put)
        self.gc_was_enabled = gc.isenabled()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.ended = False  # the writer took the end of the queue

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
        self._step()
        return future

    # --- the loop's side ------------------------------------------------------------

    def _step(self) -> None:
        capture = self.capture
        if capture.abandoned:  # the writer gave up: stop capturing
            self._end_walk()
            return
        try:
            done = capture.step(CAPTURE_SLICE_NS)
        except BaseException:
            self._end_walk()  # the writer ends with a short file, removed on its error
            raise
        if done:
            self._end_walk()
        else:
            self.loop.call_soon(self._step)

    def _end_walk(self) -> None:
        self.queue.put(None)
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
        while (item := self.queue.get()) is not None:
            yield item
        self.ended = True

    def _write(self) -> int:
        try:
            return snapshot.write(self._items(), self.path, self.file_ops, aux=self.aux)
        except BaseException:
            if not self.ended:  # the walk goes on: stop it, and wait for its end
                self.capture.abandoned = True
                while self.queue.get() is not None:
                    pass
            raise
