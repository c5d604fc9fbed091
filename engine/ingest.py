"""Fast-ingest batches (ADR-50 revisions 7-8) and message ids (JetStream ``Nats-Msg-Id``).

Per stream, one ``Ingest`` (``Stream._ingest``, None until the stream sees a
fast batch or a message id) holds what must survive a restart:

- ``batches``: batch id -> ``FastBatch``, the fast batches in flight on the
  stream.  Their durable part is the highest batch-seq stored (``stored``) and
  the offset of the batch's last stored message (``last_offset``); the rest
  (flow, ack interval, gap mode, activity) is the connection's business and
  starts again from the next message after a restart.
- ``window``: message id -> the offset it was stored at, for the duplicate
  window (``duplicate_window_ms``), with its expiry records (one per write or
  pipelined run: its time, its ids, their offsets): the oldest are dropped as
  they age out, on the next check, each record deleting exactly its ids that
  still hold its offsets (an id entered again later keeps its newer entry);
  never by iterating the table.  The window is the C ``Window`` of
  engine/_window.c (its own hash table of the ids' bytes, keyed per window, and
  a ring of records: no Python object per id; a pipelined run checked and
  entered in one call, ``claim``), or ``PyWindow`` without the extension (a dict
  and a deque of record tuples; the same methods and answers).

The AOF logs both with the INGEST effect record (persistence/effects.py) and
snapshots carry ``Ingest.export()`` in the stream's metadata, so after a crash a
fast batch is known again and a resent message is a duplicate.

``FastRegistry`` is the server's view of every fast batch (how many publishers
are active, which are idle): one per server (``server.fast``), no I/O.

Flow control (``FastBatch.adjust``) is plain arithmetic on what the server
measures (unsynced AOF bytes, loop turn time, active fast publishers): double
while it keeps up (quadruple while the turns take under ``TURN_LOW_NS``), halve when the unsynced bytes or the turn time pass their
marks or more publishers are active than at the last decision; never above the
client's flow and never above ``BUDGET // active`` (so all publishers together
keep at most about ``BUDGET`` messages per ack round in flight, which bounds the
work of a loop turn).  Unsynced bytes halve it down to 1; a slow turn or a new
publisher not below ``BUDGET // (SLOW_SHARE * active)`` (the publishers together
keep at least a quarter of the budget in flight): on a loaded machine the turns
are long in wall time whatever the publishers do, and at 1 a publisher has 2
messages in flight and runs at the round-trip rate.
"""

from __future__ import annotations

import os
import time
from collections import deque


