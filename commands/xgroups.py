"""Handlers of the Redis Streams consumer-group commands: XGROUP, XREADGROUP,
XACK, XPENDING, XCLAIM, XAUTOCLAIM, XINFO GROUPS|CONSUMERS.

The groups are the same objects TREAD ... GROUP uses (engine/groups.py);
engine/xgroups.py keeps what Redis adds (consumers, owners, delivery times,
the last delivered id and Redis 7's entries-read).  Replies and error texts
are Redis 7.0's.  Every change is described to the write path with its effect
records (persistence/effects.py), so the append-only file replays it exactly.
"""

from __future__ import annotations

from itertools import chain, repeat
from time import time_ns

from tstream.engine import xgroups, xids
from tstream.persistence.effects import ACK, XCDEL, XCONSUMER, XGDESTROY, XGROUP, XOWN
from tstream.resp import NO_REPLY, NULL_ARRAY, OK, ErrorReply, KeyedReplies, Raw
from tstream.resp.xentries import (
    STREAM_TABLES_IN_C,
    encode_keyed,
    encode_stream_columns,
    encode_stream_packed,
    encode_stream_pairs,
    encode_stream_tables,
)

from .args import as_int64, to_int
from .errors import CommandError, SubcommandSyntax, SyntaxErr
from .xstreams import (
    _U64,
    entry_replies,
    format_id,
    parse_id,
    parse_range_end,
    parse_range_start,
)


def _now_ms() -> int:
    return time_ns() // 1_000_000


def _group_record(key: bytes, group) -> list:
    x = group.x
    return [XGROUP, key, group.name, group.next, x.last_id[0], x.last_id[1], x.entries_read]


def _owned_record(key: bytes, group, consumer: bytes, pendings) -> list:
    record = [XOWN, key, group.name, consumer]
    for p in pendings:
        record += [p.offset, p.deliveries, p.delivered_ms]
    return record


def no_group(key: bytes, name: bytes) -> CommandError:
    return CommandError(f"NOGROUP No such key '{key.decode(errors='replace')}' or consumer group "
                        f"'{name.decode(errors='replace')}'")


def _group_or_error(server, key: bytes, name: bytes):
    stream = server.streams.get(key)
    group = stream.groups.get(name) if stream is not None else None
    if group is None:
        raise no_group(key, name)
    return stream, group


# --- XGROUP ----------------------------------------------------------------------------------

def _entries_read_option(argv: list, start: int, allow_mkstream: bool) -> tuple[bool, int]:
    """``[MKSTREAM] [ENTRIESREAD n]`` after the id of XGROUP CREATE / SETID."""
    mkstream, entries_read = False, xgroups.INVALID
    i = start
    while i < len(argv):
        word = argv[i].lower()
        if word == b"mkstream" and allow_mkstream:
            mkstream = True
            i += 1
        elif word == b"entriesread" and i + 1 < len(argv):
            entries_read = to_int(argv[i + 1])
            if entries_read < 0 and entries_read != xgroups.INVALID:
                raise CommandError("ERR value for ENTRIESREAD must be positive or -1")
            i += 2
        else:
            raise SubcommandSyntax(argv)
    return mkstream, entries_read


def _stream_for_xgroup(server, argv: list, mkstream: bool):
    """The stream of an XGROUP subcommand: Redis's error when it does not exist."""
    stream = server.streams.get(argv[2])
    if stream is None and not mkstream:
        raise CommandError("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may "
                           "want to use the MKSTREAM option to create an empty stream automatically.")
    return stream


def _existing_group(server, argv: list):
    stream = _stream_for_xgroup(server, argv, False)
    group = stream.groups.get(argv[3])
    if group is None:
        raise CommandError(f"NOGROUP No such consumer group '{argv[3].decode(errors='replace')}' for key name "
                           f"'{argv[2].decode(errors='replace')}'")
    return stream, group


def xgroup_create(client, argv):
    """XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD entries-read]

    Creates a consumer group reading after id ($: the stream's last id). O(log N)."""
    mkstream, entries_read = _entries_read_option(argv, 5, True)
    server = client.server
    stream = _stream_for_xgroup(server, argv, mkstream)
    last_id = None if argv[4] == b"$" else parse_id(argv[4], 0)
    if stream is not None and argv[3] in stream.groups:
        raise CommandError("BUSYGROUP Consumer Group name already exists")
    if stream is None:
        stream = server.create_stream(argv[2])
    if last_id is None:
        last_id = xids.top_id(stream)
    group = xgroups.create(stream, argv[3], last_id, entries_read)
    server.writes.xgroup_changed(argv[2], stream, [_group_record(argv[2], group)])
    return OK


