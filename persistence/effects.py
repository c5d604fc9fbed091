"""Effect records: what a command changed, logged to the append-only file and replayed.

The append-only file logs *effects*, not requests: a group read logs where its
group moved and what became pending, with explicit offsets and times, and a
write logs its time.  Replaying the records with ``apply`` rebuilds exactly the
same state, whatever the clock says at replay time.

A record is a list ``[type, key, ...]`` of ints and bytes (msgpack-encoded in
the file, see ``persistence.framing``):

    CREATE  [0, key, node_entries]                      a stream was created
    APPEND  [1, key, first_offset, time_ns, tag, data, tag, data, ...]
                                                        entries appended (one TWRITE, one BATCH commit)
    EVICT   [2, key, new_first]                         entries below new_first are gone
    CONFIG  [3, key, name, value, name, value, ...]     stream config set (values as stored)
    DELKEY  [4, key]                                    DEL
    FLUSH   [5]                                         FLUSHALL
    GROUP   [6, key, name, next, offset, deliveries, retry_at_ms, expire_at_ms, retry_ms, ...]
                                                        group created or moved; pending entries set
    ACK     [7, key, name, offset, ...]                 pending entries acknowledged
    DELETE  [8, key, offset, ...]                       entries deleted (per-subject limits)
    TXN     [9, [record, record, ...]]                  a transaction (EXEC): its records as one
                                                        frame, so a crash keeps all or none of them
    XADD    [10, key, offset, time_ns, ms, seq, packed, tag, data]
                                                        XADD: one entry with its Redis id
                                                        (packed 1: tag/data hold field-value pairs)
    XSETID  [11, key, ms, seq, entries_added, max_deleted_ms, max_deleted_seq]
    XDEL    [12, key, offset, ...]                      XDEL: entries deleted by id (max-deleted id kept)
    XGROUP  [13, key, name, next, last_ms, last_seq, entries_read]
                                                        an X* group created or moved (engine/xgroups.py)
    XCONSUMER [14, key, name, consumer, seen_ms]        a consumer created or seen
    XOWN    [15, key, name, consumer, offset, deliveries, delivered_ms, ...]
                                                        pending entries delivered to / claimed by a consumer
    XGDESTROY [16, key, name]                           XGROUP DESTROY
    XCDEL   [17, key, name, consumer]                   XGROUP DELCONSUMER (its pending entries go)
    INGEST  [18, key, first_offset, time_ns, batch_id, batch_seq, ended, ids, tag, data, ...]
                                                        entries appended by a fast batch (batch_id:
                                                        its highest batch-seq stored is batch_seq;
                                                        ended 1: the batch is over) or with message
                                                        ids (batch_id nil); ids: one message id or nil
                                                        per entry, or empty, or the entries' ids packed
                                                        as one bin item (``packed_ids``: a byte of
                                                        length per id, then their bytes; a pipelined
                                                        MSGID run's, since 2026-11-28; a list before);
                                                        no entries: a batch ended
    BUNDLE  [19, record, record, ...]                   records framed together to save a frame, a
                                                        checksum and a msgpack call each: a loop
                                                        turn's records in the AOF, a send's in the
                                                        replication stream.  Not one change (each
                                                        record applies on its own), but, as one
                                                        frame, kept whole or not at all by a crash;
                                                        never nested, never inside a TXN
"""

from __future__ import annotations

from itertools import accumulate
from operator import itemgetter
from typing import Any, Callable

from tstream.engine import xgroups, xids
from tstream.engine.groups import Group
from tstream.engine.ingest import Ingest, PyWindow, Window

(CREATE, APPEND, EVICT, CONFIG, DELKEY, FLUSH, GROUP, ACK, DELETE, TXN, XADD, XSETID, XDEL,
 XGROUP, XCONSUMER, XOWN, XGDESTROY, XCDEL, INGEST, BUNDLE) = range(20)

NAMES = ["CREATE", "APPEND", "EVICT", "CONFIG", "DELKEY", "FLUSH", "GROUP", "ACK", "DELETE", "TXN",
         "XADD", "XSETID", "XDEL", "XGROUP", "XCONSUMER", "XOWN", "XGDESTROY", "XCDEL", "INGEST", "BUNDLE"]