class PyWindow:
    """The duplicate window in Python: the fallback of the C ``Window`` of
    engine/_window.c (``TSTREAM_PURE_PYTHON=1``, or the extension not built),
    with the same methods and answers.

    ``ids``: message id -> the offset it was stored at, in the order stored;
    ``runs``: the expiry records, oldest first, ``(time_ns, ids, first)`` with
    ``ids[i]`` at ``first + i`` (None: no id), or ``first`` a tuple of the
    offsets (a snapshot's records).  Each record deletes, when it ages out,
    exactly its ids that still hold its offsets (an id entered again later keeps
    its newer entry); the table is never iterated.  Keys and values are bytes and
    ints and the records tuples of them: the collector untracks them."""

    __slots__ = ("ids", "runs")

    def __init__(self) -> None:
        self.ids: dict[bytes, int] = {}
        self.runs: deque[tuple] = deque()

    def __len__(self) -> int:
        return len(self.ids)

    def records(self) -> int:
        return len(self.runs)

    def get(self, msgid: bytes) -> int | None:
        return self.ids.get(msgid)

    def seen(self, msgid: bytes, horizon: int) -> int | None:
        """The id's offset, or None, after the records at or before ``horizon`` are dropped."""
        ids = self.ids
        if not ids:
            return None
        if self.runs[0][0] <= horizon:
            self.expire(horizon)
        return ids.get(msgid)

    def expire(self, horizon: int) -> None:
        runs = self.runs
        ids = self.ids
        get = ids.get
        while runs and runs[0][0] <= horizon:
            _, rids, first = runs.popleft()
            if first.__class__ is int:
                for i, mid in enumerate(rids):
                    if get(mid) == first + i:  # (None: no id; an id entered again: its newer offset)
                        del ids[mid]
            else:
                for mid, off in zip(rids, first):
                    if get(mid) == off:
                        del ids[mid]

    def claim(self, ids: tuple, offset: int, horizon: int, stored_ns: int) -> bool:
        """After the expiry, ``ids[i]`` entered as ``offset + i`` and the run's record
        ``(stored_ns, ids, offset)`` kept when no id is in the table nor repeated
        within ``ids``: True; else the window unchanged and False.

        One C pass: ``setdefault`` of each id with its offset, summed.  It gives back
        ``offset + i`` for a new id (entered), and less for any other: an id in the
        table was stored below ``offset`` (the table only holds offsets below the
        stream's next one), a repeat gets the offset of its first entry in the run.
        So the sum is ``count * offset + count * (count - 1) / 2`` exactly when every
        id is new; else the ids entered are taken back."""
        table = self.ids
        if table and self.runs[0][0] <= horizon:
            self.expire(horizon)
        count = len(ids)
        if sum(map(table.setdefault, ids, range(offset, offset + count))) == count * offset + (count * count - count) // 2:
            self.runs.append((stored_ns, ids, offset))
            return True
        get = table.get
        for i, mid in enumerate(ids):  # an id stored or repeated: take back the ones entered now
            if get(mid) == offset + i:
                del table[mid]
        return False

    def add(self, ids, offset: int, time_ns: int) -> None:
        """``ids[i]`` (None: no id) stored at ``offset + i``; an id in the table
        already (one the window let go of, or a replay) takes its newer offset."""
        table = self.ids
        for i, mid in enumerate(ids):
            if mid is not None:
                table.pop(mid, None)  # (the newest last)
                table[mid] = offset + i
        self.runs.append((time_ns, tuple(ids), offset))

    def truncate(self, stored: int) -> None:
        """Keep only the first ``stored`` ids of the last record (and take back the others)."""
        stored_ns, ids, offset = self.runs.pop()
        pop = self.ids.pop
        for mid in ids[stored:]:
            pop(mid, None)
        if stored > 0:
            self.runs.append((stored_ns, ids[:stored], offset))

    def live(self) -> tuple[list, list]:
        """([(id, offset), ...], [[time_ns, count], ...]) of the ids in the table, by
        record, oldest first (records with none left are left out). O(ids).

        A record whose ids are all still in the table, the usual case, is checked
        and copied in C (one ``map`` of lookups, ``zip``)."""
        get = self.ids.get
        pairs: list = []
        counts: list = []
        for time_ns, rids, first in self.runs:
            offs = range(first, first + len(rids)) if first.__class__ is int else first
            # (an id None, never a key, or one entered again or taken back: not equal)
            if rids and list(map(get, rids)) == list(offs):
                pairs += zip(rids, offs)
                counts.append([time_ns, len(rids)])
                continue
            live = [(mid, off) for mid, off in zip(rids, offs) if mid is not None and get(mid) == off]
            if live:
                pairs += live
                counts.append([time_ns, len(live)])
        return pairs, counts

    def restore(self, pairs: list, counts: list) -> None:
        """An empty window filled from ``live()``'s lists (of tuples); ValueError
        if the counts do not add up to the pairs or an id repeats."""
        ids = self.ids
        for mid, off in pairs:
            ids[mid] = off
        at = 0
        for t, count in counts:
            if count < 0:
                at = -1
                break
            run = pairs[at:at + count]
            at += count
            self.runs.append((t, tuple(mid for mid, _ in run), tuple(off for _, off in run)))
        if at != len(pairs) or len(ids) != len(pairs):
            ids.clear()
            self.runs.clear()
            raise ValueError("message id runs do not match the ids")


# The C window (engine/_window.c), unless it was not built or is turned off
# (TSTREAM_PURE_PYTHON=1, as for the C parser).
Window: type = PyWindow
if os.environ.get("TSTREAM_PURE_PYTHON", "") in ("", "0"):
    try:
        from ._window import Window
    except ImportError:  # (an older build of the extension, or none)
        pass

MAX_ID_LENGTH = 64
MAX_FLOW = 65535
FIRST_ACK_ALONE = 16    # ack_msgs of the first ack when no other fast batch is active
BUDGET = 1024           # messages per ack round, shared by the active publishers
TURN_HIGH_NS = 5_000_000    # a loop turn longer than this: slow down
TURN_LOW_NS = 1_000_000     # a loop turn shorter than this: speed up by 4 (else by 2)
UNSYNCED_HIGH = 8 << 20     # unsynced AOF bytes above this: slow down
SLOW_SHARE = 4              # a slow turn or a new publisher: not below BUDGET // (SLOW_SHARE * active)


