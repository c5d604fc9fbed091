"""Handlers of the Redis Streams data commands: XADD, XLEN, XRANGE, XREVRANGE,
XDEL, XTRIM, XSETID, XREAD, XINFO STREAM (consumer groups: commands/xgroups.py).

They run on the same streams as TWRITE/TREAD: an entry has its offset and its
Redis id (engine/xids.py draws how the ids are kept).  Replies and error texts
are Redis 7.0's.  An XADD of one field-value pair is a TWRITE of ``field
value``; more pairs are packed into one entry (engine/xids.py); a TWRITE entry
reads through X* as the pair ``tag -> entry``.

As everywhere in commands/, a handler parses and checks every argument before
it changes anything, and describes its changes to ``server.writes``.
"""

from __future__ import annotations

import re
from time import time_ns

from tstream.engine import xids
from tstream.resp import (
    NO_REPLY,
    NULL_ARRAY,
    OK,
    KeyedReplies,
    Raw,
    StreamEntries,
    encode,
    encode_error,
)
from tstream.resp.xentries import encode_packed_fields, encode_stream_id_run_u64

from .args import to_int
from .errors import CommandError, SyntaxErr, WrongArity

INVALID_ID = "ERR Invalid stream ID specified as stream command argument"
_ID = re.compile(rb"([0-9]+)(?:-([0-9]+|\*))?\Z")
_U64 = (1 << 64) - 1
APPROX_LIMIT = 100 * 100  # Redis's LIMIT for "~" trims: 100 x stream-node-max-entries (100)


# --- ids -------------------------------------------------------------------------------

def parse_id(arg: bytes, missing_seq: int = 0, star: bool = False):
    """A strict id ``ms-seq`` or ``ms`` (seq ``missing_seq``); with ``star``,
    ``ms-*`` gives ``(ms, None)``.  Raises Redis's invalid-id error."""
    ms_text, dash, seq_text = arg.partition(b"-")
    if len(arg) < 42 and ms_text.isdigit() and (seq_text.isdigit() or not dash):  # "ms-seq" (isdigit: ASCII)
        ms = int(ms_text)
        seq = int(seq_text) if dash else missing_seq
        if ms > _U64 or seq > _U64:
            raise CommandError(INVALID_ID)
        return ms, seq
    match = _ID.match(arg)
    if match is None:
        raise CommandError(INVALID_ID)
    ms_text, seq_text = match.group(1), match.group(2)
    if len(ms_text.lstrip(b"0")) > 20 or (seq_text is not None and len(seq_text.lstrip(b"0")) > 20):
        raise CommandError(INVALID_ID)  # over 64 bits (and no int() of thousands of digits)
    ms = int(ms_text)
    if seq_text == b"*":
        if not star:
            raise CommandError(INVALID_ID)
        seq = None
    else:
        seq = missing_seq if seq_text is None else int(seq_text)
    if ms > _U64 or (seq is not None and seq > _U64):
        raise CommandError(INVALID_ID)
    return ms, seq


def parse_range_start(arg: bytes) -> tuple[int, int]:
    """XRANGE's start (``-``, ``(id`` exclusive, ``ms`` = ``ms-0``)."""
    if arg == b"-":
        return 0, 0
    if arg == b"+":
        return xids.MAX_ID
    if arg[:1] == b"(":
        xid = parse_id(arg[1:], 0)
        if xid == xids.MAX_ID:
            raise CommandError("ERR invalid start ID for the interval")
        return (xid[0], xid[1] + 1) if xid[1] < _U64 else (xid[0] + 1, 0)
    return parse_id(arg, 0)


def parse_range_end(arg: bytes) -> tuple[int, int]:
    """XRANGE's end (``+``, ``(id`` exclusive, ``ms`` = ``ms-<max>``)."""
    if arg == b"+":
        return xids.MAX_ID
    if arg == b"-":
        return 0, 0
    if arg[:1] == b"(":
        xid = parse_id(arg[1:], _U64)
        if xid == (0, 0):
            raise CommandError("ERR invalid end ID for the interval")
        return (xid[0], xid[1] - 1) if xid[1] else (xid[0] - 1, _U64)
    return parse_id(arg, _U64)


