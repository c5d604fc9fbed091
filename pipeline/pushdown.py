"""Filter pushdown for batch reads, and the start/end-by-timestamp options.

Spark hands ``DataSourceReader.pushFilters`` (PySpark 4.1+) the conjuncts of a
query's ``where``; the ones this source understands narrow what is read:

- ``offset`` compared with a number (``=``, ``<``, ``<=``, ``>``, ``>=``, ``IN``):
  the offset range of every stream;
- ``time`` compared with a timestamp: an offset range too, found on the server
  with ``DGET key START_TIME t`` (write times only grow along a log, so the
  entries at or after a time are a suffix of it); a stream that does not allow
  direct gets is read whole;
- ``tag = 'x'`` (or ``IN`` of one value): only that tag's entries are read, by
  ``DGET ... NEXT_BY_SUBJ x`` (the server's subject index), when ``x`` is a
  plain subject;
- ``tag`` starting with a prefix (``startswith``, ``LIKE 'orders.eu.%'``: Spark's
  ``StringStartsWith``): the tags under the prefix's whole tokens, by
  ``NEXT_BY_SUBJ orders.eu.>`` (a superset: ``orders.e%`` reads ``orders.>``);
  a prefix without a ``.`` has no whole token and is not pushed;
- ``key = 'x'`` or ``key IN (...)``: only those streams.

Every filter is still handed back to Spark, which evaluates it again on the
rows read: the narrowing only has to keep every row that matches (never drops
one), and a filter this module does not understand costs nothing but rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from .common import OptionError, StreamInfo

# A literal subject: what NEXT_BY_SUBJ takes as itself (no wildcard, no empty token, no blank).
_PLAIN_SUBJECT = re.compile(r"[^.*>\s]+(?:\.[^.*>\s]+)*\Z")


@dataclass(frozen=True)
class Pushed:
    """What the filters (and the timestamp options) narrow a read to."""

    offset_lo: int = 1
    offset_hi: int | None = None        # inclusive
    time_from: int | None = None        # ns: entries written at or after
    time_until: int | None = None       # ns: entries written strictly before
    tag: str | None = None              # only this tag
    tag_prefix: str | None = None       # only tags starting with this
    keys: frozenset | None = None       # only these streams
    empty: bool = False                 # the filters contradict each other

    def narrowed(self) -> bool:
        return self != Pushed()

    @property
    def subject_filter(self) -> str | None:
        """What to read through the subject index (``NEXT_BY_SUBJ``): the tag, or
        ``T.>`` for a prefix whose whole tokens are ``T``; None: every entry."""
        if self.tag is not None:
            return self.tag
        if self.tag_prefix is None:
            return None
        cut = self.tag_prefix.rfind(".")
        tokens = self.tag_prefix[:cut]
        return f"{tokens}.>" if cut > 0 and _PLAIN_SUBJECT.match(tokens) else None


def _ns(value) -> int | None:
    """A filter's timestamp as ns since the epoch (naive: UTC, as Spark's session time zone
    does not reach the data source)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        delta = value - datetime(1970, 1, 1, tzinfo=timezone.utc)
        return (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
    return None


def _int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def push(filters, pushed: Pushed) -> Pushed:  # noqa: C901 (one case per filter kind, flat on purpose)
    """``pushed`` narrowed by ``filters`` (pyspark.sql.datasource filters)."""
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
        StringStartsWith,
    )

    p = pushed
    for f in filters:
        if not hasattr(f, "value"):  # IsNull, IsNotNull, Not: nothing to narrow
            continue
        column = f.attribute[0].lower() if len(getattr(f, "attribute", ())) == 1 else None
        if column == "offset":
            value = f.value
            if isinstance(f, In):
                if not f.value or any(_int(v) is None for v in f.value):
                    continue
                lo, hi = min(_int(v) for v in f.value), max(_int(v) for v in f.value)
            elif _int(value) is None:
                continue
            elif isinstance(f, (EqualTo, EqualNullSafe)):
                lo = hi = _int(value)
            elif isinstance(f, GreaterThan):
                lo, hi = _int(value) + 1, None
            elif isinstance(f, GreaterThanOrEqual):
                lo, hi = _int(value), None
            elif isinstance(f, LessThan):
                lo, hi = 1, _int(value) - 1
            elif isinstance(f, LessThanOrEqual):
                lo, hi = 1, _int(value)
            else:
                continue
            p = replace(p, offset_lo=max(p.offset_lo, lo),
                        offset_hi=hi if p.offset_hi is None else (p.offset_hi if hi is None else min(p.offset_hi, hi)))
        elif column == "time":
            ns = _ns(f.value)
            if ns is None:
                continue
            micros = ns // 1000 * 1000  # Spark compares microseconds: the ns of the whole µs
            if isinstance(f, (EqualTo, EqualNullSafe)):
                start, until = micros, micros + 1000
            elif isinstance(f, GreaterThanOrEqual):
                start, until = micros, None
            elif isinstance(f, GreaterThan):
                start, until = micros + 1000, None
            elif isinstance(f, LessThan):
                start, until = None, micros
            elif isinstance(f, LessThanOrEqual):
                start, until = None, micros + 1000
            else:
                continue
            if start is not None:
                p = replace(p, time_from=start if p.time_from is None else max(p.time_from, start))
            if until is not None:
                p = replace(p, time_until=until if p.time_until is None else min(p.time_until, until))
        elif column == "tag" and isinstance(f, StringStartsWith):
            p = _push_prefix(p, f.value)
        elif column == "tag":
            values = None
            if isinstance(f, (EqualTo, EqualNullSafe)) and isinstance(f.value, str):
                values = {f.value}
            elif isinstance(f, In) and len(f.value) == 1 and isinstance(f.value[0], str):
                values = {f.value[0]}
            if not values:
                continue
            (tag,) = values
            if p.tag is not None and p.tag != tag:
                p = replace(p, empty=True)
            elif _PLAIN_SUBJECT.match(tag):
                p = replace(p, tag=tag)
        elif column == "key":
            if isinstance(f, (EqualTo, EqualNullSafe)) and isinstance(f.value, str):
                keys = frozenset([f.value])
            elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                keys = frozenset(f.value)
            else:
                continue
            p = replace(p, keys=keys if p.keys is None else p.keys & keys)
    if p.tag is not None and p.tag_prefix is not None and not p.tag.startswith(p.tag_prefix):
        p = replace(p, empty=True)
    return p


