"""Redis stream entries encoded from columns (XREADGROUP's reply of new
entries): the same bytes as ``encode`` of the ``StreamEntries``
``[[id, [field, value]], ...]`` under both protocols, without the nested lists."""

from __future__ import annotations

from .encode import Raw

__all__ = ["encode_stream_columns"]


def encode_stream_columns(ids: list, fields: list, values: list) -> Raw:
    """``encode(StreamEntries([[ids[k], [fields[k], values[k]]] ...]), protocol)``
    (any protocol: no entry is null), as Raw: one format per entry, no nested
    lists (one format of the whole reply measured slower: 6.2 against 4.7 us
    for ten entries of 100 bytes)."""
    return Raw(b"*%d\r\n%s" % (len(ids), b"".join([
        b"*2\r\n$%d\r\n%s\r\n*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(i), i, len(f), f, len(v), v)
        for i, f, v in zip(ids, fields, values)])))