def format_id(xid: tuple[int, int]) -> bytes:
    return b"%d-%d" % xid


# --- reading entries ---------------------------------------------------------------------

def held_rows(stream, start: int, end: int, count: int) -> list:
    """Up to ``count`` held entries ``[offset, tag, data]`` of offsets ``[start,
    end)``, oldest first. O(count + missing offsets skipped)."""
    out: list = []
    start = max(start, stream.first)
    end = min(end, stream.next_offset)
    while start < end and len(out) < count:
        rows = stream.read(start, min(end - start, count - len(out) + 16))
        start += len(rows)
        out += [row for row in rows if row is not None]
    del out[count:]
    return out


def held_rows_reversed(stream, start: int, end: int, count: int) -> list:
    """As :func:`held_rows`, newest first."""
    out: list = []
    start = max(start, stream.first)
    end = min(end, stream.next_offset)
    while start < end and len(out) < count:
        low = max(start, end - (count - len(out) + 16))
        rows = stream.read(low, end - low)
        out += [row for row in reversed(rows) if row is not None]
        end = low
    del out[count:]
    return out


def entry_replies(stream, rows: list, row_ids: list | None = None, texts: list | None = None) -> list:
    """``[id, [field, value, ...]]`` of each row (any order); ``row_ids``: their
    ids when the caller has them, ``texts``: the same spelt ``b"ms-seq"``.
    O(span of the rows)."""
    if not rows:
        return StreamEntries()
    low = min(rows[0][0], rows[-1][0])
    high = max(rows[0][0], rows[-1][0]) + 1
    x = stream._x
    packed = xids.packed_flags(stream, low, high) if x is not None and x.runs else None
    if texts is None:
        if row_ids is None:
            ids = xids.ids_between(stream, low, high)
            row_ids = [ids[row[0] - low] for row in rows]
        texts = [b"%d-%d" % xid for xid in row_ids]
    if packed is None:  # one field-value pair each (the usual case)
        return StreamEntries([[text, [tag, bytes(data)]] for (_, tag, data), text in zip(rows, texts)])
    if len(packed) != len(rows) or rows[0][0] != low:  # offsets of the span skipped (deleted), or newest first
        packed = [packed[row[0] - low] for row in rows]
    return StreamEntries([[text, _packed_fields(tag, data) if flag else [tag, bytes(data)]]
                          for (_, tag, data), text, flag in zip(rows, texts, packed)])


def _packed_fields(tag: bytes, data) -> list | Raw:
    """The field array of a packed entry: encoded as stored (Raw), or unpacked
    (a msgpack payload: engine/xids.py)."""
    fields = encode_packed_fields(tag, data)
    return xids.unpack_pairs(tag, data) if fields is None else fields


def range_offsets(stream, start_id, end_id) -> tuple[int, int]:
    """Offsets ``[a, b)`` of the ids in ``[start_id, end_id]``. O(log N)."""
    if start_id > end_id:
        return 0, 0
    a = xids.offset_at_or_after(stream, start_id)
    b = xids.offset_at_or_after(stream, (end_id[0], end_id[1] + 1) if end_id[1] < _U64 else (end_id[0] + 1, 0)) \
        if end_id != xids.MAX_ID else stream.next_offset
    return a, b


def _count_option(argv: list, at: int) -> int:
    """``[COUNT n]`` at ``argv[at:]`` of XRANGE/XREVRANGE: a negative count reads nothing."""
    if len(argv) == at:
        return -1
    if len(argv) == at + 2 and argv[at].lower() == b"count":
        return max(to_int(argv[at + 1]), 0)
    raise SyntaxErr()


def xrange_(client, argv):
    """XRANGE key start end [COUNT count]

    The entries with ids in [start, end] ("(" excludes, "-"/"+" the ends),
    oldest first. O(log N + entries returned)."""
    return _range(client, argv, parse_range_start(argv[2]), parse_range_end(argv[3]), held_rows)


