"""Redis stream entries encoded from columns (XREADGROUP's reply of new
entries): the same bytes as ``encode`` of the ``StreamEntries``
``[[id, [field, value]], ...]`` under both protocols, without the nested lists."""

from __future__ import annotations

from .encode import Raw

__all__ = ["encode_keyed", "encode_stream_columns"]


def encode_stream_columns(ids: list, fields: list, values: list) -> Raw:
    """``encode(StreamEntries([[ids[k], [fields[k], values[k]]] ...]), protocol)``
    (any protocol: no entry is null), as Raw: one format per entry, no nested
    lists (one format of the whole reply measured slower: 6.2 against 4.7 us
    for ten entries of 100 bytes)."""
    return Raw(b"*%d\r\n%s" % (len(ids), b"".join([
        b"*2\r\n$%d\r\n%s\r\n*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(i), i, len(f), f, len(v), v)
        for i, f, v in zip(ids, fields, values)])))


def encode_keyed(protocol: int, key: bytes, reply: bytes) -> Raw:
    """``encode(KeyedReplies({key: Raw(reply)}), protocol)``: one key's reply of
    XREAD/XREADGROUP (RESP2 an array of one ``[key, reply]`` pair, RESP3 a map)."""
    head = b"%%1\r\n$%d\r\n%s\r\n" if protocol == 3 else b"*1\r\n*2\r\n$%d\r\n%s\r\n"
    return Raw(head % (len(key), key) + reply)
