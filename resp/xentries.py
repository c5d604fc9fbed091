"""Redis stream entries encoded from columns (XREADGROUP's reply of new
entries): the same bytes as ``encode`` of the ``StreamEntries``
``[[id, [field, value]], ...]`` under both protocols, without the nested lists."""

from __future__ import annotations

import os

from .encode import Raw, encode_stream_ids

__all__ = ["encode_keyed", "encode_packed_fields", "encode_stream_columns", "encode_stream_packed", "encode_stream_pairs",
           "encode_stream_id_run", "encode_stream_id_run_u64", "encode_stream_tables", "encode_stream_tables_python",
           "STREAM_TABLES_IN_C"]


def encode_stream_columns(ids: list, fields: list, values: list) -> Raw:
    """``encode(StreamEntries([[ids[k], [fields[k], values[k]]] ...]), protocol)``
    (any protocol: no entry is null), as Raw: no nested lists, no integer
    formatted (each bulk string's ``$<length>\r\n`` is looked up in
    ``_BULK_HEADS``; a ``%`` format costs ~1.4k instructions an integer, the
    lookup a tenth of that); ``_format_columns`` for an item of 2 KiB or more."""
    heads = _BULK_HEADS
    parts: list = []
    try:
        for i, f, v in zip(ids, fields, values):
            parts += (_ENTRY_HEADS[len(i)], i, _PAIRS_HEADS[2], heads[len(f)], f, _CRLF, heads[len(v)], v, _CRLF)
    except IndexError:
        return _format_columns(ids, fields, values)
    return Raw(b"*%d\r\n%s" % (len(ids), b"".join(parts)))


def _format_columns(ids: list, fields: list, values: list) -> Raw:
    """:func:`encode_stream_columns`, one format per entry (any sizes)."""
    return Raw(b"*%d\r\n%s" % (len(ids), b"".join([
        b"*2\r\n$%d\r\n%s\r\n*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(i), i, len(f), f, len(v), v)
        for i, f, v in zip(ids, fields, values)])))


def encode_stream_pairs(ids: list, fields: list, rests: list) -> Raw:
    """``encode(StreamEntries([[ids[k], [fields[k], *rests[k]]] ...]), protocol)``
    (any protocol: no entry is null), as Raw: entries of several field-value
    pairs (``rests[k]``: the items after the first field, bytes).  Each bulk
    string's head looked up (``_BULK_HEADS``, see :func:`encode_stream_columns`),
    the pieces joined once; ``_format_pairs`` for an item of 2 KiB or more."""
    heads = _BULK_HEADS
    parts: list = []
    try:
        for i, f, rest in zip(ids, fields, rests):
            if len(rest) == 3:  # two pairs (bench/xstreams.py's entries, the usual case of several)
                a, b, c = rest
                parts += (_ENTRY_HEADS[len(i)], i, _PAIRS_HEADS[4], heads[len(f)], f, _CRLF, heads[len(a)], a, _CRLF,
                          heads[len(b)], b, _CRLF, heads[len(c)], c, _CRLF)
            else:
                parts += (_ENTRY_HEADS[len(i)], i, _PAIRS_HEADS[len(rest) + 1], heads[len(f)], f, _CRLF)
                for v in rest:
                    parts += (heads[len(v)], v, _CRLF)
    except IndexError:
        return _format_pairs(ids, fields, rests)
    return Raw(b"*%d\r\n%s" % (len(ids), b"".join(parts)))


def encode_stream_packed(ids: list, fields: list, payloads: list) -> Raw | None:
    """:func:`encode_stream_pairs` of entries packed by engine/xids.pack_pairs:
    each payload is one byte, the number ``n`` of items after the first field
    (at most 126), then those items as RESP bulk strings, which the reply holds
    as they are: per entry its id's head, the field array's head (``n + 1``
    items), the first field's bulk string and the payload after its count, no
    item unpacked nor encoded.  None when a payload is in another form (a
    msgpack list, first byte 0x90 or above; or a field or id too long for the
    tables): the caller unpacks and takes :func:`encode_stream_pairs`."""
    heads = _BULK_HEADS
    pairs_heads = _PACKED_HEADS
    parts: list = []
    try:
        for i, f, payload in zip(ids, fields, payloads):
            parts += (_ENTRY_HEADS[len(i)], i, pairs_heads[payload[0]], heads[len(f)], f, _CRLF, payload[1:])
    except IndexError:
        return None
    return Raw(b"*%d\r\n%s" % (len(ids), b"".join(parts)))


