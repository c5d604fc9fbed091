"""Handlers of the JetStream commands: DGET and MLAST (ADR-31 Direct Get), BATCH (ADR-50).

A stream key is the JetStream stream, an entry's tag its subject and its offset
its sequence.  Subject questions go to the stream's subject index
(``engine/subjects.py``), built on first need.  As every handler, these parse and
validate all of their arguments before they look at the data, so a bad request
changes nothing.

Status codes travel as the first word after ``ERR``: ``-ERR 408 Bad Request: why``,
``-ERR 413 Too Many Results``, ``-ERR 503 ...``; a request that matches nothing
(404) replies null.  Batch errors are ``-ERR <ADR-50 code> <description>``.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from bisect import bisect_left
from itertools import islice
from time import monotonic, time_ns

from tstream.engine import batches as B
from tstream.engine.ingest import Ingest
from tstream.engine.subjects import InvalidSubject, TooManySubjects, held_from, index_of, parse_filter
from tstream.resp import (
    NULL_ARRAY,
    OK,
    TABLE_PAGES_IN_C,
    Raw,
    SubjectBulks,
    encode_eob,
    encode_message,
    encode_message_page,
    encode_message_pieces,
    encode_piece_page,
    encode_table_page,
)

from .args import to_int
from .errors import CommandError, SyntaxErr, out_of_memory
from .ingest import fast_batch, invalid_pattern, is_fast, message_options

DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # nats-server's default max_pending
MAX_PAGE_BUDGET = (1 << 63) - 1  # the largest max_bytes the C page writer takes
MULTI_LAST_LIMIT = 1024
MERGE_SUBJECTS = 32  # batches over more matching subjects than this scan the log instead

NOT_ALLOWED = "ERR 503 direct get is not allowed on this stream"
TOO_MANY = "ERR 413 Too Many Results"


class BadRequest(CommandError):
    """408: the request is empty, malformed or contradictory."""

    def __init__(self, why: str) -> None:
        super().__init__(f"ERR 408 Bad Request: {why}")


def batch_error(code: int, text: str) -> CommandError:
    return CommandError(f"ERR {code} {text}")


# ---------------------------------------------------------------------------
# RFC 3339 times
# ---------------------------------------------------------------------------

_RFC3339 = re.compile(
    rb"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:[Zz]|([+-])(\d{2}):(\d{2}))\Z")


_NS = 1_000_000_000


class TimeTexts:
    """Times as RFC 3339 text, with the text of each second kept: the messages of
    a batch mostly share their second.  One per server (``server.time_texts``),
    at most ``MAX`` seconds kept, forgotten all at once when full."""

    MAX = 4096

    def __init__(self) -> None:
        self.seconds: dict[int, bytes] = {}  # second -> b"YYYY-MM-DDTHH:MM:SS"
        self.subjects = SubjectBulks()  # the subjects' bulk strings, for encode_message_page

    def format(self, ns: int) -> bytes:
        """``ns`` since the epoch as RFC 3339 in UTC with 9 fraction digits."""
        sec, frac = divmod(ns, 1_000_000_000)
        prefix = self.seconds.get(sec)
        if prefix is None:
            if len(self.seconds) >= self.MAX:
                self.seconds.clear()
            prefix = self.seconds[sec] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)).encode()
        return b"%s.%09dZ" % (prefix, frac)

    def page(self, times: list) -> tuple[list, bytes | list | None]:
        """``times`` as encode_message_page takes them: a page within one
        second (the usual case) as its prefix and the fractions; a page across
        seconds as the fractions and each message's prefix (C iterators, a
        second's text made once); else (prefixes of different lengths, or more
        seconds than are kept) as texts."""
        if times:
            base = times[0] - times[0] % _NS
            if min(times) >= base and max(times) < base + _NS:
                return list(map(base.__rsub__, times)), self.format(base)[:-11]
            secs = list(map(_NS.__rfloordiv__, times))
            seconds = self.seconds
            distinct = set(secs)
            missing = distinct.difference(seconds)
            if len(missing) + len(seconds) <= self.MAX:  # (no clearing while filling)
                for sec in missing:
                    self.format(sec * _NS)
                if len(set(map(len, map(seconds.__getitem__, distinct)))) == 1:
                    return list(map(_NS.__rmod__, times)), list(map(seconds.__getitem__, secs))
        format = self.format
        return [format(t) for t in times], None

    def render(self, seqs, subjects: list, datas: list, times: list) -> list[bytes]:
        """The messages' pieces (resp.encode_message_pieces) of a block's
        columns: what Stream.read_pieces keeps for a block read again."""
        format = self.format
        return encode_message_pieces(seqs, subjects, [format(t) for t in times], datas)


def parse_time(text: bytes) -> int:
    """An RFC 3339 time (any offset, 0-9 fraction digits) as ns since the epoch."""
    m = _RFC3339.match(text)
    if m is None:
        raise ValueError("not an RFC 3339 time")
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]
            and hour <= 23 and minute <= 59 and second <= 60):
        raise ValueError("not an RFC 3339 time")
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    if m.group(8):
        shift = int(m.group(9)) * 3600 + int(m.group(10)) * 60
        seconds -= shift if m.group(8) == b"+" else -shift
    frac = m.group(7) or b""
    return seconds * 1_000_000_000 + int(frac.ljust(9, b"0") or b"0")


# ---------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------

class Request:
    """A direct get request (ADR-31's JSApiMsgGetRequest)."""

    __slots__ = ("seq", "last_by_subj", "next_by_subj", "start_time", "batch", "max_bytes",
                 "multi_last", "up_to_seq", "up_to_time")

    def __init__(self) -> None:
        self.seq = 0
        self.last_by_subj = None   # SubjectFilter
        self.next_by_subj = None   # SubjectFilter
        self.start_time = None     # ns
        self.batch = 0
        self.max_bytes = 0
        self.multi_last = None     # list of SubjectFilter
        self.up_to_seq = 0
        self.up_to_time = None     # ns

    def check(self) -> "Request":
        """nats-server's checks: something asked for, nothing contradictory."""
        if (not self.seq and self.last_by_subj is None and self.next_by_subj is None
                and not self.multi_last and self.start_time is None):
            raise BadRequest("empty request")
        for a, b in _CONTRADICTIONS:
            if _given(self, a) and _given(self, b):
                raise BadRequest(f"{a} and {b} cannot be combined")
        return self


_CONTRADICTIONS = [
    ("seq", "last_by_subj"), ("seq", "start_time"), ("start_time", "last_by_subj"),
    ("last_by_subj", "next_by_subj"), ("last_by_subj", "batch"), ("last_by_subj", "multi_last"),
    ("next_by_subj", "multi_last"), ("up_to_seq", "up_to_time"),
]


def _given(req: Request, name: str) -> bool:
    value = getattr(req, name)
    return value is not None and value != 0 and value != []


def _filter(raw: bytes, what: str):
    try:
        return parse_filter(raw)
    except InvalidSubject as exc:
        raise BadRequest(f"invalid subject {what} '{raw.decode('utf-8', 'replace')}': {exc}") from None


def _count(value, what: str) -> int:
    """A JSON number that must be an integer >= 0."""
    if type(value) is not int or value < 0 or value >= 1 << 64:
        raise BadRequest(f"{what} must be a non-negative integer")
    return value


def _count_arg(arg: bytes, what: str) -> int:
    try:
        value = to_int(arg)
    except CommandError:
        raise BadRequest(f"{what} must be a non-negative integer") from None
    if value < 0:
        raise BadRequest(f"{what} must be a non-negative integer")
    return value


def _time_arg(raw: bytes, what: str) -> int:
    try:
        return parse_time(raw)
    except ValueError:
        raise BadRequest(f"{what} must be an RFC 3339 time, e.g. 2024-11-04T23:45:02.060192Z") from None


_JSON_FIELDS = {"seq", "last_by_subj", "next_by_subj", "start_time", "batch", "max_bytes",
                "multi_last", "up_to_seq", "up_to_time"}


def parse_json(payload: bytes) -> Request:  # noqa: C901 (over the limit when it came in)
    """``DGET key <json>``: the ADR-31 request payload as it is."""
    if not payload.strip():
        raise BadRequest("empty request")
    try:
        body = json.loads(payload)
    except (ValueError, RecursionError):
        raise BadRequest("malformed request, the payload is not JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("malformed request, the payload must be a JSON object")
    req = Request()
    for name, value in body.items():
        if name not in _JSON_FIELDS:
            raise BadRequest(f"unknown field '{name}'")
        if value is None:
            continue
        if name in ("seq", "batch", "max_bytes", "up_to_seq"):
            setattr(req, name, _count(value, name))
        elif name in ("last_by_subj", "next_by_subj"):
            if type(value) is not str:
                raise BadRequest(f"{name} must be a string")
            setattr(req, name, _filter(value.encode(), name))
        elif name in ("start_time", "up_to_time"):
            if type(value) is not str:
                raise BadRequest(f"{name} must be an RFC 3339 time string")
            setattr(req, name, _time_arg(value.encode(), name))
        else:  # multi_last
            if type(value) is not list or any(type(v) is not str for v in value):
                raise BadRequest("multi_last must be an array of subject strings")
            req.multi_last = [_filter(v.encode(), "multi_last") for v in value] or None
    return req.check()


_KEYWORDS = {b"seq": "seq", b"last_by_subj": "last_by_subj", b"next_by_subj": "next_by_subj",
             b"start_time": "start_time", b"batch": "batch", b"max_bytes": "max_bytes"}


def _keyword(args: list, i: int, word: bytes, keywords: dict, seen: set) -> str:
    """The field named by ``args[i]`` (``word``, lower-cased), which needs a value
    after it and may be given once; records it in ``seen``."""
    name = keywords.get(word)
    if name is None:
        raise BadRequest(f"unknown field '{args[i].decode('utf-8', 'replace')}'")
    if i + 1 >= len(args):
        raise BadRequest(f"{word.upper().decode()} needs a value")
    if name in seen:
        raise BadRequest(f"{word.upper().decode()} is given twice")
    seen.add(name)
    return name


def parse_keywords(args: list) -> Request:
    """``DGET key [SEQ n] [LAST_BY_SUBJ s] [NEXT_BY_SUBJ f] [START_TIME t] [BATCH n] [MAX_BYTES n]``."""
    req = Request()
    seen = set()
    i = 0
    while i < len(args):
        word = args[i].lower()
        if word == b"subject":
            raise BadRequest("SUBJECT takes one subject and nothing else")
        name = _keyword(args, i, word, _KEYWORDS, seen)
        value = args[i + 1]
        if name in ("last_by_subj", "next_by_subj"):
            setattr(req, name, _filter(value, name))
        elif name == "start_time":
            req.start_time = _time_arg(value, name)
        else:
            setattr(req, name, _count_arg(value, name))
        i += 2
    return req.check()


# ---------------------------------------------------------------------------
# Replies
# ---------------------------------------------------------------------------

# Message maps go straight to RESP through resp's fast encoders (they are the bulk
# of every DGET/MLAST reply); the end-of-batch map goes through resp.encode.
def _message(client, key: bytes, entry) -> Raw:
    """The message map of ``entry``: stream, subject, seq, time, data."""
    return encode_message(client.protocol, key, entry.tag, entry.offset,
                          client.server.time_texts.format(entry.time_ns), entry.data)


def _eob(num_pending: int, last_seq: int) -> dict:
    return {"status": 204, "description": "EOB", "num_pending": num_pending, "last_seq": last_seq}


def _direct_stream(server, key: bytes):
    """The stream to read, or None (404); 503 when direct get is off."""
    stream = server.streams.get(key)
    if stream is not None and not stream.settings.allow_direct:
        raise CommandError(NOT_ALLOWED)
    return stream


# ---------------------------------------------------------------------------
# DGET
# ---------------------------------------------------------------------------

def dget(client, argv):
    """DGET key json | DGET key [SEQ n] [LAST_BY_SUBJ subject] [NEXT_BY_SUBJ filter] [START_TIME time] [BATCH n] [MAX_BYTES n] | DGET key SUBJECT subject

    JetStream direct get (ADR-31): one message map (null when none matches), or
    with BATCH message maps then an end-of-batch map. The JSON form takes the
    ADR-31 payload. O(log n) per subject; batches O(messages + log n).
    """
    n = len(argv)
    key = argv[1]
    if n == 4 and argv[2].lower() == b"subject":
        # the subject-appended form, the KV "get": kept short
        subject = argv[3]
        if _PLAIN_SUBJECT.match(subject) is None:
            flt = _filter(subject, "SUBJECT")
            if not flt.literal:
                req = Request()
                req.last_by_subj = flt
                return _serve(client, key, req)
        stream = _direct_stream(client.server, key)
        if stream is None:
            return NULL_ARRAY
        seq = index_of(stream).last(subject)
        return _message(client, key, stream.get(seq)) if seq else NULL_ARRAY
    if n == 3:
        req = parse_json(argv[2])
    elif argv[2].lower() == b"subject":
        raise BadRequest("SUBJECT takes one subject and nothing else")
    else:
        req = parse_keywords(argv[2:])
    return _serve(client, key, req)


# A literal subject with nothing to check further (no *, >, empty token or whitespace).
_PLAIN_SUBJECT = re.compile(rb"[^.*>\s]+(?:\.[^.*>\s]+)*\Z")


def _serve(client, key: bytes, req: Request):
    stream = _direct_stream(client.server, key)
    if stream is None:
        return NULL_ARRAY
    if req.multi_last:
        return _multi_last(client, key, stream, req)
    return _direct_get(client, key, stream, req)


def _direct_get(client, key: bytes, stream, req: Request):  # noqa: C901 (over the limit when it came in)
    if req.last_by_subj is not None:
        flt = req.last_by_subj
        index = index_of(stream)
        seq = index.last(flt.raw) if flt.literal else index.last_matching(flt)
        return _message(client, key, stream.get(seq)) if seq else NULL_ARRAY
    if req.start_time is not None:
        start = stream.offset_at_time(req.start_time)
    else:
        start = req.seq or 1
    flt = req.next_by_subj
    if not req.batch:
        if flt is not None:
            index = index_of(stream)
            seq = index.first_from(index.entries(flt), start)
            return _message(client, key, stream.get(seq)) if seq else NULL_ARRAY
        if req.start_time is None:
            entry = stream.get(start)  # exactly that sequence
        else:
            entry = next(stream.iter_from(start), None)  # the oldest at or after the time
        return _message(client, key, entry) if entry is not None else NULL_ARRAY

    # A batch: up to `batch` matching messages from `start` on, then EOB.
    if flt is not None and flt.raw == b">":
        flt = None  # every subject: read the log itself
    if flt is None:
        pending = held_from(stream, start)
        cols = None
        if pending and req.batch <= PAGE_CHUNK and TABLE_PAGES_IN_C:
            page = _table_page(client, key, stream, start, req, pending)
            if page is not None:
                return page
        elif pending and req.batch <= PAGE_CHUNK:
            got = stream.read_pieces(start, req.batch, client.server.time_texts.render)
            if got.__class__ is list:
                page = _kept_page(client, key, stream, start, req, pending, got)
                if page is not None:
                    return page
            else:  # the columns of the first chunk
                cols = got
        fetch = _log_reader(stream, start, None, cols)
    else:
        index = index_of(stream)
        subjects = index.entries(flt)
        pending = index.count_from(subjects, start)
        if len(subjects) > MERGE_SUBJECTS:
            fetch = _log_reader(stream, start, {subject for subject, _ in subjects})
        else:
            seqs = index.iter_from(subjects, start)
            fetch = lambda n: stream.entries_at(list(islice(seqs, n)))  # noqa: E731
    if not pending:
        return NULL_ARRAY
    cols = _take(fetch, req.batch, req.max_bytes or DEFAULT_MAX_BYTES)
    if not cols[0]:
        return NULL_ARRAY
    return _page(client, key, cols, pending, {})


def _table_page(client, key: bytes, stream, start: int, req: Request, pending: int) -> Raw | None:
    """The page of the log's messages from ``start`` on written in C from the
    decoded tables that hold them (Stream.read_tables, resp.encode_table_page:
    no Python object per message, the times formatted in C), or None when a
    node of the range has deleted entries (then read the page from the columns)."""
    tables = stream.read_tables(start, req.batch)
    if not tables:
        return None
    # (max_bytes may be up to 2**64 - 1 in the JSON form; the C writer takes a signed
    # 64-bit budget, and no page comes near 2**63 bytes)
    budget = min(req.max_bytes or DEFAULT_MAX_BYTES, MAX_PAGE_BUDGET)
    body, n = encode_table_page(client.protocol, key, tables, stream.tag_list, pending, 0, budget)
    return Raw(body + encode_eob(client.protocol, pending - n, tables[0][6] + n - 1))


def _kept_page(client, key: bytes, stream, start: int, req: Request, pending: int, pieces: list) -> Raw | None:
    """The page of the messages from ``start`` on whose ``pieces`` the log's
    blocks keep (Stream.read_pieces: blocks read a second time keep their
    messages rendered), or None (then read the page from the columns): only
    when the page cannot reach MAX_BYTES (the pieces hold each message's
    subject and data, and more)."""
    if sum(map(len, pieces)) >= (req.max_bytes or DEFAULT_MAX_BYTES):
        return None
    first = start if start > stream.first else stream.first
    n = len(pieces)
    return encode_piece_page(client.protocol, key, pieces, first, pending, 0, _eob(pending - n, first + n - 1))


# Pages are read and encoded in columns (Stream.read_columns), chunks of at most
# this many entries at a time: a large BATCH under a small MAX_BYTES reads little more than it sends.
PAGE_CHUNK = 1024


def _log_reader(stream, start: int, wanted: set | None, first: tuple | None = None):
    """``fetch(n)``: the columns of the next (at most ``n``) held entries of
    the log from ``start`` on, of the tags in ``wanted`` only when given;
    ``first``: the columns of the first fetch, read already."""
    pos = start

    def fetch(n: int):
        nonlocal pos, first
        while True:
            if first is None:
                cols = stream.read_columns(pos, n)
            else:
                cols, first = first, None
            offs = cols[0]
            if not offs:
                return cols
            pos = offs[-1] + 1
            if wanted is None:
                return cols
            keep = [k for k, tag in enumerate(cols[1]) if tag in wanted]
            if keep:
                return tuple([col[k] for k in keep] for col in cols)

    return fetch


def _take(fetch, batch: int, max_bytes: int) -> tuple:
    """Columns of up to ``batch`` entries (0: no limit) taken from ``fetch``,
    stopping after the entry that brings the size (tags and data) to
    ``max_bytes``."""
    offs: list = []
    tags: list = []
    datas: list = []
    times: list = []
    size = 0
    while True:
        n = PAGE_CHUNK if not batch else min(batch - len(offs), PAGE_CHUNK)
        if n <= 0:
            break
        o, t, d, tm = fetch(n)
        if not o:
            break
        more = sum(map(len, t)) + sum(map(len, d))
        if size + more >= max_bytes:  # the cut is in this chunk
            k = 0
            while size < max_bytes:
                size += len(t[k]) + len(d[k])
                k += 1
            offs += o[:k]
            tags += t[:k]
            datas += d[:k]
            times += tm[:k]
            break
        size += more
        offs += o
        tags += t
        datas += d
        times += tm
    return offs, tags, datas, times


def _page(client, key: bytes, cols: tuple, pending: int, tail: dict) -> Raw:
    """The batched reply of the messages in ``cols`` (``pending`` matching
    from the first on), then the end-of-batch map with ``tail``'s fields."""
    offs, tags, datas, times = cols
    eob = _eob(pending - len(offs), offs[-1] if offs else 0)
    eob.update(tail)
    texts = client.server.time_texts
    times, prefix = texts.page(times)
    return encode_message_page(client.protocol, key, offs, tags, times, datas, pending, 0, eob, prefix, texts.subjects)


# ---------------------------------------------------------------------------
# MLAST
# ---------------------------------------------------------------------------

_MLAST_KEYWORDS = {b"up_to_seq": "up_to_seq", b"up_to_time": "up_to_time", b"seq": "seq",
                   b"batch": "batch", b"max_bytes": "max_bytes"}


def mlast(client, argv):
    """MLAST key [UP_TO_SEQ n] [UP_TO_TIME time] [SEQ n] [BATCH n] [MAX_BYTES n] SUBJECTS filter [filter ...]

    The newest message of every subject matching the filters (at or below
    UP_TO_SEQ, strictly before UP_TO_TIME), by sequence, then an end-of-batch map
    with upto_seq; null when none; at most 1024 subjects (413).
    O(log n) per subject under the filters' literal prefixes.
    """
    req = Request()
    seen = set()
    args = argv[2:]
    i = 0
    while True:
        if i >= len(args):
            raise BadRequest("SUBJECTS and at least one subject filter are required")
        word = args[i].lower()
        if word == b"subjects":
            filters = args[i + 1:]
            if not filters:
                raise BadRequest("SUBJECTS needs at least one subject filter")
            req.multi_last = [_filter(f, "filter") for f in filters]
            break
        name = _keyword(args, i, word, _MLAST_KEYWORDS, seen)
        if name == "up_to_time":
            req.up_to_time = _time_arg(args[i + 1], name)
        else:
            setattr(req, name, _count_arg(args[i + 1], name))
        i += 2
    req.check()
    key = argv[1]
    stream = _direct_stream(client.server, key)
    if stream is None:
        return NULL_ARRAY
    return _multi_last(client, key, stream, req)


def _multi_last(client, key: bytes, stream, req: Request):
    last = stream.last
    if req.up_to_time is not None:
        # newest messages strictly before the time: below the first one at or after it
        upto = stream.offset_at_time(req.up_to_time) - 1
    elif req.up_to_seq:
        upto = min(req.up_to_seq, last)
    else:
        upto = last
    if upto < stream.first:
        return NULL_ARRAY
    try:
        seqs = index_of(stream).multi_last(req.multi_last, upto, MULTI_LAST_LIMIT)
    except TooManySubjects:
        raise CommandError(TOO_MANY) from None
    if not seqs:
        return NULL_ARRAY
    # paging: results below SEQ were sent by an earlier call
    first = bisect_left(seqs, req.seq) if req.seq else 0
    pos = first

    def fetch(n: int):
        nonlocal pos
        cols = stream.entries_at(seqs[pos:pos + n])
        pos += n
        return cols

    cols = _take(fetch, req.batch, req.max_bytes or DEFAULT_MAX_BYTES)
    return _page(client, key, cols, len(seqs) - first, {"upto_seq": upto})


# ---------------------------------------------------------------------------
# BATCH
# ---------------------------------------------------------------------------

def batch(client, argv):  # noqa: C901 (over the limit when it came in)
    """BATCH key batch-id batch-seq subject data [EXPECT_LAST_SEQ n] [EXPECT_LAST_SUBJECT_SEQ n] [COMMIT] | BATCH key batch-id batch-seq EOB

    Atomic batch publish (ADR-50): stages a message of the batch (+OK); COMMIT
    stages it and commits, EOB commits without one: every staged message is
    appended at once and the reply is the pub ack (stream, seq, batch, count).
    O(1) per message; the commit O(messages).
    """
    n = len(argv)
    server = client.server
    key, batch_id = argv[1], argv[2]
    if n == 6:  # the next plain message of a batch in flight: the hot path, kept short
        current = server.batches.by_id.get((key, batch_id))
        if current is not None and argv[3] == current.next_arg:
            flat = current.flat
            if len(flat) < _MAX_FLAT:
                stream = server.streams.get(key)
                if stream is None or stream.settings.allow_atomic:
                    flat.append(argv[4])
                    flat.append(argv[5])
                    seq = current.next_seq + 1
                    current.next_seq = seq
                    current.next_arg = B.SEQ_ARGS[seq]
                    current.last_active = monotonic()
                    return OK
    if n >= 8 and is_fast(argv):  # BATCH ... FAST: fast-ingest (commands/ingest.py)
        return fast_batch(client, argv)
    expect_last = expect_subject = msgid = None
    commit = eob = False
    if n == 5:
        if argv[4].lower() != b"eob":
            raise SyntaxErr()
        eob = True
        subject = data = None
    else:
        subject, data = argv[4], argv[5]
        commit, expect_last, expect_subject, msgid = message_options(argv, 6, _syntax_error)

    registry = server.batches
    stream = server.streams.get(key)
    if not batch_id or len(batch_id) > B.MAX_ID_LENGTH:
        raise batch_error(10179, f"batch publish ID is invalid (empty or longer than {B.MAX_ID_LENGTH} characters)")
    current = registry.get(key, batch_id)

    def fail(code: int, text: str, reason: str):
        if current is not None:
            registry.abandon(current, reason)
        return batch_error(code, text)

    if stream is not None and not stream.settings.allow_atomic:
        raise fail(10174, "atomic publish is disabled on this stream", "rejected")
    try:
        seq = to_int(argv[3])
    except CommandError:
        seq = 0
    if seq <= 0:
        raise fail(10175, "batch publish sequence is missing (batch-seq must be a positive integer)",
                   "incomplete")
    if seq == 1:
        if current is not None:  # a new batch under an id still in flight: the old one is abandoned
            registry.abandon(current, "incomplete")
            current = None
        elif eob:
            registry.count_abandoned("incomplete")
        if eob:
            raise batch_error(10176, "batch publish is incomplete and was abandoned (EOB at batch-seq 1)")
        if not registry.room_for(key):
            raise batch_error(10210, f"too many atomic batches in flight ({B.MAX_PER_STREAM} per stream, "
                                     f"{B.MAX_PER_SERVER} per server)")
    else:
        if current is None:
            if stream is not None and stream._ingest is not None and batch_id in stream._ingest.batches:
                raise invalid_pattern("FAST missing on a message of a fast batch")
            raise batch_error(10176, "batch publish is incomplete and was abandoned (unknown batch)")
        if seq != current.next_seq:
            raise fail(10176, f"batch publish is incomplete and was abandoned (expected batch-seq "
                              f"{current.next_seq}, got {seq})", "incomplete")
        if expect_last is not None:
            raise fail(10164, "EXPECT_LAST_SEQ is only allowed on the first message of a batch", "rejected")
    if expect_subject is not None and current is not None and current.has_subject(subject):
        raise fail(10164, "EXPECT_LAST_SUBJECT_SEQ on a subject already written earlier in the batch",
                   "rejected")
    if not eob and current is not None and current.count >= B.MAX_MESSAGES:
        raise fail(10199, f"batch publish sequence exceeds server limit ({B.MAX_MESSAGES} messages)", "large")
    if msgid is not None and current is not None and current.msgids and msgid in current.msgids:
        raise fail(10201, "duplicate message id is in process", "rejected")

    # Everything checked: stage.
    if current is None:
        current = registry.start(key, batch_id)
    current.last_active = time.monotonic()
    if not eob:
        if expect_last is not None:
            current.expect_last_seq = expect_last
        if expect_subject is not None:
            current.subject_expects.append((subject, expect_subject))
        if msgid is not None:
            if current.msgids is None:
                current.msgids = {}
            current.msgids[msgid] = current.count
        current.stage(subject, data)
    if commit or eob:
        return _commit(server, current)
    return OK


_MAX_FLAT = 2 * B.MAX_MESSAGES  # a batch's flat [subject, data, ...] list at its limit


def _syntax_error(word: bytes) -> None:
    raise SyntaxErr()


def _commit(server, current):
    """Append the staged messages in one step, if the expectations hold."""
    registry = server.batches
    key = current.key
    stream = server.streams.get(key)
    if stream is not None and not stream.settings.allow_atomic:
        registry.abandon(current, "rejected")
        raise batch_error(10174, "atomic publish is disabled on this stream")
    last = stream.last if stream is not None else 0
    if current.expect_last_seq is not None and current.expect_last_seq != last:
        registry.abandon(current, "rejected")
        raise batch_error(10071, f"wrong last sequence: {last}")
    if current.subject_expects:
        index = index_of(stream) if stream is not None else None
        for subject, expected in current.subject_expects:
            actual = index.last(subject) if index is not None else 0
            if actual != expected:
                registry.abandon(current, "rejected")
                raise batch_error(10071, f"wrong last sequence: {actual}")
    registry.remove(current)
    if current.msgids:
        return _commit_with_ids(server, current, stream)
    if stream is None:
        stream = server.create_stream(key)
    first = stream.first
    flat = current.flat
    start = stream.next_offset
    try:
        offset = stream.append_many(flat, time_ns())
    except MemoryError:  # the entries stored before it (in sealed nodes) are logged
        server.writes.appended_partly(key, stream, first, start, flat, 0)
        raise out_of_memory(stream.next_offset - start, len(flat) >> 1, start) from None
    count = len(flat) >> 1
    # one record for the whole batch, exactly as TWRITE ENTRIES logs it
    server.writes.appended(key, stream, first, offset, flat, 0, count)
    return {"stream": key, "seq": offset + count - 1, "batch": current.id, "count": count}


def _commit_with_ids(server, current, stream):
    """The commit of a batch with message ids: the messages whose id was stored
    within the stream's duplicate window are left out (the pub ack then says
    ``duplicate: 1``); the others are appended at once, logged with their ids."""
    key = current.key
    flat = current.flat
    count = len(flat) >> 1
    ids: list = [None] * count
    for msgid, index in current.msgids.items():
        ids[index] = msgid
    window = stream.settings.duplicate_window_ms if stream is not None else 120000
    now = time_ns()
    keep = list(range(count))
    if window and stream is not None and stream._ingest is not None:
        seen = stream._ingest.seen
        keep = [i for i in keep if ids[i] is None or seen(ids[i], now, window * 1_000_000) is None]
    if stream is None:
        stream = server.create_stream(key)
    if stream._ingest is None:
        stream._ingest = Ingest()
    first = stream.first
    tags = [flat[2 * i] for i in keep]
    datas = [flat[2 * i + 1] for i in keep]
    kept_ids = [ids[i] for i in keep] if window else []
    try:
        offset = stream.append_columns(tags, datas, now)
    except MemoryError:
        raise out_of_memory(0, len(keep), stream.next_offset) from None
    if kept_ids:
        stream._ingest.add_ids(kept_ids, offset, stream.last_time)
    if keep:
        server.writes.ingested(key, stream, first, offset, tags, datas, None, 0, False, kept_ids)
    ack = {"stream": key, "seq": offset + len(keep) - 1 if keep else stream.last, "batch": current.id,
           "count": count}
    if len(keep) < count:
        ack["duplicate"] = 1
    return ack
