"""Walk a snapshot file (``dump.tsr``) record by record, without rebuilding streams.

``persistence.snapshot.load`` rebuilds every stream of a file in memory; a Spark
job reading one key of a big snapshot needs much less: where that key's node
records sit in the file (planning, on the driver), then the node blobs of a few
of them (each task). The file format is the one ``persistence/snapshot.py``
describes: a header, per key one ``S`` record (msgpack metadata), its ``N``
records (deleted-bitmap length u32, bitmap, node blob) and its ``G`` records,
then an ``E`` record and a footer holding a CRC-32 of the whole file.

The file is memory-mapped, so a task touches only the pages of its nodes. Each
record carries its own CRC, checked on every read; the planner also checks the
whole-file CRC once, and records the footer's CRC so that a task notices when
the file was replaced (a newer BGSAVE renamed over it) after planning.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from typing import Iterator

from tstream.persistence.framing import CorruptFile, iter_frames, unpack
from tstream.persistence.snapshot import FILE_HEADER, FOOTER, KIND_END, KIND_GROUP, KIND_NODE, KIND_STREAM, verify

_BITMAP_LEN = struct.Struct("<I")  # the N record's prefix: deleted-bitmap length


@dataclass
class KeyRecords:
    """Where one stream's records sit in the file."""

    key: bytes
    meta: dict                      # node_entries, config, first, next_offset, last_time, tags
    meta_pos: int                   # file position of the S record
    node_pos: list[int] = field(default_factory=list)  # file positions of its N records, in order

    @property
    def node_entries(self) -> int:
        return int(self.meta["node_entries"])


def open_snapshot(path: str) -> mmap.mmap:
    """The file, memory-mapped read-only."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            raise CorruptFile("empty file", path, 0)
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


def footer_crc(data) -> int:
    """The whole-file CRC stored in the footer (identifies this version of the file)."""
    return FOOTER.unpack_from(data, len(data) - FOOTER.size)[1]


def _meta(payload) -> tuple[bytes, dict]:
    key, meta = unpack(payload[1:])
    return key, {k.decode() if isinstance(k, bytes) else k: v for k, v in meta.items()}


def iter_keys(data, path: str = "", check: bool = True) -> Iterator[KeyRecords]:
    """Every stream of the file with the positions of its records, in file
    order. ``check`` verifies the header, the footer and the whole-file CRC
    first. Raises CorruptFile (naming file and offset) on damage."""
    start = verify(data, path) if check else FILE_HEADER.size
    body = memoryview(data)[: len(data) - FOOTER.size]
    current: KeyRecords | None = None
    try:
        for pos, payload in iter_frames(body, start, path):
            kind = bytes(payload[:1])
            if kind == KIND_NODE:
                if current is None:
                    raise CorruptFile("node record before any stream record", path, pos)
                current.node_pos.append(pos)
            elif kind == KIND_STREAM:
                if current is not None:
                    yield current
                key, meta = _meta(payload)
                current = KeyRecords(key, meta, pos)
            elif kind == KIND_GROUP:
                continue
            elif kind == KIND_END:
                break
            else:
                raise CorruptFile(f"unknown record kind {kind!r}", path, pos)
        if current is not None:
            yield current
    finally:
        body.release()


def find_key(data, key: bytes, path: str = "", check: bool = True) -> KeyRecords | None:
    """The records of ``key``, or None when the snapshot does not hold it."""
    for item in iter_keys(data, path, check):
        if item.key == key:
            return item
    return None


def read_meta(data, meta_pos: int, path: str = "") -> tuple[bytes, dict]:
    """The S record at ``meta_pos`` (its CRC checked)."""
    for pos, payload in iter_frames(data, meta_pos, path):
        if bytes(payload[:1]) != KIND_STREAM:
            raise CorruptFile("not a stream record", path, pos)
        return _meta(payload)
    raise CorruptFile("no record", path, meta_pos)


def iter_node_blobs(data, first_pos: int, count: int,
                    path: str = "") -> Iterator[tuple[memoryview, bytes | None]]:
    """``(blob, deleted bitmap or None)`` of ``count`` consecutive node records
    from ``first_pos`` (each CRC checked). The blob is a view into ``data``:
    ``engine.stream.Node.from_blob`` rebuilds the node from it."""
    if count <= 0:
        return
    seen = 0
    for pos, payload in iter_frames(data, first_pos, path):
        if bytes(payload[:1]) != KIND_NODE:
            raise CorruptFile("expected a node record", path, pos)
        (bitmap_len,) = _BITMAP_LEN.unpack_from(payload, 1)
        at = 1 + _BITMAP_LEN.size
        bitmap = bytes(payload[at: at + bitmap_len]) or None
        yield payload[at + bitmap_len:], bitmap
        seen += 1
        if seen == count:
            return
    raise CorruptFile(f"expected {count} node records, found {seen}", path, first_pos)