def encode_packed_fields(field: bytes, payload) -> Raw | None:
    """The field array ``[field, *items]`` of one entry packed by
    engine/xids.pack_pairs (see :func:`encode_stream_packed`), as Raw: its head,
    the first field's bulk string and the payload after its count, no item
    unpacked.  None for a payload in another form (a msgpack list)."""
    n = payload[0]
    if n > _PACKED_MAX:
        return None
    size = len(field)
    head = _BULK_HEADS[size] if size < 2048 else b"$%d\r\n" % size
    return Raw(b"".join((_ARRAY_HEADS[n + 1], head, field, _CRLF, payload[1:])))


def _format_pairs(ids: list, fields: list, rests: list) -> Raw:
    """:func:`encode_stream_pairs` with one format per entry of two pairs, else
    one per entry and one per field (any sizes)."""
    parts = []
    two = _TWO_PAIRS
    for i, f, rest in zip(ids, fields, rests):
        if len(rest) == 3:
            a, b, c = rest
            parts.append(two % (len(i), i, len(f), f, len(a), a, len(b), b, len(c), c))
        else:
            parts.append(b"*2\r\n$%d\r\n%s\r\n*%d\r\n$%d\r\n%s\r\n" % (len(i), i, len(rest) + 1, len(f), f))
            parts += [b"$%d\r\n%s\r\n" % (len(v), v) for v in rest]
    return Raw(b"*%d\r\n%s" % (len(ids), b"".join(parts)))


# The heads of bulk strings shorter than 2 KiB (``$<length>\r\n``), of an entry
# (``*2\r\n`` then its id's head: ids are at most 41 bytes) and of an entry's
# field-value array (``\r\n`` ending the id, then ``*<items>\r\n``), made once.
_BULK_HEADS = tuple(b"$%d\r\n" % n for n in range(2048))
_ENTRY_HEADS = tuple(b"*2\r\n$%d\r\n" % n for n in range(48))
_PAIRS_HEADS = tuple(b"\r\n*%d\r\n" % n for n in range(128))
_CRLF = b"\r\n"
# By a packed payload's count of items after the first field (at most _PACKED_MAX):
# its field array's head, after the id's ``\r\n`` or alone.
_PACKED_HEADS = _PAIRS_HEADS[1:]
_PACKED_MAX = len(_PACKED_HEADS) - 1
_ARRAY_HEADS = tuple(head[2:] for head in _PAIRS_HEADS)

_TWO_PAIRS = b"*2\r\n$%d\r\n%s\r\n*4\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"


def encode_keyed(protocol: int, key: bytes, reply: bytes) -> Raw:
    """``encode(KeyedReplies({key: Raw(reply)}), protocol)``: one key's reply of
    XREAD/XREADGROUP (RESP2 an array of one ``[key, reply]`` pair, RESP3 a map)."""
    head = b"%%1\r\n$%d\r\n%s\r\n" if protocol == 3 else b"*1\r\n*2\r\n$%d\r\n%s\r\n"
    return Raw(head % (len(key), key) + reply)


# "0".."99" and "00".."99": the last digits of the sequence numbers of a run of ids.
_DIGITS = [b"%d" % n for n in range(100)]
_TWO_DIGITS = [b"%02d" % n for n in range(100)]


