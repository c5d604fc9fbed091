"""The node blob formats (versions 1-3): what a snapshot stores of one node.

``Node.blob()`` (or ``blob_parts()``: header and body apart) returns a
self-describing serialisation of a node, version 3, little-endian::

    +----+---------+-------+------------+-------+-------+---------+  _HDR, 32 bytes
    | TN | version | flags | ends code  | count | start | buf_len |  flags: 1 = zstd, 2 = short
    +----+---------+-------+------------+-------+-------+---------+
    | block_entries u32 | nblocks u32 |                               _BLOCKS_HDR (v2+)
    +-------------------+-------------+-------------+--------------+
    | first_time i64 | last_time i64 | raw_len u64 | tag-id code c |  _SUMMARY (v3),
    |                                 number of tag ids u32        |  32 bytes
    +--------------------------------------------------------------+
    | nblocks + 1 frame offsets into the body, u64 each            |
    | the distinct tag ids, sorted, u16 ('H') or u32 ('I') each    |  (v3)
    +--------------------------------------------------------------+
    | body: a sealed node's stored data as is (its zstd frames, or |
    | its one raw body; no recompression); the active node's raw   |
    | body (one block)                                             |
    +--------------------------------------------------------------+

The header holds everything a sealed node keeps besides its body, so a node
can be rebuilt from it without decompressing anything (``Node.from_parts(...,
check=False)``, for data whose checksum was verified); ``check=True``
decompresses every block and compares the summary with it.  Version-2 blobs
(no summary) and version-1 blobs (one frame per node; a full compressed one is
re-cut into blocks) still load, decompressed.  Tag ids refer to the owning
stream's tag table (engine/tags.py); deleted bitmaps are saved apart (they
change after sealing).

This module packs and parses headers; engine/node.py builds nodes from them.
"""

from __future__ import annotations

import struct
import sys
from array import array

__all__ = ["BLOB_PREFIX", "header_length"]

# Blob header (drawn above): magic, version, flags, ends typecode,
# count, start, buf_len; versions 2+ follow it with _BLOCKS_HDR
# (block_entries, nblocks); version 3 then with _SUMMARY (first_time,
# last_time, raw_len, tag-id typecode, number of tag ids); then the
# nblocks + 1 frame offsets of the body as little-endian u64; version 3
# then the node's sorted distinct tag ids (u16 or u32 each).
_HDR = struct.Struct("<2sBBcxxxIqQ")
_BLOCKS_HDR = struct.Struct("<II")
_SUMMARY = struct.Struct("<qqQcxxxI")
_MAGIC = b"TN"
_VERSION = 3  # 1: one frame (or raw body) per node; 2: no summary; both still loaded
_FLAG_ZSTD = 1
_FLAG_SHORT = 2  # sealed before its range was full (node_max_bytes): it ends at start + count
# Bytes of a blob that always suffice to compute its header's length.
BLOB_PREFIX = _HDR.size + _BLOCKS_HDR.size + _SUMMARY.size
_LITTLE = sys.byteorder == "little"


def _pack_ids(ids: set[int]) -> array:
    """Distinct tag ids of a node, sorted, 2 bytes each while ids fit."""
    # Made as "I" and narrowed to "H" as bytes (the low halves): an "H"
    # array made from ints parses each with PyArg_Parse, ~4x the cost.
    ordered = array("I", sorted(ids))
    if ordered and ordered[-1] >= 65536:
        return ordered
    if _LITTLE:
        return array("H", bytes(memoryview(ordered).cast("B").cast("H")[::2]))
    return array("H", ordered)  # pragma: no cover - big-endian hosts


def _le_bytes(values: array) -> bytes:
    """An array's items as little-endian bytes."""
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _le_array(code: str, data) -> array:
    """An array of ``code`` items from little-endian bytes (copied)."""
    values = array(code)
    values.frombytes(data)  # any bytes-like (array(code, view) would take bytes as items)
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        values.byteswap()
    return values


