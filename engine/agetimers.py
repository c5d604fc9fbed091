"""When each stream's oldest entry ages out (``max_age_ms``): a heap of due times.

Time-based eviction must also happen on a stream nobody writes to (a write
evicts what aged out itself, see ``Stream.enforce_limits``).  Walking every key
on every housekeeping pass would cost O(keys) per pass for the few keys that
have a ``max_age_ms``; instead each such key has one due time, and the
housekeeping pops only the keys whose time has come::

    heap  [(due_ns, key), ...]         smallest due time on top
    live  {key: (due_ns, key)}         the one item per key that counts

A heap item is *live* only while it is the very tuple ``live`` holds for its
key (identity): rescheduling a key or deleting it leaves its old item in the
heap, stale, and the pop skips it.  The heap is rebuilt from ``live`` when stale
items outnumber live ones (plus :data:`SLACK`), so memory stays O(keys with a
max age).

Due times.  Entry times never decrease within a stream, so the first held
entry is the next to age out: it is due at ``time_of(first) + max_age``.  An
empty stream's next entry will be written at a time >= max(now, last_time), so
it cannot be due before ``max(now, last_time) + max_age``: the key is checked
again then, and a stream that stays empty costs one check per max_age period,
nothing per pass.  A due time that turns out early (the first entry was
evicted or deleted by a command meanwhile) costs one check that reschedules.
Only a *shorter* ``max_age_ms`` makes a key due sooner: whoever changes a
stream's config calls :meth:`AgeTimers.schedule` (``Keyspace.limits_changed``).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush

__all__ = ["AgeTimers"]

SLACK = 64


class AgeTimers:
    __slots__ = ("_heap", "_live")

    def __init__(self) -> None:
        self._heap: list[tuple[int, bytes]] = []
        self._live: dict[bytes, tuple[int, bytes]] = {}

    def __len__(self) -> int:
        """Keys with a due time. O(1)."""
        return len(self._live)

    def schedule(self, key: bytes, stream, now_ns: int) -> None:
        """(Re)compute ``key``'s due time from its stream's config and oldest
        entry; a stream without ``max_age_ms`` gets none. O(log keys)."""
        max_age_ms = stream.settings.max_age_ms
        if max_age_ms <= 0:
            self._live.pop(key, None)
            return
        oldest = stream.time_of(stream.first) if stream.first < stream.next_offset else None
        if oldest is None:  # empty: nothing can age out before an entry written from now on
            oldest = max(now_ns, stream.last_time)
        # Entries strictly older than now - max_age are evicted: due one ns later.
        item = (oldest + max_age_ms * 1_000_000 + 1, key)
        old = self._live.get(key)
        if old is not None and old[0] == item[0]:
            return
        self._live[key] = item
        heappush(self._heap, item)
        if len(self._heap) > 2 * len(self._live) + SLACK:
            self._compact()

    def forget(self, key: bytes) -> None:
        """``key`` was deleted: its item goes stale. O(1)."""
        self._live.pop(key, None)

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()

    def next_due(self) -> int | None:
        """The earliest due time (ns), or None. Amortised O(log keys)."""
        heap, live = self._heap, self._live
        while heap:
            item = heap[0]
            if live.get(item[1]) is item:
                return item[0]
            heappop(heap)
        return None

    def pop_due(self, now_ns: int) -> bytes | None:
        """The key of a live item due at ``now_ns`` (its item removed: the
        caller reschedules it), or None. Amortised O(log keys)."""
        heap, live = self._heap, self._live
        while heap:
            item = heap[0]
            if live.get(item[1]) is not item:
                heappop(heap)
                continue
            if item[0] > now_ns:
                return None
            heappop(heap)
            del live[item[1]]
            return item[1]
        return None

    def _compact(self) -> None:
        self._heap = list(self._live.values())
        heapify(self._heap)
