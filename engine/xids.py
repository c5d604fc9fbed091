"""Redis stream ids beside the dense offsets (the X* commands: commands/xstreams.py).

Every entry of a stream has an offset (1, 2, 3, ...: TREAD, DGET) and a Redis
id ``ms-seq`` (XADD, XRANGE), strictly increasing with the offset.  Most ids
are not stored: an id is *derived* from the previous entry's id and the
entry's write time (``t = time_ns // 10**6``)::

    offset      40      41      42      43      44      45      46
    t (ms)      100     100     100     101     101     101     102
    id          100-0   100-1   100-2   101-0   101-1   900-0*  900-1*   102 < 900:
    stored      -       -       -       -       -       anchor  anchor   anchors too

    derive(previous id, t) = t-(seq+1) when t is the previous id's ms,
                             t-0       when t is later,
                             none      when t is earlier (the id must be stored).

That is the id Redis gives ``XADD key *`` while the clock moves forward
(``ms = max(now, last ms)``, seq + 1 within a ms), so TWRITE and ``XADD *``
store nothing.  An entry whose id is anything else is an *anchor*: its offset
and id are kept in ``XState.offs``/``XState.ids`` (sorted).  That happens for
an explicit XADD id, and for the auto ids that follow an XSETID or an id
ahead of the clock (each entry until the clock passes that id's ms).

The id of offset ``o``: take the last anchor ``a <= o`` (``bisect``); the
entries after it are derived, with times ``>= a``'s id ms and non-decreasing,
so with ``t = t(o)``: if ``t`` is the anchor's ms, every entry in ``(a, o]``
has that ms and ``id = t-(seq_a + o - a)``; else ``id = t-(o - q)`` where
``q`` is the first offset of ``(a, o]`` with time ms ``t`` (a bisection over
the times).  O(log anchors + log nodes + log N).

Deleted entries keep their time in their node, so they keep their ids.  When
nodes are dropped (eviction), the id of the last offset dropped becomes an
anchor first, so that what remains never needs a time that is gone.  A stream
gets its :class:`XState` at its first X* write, XSETID or node drop; until
then its only anchor is the virtual ``0 -> 0-0``.

Entries written with several field-value pairs (XADD) are stored as one entry
whose tag is the first field and whose payload packs the rest
``[value1, field2, value2, ...]``; their offsets are kept as runs in
``XState.runs``.  Every other entry reads through X* as the one pair
``tag -> payload``.  The payload (:func:`pack_pairs`) is one byte, the number
of items packed (3..126), then the items as RESP bulk strings
(``$<length>\r\n<item>\r\n`` each): XREADGROUP's reply copies it as it is
(resp/xentries.encode_stream_packed), no item unpacked nor encoded anew.
Payloads packed before 2026-11-27 (and entries of more than 126 items) are a
msgpack list, whose first byte is 0x90 or above: :func:`unpack_pairs` and
:func:`unpack_rests` read both.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import repeat

import hiredis
import msgpack

__all__ = ["XState", "MAX_ID", "id_of", "ids_between", "offset_at_or_after", "note_append",
           "before_drop", "state_of", "next_auto_id", "pack_pairs", "unpack_pairs", "is_packed",
           "mark_packed"]

MAX_ID = ((1 << 64) - 1, (1 << 64) - 1)


class XState:
    """The stored part of a stream's ids (see the module docstring).

    ``offs``/``ids``: the anchors, sorted by offset (the first may be the
    virtual 0 or an offset dropped already).  ``last``: id of the newest entry
    written; ``top``: the greatest id the stream has seen (``>= last``, XSETID
    may raise it).  ``max_deleted``: Redis's max-deleted-entry-id.  ``added``:
    entries-added minus ``next_offset - 1`` (XSETID ENTRIESADDED moves it).
    ``runs``: flat ``[start, end, start, end, ...]`` of offsets holding packed
    field-value pairs."""

    __slots__ = ("offs", "ids", "last", "top", "max_deleted", "added", "runs", "forced")

    def __init__(self) -> None:
        self.offs: list[int] = [0]
        self.ids: list[tuple[int, int]] = [(0, 0)]
        self.last: tuple[int, int] = (0, 0)
        self.top: tuple[int, int] = (0, 0)
        self.max_deleted: tuple[int, int] = (0, 0)
        self.added = 0
        self.runs: list[int] = []
        self.forced: tuple[int, int] | None = None  # the id of the next entry appended (add())

    def export(self) -> list:
        """Plain values for snapshots. O(anchors + runs)."""
        return [self.offs, [list(i) for i in self.ids], list(self.last), list(self.top),
                list(self.max_deleted), self.added, self.runs]

    @classmethod
    def load(cls, value: list) -> "XState":
        x = cls()
        offs, ids, last, top, max_deleted, added, runs = value
        if len(offs) != len(ids) or not offs or sorted(offs) != list(offs):
            raise ValueError("bad stream id anchors")
        x.offs = [int(o) for o in offs]
        x.ids = [(int(a), int(b)) for a, b in ids]
        x.last, x.top, x.max_deleted = ((int(last[0]), int(last[1])), (int(top[0]), int(top[1])),
                                        (int(max_deleted[0]), int(max_deleted[1])))
        x.added = int(added)
        x.runs = [int(o) for o in runs]
        return x

    def _check(self, stream) -> None:
        """Invariants: anchors sorted and strictly increasing ids; ``top >=
        last``; the last entry's id is ``last``; runs sorted. O(anchors + runs)."""
        assert self.offs and len(self.offs) == len(self.ids)
        for i in range(1, len(self.offs)):
            assert self.offs[i - 1] < self.offs[i], "anchor offsets not increasing"
            assert self.ids[i - 1] < self.ids[i], "anchor ids not increasing"
        assert self.top >= self.last
        assert self.runs == sorted(self.runs) and len(self.runs) % 2 == 0
        if stream.next_offset > 1 and stream.next_offset - 1 >= _physical_first(stream):
            assert id_of(stream, stream.next_offset - 1) == self.last, "last id out of step"


