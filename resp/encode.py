"""Reply encoders: Python values in, RESP bytes out. Pure functions.

Handlers return plain Python values and this module is the one place that decides
how each looks on the wire under RESP2 or RESP3:

    ====================  ======================  ==========================
    Python value          RESP2                   RESP3
    ====================  ======================  ==========================
    None                  $-1 (null bulk)         _ (null)
    NULL_ARRAY            *-1 (null array)        _
    bool                  :1 / :0                 #t / #f
    int                   :n                      :n
    float                 $ bulk of repr          ,repr
    bytes / str           $ bulk                  $ bulk
    Status("OK")          +OK                     +OK
    ErrorReply("ERR x")   -ERR x                  -ERR x
    list / tuple          * array                 * array
    dict                  * flat [k, v, k, v]     % map
    Set                   * array                 ~ set
    Verbatim              $ bulk                  = verbatim (txt:)
    BigNumber             $ bulk                  ( big number
    Push                  * array                 > push
    KeyedReplies          * array of [key, value] % map
    Entries               * array of entries      * array of entries
    StreamEntries         * array of [id, fields] * array of [id, fields]
    Raw                   the bytes as they are   the bytes as they are
    ====================  ======================  ==========================

The replies the server sends most have fast encoders here too, each giving
exactly the bytes ``encode`` would (tests/test_resp_encoders.py checks it):
``encode_integer`` (TWRITE, TACK), ``encode_integer_run`` and ``encode_integers`` (pipelined runs of
TWRITE), ``encode_entries`` (TREAD), ``encode_message`` and
``encode_batched_message`` (the JetStream message maps of DGET and MLAST),
``encode_message_page`` and ``encode_table_page`` (whole DGET pages; the latter
in C, resp/_speedups.c, from the log's decoded tables), ``encode_eob``.
Commands never build RESP bytes themselves.
"""

from __future__ import annotations

import os
import time as _time
from itertools import chain
from typing import Callable, Sequence


class Status(str):
    """A simple string reply (``+OK``)."""

    __slots__ = ()


class ErrorReply(str):
    """An error reply; the text starts with the error code (``ERR ...``)."""

    __slots__ = ()


class Verbatim(str):
    """Text meant for humans (INFO, CLIENT LIST): RESP3 verbatim string of format txt."""

    __slots__ = ()


class BigNumber(int):
    __slots__ = ()


class Set(list):
    __slots__ = ()


class Push(list):
    __slots__ = ()


class Entries(list):
    """A list of stream entries, each ``[offset, tag, data]`` (int, bytes,
    bytes-like) or None for a missing one: encoded like the plain list, by a
    loop that skips the per-item type dispatch (it is the TREAD reply)."""

    __slots__ = ()


class KeyedReplies(dict):
    """Replies by key (XREAD's): RESP2 an array of ``[key, reply]`` pairs, RESP3
    a map, as Redis 7 sends them."""

    __slots__ = ()


class StreamEntries(list):
    """Redis stream entries, each ``[id, [field, value, ...]]`` (bytes), or
    ``[id, NULL_ARRAY]`` for one deleted since: encoded like the plain list, by
    a loop without the per-item type dispatch (XRANGE's and XREADGROUP's reply)."""

    __slots__ = ()


class Raw(bytes):
    """Bytes already encoded as RESP, valid under both protocols."""

    __slots__ = ()


class _NullArray:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL_ARRAY"


NULL_ARRAY = _NullArray()


class _NoReply:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_REPLY"


# A handler's reply when the client gets no reply now: it blocked (the reply comes
# when it is served), or the connection closes without one (SHUTDOWN).
NO_REPLY = _NoReply()

OK = Raw(b"+OK\r\n")
QUEUED = Raw(b"+QUEUED\r\n")  # a command kept for EXEC (MULTI)


# encode(n, protocol) of an int n, the same in both protocols: TWRITE's and TACK's reply.
encode_integer = b":%d\r\n".__mod__

