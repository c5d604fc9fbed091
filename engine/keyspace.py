"""The keyspace: the single database mapping key (bytes) -> :class:`Stream`.

SCAN
----
Every key gets a monotonically increasing id when it is created; a
``SortedDict`` maps id -> key.  A SCAN cursor is simply the next id to look at,
so a key present for the whole scan is returned exactly once (its id never
changes and the cursor only moves forward), keys created during the scan may
or may not be returned, and cursor 0 starts and ends a scan, as Redis
guarantees.  A deleted and re-created key gets a new id.
"""

from __future__ import annotations

from itertools import islice

from sortedcontainers import SortedDict

from .glob import compile_glob
from .blocks import BlockCache
from .stream import NODE_MAX_BYTES, Stream

__all__ = ["Keyspace"]


class Keyspace:
    __slots__ = ("_streams", "_by_id", "_next_id", "limit_pending", "cache",
                 "node_max_bytes")

    def __init__(self) -> None:
        self._streams: dict[bytes, Stream] = {}
        self._by_id: SortedDict = SortedDict()
        self._next_id = 1  # cursor 0 means "start", so ids start at 1
        # The subject indexes (engine/subjects.py) of this keyspace's streams whose
        # max_msgs_per_subject deleted entries not yet taken (take_deleted) by the
        # server, which logs them.  Per keyspace: servers embedded in one process
        # each see their own.
        self.limit_pending: set = set()
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
        stream.key_id = kid  # kept on the stream: no key -> id dict (memory per key)
        self._by_id[kid] = key
        stream.limit_pending = self.limit_pending
        if stream._subjects is not None and stream._subjects.limit_deleted:
            self.limit_pending.add(stream._subjects)

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
        """Remove ``key``; True if it existed. O(log keys)."""
        stream = self._streams.pop(key, None)
        if stream is None:
            return False
        del self._by_id[stream.key_id]
        stream.clear_cache()
        stream.limit_pending = None
        self.limit_pending.discard(stream._subjects)
        return True

    def flush(self) -> None:
        """Remove every key. O(keys)."""
        self.cache.clear()
        for stream in self._streams.values():
            stream.limit_pending = None
        self.limit_pending.clear()
        self._streams.clear()
        self._by_id.clear()

    def keys(self, pattern: bytes = b"*") -> list[bytes]:
        """Keys matching the Redis glob ``pattern``. O(keys)."""
        if pattern == b"*":
            return list(self._streams)
        match = compile_glob(pattern).fullmatch
        return [k for k in self._streams if match(k) is not None]

    def scan(self, cursor: int, count: int = 10, pattern: bytes | None = None) -> tuple[int, list[bytes]]:
        """One SCAN step: look at up to ``count`` keys from ``cursor``;
        returns ``(next_cursor, matching keys)``, next_cursor 0 when done.
        O(count + log keys)."""
        if cursor < 0:
            raise ValueError("cursor must be >= 0")
        count = max(1, count)
        ids = list(islice(self._by_id.irange(minimum=cursor), count + 1))
        if len(ids) > count:
            next_cursor = ids[count]
            ids = ids[:count]
        else:
            next_cursor = 0
        by_id = self._by_id
        found = [by_id[i] for i in ids]
        if pattern is not None and pattern != b"*":
            match = compile_glob(pattern).fullmatch
            found = [k for k in found if match(k) is not None]
        return next_cursor, found
