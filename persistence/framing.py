"""Framed records: the unit of both the snapshot and the append-only files.

    +-------+-------------+------------+--------------------+------------------+
    | "TR"  | length: u32 | crc32: u32 | length ^ ~0: u32   | payload (length) |
    +-------+-------------+------------+--------------------+------------------+

Little-endian.  The crc covers the payload; the length is stored twice (the
second time inverted) so that a damaged length is seen as damage, not mistaken
for a record cut short.  A reader tells two failures apart:

- a **torn tail**: the file ends inside its last record (a crash while writing);
  everything before that record is good;
- **corruption**: a record whose checksum does not match, or a damaged header.

The record's own header decides: a tail is torn when what is left of the file
is a prefix of a record whose header is good (magic, and the length matching
its inverted copy) but whose length runs past the end of the file, or a prefix
of a header.  Nothing after that point is looked at: a record's payload is
client data and may well contain bytes that look like a frame, so scanning
ahead for "a valid record after the damage" would take an ordinary crash for
corruption.  A damaged length cannot pass for a torn tail (its inverted copy
no longer matches), and a record cut short with more records after it is
caught by its checksum, since those records become part of its payload.

Payloads of effect records and metadata are msgpack (a compact, well-kept C
serializer: it is what keeps appending and loading cheap); node blobs are stored
as raw bytes behind a one-byte kind.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, Iterator

import msgpack

HEADER = struct.Struct("<2sIII")
MAGIC = b"TR"
MAX_RECORD = 1 << 31  # no record is larger: a bigger length is damage


class PersistenceError(Exception):
    """A file cannot be read as it should; ``path`` and ``offset`` say where."""

    def __init__(self, message: str, path: str = "", offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        where = f"{path} at offset {offset}: " if path else ""
        super().__init__(where + message)


class CorruptFile(PersistenceError):
    """The file is damaged before its end: nothing after ``offset`` can be trusted."""


class TornTail(PersistenceError):
    """The file ends inside a record starting at ``offset`` (a crash mid-write)."""


_INVERT = 0xFFFFFFFF


def frame(payload: bytes) -> bytes:
    return HEADER.pack(MAGIC, len(payload), zlib.crc32(payload), len(payload) ^ _INVERT) + payload


def pack(record) -> bytes:
    """A msgpack-encoded record, framed."""
    payload = msgpack.packb(record, use_bin_type=True)
    return HEADER.pack(MAGIC, len(payload), zlib.crc32(payload), len(payload) ^ _INVERT) + payload


class Packer:
    """:func:`pack` with one msgpack packer kept (``packb`` makes one per call:
    this is about twice as fast per record).  One per owner (the AOF, the
    replication stream), used by one thread; a record that cannot be packed
    raises and leaves it as it was."""

    __slots__ = ("_packb",)

    def __init__(self) -> None:
        self._packb = msgpack.Packer(use_bin_type=True).pack

    def __call__(self, record) -> bytes:
        payload = self._packb(record)
        return HEADER.pack(MAGIC, len(payload), zlib.crc32(payload), len(payload) ^ _INVERT) + payload


def unpack(payload) -> Any:
    return msgpack.unpackb(payload, raw=True, use_list=True, strict_map_key=False)


def iter_frames(data, start: int = 0, path: str = "", check_crc: bool = True) -> Iterator[tuple[int, memoryview]]:
    """(offset, payload) of every record in ``data[start:]``.

    Raises TornTail when the data ends inside a record, CorruptFile on damage.
    ``check_crc=False`` skips the per-record checksums, for data whose integrity
    was already verified as a whole (a snapshot's whole-file checksum).
    """
    view = memoryview(data)
    size = len(view)
    pos = start
    unpack_header = HEADER.unpack_from
    crc32 = zlib.crc32
    while pos < size:
        if size - pos < HEADER.size:
            if not MAGIC.startswith(bytes(view[pos : pos + 2])):
                raise CorruptFile("not a record header", path, pos)
            if size - pos >= 6:  # the length is there: it must be plausible
                (length,) = struct.unpack_from("<I", view, pos + 2)
                if length > MAX_RECORD:
                    raise CorruptFile("not a record header", path, pos)
            _raise_tail(view, pos, path, "the file ends inside a record header")
        magic, length, crc, inverted = unpack_header(view, pos)
        if magic != MAGIC or length ^ inverted != _INVERT or length > MAX_RECORD:
            raise CorruptFile("not a record header", path, pos)
        end = pos + HEADER.size + length
        if end > size:
            _raise_tail(view, pos, path, "the file ends inside a record")
        payload = view[pos + HEADER.size : end]
        if check_crc and crc32(payload) != crc:
            raise CorruptFile("record checksum mismatch", path, pos)
        yield pos, payload
        pos = end


def _raise_tail(view: memoryview, pos: int, path: str, why: str) -> None:
    raise TornTail(why, path, pos)
