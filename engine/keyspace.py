"""The keyspace: the single database mapping key (bytes) -> :class:`Stream`.

SCAN
----
Every key gets a monotonically increasing id when it is created.  A SCAN
cursor is simply the next id to look at, so a key present for the whole scan
is returned exactly once (its id never changes and the cursor only moves
forward), keys created during the scan may or may not be returned, and cursor
0 starts and ends a scan, as Redis guarantees.  A deleted and re-created key
gets a new id.

The ids are positions in *chunks* of :data:`SCAN_CHUNK` consecutive ids, kept
in id order; a chunk is a list that starts with its number and its count of
live keys, then one slot per id (the key, or None once deleted)::

    _chunks = [ [0, 2, b"a", None, b"c", ...],  [1, 128, b"x", ...],  [3, 5, ...] ]
                 ^ ids 1..128                      ids 129..256          (chunk 2: all deleted, dropped)

A stream holds its chunk (``Stream.key_slot``: a reference, no object of its
own), so deleting a key finds its slot by one scan of the chunk.  A key costs
one list slot (8 bytes) here, not a sorted-map entry and an int (~140 bytes
at a million keys).

Time-based eviction
-------------------
Keys whose stream has a ``max_age_ms`` have a due time in an
:class:`~.agetimers.AgeTimers` heap (when their oldest entry ages out);
:meth:`Keyspace.evict_aged` serves only the keys that are due, so a key with
nothing due costs nothing per housekeeping pass.  Loading a stream (``put``)
schedules it; whoever changes a stream's config calls ``limits_changed``.
"""

from __future__ import annotations

from bisect import bisect_left
from operator import itemgetter
from time import perf_counter_ns, time_ns

from .agetimers import AgeTimers
from .blocks import BlockCache
from .glob import compile_glob
from .stream import NODE_MAX_BYTES, Stream

__all__ = ["SCAN_CHUNK", "Keyspace"]

SCAN_CHUNK = 128  # ids per chunk: a live key holds at most one chunk of slots (~1 KiB) alive
_HEAD = 2  # a chunk's header: its number, its count of live keys
_chunk_number = itemgetter(0)