class ReplayError(ValueError):
    """A record does not fit the state built so far (the file is corrupt).
    ``where``: what the caller of :meth:`Replay.apply` said of that record
    (its offset in the file), 0 when raised by :func:`apply`."""

    where: int = 0


# --- building records (on the server's hot paths: keep them plain) -------------------


def bundled(records: list) -> list:
    """One record for ``records`` (a list of one or more records): the record
    itself when alone, else a BUNDLE of them."""
    return records[0] if len(records) == 1 else [BUNDLE, *records]


def unbundled(records) -> list:
    """``records`` with every BUNDLE replaced by the records it holds (a reader
    of a file or stream that wants one record per change)."""
    flat: list = []
    for record in records:
        if type(record) is list and record and record[0] == BUNDLE:
            flat += record[1:]
        else:
            flat.append(record)
    return flat


def py_packed_ids(ids):
    """The ids field of an INGEST record for ``ids`` (a tuple or list of bytes,
    one an entry): one bytes item, a byte of length per id then the ids' bytes
    one after another, which msgpack packs as one item instead of one an id (a
    pipelined MSGID run's 64 ids: ~400 instructions a message less to pack, the
    same bytes in the file); ``ids`` itself (a list item each, the older form,
    still read) when an id is 256 bytes or longer, or None, and when memory runs
    out (the entries are stored: the record must be logged).  ``packed_ids`` is
    engine/_window.c's ``pack_ids`` when built, this otherwise."""
    try:
        return bytes(map(len, ids)) + b"".join(ids)
    except (ValueError, TypeError, MemoryError):  # (a length over 255; None: an entry without an id)
        return ids


packed_ids: Callable[[Any], Any] = py_packed_ids
if Window is not PyWindow:  # (the C window is built and on: its module packs too)
    from tstream.engine import _window

    packed_ids = getattr(_window, "pack_ids", py_packed_ids)  # (an extension built before pack_ids)


def unpacked_ids(packed: bytes, count: int) -> list:
    """The ``count`` ids ``packed_ids`` packed into ``packed``; ReplayError if
    the lengths do not add up to its size."""
    ends = list(accumulate(packed[:count], initial=count))
    if len(ends) != count + 1 or ends[-1] != len(packed):
        raise ReplayError(f"INGEST record whose packed ids do not hold its {count} entries' ids")
    return list(map(packed.__getitem__, map(slice, ends, ends[1:])))


def group_moved(key: bytes, group: Group, offsets=()) -> list:
    """A GROUP record: the group's position, and the pending state of ``offsets``."""
    record = [GROUP, key, group.name, group.next]
    for offset in offsets:
        pending = group.pending_state(offset)
        if pending is not None:
            record.extend(pending)
    return record


# --- replaying ------------------------------------------------------------------------


def _apply_xgroup(stream, record: list) -> None:
    """Replay a record of an X* consumer group (engine/xgroups.py)."""
    kind, name = record[0], record[2]
    group = stream.groups.get(name)
    if kind == XGROUP:
        next_offset, last_id, entries_read = record[3], (record[4], record[5]), record[6]
        if group is None:
            group = xgroups.create(stream, name, last_id, entries_read)
        else:
            xgroups.state(stream, group)
            group.x.last_id, group.x.entries_read = last_id, entries_read
        group.next = next_offset
        return
    if group is None:
        raise ReplayError(f"{NAMES[kind]} of a group that does not exist: {name!r}")
    if kind == XGDESTROY:
        del stream.groups[name]  # (the stream's own dict once it has a group)
        return
    xgroups.state(stream, group)
    if kind == XCONSUMER:
        xgroups.consumer(group, record[3], record[4]).seen_ms = record[4]
    elif kind == XOWN:
        owner = xgroups.consumer(group, record[3], 0)
        triples = record[4:]
        if len(triples) % 3:
            raise ReplayError("XOWN record with a partial entry")
        for i in range(0, len(triples), 3):
            xgroups.take_pending(stream, group, triples[i], owner, triples[i + 2], triples[i + 1])
    else:
        xgroups.delete_consumer(group, record[3])