def xgroup_setid(client, argv):
    """XGROUP SETID key group id|$ [ENTRIESREAD entries-read]

    Sets the group's last delivered id. O(log N)."""
    _, entries_read = _entries_read_option(argv, 5, False)
    server = client.server
    stream, group = _existing_group(server, argv)
    last_id = xids.top_id(stream) if argv[4] == b"$" else parse_id(argv[4], 0)
    xgroups.set_last_id(stream, group, last_id, entries_read)
    server.writes.xgroup_changed(argv[2], stream, [_group_record(argv[2], group)], wake=True)
    return OK


def xgroup_destroy(client, argv):
    """XGROUP DESTROY key group

    Destroys a consumer group; 1 if it existed. O(1)."""
    server = client.server
    stream = _stream_for_xgroup(server, argv, False)
    if argv[3] not in stream.groups:
        return 0
    del stream.groups[argv[3]]
    server.writes.xgroup_changed(argv[2], stream, [[XGDESTROY, argv[2], argv[3]]])
    return 1


def xgroup_createconsumer(client, argv):
    """XGROUP CREATECONSUMER key group consumer

    Creates a consumer; 1 if it is new. O(1)."""
    server = client.server
    stream, group = _existing_group(server, argv)
    x = xgroups.state(stream, group)
    if argv[4] in x.consumers:
        return 0
    now = _now_ms()
    xgroups.consumer(group, argv[4], now)
    server.writes.xgroup_changed(argv[2], stream, [[XCONSUMER, argv[2], argv[3], argv[4], now]])
    return 1


def xgroup_delconsumer(client, argv):
    """XGROUP DELCONSUMER key group consumer

    Deletes a consumer and its pending entries; replies how many it had. O(P)."""
    server = client.server
    stream, group = _existing_group(server, argv)
    xgroups.state(stream, group)
    if argv[4] not in group.x.consumers:
        return 0
    pending = xgroups.delete_consumer(group, argv[4])
    server.writes.xgroup_changed(argv[2], stream, [[XCDEL, argv[2], argv[3], argv[4]]])
    return pending


# --- XREADGROUP --------------------------------------------------------------------------------

class XReadGroupRequest:
    """A parsed XREADGROUP; kept by a blocked client until it can be served
    (server/blocking.py parks it on every key, as XREAD's)."""

    __slots__ = ("key", "keys", "ids", "count", "block_ms", "group", "group_name", "consumer", "noack",
                 "offset")

    def __init__(self, group_name: bytes, consumer: bytes, keys: list, ids: list, count: int,
                 block_ms: int | None, noack: bool) -> None:
        self.keys = keys
        self.key = keys[0]
        self.ids = ids  # per key: None for ">", else the history id to read after
        self.count = count
        self.block_ms = block_ms
        self.group = None  # (server.blocking: a plain waiter, served by perform)
        self.group_name = group_name
        self.consumer = consumer
        self.noack = noack
        self.offset = 0

    def perform(self, server, blocking: bool):
        """The reply; None while nothing is new (only if ``blocking``)."""
        found = KeyedReplies()
        now = _now_ms()
        for key, after in zip(self.keys, self.ids):
            stream = server.streams.get(key)
            group = stream.groups.get(self.group_name) if stream is not None else None
            if group is None:
                return ErrorReply(no_group(key, self.group_name).message + " in XREADGROUP with GROUP option")
            x = group.x or xgroups.state(stream, group)
            # Served now: a history read, or new entries past the group's last id
            # (the consumer is created only then, as Redis 7.0 does).
            if after is None and not (stream.length and xids.top_id(stream) > x.last_id
                                      and group.next < stream.next_offset):
                continue
            if after is not None:
                owner = x.consumers.get(self.consumer) or xgroups.consumer(group, self.consumer, now)
                owner.seen_ms = now
                records = [[XCONSUMER, key, group.name, owner.name, now]] if server.writes.sinks else []
                found[key] = _history(stream, group, owner, after, self.count, now, key, records)
                server.writes.xgroup_changed(key, stream, records)
            else:
                found[key] = _deliver_new(server, key, stream, group, x, self.consumer, self.count, now, self.noack)
        if found:
            return found
        return None if blocking else NULL_ARRAY