class Keyspace:
    __slots__ = ("_streams", "_chunks", "_tail", "_next_id", "limit_pending", "cache",
                 "node_max_bytes", "age_timers")

    def __init__(self) -> None:
        self._streams: dict[bytes, Stream] = {}
        # SCAN order (see the module docstring): the chunks in id order, and
        # the one new ids go to (None: start a new one).
        self._chunks: list[list] = []
        self._tail: list | None = None
        self._next_id = 1  # cursor 0 means "start", so ids start at 1
        # The subject indexes (engine/subjects.py) of this keyspace's streams whose
        # max_msgs_per_subject deleted entries not yet taken (take_deleted) by the
        # server, which logs them.  Per keyspace: servers embedded in one process
        # each see their own.
        self.limit_pending: set = set()
        self.age_timers = AgeTimers()  # keys with a max_age_ms, by when their oldest entry ages out
        # The decoded-block LRU and zstd contexts of this keyspace's streams
        # (engine/blocks.py): per keyspace, so that one server's FLUSHALL or
        # cache limits never touch another's.
        self.cache = BlockCache()
        # Payload bytes of a node before it is sealed (0: no limit), given to
        # the streams created or put from now on (server option node-max-bytes).
        self.node_max_bytes = NODE_MAX_BYTES

    @property
    def streams(self) -> dict:
        """The live key -> Stream dict, for fast lookups on hot paths.  The
        same object for the keyspace's whole life (flush() empties it in
        place).  Read only: create and delete keys through the methods, which
        keep the SCAN ids in step.  O(1)."""
        return self._streams

    def __len__(self) -> int:
        """Number of keys. O(1)."""
        return len(self._streams)

    def __contains__(self, key: bytes) -> bool:
        """True if ``key`` exists. O(1)."""
        return key in self._streams

    def __iter__(self):
        return iter(self._streams)

    def items(self):
        """(key, stream) pairs in creation order (a live view). O(1)."""
        return self._streams.items()

    def get(self, key: bytes) -> Stream | None:
        """The stream at ``key`` or None. O(1)."""
        return self._streams.get(key)

    def _register(self, key: bytes, stream: Stream) -> None:
        kid = self._next_id
        self._next_id = kid + 1
        self._streams[key] = stream
        tail = self._tail
        if tail is None:  # the first id of a chunk
            self._tail = tail = [(kid - 1) // SCAN_CHUNK, 0]
            self._chunks.append(tail)
        tail.append(key)
        tail[1] += 1
        if len(tail) == _HEAD + SCAN_CHUNK:
            self._tail = None
        stream.key_slot = tail  # its chunk: no key -> id dict, no int per key (memory per key)
        stream.limit_pending = self.limit_pending
        if stream._subjects is not None and stream._subjects.limit_deleted:
            self.limit_pending.add(stream._subjects)
        if stream.settings.max_age_ms > 0:
            self.age_timers.schedule(key, stream, time_ns())

    def get_or_create(self, key: bytes, node_entries: int = 1000) -> Stream:
        """The stream at ``key``, created empty (with ``node_entries`` per
        node, sealed at :attr:`node_max_bytes`) if absent. O(1), O(log keys) on creation."""
        stream = self._streams.get(key)
        if stream is None:
            if type(key) is not bytes:
                raise TypeError("key must be bytes")
            stream = Stream(node_entries, self.cache, self.node_max_bytes)
            self._register(key, stream)
        return stream

    def put(self, key: bytes, stream: Stream) -> None:
        """Store ``stream`` at ``key`` (replacing any previous one), e.g. when
        loading a snapshot. O(log keys)."""
        if type(key) is not bytes:
            raise TypeError("key must be bytes")
        self.delete(key)
        stream.use_cache(self.cache)
        stream.node_max_bytes = self.node_max_bytes
        self._register(key, stream)

    def delete(self, key: bytes) -> bool:
        """Remove ``key``; True if it existed. O(log keys + SCAN_CHUNK)."""
        stream = self._streams.pop(key, None)
        if stream is None:
            return False
        chunk = stream.key_slot
        assert chunk is not None  # every stream of the keyspace holds its chunk
        self._unslot(key, chunk)
        stream.key_slot = None
        self.age_timers.forget(key)
        stream.clear_cache()
        stream.limit_pending = None
        self.limit_pending.discard(stream._subjects)
        _break_cycles(stream)
        return True

    def flush(self) -> None:
        """Remove every key. O(keys)."""
        self.cache.clear()
        for stream in self._streams.values():
            stream.limit_pending = None
            stream.key_slot = None
            _break_cycles(stream)
        self.limit_pending.clear()
        self.age_timers.clear()
        self._streams.clear()
        self._chunks.clear()
        self._tail = None
        # Ids go on, from the next chunk's first one (a new chunk starts at its
        # first slot): a cursor from before the flush returns no old id twice.
        self._next_id = -(-(self._next_id - 1) // SCAN_CHUNK) * SCAN_CHUNK + 1

    def _unslot(self, key: bytes, chunk: list) -> None:
        """Empty ``key``'s slot in ``chunk``; drop the chunk once every id it
        will ever hold is deleted. O(SCAN_CHUNK + log keys)."""
        chunk[chunk.index(key, _HEAD)] = None
        live = chunk[1] - 1
        chunk[1] = live
        if not live and chunk is not self._tail:
            chunks = self._chunks
            i = bisect_left(chunks, chunk[0], key=_chunk_number)
            del chunks[i]

    def limits_changed(self, key: bytes) -> None:
        """The config of ``key``'s stream changed (TCONFIG SET, a replayed
        CONFIG record): recompute when its oldest entry ages out. O(log keys)."""
        stream = self._streams.get(key)
        if stream is not None:
            self.age_timers.schedule(key, stream, time_ns())

    def evict_aged(self, now_ns: int, budget_ns: int = 2_000_000) -> list[tuple[bytes, object, int, int]]:
        """Apply the limits of the keys whose oldest entry aged out by
        ``now_ns``, for at most about ``budget_ns`` of CPU (the rest stay due
        for the next call); returns ``(key, stream, first offset before,
        entries evicted)`` for the keys that lost entries.  O(due keys x (log keys + eviction)); nothing
        for keys that are not due."""
        timers = self.age_timers
        streams = self._streams
        deadline = perf_counter_ns() + budget_ns
        done: list[tuple[bytes, object, int, int]] = []
        while (key := timers.pop_due(now_ns)) is not None:
            stream = streams.get(key)
            if stream is None:
                continue
            first = stream.first
            evicted = stream.enforce_limits(now_ns)
            if evicted:
                done.append((key, stream, first, evicted))
            timers.schedule(key, stream, now_ns)
            if perf_counter_ns() > deadline:
                break
        return done

    def keys(self, pattern: bytes = b"*") -> list[bytes]:
        """Keys matching the Redis glob ``pattern``. O(keys)."""
        if pattern == b"*":
            return list(self._streams)
        match = compile_glob(pattern).fullmatch
        return [k for k in self._streams if match(k) is not None]

    def scan(self, cursor: int, count: int = 10, pattern: bytes | None = None) -> tuple[int, list[bytes]]:
        """One SCAN step: look at up to ``count`` keys from ``cursor``;
        returns ``(next_cursor, matching keys)``, next_cursor 0 when done.
        O(count + log keys), plus the deleted slots passed over (fewer than
        ``SCAN_CHUNK`` per chunk holding a live key)."""
        if cursor < 0:
            raise ValueError("cursor must be >= 0")
        count = max(1, count)
        chunks = self._chunks
        pos = max(cursor, 1) - 1  # the cursor's id - 1: chunk number and slot
        i = bisect_left(chunks, pos // SCAN_CHUNK, key=_chunk_number)
        slot = _HEAD + pos % SCAN_CHUNK if i < len(chunks) and chunks[i][0] == pos // SCAN_CHUNK else _HEAD
        found: list[bytes] = []
        next_cursor = 0
        while i < len(chunks):
            chunk = chunks[i]
            for j in range(slot, len(chunk)):
                key = chunk[j]
                if key is not None:
                    if len(found) == count:
                        next_cursor = chunk[0] * SCAN_CHUNK + j - _HEAD + 1
                        break
                    found.append(key)
            if next_cursor:
                break
            i += 1
            slot = _HEAD
        if pattern is not None and pattern != b"*":
            match = compile_glob(pattern).fullmatch
            found = [k for k in found if match(k) is not None]
        return next_cursor, found


def _break_cycles(stream: Stream) -> None:
    """A deleted stream is freed by reference counting alone, even when the
    collector no longer looks at it (the server freezes long-lived objects, see
    server/collector.py): its subject index points back at it, so drop the
    index (it is rebuilt on first need)."""
    stream._subjects = None
