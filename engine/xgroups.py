"""Consumer groups as the Redis Streams commands see them (commands/xgroups.py).

A group made by ``XGROUP CREATE`` is the same :class:`engine.groups.Group`
object that ``TREAD ... GROUP`` uses (one read position, ``next``, and one
pending list); X* adds what Redis keeps beside it, in ``group.x``::

    Group "g"   next = 43   pending {40: Pending(owner=b"alice", delivered_ms=..., deliveries=2),
                                     41: Pending(owner=b"bob", ...)}
    group.x     last_id = 1700000000000-3      (the id before ``next``)
                entries_read = 42              (Redis 7's lag bookkeeping; -1: unknown)
                consumers {b"alice": Consumer(seen_ms), b"bob": Consumer(seen_ms)}

A consumer's pending entries are those whose ``owner`` is its name (found by a
scan of the pending list when asked: XPENDING, XINFO, DELCONSUMER), so TACK,
eviction and XACK keep them right with nothing else to update.

An X* pending entry is owned by a consumer and never falls due by itself: its
retry and expiry times are :data:`NEVER` and it is in none of the group's
heaps (``Pending.unheaped``; the entries of one delivery share one
``OwnedRun`` until one is looked at by itself: no object per entry handed out);
only XCLAIM/XAUTOCLAIM move it (and TREAD's RETRY reads never hand it out again).  ``group.x.by_id`` maps the ids handed
out, as the replies spell them (``b"ms-seq"``), to their offsets, so that XACK
finds its arguments' offsets with one dict lookup each, no parsing.  Times are milliseconds on the
caller's clock, passed in, so that replaying a log is deterministic.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import repeat

from .groups import INVALID, NEVER, SLACK, Consumer, Group, Pending, XGroupState
from .xids import MAX_ID, entries_added, id_of, ids_between, offset_at_or_after, top_id

__all__ = ["NEVER", "INVALID", "Consumer", "XGroupState", "state", "create", "consumer",
           "deliver", "deliver_columns", "new_tables", "deliver_derived", "take_pending", "owned", "delete_consumer", "first_id", "lag", "estimate_read",
           "has_tombstones_after"]


def state(stream, group: Group) -> XGroupState:
    """The group's X* state, made at first need (for a group made by TREAD:
    its last id is the id before its read position). O(log N)."""
    x = group.x
    if x is None:
        before = group.next - 1
        nodes = stream.node_list()
        if before >= (nodes[0].start if nodes else stream.next_offset) and before >= 1:
            last = id_of(stream, before)
        else:
            last = top_id(stream) if group.next >= stream.next_offset else (0, 0)
        x = group.x = XGroupState(last)
    return x


def create(stream, name: bytes, last_id: tuple[int, int], entries_read: int = INVALID) -> Group:
    """A new group reading after ``last_id``. O(log N)."""
    group = Group(name, offset_after(stream, last_id))
    group.x = XGroupState(last_id, entries_read)
    stream.add_group(name, group)
    return group


def offset_after(stream, xid: tuple[int, int]) -> int:
    """The first offset whose id is above ``xid``. O(log N)."""
    if xid == MAX_ID:
        return stream.next_offset
    return offset_at_or_after(stream, (xid[0], xid[1] + 1) if xid[1] < MAX_ID[1] else (xid[0] + 1, 0))


def set_last_id(stream, group: Group, last_id: tuple[int, int], entries_read: int = INVALID) -> None:
    """XGROUP SETID. O(log N)."""
    x = state(stream, group)
    x.last_id = last_id
    x.entries_read = entries_read
    group.next = offset_after(stream, last_id)


def consumer(group: Group, name: bytes, now_ms: int) -> Consumer:
    """The consumer ``name``, created if new (``group.x`` must exist). O(1)."""
    assert group.x is not None
    consumers = group.x.consumers
    found = consumers.get(name)
    if found is None:
        found = consumers[name] = Consumer(name, now_ms)
    return found


def _own(group: Group, offset: int, xid: tuple[int, int], owner: Consumer, now_ms: int,
         deliveries: int) -> Pending:
    """Make ``offset`` (id ``xid``) pending, owned by ``owner`` (taken from its
    previous owner). O(1) amortised."""
    pending = group.pending_get(offset)
    if pending is None or pending.retry_at != NEVER:
        pending = Pending.unheaped(offset, deliveries, owner.name, now_ms, xid)
        group.insert_pending(pending)
    else:
        pending.deliveries = deliveries
    pending.owner = owner.name
    pending.delivered_ms = now_ms
    pending.xid = xid
    assert group.x is not None
    group.x.by_id[b"%d-%d" % xid] = offset
    return pending


def pending_offset(group: Group, xid: tuple[int, int]) -> int | None:
    """The offset of the X* pending entry with id ``xid``, or None. O(1)."""
    assert group.x is not None
    by_id = group.x.by_id
    text = b"%d-%d" % (xid[0], xid[1])
    offset = by_id.get(text)
    if offset is None:
        return None
    pending = group.pending_get(offset)
    if pending is None or pending.xid != xid:
        del by_id[text]  # acknowledged since (or handed out again by TREAD)
        return None
    return offset


def compact_ids(group: Group) -> None:
    """Rebuild ``group.x.by_id`` from the owned pending entries (acks other than
    XACK's leave their ids in it). O(P)."""
    assert group.x is not None
    group.x.by_id = {b"%d-%d" % (p.xid or (0, 0)): p.offset for p in group.pending_entries() if p.owner is not None}


def deliver(stream, group: Group, owner: Consumer, count: int, now_ms: int, noack: bool) -> tuple[list, list]:
    """XREADGROUP ``>``: up to ``count`` new entries ``[offset, tag, data]`` for
    ``owner`` (pending, owned, unless ``noack``), and their ids as the reply
    spells them (``b"ms-seq"``): :func:`deliver_columns` as rows.
    O(count + missing offsets skipped)."""
    offsets, tags, datas, texts = deliver_columns(stream, group, owner, count, now_ms, noack)
    return [list(row) for row in zip(offsets, tags, datas)], texts


def deliver_columns(stream, group: Group, owner: Consumer, count: int, now_ms: int,
                    noack: bool) -> tuple[list, list, list, list]:
    """XREADGROUP ``>``: up to ``count`` new entries for ``owner`` (pending,
    owned, unless ``noack``) as four columns: offsets, tags (the first field),
    datas, and their ids as the reply spells them (``b"ms-seq"``); the group's
    last id and entries-read move as Redis's do.  The entries are read as
    columns (``Stream.read_columns``) and, when they follow the last read with
    no deleted entry nor stored id among them, their ids are derived from their
    times one millisecond at a time (one C bisection and one format map each):
    no bytecode per entry but the pending entry made for it.
    O(count + missing offsets skipped)."""
    x = group.x or state(stream, group)
    start = max(group.next, stream.first)
    last = x.last_entry
    following = last is not None and last[1] == x.last_id and last[0] == start - 1  # right after the last read
    if not following and start < stream.next_offset and id_of(stream, start) <= x.last_id:
        start = offset_after(stream, x.last_id)  # the last id was set ahead of the entries then written
        following = False
    offsets, tags, datas, times = stream.read_columns(start, count)
    if not offsets:
        group.next = max(start, stream.next_offset)  # (Stream.read_held's next position)
        return offsets, tags, datas, []
    n = len(offsets)
    end = offsets[-1] + 1
    group.next = end if n == count else max(start, stream.next_offset)
    sx = stream._x
    if (following and last is not None and offsets[0] == start and end - start == n
            and (sx is None or bisect_right(sx.offs, end - 1) == bisect_right(sx.offs, start - 1))):
        # No gap and no stored id in the range: the ids follow the last one
        # handed out, the sequence restarting at 0 with each new millisecond.
        derived = _ids_from_times(times, last[1])
    else:
        derived = None
    if derived is not None:
        row_ids, texts = derived
    else:
        low = offsets[0]
        if following and last is not None:
            span = ids_between(stream, start, end, last[1])
            ids = span[low - start:]
        else:
            ids = ids_between(stream, low, end)
        row_ids = [ids[offset - low] for offset in offsets] if len(ids) != n else ids
        texts = [b"%d-%d" % xid for xid in row_ids]
    _handed_out(stream, group, x, owner, offsets, row_ids, texts, now_ms, noack)
    return offsets, tags, datas, texts


def new_tables(stream, group: Group, count: int) -> tuple[list, int, int] | None:
    """XREADGROUP ``>``'s next (up to ``count``) entries as the decoded tables
    that hold them (``Stream.read_tables``), when their ids can be derived from
    their times alone: they follow the last entry handed out, with no gap, no
    deleted entry and no stored id among them.  ``(tables, start, end)``, the
    offsets ``[start, end)``; else None (then :func:`deliver_columns`).
    Nothing changes: :func:`deliver_derived` hands the entries out once their
    ids are known (resp's ``encode_stream_tables`` derives them while it
    writes the reply).  O(blocks touched), plus at most one decompression per
    sealed block."""
    x = group.x or state(stream, group)
    start = max(group.next, stream.first)
    last = x.last_entry
    if last is None or last[0] != start - 1 or last[1] != x.last_id or start >= stream.next_offset:
        return None
    tables = stream.read_tables(start, count)
    if not tables:
        return None
    _buf, _ends, _tags, _times, i, j, first = tables[-1]
    end = first + j - i
    sx = stream._x
    if sx is not None and bisect_right(sx.offs, end - 1) != bisect_right(sx.offs, start - 1):
        return None  # (a stored id in the range)
    return tables, start, end


def deliver_derived(stream, group: Group, owner: Consumer, start: int, end: int, count: int, row_ids: list,
                    texts: list, now_ms: int, noack: bool) -> list:
    """:func:`deliver_columns`' changes for the entries ``[start, end)`` that
    :func:`new_tables` found, their ids ``row_ids`` (spelt ``texts``) derived
    from their times: the group moved past them, their pending entries owned
    by ``owner`` (unless ``noack``).  Returns their offsets. O(end - start)."""
    offsets = list(range(start, end))
    group.next = end if end - start == count else max(start, stream.next_offset)
    _handed_out(stream, group, group.x or state(stream, group), owner, offsets, row_ids, texts, now_ms, noack)
    return offsets


def _handed_out(stream, group: Group, x: XGroupState, owner: Consumer, offsets: list, row_ids: list, texts: list,
                now_ms: int, noack: bool) -> None:
    """The group's bookkeeping of the entries ``offsets`` (ids ``row_ids``,
    spelt ``texts``) just handed out to ``owner``: entries-read, the last id,
    their pending entries (unless ``noack``), the ids' map. O(len(offsets))."""
    n = len(offsets)
    sx = stream._x
    if x.entries_read != INVALID and (sx is None or sx.max_deleted == (0, 0) or stream.length == 0):
        x.entries_read += n  # no tombstone anywhere: one more per entry (_count_reads, inlined)
    else:
        _count_reads(stream, x, row_ids)
    x.last_id = row_ids[-1]
    if not noack:
        fresh = group.add_pending_owned(offsets, row_ids, owner.name, now_ms)
        by_id = x.by_id
        by_id.update(zip(texts, offsets))
        if fresh is not None:  # not after every listed offset (the group moved back): one by one
            for offset, xid in fresh:
                _own(group, offset, xid, owner, now_ms, 1)
        if len(by_id) > 2 * len(group._by_offset) + SLACK:  # (group.pending_count)
            compact_ids(group)
    x.last_entry = (offsets[-1], x.last_id)
    group.delivered += n


def _ids_from_times(times: list, before: tuple[int, int]) -> tuple[list, list] | None:
    """The ids (and their texts ``b"ms-seq"``) of consecutive entries written at
    ``times`` (ns) with no stored id among them, the entry before them having
    id ``before`` (their times' milliseconds are then ``>= before``'s and
    non-decreasing, engine/xids.py): per millisecond, one C bisection and one
    format map.  None if the first time is before ``before`` (never so)."""
    n = len(times)
    ms = times[0] // 1_000_000
    if ms < before[0]:
        return None
    seq = before[1] + 1 if ms == before[0] else 0
    if times[-1] // 1_000_000 == ms:  # one millisecond (the usual case)
        return (list(zip(repeat(ms, n), range(seq, seq + n))),
                list(map((b"%d-%%d" % ms).__mod__, range(seq, seq + n))))
    ids: list = []
    texts: list = []
    i = 0
    while True:
        j = bisect_left(times, (ms + 1) * 1_000_000, i)
        ids += zip(repeat(ms, j - i), range(seq, seq + j - i))
        texts += map((b"%d-%%d" % ms).__mod__, range(seq, seq + j - i))
        if j >= n:
            return ids, texts
        i, ms, seq = j, times[j] // 1_000_000, 0


def _count_reads(stream, x: XGroupState, row_ids: list) -> None:
    """Redis 7's entries-read as each of ``row_ids`` is handed out (a counter
    kept while no deleted entry lies ahead, else estimated). O(len(row_ids))."""
    sx = stream._x
    if x.entries_read != INVALID and (sx is None or sx.max_deleted == (0, 0) or stream.length == 0):
        x.entries_read += len(row_ids)  # no tombstone anywhere: one more per entry
        return
    for xid in row_ids:
        if x.entries_read != INVALID and not has_tombstones_after(stream, xid):
            x.entries_read += 1
        elif entries_added(stream):
            x.entries_read = estimate_read(stream, xid)


def take_pending(stream, group: Group, offset: int, owner: Consumer, now_ms: int, deliveries: int) -> Pending:
    """XCLAIM/XAUTOCLAIM: ``offset`` (pending or not) now owned by ``owner``,
    delivered at ``now_ms`` ``deliveries`` times. O(1) amortised (O(log N)
    for an entry not pending yet)."""
    pending = group.pending_get(offset)
    xid = pending.xid if pending is not None and pending.xid is not None else id_of(stream, offset)
    return _own(group, offset, xid, owner, now_ms, deliveries)


def pending_id(stream, pending: Pending) -> tuple[int, int]:
    """The Redis id of a pending entry (kept for X* deliveries). O(1), else O(log N)."""
    return pending.xid if pending.xid is not None else id_of(stream, pending.offset)


def owned(group: Group, name: bytes | None = None) -> list[Pending]:
    """The pending entries owned by consumer ``name`` (None: every owned one), by
    offset. O(P)."""
    return [p for p in group.pending_entries() if p.owner is not None and (name is None or p.owner == name)]


def delete_consumer(group: Group, name: bytes) -> int:
    """XGROUP DELCONSUMER: the consumer and its pending entries go; how many. O(P)."""
    found = group.x.consumers.pop(name, None) if group.x is not None else None
    if found is None:
        return 0
    return group.ack([p.offset for p in owned(group, name)])


# -- Redis 7's entries-read and lag -----------------------------------------------------------

def first_id(stream) -> tuple[int, int]:
    """The id of the first entry held (0-0 when none). O(log N)."""
    if stream.first >= stream.next_offset:
        return 0, 0
    return id_of(stream, stream.first)


def has_tombstones_after(stream, start: tuple[int, int]) -> bool:
    """Redis's streamRangeHasTombstones(start, end of the stream). O(1)."""
    x = stream._x
    if stream.length == 0 or x is None or x.max_deleted == (0, 0):
        return False
    if first_id(stream) > x.max_deleted:  # the latest tombstone is before the first entry
        return False
    return start <= x.max_deleted


def estimate_read(stream, xid: tuple[int, int]) -> int:
    """Redis's streamEstimateDistanceFromFirstEverEntry. O(log N)."""
    added = entries_added(stream)
    if not added:
        return 0
    top = top_id(stream)
    if not stream.length and xid <= top:
        return added
    if xid == top:
        return added
    if xid > top:
        return INVALID
    x = stream._x
    max_deleted = x.max_deleted if x is not None else (0, 0)
    first = first_id(stream)
    if max_deleted == (0, 0) or max_deleted < first:
        if xid < first:
            return added - stream.length
        if xid == first:
            return added - stream.length + 1
    return INVALID


def lag(stream, group: Group) -> int | None:
    """Redis's streamGetLag: entries not yet read by the group, None when unknown. O(log N)."""
    added = entries_added(stream)
    if not added:
        return 0
    x = state(stream, group)
    if x.entries_read != INVALID and not has_tombstones_after(stream, x.last_id):
        return added - x.entries_read
    read = estimate_read(stream, x.last_id)
    return None if read == INVALID else added - read