def _physical_first(stream) -> int:
    nodes = stream._nodes
    return nodes[0].start if nodes else stream.next_offset


def state_of(stream) -> XState:
    """The stream's XState, made at first need (its ids are then the derived
    ones of what it holds). O(log N)."""
    x = stream._x
    if x is None:
        x = XState()
        if stream.next_offset > 1:
            x.last = x.top = id_of(stream, stream.next_offset - 1)
        stream._x = x
    return x


# -- times ----------------------------------------------------------------------------

def _time_ms(stream, offset: int) -> int:
    node = stream._nodes[stream._node_index(offset)]
    return node.time_at(offset - node.start, stream._cache) // 1_000_000


def _first_at_or_after_ms(stream, t_ms: int, lo: int, hi: int) -> int:
    """First offset of ``[lo, hi]`` whose time ms is ``>= t_ms`` (``hi``'s is):
    a bisection over the offsets' times.  O(log (hi - lo)) time lookups."""
    t_ns = t_ms * 1_000_000
    while lo < hi:
        mid = (lo + hi) // 2
        node = stream._nodes[stream._node_index(mid)]
        if node.time_at(mid - node.start, stream._cache) < t_ns:
            lo = mid + 1
        else:
            hi = mid
    return lo


# -- ids ------------------------------------------------------------------------------

