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

Pending entries are kept in a dict and indexed three ways, so that nothing
scans the whole list, with structures whose per-entry work runs in C (dict,
list, heapq); removals are lazy, so TACK is a dict deletion and nothing else:

- ``_by_offset``: dict offset -> the record holding it: the pending set itself
  (TACK, lookups).  The entries one read with RETRY hands out share one
  :class:`Delivery` (their deliveries count and times are the same): a
  delivery of n entries is one object and one item in each heap, its entries
  are acknowledged one by one (a dict deletion each), and its retry hands out
  the entries still held as one new delivery.  An entry looked at by itself
  (or restored from a log) is its own :class:`Pending`.
- ``_order``:     list of offsets, ascending from ``_head`` on (eviction purge of
  the smallest offsets, TACK ranges, listing by offset).  New deliveries are
  appended: ``next`` only grows, so they come in increasing order.  An acked or
  dropped offset stays in the list, *stale*, and is skipped; the purge advances
  ``_head`` over stale and evicted offsets at the front.  An offset inserted
  out of order (``restore_pending`` replaying a log) sets ``_unsorted`` and
  empties the list; the next ordered query rebuilds it from the dict.
- ``_by_due``:    heap of (retry_at_ms, offset, stamp) (due retries, in due order),
- ``_by_expiry``: heap of (expire_at_ms, offset, stamp) (expiry purge).
  ``stamp`` names the record (``_holders``: stamp -> record, while it holds an
  entry): an item does not hold its record, so that record and item make no
  reference cycle (server/collector.py frees deleted keys by reference counting
  alone), and the stamps, unique, settle every tie of time and offset.
  A Delivery's items carry an offset at or below its first held one (the due
  order is time, then offset, entry by entry: a delivery whose entries
  interleave another's of the same time is handed out in parts).
  An X* delivery's entry (engine/xgroups.py: never due, never expires) is in
  neither heap: its items are None (``_unheaped`` counts them).  The entries
  one XREADGROUP hands out share one :class:`OwnedRun` as their value until
  one of them is looked at by itself (then it gets its own Pending).
  A heap item is *live* only while it is the very tuple its record holds
  (``due_item`` / ``exp_item``, identity, not equality): a redelivery
  replaces its due item at the top of the heap; ``restore_pending`` pushes new
  items and leaves the old ones stale; a record whose last entry is acked or
  dropped leaves ``_holders`` and sets both of its items to None (``live``
  counts its entries), which leaves them stale.  Stale
  items are popped when they reach the top.  Identity (rather than comparing
  times) keeps an item stale even if its offset becomes pending again with
  the same time (acked, then restored).

Each index is compacted (rebuilt from the live records) when its stale
items outnumber the live ones by more than :data:`SLACK`, so memory stays
O(pending) and every operation is amortised O(1) index work per entry, plus
O(log P) per heap push/pop (P pending entries).