def xrevrange(client, argv):
    """XREVRANGE key end start [COUNT count]

    XRANGE newest first. O(log N + entries returned)."""
    return _range(client, argv, parse_range_start(argv[3]), parse_range_end(argv[2]), held_rows_reversed)


def _range(client, argv, start_id, end_id, rows_of):
    """XRANGE/XREVRANGE once their bounds are parsed: ``rows_of`` reads the
    offsets oldest or newest first."""
    count = _count_option(argv, 4)
    stream = client.server.streams.get(argv[1])
    if stream is None:
        return []
    if count == 0:
        return NULL_ARRAY  # (Redis's reply to a COUNT of zero or less)
    a, b = range_offsets(stream, start_id, end_id)
    return entry_replies(stream, rows_of(stream, a, b, count if count > 0 else b - a))


def xlen(client, argv):
    """XLEN key

    Entries held. O(1)."""
    stream = client.server.streams.get(argv[1])
    return stream.length if stream is not None else 0


# --- trimming ----------------------------------------------------------------------------

class Trim:
    """A parsed ``MAXLEN|MINID [=|~] threshold [LIMIT count]``."""

    __slots__ = ("maxlen", "minid", "approx", "limit")

    def __init__(self) -> None:
        self.maxlen: int | None = None
        self.minid: tuple[int, int] | None = None
        self.approx = False
        self.limit: int | None = None


def parse_trim_option(argv: list, i: int, trim: Trim) -> int:
    """Parse one trimming word at ``argv[i]`` (MAXLEN, MINID, LIMIT) into
    ``trim``; the index after it, or -1 when ``argv[i]`` is none of them."""
    word = argv[i].lower()
    more = i + 1 < len(argv)
    if word in (b"maxlen", b"minid") and more:
        i += 1
        if argv[i] in (b"~", b"=") and i + 1 < len(argv):
            trim.approx = argv[i] == b"~"
            i += 1
        if word == b"maxlen":
            if trim.minid is not None:
                raise CommandError("ERR syntax error, MAXLEN and MINID options at the same time are not compatible")
            trim.maxlen = to_int(argv[i])
            if trim.maxlen < 0:
                raise CommandError("ERR The MAXLEN argument must be >= 0.")
        else:
            if trim.maxlen is not None:
                raise CommandError("ERR syntax error, MAXLEN and MINID options at the same time are not compatible")
            trim.minid = parse_id(argv[i], 0)
        return i + 1
    if word == b"limit" and more:
        trim.limit = to_int(argv[i + 1])
        if trim.limit < 0:
            raise CommandError("ERR The LIMIT argument must be >= 0.")
        return i + 2
    return -1


def check_trim(trim: Trim) -> bool:
    """Whether a trim was asked; Redis's errors for LIMIT without one or without ``~``."""
    if trim.limit is not None:
        if trim.maxlen is None and trim.minid is None:
            raise CommandError("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy")
        if not trim.approx:
            raise CommandError("ERR syntax error, LIMIT cannot be used without the special ~ option")
    return trim.maxlen is not None or trim.minid is not None


def _first_keeping(stream, n: int) -> int:
    """The offset from which ``n`` held entries are left. O(log N x nodes) with
    deletions, O(1) without."""
    end = stream.next_offset
    if not stream._deleted_held:
        return end - n
    lo, hi = stream.first, end
    while lo < hi:  # the greatest offset o with held(o..end) >= n
        mid = (lo + hi + 1) // 2
        held = end - mid - stream._deleted_between(mid, end)
        if held >= n:
            lo = mid
        else:
            hi = mid - 1
    return lo


def apply_trim(stream, trim: Trim) -> int:
    """Trim ``stream`` as asked; the entries removed. Exact, or with ``~`` whole
    macro nodes only, at most LIMIT entries (Redis's default 10,000; 0: no limit).
    O(log N + nodes released)."""
    if trim.maxlen is not None:
        if stream.length <= trim.maxlen:
            return 0
        target = _first_keeping(stream, trim.maxlen)
    else:
        target = xids.offset_at_or_after(stream, trim.minid)
    if trim.approx:
        target = _node_boundary(stream, target, APPROX_LIMIT if trim.limit is None else trim.limit)
    if target <= stream.first:
        return 0
    return stream.evict_through(target - 1)