def _deliver_new(server, key: bytes, stream, group, x, consumer: bytes, count: int, now: int, noack: bool):
    """XREADGROUP ``>`` on one key with new entries to hand out: the entries'
    reply (the consumer made or seen now, the group moved, the change described)."""
    owner = x.consumers.get(consumer) or xgroups.consumer(group, consumer, now)
    owner.seen_ms = now
    offsets, tags, datas, texts = xgroups.deliver_columns(stream, group, owner, count or stream.next_offset, now,
                                                          noack)
    packed = xids.packed_span(stream, offsets[0], offsets[-1] + 1) if offsets else 2
    if packed == 0:
        reply = encode_stream_columns(texts, tags, datas)  # one field-value pair each (the usual case)
    elif packed == 1:  # every one holds several pairs (bench/xstreams.py's entries): their payloads as stored
        reply = encode_stream_packed(texts, tags, datas)
        if reply is None:  # (payloads packed by msgpack: before 2026-11-27, or of more than 126 items)
            reply = encode_stream_pairs(texts, tags, xids.unpack_rests(datas))
    else:  # (none, or some entries hold several pairs, some one)
        reply = entry_replies(stream, [list(row) for row in zip(offsets, tags, datas)], texts=texts)
    _log_delivery(server, key, stream, group, owner, offsets, now, noack)
    return reply


def _log_delivery(server, key: bytes, stream, group, owner, offsets: list, now: int, noack: bool) -> None:
    """The change of a delivery of new entries described to the write path."""
    if server.writes.sinks:  # effect records are built only for the AOF
        records = [[XCONSUMER, key, group.name, owner.name, now], _group_record(key, group)]
        if offsets and not noack:  # (_owned_record of the entries, each delivered once, now)
            records.append([XOWN, key, group.name, owner.name,
                            *chain.from_iterable(zip(offsets, repeat(1), repeat(now)))])
        server.writes.xgroup_changed(key, stream, records)
    else:
        server.writes.xgroup_changed(key, stream, [])


def _deliver_tables(client, key: bytes, stream, group, x, consumer: bytes, count: int, now: int):
    """``XREADGROUP GROUP group consumer COUNT count STREAMS key >``'s whole
    reply (keyed, in the client's protocol) written in one C call from the
    log's tables (resp's ``encode_stream_tables``: no column lists, the ids
    derived from the entries' times while their bytes are written), when the
    entries follow the last one handed out with nothing stored between
    (engine xgroups.new_tables) and hold one pair each or every one packed
    pairs; else None, nothing changed (the caller takes ``_deliver_new``).
    The same bytes and the same changes as ``_deliver_new``."""
    count = count or stream.next_offset
    found = xgroups.new_tables(stream, group, count)
    if found is None:
        return None
    tables, start, end = found
    packed = xids.packed_span(stream, start, end)
    if packed == 2:
        return None
    last_ms, last_seq = x.last_id
    made = encode_stream_tables(client.protocol, key, tables, stream.tag_list, last_ms, last_seq, packed)
    if made is None:
        return None
    reply, texts, row_ids = made
    owner = x.consumers.get(consumer) or xgroups.consumer(group, consumer, now)
    owner.seen_ms = now
    offsets = xgroups.deliver_derived(stream, group, owner, start, end, count, row_ids, texts, now, False)
    _log_delivery(client.server, key, stream, group, owner, offsets, now, False)
    return Raw(reply)


def _history(stream, group, owner, after, count: int, now: int, key: bytes, records: list) -> list:
    """The consumer's own pending entries after ``after``: ``[id, fields]``, or
    ``[id, nil]`` for an entry deleted since; their delivery counts go up."""
    mine = [p for p in xgroups.owned(group, owner.name) if xgroups.pending_id(stream, p) > after]
    if count:
        mine = mine[:count]
    out = []
    delivered = []
    for p in mine:
        entry = stream.get(p.offset)
        if entry is None:  # deleted or trimmed since: its id, and no fields
            out.append([format_id(xgroups.pending_id(stream, p)), NULL_ARRAY])
            continue
        out += entry_replies(stream, [[p.offset, entry.tag, entry.data]])
        p.deliveries += 1
        p.delivered_ms = now
        delivered.append(p)
    if delivered:
        records.append(_owned_record(key, group, owner.name, delivered))
    return out