class FastBatch:
    """One fast batch of one stream."""

    __slots__ = ("key", "id", "owner", "last", "stored", "last_offset", "flow", "gap_fail", "flow_arg",
                 "gap_arg", "ack_msgs", "next_ack", "gap", "last_active", "seen_active", "steady")

    def __init__(self, key: bytes, batch_id: bytes, owner: "Ingest") -> None:
        self.key = key
        self.id = batch_id
        self.owner = owner
        self.last = 0          # highest batch-seq received (stored, or refused by EXPECT_* in gap ok)
        self.stored = 0        # highest batch-seq stored (durable)
        self.last_offset = 0   # offset of the batch's last stored message (0: none)
        self.flow = 1          # the client's largest ack interval
        self.gap_fail = False
        self.flow_arg = b""    # flow and gap as the client spells them (the run's check)
        self.gap_arg = b""
        self.ack_msgs = 1      # the ack interval in force
        self.next_ack = 1      # the batch-seq of the next ack point
        self.gap: tuple[int, int] | None = None  # (last_seq, seq) of the latest gap
        self.last_active = time.monotonic()
        self.seen_active = 0   # active fast batches at the last decision
        # The active count at which ack_msgs is at its ceiling (-1: it is not): while
        # the measures say the loop keeps up, adjust() would change nothing (the
        # pipelined run skips the call: commands/ingest.py batch_run).
        self.steady = -1

    def set_mode(self, flow: int, gap_fail: bool, flow_arg: bytes, gap_arg: bytes) -> None:
        self.flow, self.gap_fail, self.flow_arg, self.gap_arg = flow, gap_fail, flow_arg, gap_arg
        self.steady = -1  # (the ceiling may be another)
        if self.ack_msgs > flow:
            self.ack_msgs = flow

    def start_flow(self, active: int) -> None:
        """The first ack's interval: min(flow, 16) alone; with other fast batches
        active, the floor a slow turn halves down to (``BUDGET // (SLOW_SHARE *
        active)``, under the flow): no slower start than flow control allows."""
        if active > 1:
            self.ack_msgs = min(self.flow, max(1, BUDGET // (SLOW_SHARE * active)))
        else:
            self.ack_msgs = min(self.flow, FIRST_ACK_ALONE)
        self.seen_active = active
        self.steady = -1

    def adjust(self, active: int, unsynced: int, turn_ns: int) -> int:
        """At an ack point: the new ack interval from the server's measures. O(1)."""
        k = self.ack_msgs
        share = max(active, 1)
        ceiling = min(self.flow, max(1, BUDGET // share))
        if unsynced > UNSYNCED_HIGH:
            k = max(1, k >> 1)
        elif active > self.seen_active or turn_ns > TURN_HIGH_NS:
            floor = min(ceiling, max(1, BUDGET // (SLOW_SHARE * share)))
            k = max(min(k, floor), k >> 1)  # halved, not below the floor (never raised by it)
        elif turn_ns < TURN_LOW_NS:  # it keeps up with time to spare: up by 4
            k <<= 2
        else:  # it keeps up
            k <<= 1
        if k >= ceiling:
            k = ceiling
            self.steady = active
        else:
            self.steady = -1
        self.seen_active = active
        self.ack_msgs = k
        return k

    def keeps_steady(self, active: int, unsynced: int, turn_ns: int) -> bool:
        """Whether adjust(active, unsynced, turn_ns) would leave everything as it is:
        the interval at its ceiling for ``active`` publishers (no more of them than
        at the last decision) and the measures under their limits (it keeps up, so
        it would only be raised, and the ceiling stops it).  The pipelined run
        calls it before adjust() (commands/ingest.py batch_run). O(1)."""
        return self.steady == active and unsynced <= UNSYNCED_HIGH and turn_ns <= TURN_HIGH_NS


class Ingest:
    """A stream's fast batches and message ids (see the module docstring)."""

    __slots__ = ("batches", "window")

    def __init__(self) -> None:
        self.batches: dict[bytes, FastBatch] = {}
        self.window = Window()  # message id -> offset, with its expiry records (C, or PyWindow)

    def batch(self, key: bytes, batch_id: bytes) -> FastBatch:
        """The batch ``batch_id``, created if new."""
        found = self.batches.get(batch_id)
        if found is None:
            found = self.batches[batch_id] = FastBatch(key, batch_id, self)
        return found

    def replayed(self, key: bytes, batch_id: bytes, batch_seq: int, ended: bool, last_offset: int) -> None:
        """An INGEST record of a fast batch, replayed."""
        if ended:
            self.batches.pop(batch_id, None)
            return
        batch = self.batch(key, batch_id)
        batch.last = batch.stored = max(batch.stored, batch_seq)
        if last_offset:
            batch.last_offset = last_offset

    # --- message ids ----------------------------------------------------------------

    def seen(self, msgid: bytes, now_ns: int, window_ns: int) -> int | None:
        """The offset a message with ``msgid`` was stored at within the window, or
        None.  Drops the ids that aged out first (amortised O(1))."""
        return self.window.seen(msgid, now_ns - window_ns)

    def offsets(self) -> list:
        """[[id, offset], ...] of the window, oldest first. O(ids)."""
        return [[mid, off] for mid, off in self.window.live()[0]]

    def add_ids(self, ids, offset: int, time_ns: int) -> None:
        """``ids[i]`` (None: no id) was stored at ``offset + i`` (none of them is in
        the window: the caller checked them; a replay may enter one again: its
        newer offset). O(ids)."""
        self.window.add(ids, offset, time_ns)

    def expire_ids(self, now_ns: int, window_ns: int) -> None:
        """Drop the ids stored at or before ``now_ns - window_ns`` (what ``seen`` and
        ``claim_run`` do first; a replay, which only adds, calls it after each
        record). Amortised O(1): O(ids dropped)."""
        self.window.expire(now_ns - window_ns)

    def claim_run(self, ids: tuple, offset: int, now_ns: int, window_ns: int, stored_ns: int) -> bool:
        """Enter the ids of a pipelined run (a tuple) as stored from ``offset``
        (the stream's next offset) on at ``stored_ns`` (the time the append will
        give them: their expiry), before the append, after dropping the ids that
        aged out; the run's record is kept at once (``truncate_run`` if the append
        then stores only part of it).  False, with the window as it was, if one of
        them is in the window or repeats within ``ids``.  One call of the window's
        ``claim`` (commands/streams.py ``_msgid_run`` calls it directly). O(ids)."""
        return self.window.claim(ids, offset, now_ns - window_ns, stored_ns)

    def truncate_run(self, stored: int) -> None:
        """Only the first ``stored`` entries of the run ``claim_run`` entered last
        were stored (out of memory): take back the other ids, and keep the record
        of the stored ones only. O(ids)."""
        self.window.truncate(stored)

    # --- snapshots ---------------------------------------------------------------------

    def export(self) -> dict:
        pairs, counts = self.window.live()
        return {"batches": [[b.id, b.stored, b.last_offset] for b in self.batches.values()],
                "ids": pairs, "runs": counts}

    @classmethod
    def load(cls, key: bytes, saved: dict) -> "Ingest":
        ingest = cls()
        saved = {k.decode() if isinstance(k, bytes) else k: v for k, v in saved.items()}
        for batch_id, stored, last_offset in saved.get("batches", ()):
            batch = ingest.batch(key, batch_id)
            batch.last = batch.stored = stored
            batch.last_offset = last_offset
        ingest.window.restore([(mid, off) for mid, off in saved.get("ids", ())],
                              [(t, count) for t, count in saved.get("runs", ())])
        return ingest

    def __bool__(self) -> bool:
        return bool(self.batches or len(self.window))


class FastRegistry:
    """Every fast batch on the server, for the count of active publishers and
    the abandonment of idle batches (``batch-timeout-ms``)."""

    def __init__(self) -> None:
        self.active: dict[tuple[bytes, bytes], FastBatch] = {}
        self.abandoned = 0  # fast batches abandoned after the timeout (INFO)
        self._oldest_active = 0.0

    def __len__(self) -> int:
        return len(self.active)

    def track(self, batch: FastBatch) -> None:
        if not self.active:
            self._oldest_active = batch.last_active
        self.active[(batch.key, batch.id)] = batch

    def ended(self, batch: FastBatch) -> None:
        """The batch committed, failed or was dropped: forget it (here and on its stream)."""
        if self.active.get((batch.key, batch.id)) is batch:
            del self.active[(batch.key, batch.id)]
        if batch.owner.batches.get(batch.id) is batch:
            del batch.owner.batches[batch.id]

    def expire(self, timeout_ms: int, now: float | None = None) -> list[FastBatch]:
        """Abandon, without a reply, the batches idle for ``timeout_ms``; returns
        them (the caller logs their end). O(batches) when one is due."""
        if not self.active:
            return []
        now = time.monotonic() if now is None else now
        limit = timeout_ms / 1000.0
        if now - self._oldest_active < limit:
            return []
        stale = [b for b in self.active.values() if now - b.last_active >= limit]
        for batch in stale:
            self.ended(batch)
        self.abandoned += len(stale)
        self._oldest_active = min((b.last_active for b in self.active.values()), default=now)
        return stale

    def clear(self) -> None:
        self.active.clear()