def _node_boundary(stream, target: int, limit: int) -> int:
    """The greatest start of a macro node at or below ``target``, no more than
    ``limit`` entries (0: any) past ``first``."""
    best = stream.first
    for node in stream.node_list():
        end = min(node.cap_end, stream.next_offset)
        if end > target or (limit and end - stream.first > limit):
            break
        best = end  # every entry of this node goes
    return best


# --- writes ------------------------------------------------------------------------------

def xadd_run(client, argvs: list) -> bytes:
    """A pipelined run of ``XADD key * field value`` (commands.dispatch): on one
    key, appended at once (one record, ids consecutive in one millisecond);
    any other shape runs command by command.  O(entries)."""
    _, keys, stars, fields, values = zip(*argvs)
    count = len(argvs)
    server = client.server
    key = keys[0]
    stream = server.streams.get(key)
    x = stream._x if stream is not None else None
    if (stars.count(b"*") != count or keys.count(key) != count
            or (x is not None and x.top[1] > _U64 - count)):  # (no room for the run's ids in one ms)
        return b"".join(_xadd_each(client, argvs))
    if stream is None:
        stream = server.create_stream(key)
    if x is None:
        x = xids.state_of(stream)
    first = stream.first
    offset = stream.append_columns(fields, values, time_ns())  # auto ids (engine/xids.note_append)
    server.writes.appended_columns(key, stream, first, offset, fields, values)
    ms, last_seq = x.last
    return encode_stream_id_run_u64(ms, last_seq - count + 1, count)  # (in C: ms and seqs are 64-bit)


def _xadd_each(client, argvs: list):
    for argv in argvs:
        try:
            yield encode(xadd(client, argv), client.protocol)
        except CommandError as exc:
            yield encode_error(exc.message)


def parse_xadd(argv: list):
    """XADD's words: ``(trim, nomkstream, xid, ms, pairs)``, with Redis's
    errors in Redis's order (options, id, arity, 0-0)."""
    trim = Trim()
    nomkstream = False
    i = 2
    while i < len(argv):
        if argv[i].lower() == b"nomkstream":
            nomkstream = True
            i += 1
            continue
        after = parse_trim_option(argv, i, trim)
        if after < 0:
            break
        i = after
    check_trim(trim)
    if i >= len(argv):
        raise WrongArity("xadd")
    xid, ms = None, None
    if argv[i] != b"*":
        ms, seq = parse_id(argv[i], 0, star=True)
        if seq is not None:
            xid, ms = (ms, seq), None
    pairs = argv[i + 1:]
    if not pairs or len(pairs) % 2:
        raise WrongArity("xadd")
    if xid == (0, 0):
        raise CommandError("ERR The ID specified in XADD must be greater than 0-0")
    return trim, nomkstream, xid, ms, pairs


def xadd(client, argv):
    """XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value [field value ...]

    Appends an entry; replies its id. O(1) amortised (plus trimming)."""
    if len(argv) == 5 and argv[2] == b"*":  # XADD key * field value: the common form, kept short
        server = client.server
        try:
            stream = server.streams[argv[1]]
        except KeyError:
            stream = server.create_stream(argv[1])
        x = stream._x
        first = stream.first
        if x is None or x.top[0] == _U64:  # no ids kept yet, or the last millisecond taken (XSETID)
            try:
                offset, own = xids.add_auto(stream, argv[3], argv[4], time_ns())
            except xids.IdError as exc:
                raise CommandError(str(exc)) from None
            server.writes.appended(argv[1], stream, first, offset, argv, 3)  # (as below)
            return b"%d-%d" % own
        offset = stream.append(argv[3], argv[4], time_ns())  # Stream.append gives it the auto id
        # Logged as a TWRITE's append: replayed, it takes the same auto id.
        writes = server.writes
        if writes.sinks or writes.waiting or writes.watched or writes.pending or stream._subjects is not None:
            writes.appended(argv[1], stream, first, offset, argv, 3)
        else:
            server.dirty += 1  # Writes.appended's own short cut, without the call (as TWRITE's)
        ms, seq = x.last
        if ms == _ID_HEAD[0] and seq < _SEQ_TEXT_COUNT:  # the "ms-" of this millisecond, made once
            return _ID_HEAD[1] + _SEQ_TEXTS[seq]
        return _id_text(ms, seq)
    trim, nomkstream, xid, ms, pairs = parse_xadd(argv)
    server = client.server
    key = argv[1]
    stream = server.streams.get(key)
    if stream is None:
        if nomkstream:
            return None
        stream = server.create_stream(key)
    first = stream.first
    try:
        offset, own = xids.add(stream, pairs, time_ns(), xid, ms)
    except xids.IdError as exc:
        raise CommandError(str(exc)) from None
    entry = stream.get(offset)
    server.writes.xadded(key, stream, first, offset, own, entry.tag, entry.data, len(pairs) > 2)
    if trim.maxlen is not None or trim.minid is not None:
        apply_trim(stream, trim)
    return format_id(own)