def parse_xreadgroup(argv: list) -> XReadGroupRequest:
    if (len(argv) == 9 and argv[6].lower() == b"streams" and argv[1].lower() == b"group"
            and argv[4].lower() == b"count"):  # GROUP g c COUNT n STREAMS key id: a consumer's loop, kept short
        return XReadGroupRequest(argv[2], argv[3], [argv[7]], [argv[8]], max(to_int(argv[5]), 0), None, False)
    count, block_ms, noack = 0, None, False
    group_name = consumer = None
    i = 1
    streams_at = 0
    while i < len(argv):
        word = argv[i].lower()
        more = len(argv) - i - 1
        if word == b"block" and more:
            block_ms = to_int(argv[i + 1])
            if block_ms < 0:
                raise CommandError("ERR timeout is negative")
            i += 2
        elif word == b"count" and more:
            count = max(to_int(argv[i + 1]), 0)
            i += 2
        elif word == b"streams" and more:
            streams_at = i + 1
            if (len(argv) - streams_at) % 2:
                raise CommandError("ERR Unbalanced 'xreadgroup' list of streams: for each stream key an ID or "
                                   "'>' must be specified.")
            break
        elif word == b"group" and more >= 2:
            group_name, consumer = argv[i + 1], argv[i + 2]
            i += 3
        elif word == b"noack":
            noack = True
            i += 1
        else:
            raise SyntaxErr()
    if not streams_at:
        raise SyntaxErr()
    if group_name is None:
        raise CommandError("ERR Missing GROUP option for XREADGROUP")
    rest = argv[streams_at:]
    half = len(rest) // 2
    return XReadGroupRequest(group_name, consumer, list(rest[:half]), list(rest[half:]), count, block_ms, noack)


def xreadgroup(client, argv):
    """XREADGROUP GROUP group consumer [COUNT count] [BLOCK milliseconds] [NOACK] STREAMS key [key ...] id [id ...]

    New entries for the consumer (">": they become its pending entries unless
    NOACK), or its own pending entries after an id; BLOCK waits for new ones.
    O(M) for M entries returned (plus O(P) for a history read)."""
    if (len(argv) == 9 and argv[8] == b">" and argv[6].lower() == b"streams" and argv[1].lower() == b"group"
            and argv[4].lower() == b"count"):  # GROUP g c COUNT n STREAMS key >: a consumer's loop, served here
        return _read_new(client, argv[7], argv[2], argv[3], max(to_int(argv[5]), 0))
    request = parse_xreadgroup(argv)
    server = client.server
    ids = []
    for key, arg in zip(request.keys, request.ids):
        stream = server.streams.get(key)
        if stream is None or request.group_name not in stream.groups:
            raise CommandError(no_group(key, request.group_name).message + " in XREADGROUP with GROUP option")
        if arg == b"$":
            raise CommandError("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the "
                               "history of this consumer by specifying a proper ID, or use the > ID to get new "
                               "messages. The $ ID would just return an empty result set.")
        ids.append(None if arg == b">" else parse_id(arg, 0))
    request.ids = ids
    blocking = request.block_ms is not None and not client.in_exec and all(i is None for i in ids)
    reply = request.perform(server, blocking)
    if reply is None:
        server.blocking.block(client, request)
        return NO_REPLY
    return reply


def _read_new(client, key: bytes, group_name: bytes, consumer: bytes, count: int):
    """``XREADGROUP GROUP group consumer COUNT count STREAMS key >`` (no BLOCK,
    no NOACK): what ``XReadGroupRequest.perform`` replies, without the request
    object, the per-key loop and the keyed reply's type dispatch."""
    server = client.server
    stream = server.streams.get(key)
    group = stream.groups.get(group_name) if stream is not None else None
    if group is None:
        raise CommandError(no_group(key, group_name).message + " in XREADGROUP with GROUP option")
    x = group.x or xgroups.state(stream, group)
    if not (stream.length and group.next < stream.next_offset and xids.top_id(stream) > x.last_id):
        return NULL_ARRAY
    now = _now_ms()
    if STREAM_TABLES_IN_C:  # (in Python the columns' encoders are the faster)
        reply = _deliver_tables(client, key, stream, group, x, consumer, count, now)
        if reply is not None:
            return reply
    reply = _deliver_new(server, key, stream, group, x, consumer, count, now, False)
    if reply.__class__ is Raw:
        return encode_keyed(client.protocol, key, reply)
    found = KeyedReplies()
    found[key] = reply
    return found