def encode_stream_id_run(ms: int, first_seq: int, count: int) -> bytes:
    """``encode_stream_ids(ms, first_seq, count)`` (the replies of a pipelined run
    of ``XADD key * field value``), cut where the sequence numbers change width
    or hundred: within a piece the ids differ in their last one or two digits
    only, so they are those digits joined by the common part, no integer
    formatted per id."""
    last = first_seq + count - 1
    if count <= 0 or last >= 1 << 63:
        return encode_stream_ids(ms, first_seq, count)
    pieces = []
    seq = first_seq
    prefix = b"%d-" % ms
    while seq <= last:
        if seq < 100:  # "0".."9", then "10".."99": one width each
            end = min(last, 9 if seq < 10 else 99)
            head = prefix
            digits = _DIGITS[seq:end + 1]
        else:  # within one hundred: the common part, then two digits
            end = min(last, seq - seq % 100 + 99)
            head = b"%s%d" % (prefix, seq // 100)
            digits = _TWO_DIGITS[seq % 100:end % 100 + 1]
        lead = b"$%d\r\n%s" % (len(head) + len(digits[0]), head)
        pieces.append(lead + (b"\r\n" + lead).join(digits) + b"\r\n")
        seq = end + 1
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


# encode_stream_id_run_u64(ms, first_seq, count): :func:`encode_stream_id_run` where
# ms and every sequence number are unsigned 64-bit integers (a pipelined XADD run's
# ids always are), in C (resp/_speedups.c: one allocation, no format; outside that
# range it raises) unless the extension is off, missing or older than it.
try:
    if os.environ.get("TSTREAM_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("TSTREAM_PURE_PYTHON is set")
    from ._speedups import encode_stream_id_run as encode_stream_id_run_u64
except ImportError:
    encode_stream_id_run_u64 = encode_stream_id_run


_U64_MAX = (1 << 64) - 1


def encode_stream_tables_python(protocol: int, key: bytes | None, tables: list, subjects, last_ms: int, last_seq: int,
                                packed: int) -> tuple[bytes, list, list] | None:
    """XREADGROUP's reply of the new entries of ``tables`` (engine
    ``Stream.read_tables``: consecutive entries, none deleted, none with a stored
    id), their ids derived from their times (engine/xgroups._ids_from_times:
    after the id ``(last_ms, last_seq)``, an entry written in millisecond
    ``ms = time // 10**6`` has ``ms-(seq + 1)`` if ``ms`` is the previous id's,
    else ``ms-0``): ``(reply, texts, ids)``, the reply being ``encode(
    KeyedReplies({key: entries}), protocol)`` (``key`` None: the entries'
    array alone), ``texts`` the ids as it spells them (``b"ms-seq"``), ``ids``
    the ``(ms, seq)`` tuples.  ``packed`` 0: each entry one pair (the subject
    ``subjects[tags[k]]``, the payload its value); 1: payloads of
    engine/xids.pack_pairs (see :func:`encode_stream_packed`).  None when an id
    cannot be derived so (a time before the previous id's millisecond or the
    epoch, a sequence past 64 bits) or a payload is not packed so: the caller
    takes its other path.  The reference of resp/_speedups.c's
    ``encode_stream_tables`` (the same results, the same refusals)."""
    if protocol not in (2, 3):
        raise ValueError("protocol must be 2 or 3")
    if packed not in (0, 1):
        raise ValueError("packed must be 0 or 1")
    ms, seq = last_ms, last_seq
    if not (0 <= ms <= _U64_MAX and 0 <= seq <= _U64_MAX):
        raise OverflowError("the last id is not two unsigned 64-bit integers")
    parts: list = []
    texts: list = []
    ids: list = []
    for buf, ends, tags, times, i, j, _first in tables:
        for k in range(i, j):
            a, b = ends[k], ends[k + 1]
            if not 0 <= a <= b <= len(buf):
                raise ValueError("a table's ends are outside its buffer")
            tag = tags[k]
            subject = subjects[tag] if tag < len(subjects) else None
            if subject.__class__ is not bytes:
                raise ValueError("a tag id with no subject (bytes) in subjects")
            payload = bytes(buf[a:b])
            if packed and (not payload or payload[0] > _PACKED_MAX):
                return None
            ns = times[k]
            this_ms = ns // 1_000_000
            if ns < 0 or this_ms < ms or (this_ms == ms and seq == _U64_MAX):
                return None
            seq = seq + 1 if this_ms == ms else 0
            ms = this_ms
            text = b"%d-%d" % (ms, seq)
            texts.append(text)
            ids.append((ms, seq))
            if packed:
                parts.append(b"*2\r\n$%d\r\n%s\r\n*%d\r\n$%d\r\n%s\r\n%s" % (
                    len(text), text, payload[0] + 1, len(subject), subject, payload[1:]))
            else:
                parts.append(b"*2\r\n$%d\r\n%s\r\n*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
                    len(text), text, len(subject), subject, len(payload), payload))
    head = b"" if key is None else (b"%%1\r\n$%d\r\n%s\r\n" if protocol == 3 else b"*1\r\n*2\r\n$%d\r\n%s\r\n") % (
        len(key), key)
    return b"%s*%d\r\n%s" % (head, len(texts), b"".join(parts)), texts, ids


# encode_stream_tables(protocol, key, tables, subjects, last_ms, last_seq, packed): in C
# (resp/_speedups.c) unless the extension is off, missing or older than it.
try:
    if os.environ.get("TSTREAM_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("TSTREAM_PURE_PYTHON is set")
    from ._speedups import encode_stream_tables
    STREAM_TABLES_IN_C = True
except ImportError:
    encode_stream_tables = encode_stream_tables_python
    STREAM_TABLES_IN_C = False
