"""Handlers of the RCP 11 stream commands: TWRITE, TREAD, TEVICT, TINFO, TCONFIG.

Every handler parses and validates all of its arguments before it touches the
keyspace, so a bad request changes nothing (no half-created key).  A handler
that changes something describes it to ``server.writes`` (commands/writes.py),
which logs the effects, counts the changes and wakes blocked readers once the
handler returns.
"""

from __future__ import annotations

import os
import re
from time import time_ns

from tstream.engine.groups import Group
from tstream.engine.ingest import Ingest
from tstream.engine.stream import run_columns  # None without engine/_columns.c
from tstream.persistence.effects import packed_ids
from tstream.resp import (
    NO_REPLY,
    NULL_ARRAY,
    OK,
    Entries,
    encode,
    encode_entries,
    encode_error,
    encode_integer,
    encode_integer_run,
    encode_integers,
    encode_single_reads,
)

from .args import to_bool, to_int, to_nonnegative, to_positive_list
from .errors import CommandError, SyntaxErr, out_of_memory

# A MSGID run's columns with its one key and MSGID words checked in C (engine/_columns.c),
# wherever run_columns is (the extension built and on); else the zip and checks in Python.
msgid_columns = None
if run_columns is not None:
    try:
        from tstream.engine._columns import msgid_columns
    except ImportError:  # (an older build of the extension)
        pass

NO_SUCH_KEY = "ERR no such key"
DEFAULT_WINDOW_MS = 120000  # duplicate_window_ms of a stream that does not exist yet


def _spellings(word: str) -> set[bytes]:
    """Every upper/lower-case spelling of ``word``."""
    found = {b""}
    for char in word:
        found = {prefix + c.encode() for prefix in found for c in (char.lower(), char.upper())}
    return found


# ``TWRITE key ENTRIES x`` / ``TWRITE key BACKLOG 5``: a keyword where the tag goes
# means the keyword form, so a malformed call is refused rather than stored as an
# entry tagged "ENTRIES" (such a tag is written with the ENTRIES form).  A set of
# every spelling keeps the simple form's check to one hash lookup.
KEYWORD_TAGS = frozenset(_spellings("entries") | _spellings("backlog"))