def id_of(stream, offset: int) -> tuple[int, int]:
    """The id of ``offset`` (held or deleted, not dropped). O(log anchors +
    log N) time lookups."""
    x = stream._x
    if x is None:
        a, (ams, aseq) = 0, (0, 0)
    else:
        i = bisect_right(x.offs, offset) - 1
        a, (ams, aseq) = x.offs[i], x.ids[i]
        if a == offset:
            return ams, aseq
    node = stream._nodes[stream._node_index(offset)]
    _, _, _, times, i = node.tables_at(offset - node.start, stream._cache)
    t = times[i] // 1_000_000
    if t == ams:
        return t, aseq + offset - a
    # The first entry of this millisecond: in these tables (one C bisection), or
    # else further back (gallop, then bisect), never before the anchor.
    table_first = offset - i
    j = bisect_left(times, t * 1_000_000, 0, i + 1)
    if j or table_first <= a + 1:
        return t, offset - max(table_first + j, a + 1)
    step, hi = 2, table_first - 1
    if _time_ms(stream, hi) < t:
        return t, i
    while True:
        lo = table_first - step
        if lo <= a + 1:
            lo = a + 1
            break
        if _time_ms(stream, lo) < t:
            lo += 1
            break
        hi, step = lo, step * 2
    return t, offset - _first_at_or_after_ms(stream, t, lo, hi)


def ids_between(stream, start: int, end: int, before: tuple[int, int] | None = None) -> list[tuple[int, int]]:
    """Ids of the physical offsets ``[start, end)`` (held or deleted), in one
    pass over their times after the first; ``before``, when known, is the id
    of ``start - 1`` (the first is then derived from it, O(1)).
    O(log N + (end - start))."""
    if start >= end:
        return []
    x = stream._x
    if before is not None and (x is None or bisect_right(x.offs, end - 1) == bisect_right(x.offs, start - 1)):
        # No stored id in the range: when its first and last times share their
        # millisecond t (so do all between), the ids are t-s, t-(s+1), ... with
        # s the one after ``before``'s (or 0 in a later millisecond). O(1) lookups.
        nodes, cache = stream._nodes, stream._cache
        node = nodes[stream._node_index(start)]
        t = node.time_at(start - node.start, cache) // 1_000_000
        if end - start > 1:
            node = nodes[stream._node_index(end - 1)]
            same = node.time_at(end - 1 - node.start, cache) // 1_000_000 == t
        else:
            same = True
        if same and t >= before[0]:
            seq = before[1] + 1 if t == before[0] else 0
            return list(zip(repeat(t, end - start), range(seq, seq + end - start)))
    if before is not None and (x is None or bisect_right(x.offs, start) == bisect_right(x.offs, start - 1)):
        node = stream._nodes[stream._node_index(start)]
        t = node.time_at(start - node.start, stream._cache) // 1_000_000
        first = (t, before[1] + 1) if t == before[0] else (t, 0) if t > before[0] else id_of(stream, start)
    else:
        first = id_of(stream, start)
    out = [first]
    x = stream._x
    if x is not None:
        k = bisect_right(x.offs, start)
        anchor_offs, anchor_ids = x.offs, x.ids
        next_anchor = anchor_offs[k] if k < len(anchor_offs) else end
    else:
        next_anchor = end
    ms, seq = out[0]
    offset = start + 1
    nodes, cache = stream._nodes, stream._cache
    while offset < end:
        node = nodes[stream._node_index(offset)]
        _, _, _, times, i = node.tables_at(offset - node.start, cache)
        stop = min(end, node.cap_end, offset + len(times) - i)
        for time_ns in times[i:i + stop - offset]:
            if offset == next_anchor:
                ms, seq = anchor_ids[k]
                k += 1
                next_anchor = anchor_offs[k] if k < len(anchor_offs) else end
            else:
                t = time_ns // 1_000_000
                if t == ms:
                    seq += 1
                else:
                    ms, seq = t, 0
            out.append((ms, seq))
            offset += 1
    return out


