"""What the client returns: frozen dataclasses, and the parsers that build them
from redis-py replies whatever the protocol (RESP3 maps are dicts, RESP2 maps
flat lists) and whatever ``decode_responses`` says (bytes or str)."""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator, Union

import redis

Text = Union[bytes, str]  # bytes, or str with decode_responses=True


class TStreamError(redis.ResponseError):
    """An error reply with a JetStream status or ADR-50 error code as its first
    word (``408 Bad Request: ...``, ``413 Too Many Results``, ``10071 wrong last
    sequence: 5``): ``code`` is that number, ``description`` the rest."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        code, _, description = message.partition(" ")
        self.code = int(code)
        self.description = description


_CODED = re.compile(r"\d{3,5} ")


def convert_error(exc: redis.ResponseError) -> redis.ResponseError:
    """A ``TStreamError`` for an error that carries a code, else ``exc`` itself."""
    message = str(exc)
    if _CODED.match(message):
        return TStreamError(message)
    return exc


# --- values ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a stream: ``TREAD`` returns these (and None for a missing one)."""

    offset: int
    tag: Text
    data: Text


@dataclass(frozen=True, slots=True)
class Window:
    """``TREAD ... WITHINFO``: the first and last offset held, then the entries."""

    first: int
    last: int
    entries: list[Entry | None]

    def __iter__(self) -> Iterator[Entry | None]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


@dataclass(frozen=True, slots=True)
class Pending:
    """One pending entry of a group (``TPENDING``)."""

    offset: int
    deliveries: int
    ms_until_retry: int


@dataclass(frozen=True, slots=True)
class StreamConfig:
    max_len: int = 0
    max_age_ms: int = 0
    max_msgs_per_subject: int = 0
    allow_direct: bool = True
    allow_atomic: bool = True
    allow_batched: bool = True
    duplicate_window_ms: int = 120000


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """``TINFO key``."""

    length: int
    first: int
    last: int
    nodes: int
    bytes: int
    groups: int
    config: StreamConfig


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """One element of ``TINFO key GROUPS``."""

    name: Text
    next: int
    pending: int


@dataclass(frozen=True, slots=True)
class Message:
    """A JetStream message (DGET, MLAST).

    ``time`` is a timezone-aware UTC ``datetime`` (microseconds) unless the client
    was made with ``parse_times=False``, then the server's RFC 3339 string;
    ``time_ns`` is always the exact time in nanoseconds since the epoch.
    ``num_pending`` and ``last_seq`` are set in batched replies only.
    """

    stream: Text
    subject: Text
    seq: int
    time: Union[datetime, str]
    data: Text
    time_ns: int = field(default=0, compare=False)
    num_pending: int | None = None
    last_seq: int | None = None


@dataclass(frozen=True, slots=True)
class Batch:
    """A batched reply (DGET ... BATCH, MLAST): the messages, then what the
    end-of-batch marker said (``upto_seq`` for MLAST only)."""

    messages: list[Message]
    num_pending: int
    last_seq: int
    upto_seq: int | None = None

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def __getitem__(self, index):
        return self.messages[index]


@dataclass(frozen=True, slots=True)
class PubAck:
    """The reply to a committed atomic batch."""

    stream: Text
    seq: int
    batch: Text
    count: int


# --- parsing -----------------------------------------------------------------------------

def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def as_map(reply: Any) -> dict[str, Any]:
    """A map reply as a dict with str keys: RESP3 dict or RESP2 flat list."""
    if isinstance(reply, dict):
        items = reply.items()
    elif isinstance(reply, (list, tuple)):
        if len(reply) % 2:
            raise redis.DataError(f"expected a map, got a list of {len(reply)} elements")
        items = zip(reply[::2], reply[1::2])
    else:
        raise redis.DataError(f"expected a map, got {type(reply).__name__}")
    return {_text(k): v for k, v in items}


def _int(value: Any) -> int:
    return int(value)  # RESP replies integers as int; RESP2 maps of strings need the int()


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return bool(value)
    return _text(value).lower() in ("yes", "1", "true")


def parse_entry(item: Any) -> Entry | None:
    if item is None:
        return None
    offset, tag, data = item
    return Entry(int(offset), tag, data)


def parse_entries(reply: Any) -> list[Entry | None]:
    return [parse_entry(item) for item in reply]