def _apply_x(stream, record: list) -> None:
    """Replay an XADD, XSETID or XDEL record (engine/xids.py)."""
    kind = record[0]
    if kind == XADD:
        offset, time_ns, xid, packed, tag, data = record[2], record[3], (record[4], record[5]), record[6], \
            record[7], record[8]
        if offset != stream.next_offset:
            raise ReplayError(f"XADD at offset {offset}, the stream is at {stream.next_offset}")
        xids.replay_add(stream, tag, data, time_ns, xid, bool(packed))
    elif kind == XSETID:
        xids.set_last_id(stream, (record[2], record[3]), record[4], (record[5], record[6]))
    else:
        for offset in record[2:]:
            if stream.is_held(offset):
                xid = xids.id_of(stream, offset)
                stream.delete(offset)
                xids.note_deleted(stream, xid)


def _apply_ingest(key: bytes, stream, record: list) -> None:
    """Replay an INGEST record (engine/ingest.py)."""
    first_offset, time_ns, batch_id, batch_seq, ended, ids = record[2:8]
    count = (len(record) - 8) >> 1
    if count:
        if first_offset != stream.next_offset:
            raise ReplayError(f"INGEST at offset {first_offset}, the stream is at {stream.next_offset}")
        stream.append_many(record, time_ns, 8)
    ingest = stream._ingest
    if ingest is None:
        ingest = stream._ingest = Ingest()
    if batch_id is not None:
        ingest.replayed(key, batch_id, batch_seq, bool(ended), first_offset + count - 1 if count else 0)
    if ids:
        if type(ids) is bytes:  # (packed_ids: one item for the entries' ids)
            ids = unpacked_ids(ids, count)
        ingest.add_ids(ids, first_offset, time_ns)
        # The ids older than two windows by this record's time leave the window: a
        # replica only replays (it never claims), and without this its window would keep
        # every id it was ever sent (and an AOF load every id of the file until the first
        # MSGID write).  Two windows, not one: the primary ages ids by its wall clock, while
        # a record carries the stream's time, which never goes back, so after the primary's
        # clock stepped back (up to a window) the record's time is ahead of the primary's
        # clock and one window would drop ids the primary still holds.  The extra ids are
        # harmless: every check (here too, once promoted) first drops what aged out by its
        # own clock.
        ingest.expire_ids(time_ns, 2 * stream.settings.duplicate_window_ms * 1_000_000)