# --- XACK, XPENDING --------------------------------------------------------------------------------

def _offsets_of(stream, wanted: list) -> list[int]:
    """The offsets holding the ids ``wanted`` (held, deleted or still pending). O(log N) each."""
    out = []
    for xid in wanted:
        offset = xids.offset_at_or_after(stream, xid)
        if offset < stream.next_offset and xids.id_of(stream, offset) == xid:
            out.append(offset)
    return out


def xack(client, argv):
    """XACK key group id [id ...]

    Acknowledges pending entries; replies how many were pending. O(log N) per id."""
    server = client.server
    stream = server.streams.get(argv[1])
    group = stream.groups.get(argv[2]) if stream is not None else None
    if group is None:
        return 0  # (Redis looks the group up before it parses the ids)
    x = group.x if group.x is not None else xgroups.state(stream, group)
    args = argv[3:]
    # The ids as XREADGROUP spelt them: their offsets in one lookup each, taken out
    # of the map (an id's offset never changes, so nothing is lost if this
    # XACK fails below: those ids are then found by the search).
    offsets = list(map(x.by_id.pop, args, repeat(None, len(args))))
    if None in offsets:  # (else no id repeats: the map holds one spelling of each)
        offsets = _ack_offsets(stream, group, args, offsets)
    acked = group.ack(offsets)
    if acked:
        writes = server.writes
        writes.xgroup_changed(argv[1], stream, [[ACK, argv[1], argv[2], *offsets]] if writes.sinks else [])
    return acked


def _ack_offsets(stream, group, args: list, found: list) -> list[int]:
    """XACK's offsets when some of its ids were not in the group's map: every id
    parsed (Redis's error for a bad one, before any change), then looked up by
    its id (another spelling: ``1-01``, ``1``), or searched (an entry a TREAD
    group read handed out); those not pending are left out.  O(log N) per id
    searched."""
    wanted = [parse_id(arg, 0) for arg in args]
    offsets = []
    for xid, offset in zip(wanted, found):
        if offset is None:
            offset = xgroups.pending_offset(group, xid)
        if offset is None:  # not handed out by X* (a TREAD group's entry): by its id
            offsets_found = _offsets_of(stream, [xid])
            offset = offsets_found[0] if offsets_found and group.pending_get(offsets_found[0]) is not None else None
        if offset is not None and offset not in offsets:
            offsets.append(offset)
    return offsets


def _parse_xpending(argv: list):
    """XPENDING's extended form: (min idle, start, end, count, consumer), or None
    for the summary form; Redis's errors in Redis's order."""
    if len(argv) != 3 and not 6 <= len(argv) <= 9:
        raise SyntaxErr()
    if len(argv) == 3:
        return None
    at, min_idle = 3, 0
    if argv[3].lower() == b"idle":
        min_idle = to_int(argv[4])
        if len(argv) < 8:
            raise SyntaxErr()
        at = 5
    count = max(to_int(argv[at + 2]), 0)
    start, end = parse_range_start(argv[at]), parse_range_end(argv[at + 1])
    if at + 4 < len(argv):
        raise SyntaxErr()
    return min_idle, start, end, count, argv[at + 3] if at + 3 < len(argv) else None