def encode_bulk(value: bytes) -> bytes:
    """``encode(value, protocol)`` of bytes: a bulk string, the same in both protocols.
    A short one (XADD's id) is its looked-up head, the value and CRLF joined (a
    ``%d`` format costs more than the join); a long one one format (one copy)."""
    size = len(value)
    if size < _SHORT_BULK:
        return b"".join((_SHORT_BULK_HEADS[size], value, b"\r\n"))
    return b"$%d\r\n%s\r\n" % (size, value)


# The heads (``$<length>\r\n``) of the bulk strings encode_bulk joins, made once.
_SHORT_BULK = 256
_SHORT_BULK_HEADS = tuple(b"$%d\r\n" % n for n in range(_SHORT_BULK))


# Format strings of runs of up to 64 integers, made once.
_INTEGER_RUNS = [b":%d\r\n" * n for n in range(65)]


# "00".."99": the last two digits of the integers of a run.
_TWO_DIGITS = [b"%02d" % n for n in range(100)]


def encode_integer_run_python(first: int, count: int) -> bytes:
    """The integers ``first``, ``first + 1``, ... (``count`` of them), one reply
    each, concatenated: the replies of a pipelined run of TWRITE.  In C
    (resp/_speedups.c ``encode_integer_run``, below) unless the extension was
    not built or is turned off (TSTREAM_PURE_PYTHON=1)."""
    low = first % 100
    if first >= 100 and low + count <= 100:
        # Within one hundred: the replies differ in their last two digits only,
        # so they are those digits joined by the common part (twice as fast as
        # formatting each integer).
        head = b":%d" % (first // 100)
        return head + (b"\r\n" + head).join(_TWO_DIGITS[low:low + count]) + b"\r\n" if count else b""
    fmt = _INTEGER_RUNS[count] if count < len(_INTEGER_RUNS) else b":%d\r\n" * count
    return fmt % tuple(range(first, first + count))


encode_integer_run: Callable[[int, int], bytes] = encode_integer_run_python
try:
    if os.environ.get("TSTREAM_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("TSTREAM_PURE_PYTHON is set")
    from ._speedups import encode_integer_run as _c_encode_integer_run
except ImportError:
    pass
else:
    encode_integer_run = _c_encode_integer_run


def encode_stream_ids(ms: int, first_seq: int, count: int) -> bytes:
    """The stream ids ``ms-first_seq``, ``ms-(first_seq + 1)``, ... (``count`` of
    them) as bulk strings, concatenated: the replies of a pipelined run of
    ``XADD key * field value``."""
    head = b"%d-" % ms
    width = len(b"%d" % first_seq)
    if count and len(b"%d" % (first_seq + count - 1)) == width:  # one width: one format for them all
        one = b"$%d\r\n%s%%d\r\n" % (len(head) + width, head)
        return (one * count) % tuple(range(first_seq, first_seq + count))
    return b"".join([b"$%d\r\n%s%d\r\n" % (len(head) + len(b"%d" % seq), head, seq)
                     for seq in range(first_seq, first_seq + count)])


def encode_integers(values: list) -> bytes:
    """The integers ``values``, one reply each, concatenated (a pipelined run of
    TWRITE on several keys): one format for them all."""
    count = len(values)
    fmt = _INTEGER_RUNS[count] if count < len(_INTEGER_RUNS) else b":%d\r\n" * count
    return fmt % tuple(values)


# JetStream message maps (ADR-31): a map under RESP3, a flat array under RESP2.
_MESSAGE = (b"$6\r\nstream\r\n$%d\r\n%s\r\n$7\r\nsubject\r\n$%d\r\n%s\r\n$3\r\nseq\r\n:%d\r\n"
            b"$4\r\ntime\r\n$%d\r\n%s\r\n$4\r\ndata\r\n$%d\r\n%s\r\n")
_BATCHED_TAIL = b"$11\r\nnum_pending\r\n:%d\r\n$8\r\nlast_seq\r\n:%d\r\n"
_MESSAGE_HEAD = {2: b"*10\r\n", 3: b"%5\r\n"}
_BATCHED_HEAD = {2: b"*14\r\n", 3: b"%7\r\n"}


def encode_message(protocol: int, stream: bytes, subject: bytes, seq: int, time: bytes, data: bytes) -> Raw:
    """``encode({"stream": stream, "subject": subject, "seq": seq, "time": time,
    "data": data}, protocol)``, as Raw: one JetStream message."""
    return Raw(_MESSAGE_HEAD[protocol] + _MESSAGE % (len(stream), stream, len(subject), subject, seq,
                                                     len(time), time, len(data), data))


def encode_batched_message(protocol: int, stream: bytes, subject: bytes, seq: int, time: bytes, data: bytes,
                           num_pending: int, last_seq: int) -> Raw:
    """``encode_message`` with ``num_pending`` and ``last_seq`` after ``data``: a
    message of a batched reply."""
    return Raw(_BATCHED_HEAD[protocol] + _MESSAGE % (len(stream), stream, len(subject), subject, seq,
                                                     len(time), time, len(data), data)
               + _BATCHED_TAIL % (num_pending, last_seq))


_FLOW_ACK = {2: b"*6\r\n$4\r\ntype\r\n$3\r\nack\r\n$3\r\nseq\r\n:%d\r\n$8\r\nack_msgs\r\n:%d\r\n",
             3: b"%%3\r\n$4\r\ntype\r\n$3\r\nack\r\n$3\r\nseq\r\n:%d\r\n$8\r\nack_msgs\r\n:%d\r\n"}


def encode_flow_ack(protocol: int, seq: int, ack_msgs: int) -> bytes:
    """``encode({"type": "ack", "seq": seq, "ack_msgs": ack_msgs}, protocol)``: a
    fast-ingest flow ack (the pipelined BATCH ... FAST path)."""
    return _FLOW_ACK[protocol] % (seq, ack_msgs)


_EOB = {protocol: head + b"$6\r\nstatus\r\n:204\r\n$11\r\ndescription\r\n$3\r\nEOB\r\n"
        b"$11\r\nnum_pending\r\n:%d\r\n$8\r\nlast_seq\r\n:%d\r\n" for protocol, head in ((2, b"*8\r\n"), (3, b"%%4\r\n"))}


def encode_eob(protocol: int, num_pending: int, last_seq: int) -> bytes:
    """``encode({"status": 204, "description": "EOB", "num_pending": num_pending,
    "last_seq": last_seq}, protocol)``: the end-of-batch map of a DGET page."""
    return _EOB[protocol] % (num_pending, last_seq)


class SubjectBulks(dict):
    """subject -> its bulk string (``b"$3\r\nt.1\r\n"``), made on first use:
    the pages of DGET/MLAST repeat their subjects from page to page.  The
    caller keeps one (``encode_message_page``'s ``bulks``); at most ``MAX``
    subjects are kept, forgotten all at once when full."""

    __slots__ = ()
    MAX = 4096

    def __missing__(self, subject: bytes) -> bytes:
        if len(self) >= self.MAX:
            self.clear()
        bulk = self[subject] = b"$%d\r\n%s\r\n" % (len(subject), subject)
        return bulk


def encode_message_page(protocol: int, stream: bytes, seqs: list, subjects: list, times: list, datas: list,
                        pending: int, last_seq: int, tail: dict, time_prefix: bytes | list | None = None,
                        bulks: dict | None = None) -> Raw:
    """A whole batched reply: ``encode([m1, m2, ..., tail], protocol)`` where
    message ``k`` is ``encode_batched_message(protocol, stream, subjects[k],
    seqs[k], times[k], datas[k], pending - k - 1, seqs[k - 1])`` (``last_seq``
    for the first).  With ``time_prefix`` (a page within one second), ``times``
    are fractions of that second in ns and message ``k``'s time is
    ``time_prefix + b".%09dZ" % times[k]``; with a list of prefixes (one per
    message, all of one length: a page across seconds) message ``k``'s time is
    ``time_prefix[k] + b".%09dZ" % times[k]``.  ``bulks`` (a :class:`SubjectBulks`
    kept by the caller) gives each subject's bulk string.  The page is one
    format of 7 arguments per message (8 with texts or a list of prefixes), laid out by
    slice assignments: no bytecode per message."""
    head = (_BATCHED_HEAD[protocol] + b"$6\r\nstream\r\n$%d\r\n%s\r\n$7\r\nsubject\r\n"
            % (len(stream), stream)).replace(b"%", b"%%")
    n = len(seqs)
    if bulks is None:
        bulks = SubjectBulks()
    # The time's part of the format, and the columns that fill it.
    time_columns: tuple
    if time_prefix is None:  # the times' texts
        time_fmt, time_columns = b"$%d\r\n%s", (map(len, times), times)
    elif time_prefix.__class__ is list:  # each message's prefix (all of one length), and the fractions
        time_fmt = b"$%d\r\n%%s.%%09dZ" % ((len(time_prefix[0]) if n else 0) + 11)
        time_columns = (time_prefix, times)
    else:  # one second's prefix, and the fractions
        time_fmt = (b"$%d\r\n%s" % (len(time_prefix) + 11, time_prefix)).replace(b"%", b"%%") + b".%09dZ"
        time_columns = (times,)
    fmt = (head + b"%s$3\r\nseq\r\n:%d\r\n$4\r\ntime\r\n" + time_fmt
           + b"\r\n$4\r\ndata\r\n$%d\r\n%s\r\n" + _BATCHED_TAIL)
    step = 6 + len(time_columns)  # arguments per message
    args: list = [0] * (step * n)
    args[0::step] = map(bulks.__getitem__, subjects)
    args[1::step] = seqs
    for at, column in enumerate(time_columns, 2):
        args[at::step] = column
    data_at = 2 + len(time_columns)
    args[data_at::step] = map(len, datas)
    args[data_at + 1::step] = datas
    args[data_at + 2::step] = range(pending - 1, pending - 1 - n, -1)
    last = data_at + 3  # the previous message's seq: last_seq for the first
    args[last + step::step] = seqs[:-1]
    if n:
        args[last] = last_seq
    return Raw(b"*%d\r\n" % (n + 1) + (fmt * n) % tuple(args) + encode(tail, protocol))


# A message's bytes that no request changes (RESP2 and RESP3 alike): from the
# subject's key to num_pending's ":" (encode_message_pieces, encode_piece_page).
_PIECE = (b"$7\r\nsubject\r\n$%d\r\n%s\r\n$3\r\nseq\r\n:%d\r\n$4\r\ntime\r\n$%d\r\n%s\r\n"
          b"$4\r\ndata\r\n$%d\r\n%s\r\n$11\r\nnum_pending\r\n:")


def encode_message_pieces(seqs: Sequence[int], subjects: list, times: list, datas: list) -> list[bytes]:
    """Each message's piece for :func:`encode_piece_page`: its subject, seq,
    time (RFC 3339 text) and data as a batched message holds them, up to
    num_pending's value (the same bytes under RESP2 and RESP3).  A block's
    pieces are made once and kept (engine Stream.read_pieces)."""
    return list(map(_PIECE.__mod__, zip(map(len, subjects), subjects, seqs, map(len, times), times,
                                        map(len, datas), datas)))


def encode_piece_page(protocol: int, stream: bytes, pieces: list, first_seq: int, pending: int,
                      last_seq: int, tail: dict) -> Raw:
    """``encode_message_page`` of the messages of consecutive seqs
    ``first_seq``, ``first_seq + 1``, ... whose :func:`encode_message_pieces`
    are ``pieces``: one format of 3 arguments per message (the piece,
    num_pending, last_seq: the message's seq - 1, ``last_seq`` for the first)."""
    head = (_BATCHED_HEAD[protocol] + b"$6\r\nstream\r\n$%d\r\n%s\r\n" % (len(stream), stream)).replace(b"%", b"%%")
    n = len(pieces)
    args: list = [0] * (3 * n)
    args[0::3] = pieces
    args[1::3] = range(pending - 1, pending - 1 - n, -1)
    args[5::3] = range(first_seq, first_seq + n - 1)
    if n:
        args[2] = last_seq
    return Raw(b"*%d\r\n" % (n + 1) + ((head + b"%s%d\r\n$8\r\nlast_seq\r\n:%d\r\n") * n) % tuple(args)
               + encode(tail, protocol))


_SECOND_TEXTS: dict[int, bytes] = {}  # second -> b"YYYY-MM-DDTHH:MM:SS", for the fallback below


def _time_text(ns: int) -> bytes:
    """``ns`` since the epoch as RFC 3339 in UTC with 9 fraction digits (the
    text of commands/jetstream.py's TimeTexts.format)."""
    sec, frac = divmod(ns, 1_000_000_000)
    prefix = _SECOND_TEXTS.get(sec)
    if prefix is None:
        if len(_SECOND_TEXTS) >= 4096:
            _SECOND_TEXTS.clear()
        prefix = _SECOND_TEXTS[sec] = _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(sec)).encode()
    return b"%s.%09dZ" % (prefix, frac)


def encode_table_page_python(protocol: int, stream: bytes, tables: list, subjects: list, pending: int,
                             last_seq: int, budget: int) -> tuple[bytes, int]:
    """:func:`encode_table_page` in Python: the reference the C one is tested
    against (and what runs where the extension is missing or turned off)."""
    if protocol not in (2, 3):
        raise ValueError("protocol must be 2 or 3")
    out: list[bytes] = []
    used = 0
    seq = last_seq
    for buf, ends, tags, times, i, j, first_seq in tables:
        if not 0 <= i <= j or j >= len(ends) or j > len(tags) or j > len(times):
            raise ValueError("a table's range is outside its arrays")
        for k in range(i, j):
            if used >= budget:
                break
            subject = subjects[tags[k]]
            data = bytes(buf[ends[k]:ends[k + 1]])
            this_seq = first_seq + k - i
            out.append(encode_batched_message(protocol, stream, subject, this_seq, _time_text(times[k]), data,
                                              pending - len(out) - 1, seq))
            seq = this_seq
            used += len(subject) + len(data)
        else:
            continue
        break
    return b"*%d\r\n" % (len(out) + 1) + b"".join(out), len(out)


# encode_table_page(protocol, stream, tables, subjects, pending, last_seq, budget) -> (bytes, n):
# a DGET page's messages written from the log's decoded tables (engine
# Stream.read_tables) in one pass: b"*%d\r\n" % (n + 1), then the first n
# entries of ``tables`` (each (buf, ends, tags, times, i, j, first_seq): entry k
# in i .. j - 1 has the payload buf[ends[k]:ends[k + 1]], the subject
# subjects[tags[k]], the time times[k], the seq first_seq + k - i) as
# encode_batched_message writes them (the time as RFC 3339, num_pending
# pending - k - 1, last_seq the previous message's seq, ``last_seq`` for the
# first): what encode_message_page writes before the end-of-batch map.  n:
# the entries taken while the subjects' and payloads' bytes taken so far are
# under ``budget`` (MAX_BYTES: the entry that reaches it is the last).  In C
# (resp/_speedups.c) unless the extension was not built or is turned off
# (TSTREAM_PURE_PYTHON=1), then encode_table_page_python.
try:
    if os.environ.get("TSTREAM_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("TSTREAM_PURE_PYTHON is set")
    from ._speedups import encode_table_page
    TABLE_PAGES_IN_C = True  # whether encode_table_page is the C one
except ImportError:
    encode_table_page = encode_table_page_python
    TABLE_PAGES_IN_C = False


def encode(value, protocol: int) -> bytes:
    """Encode ``value`` as a RESP2 (``protocol`` 2) or RESP3 (3) reply."""
    if value.__class__ is Entries:  # TREAD's reply, the most frequent after integers
        return encode_entries(value, protocol == 3)
    out: list[bytes] = []
    _write(value, out, protocol == 3)
    return b"".join(out)


def encode_entries_python(entries: list | tuple, resp3: bool) -> bytes:
    """The TREAD reply: ``encode(entries, protocol)``, without the per-item type
    dispatch (this is the reply the server sends most after integers).  In C
    (``encode_entries`` below) unless the extension is off or not built."""
    if len(entries) == 1 and entries[0] is not None:  # TREAD key o 1: one format
        offset, tag, data = entries[0]
        return b"*1\r\n*3\r\n:%d\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (offset, len(tag), tag, len(data), data)
    out = [b"*%d\r\n" % len(entries)]
    append = out.append
    for entry in entries:
        if entry is None:
            append(b"_\r\n" if resp3 else b"$-1\r\n")
        else:
            offset, tag, data = entry
            append(b"*3\r\n:%d\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (offset, len(tag), tag, len(data), data))
    return b"".join(out)


# encode_entries: resp/_speedups.c's (one size pass, one allocation: no format
# per entry; a woken group reader's reply and every TREAD's) unless the extension
# was not built or is turned off (TSTREAM_PURE_PYTHON=1), then encode_entries_python.
try:
    if os.environ.get("TSTREAM_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("TSTREAM_PURE_PYTHON is set")
    from ._speedups import encode_entries
except ImportError:
    encode_entries = encode_entries_python


_ONE_ENTRY = b"*1\r\n*3\r\n:%s\r\n%s$%d\r\n%s\r\n"  # the offset's text, the tag's bulk string, the payload


def encode_single_reads(offset_texts: Sequence[bytes], tags: list, datas: list, end: int, resp3: bool) -> bytes:
    """The replies of a run of one-entry reads (``TREAD key o 1`` each), one after
    the other, each what ``encode_entries`` gives for that read alone: an offset
    held (its canonical decimal text in ``offset_texts``, its tag and payload at
    the same index of ``tags``/``datas``), a missing one (tag None, the offset
    before ``end``: a null element), or one past the log's end (tag None, at or
    after ``end``: an empty array).  A run of held
    entries is one format with its arguments interleaved by C iterators and each
    distinct tag's bulk string made once."""
    n = len(tags)
    bulks = {tag: b"$%d\r\n%s\r\n" % (len(tag), tag) for tag in set(tags) if tag is not None}
    if None not in tags:
        return (_ONE_ENTRY * n) % tuple(chain.from_iterable(zip(offset_texts, map(bulks.__getitem__, tags),
                                                                 map(len, datas), datas)))
    null = b"*1\r\n_\r\n" if resp3 else b"*1\r\n$-1\r\n"
    out: list[bytes] = []
    append = out.append
    for text, tag, data in zip(offset_texts, tags, datas):
        if tag is not None:
            append(_ONE_ENTRY % (text, bulks[tag], len(data), data))
        else:
            append(null if int(text) < end else b"*0\r\n")
    return b"".join(out)


def encode_stream_entries(entries: StreamEntries, resp3: bool) -> bytes:
    """``encode(entries, protocol)`` of Redis stream entries, without the
    per-item type dispatch."""
    out = [b"*%d\r\n" % len(entries)]
    append = out.append
    for xid, fields in entries:
        if fields.__class__ is not list:
            if fields.__class__ is Raw:  # its field array encoded already (packed pairs, resp/xentries.py)
                append(b"*2\r\n$%d\r\n%s\r\n" % (len(xid), xid))
                append(fields)
                continue
            # NULL_ARRAY: an entry deleted since
            append(b"*2\r\n$%d\r\n%s\r\n%s" % (len(xid), xid, b"_\r\n" if resp3 else b"*-1\r\n"))
            continue
        if len(fields) == 2:  # one field-value pair (a TWRITE, an XADD of one pair): one format
            field, value = fields
            append(b"*2\r\n$%d\r\n%s\r\n*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"
                   % (len(xid), xid, len(field), field, len(value), value))
            continue
        append(b"*2\r\n$%d\r\n%s\r\n*%d\r\n" % (len(xid), xid, len(fields)))
        for field in fields:
            append(b"$%d\r\n%s\r\n" % (len(field), field))
    return b"".join(out)


def encode_error(message: str) -> bytes:
    """An error reply; newlines would break the framing, so they become spaces."""
    return b"-" + message.replace("\r", " ").replace("\n", " ").encode("utf-8", "replace") + b"\r\n"


def _float_text(value: float) -> bytes:
    if value != value:
        return b"nan"
    if value in (float("inf"), float("-inf")):
        return b"inf" if value > 0 else b"-inf"
    return repr(value).encode()


def _aggregate(prefix: bytes, items, out: list, resp3: bool) -> None:
    out.append(b"%s%d\r\n" % (prefix, len(items)))
    for item in items:
        _write(item, out, resp3)


def _write(value, out: list, resp3: bool) -> None:  # noqa: C901 (over the limit when it came in)
    cls = value.__class__
    # The common types first, by exact class: they look the same in both protocols.
    if cls is bytes:
        out.append(b"$%d\r\n%s\r\n" % (len(value), value))
    elif cls is int:
        out.append(b":%d\r\n" % value)
    elif cls is list or cls is tuple:
        _aggregate(b"*", value, out, resp3)
    elif cls is Entries:
        out.append(encode_entries(value, resp3))
    elif cls is StreamEntries:
        out.append(encode_stream_entries(value, resp3))
    elif cls is Raw:
        out.append(value)
    elif cls is str:
        _write(value.encode(), out, resp3)
    elif cls is Status:
        out.append(b"+%s\r\n" % value.encode())
    elif cls is ErrorReply:
        out.append(encode_error(value))
    # The types whose look depends on the protocol.
    elif value is None:
        out.append(b"_\r\n" if resp3 else b"$-1\r\n")
    elif value is NULL_ARRAY:
        out.append(b"_\r\n" if resp3 else b"*-1\r\n")
    elif cls is bool:
        out.append((b"#t\r\n" if value else b"#f\r\n") if resp3 else (b":1\r\n" if value else b":0\r\n"))
    elif cls is KeyedReplies and not resp3:
        out.append(b"*%d\r\n" % len(value))
        for key, item in value.items():
            out.append(b"*2\r\n")
            _write(key, out, resp3)
            _write(item, out, resp3)
    elif isinstance(value, dict):
        if resp3:
            out.append(b"%%%d\r\n" % len(value))
        else:
            out.append(b"*%d\r\n" % (2 * len(value)))
        for key, item in value.items():
            _write(key, out, resp3)
            _write(item, out, resp3)
    elif isinstance(value, float):
        if resp3:
            out.append(b",%s\r\n" % _float_text(value))
        else:
            _write(_float_text(value), out, resp3)
    elif cls is Verbatim:
        text = value.encode()
        out.append(b"=%d\r\ntxt:%s\r\n" % (len(text) + 4, text) if resp3 else b"$%d\r\n%s\r\n" % (len(text), text))
    elif cls is BigNumber:
        out.append(b"(%d\r\n" % value if resp3 else b"$%d\r\n%d\r\n" % (len(str(value)), value))
    elif cls is Set:
        _aggregate(b"~" if resp3 else b"*", value, out, resp3)
    elif cls is Push:
        _aggregate(b">" if resp3 else b"*", value, out, resp3)
    # Anything else that is close enough to a type above.
    elif isinstance(value, (bytearray, memoryview)):
        _write(bytes(value), out, resp3)
    elif isinstance(value, int):
        out.append(b":%d\r\n" % value)
    elif isinstance(value, str):
        _write(value.encode(), out, resp3)
    elif isinstance(value, (list, tuple)):
        _aggregate(b"*", value, out, resp3)
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as RESP")