def apply(keyspace, record: list) -> None:  # noqa: C901 (over the limit when it came in)
    """Apply one record to ``keyspace``; raises ReplayError if it cannot apply."""
    try:
        kind = record[0]
        if kind == FLUSH:
            keyspace.flush()
            return
        if kind == TXN:
            for inner in record[1]:
                if inner[0] == TXN or inner[0] == BUNDLE:
                    raise ReplayError(f"a {NAMES[inner[0]]} record inside a TXN record")
                apply(keyspace, inner)
            return
        if kind == BUNDLE:
            for inner in record[1:]:
                if inner[0] == BUNDLE:
                    raise ReplayError("a BUNDLE record inside a BUNDLE record")
                apply(keyspace, inner)
            return
        key = record[1]
        if kind == CREATE:
            if keyspace.get(key) is None:
                keyspace.get_or_create(key, record[2])
            return
        if kind == DELKEY:
            keyspace.delete(key)
            return
        stream = keyspace.get(key)
        if stream is None:
            raise ReplayError(f"{NAMES[kind]} on a key that does not exist: {key!r}")
        if kind == APPEND:
            first_offset, time_ns = record[2], record[3]
            if first_offset != stream.next_offset:
                raise ReplayError(f"APPEND at offset {first_offset}, the stream is at {stream.next_offset}")
            stream.append_many(record, time_ns, 4)
        elif kind == EVICT:
            stream.evict_through(record[2] - 1)
        elif kind == CONFIG:
            config = stream.config
            for name, value in zip(record[2::2], record[3::2]):
                name = name.decode() if isinstance(name, bytes) else name
                if not hasattr(config, name):
                    raise ReplayError(f"unknown stream config {name!r}")
                setattr(config, name, value)
        elif kind == GROUP:
            name, next_offset = record[2], record[3]
            group = stream.groups.get(name)
            if group is None:
                group = Group(name, next_offset)
                stream.add_group(name, group)
            group.next = next_offset
            pending = record[4:]
            if len(pending) % 5:
                raise ReplayError("GROUP record with a partial pending entry")
            for i in range(0, len(pending), 5):
                group.restore_pending(*pending[i : i + 5])
        elif kind == ACK:
            group = stream.groups.get(record[2])
            if group is not None:
                group.ack(record[3:])
        elif kind == DELETE:
            for offset in record[2:]:
                stream.delete(offset)
        elif kind == INGEST:
            _apply_ingest(key, stream, record)
        elif kind in (XADD, XSETID, XDEL):
            _apply_x(stream, record)
        elif XGROUP <= kind <= XCDEL:
            _apply_xgroup(stream, record)
        else:
            raise ReplayError(f"unknown record type {kind!r}")
    except ReplayError:
        raise
    except (IndexError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ReplayError(f"malformed record {str(record)[:120]}: {exc}") from None


# --- replaying many records: runs of appends in one engine call -------------------------

RUN_ENTRIES = 4096  # a run held is applied once it has this many entries
RUN_RECORD_ENTRIES = 16  # an append of more entries goes alone: its call's cost is spread over them already
_RUN_RECORD_SIZE = 4 + 2 * RUN_RECORD_ENTRIES


_LIST, _SIX, _APPEND = {list}, {6}, {APPEND}
_KIND, _KEY, _OFFSET, _TIME, _TAG, _DATA = map(itemgetter, range(6))  # (an APPEND record's fields)


def _has_limits(stream) -> bool:
    config = stream.settings
    return bool(config.max_len or config.max_age_ms or config.max_msgs_per_subject)


class Replay:
    """Applies records in order as :func:`apply` does, but a *run* of
    consecutive plain APPEND records of one key, each starting where the one
    before ended (an unpipelined writer's TWRITEs), as one engine call
    (``Stream.append_columns`` with each entry's time): the engine's
    per-call work (payload join, tag lookup, node bookkeeping) is paid once
    per run instead of once per record (an append of more than
    ``RUN_RECORD_ENTRIES`` entries, a batch, goes alone: per entry, the times
    a run carries would cost it more than the call it saves).  Any other record, or an append to
    another key, applies the run first, then itself.  A stream with limits
    (max_len, max_age_ms, max_msgs_per_subject) takes its appends one at a
    time: a limit enforced once per run would free and reuse tag ids in
    another order, and the state must be byte for byte the one the records
    one by one build.

    The run is held until then: call :meth:`flush` after the last record (and
    before acting on the keyspace in between).  The outcome is :func:`apply`'s
    one record at a time, failures included: a run the engine refuses (bad
    input changes nothing) is applied again record by record, so the records
    before a bad one stay applied and the bad one raises its own
    ReplayError, with ``where`` the value given with it.  ``applied(record)``,
    when given, is called for every record once it is applied, in order.
    A MemoryError in the engine propagates (what the engine kept of the run
    stays, as a MemoryError in a single append leaves it)."""

    __slots__ = ("keyspace", "applied", "applied_run", "before_other", "key", "stream", "next", "records", "wheres",
                 "tags", "datas", "times")

    def __init__(self, keyspace, applied=None, before_other=None, applied_run=None) -> None:
        self.keyspace = keyspace
        self.applied = applied
        # ``applied_run(key, records)``, when given, is called instead of
        # ``applied`` for the records of a run (APPENDs of ``key``) at once.
        self.applied_run = applied_run
        # Called before a record other than an APPEND is applied (an AOF
        # load settles its background seals then: persistence/sealer.py).
        self.before_other = before_other
        self.key: bytes | None = None  # the run's key (None: no run held)
        self.stream: Any = None  # the run's Stream
        self.next = 0  # the offset the run's next record must start at
        self.records: list = []
        self.wheres: list = []
        self.tags: list = []
        self.datas: list = []
        self.times: list = []

    def apply(self, record: list, where: int = 0) -> None:
        """Apply ``record`` (now, or with the run it joins); raises ReplayError
        (``where``: the failing record's) as :func:`apply` does."""
        size = len(record) if type(record) is list else 0  # (anything else: apply() says what is wrong)
        if 6 <= size <= _RUN_RECORD_SIZE and record[0] == APPEND and not size & 1 and type(record[1]) is bytes:
            if record[1] == self.key and record[2] == self.next:
                self._join(record, where, size)
                return
            if self.key is not None:
                self.flush()
            stream = self.keyspace.get(record[1])
            if stream is not None and record[2] == stream.next_offset and not _has_limits(stream):
                self.key, self.stream = record[1], stream
                self._join(record, where, size)
                return
        elif size > 1 and record[0] == BUNDLE:
            self._bundle(record, where)
            return
        elif self.key is not None:
            self.flush()
        self._one(record, where)

    def _bundle(self, bundle: list, where: int) -> None:
        """A BUNDLE's records in order.  When they are all one-entry APPENDs of
        one key, each starting where the one before ended (a send of the
        replication stream under unpipelined writers), they join the run in
        C-level steps (no Python call per record); else one by one."""
        records = bundle[1:]
        count = len(records)
        first = records[0]
        try:
            fits = (set(map(type, records)) == _LIST and set(map(len, records)) == _SIX
                    and set(map(_KIND, records)) == _APPEND and type(first[1]) is bytes
                    and set(map(_KEY, records)) == {first[1]}
                    and list(map(_OFFSET, records)) == list(range(first[2], first[2] + count)))
        except TypeError:  # (an offset that is not a number: apply() says what is wrong)
            fits = False
        if fits:
            key, start = first[1], first[2]
            if key != self.key or start != self.next:
                self.flush()
                stream = self.keyspace.get(key)
                fits = stream is not None and start == stream.next_offset and not _has_limits(stream)
                if fits:
                    self.key, self.stream = key, stream
        if not fits:
            for record in records:
                if type(record) is list and record and record[0] == BUNDLE:
                    self.flush()
                    exc = ReplayError("a BUNDLE record inside a BUNDLE record")
                    exc.where = where
                    raise exc
                self.apply(record, where)
            return
        self.records += records
        self.wheres += [where] * count
        self.tags += map(_TAG, records)
        self.datas += map(_DATA, records)
        self.times += map(_TIME, records)
        self.next = start + count
        if len(self.tags) >= RUN_ENTRIES:
            self.flush()

    def _join(self, record: list, where: int, size: int) -> None:
        self.records.append(record)
        self.wheres.append(where)
        if size == 6:  # one entry (a TWRITE)
            self.tags.append(record[4])
            self.datas.append(record[5])
            self.times.append(record[3])
            self.next = record[2] + 1
        else:
            count = (size - 4) >> 1
            self.tags += record[4::2]
            self.datas += record[5::2]
            self.times += [record[3]] * count
            self.next = record[2] + count
        if len(self.tags) >= RUN_ENTRIES:
            self.flush()

    def _one(self, record: list, where: int) -> None:
        before = self.before_other
        if before is not None and not (type(record) is list and record and record[0] == APPEND):
            before()
        try:
            apply(self.keyspace, record)
        except ReplayError as exc:
            exc.where = where
            raise
        if self.applied is not None:
            self.applied(record)

    def flush(self) -> None:
        """Apply the run held, if any."""
        if self.key is None:
            return
        stream, records, wheres = self.stream, self.records, self.wheres
        start = records[0][2]
        tags, datas, times = self.tags, self.datas, self.times
        self.key = self.stream = None
        self.records, self.wheres, self.tags, self.datas, self.times = [], [], [], [], []
        try:
            stream.append_columns(tags, datas, 0, times)
        except MemoryError:
            raise
        except Exception:
            if stream.next_offset != start:  # (not bad input: the engine stored part of it)
                raise
            # Bad input changed nothing: one record at a time, to stop at the bad one.
            for record, where in zip(records, wheres):
                self._one(record, where)
            return
        if self.applied_run is not None:
            self.applied_run(records[0][1], records)
            return
        applied = self.applied
        if applied is not None:
            for record in records:
                applied(record)