def xpending(client, argv):
    """XPENDING key group [[IDLE min-idle-time] start end count [consumer]]

    The group's pending entries: a summary, or each with its consumer, idle
    time and delivery count. O(P)."""
    extended = _parse_xpending(argv)
    stream, group = _group_or_error(client.server, argv[1], argv[2])
    x = xgroups.state(stream, group)
    mine = xgroups.owned(group)
    if extended is None:
        if not mine:
            return [0, None, None, NULL_ARRAY]
        per: dict[bytes, int] = {}
        for p in mine:
            per[p.owner] = per.get(p.owner, 0) + 1
        return [len(mine), _id_of_pending(stream, mine[0]), _id_of_pending(stream, mine[-1]),
                [[name, b"%d" % per[name]] for name in sorted(per)]]
    min_idle, start, end, count, consumer = extended
    if consumer is not None and consumer not in x.consumers:
        return []
    now = _now_ms()
    out: list = []
    for p in mine:
        if len(out) == count:
            break
        xid = xgroups.pending_id(stream, p)
        if xid > end:
            break
        idle = max(now - p.delivered_ms, 0)
        if xid < start or (consumer is not None and p.owner != consumer) or (min_idle and idle < min_idle):
            continue
        out.append([format_id(xid), p.owner, idle, as_int64(p.deliveries)])
    return out


def _id_of_pending(stream, pending) -> bytes:
    return format_id(xgroups.pending_id(stream, pending))


# --- XCLAIM, XAUTOCLAIM ------------------------------------------------------------------------------

def _claim_options(argv: list, j: int, now: int):
    """XCLAIM's options from ``argv[j]`` on: (delivery time, retry count, force, justid, last id)."""
    delivery, retrycount, force, justid, last_id = -1, -1, False, False, (0, 0)
    while j < len(argv):
        word = argv[j].lower()
        more = len(argv) - 1 - j
        if word == b"force":
            force = True
        elif word == b"justid":
            justid = True
        elif word == b"idle" and more:
            j += 1
            delivery = now - _int_or(argv[j], "Invalid IDLE option argument for XCLAIM")
        elif word == b"time" and more:
            j += 1
            delivery = _int_or(argv[j], "Invalid TIME option argument for XCLAIM")
        elif word == b"retrycount" and more:
            j += 1
            retrycount = _int_or(argv[j], "Invalid RETRYCOUNT option argument for XCLAIM")
        elif word == b"lastid" and more:
            j += 1
            last_id = parse_id(argv[j], 0)
        else:
            raise CommandError(f"ERR Unrecognized XCLAIM option '{argv[j].decode(errors='replace')}'")
        j += 1
    if delivery == -1 or delivery < 0 or delivery > now:
        delivery = now
    return delivery, retrycount, force, justid, last_id


def _int_or(arg: bytes, message: str) -> int:
    try:
        return to_int(arg)
    except CommandError:
        raise CommandError(f"ERR {message}") from None


class _Claimant:
    """The consumer XCLAIM/XAUTOCLAIM claim for, created (and logged) only when
    something is claimed, as Redis 7.0 does."""

    __slots__ = ("key", "group", "name", "now", "records", "found")

    def __init__(self, key: bytes, group, name: bytes, now: int, records: list) -> None:
        self.key, self.group, self.name, self.now, self.records = key, group, name, now, records
        self.found = None

    def get(self):
        if self.found is None:
            self.found = xgroups.consumer(self.group, self.name, self.now)
            self.found.seen_ms = self.now
            self.records.append([XCONSUMER, self.key, self.group.name, self.name, self.now])
        return self.found


def _parse_claim_ids(argv: list) -> tuple[list, int]:
    """XCLAIM's ids from argv[5] on, up to the first word that is not one (its options)."""
    ids = []
    j = 5
    while j < len(argv):
        try:
            ids.append(parse_id(argv[j], 0))
        except CommandError:
            break
        j += 1
    return ids, j