def _push_prefix(p: Pushed, prefix) -> Pushed:
    """``tag`` starts with ``prefix``: keep the longest of the prefixes (two that
    do not extend each other match nothing)."""
    if not isinstance(prefix, str) or not prefix:
        return p
    old = p.tag_prefix
    if old is None or prefix.startswith(old):
        return replace(p, tag_prefix=prefix)
    if old.startswith(prefix):
        return p
    return replace(p, empty=True)


def timestamp_options(options) -> Pushed:
    """``startingTimestamp``/``endingTimestamp`` (ms since the epoch, as Kafka's):
    the first offset written at or after the start, up to the last written before the end."""
    p = Pushed()
    if options.starting_timestamp is not None:
        p = replace(p, time_from=options.starting_timestamp * 1_000_000)
    if options.ending_timestamp is not None:
        p = replace(p, time_until=options.ending_timestamp * 1_000_000)
    return p


def rfc3339(ns: int) -> str:
    seconds, frac = divmod(ns, 1_000_000_000)
    whole = datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{frac:09d}Z"


def offset_at_time(client, key: str, ns: int, info: StreamInfo) -> int | None:
    """The first offset of ``key`` written at or after ``ns`` (``info.next_offset``
    when none is); None when the server cannot tell (no DGET, or direct gets off)."""
    from redis.exceptions import ResponseError

    if ns <= 0:
        return info.first
    try:
        reply = client.execute_command("DGET", key, "START_TIME", rfc3339(ns))
    except ResponseError:
        return None
    if not reply:
        return info.next_offset
    if isinstance(reply, list):  # RESP2
        reply = dict(zip(reply[0::2], reply[1::2]))
    return int(reply[b"seq"])


def narrow(client, key: str, info: StreamInfo, lo: int, hi: int, pushed: Pushed,
           strict: bool = False) -> tuple[int, int]:
    """The range ``lo..hi`` of ``key`` narrowed by ``pushed``. ``strict`` (the
    timestamp options, which Spark does not check again): fail when the server
    cannot find offsets by time, instead of reading the whole range."""
    if pushed.empty or (pushed.keys is not None and key not in pushed.keys):
        return 1, 0
    lo = max(lo, pushed.offset_lo)
    if pushed.offset_hi is not None:
        hi = min(hi, pushed.offset_hi)
    if hi < lo:
        return lo, hi
    for ns, is_start in ((pushed.time_from, True), (pushed.time_until, False)):
        if ns is None:
            continue
        at = offset_at_time(client, key, ns, info)
        if at is None:
            if strict:
                raise OptionError(f"tstream: startingTimestamp/endingTimestamp need direct gets (DGET) on "
                                  f"key {key!r} (TCONFIG {key} SET allow_direct yes)")
        elif is_start:
            lo = max(lo, at)
        else:
            hi = min(hi, at - 1)
    return lo, hi