def offset_at_or_after(stream, xid: tuple[int, int]) -> int:
    """First physical offset whose id is ``>= xid`` (``next_offset`` if none).
    A guess from the times first (``XADD *`` ids: ``t-seq`` sits ``seq``
    entries after the first entry of ms ``t``), checked; else a bisection.
    O(log N) id lookups."""
    lo, hi = _physical_first(stream), stream.next_offset
    if lo >= hi or id_of(stream, hi - 1) < xid:
        return hi
    if id_of(stream, lo) >= xid:
        return lo
    # id(lo) < xid <= id(hi - 1): bisect on (lo, hi - 1]
    lo_, hi_ = lo, hi - 1
    while hi_ - lo_ > 1:
        mid = (lo_ + hi_) // 2
        if id_of(stream, mid) < xid:
            lo_ = mid
        else:
            hi_ = mid
    return hi_


def next_auto_id(top: tuple[int, int], now_ms: int, ms: int | None = None) -> tuple[int, int] | None:
    """Redis's id for ``XADD *`` (``ms`` None) or ``XADD <ms>-*``; None when no
    id above ``top`` exists (Redis: "The stream has exhausted the last
    possible ID"). O(1)."""
    if ms is None:
        if now_ms > top[0]:
            return now_ms, 0
        ms = top[0]
    elif ms > top[0]:
        return ms, 0
    elif ms < top[0]:
        return None
    if top[1] == MAX_ID[1]:
        return None if ms == MAX_ID[0] else (ms + 1, 0)
    return ms, top[1] + 1


def note_append(stream, first: int, count: int, time_ns: int) -> None:
    """``count`` entries were appended from ``first`` on, written at
    ``time_ns`` (Stream.append and append_columns call it); the first takes
    the id :func:`add` forced, if any, the others auto ids.  Stores the
    anchors that derivation cannot give.  O(1) while the clock is ahead of
    every id, else O(count)."""
    x = stream._x
    xid, x.forced = x.forced, None
    t = time_ns // 1_000_000
    if xid is None:
        top = x.top
        if t > top[0]:  # the clock is ahead: t-0, t-1, ... (derived)
            x.last = x.top = (t, count - 1)
            return
        if t == top[0] and top is x.last and top[1] < MAX_ID[1] - count:  # more in the same ms (derived)
            x.last = x.top = (t, top[1] + count)
            return
    for offset in range(first, first + count):
        own = xid if (xid is not None and offset == first) else next_auto_id(x.top, t)
        if own is None:
            raise OverflowError("the stream has exhausted the last possible id")
        last = x.last
        derived = (t, last[1] + 1) if t == last[0] else (t, 0) if t > last[0] else None
        if own != derived:
            x.offs.append(offset)
            x.ids.append(own)
        x.last = own
        if own > x.top:
            x.top = own


def before_drop(stream, last_dropped: int) -> None:
    """Nodes up to offset ``last_dropped`` are about to be dropped: its id
    becomes an anchor (the times before it go), older anchors and runs go.
    O(log N + anchors dropped)."""
    x = state_of(stream)
    i = bisect_right(x.offs, last_dropped)
    if x.offs[i - 1] != last_dropped:
        xid = id_of(stream, last_dropped)
        del x.offs[:i], x.ids[:i]
        x.offs.insert(0, last_dropped)
        x.ids.insert(0, xid)
    else:
        del x.offs[:i - 1], x.ids[:i - 1]
    runs = x.runs
    j = bisect_right(runs, last_dropped)
    if j % 2 and last_dropped + 1 < runs[j]:  # inside a run: it now starts after the drop
        runs[j - 1] = last_dropped + 1
        del runs[:j - 1]
    else:
        del runs[:j + j % 2]


class IdError(ValueError):
    """An XADD id the stream cannot take; the message is Redis's text."""


