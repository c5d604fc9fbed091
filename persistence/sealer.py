"""Sealing in the background while an AOF loads.

Replaying an AOF of appends spends about 40% of its instructions in zstd,
compressing the blocks of each node it seals (engine/node.py).  While
:func:`persistence.aof.load` runs, a :class:`BackgroundSealer` hangs on the
keyspace's block cache (``BlockCache.sealer``): a stream sealing a node
(``Stream._seal_active``) makes the sealed node and its block bodies at once
(``ActiveNode.seal_begin``) and hands the bodies to this sealer, whose thread
compresses them (zstd releases the GIL: on a second core, while the replay goes
on); the node is completed later on the loading thread (``seal_end``), in the
order the seals were made, so that the keyspace ends byte for byte as sealing
at once leaves it (the same frames: the same levels and parameters; the same
order of the decoded-block cache's entries).

Until a node is completed nothing may read it: the replay settles (completes)
every seal before any record but an append (``Replay``'s ``before_other``), a
stream with limits seals at once after settling all, and :meth:`close`
settles all before the load returns.  A seal's level depends on the seals
before it of its stream (``Stream._fast_seal``: a node that barely compressed
makes the next one use the fast level), which may not be completed when it
is made: it is compressed with the level its stream knows then, and again,
on the loading thread, when its completion finds that the seals before it
chose the other one (rare: the stream's payloads changed kind).  A failure in
the thread (MemoryError) is raised on the loading thread when it settles.

The thread takes every seal queued when it wakes and compresses them in one
call (``multi_compress_to_buffer``), so that it takes the GIL back once per
batch, not once per block; the loading thread checks the records' CRCs in
pieces that keep the GIL (persistence/aof.py), so that it does not hand the
GIL over on every record (and wait for it to come back).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import zstandard

from tstream.engine.blocks import COMPRESSION_LEVEL, FAST_COMPRESSION_LEVEL

__all__ = ["BackgroundSealer"]


class BackgroundSealer:
    """Compresses the seals of a load in a thread (see the module docstring).
    ``cache``: the keyspace's BlockCache; attached by :meth:`open`, detached
    (every seal completed, the thread stopped) by :meth:`close`."""

    def __init__(self, cache) -> None:
        self.cache = cache
        self._jobs: deque = deque()  # [stream, active node, job, frames] not completed, in seal order
        self._queue: list = []  # jobs for the thread (under _lock)
        self._lock = threading.Condition()
        self._error: BaseException | None = None
        self._closing = False
        self._thread: threading.Thread | None = None
        self.redone = 0  # seals compressed again at the other level (see _complete)

    def open(self) -> "BackgroundSealer":
        self.cache.sealer = self
        return self

    # -- the loading thread -------------------------------------------------------
    def submit(self, stream, active, job: tuple) -> None:
        """Queue the compression of ``job`` (``active.seal_begin``'s) of
        ``stream``; completes the seals done meanwhile. O(1) amortised."""
        entry = [stream, active, job, None]
        self._jobs.append(entry)
        with self._lock:
            self._queue.append(entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tstream-aof-sealer", daemon=True)
                self._thread.start()
            self._lock.notify()
        self._complete_ready()

    def settle_all(self) -> None:
        """Complete every seal queued."""
        if self._jobs:
            self._complete_through(self._jobs[-1])

    def close(self, complete: bool = True) -> None:
        """Complete every seal (``complete``; False: the load failed, its
        keyspace is dropped), stop the thread and detach from the cache."""
        try:
            if complete:
                self.settle_all()
        finally:
            if self.cache.sealer is self:
                self.cache.sealer = None
            with self._lock:
                self._closing = True
                if not complete:
                    self._queue.clear()  # (not compressed for nothing)
                self._lock.notify()
            if self._thread is not None:
                self._thread.join()
                self._thread = None

    def _complete_ready(self) -> None:
        jobs = self._jobs
        while jobs and jobs[0][3] is not None:
            self._complete(jobs.popleft())

    def _complete_through(self, entry: list) -> None:
        jobs = self._jobs
        lock = self._lock
        while entry[1] is not None:  # (completed: its active node dropped)
            head = jobs[0]
            if head[3] is None:
                with lock:
                    while head[3] is None and self._error is None:
                        lock.wait()
                if self._error is not None:
                    raise self._error
            self._complete(jobs.popleft())

    def _complete(self, entry: list) -> None:
        stream, active, job, (out, first, n) = entry
        entry[1] = entry[2] = entry[3] = None
        fast = stream._fast_seal  # the level the seals before it chose (all completed now)
        if job[3] == fast:
            frames = [out[k].tobytes() for k in range(first, first + n)]
        else:  # guessed wrong (the stream's payloads changed kind): the right level, here
            self.redone += 1
            ctx = self.cache.compressor(fast)
            frames = [ctx.compress(body) for body in job[2]]
        stream.seal_done(active.seal_end(job, frames, self.cache))

    # -- the thread -----------------------------------------------------------------
    def _run(self) -> None:
        """Compress what is queued, as long as anything is; the GIL is held
        for as little as can be between two compressions (each holding it
        stalls the loading thread when it comes back from a call that let it
        go): the frames are taken out of the buffer by the loading thread."""
        contexts = {False: zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_content_size=True),
                    True: zstandard.ZstdCompressor(level=FAST_COMPRESSION_LEVEL, write_content_size=True)}
        lock = self._lock
        while True:
            with lock:
                lock.notify_all()  # (the batch before is done)
                while not self._queue and not self._closing:
                    lock.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            try:
                # (grouped first: the loading thread may complete an entry,
                # and clear it, as soon as its frames are set)
                groups: dict[bool, list] = {False: [], True: []}
                for entry in batch:
                    job = entry[2]
                    groups[job[3]].append((entry, job[2]))
                for fast, items in groups.items():
                    if not items:
                        continue
                    bodies: list[Any] = [body for _, many in items for body in many]
                    out = contexts[fast].multi_compress_to_buffer(bodies, threads=1)
                    i = 0
                    for entry, many in items:
                        entry[3] = (out, i, len(many))
                        i += len(many)
            except BaseException as exc:  # noqa: BLE001 (handed to the loading thread)
                with lock:
                    self._error = exc
                    lock.notify_all()
                return
