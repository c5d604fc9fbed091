"""The JetStream subject index of a stream: subject (= tag) -> its sequences (= offsets).

JetStream commands (DGET, MLAST, BATCH expectations, ``max_msgs_per_subject``) ask
questions by subject: "the newest message of ``kv.user.7.name`` at or below seq
4000", "every subject under ``kv.user.7.>``".  Answering them by scanning the log
would cost O(stream); this index answers them in O(log n) per subject.

Layout
======

::

    SubjectIndex.subjects : SortedDict  subject -> _Seqs
                                        b"kv.u.1.name"    -> seqs [1, 9, 17]   head 0
                                        b"kv.u.1.surname" -> seqs [2, 10]      head 0
                                        b"orders.new"     -> seqs [3, 4, ...]  head 1
    _Seqs.seqs : array('q')   the subject's offsets, ascending
    _Seqs.head : int          seqs[:head] are gone (deleted oldest-first, or evicted)

*   "Newest at or below seq S" is ``bisect_right(seqs, S, head) - 1``; "oldest at or
    above S" is ``bisect_left``; a subject's count is ``len(seqs) - live_start``.
*   The subjects are kept sorted (``sortedcontainers.SortedDict``, which is also a
    plain dict for exact lookups), so a filter with a literal prefix
    (``kv.user.7.>``, ``orders.*.eu``) visits only the subjects that start with
    ``kv.user.7.`` / ``orders.`` (``irange`` from the prefix), never every subject.
    Filters without a literal prefix (``*.x``, ``>``) visit every subject once.

Keeping it exact
----------------
The stream calls four hooks (see the ``JetStream subject index`` comments in
``engine/stream.py``), and only once the index exists: a stream that never sees a
JetStream command pays one ``is not None`` test per append.

*   ``appended`` / ``appended_many``: the new offsets go at the end of their arrays.
*   ``deleted``: a deleted offset is removed at once (the oldest one by moving
    ``head``, O(1); one in the middle with an O(n) memmove of the array).  The
    per-subject limit deletes through the same ``Stream.delete`` after it has
    dropped the offsets itself.
*   eviction is **lazy**: offsets below ``stream.first`` stay in the arrays until
    their macro node is released, and every query starts its bisect at
    ``stream.first`` (``_live_start``), so counts and answers are exact at once.
    When nodes are released (``dropped``) the subjects those nodes used (their
    ``tag_set``) are trimmed, and subjects left with no offset are removed, so a
    stream writing unique subjects does not leak.

``max_msgs_per_subject`` (KV history): when an append makes a subject hold more
than N entries, its oldest ones are deleted with ``stream.delete`` (they read as
nulls in TREAD).  The offsets deleted that way are also queued in
``limit_deleted`` (and the index in its keyspace's ``limit_pending`` set, see
engine/keyspace.py) so that the server can log them as DELETE effect records.

The index is derived state: it is never saved, and is rebuilt from the stream's
entries (tags and deleted bitmaps only, no payload copies) on first need, e.g.
after a restart.

Subject filters follow NATS: tokens separated by ``.``, no empty token, no
whitespace; ``*`` matches exactly one token and ``>`` one or more trailing tokens
(only as the last token).  A token that merely contains ``*`` or ``>`` (``a*``)
is a literal.
"""

from __future__ import annotations

import gc
from array import array
from bisect import bisect_left, bisect_right
from functools import lru_cache
from heapq import merge
from itertools import islice

from sortedcontainers import SortedDict

__all__ = [
    "InvalidSubject",
    "SubjectFilter",
    "SubjectIndex",
    "TooManySubjects",
    "enforce_subject_limit",
    "held_from",
    "index_of",
    "parse_filter",
    "peek",
]

_WHITESPACE = frozenset(b" \t\r\n\f\v")
_COMPACT_MIN = 32  # compact an array once this many leading slots are dead (and half of it)