def header_length(blob) -> int:
    """Length of the header that starts ``blob`` (bytes-like), which must
    hold the first :data:`BLOB_PREFIX` bytes of the blob (or all of it when
    shorter).  Raises ValueError when they do not describe a header.  O(1)."""
    size = len(blob)
    if size < _HDR.size:
        raise ValueError("node blob too short")
    magic, version = struct.unpack_from("<2sB", blob)
    if magic != _MAGIC or not 1 <= version <= _VERSION:
        raise ValueError("not a tstream node blob")
    if version == 1:
        return _HDR.size
    if version == 2:
        if size < _HDR.size + _BLOCKS_HDR.size:
            raise ValueError("node blob too short")
        return _HDR.size + _BLOCKS_HDR.size + 8 * (_BLOCKS_HDR.unpack_from(blob, _HDR.size)[1] + 1)
    if size < BLOB_PREFIX:
        raise ValueError("node blob too short")
    nb = _BLOCKS_HDR.unpack_from(blob, _HDR.size)[1]
    tcode, ntags = _SUMMARY.unpack_from(blob, _HDR.size + _BLOCKS_HDR.size)[3:]
    if tcode not in (b"H", b"I"):
        raise ValueError("bad tag-id typecode in node blob")
    return BLOB_PREFIX + 8 * (nb + 1) + (2 if tcode == b"H" else 4) * ntags


def pack_header(start: int, count: int, compressed: bool, code: str, buf_len: int, be: int,
                first_time: int, last_time: int, raw_len: int, offs, ids: array,
                short: bool = False) -> bytes:
    """A version-3 header (``offs``: the nblocks + 1 frame offsets, ``ids``:
    the sorted distinct tag ids; ``short``: a node sealed before its range
    was full).  O(blocks + ids)."""
    flags = (_FLAG_ZSTD if compressed else 0) | (_FLAG_SHORT if short else 0)
    return (_HDR.pack(_MAGIC, _VERSION, flags, code.encode(), count, start, buf_len)
            + _BLOCKS_HDR.pack(be, len(offs) - 1)
            + _SUMMARY.pack(first_time, last_time, raw_len, ids.typecode.encode(), len(ids))
            + struct.pack(f"<{len(offs)}Q", *offs) + _le_bytes(ids))


def parse_header(header, node_entries: int):
    """Parse a header of any version (exactly :func:`header_length` bytes)
    for nodes of ``node_entries`` offsets.  Returns ``(base, start, cap_end,
    count, code, buf_len, compressed, block_entries, nblocks, offs, summary,
    version, short)`` where ``summary`` is ``(first_time, last_time, raw_len,
    ids)`` (version 3) or None.  Raises ValueError on a bad header.
    O(blocks + ids)."""
    if header_length(header) != len(header):
        raise ValueError("node blob header has the wrong length")
    _, version, flags, code, count, start, buf_len = _HDR.unpack_from(header)
    if code not in (b"I", b"Q"):
        raise ValueError("bad ends typecode in node blob")
    code = code.decode()
    base = start - (start - 1) % node_entries
    cap_end = base + node_entries
    if start < 1 or count < 1 or start + count > cap_end:
        raise ValueError("node blob does not fit the node size")
    short = bool(flags & _FLAG_SHORT)
    if short:
        if start + count == cap_end:
            raise ValueError("a short node blob fills its range")
        cap_end = start + count
    summary = None
    if version == 1:
        be, nb, offs = count, 1, None
    else:
        pos = _HDR.size
        be, nb = _BLOCKS_HDR.unpack_from(header, pos)
        pos += _BLOCKS_HDR.size
        if version >= 3:
            summary = _SUMMARY.unpack_from(header, pos)
            pos += _SUMMARY.size
        if be < 1 or nb != -(-count // be):
            raise ValueError("node blob has a bad block geometry")
        offs = struct.unpack_from(f"<{nb + 1}Q", header, pos)
        pos += 8 * (nb + 1)
        if summary is not None:
            ids = _le_array(summary[3].decode(), memoryview(header)[pos:])
            if not 1 <= len(ids) <= count or ids[0] < 1:
                raise ValueError("node blob has a bad tag set")
            summary = (*summary[:3], ids)
    return (base, start, cap_end, count, code, buf_len, bool(flags & _FLAG_ZSTD), be, nb, offs,
            summary, version, short)
