"""Consumer groups (RCP 11 ``TREAD ... GROUP name [RETRY retry-ms expire-ms]``).

A group lives inside its stream and shares one read position among its clients::

    stream   ... | 41 | 42 | 43 | 44 | 45 | 46 | 47 |   (next_offset 48)
                   acked  pending   ^ next: the next new entry to hand out
    pending  {42: due 1500ms, 1 delivery, expires 61000ms,
              44: due 1200ms, 2 deliveries, expires 60500ms}

Each read hands out entries and advances ``next``, so clients of one group get
disjoint entries.  Entries handed out by a read with RETRY become *pending*
until TACK.  A pending entry whose retry time has come is handed out again (to
any client of the group) before new entries; one whose expire time has come is
dropped without delivery; one evicted from the stream is dropped.

Pending entries are indexed three ways, so that nothing scans the whole list:

- ``_by_offset``: SortedDict offset -> Pending (TACK, ranges, eviction purge),
- ``_by_due``:    SortedList of (retry_at_ms, offset) (due retries, in due order),
- ``_by_expiry``: SortedList of (expire_at_ms, offset) (expiry purge).

When the group holds ``max_pending`` pending entries, reads hand out only due
retries (RCP 11's cap on the pending list).

Times are milliseconds on the caller's clock (wall clock in the server), passed
in explicitly so that replaying a log of effects is deterministic.
"""

from __future__ import annotations

from sortedcontainers import SortedDict, SortedList

__all__ = ["Group", "Pending"]


class Pending:
    """One delivered, unacknowledged entry."""

    __slots__ = ("offset", "deliveries", "retry_at", "expire_at", "retry_ms")

    def __init__(self, offset: int, deliveries: int, retry_at: int, expire_at: int, retry_ms: int) -> None:
        self.offset = offset
        self.deliveries = deliveries
        self.retry_at = retry_at
        self.expire_at = expire_at
        self.retry_ms = retry_ms

    def __repr__(self) -> str:
        return (f"Pending({self.offset}, deliveries={self.deliveries}, retry_at={self.retry_at}, "
                f"expire_at={self.expire_at})")