def xclaim(client, argv):
    """XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-time-milliseconds] [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID lastid]

    Takes pending entries idle for at least min-idle-time for the consumer;
    replies them (JUSTID: their ids). O(log N) per id."""
    server = client.server
    stream, group = _group_or_error(server, argv[1], argv[2])
    min_idle = max(_int_or(argv[4], "Invalid min-idle-time argument for XCLAIM"), 0)
    ids, j = _parse_claim_ids(argv)
    now = _now_ms()
    delivery, retrycount, force, justid, last_id = _claim_options(argv, j, now)
    x = xgroups.state(stream, group)
    records: list = []
    claimant = _Claimant(argv[1], group, argv[3], now, records)
    claimed, gone, out = [], [], []
    for xid in ids:
        offset = xgroups.pending_offset(group, xid)
        if offset is None:
            offsets = _offsets_of(stream, [xid])
            offset = offsets[0] if offsets else None
        pending = group.pending_get(offset) if offset is not None else None
        if offset is None or not stream.is_held(offset):
            if pending is not None:
                gone.append(offset)
            continue
        deliveries = _claimable(pending, force, min_idle, now)
        if deliveries is None:
            continue
        if retrycount >= 0:
            deliveries = retrycount
        elif not justid:
            deliveries += 1
        claimed.append(xgroups.take_pending(stream, group, offset, claimant.get(), delivery, deliveries))
        out.append(format_id(xid) if justid else _entry_reply(stream, offset))
    _log_claims(argv[1], group, claimant, gone, claimed, records)
    if last_id > x.last_id:
        x.last_id = last_id
        group.next = max(group.next, xgroups.offset_after(stream, last_id))
        records.append(_group_record(argv[1], group))
    if records:
        server.writes.xgroup_changed(argv[1], stream, records)
    return out


def _claimable(pending, force: bool, min_idle: int, now: int) -> int | None:
    """The delivery count an entry to claim starts from, or None when it is
    not claimed (not pending without FORCE, or not idle long enough)."""
    if pending is None or pending.retry_at != xgroups.NEVER:
        return 1 if force else None
    if min_idle and now - pending.delivered_ms < min_idle:
        return None
    return pending.deliveries


def _entry_reply(stream, offset: int) -> list:
    entry = stream.get(offset)
    return entry_replies(stream, [[offset, entry.tag, entry.data]])[0]


def _log_claims(key: bytes, group, claimant, gone: list, claimed: list, records: list) -> None:
    """Entries found deleted leave the pending list; claimed ones have a new owner."""
    if gone:
        group.ack(gone)
        records.append([ACK, key, group.name, *gone])
    if claimed:
        records.append(_owned_record(key, group, claimant.name, claimed))


def xautoclaim(client, argv):
    """XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]

    XCLAIM of the pending entries from start on (idle enough), at most count;
    replies [next start, entries, ids deleted meanwhile]. O(count x 10) at most."""
    min_idle = max(_int_or(argv[4], "Invalid min-idle-time argument for XAUTOCLAIM"), 0)
    start = parse_range_start(argv[5])
    count, justid = 100, False
    j = 6
    while j < len(argv):
        word = argv[j].lower()
        if word == b"count" and j + 1 < len(argv):
            count = _int_or(argv[j + 1], "COUNT must be > 0")
            if not 1 <= count <= (1 << 63) // 16:
                raise CommandError("ERR COUNT must be > 0")
            j += 2
        elif word == b"justid":
            justid = True
            j += 1
        else:
            raise SyntaxErr()
    server = client.server
    stream, group = _group_or_error(server, argv[1], argv[2])
    xgroups.state(stream, group)
    now = _now_ms()
    records: list = []
    claimant = _Claimant(argv[1], group, argv[3], now, records)
    attempts = count * 10
    claimed, gone, out, gone_ids = [], [], [], []
    pendings = [p for p in xgroups.owned(group) if xgroups.pending_id(stream, p) >= start]
    i = 0
    while attempts and count and i < len(pendings):
        attempts -= 1
        p = pendings[i]
        i += 1
        if not stream.is_held(p.offset):
            gone.append(p.offset)
            gone_ids.append(format_id(xgroups.pending_id(stream, p)))
            count -= 1
            continue
        if min_idle and now - p.delivered_ms < min_idle:
            continue
        claimed.append(xgroups.take_pending(stream, group, p.offset, claimant.get(), now,
                                            p.deliveries if justid else p.deliveries + 1))
        out.append(format_id(xgroups.pending_id(stream, p)) if justid else _entry_reply(stream, p.offset))
        count -= 1
    cursor = format_id(xgroups.pending_id(stream, pendings[i])) if i < len(pendings) else b"0-0"
    _log_claims(argv[1], group, claimant, gone, claimed, records)
    if records:
        server.writes.xgroup_changed(argv[1], stream, records)
    return [cursor, out, gone_ids]


__all__ = ["xgroup_create", "xgroup_setid", "xgroup_destroy", "xgroup_createconsumer", "xgroup_delconsumer",
           "xreadgroup", "xack", "xpending", "xclaim", "xautoclaim", "_U64"]