When the group holds ``max_pending`` pending entries, reads hand out only due
retries (RCP 11's cap on the pending list).

Times are milliseconds on the caller's clock (wall clock in the server), passed
in explicitly so that replaying a log of effects is deterministic.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from heapq import heapify, heappop, heappush, heapreplace
from itertools import count, repeat
from operator import itemgetter
from typing import Any

__all__ = ["Group", "Pending", "OwnedRun", "Consumer", "XGroupState", "NEVER", "INVALID"]

SLACK = 64  # an index is compacted when its stale items exceed live ones + SLACK
# The most entries of one Delivery: a bigger hand-out is cut into deliveries of this
# many.  A retry read that takes part of a delivery copies the rest of its offsets,
# so this bounds that copy (a delivery of 10,000 entries retried a few at a time would
# otherwise cost O(n) a read: O(n^2) in all).
DELIVERY_MAX = 128
NEVER = 1 << 62  # retry/expiry time of an X* pending entry (engine/xgroups.py): never due
INVALID = -1     # an unknown entries-read counter (Redis's SCG_INVALID_ENTRIES_READ)
_new = object.__new__
_first = itemgetter(0)
_stamps = count(1).__next__  # a record's stamp: the third field of its heap items (see Group._holders)
_NONES = repeat(None)  # (endless: one for every map over pops, no repeat() made per call)


class Pending:
    """One delivered, unacknowledged entry.

    ``due_item`` is ``(retry_at, offset)`` and ``exp_item`` is ``(expire_at,
    offset)``: the tuples this entry has in the group's heaps (see the module
    docstring).  Only :class:`Group` changes a Pending.
    """

    __slots__ = ("offset", "deliveries", "retry_at", "expire_at", "retry_ms", "due_item", "exp_item",
                 "owner", "delivered_ms", "xid", "live", "stamp")

    def __init__(self, offset: int, deliveries: int, retry_at: int, expire_at: int, retry_ms: int,
                 owner: bytes | None = None, delivered_ms: int = 0,
                 xid: tuple[int, int] | None = None) -> None:
        self.owner = owner  # the X* consumer that owns it (engine/xgroups.py)
        self.delivered_ms = delivered_ms  # when it was last delivered (X* groups)
        self.xid = xid  # its Redis id (X* groups; kept once its entry is gone)
        self.offset = offset
        self.deliveries = deliveries
        self.retry_at = retry_at
        self.expire_at = expire_at
        self.retry_ms = retry_ms
        self.live = 1  # 0 once no longer pending (its items are then None)
        self.stamp = stamp = _stamps()
        item: tuple | None = (retry_at, offset, stamp)
        self.due_item = item
        # One tuple serves both heaps when the times are equal: an item is live
        # by identity with *its heap's* attribute.  (None, both: in no heap.)
        self.exp_item = item if expire_at == retry_at else (expire_at, offset, stamp)

    @classmethod
    def unheaped(cls, offset: int, deliveries: int, owner: bytes | None, delivered_ms: int,
                 xid: tuple[int, int] | None) -> "Pending":
        """A pending entry that is never due and never expires (an X* delivery,
        engine/xgroups.py): retry and expiry times :data:`NEVER`, in no heap
        (its items are None)."""
        pending = _new(cls)
        pending.offset = offset
        pending.deliveries = deliveries
        pending.retry_at = pending.expire_at = NEVER
        pending.retry_ms = 0
        pending.live = 1
        pending.stamp = 0
        pending.due_item = pending.exp_item = None
        pending.owner = owner
        pending.delivered_ms = delivered_ms
        pending.xid = xid
        return pending

    def __repr__(self) -> str:
        return (f"Pending({self.offset}, deliveries={self.deliveries}, retry_at={self.retry_at}, "
                f"expire_at={self.expire_at})")


class OwnedRun:
    """The X* entries one XREADGROUP handed out (engine/xgroups.py), pending
    together: one object for the run, the value of each of its offsets in
    ``Group._by_offset`` until one of them is looked at one by one
    (:meth:`Group.pending_get`, :meth:`Group.pending_entries`), which makes it
    its own :class:`Pending` (``materialize``).  It reads as a Pending where
    the group's indexes look (in no heap, never due, delivered once), so that
    a delivery costs one dict update and an ack one dict deletion per entry,
    no object per entry.  Never changed once made."""

    __slots__ = ("offsets", "xids", "owner", "delivered_ms")
    retry_at = expire_at = NEVER
    retry_ms = 0
    deliveries = 1
    due_item = exp_item = None

    def __init__(self, offsets: list, xids: list, owner: bytes, delivered_ms: int) -> None:
        self.offsets = offsets  # ascending
        self.xids = xids  # the id of each offset
        self.owner = owner
        self.delivered_ms = delivered_ms

    def materialize(self, offset: int) -> Pending:
        """The Pending of ``offset`` (one of this run's offsets). O(log run)."""
        return Pending.unheaped(offset, 1, self.owner, self.delivered_ms,
                                self.xids[bisect_left(self.offsets, offset)])


class Delivery:
    """The T* entries one read with RETRY handed out together (new entries, or
    the due retries of one earlier delivery), pending together: one object and
    one item in each heap for the delivery, the value of each of its offsets in
    ``Group._by_offset``.  Its entries share their deliveries count and times,
    and are acknowledged one by one (a dict deletion each; ``live`` counts the
    offsets still held); a retry hands out the entries still held and leaves
    the rest due.  It reads as a Pending where the group's indexes look; an
    entry looked at by itself (:meth:`Group.pending_get`) becomes its own
    :class:`Pending`.  Its heap items are ``(time, offset, stamp)`` with an
    offset at or below its first held one (the due order is by time, then
    offset, entry by entry: a delivery whose entries interleave another's of
    the same time is handed out in parts, see ``Group._read_due_run``)."""

    __slots__ = ("offsets", "live", "deliveries", "retry_at", "expire_at", "retry_ms", "due_item", "exp_item",
                 "stamp")
    owner = xid = None
    delivered_ms = 0

    def __init__(self, offsets: list, deliveries: int, retry_at: int, expire_at: int, retry_ms: int) -> None:
        self.offsets = offsets  # ascending; those still held map to this object in Group._by_offset
        self.live = len(offsets)
        self.deliveries = deliveries
        self.retry_at = retry_at
        self.expire_at = expire_at
        self.retry_ms = retry_ms
        self.stamp = stamp = _stamps()
        item: tuple | None = (retry_at, offsets[0], stamp)
        self.due_item = item
        self.exp_item = item if expire_at == retry_at else (expire_at, offsets[0], stamp)

    def __repr__(self) -> str:
        return (f"Delivery({self.offsets}, live={self.live}, deliveries={self.deliveries}, "
                f"retry_at={self.retry_at}, expire_at={self.expire_at})")


OWNED_RUN_MAX = 256  # longer X* deliveries are Pending objects: a run is kept while any of its entries is pending


class Group:
    __slots__ = ("name", "next", "_by_offset", "_order", "_head", "_unsorted", "_by_due", "_due_stale",
                 "_by_expiry", "_exp_stale", "delivered", "acked", "x", "_unheaped", "_holders")

    def __init__(self, name: bytes, next_offset: int) -> None:
        self.name = name
        self.next = next_offset  # the next new offset this group hands out
        self._by_offset: dict[int, Any] = {}  # a Pending, or the OwnedRun holding the offset
        self._order: list[int] = []   # offsets, ascending from _head on; may hold stale ones
        self._head = 0                # _order[:_head] is consumed (none of it pending)
        self._unsorted = False        # _order is empty and must be rebuilt from _by_offset
        self._by_due: list = []       # heap of Pending.due_item, plus stale items
        self._due_stale = 0
        self._by_expiry: list = []    # heap of Pending.exp_item, plus stale items
        self._exp_stale = 0
        self._unheaped = 0  # pending entries in no heap (Pending.unheaped)
        # stamp -> the record (Pending or Delivery) with items in the heaps, while it holds
        # an entry: a heap item names its record by stamp (no record <-> item reference
        # cycle: server/collector.py frees deleted keys by reference counting alone)
        self._holders: dict[int, Any] = {}
        self.delivered = 0  # entries handed out, counting redeliveries
        self.acked = 0
        self.x: XGroupState | None = None  # what the Redis Streams commands keep (engine/xgroups.XGroupState), once used

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
        O(log P) per due retry handed out (one heap replace); per new pending
        entry a dict set, a list append and two heap pushes (O(log P), O(1) in
        the usual case where the new times are the latest); plus the purge and
        the stale heap items popped (amortised O(1) each).
        """
        expiry = self._by_expiry
        order = self._order
        head = self._head
        first = stream.first
        if (expiry and expiry[0][0] <= now_ms) or (head < len(order) and order[head] < first) or self._unsorted:
            self.purge(stream, now_ms)  # (nothing to purge otherwise: the call saved)
        out: list = []
        by_offset = self._by_offset
        due = self._by_due
        if due and due[0][0] <= now_ms:
            self._read_due(stream, count, now_ms, retry, out)
            # (only handing out retries leaves items stale in a read: the purge compacts by itself)
            limit = len(by_offset) + SLACK
            if self._due_stale > limit or self._exp_stale > limit or len(order) - len(by_offset) > limit:
                self._tidy()
        room = count - len(out)
        if retry is not None and room > max_pending - len(by_offset):
            room = max_pending - len(by_offset)
        if room > 0:
            new, self.next = stream.read_held(self.next if self.next >= first else first, room)
            if new:
                if retry is None:
                    pass
                elif self._unsorted or (order and new[0][0] <= order[-1]) or len(new) > DELIVERY_MAX:
                    self._add_pending(new, now_ms, retry)  # not above every listed offset, or cut
                else:  # one Delivery for the new entries (_add_pending's usual case, inlined)
                    offsets = [row[0] for row in new]
                    run = _new(Delivery)
                    run.offsets = offsets
                    run.live = len(offsets)
                    run.deliveries = 1
                    run.retry_ms = retry_ms = retry[0]
                    run.retry_at = retry_at = now_ms + retry_ms
                    run.expire_at = expire_at = now_ms + retry[1]
                    run.stamp = stamp = _stamps()
                    self._holders[stamp] = run
                    run.due_item = item = (retry_at, offsets[0], stamp)
                    heappush(due, item)
                    run.exp_item = item = item if expire_at == retry_at else (expire_at, offsets[0], stamp)
                    heappush(expiry, item)
                    by_offset.update(dict.fromkeys(offsets, run))
                    order += offsets
                out += new
        self.delivered += len(out)
        return out

    def _read_due(self, stream, count: int, now_ms: int, retry, out: list) -> None:
        """Hand out the due retries (in due order) into ``out``, up to ``count``."""
        by_offset = self._by_offset
        holders = self._holders
        due = self._by_due
        again: list = []  # with a retry time of 0, handed out entries are due again at once: not in this read
        while due and len(out) < count:
            item = due[0]
            if item[0] > now_ms:
                break
            pending = holders.get(item[2])
            if pending is None or pending.due_item is not item:
                heappop(due)  # stale
                self._due_stale -= 1
                continue
            if pending.__class__ is Delivery:
                self._read_due_run(stream, count, now_ms, retry, out, item, pending, again)
                continue
            offset = item[1]
            entry = stream.get(offset)
            if entry is None:  # deleted since (evicted ones were purged above)
                heappop(due)
                del by_offset[offset]
                del holders[item[2]]
                pending.live = 0
                pending.due_item = pending.exp_item = None
                self._exp_stale += 1
                continue
            if retry is not None:
                pending.retry_ms = retry[0]
            pending.deliveries += 1
            pending.retry_at = retry_at = now_ms + pending.retry_ms
            pending.due_item = item = (retry_at, offset, item[2])
            if retry_at > now_ms:
                heapreplace(due, item)
            else:
                heappop(due)
                again.append(item)
            out.append([offset, entry.tag, entry.data])
        for item in again:
            heappush(due, item)

    def _read_due_run(self, stream, count: int, now_ms: int, retry, out: list, item: tuple, run: Delivery,
                      again: list) -> None:
        """Hand out the held entries of the delivery of ``item`` (the live top of the
        due heap) into ``out``: up to ``count`` and only those before the next item
        in due order (time, then offset); the rest stays due, as one delivery."""
        by_offset = self._by_offset
        due = self._by_due
        offsets = run.offsets
        if run.live != len(offsets):  # some acknowledged or taken out: keep the held ones
            get = by_offset.get
            offsets = run.offsets = [offset for offset in offsets if get(offset) is run]
        room = count - len(out)
        # The next item in due order besides this one (a child of the top; stale or not:
        # stopping early at a stale one only splits the handing out).
        size = len(due)
        nxt = due[1] if size > 1 else None
        if size > 2 and due[2] < nxt:
            nxt = due[2]
        cut = len(offsets)
        if nxt is not None and nxt[0] == item[0]:
            cut = bisect_right(offsets, nxt[1])  # entries after the other item's offset wait for it
        if cut > room:
            cut = room
        handed = offsets[:cut] if cut < len(offsets) else offsets
        entries = list(map(stream.get, handed))
        if None in entries:  # deleted since (evicted ones were purged above): dropped
            handed, entries = self._drop_deleted(handed, entries)
        rest = offsets[cut:]
        if rest:  # what stays due: keyed by its first entry
            run.offsets = rest
            run.live = len(rest)
            run.due_item = key = (item[0], rest[0], run.stamp)  # (its expiry item stays: same time, a lower offset)
            heapreplace(due, key)
            if handed:  # the part handed out becomes its own delivery
                self._redelivered(handed, run, now_ms, retry, again)
        elif handed:  # all of it handed out: the same object, due again later
            run.offsets = handed
            run.live = len(handed)
            if retry is not None:
                run.retry_ms = retry[0]
            run.deliveries += 1
            run.retry_at = retry_at = now_ms + run.retry_ms
            run.due_item = key = (retry_at, handed[0], run.stamp)
            if retry_at > now_ms:
                heapreplace(due, key)
            else:
                heappop(due)
                again.append(key)
        else:  # every held entry was deleted: the delivery is gone
            heappop(due)
            del self._holders[run.stamp]
            run.live = 0
            run.due_item = run.exp_item = None
            self._exp_stale += 1
        for offset, entry in zip(handed, entries):
            out.append([offset, entry.tag, entry.data])

    def _drop_deleted(self, handed: list, entries: list) -> tuple[list, list]:
        """Drop the pending offsets of ``handed`` whose entry (in ``entries``) is None."""
        by_offset = self._by_offset
        kept = []
        for offset, entry in zip(handed, entries):
            if entry is None:
                del by_offset[offset]
            else:
                kept.append(offset)
        return kept, [entry for entry in entries if entry is not None]

    def _redelivered(self, handed: list, run: Delivery, now_ms: int, retry, again: list) -> None:
        """Make ``handed`` (entries of ``run`` handed out again, the rest of it still
        due) pending as a delivery of their own."""
        retry_ms = retry[0] if retry is not None else run.retry_ms
        retry_at = now_ms + retry_ms
        # (``handed`` is a part of one delivery: at most DELIVERY_MAX entries)
        part = Delivery(handed, run.deliveries + 1, retry_at, run.expire_at, retry_ms)
        self._by_offset.update(dict.fromkeys(handed, part))
        self._holders[part.stamp] = part
        heappush(self._by_expiry, part.exp_item)
        if retry_at > now_ms:
            heappush(self._by_due, part.due_item)
        else:
            again.append(part.due_item)

    def _add_pending(self, entries: list, now_ms: int, retry: tuple[int, int]) -> None:
        """Make newly handed-out entries (ascending offsets, none pending) pending:
        one :class:`Delivery` for them all."""
        retry_ms, expire_ms = retry
        retry_at, expire_at = now_ms + retry_ms, now_ms + expire_ms
        order = self._order
        if self._unsorted or (order and entries[0][0] <= order[-1]):
            for entry in entries:  # not above every listed offset: next moved back
                self._insert(Pending(entry[0], 1, retry_at, expire_at, retry_ms))
            return
        offsets = list(map(_first, entries))
        for at in range(0, len(offsets), DELIVERY_MAX):
            part = offsets[at:at + DELIVERY_MAX] if len(offsets) > DELIVERY_MAX else offsets
            run = Delivery(part, 1, retry_at, expire_at, retry_ms)
            self._by_offset.update(dict.fromkeys(part, run))
            self._holders[run.stamp] = run
            heappush(self._by_due, run.due_item)
            heappush(self._by_expiry, run.exp_item)
        order += offsets

    def has_ready(self, stream, now_ms: int, max_pending: int, retry: bool) -> bool:
        """Would a read hand out anything now? Amortised O(1) plus the purge and stale
        heap items popped (plus a scan over missing entries)."""
        self.purge(stream, now_ms)
        item = self._live_top(self._by_due, True)
        if item is not None and item[0] <= now_ms:
            return True
        if retry and len(self._by_offset) >= max_pending:
            return False
        start = max(self.next, stream.first)
        if start >= stream.next_offset:
            return False
        return next(stream.iter_from(start), None) is not None

    def next_due_ms(self) -> int | None:
        """When the next retry becomes due or the next expiry happens (to wake readers).
        O(1) plus the stale heap items popped off the tops."""
        due = self._live_top(self._by_due, True)
        expiry = self._live_top(self._by_expiry, False)
        if due is None:
            return None if expiry is None else expiry[0]
        return due[0] if expiry is None else min(due[0], expiry[0])

    def due_bound_ms(self) -> int | None:
        """A time at or before :meth:`next_due_ms` (None when both heaps are empty):
        the earlier top of the two heaps, stale or not, with no stale item popped.
        What a blocked reader's timer and its "nothing due" test need (server/blocking.py:
        a timer that fires early finds nothing and is armed again; a read that might
        find something runs); the stale items are left to the reads and the
        compaction (``_tidy``), which drop them in C passes rather than one by one.  O(1)."""
        due = self._by_due
        expiry = self._by_expiry
        if due:
            top = due[0][0]
            return top if not expiry or top <= expiry[0][0] else expiry[0][0]
        return expiry[0][0] if expiry else None

    # --- acknowledging -------------------------------------------------------------

    def ack(self, offsets) -> int:
        """Acknowledge these offsets; replies how many were pending.
        Amortised O(k): a dict deletion each, the indexes are cleaned lazily
        (a delivery's heap items go stale with its last entry)."""
        by_offset = self._by_offset
        popped = list(map(by_offset.pop, offsets, _NONES))
        first = popped[0] if popped else None
        dead = 0
        if first.__class__ is Delivery and popped.count(first) == len(popped):  # of one delivery (the usual TACK)
            acked = len(popped)
            first.live = live = first.live - acked
            self.acked += acked
            if not live:  # its last entries: its heap items go stale
                del self._holders[first.stamp]
                first.due_item = first.exp_item = None
                dead = 1
        else:
            acked = len(popped) - popped.count(None)
            if not acked:
                return 0
            self.acked += acked
            if self._unheaped == len(by_offset) + acked:  # none in a heap (X* deliveries only)
                self._unheaped -= acked
            else:
                dead = self._ack_held(popped)
        self._due_stale = due_stale = self._due_stale + dead
        self._exp_stale = exp_stale = self._exp_stale + dead
        limit = len(by_offset) + SLACK
        if due_stale > limit or exp_stale > limit or len(self._order) - len(by_offset) > limit:
            self._tidy()
        return acked

    def _ack_held(self, popped: list) -> int:
        """Count what the acknowledged ``popped`` (values taken out of ``_by_offset``,
        None for offsets not pending) leave stale: replies how many deliveries
        (Pending or Delivery) went with them."""
        dead = unheaped = 0
        holders = self._holders
        for pending in popped:
            if pending is None:
                continue
            if pending.due_item is None:  # in no heap (an X* delivery's): nothing of it goes stale
                unheaped += 1
                continue
            pending.live -= 1
            if not pending.live:
                del holders[pending.stamp]
                pending.due_item = pending.exp_item = None
                dead += 1
        self._unheaped -= unheaped
        return dead

    # --- housekeeping --------------------------------------------------------------

    def purge(self, stream, now_ms: int) -> int:
        """Drop pending entries that expired or were evicted.
        O(dropped * log P) plus the stale items passed, amortised O(1) each."""
        dropped = 0
        by_offset = self._by_offset
        expiry = self._by_expiry
        while expiry and expiry[0][0] <= now_ms:
            item = heappop(expiry)
            pending = self._holders.get(item[2])
            if pending is None or pending.exp_item is not item:
                self._exp_stale -= 1
                continue
            if pending.__class__ is Delivery:
                get = by_offset.get
                for offset in pending.offsets:
                    if get(offset) is pending:
                        del by_offset[offset]
                dropped += pending.live
            else:
                del by_offset[item[1]]
                dropped += 1
            del self._holders[item[2]]
            pending.live = 0
            pending.due_item = pending.exp_item = None
            self._due_stale += 1
        order = self._sorted_order() if self._unsorted else self._order
        first = stream.first
        head = self._head
        end = len(order)
        while head < end:
            offset = order[head]
            if offset >= first:
                # Ascending: nothing below ``first`` from here on.  The stale offsets
                # here stay listed until the compaction (``_tidy``, one C pass), not
                # skipped one by one by every read.
                break
            if offset in by_offset:
                self._let_go(by_offset.pop(offset))
                dropped += 1
            head += 1
        self._head = head
        if dropped:
            self._tidy()
        return dropped

    def pending_list(self, now_ms: int) -> list:
        """[offset, deliveries, ms until retry] for every pending entry, by offset. O(P)
        (plus an O(P log P) sort after out-of-order restores)."""
        get = self._by_offset.get
        out = []
        for offset in self._live_order():
            p = get(offset)
            if p is not None:
                out.append([offset, p.deliveries, max(0, p.retry_at - now_ms)])
        return out

    def pending_offsets(self, start: int = 1, end: int | None = None) -> list[int]:
        """Pending offsets in [start, end], ascending. O(log P + k + stale offsets in the range)."""
        order = self._sorted_order()
        lo = bisect_left(order, start, self._head)
        hi = len(order) if end is None else bisect_right(order, end, lo)
        by_offset = self._by_offset
        return [offset for offset in order[lo:hi] if offset in by_offset]

    def pending_get(self, offset: int) -> Pending | None:
        """The pending entry of ``offset``, or None. O(1) (O(log run) the first
        time an entry of an :class:`OwnedRun` is looked at)."""
        pending = self._by_offset.get(offset)
        if pending.__class__ is OwnedRun:
            pending = self._by_offset[offset] = pending.materialize(offset)
        elif pending.__class__ is Delivery:
            pending = self._own(offset, pending)
        return pending

    def insert_pending(self, pending: Pending) -> None:
        """Make ``pending`` the pending entry of its offset (replacing any). O(log P)."""
        self._insert(pending)

    def add_pending_owned(self, offsets: list, xids: list, owner: bytes, now_ms: int):
        """Make ``offsets`` (ascending, above every listed offset, none pending)
        pending, owned by ``owner``, delivered once at ``now_ms``, never due
        (X* deliveries, engine/xgroups.py; :meth:`Pending.unheaped`, in no
        heap): the batch form of :meth:`insert_pending`.  Returns None, or the
        (offset, id) pairs when the offsets do not follow the list (left for the
        caller to own one by one). O(k)."""
        by_offset = self._by_offset
        order = self._order
        if self._unsorted or (order and offsets[0] <= order[-1]) or not by_offset.keys().isdisjoint(offsets):
            return list(zip(offsets, xids))  # out of order: one by one
        count = len(offsets)
        if count <= OWNED_RUN_MAX:  # one object for the run (OwnedRun)
            by_offset.update(zip(offsets, repeat(OwnedRun(offsets, xids, owner, now_ms), count)))
        else:
            by_offset.update(zip(offsets, map(Pending.unheaped, offsets, repeat(1, count), repeat(owner, count),
                                              repeat(now_ms, count), xids)))
        order += offsets
        self._unheaped += count
        return None

    def pending_entries(self) -> list[Pending]:
        """Every pending entry, by offset (each its own Pending: the entries of an
        OwnedRun are made so). O(P) (plus a sort after out-of-order inserts)."""
        by_offset = self._by_offset
        get = by_offset.get
        out = []
        for offset in self._live_order():
            p = get(offset)
            if p is not None:
                if p.__class__ is OwnedRun:
                    p = by_offset[offset] = p.materialize(offset)
                elif p.__class__ is Delivery:
                    p = self._own(offset, p)
                out.append(p)
        return out

    def pending_state(self, offset: int) -> tuple | None:
        """(offset, deliveries, retry_at, expire_at, retry_ms) of a pending entry, else None."""
        p = self._by_offset.get(offset)  # (a Delivery's entry reads as it is, nothing made)
        if p is None:
            return None
        if p.__class__ is OwnedRun:
            return (offset, 1, NEVER, NEVER, 0)
        return (offset, p.deliveries, p.retry_at, p.expire_at, p.retry_ms)

    def info(self) -> dict:
        return {"name": self.name, "next": self.next, "pending": len(self._by_offset)}

    # --- state for persistence ------------------------------------------------------

    def export_state(self) -> dict:
        pending = []
        owners = []
        get = self._by_offset.get
        for offset in self._live_order():  # (nothing changed: an OwnedRun's entries read as they are)
            p = get(offset)
            if p is None:
                continue
            if p.__class__ is OwnedRun:
                pending.append((offset, 1, NEVER, NEVER, 0))
                owners.append((offset, p.owner, p.delivered_ms, list(p.xids[bisect_left(p.offsets, offset)])))
                continue
            pending.append((offset, p.deliveries, p.retry_at, p.expire_at, p.retry_ms))
            if p.owner is not None:
                owners.append((offset, p.owner, p.delivered_ms, list(p.xid or (0, 0))))
        state = {"name": self.name, "next": self.next, "pending": pending}
        if self.x is not None:  # X* groups (engine/xgroups.py)
            state["x"] = self.x.export()
            state["owners"] = owners
        return state

    @classmethod
    def from_state(cls, state: dict) -> "Group":
        """Rebuild a group from :meth:`export_state`. O(P) (O(P log P) if not by offset)."""
        group = cls(state["name"], state["next"])
        by_offset = group._by_offset
        for offset, deliveries, retry_at, expire_at, retry_ms in state["pending"]:
            if retry_at == expire_at == NEVER:  # (an X* delivery's: in no heap)
                by_offset[offset] = Pending.unheaped(offset, deliveries, None, 0, None)
                group._unheaped += 1
            else:
                by_offset[offset] = Pending(offset, deliveries, retry_at, expire_at, retry_ms)
        group._order = sorted(by_offset)  # linear when already by offset
        group._rebuild_heaps()
        if state.get("x") is not None:
            x = group.x = XGroupState.load(state["x"])
            for offset, owner, delivered_ms, xid in state.get("owners", ()):
                pending = by_offset[offset]
                pending.owner, pending.delivered_ms, pending.xid = owner, delivered_ms, (xid[0], xid[1])
                x.by_id[b"%d-%d" % pending.xid] = offset
        return group

    def restore_pending(self, offset: int, deliveries: int, retry_at: int, expire_at: int,
                        retry_ms: int) -> None:
        """Set one pending entry exactly (replaying a logged group move). O(log P) amortised."""
        pending = self.pending_get(offset)
        if pending is not None and pending.due_item is None:  # in no heap (an X* delivery's)
            pending.deliveries = deliveries
            pending.retry_ms = retry_ms
            if retry_at != NEVER or expire_at != NEVER:  # due or expiring now: in the heaps
                pending.retry_at, pending.expire_at = retry_at, expire_at
                pending.stamp = stamp = _stamps()
                self._holders[stamp] = pending
                pending.due_item = item = (retry_at, offset, stamp)
                pending.exp_item = item if expire_at == retry_at else (expire_at, offset, stamp)
                heappush(self._by_due, pending.due_item)
                heappush(self._by_expiry, pending.exp_item)
                self._unheaped -= 1
            return
        if pending is not None:
            pending.deliveries = deliveries
            pending.retry_ms = retry_ms
            if pending.retry_at != retry_at:
                pending.retry_at = retry_at
                pending.due_item = (retry_at, offset, pending.stamp)
                heappush(self._by_due, pending.due_item)
                self._due_stale += 1
            if pending.expire_at != expire_at:
                pending.expire_at = expire_at
                pending.exp_item = (expire_at, offset, pending.stamp)
                heappush(self._by_expiry, pending.exp_item)
                self._exp_stale += 1
            self._tidy()
            return
        self._insert(Pending(offset, deliveries, retry_at, expire_at, retry_ms))

    # --- internals -----------------------------------------------------------------

    def _insert(self, pending: Pending) -> None:
        """Make ``pending`` the pending entry of its offset (replacing any). O(log P)."""
        offset = pending.offset
        old = self._by_offset.get(offset)
        self._by_offset[offset] = pending
        if pending.due_item is not None:
            self._holders[pending.stamp] = pending
            heappush(self._by_due, pending.due_item)
            heappush(self._by_expiry, pending.exp_item)
        else:
            self._unheaped += 1
        if old is not None:  # its heap items may go stale; _order lists the offset already
            self._let_go(old)
            self._tidy()
        elif not self._unsorted:
            order = self._order
            if order and offset <= order[-1]:
                # out of order (or an offset still listed as stale): sort lazily
                self._set_unsorted()
            else:
                order.append(offset)

    def _let_go(self, pending) -> None:
        """``pending`` (a Pending, Delivery or OwnedRun) no longer holds one of its
        offsets (taken out of ``_by_offset`` by the caller): count what goes stale."""
        if pending.due_item is None:  # in no heap (an X* delivery's)
            self._unheaped -= 1
            return
        pending.live -= 1
        if not pending.live:  # its last entry: its heap items go stale
            del self._holders[pending.stamp]
            pending.due_item = pending.exp_item = None
            self._due_stale += 1
            self._exp_stale += 1

    def _own(self, offset: int, run: Delivery) -> Pending:
        """Make the entry ``offset`` of ``run`` its own Pending (same times and
        deliveries, its own heap items). O(log P)."""
        pending = self._by_offset[offset] = Pending(offset, run.deliveries, run.retry_at, run.expire_at,
                                                    run.retry_ms)
        self._holders[pending.stamp] = pending
        heappush(self._by_due, pending.due_item)
        heappush(self._by_expiry, pending.exp_item)
        self._let_go(run)
        return pending

    def _live_top(self, heap: list, due: bool):
        """Pop stale items off the top of a heap; return its live top item, or None."""
        holders = self._holders
        while heap:
            item = heap[0]
            pending = holders.get(item[2])
            if pending is not None and (pending.due_item if due else pending.exp_item) is item:
                return item
            heappop(heap)
            if due:
                self._due_stale -= 1
            else:
                self._exp_stale -= 1
        return None

    def _set_unsorted(self) -> None:
        self._unsorted = True
        self._order.clear()
        self._head = 0

    def _sorted_order(self) -> list:
        """``_order``, rebuilt first if out-of-order inserts left it unsorted."""
        if self._unsorted:
            self._order[:] = sorted(self._by_offset)
            self._head = 0
            self._unsorted = False
        return self._order

    def _live_order(self):
        order = self._sorted_order()
        return order[self._head:] if self._head else order

    def _rebuild_heaps(self) -> None:
        values = [p for p in set(self._by_offset.values()) if p.due_item is not None]
        self._holders = {p.stamp: p for p in values}
        due = self._by_due
        due[:] = [p.due_item for p in values]
        heapify(due)
        self._due_stale = 0
        expiry = self._by_expiry
        expiry[:] = [p.exp_item for p in values]
        heapify(expiry)
        self._exp_stale = 0

    def _tidy(self) -> None:
        """Compact any index whose stale items outnumber the live ones by more than SLACK.
        Each compaction is O(live) and follows at least live + SLACK removals: amortised O(1)."""
        by_offset = self._by_offset
        limit = len(by_offset) + SLACK
        if self._due_stale > limit:
            due = self._by_due
            due[:] = [p.due_item for p in set(by_offset.values()) if p.due_item is not None]
            heapify(due)
            self._due_stale = 0
        if self._exp_stale > limit:
            expiry = self._by_expiry
            expiry[:] = [p.exp_item for p in set(by_offset.values()) if p.exp_item is not None]
            heapify(expiry)
            self._exp_stale = 0
        order = self._order
        if len(order) - len(by_offset) > limit:  # stale and consumed offsets (never when unsorted: empty)
            order[:] = filter(by_offset.__contains__, order[self._head:] if self._head else order)
            self._head = 0
            # and the deliveries' lists of offsets (acked ones stay listed until a retry or
            # here): their entries listed stay O(pending) too
            get = by_offset.get
            for run in set(by_offset.values()):
                if run.__class__ is Delivery and run.live != len(run.offsets):
                    run.offsets = [offset for offset in run.offsets if get(offset) is run]

    def _check(self, stream=None) -> None:
        """Assert the indexes agree (live items, stale counters, order), see the module docstring."""
        by_offset = self._by_offset
        unheaped = 0
        runs: dict[int, OwnedRun] = {}
        deliveries: dict[int, list] = {}
        for offset, pending in by_offset.items():
            if pending.__class__ is OwnedRun:  # one object for the entries of one X* delivery
                k = bisect_left(pending.offsets, offset)
                assert k < len(pending.offsets) and pending.offsets[k] == offset, "an offset of its run"
                runs[id(pending)] = pending
                unheaped += 1
                assert offset < self.next, "a pending entry was handed out, so it is below next"
                continue
            assert pending.__class__ is Delivery or pending.offset == offset
            if pending.due_item is None:
                assert pending.exp_item is None and pending.retry_at == pending.expire_at == NEVER, \
                    "only an entry never due and never expiring is in no heap"
                unheaped += 1
            elif pending.__class__ is Delivery:
                run = pending
                k = bisect_left(run.offsets, offset)
                assert k < len(run.offsets) and run.offsets[k] == offset, "an offset of its delivery"
                deliveries.setdefault(id(run), [run, 0])[1] += 1
            else:
                assert pending.live == 1
                assert pending.due_item == (pending.retry_at, offset, pending.stamp)
                assert pending.exp_item == (pending.expire_at, offset, pending.stamp)
            assert offset < self.next, "a pending entry was handed out, so it is below next"
        for run, held in deliveries.values():
            assert run.live == held, f"{run}: {held} entries held"
            assert all(a < b for a, b in zip(run.offsets, run.offsets[1:])), "a delivery's offsets ascend"
            assert len(run.offsets) <= DELIVERY_MAX, "a delivery's size is bounded"
            first = min(o for o in run.offsets if by_offset.get(o) is run)
            due_item, exp_item = run.due_item, run.exp_item
            assert due_item[0] == run.retry_at and due_item[1] <= first and due_item[2] == run.stamp, (run, due_item)
            assert exp_item[0] == run.expire_at and exp_item[1] <= first and exp_item[2] == run.stamp, (run, exp_item)
        assert unheaped == self._unheaped, f"unheaped counter {self._unheaped}, {unheaped} entries"
        heaped = {id(p): p for p in by_offset.values() if p.due_item is not None}
        holders = self._holders
        assert {id(p) for p in holders.values()} == set(heaped), "the records in the heaps, by stamp"
        assert all(p.stamp == stamp for stamp, p in holders.items())
        for heap, attr, stale in ((self._by_due, "due_item", self._due_stale),
                                  (self._by_expiry, "exp_item", self._exp_stale)):
            for i in range(1, len(heap)):
                assert heap[i][:2] >= heap[(i - 1) // 2][:2], "heap property"
            live = set()
            for item in heap:
                assert len(item) == 3
                held = holders.get(item[2])
                if held is not None and getattr(held, attr) is item:
                    assert id(item) not in live, f"{attr} {item} twice in its heap"
                    live.add(id(item))
            assert len(live) == len(heaped), f"every heaped pending entry has its {attr} in the heap"
            assert len(heap) - len(live) == stale, f"{attr} stale counter {stale}, heap {len(heap)}"
            assert stale <= len(by_offset) + SLACK, "compacted when stale items exceed live + SLACK"
        order, head = self._order, self._head
        assert 0 <= head <= len(order)
        if self._unsorted:
            assert not order and head == 0
        else:
            rest = order[head:]
            assert all(a < b for a, b in zip(rest, rest[1:])), "order list ascending, no duplicates"
            assert not any(offset in by_offset for offset in order[:head]), "consumed offsets are not pending"
            listed = sum(offset in by_offset for offset in rest)
            assert listed == len(by_offset), "every pending offset listed"
            assert len(order) - len(by_offset) <= len(by_offset) + SLACK
        if stream is not None:
            assert self.next <= stream.next_offset
        self._check_owned(runs)

    def _check_owned(self, runs: dict) -> None:
        """Assert what X* deliveries keep: each OwnedRun, each owned entry found by its id."""
        by_offset = self._by_offset
        for run in runs.values():
            assert len(run.offsets) == len(run.xids) <= OWNED_RUN_MAX and run.offsets, "an id per offset"
            assert all(a < b for a, b in zip(run.offsets, run.offsets[1:])), "a run's offsets ascend"
            assert all(a < b for a, b in zip(run.xids, run.xids[1:])), "and so do their ids"
            assert (run.retry_at, run.expire_at, run.due_item, run.exp_item, run.deliveries) == (NEVER, NEVER, None, None, 1)
        x = self.x
        for offset, pending in by_offset.items():
            if pending.owner is not None:  # an X* pending entry (engine/xgroups.py)
                xid = pending.xids[bisect_left(pending.offsets, offset)] if pending.__class__ is OwnedRun else pending.xid
                assert x is not None and pending.owner in x.consumers, "its owner is a consumer of the group"
                assert xid is not None and x.by_id.get(b"%d-%d" % xid) == offset, "found by its id"
                assert pending.retry_at == NEVER and pending.expire_at == NEVER, "never due by itself"


class Consumer:
    """One consumer of a group, and when it was last seen."""

    __slots__ = ("name", "seen_ms")

    def __init__(self, name: bytes, seen_ms: int) -> None:
        self.name = name
        self.seen_ms = seen_ms


class XGroupState:
    """What Redis keeps of a group beyond its read position and pending list."""

    __slots__ = ("last_id", "entries_read", "consumers", "by_id", "last_entry")

    def __init__(self, last_id: tuple[int, int], entries_read: int = INVALID) -> None:
        self.last_id = last_id
        self.entries_read = entries_read
        self.consumers: dict[bytes, Consumer] = {}
        # id -> offset of the entries handed out as X* pending, the id as the
        # reply spelt it (b"ms-seq": XACK looks its arguments up as they come,
        # XCLAIM the ids it parsed, also once the entry is gone).  An entry's id
        # never changes, so a mapping is never wrong, only maybe no longer
        # pending: XACK takes out what it finds, other acks leave theirs until
        # engine/xgroups.deliver compacts the map (over pending + SLACK).
        self.by_id: dict[bytes, int] = {}
        # (offset, id) of the last entry handed out by XREADGROUP, while ``last_id``
        # is its id: the next read derives its ids from it (engine/xids.ids_between).
        self.last_entry: tuple[int, tuple[int, int]] | None = None

    def export(self) -> list:
        return [list(self.last_id), self.entries_read,
                [[c.name, c.seen_ms] for c in self.consumers.values()]]

    @classmethod
    def load(cls, value: list) -> "XGroupState":
        last_id, entries_read, consumers = value
        x = cls((int(last_id[0]), int(last_id[1])), int(entries_read))
        for name, seen_ms in consumers:
            x.consumers[name] = Consumer(name, int(seen_ms))
        return x