class Group:
    __slots__ = ("name", "next", "_by_offset", "_by_due", "_by_expiry", "delivered", "acked")

    def __init__(self, name: bytes, next_offset: int) -> None:
        self.name = name
        self.next = next_offset  # the next new offset this group hands out
        self._by_offset: SortedDict = SortedDict()
        self._by_due: SortedList = SortedList()
        self._by_expiry: SortedList = SortedList()
        self.delivered = 0  # entries handed out, counting redeliveries
        self.acked = 0

    # --- reading -------------------------------------------------------------------

    @property
    def pending_count(self) -> int:
        return len(self._by_offset)

    def read(self, stream, count: int, now_ms: int, retry: tuple[int, int] | None,
             max_pending: int) -> list:
        """Hand out up to ``count`` entries as [offset, tag, data] lists.

        Due retries first (in due order), then new entries from ``next`` on,
        skipping missing ones; with ``retry`` = (retry_ms, expire_ms) the new
        entries become pending, and no more new entries are handed out than keep
        the pending list within ``max_pending``.
        O(log P) per entry handed out, plus the expired/evicted entries purged.
        """
        self.purge(stream, now_ms)
        out: list = []
        due = self._by_due
        while len(out) < count and due and due[0][0] <= now_ms:
            _, offset = due.pop(0)
            pending = self._by_offset[offset]
            entry = stream.get(offset)
            if entry is None:  # deleted since (evicted ones were purged above)
                self._forget(pending, due_removed=True)
                continue
            if retry is not None:
                pending.retry_ms = retry[0]
            pending.deliveries += 1
            pending.retry_at = now_ms + pending.retry_ms
            due.add((pending.retry_at, offset))
            out.append([offset, entry.tag, entry.data])
        room = count - len(out)
        if retry is not None:
            room = min(room, max_pending - len(self._by_offset))
        if room > 0:
            if self.next < stream.first:
                self.next = stream.first
            taken = 0
            last = self.next - 1
            for entry in stream.iter_from(self.next):
                if taken == room:
                    break
                out.append([entry.offset, entry.tag, entry.data])
                last = entry.offset
                taken += 1
                if retry is not None:
                    self._add(entry.offset, now_ms, retry)
            if taken < room:
                last = stream.next_offset - 1  # read to the end: skip trailing missing entries too
            self.next = last + 1
        self.delivered += len(out)
        return out

    def has_ready(self, stream, now_ms: int, max_pending: int, retry: bool) -> bool:
        """Would a read hand out anything now? O(log P) (plus a scan over missing entries)."""
        self.purge(stream, now_ms)
        if self._by_due and self._by_due[0][0] <= now_ms:
            return True
        if retry and len(self._by_offset) >= max_pending:
            return False
        start = max(self.next, stream.first)
        if start >= stream.next_offset:
            return False
        return next(stream.iter_from(start), None) is not None

    def next_due_ms(self) -> int | None:
        """When the next retry becomes due or the next expiry happens (to wake readers)."""
        times = []
        if self._by_due:
            times.append(self._by_due[0][0])
        if self._by_expiry:
            times.append(self._by_expiry[0][0])
        return min(times) if times else None

    # --- acknowledging -------------------------------------------------------------

    def ack(self, offsets) -> int:
        """Acknowledge these offsets; replies how many were pending. O(k log P)."""
        acked = 0
        for offset in offsets:
            pending = self._by_offset.get(offset)
            if pending is not None:
                self._forget(pending)
                acked += 1
        self.acked += acked
        return acked


    # --- housekeeping --------------------------------------------------------------

    def purge(self, stream, now_ms: int) -> int:
        """Drop pending entries that expired or were evicted. O(dropped * log P)."""
        dropped = 0
        while self._by_expiry and self._by_expiry[0][0] <= now_ms:
            self._forget(self._by_offset[self._by_expiry[0][1]])
            dropped += 1
        first = stream.first
        while self._by_offset and self._by_offset.peekitem(0)[0] < first:
            self._forget(self._by_offset.peekitem(0)[1])
            dropped += 1
        return dropped

    def pending_list(self, now_ms: int) -> list:
        """[offset, deliveries, ms until retry] for every pending entry, by offset. O(P)."""
        return [[p.offset, p.deliveries, max(0, p.retry_at - now_ms)] for p in self._by_offset.values()]

    def pending_offsets(self, start: int = 1, end: int | None = None) -> list[int]:
        """Pending offsets in [start, end], ascending. O(log P + k)."""
        return list(self._by_offset.irange(start, end))

    def pending_state(self, offset: int) -> tuple | None:
        """(offset, deliveries, retry_at, expire_at, retry_ms) of a pending entry, else None."""
        p = self._by_offset.get(offset)
        return None if p is None else (p.offset, p.deliveries, p.retry_at, p.expire_at, p.retry_ms)

    def info(self) -> dict:
        return {"name": self.name, "next": self.next, "pending": len(self._by_offset)}

    # --- state for persistence ------------------------------------------------------

    def export_state(self) -> dict:
        return {
            "name": self.name,
            "next": self.next,
            "pending": [(p.offset, p.deliveries, p.retry_at, p.expire_at, p.retry_ms)
                        for p in self._by_offset.values()],
        }

    @classmethod
    def from_state(cls, state: dict) -> "Group":
        group = cls(state["name"], state["next"])
        for offset, deliveries, retry_at, expire_at, retry_ms in state["pending"]:
            group._insert(Pending(offset, deliveries, retry_at, expire_at, retry_ms))
        return group

    def restore_pending(self, offset: int, deliveries: int, retry_at: int, expire_at: int,
                        retry_ms: int) -> None:
        """Set one pending entry exactly (replaying a logged group move)."""
        old = self._by_offset.get(offset)
        if old is not None:
            self._forget(old)
        self._insert(Pending(offset, deliveries, retry_at, expire_at, retry_ms))

    # --- internals -----------------------------------------------------------------

    def _add(self, offset: int, now_ms: int, retry: tuple[int, int]) -> None:
        retry_ms, expire_ms = retry
        self._insert(Pending(offset, 1, now_ms + retry_ms, now_ms + expire_ms, retry_ms))

    def _insert(self, pending: Pending) -> None:
        self._by_offset[pending.offset] = pending
        self._by_due.add((pending.retry_at, pending.offset))
        self._by_expiry.add((pending.expire_at, pending.offset))

    def _forget(self, pending: Pending, due_removed: bool = False) -> None:
        del self._by_offset[pending.offset]
        if not due_removed:
            self._by_due.remove((pending.retry_at, pending.offset))
        self._by_expiry.remove((pending.expire_at, pending.offset))

    def _check(self, stream=None) -> None:
        """Assert the three indexes agree."""
        assert len(self._by_due) == len(self._by_offset) == len(self._by_expiry)
        for offset, pending in self._by_offset.items():
            assert pending.offset == offset
            assert (pending.retry_at, offset) in self._by_due
            assert (pending.expire_at, offset) in self._by_expiry
            assert offset < self.next, "a pending entry was handed out, so it is below next"
        if stream is not None:
            assert self.next <= stream.next_offset