def parse_read(reply: Any, withinfo: bool) -> list[Entry | None] | Window | None:
    """TREAD: None when a BLOCK timed out."""
    if reply is None:
        return None
    if withinfo:
        first, last = reply[0]
        return Window(int(first), int(last), parse_entries(reply[1:]))
    return parse_entries(reply)


def parse_pending(reply: Any) -> list[Pending]:
    return [Pending(int(o), int(d), int(ms)) for o, d, ms in reply]


def parse_config(fields: dict[str, Any]) -> StreamConfig:
    return StreamConfig(
        max_len=_int(fields.get("max_len", 0)),
        max_age_ms=_int(fields.get("max_age_ms", 0)),
        max_msgs_per_subject=_int(fields.get("max_msgs_per_subject", 0)),
        allow_direct=_flag(fields.get("allow_direct", "yes")),
        allow_atomic=_flag(fields.get("allow_atomic", "yes")),
        allow_batched=_flag(fields.get("allow_batched", "yes")),
        duplicate_window_ms=_int(fields.get("duplicate_window_ms", 120000)),
    )


def parse_info(reply: Any) -> StreamInfo:
    fields = as_map(reply)
    return StreamInfo(_int(fields["length"]), _int(fields["first"]), _int(fields["last"]),
                      _int(fields["nodes"]), _int(fields["bytes"]), _int(fields["groups"]),
                      parse_config(fields))


def parse_groups(reply: Any) -> list[GroupInfo]:
    out = []
    for item in reply:
        fields = as_map(item)
        out.append(GroupInfo(fields["name"], _int(fields["next"]), _int(fields["pending"])))
    return out


_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z\Z")


def time_to_ns(text: str) -> int:
    """The server's RFC 3339 UTC time (``...T00:29:27.587861324Z``) in ns since the epoch."""
    m = _RFC3339.match(text)
    if m is None:
        raise redis.DataError(f"not an RFC 3339 UTC time: {text!r}")
    seconds = calendar.timegm(tuple(int(m.group(i)) for i in range(1, 7)) + (0, 0, 0))
    return seconds * 1_000_000_000 + int((m.group(7) or "").ljust(9, "0"))


def ns_to_datetime(ns: int) -> datetime:
    seconds, rest = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, timezone.utc).replace(microsecond=rest // 1000)


def format_time(value: Union[datetime, str, bytes, int]) -> Union[str, bytes]:
    """An RFC 3339 argument: a datetime (naive means UTC), an int of ns since the
    epoch, or a string passed as it is."""
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, int):
        seconds, rest = divmod(value, 1_000_000_000)
        base = datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{base}.{rest:09d}Z"
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    value = value.astimezone(timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%S") + f".{value.microsecond:06d}Z"


def parse_message(reply: Any, parse_times: bool = True) -> Message | None:
    if reply is None:
        return None
    fields = as_map(reply)
    raw_time = _text(fields["time"])
    ns = time_to_ns(raw_time)
    pending = fields.get("num_pending")
    last_seq = fields.get("last_seq")
    return Message(fields["stream"], fields["subject"], _int(fields["seq"]),
                   ns_to_datetime(ns) if parse_times else raw_time, fields["data"], ns,
                   None if pending is None else _int(pending), None if last_seq is None else _int(last_seq))


def parse_batch(reply: Any, parse_times: bool = True) -> Batch | None:
    """A batched reply: message maps, then the end-of-batch map (status 204)."""
    if reply is None:
        return None
    if not reply:
        raise redis.DataError("a batched reply must end with an end-of-batch marker")
    eob = as_map(reply[-1])
    if _int(eob.get("status", 0)) != 204:
        raise redis.DataError(f"a batched reply must end with status 204, got {eob!r}")
    upto = eob.get("upto_seq")
    return Batch([parse_message(item, parse_times) for item in reply[:-1]],
                 _int(eob["num_pending"]), _int(eob["last_seq"]), None if upto is None else _int(upto))


def parse_pub_ack(reply: Any) -> PubAck | None:
    """BATCH: None for a staged message (+OK), the PubAck for a commit."""
    if reply is True or reply in (b"OK", "OK"):
        return None
    fields = as_map(reply)
    return PubAck(fields["stream"], _int(fields["seq"]), fields["batch"], _int(fields["count"]))