def twrite(client, argv):
    """TWRITE key tag entry [MSGID id] | TWRITE key [BACKLOG count] [MSGIDS id ...] ENTRIES tag entry [...]

    Appends the entries atomically and replies the offset of the first one.
    O(1) per entry (plus sealing a full macro node, O(node size), once per node).
    """
    server = client.server
    if len(argv) == 4 and argv[2] not in KEYWORD_TAGS:  # the simple form, kept short: the hottest path
        try:
            stream = server.streams[argv[1]]
        except KeyError:
            stream = server.create_stream(argv[1])
        first = stream.first
        offset = stream.append(argv[2], argv[3], time_ns())
        writes = server.writes
        if writes.sinks or writes.watched or writes.pending or stream._subjects is not None:
            writes.appended(argv[1], stream, first, offset, argv, 2)
        else:
            # Writes.appended's own short cut, without the call: nothing to log, no
            # WATCH to break, no per-subject limit, nothing else described, so counting
            # the change and waking the key's blocked readers (what Writes.commit would
            # do) is all there is to commit.
            server.dirty += 1
            if writes.waiting and argv[1] in writes.waiting:
                server.blocking.key_ready(argv[1])
        return offset
    if len(argv) == 6 and argv[4].lower() == b"msgid" and argv[2] not in KEYWORD_TAGS:
        return msgid_write(server, argv[1], [argv[2]], [argv[3]], [argv[5]], -1)
    backlog, msgids, i = _twrite_keywords(argv)
    if msgids is not None:
        if len(msgids) != (len(argv) - i) // 2:
            raise CommandError("ERR MSGIDS needs one id per entry")
        return msgid_write(server, argv[1], argv[i::2], argv[i + 1::2], msgids, backlog)
    stream = server.stream_for_write(argv[1])
    first = stream.first
    start = stream.next_offset
    try:
        offset = stream.append_many(argv, time_ns(), i)
    except MemoryError:  # the entries stored before it (in sealed nodes) are logged
        server.writes.appended_partly(argv[1], stream, first, start, argv, i)
        raise out_of_memory(stream.next_offset - start, (len(argv) - i) // 2, start) from None
    if backlog >= 0:
        stream.evict_keep(backlog)
    server.writes.appended(argv[1], stream, first, offset, argv, i)
    return offset


def _twrite_keywords(argv) -> tuple[int, list | None, int]:
    """TWRITE's [BACKLOG count] [MSGIDS id ...] ENTRIES: (backlog or -1, the ids or
    None, the index of the first tag)."""
    backlog = -1
    msgids = None
    i = 2
    while True:
        word = argv[i].lower() if i < len(argv) else b""
        if word == b"backlog" and i + 1 < len(argv):
            backlog = to_nonnegative(argv[i + 1], "BACKLOG count")
            i += 2
        elif word == b"msgids" and msgids is None:
            j = i + 1
            while j < len(argv) and argv[j].lower() != b"entries":
                j += 1
            msgids = argv[i + 1:j]
            i = j
        elif word == b"entries":
            i += 1
            break
        else:
            raise SyntaxErr()
    if i >= len(argv) or (len(argv) - i) % 2:
        raise CommandError("ERR ENTRIES needs one or more tag entry pairs")
    return backlog, msgids, i


def msgid_write(server, key: bytes, tags: list, datas: list, msgids: list, backlog: int) -> int:
    """TWRITE with message ids: the entries whose id was stored within the
    stream's ``duplicate_window_ms`` (or earlier in this command) are not stored
    again; the others are appended at once, logged with their ids (one INGEST
    record).  Replies the offset of the first entry: where it was stored, now or
    the first time.  O(entries), plus the ids that aged out."""
    stream = server.streams.get(key)
    window = stream.settings.duplicate_window_ms if stream is not None else DEFAULT_WINDOW_MS
    now = time_ns()
    ingest = stream._ingest if stream is not None else None
    originals: list = [None] * len(msgids)
    if window and ingest is not None:
        seen = ingest.seen
        horizon = window * 1_000_000
        originals = [seen(mid, now, horizon) for mid in msgids]
    keep = []
    taken: dict = {}
    for i, mid in enumerate(msgids):
        if originals[i] is None and mid not in taken:
            taken[mid] = len(keep)
            keep.append(i)
    if not keep:
        return originals[0] if originals[0] is not None else 0
    if stream is None:
        stream = server.create_stream(key)
    if stream._ingest is None:
        stream._ingest = Ingest()
    first = stream.first
    start = stream.next_offset
    kept_tags = [tags[i] for i in keep]
    kept_datas = [datas[i] for i in keep]
    ids = [msgids[i] for i in keep] if window else []
    try:
        offset = stream.append_columns(kept_tags, kept_datas, now)
    except MemoryError:
        raise out_of_memory(stream.next_offset - start, len(keep), start) from None
    if backlog >= 0:
        stream.evict_keep(backlog)
    if ids:
        stream._ingest.add_ids(ids, offset, stream.last_time)
    server.writes.ingested(key, stream, first, offset, kept_tags, kept_datas, None, 0, False, ids)
    return originals[0] if originals[0] is not None else offset


def twrite_run(client, argvs: list) -> bytes:
    """A pipelined run of ``TWRITE key tag entry``, on one key or several (see
    commands.dispatch).

    The commands of each stretch on one key are appended with one
    Stream.append_columns (one record, limits enforced once), a lone command
    with Stream.append; every entry of the run has the same time.  Replies each
    command's offset, in order.  O(entries).
    """
    server = client.server
    if len(argvs[0]) == 6:  # TWRITE key tag entry MSGID id
        return _msgid_run(client, argvs)
    if run_columns is not None:  # the columns, as tuples (engine/_columns.c)
        keys, tags, datas = run_columns(argvs, 1)
    else:
        _, keys, tags, datas = zip(*argvs)
    count = len(argvs)
    tag = tags[0]
    if tags.count(tag) == count:  # one tag (redis-benchmark): one keyword check (the C parser
        if tag in KEYWORD_TAGS:   # gives a repeated word as one object: the engine's own
            return b"".join(_twrite_each(client, argvs))  # one-tag test compares by identity)
    elif not KEYWORD_TAGS.isdisjoint(tags):  # a keyword where the tag goes: each command on its own
        return b"".join(_twrite_each(client, argvs))
    now = time_ns()
    key = keys[0]
    if keys.count(key) == count:  # one key (redis-benchmark -P 16): _append_stretch, inlined
        stream = server.streams.get(key)
        if stream is None:
            stream = server.create_stream(key)
        first = stream.first
        start = stream.next_offset
        try:
            stream.append_columns(tags, datas, now)
        except MemoryError:
            return _stretch_out_of_memory(server, key, stream, first, start, tags, datas)
        server.writes.appended_columns(key, stream, first, start, tags, datas)
        return encode_integer_run(start, count)
    if len(set(keys)) == count:  # every command on its own key: one append each
        return _append_each(server, argvs, now)
    return _twrite_stretches(server, argvs, keys, tags, datas, now)


def _twrite_stretches(server, argvs: list, keys: tuple, tags: tuple, datas: tuple, now: int) -> bytes:
    """:func:`twrite_run` on several keys, some repeated: each stretch of
    commands on one key appended at once, a lone command on its own."""
    count = len(argvs)
    replies = []
    i = 0
    while i < count:
        key = keys[i]
        j = i + 1
        while j < count and keys[j] == key:
            j += 1
        if j > i + 1:
            reply, stored = _append_stretch(server, key, tags[i:j], datas[i:j], now)
        else:
            reply = _append_each(server, argvs[i:j], now)
            stored = reply[:1] != b"-"
        replies.append(reply)
        if not stored:  # out of memory: the commands after it are refused too, as in a one-key run
            replies.append(encode_error(out_of_memory(0, 1, 0).message) * (count - j))
            break
        i = j
    return b"".join(replies)



def _msgid_run(client, argvs: list) -> bytes:
    """A run of ``TWRITE key tag entry MSGID id``: on one key with new ids (none
    stored within the window, none repeated), one append and one record; else
    command by command.  The ids are checked and entered, and the run's record
    kept, in one call of the stream's window (``Window.claim`` of engine/_window.c,
    or its fallback ``PyWindow.claim``: ``Ingest.claim_run`` without its frame).
    The INGEST record carries the ids packed as one item when there is a sink
    (persistence/effects.py ``packed_ids``)."""
    server = client.server
    count = len(argvs)
    key = argvs[0][1]
    if msgid_columns is not None:  # (engine/_columns.c: the one key and the MSGID words checked in C)
        columns = msgid_columns(argvs)
        if columns is None:  # another key, or not MSGID
            return b"".join(_twrite_each(client, argvs))
        tags, datas, ids = columns
    else:
        _, keys, tags, datas, words, ids = zip(*argvs)
        word = words[0]
        if (keys.count(key) != count or words.count(word) != count
                or (word != b"MSGID" and word.lower() != b"msgid")):
            return b"".join(_twrite_each(client, argvs))
    stream = server.streams.get(key)
    ingest = stream._ingest if stream is not None else None
    if ingest is None:
        return b"".join(_twrite_each(client, argvs))
    window_ms = stream.settings.duplicate_window_ms
    if not window_ms:
        return b"".join(_twrite_each(client, argvs))
    tag = tags[0]
    if tags.count(tag) == count:  # one tag: one keyword check, and the engine compares by identity
        if tag in KEYWORD_TAGS:
            return b"".join(_twrite_each(client, argvs))
        tags = (tag,) * count
    elif not KEYWORD_TAGS.isdisjoint(tags):
        return b"".join(_twrite_each(client, argvs))
    now = time_ns()
    start = stream.next_offset
    last_time = stream.last_time  # the append gives the entries max(now, last_time): their expiry
    window = ingest.window
    if not window.claim(ids, start, now - window_ms * 1_000_000, now if now > last_time else last_time):
        return b"".join(_twrite_each(client, argvs))  # an id stored within the window, or repeated
    first = stream.first
    try:
        offset = stream.append_columns(tags, datas, now)
    except MemoryError:
        stored = stream.next_offset - start
        window.truncate(stored)
        if stored:
            ids = ids[:stored]
            server.writes.ingested(key, stream, first, start, tags[:stored], datas[:stored], None, 0, False,
                                   packed_ids(ids) if server.writes.sinks else ids)
        error = encode_error(out_of_memory(0, 1, 0).message)
        return encode_integer_run(start, stored) + error * (count - stored)
    writes = server.writes
    # The ids as one item of the INGEST record (packed only when a sink will pack the record)
    writes.ingested(key, stream, first, offset, tags, datas, None, 0, False, packed_ids(ids) if writes.sinks else ids)
    return encode_integer_run(offset, count)


def _append_each(server, argvs: list, now: int) -> bytes:
    """Append the entry of each ``TWRITE key tag entry`` in ``argvs`` (keys all
    different); the replies.  Out of memory (an append stores all or nothing),
    that command and the ones after it are refused."""
    streams = server.streams
    appended = server.writes.appended
    offsets = []
    for argv in argvs:
        key = argv[1]
        stream = streams.get(key)
        if stream is None:
            stream = server.create_stream(key)
        first = stream.first
        try:
            offset = stream.append(argv[2], argv[3], now)
        except MemoryError:
            error = encode_error(out_of_memory(0, 1, 0).message)
            return encode_integers(offsets) + error * (len(argvs) - len(offsets))
        appended(key, stream, first, offset, argv, 2)
        offsets.append(offset)
    return encode_integers(offsets)


def _append_stretch(server, key: bytes, tags: list, datas: list, now: int) -> tuple[bytes, bool]:
    """Append ``tags``/``datas`` to the stream at ``key`` at once: the replies, and
    False if memory ran out (the entries stored before that are acknowledged and
    logged, the others answered with the error)."""
    stream = server.streams.get(key)
    if stream is None:
        stream = server.create_stream(key)
    count = len(tags)
    first = stream.first
    start = stream.next_offset
    try:
        offset = stream.append_columns(tags, datas, now)
    except MemoryError:
        return _stretch_out_of_memory(server, key, stream, first, start, tags, datas), False
    server.writes.appended_columns(key, stream, first, offset, tags, datas)
    return encode_integer_run(offset, count), True


def _stretch_out_of_memory(server, key: bytes, stream, first: int, start: int, tags: tuple,
                           datas: tuple) -> bytes:
    """The replies of a stretch whose append ran out of memory: the entries
    stored before it (in sealed nodes) are logged and acknowledged, the
    others answered with the error."""
    stored = stream.next_offset - start
    if stored:
        server.writes.appended_columns(key, stream, first, start, tags[:stored], datas[:stored])
    error = encode_error(out_of_memory(0, 1, 0).message)
    return encode_integer_run(start, stored) + error * (len(tags) - stored)


def _twrite_each(client, argvs: list):
    for argv in argvs:
        try:
            yield encode_integer(twrite(client, argv))
        except CommandError as exc:
            yield encode_error(exc.message)


def parse_offset(arg: bytes) -> int | bytes:
    """An offset argument: an integer >= 1, or b"-" (first held) or b"$" (next)."""
    if arg == b"-" or arg == b"$":
        return arg
    value = to_int(arg)
    if value < 0:
        raise CommandError("ERR offset must be -, $, 0 or a positive integer")
    return value or b"-"


def resolve_offset(stream, offset: int | bytes) -> int:
    """Turn b"-"/b"$" into a number against the stream as it is now (None: a new key)."""
    if offset == b"-":
        return stream.first if stream is not None else 1
    if offset == b"$":
        return stream.next_offset if stream is not None else 1
    return offset


class ReadRequest:
    """A parsed TREAD; kept by a blocked client until it can be served.

    A group read's request is never changed once parsed (only a plain read's
    offset is resolved in place, see ``perform_read``): the same request serves
    every repeat of its words (``TreadParses``), shared by the clients that sent
    them."""

    __slots__ = ("key", "offset", "count", "block_ms", "group", "retry", "withinfo")

    def __init__(self, key: bytes, offset, count: int, block_ms: int | None = None,
                 group: bytes | None = None, retry: tuple[int, int] | None = None,
                 withinfo: bool = False) -> None:
        self.key = key
        self.offset = offset  # int, or b"-"/b"$" until resolved
        self.count = count
        self.block_ms = block_ms
        self.group = group
        self.retry = retry
        self.withinfo = withinfo

    def fields(self) -> tuple:
        return (self.key, self.offset, self.count, self.block_ms, self.group, self.retry, self.withinfo)


class TreadParses:
    """TREAD's parser, with the parses of group reads kept.

    A group's consumers send the very same TREAD over and over: its parse is
    kept, by its words, so a repeat costs one join and one dict lookup (at most
    MAX of them, forgotten all at once when full; plain reads are not kept, their
    offsets change from one read to the next).  One per server
    (``server.tread_parses``).

    The key is the words joined by NUL bytes (one hash of one string, not of
    eleven new words): kept only when no word holds a NUL, with the number of
    words, which a hit must match -- then the words are the same ones (a NUL in
    a word of the repeat would make one word fewer).  What is kept is the
    ReadRequest itself: a group read's request is never changed (ReadRequest).
    Only the words are parsed: nothing read from the server's state (a config,
    the replication role, ACL, MULTI) is kept, those are checked at every read.
    """

    MAX = 1024

    def __init__(self) -> None:
        self.kept: dict[bytes, tuple] = {}  # the words of a group read, joined -> (their number, ReadRequest)

    def parse(self, argv) -> ReadRequest:
        words = b"\0".join(argv)
        kept = self.kept.get(words)
        if kept is not None and kept[0] == len(argv):
            return kept[1]
        return self.parse_new(argv, words)

    def parse_new(self, argv, words: bytes) -> ReadRequest:
        """``argv`` parsed (raises CommandError); kept if a group read (``words``: its key)."""
        request = parse_tread(argv)
        if request.group is not None and words.count(b"\0") == len(argv) - 1:
            if len(self.kept) >= self.MAX:
                self.kept.clear()
            self.kept[words] = (len(argv), request)
        return request


def parse_tread(argv) -> ReadRequest:
    """A TREAD's words as a ReadRequest; raises CommandError."""
    request = ReadRequest(argv[1], parse_offset(argv[2]), to_nonnegative(argv[3], "count"))
    i = 4
    n = len(argv)
    while i < n:
        word = argv[i].lower()
        if word == b"withinfo":
            request.withinfo = True
            i += 1
        elif word == b"block" and i + 1 < n:
            request.block_ms = to_int(argv[i + 1])
            if request.block_ms < 0:
                raise CommandError("ERR timeout is negative")
            i += 2
        elif word == b"group" and i + 1 < n:
            request.group = argv[i + 1]
            i += 2
        elif word == b"retry" and i + 2 < n:
            request.retry = (to_nonnegative(argv[i + 1], "retry-ms"), to_nonnegative(argv[i + 2], "expire-ms"))
            i += 3
        else:
            raise SyntaxErr()
    if request.retry is not None and request.group is None:
        raise SyntaxErr()  # RETRY only makes sense for a group
    return request


def perform_read(server, request: ReadRequest, blocking: bool):
    """The reply to ``request``, or None when it must block (only if ``blocking``).

    A plain read blocks while no entry (nor missing entry) exists at or after its
    offset; a group read blocks while its group has nothing to hand out.
    """
    if request.group is None:
        stream = server.streams.get(request.key)
        start = resolve_offset(stream, request.offset)
        if blocking and request.count and (stream is None or start >= stream.next_offset):
            request.offset = start  # "$" means the next offset as of now, not of the wake-up
            return None
        reply = stream.read(start, request.count) if stream is not None and request.count else []
    else:
        if server.capture is not None:  # a group read changes the key: a snapshot takes it first
            server.capture.before_change(request.key)
        stream = server.stream_for_write(request.key)
        group = stream.groups.get(request.group)
        if group is None:
            group = Group(request.group, resolve_offset(stream, request.offset))
            stream.add_group(request.group, group)
            server.writes.group_moved(request.key, group)
        reply = []
        if request.count:
            reply = group.read(stream, request.count, time_ns() // 1_000_000, request.retry,
                               server.config.values["group-max-pending"])
            if reply:
                server.writes.group_moved(request.key, group, reply)
        if not reply and blocking and request.count:
            return None
    if request.withinfo:
        reply.insert(0, [stream.first, stream.last] if stream is not None else [1, 0])
        return reply
    return Entries(reply)


def _plain_numbers(offset: bytes, count: bytes) -> bool:
    """Whether both are plain numbers >= 1 (as to_int takes them, without its
    checks): TREAD's hot form, read without the general parser."""
    return (offset.isdigit() and count.isdigit() and offset[0] != 48 and count[0] != 48
            and len(offset) < 19 and len(count) < 19)


_NOT_DIGITS = bytes(range(48)) + bytes(range(58, 256))  # deleted by translate(): every byte but 0-9


def _plain_offsets(texts: tuple) -> list | None:
    """The offsets of ``texts`` as ints when every one is a plain number >= 1
    (what _plain_numbers passes), checked in C passes over them all; else None."""
    n = len(texts)
    if not all(texts) or max(map(len, texts)) >= 19:
        return None  # an empty word, or one too long
    joined = b" ".join(texts)
    if (joined.count(b" ") != n - 1 or len(joined.translate(None, _NOT_DIGITS)) != len(joined) - n + 1
            or joined[0] == 48 or b" 0" in joined):
        return None  # a byte other than a digit, or a leading zero (or a zero)
    return list(map(int, texts))


def tread(client, argv):
    """TREAD key offset count [BLOCK ms] [GROUP name] [RETRY retry-ms expire-ms] [WITHINFO]

    Replies up to `count` elements from `offset` on: [offset, tag, entry] for an
    entry held, null for a missing one; with GROUP, the group's next entries
    (never nulls). BLOCK waits up to ms (0: forever) for something to read.
    A group read runs at the end of the loop turn it arrives in (server.turns),
    behind the group's blocked readers; the client's next commands wait for it.
    O(1) seek + O(count); group reads O(count log pending) for the due retries, amortised O(1) per new entry.
    """
    if len(argv) == 4:  # TREAD key offset count, both plain numbers >= 1: the hot form, parsed here
        offset, count = argv[2], argv[3]
        if _plain_numbers(offset, count):
            stream = client.server.streams.get(argv[1])
            return Entries(stream.read(int(offset), int(count)) if stream is not None else ())
    server = client.server
    words = b"\0".join(argv)  # (TreadParses.parse, inlined: a group's consumers send this read over and over)
    kept = server.tread_parses.kept.get(words)
    request = kept[1] if kept is not None and kept[0] == len(argv) else server.tread_parses.parse_new(argv, words)
    if request.group is not None and server.replication.denied_writes is not None:
        raise CommandError(server.replication.denied_writes)  # a group read writes (READONLY replica)
    if client.in_exec:  # in a transaction: served now, and a BLOCK that would wait times out at once
        reply = perform_read(server, request, blocking=False)
        return NULL_ARRAY if not reply and request.block_ms is not None and request.count else reply
    if request.group is not None:
        blocking = server.blocking
        # A BLOCK read of a group that has nothing to hand out (a consumer back for
        # more after its TACK: the loop's usual read) waits at once, at the back of
        # its group's queue, where the end of the turn would have put it: no turn end
        # to schedule, no read to run there for nothing (see BlockingRegistry.wait_now).
        if request.block_ms is None or not request.count or not blocking.wait_now(client, request):
            blocking.defer(client, request)
        return NO_REPLY
    reply = perform_read(server, request, blocking=request.block_ms is not None)
    if reply is None:
        server.blocking.block(client, request)
        return NO_REPLY
    return reply


def tread_run(client, argvs: list) -> bytes:
    """A pipelined run of ``TREAD key offset count`` (see commands.dispatch): the
    replies of every read, in order, each exactly what ``tread`` answers, without
    a trip through the dispatcher per read (a client paging through a log, or
    fetching many single entries, sends these back to back).  A read in another
    spelling (``-``, ``$``, a bad number) is answered on its own, its error in its
    place, counted as failed in INFO commandstats.  O(total count).
    """
    server = client.server
    streams = server.streams
    resp3 = client.protocol == 3
    n = len(argvs)
    _, keys, texts, counts = zip(*argvs)  # the words, checked in C passes over the run
    key = keys[0]
    if counts.count(b"1") == n and keys.count(key) == n:  # one-entry reads of one key (by the thousand)
        offsets = _plain_offsets(texts)
        if offsets is not None:
            stream = streams.get(key)
            if stream is None:
                return encode_entries((), resp3) * n
            tags, datas = stream.read_each(offsets)
            return encode_single_reads(texts, tags, datas, stream.next_offset, resp3)
    replies = []
    append = replies.append
    for argv in argvs:
        _, key, offset, count = argv
        if _plain_numbers(offset, count):  # tread's hot form
            stream = streams.get(key)
            append(encode_entries(stream.read(int(offset), int(count)) if stream is not None else (), resp3))
            continue
        try:
            append(encode(tread(client, argv), client.protocol))
        except CommandError as exc:
            append(encode_error(exc.message))
            server.command_stats[b"tread"].failed += 1  # (as the dispatcher counts a read that fails alone)
            server.stats.errors += 1
    return b"".join(replies)


def tack(client, argv):
    """TACK key group offset [offset ...] | TACK key group start-end

    Acknowledges pending entries of the group; replies how many were pending.
    Amortised O(k).
    """
    offsets = plain_positive_ints(argv, 3)  # plain offsets >= 1, the usual (to_positive_list's answer)
    if offsets is not None:
        pass
    elif len(argv) == 4 and b"-" in argv[3]:
        match = _RANGE.match(argv[3])
        if match is None:
            raise CommandError("ERR invalid range, use start-end with positive integers")
        start, end = int(match.group(1)), int(match.group(2))
    else:
        offsets = to_positive_list(argv[3:], "offset")  # (its errors)
    server = client.server
    stream = server.streams.get(argv[1])
    group = stream.groups.get(argv[2]) if stream is not None else None
    if group is None:
        return 0
    if offsets is None:
        offsets = group.pending_offsets(start, end)
    acked = group.ack(offsets)
    if acked:
        # room in a full pending list (as it was before these acks): capped readers may go on
        was_full = group.pending_count + acked >= server.config.values["group-max-pending"]
        writes = server.writes
        if was_full or writes.sinks or writes.watched or writes.pending:
            writes.acked(argv[1], argv[2], offsets, wake=was_full)
        else:  # Writes.acked's own short cut, without the call: counting the change is all
            server.dirty += 1
    return acked


_RANGE = re.compile(rb"([1-9][0-9]{0,18})-([1-9][0-9]{0,18})\Z")


def plain_positive_ints_python(words: list, start: int) -> list | None:
    """The ints of ``words[start:]`` when each is a plain decimal number >= 1 of at
    most 18 digits (no sign, no leading zero: what to_positive_list takes without
    its checks), else None; [] when there are none.  resp/_speedups.c's
    ``plain_positive_ints`` (TACK's offsets in one C call) is this, in C."""
    args = words[start:]
    if not args:
        return []
    if b"".join(args).isdigit() and min(args)[:1] not in (b"0", b"") and max(map(len, args)) < 19:
        return list(map(int, args))
    return None


try:
    if os.environ.get("TSTREAM_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("TSTREAM_PURE_PYTHON is set")
    from tstream.resp._speedups import plain_positive_ints
except ImportError:
    plain_positive_ints = plain_positive_ints_python


def tpending(client, argv):
    """TPENDING key group

    The group's pending entries as [offset, deliveries, ms-until-retry], by offset. O(pending).
    """
    stream = client.server.streams.get(argv[1])
    group = stream.groups.get(argv[2]) if stream is not None else None
    if group is None:
        return []
    now_ms = time_ns() // 1_000_000
    group.purge(stream, now_ms)
    return group.pending_list(now_ms)


def tevict(client, argv):
    """TEVICT key offset

    Positive offset: evict every entry <= offset. Negative -n: keep the newest n.
    Replies the number of entries evicted. O(entries evicted / node size).
    """
    offset = to_int(argv[2])
    stream = client.server.keyspace.get(argv[1])
    if stream is None:
        return 0
    first = stream.first
    evicted = stream.evict_keep(-offset) if offset < 0 else stream.evict_through(offset)
    if evicted:
        client.server.writes.wrote(argv[1], stream, first, evicted, wake=False)
    return evicted


# Stream configuration: name -> (parser of the value, how to show it).
def _count(name):
    return lambda arg: to_nonnegative(arg, name)


def _flag(name):
    return lambda arg: to_bool(arg, name)


STREAM_CONFIG = {
    "max_len": _count("max_len"),
    "max_age_ms": _count("max_age_ms"),
    "max_msgs_per_subject": _count("max_msgs_per_subject"),
    "allow_direct": _flag("allow_direct"),
    "allow_atomic": _flag("allow_atomic"),
    "allow_batched": _flag("allow_batched"),
    "duplicate_window_ms": _count("duplicate_window_ms"),
}


def stream_config_map(stream) -> dict:
    config = stream.settings  # read only: no config object for a key that has none
    shown = {}
    for name in STREAM_CONFIG:
        value = getattr(config, name)
        shown[name] = ("yes" if value else "no") if isinstance(value, bool) else value
    return shown


def tinfo(client, argv):
    """TINFO key [GROUPS]

    A map of length, first, last, nodes, bytes, groups and the stream's config;
    with GROUPS, an array of maps (name, next, pending), one per group. O(1) / O(groups).
    """
    if len(argv) > 3 or (len(argv) == 3 and argv[2].lower() != b"groups"):
        raise SyntaxErr()
    stream = client.server.keyspace.get(argv[1])
    if stream is None:
        raise CommandError(NO_SUCH_KEY)
    groups = stream.groups
    if len(argv) == 3:
        now_ms = time_ns() // 1_000_000
        for group in groups.values():
            group.purge(stream, now_ms)
        return [group.info() for group in groups.values()]
    info = {
        "length": stream.length,
        "first": stream.first,
        "last": stream.last,
        "nodes": stream.nodes,
        "bytes": stream.memory_bytes(),
        "groups": len(groups),
    }
    info.update(stream_config_map(stream))
    return info


def tconfig(client, argv):
    """TCONFIG key GET | TCONFIG key SET name value [name value ...]

    GET replies the stream's config as a map; SET validates every pair, then
    applies them all (creating the stream if needed) and evicts what the new
    limits exclude. O(pairs) + eviction.
    """
    action = argv[2].lower()
    if action == b"get":
        if len(argv) != 3:
            raise SyntaxErr()
        stream = client.server.keyspace.get(argv[1])
        if stream is None:
            raise CommandError(NO_SUCH_KEY)
        return stream_config_map(stream)
    if action != b"set":
        raise CommandError("ERR unknown TCONFIG subcommand, use GET or SET")
    pairs = argv[3:]
    if not pairs or len(pairs) % 2:
        raise CommandError("ERR wrong number of arguments for 'tconfig|set' command")
    changes = {}
    for name_arg, value_arg in zip(pairs[::2], pairs[1::2]):
        name = name_arg.decode("utf-8", "replace").lower()
        parse = STREAM_CONFIG.get(name)
        if parse is None:
            raise CommandError(f"ERR unknown stream config '{name}'")
        changes[name] = parse(value_arg)
    server = client.server
    stream = server.stream_for_write(argv[1])
    config = stream.config
    for name, value in changes.items():
        setattr(config, name, value)
    if config.max_msgs_per_subject > 0:
        config.allow_direct = True  # ADR-31: per-subject limits (KV) force direct get on
    first = stream.first
    evicted = stream.enforce_limits(time_ns())
    server.keyspace.limits_changed(argv[1])  # max_age_ms: when the oldest entry ages out
    server.writes.configured(argv[1], stream, first, list(changes), 1 + evicted)
    return OK