class InvalidSubject(ValueError):
    """A subject filter breaks the NATS subject rules; the text says why."""


class TooManySubjects(Exception):
    """A multi-subject request matched more subjects than allowed."""


# ---------------------------------------------------------------------------
# Filters
# ---------------------------------------------------------------------------

class SubjectFilter:
    """A parsed subject filter; ``matches(subject)`` tests one subject."""

    __slots__ = ("raw", "literal", "prefix", "_ntok", "_tail", "_checks")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        tokens = raw.split(b".")
        self._tail = tokens[-1] == b">"           # '>' as last token: one or more more tokens
        self.literal = b"*" not in tokens and not self._tail
        fixed = tokens[:-1] if self._tail else tokens
        self._ntok = len(fixed)
        self._checks = tuple((i, tok) for i, tok in enumerate(fixed) if tok != b"*")
        # the literal tokens before the first wildcard, with the separator after them
        lead = []
        for tok in tokens:
            if tok == b"*" or tok == b">":
                break
            lead.append(tok)
        self.prefix = b".".join(lead) + b"." if lead and not self.literal else b""

    def matches(self, subject: bytes) -> bool:
        if self.literal:
            return subject == self.raw
        if not subject.startswith(self.prefix):
            return False
        toks = subject.split(b".")
        if self._tail:
            if len(toks) <= self._ntok:
                return False
        elif len(toks) != self._ntok:
            return False
        for i, tok in self._checks:
            if toks[i] != tok:
                return False
        return True

    def __repr__(self) -> str:
        return f"SubjectFilter({self.raw!r})"


# A bounded memo of a pure function whose results are immutable: it holds no
# server's data, so sharing it between embedded servers is harmless (like the
# re module's own pattern cache).
@lru_cache(maxsize=4096)
def parse_filter(raw: bytes) -> SubjectFilter:
    """The filter ``raw`` parsed, or InvalidSubject saying which NATS rule it breaks."""
    if type(raw) is not bytes:
        raise TypeError("a subject filter is bytes")
    if not raw:
        raise InvalidSubject("empty subject")
    if not _WHITESPACE.isdisjoint(raw):
        raise InvalidSubject("whitespace in subject")
    tokens = raw.split(b".")
    last = len(tokens) - 1
    for i, tok in enumerate(tokens):
        if not tok:
            raise InvalidSubject("empty token in subject")
        if tok == b">" and i != last:
            raise InvalidSubject("'>' must be the last token")
    return SubjectFilter(raw)


# ---------------------------------------------------------------------------
# The index
# ---------------------------------------------------------------------------

class _Seqs:
    """One subject's offsets, ascending; ``seqs[:head]`` are gone."""

    __slots__ = ("seqs", "head")

    def __init__(self, seqs: array | None = None) -> None:
        self.seqs = seqs if seqs is not None else array("q")
        self.head = 0


def held_from(stream, start: int) -> int:
    """Entries held with offset >= ``start``. O(nodes in range) (deleted bitmaps)."""
    a = start if start > stream.first else stream.first
    b = stream.next_offset
    if a >= b:
        return 0
    return b - a - stream._deleted_between(a, b)