def add(stream, pairs: list, now_ns: int, xid: tuple[int, int] | None = None,
        ms: int | None = None) -> tuple[int, tuple[int, int]]:
    """XADD: append the field-value ``pairs`` (flat, at least one pair) with
    the id ``xid``, or ``ms-*`` (``ms``), or ``*``; returns ``(offset, id)``.
    Raises :class:`IdError` (Redis's texts) before any change.  O(1) amortised,
    as Stream.append."""
    x = state_of(stream)
    t = max(now_ns, stream.last_time) // 1_000_000
    if xid is not None:
        if xid == (0, 0):
            raise IdError("ERR The ID specified in XADD must be greater than 0-0")
        if xid <= x.top:
            raise IdError("ERR The ID specified in XADD is equal or smaller than the target stream top item")
        own: tuple[int, int] | None = xid
    else:
        own = next_auto_id(x.top, t, ms)
        if own is None:
            if ms is not None and ms < x.top[0]:
                raise IdError("ERR The ID specified in XADD is equal or smaller than the target stream top item")
            raise IdError("ERR The stream has exhausted the last possible ID, unable to add more items")
    tag, data = (pairs[0], pairs[1]) if len(pairs) == 2 else pack_pairs(pairs)
    assert own is not None
    x.forced = own
    try:
        offset = stream.append(tag, data, now_ns)
    finally:
        x.forced = None
    if len(pairs) > 2:
        mark_packed(stream, offset)
    return offset, own


def add_auto(stream, tag: bytes, data: bytes, now_ns: int) -> tuple[int, tuple[int, int]]:
    """``XADD key * tag data`` (one pair): append with the next auto id; returns
    ``(offset, id)``.  Raises :class:`IdError` when no id is left. O(1) amortised."""
    x = stream._x
    if x is None:
        x = state_of(stream)
    if x.top == MAX_ID:
        raise IdError("ERR The stream has exhausted the last possible ID, unable to add more items")
    offset = stream.append(tag, data, now_ns)  # note_append gives it the auto id
    return offset, x.last


def replay_add(stream, tag: bytes, data: bytes, time_ns: int, xid: tuple[int, int], packed: bool) -> int:
    """Append an entry logged by XADD (persistence.effects) with its id. O(1) amortised."""
    x = state_of(stream)
    x.forced = xid
    try:
        offset = stream.append(tag, data, time_ns)
    finally:
        x.forced = None
    if packed:
        mark_packed(stream, offset)
    return offset


def set_last_id(stream, xid: tuple[int, int], entries_added: int | None = None,
                max_deleted: tuple[int, int] | None = None) -> None:
    """XSETID: the stream's top id (and entries-added, max-deleted id); the
    caller checked them against Redis's rules. O(1)."""
    x = state_of(stream)
    x.top = xid
    if entries_added is not None:
        x.added = entries_added - (stream.next_offset - 1)
    if max_deleted is not None:
        x.max_deleted = max_deleted


def entries_added(stream) -> int:
    """Redis's entries-added: every entry ever appended (XSETID may set it). O(1)."""
    x = stream._x
    return stream.next_offset - 1 + (0 if x is None else x.added)


def top_id(stream) -> tuple[int, int]:
    """The greatest id the stream has seen (``0-0`` for a new one). O(log N)."""
    x = stream._x
    if x is not None:
        return x.top
    return id_of(stream, stream.next_offset - 1) if stream.next_offset > 1 else (0, 0)


def note_deleted(stream, xid: tuple[int, int]) -> None:
    """XDEL removed the entry ``xid``: Redis's max-deleted-entry-id. O(1)."""
    x = state_of(stream)
    if xid > x.max_deleted:
        x.max_deleted = xid


# -- field-value pairs ------------------------------------------------------------------

# Packed payloads (see the module docstring): at most PACKED_MAX items as RESP
# bulk strings after their count; the heads of items shorter than 2 KiB made once.
PACKED_MAX = 126
_BULK_HEADS = tuple(b"$%d\r\n" % n for n in range(2048))
_COUNTS = tuple(bytes((n,)) for n in range(PACKED_MAX + 1))
_ARRAY_HEADS = tuple(b"*%d\r\n" % n for n in range(PACKED_MAX + 1))
_CRLF = b"\r\n"