# XADD's reply is its id, ``ms-seq``: the ids of one millisecond share their
# ``ms-``, made once (``_ID_HEAD``: the millisecond and its text), and the
# sequence's digits come from a table, so that an id is one concatenation and
# not a format of two integers.  (Keyed by the millisecond itself: right for any
# stream, and for several servers in one process.)
_SEQ_TEXT_COUNT = 1024
_SEQ_TEXTS = [b"%d" % n for n in range(_SEQ_TEXT_COUNT)]
_ID_HEAD: list = [-1, b""]


def _id_text(ms: int, seq: int) -> bytes:
    """``b"%d-%d" % (ms, seq)``, the millisecond's text kept for the next ids."""
    head = b"%d-" % ms
    _ID_HEAD[0], _ID_HEAD[1] = ms, head
    return head + _SEQ_TEXTS[seq] if seq < _SEQ_TEXT_COUNT else b"%s%d" % (head, seq)


def xtrim(client, argv):
    """XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]

    Removes the oldest entries; replies how many. O(log N + nodes released)."""
    trim = Trim()
    i = 2
    while i < len(argv):
        after = parse_trim_option(argv, i, trim)
        if after < 0:
            raise SyntaxErr()
        i = after
    if not check_trim(trim):
        raise SyntaxErr()
    server = client.server
    stream = server.streams.get(argv[1])
    if stream is None:
        return 0
    first = stream.first
    removed = apply_trim(stream, trim)
    if removed:
        server.writes.wrote(argv[1], stream, first, removed, wake=False)
    return removed


def xdel(client, argv):
    """XDEL key id [id ...]

    Deletes entries by id; replies how many existed. O(log N) per id."""
    server = client.server
    stream = server.streams.get(argv[1])
    if stream is None:
        return 0  # (Redis looks the key up before it parses the ids)
    wanted = [parse_id(arg, 0) for arg in argv[2:]]
    first = stream.first
    deleted = []
    for xid in wanted:
        offset = xids.offset_at_or_after(stream, xid)
        if offset < stream.next_offset and stream.is_held(offset) and xids.id_of(stream, offset) == xid:
            stream.delete(offset)
            xids.note_deleted(stream, xid)
            deleted.append(offset)
    if deleted:
        server.writes.xdeleted(argv[1], stream, first, deleted)
    return len(deleted)