class SubjectIndex:
    """Subject -> offsets of one stream.  Built from the stream's entries by
    :func:`index_of`, then kept up to date by the stream's hooks."""

    __slots__ = ("stream", "subjects", "limit_deleted", "enforced_limit", "owner", "_trimming")

    def __init__(self, stream) -> None:
        self.stream = stream
        self.limit_deleted: list[int] = []  # offsets deleted by max_msgs_per_subject, not yet logged
        self.enforced_limit = 0              # every subject holds at most this many (0: not enforced)
        self._trimming = False               # deleting for the limit: the deleted() hook has nothing to do
        self.owner = None                    # a label for the command layer (the key); never read here
        self.subjects: SortedDict = SortedDict()
        self._build()

    # -- building -------------------------------------------------------------
    def _build(self) -> None:
        """Index every held entry: O(entries), reading only the tag tables and
        the deleted bitmaps of the nodes (no payload is copied)."""
        enabled = gc.isenabled()
        gc.disable()  # one object per subject: no collection passes in the middle
        try:
            self._build_tables()
        finally:
            if enabled:
                gc.enable()

    def _build_tables(self) -> None:
        s = self.stream
        first = s.first
        by_tid: dict[int, array] = {}
        get = by_tid.get
        for node in s.node_list():
            tags = node.decoded(s._cache)[2]
            start = node.start
            p0 = first - start if first > start else 0
            count = node.count
            if p0 >= count:
                continue
            bits = node.deleted
            for off, tid in enumerate(tags[p0:count].tolist(), start + p0):
                if bits is not None:
                    p = off - start
                    if bits[p >> 3] >> (p & 7) & 1:
                        continue
                seqs = get(tid)
                if seqs is None:
                    seqs = by_tid[tid] = array("q")
                seqs.append(off)
        tag_list = s._tag_list
        self.subjects = SortedDict({tag_list[tid]: _Seqs(seqs) for tid, seqs in by_tid.items()})

    # -- hooks called by the stream ---------------------------------------------
    def appended(self, tag: bytes, offset: int) -> None:
        """``offset`` was appended with ``tag`` (Stream.append)."""
        entry = self.subjects.get(tag)
        if entry is None:
            entry = self.subjects[tag] = _Seqs()
        entry.seqs.append(offset)
        limit = self.stream.settings.max_msgs_per_subject
        if limit:
            if len(entry.seqs) - entry.head > limit:
                self._trim(entry, limit)
        elif self.enforced_limit:
            self.enforced_limit = 0

    def appended_many(self, tags: list, first_offset: int) -> None:
        """Entries with these ``tags`` were appended from ``first_offset`` on."""
        subjects = self.subjects
        get = subjects.get
        offset = first_offset
        for tag in tags:
            entry = get(tag)
            if entry is None:
                entry = subjects[tag] = _Seqs()
            entry.seqs.append(offset)
            offset += 1
        limit = self.stream.settings.max_msgs_per_subject
        if limit:
            for tag in set(tags):
                entry = get(tag)
                if entry is not None and len(entry.seqs) - entry.head > limit:
                    self._trim(entry, limit)
        elif self.enforced_limit:
            self.enforced_limit = 0

    def deleted(self, offset: int) -> None:
        """The held entry ``offset`` is being deleted (Stream.delete)."""
        if self._trimming:
            return
        held = self.stream.get(offset)
        if held is None:
            return
        tag = held.tag
        entry = self.subjects.get(tag)
        if entry is None:
            return
        seqs = entry.seqs
        i = bisect_left(seqs, offset, entry.head)
        if i == len(seqs) or seqs[i] != offset:
            return
        if i == entry.head:
            entry.head = i + 1
            if entry.head == len(seqs):
                del self.subjects[tag]
            else:
                self._maybe_compact(entry)
        else:
            del seqs[i]

    def dropped(self, nodes) -> None:
        """Macro ``nodes`` are being released (``stream.first`` is already past
        them): trim the subjects they used, remove the ones left empty."""
        tag_list = self.stream._tag_list
        ids: set[int] = set()
        for node in nodes:
            ids.update(node.tag_set if node.sealed else node.tag_ids())
        subjects = self.subjects
        first = self.stream.first
        for tid in ids:
            tag = tag_list[tid]
            entry = subjects.get(tag)
            if entry is None:
                continue
            seqs = entry.seqs
            h = bisect_left(seqs, first, entry.head)
            if h >= len(seqs):
                del subjects[tag]
            else:
                entry.head = h
                self._maybe_compact(entry)

    # -- helpers ----------------------------------------------------------------
    @staticmethod
    def _maybe_compact(entry: _Seqs) -> None:
        h = entry.head
        if h >= _COMPACT_MIN and 2 * h >= len(entry.seqs):
            del entry.seqs[:h]
            entry.head = 0

    def _live_start(self, entry: _Seqs) -> int:
        """Index of the subject's first offset still held (lazy eviction)."""
        seqs = entry.seqs
        h = entry.head
        first = self.stream.first
        if h < len(seqs) and seqs[h] < first:
            h = entry.head = bisect_left(seqs, first, h)
        return h

    def _trim(self, entry: _Seqs, limit: int) -> int:
        """Delete the subject's oldest entries so that ``limit`` remain."""
        h = self._live_start(entry)
        excess = len(entry.seqs) - h - limit
        if excess <= 0:
            return 0
        doomed = entry.seqs[h:h + excess].tolist()
        entry.head = h + excess
        self._maybe_compact(entry)
        self.limit_deleted.extend(doomed)
        pending = self.stream.limit_pending
        if pending is not None:
            pending.add(self)
        delete = self.stream.delete
        self._trimming = True  # their offsets are dropped from the array already
        try:
            for offset in doomed:
                delete(offset)
        finally:
            self._trimming = False
        return excess

    def enforce(self, limit: int) -> int:
        """Make every subject hold at most ``limit`` entries; returns how many
        were deleted.  O(subjects) the first time a limit is seen, O(1) after
        (appends keep it)."""
        if limit <= 0:
            self.enforced_limit = 0
            return 0
        if self.enforced_limit and limit >= self.enforced_limit:
            self.enforced_limit = limit
            return 0
        deleted = 0
        for entry in list(self.subjects.values()):
            if len(entry.seqs) - entry.head > limit:
                deleted += self._trim(entry, limit)
        self.enforced_limit = limit
        return deleted

    def take_deleted(self) -> list[int]:
        """The offsets deleted by the per-subject limit since the last call."""
        out = self.limit_deleted
        self.limit_deleted = []
        pending = self.stream.limit_pending
        if pending is not None:
            pending.discard(self)
        return out

    # -- queries ----------------------------------------------------------------
    def __len__(self) -> int:
        """Subjects in the index (some may have no entry held until their
        node is released; queries skip them). O(1)."""
        return len(self.subjects)

    def count(self, subject: bytes) -> int:
        """Entries held with this exact subject. O(1) (a bisect after eviction)."""
        entry = self.subjects.get(subject)
        if entry is None:
            return 0
        return len(entry.seqs) - self._live_start(entry)

    def last(self, subject: bytes, upto: int | None = None) -> int:
        """Offset of the newest entry of ``subject`` at or below ``upto`` (default:
        any), 0 if none. O(log n)."""
        entry = self.subjects.get(subject)
        if entry is None:
            return 0
        return self._last(entry, upto)

    def _last(self, entry: _Seqs, upto: int | None) -> int:
        h = self._live_start(entry)
        seqs = entry.seqs
        if h >= len(seqs):
            return 0
        if upto is None or seqs[-1] <= upto:
            return seqs[-1]
        i = bisect_right(seqs, upto, h) - 1
        return seqs[i] if i >= h else 0

    def entries(self, flt: SubjectFilter) -> list:
        """``(subject, _Seqs)`` of every subject matching ``flt`` that holds an
        entry, in subject order.  O(log subjects + subjects under the filter's
        literal prefix) (every subject when it has none)."""
        subjects = self.subjects
        if flt.literal:
            entry = subjects.get(flt.raw)
            if entry is None or self._live_start(entry) >= len(entry.seqs):
                return []
            return [(flt.raw, entry)]
        prefix = flt.prefix
        if prefix:
            keys = subjects.irange(minimum=prefix)
        else:
            keys = subjects.keys()
        out = []
        match = flt.matches
        live = self._live_start
        for key in keys:
            if prefix and not key.startswith(prefix):
                break
            if match(key):
                entry = subjects[key]
                if live(entry) < len(entry.seqs):
                    out.append((key, entry))
        return out

    def last_matching(self, flt: SubjectFilter, upto: int | None = None) -> int:
        """Newest offset (<= ``upto``) whose subject matches ``flt``; 0 if none."""
        best = 0
        for _, entry in self.entries(flt):
            seq = self._last(entry, upto)
            if seq > best:
                best = seq
        return best

    def first_from(self, entries: list, start: int) -> int:
        """Oldest offset >= ``start`` among the subjects ``entries``; 0 if none."""
        best = 0
        for _, entry in entries:
            h = self._live_start(entry)
            seqs = entry.seqs
            i = bisect_left(seqs, start, h)
            if i < len(seqs) and (not best or seqs[i] < best):
                best = seqs[i]
        return best

    def count_from(self, entries: list, start: int) -> int:
        """Entries held with offset >= ``start`` among the subjects ``entries``."""
        total = 0
        for _, entry in entries:
            h = self._live_start(entry)
            seqs = entry.seqs
            total += len(seqs) - bisect_left(seqs, start, h)
        return total

    def iter_from(self, entries: list, start: int):
        """Offsets >= ``start`` of the subjects ``entries``, ascending (a k-way
        merge).  The index must not change while this is consumed."""
        runs = []
        for _, entry in entries:
            h = self._live_start(entry)
            seqs = entry.seqs
            i = bisect_left(seqs, start, h)
            if i < len(seqs):
                runs.append(islice(seqs, i, None))
        if len(runs) == 1:
            return runs[0]
        return merge(*runs)

    def multi_last(self, filters: list, upto: int, limit: int) -> list[int]:
        """For every distinct subject matching any filter, its newest offset at
        or below ``upto``; ascending.  TooManySubjects if more than ``limit``
        subjects have one."""
        found: dict[bytes, int] = {}
        for flt in filters:
            for subject, entry in self.entries(flt):
                if subject in found:
                    continue
                seq = self._last(entry, upto)
                if seq:
                    found[subject] = seq
                    if len(found) > limit:
                        raise TooManySubjects()
        return sorted(found.values())

    # -- invariants ---------------------------------------------------------------
    def check(self) -> None:
        """Assert the index equals one rebuilt from the stream (tests)."""
        fresh = SubjectIndex.__new__(SubjectIndex)
        fresh.stream = self.stream
        fresh._build_tables()
        mine = {}
        for subject, entry in self.subjects.items():
            h = self._live_start(entry)
            seqs = entry.seqs[h:].tolist()
            assert seqs == sorted(seqs), f"{subject!r}: offsets out of order"
            if seqs:
                mine[subject] = seqs
        theirs = {subject: entry.seqs.tolist() for subject, entry in fresh.subjects.items()}
        assert mine == theirs, "subject index differs from the stream"
        assert list(self.subjects.keys()) == sorted(self.subjects.keys())


# ---------------------------------------------------------------------------
# Access from the stream and the command layer
# ---------------------------------------------------------------------------

def peek(stream) -> SubjectIndex | None:
    """The stream's index if it was built, else None (never builds it)."""
    return stream._subjects


def index_of(stream) -> SubjectIndex:
    """The stream's subject index, built from its entries on first use
    (O(entries) once; maintained incrementally after that)."""
    index = stream._subjects
    if index is None:
        index = stream._subjects = SubjectIndex(stream)
        limit = stream.settings.max_msgs_per_subject
        if limit:
            index.enforce(limit)
    return index


def enforce_subject_limit(stream) -> int:
    """Apply ``config.max_msgs_per_subject`` (called by Stream.enforce_limits);
    returns the entries deleted."""
    index = stream._subjects
    if index is None:
        stream._subjects = index = SubjectIndex(stream)
    return index.enforce(stream.settings.max_msgs_per_subject)