def pack_pairs(pairs: list) -> tuple[bytes, bytes]:
    """``(tag, payload)`` of an entry of several field-value pairs (the payload:
    see the module docstring). O(size)."""
    rest = pairs[1:]
    n = len(rest)
    if n > PACKED_MAX:
        return pairs[0], msgpack.packb(rest, use_bin_type=True)
    heads = _BULK_HEADS
    try:
        if n == 3:  # two pairs (the usual case of several)
            a, b, c = rest
            return pairs[0], b"".join((_COUNTS[3], heads[len(a)], a, _CRLF, heads[len(b)], b, _CRLF,
                                      heads[len(c)], c, _CRLF))
        parts = [_COUNTS[n]]
        for v in rest:
            parts += (heads[len(v)], v, _CRLF)
    except IndexError:  # an item of 2 KiB or more
        parts = [_COUNTS[n]]
        parts += [b"$%d\r\n%s\r\n" % (len(v), v) for v in rest]
    return pairs[0], b"".join(parts)


def unpack_pairs(tag: bytes, payload) -> list:
    """The field-value pairs of a packed entry, flat. O(size)."""
    return [tag, *_unpack_rest(payload)]


def _unpack_rest(payload) -> list:
    """The items of one packed payload (either form), bytes: a reader made for
    the call (no state kept between calls; X* replies copy the payload instead,
    resp/xentries.py, so this runs only for payloads of both forms in one
    XREADGROUP reply, and for callers wanting the items). O(size)."""
    n = payload[0]
    if n > PACKED_MAX:  # msgpack (packed before 2026-11-27, or more than PACKED_MAX items)
        return msgpack.unpackb(payload, raw=True, use_list=True)
    reader = hiredis.Reader()
    reader.feed(_ARRAY_HEADS[n])
    reader.feed(payload, 1)
    items = reader.gets()
    if items.__class__ is not list or reader.has_data():  # (never so for a payload pack_pairs made)
        raise ValueError("damaged packed field-value pairs")
    return items


def is_packed(stream, offset: int) -> bool:
    """Whether ``offset`` holds packed pairs. O(log runs)."""
    x = stream._x
    return x is not None and bisect_right(x.runs, offset) % 2 == 1


def mark_packed(stream, offset: int) -> None:
    """The entry just appended at ``offset`` (the newest) holds packed pairs. O(1)."""
    runs = state_of(stream).runs
    if runs and runs[-1] == offset:
        runs[-1] = offset + 1
    else:
        runs += [offset, offset + 1]


def packed_span(stream, start: int, end: int) -> int:
    """Whether offsets ``[start, end)`` hold packed pairs: 0 none, 1 every one,
    2 some (then :func:`packed_flags` says which). O(log runs)."""
    x = stream._x
    if x is None or not x.runs or start >= end:
        return 0
    runs = x.runs
    j = bisect_right(runs, start)
    if j % 2:  # ``start`` is in the run [runs[j - 1], runs[j])
        return 1 if runs[j] >= end else 2
    return 0 if j == len(runs) or runs[j] >= end else 2


def unpack_rests(payloads: list) -> list:
    """The pairs after the first of each packed entry of ``payloads``
    (:func:`unpack_pairs` without the tag), flat lists. O(size)."""
    return list(map(_unpack_rest, payloads))


def packed_flags(stream, start: int, end: int) -> list[bool] | None:
    """For offsets ``[start, end)``: which hold packed pairs (None: none do).
    O(log runs + (end - start))."""
    x = stream._x
    if x is None or not x.runs:
        return None
    runs = x.runs
    j = bisect_right(runs, start)
    j -= j % 2  # the run holding ``start``, or the next one
    flags = [False] * (end - start)
    any_packed = False
    while j < len(runs) and runs[j] < end:
        a, b = max(runs[j], start), min(runs[j + 1], end)
        if a < b:
            flags[a - start:b - start] = [True] * (b - a)
            any_packed = True
        j += 2
    return flags if any_packed else None