def xsetid(client, argv):
    """XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]

    Sets the stream's last id (and counters) as Redis 7.0. O(log N)."""
    top = parse_id(argv[2], 0)
    added = max_deleted = None
    i = 3
    while i < len(argv):
        word = argv[i].lower()
        if word == b"entriesadded" and i + 1 < len(argv):
            added = to_int(argv[i + 1])
            if added < 0:
                raise CommandError("ERR entries_added must be positive")
            i += 2
        elif word == b"maxdeletedid" and i + 1 < len(argv):
            max_deleted = parse_id(argv[i + 1], 0)
            if top < max_deleted:
                raise CommandError("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
            i += 2
        else:
            raise SyntaxErr()
    server = client.server
    stream = server.streams.get(argv[1])
    if stream is None:
        raise CommandError("ERR no such key")
    # (Redis's order: the top item first, then the length.)
    if stream.length and top < xids.id_of(stream, stream.next_offset - 1 if stream.is_held(stream.next_offset - 1)
                                          else _last_held(stream)):
        raise CommandError("ERR The ID specified in XSETID is smaller than the target stream top item")
    if added is not None and stream.length > added:
        raise CommandError("ERR The entries_added specified in XSETID is smaller than the target stream length")
    first = stream.first
    xids.set_last_id(stream, top, added, max_deleted)
    x = stream._x
    server.writes.xsetid(argv[1], stream, first, top, xids.entries_added(stream), x.max_deleted)
    return OK


def _last_held(stream) -> int:
    rows = held_rows_reversed(stream, stream.first, stream.next_offset, 1)
    return rows[0][0]


# --- XREAD ---------------------------------------------------------------------------------

class XReadRequest:
    """A parsed XREAD, kept by a blocked client until it can be served
    (server/blocking.py parks it on every key)."""

    __slots__ = ("key", "keys", "after", "count", "block_ms", "group", "offset")

    def __init__(self, keys: list, after: list, count: int, block_ms: int | None) -> None:
        self.keys = keys
        self.key = keys[0]
        self.after = after  # per key: the id to read after (``$`` resolved on arrival)
        self.count = count
        self.block_ms = block_ms
        self.group = None
        self.offset = 0  # (server.blocking serves a plain waiter whose offset is below next_offset)

    def perform(self, server, blocking: bool):
        """The reply, or None while nothing is new (only if ``blocking``)."""
        found = KeyedReplies()
        for key, after in zip(self.keys, self.after):
            stream = server.streams.get(key)
            if stream is None:
                continue
            start = xids.offset_at_or_after(stream, (after[0], after[1] + 1) if after[1] < _U64
                                            else (after[0] + 1, 0))
            count = self.count or stream.next_offset - start
            rows = held_rows(stream, start, stream.next_offset, count)
            if rows:
                found[key] = entry_replies(stream, rows)
        if found:
            return found
        return None if blocking else NULL_ARRAY


def parse_xread(argv: list) -> XReadRequest:
    count, block_ms = 0, None
    i = 1
    while i < len(argv):
        word = argv[i].lower()
        if word == b"count" and i + 1 < len(argv):
            count = max(to_int(argv[i + 1]), 0)
            i += 2
        elif word == b"block" and i + 1 < len(argv):
            block_ms = to_int(argv[i + 1])
            if block_ms < 0:
                raise CommandError("ERR timeout is negative")
            i += 2
        elif word == b"streams":
            i += 1
            break
        else:
            raise SyntaxErr()
    else:
        raise SyntaxErr()
    rest = argv[i:]
    if not rest or len(rest) % 2:
        raise CommandError("ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be "
                           "specified.")
    half = len(rest) // 2
    keys, ids = rest[:half], rest[half:]
    after = []
    for arg in ids:
        if arg == b"$":
            after.append(None)
        elif arg == b">":
            raise CommandError("ERR The > ID can be specified only when calling XREADGROUP using the GROUP "
                               "<group> <consumer> option.")
        else:
            after.append(parse_id(arg, 0))
    return XReadRequest(list(keys), after, count, block_ms)


def xread(client, argv):
    """XREAD [COUNT count] [BLOCK milliseconds] STREAMS key [key ...] id [id ...]

    The entries after each id ("$": the stream's last id now); BLOCK waits for
    one. O(log N + entries returned) per key."""
    request = parse_xread(argv)
    server = client.server
    for i, after in enumerate(request.after):
        if after is None:
            stream = server.streams.get(request.keys[i])
            request.after[i] = xids.top_id(stream) if stream is not None else (0, 0)
    blocking = request.block_ms is not None and not client.in_exec
    reply = request.perform(server, blocking)
    if reply is None:
        server.blocking.block(client, request)
        return NO_REPLY
    return reply
