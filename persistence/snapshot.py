"""Snapshots (the RDB of tstream): one file holding every stream, its config, its groups.

    +----------------------------------------------------------+
    | "TSTREAM\\0" | version u16 | flags u16 | created_ms u64   |  file header (20 bytes)
    +----------------------------------------------------------+
    | framed record  S  stream metadata (msgpack)               |  per key:
    | framed record  N  node: deleted-bitmap length u32,        |   one S, its nodes in
    |                   bitmap, node blob (zstd body as stored) |   order, its groups
    | framed record  G  group state (msgpack)                   |
    | ...                                                       |
    | framed record  E  end: key count (msgpack)                |
    +----------------------------------------------------------+
    | "TSEOF\\0\\0\\0" | crc32 of every byte before it: u32        |  footer (12 bytes)
    +----------------------------------------------------------+

Sealed macro nodes are stored exactly as they sit in memory: zstandard-compressed
bodies (or raw where compression did not pay), written without recompression.

Saving happens in two steps so that BGSAVE never stalls clients: ``capture``
runs on the event loop and takes references to the sealed nodes (immutable) and
copies of what may still change (the active node, deleted bitmaps, tag tables,
groups); ``write`` then runs in a worker thread.  The file is written to a temp
name, fsynced, renamed over the target and the directory fsynced, so a crash
leaves either the old snapshot or the new one.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from dataclasses import asdict
from typing import Iterator

import msgpack

from engine import Keyspace, Stream
from engine.groups import Group

from .framing import CorruptFile, PersistenceError, TornTail, frame, iter_frames, unpack

FILE_MAGIC = b"TSTREAM\x00"
FILE_HEADER = struct.Struct("<8sHHQ")
FOOTER_MAGIC = b"TSEOF\x00\x00\x00"
FOOTER = struct.Struct("<8sI")
VERSION = 1

KIND_STREAM, KIND_NODE, KIND_GROUP, KIND_END = b"S", b"N", b"G", b"E"
_NODE_PREFIX = struct.Struct("<I")


class StreamCapture:
    """What ``write`` needs of one stream, safe to read from another thread."""

    __slots__ = ("key", "meta", "nodes", "groups")

    def __init__(self, key: bytes, stream: Stream) -> None:
        self.key = key
        self.meta = {
            "node_entries": stream.node_entries,
            "config": asdict(stream.config),
            "first": stream.first,
            "next_offset": stream.next_offset,
            "last_time": stream.last_time,
            "tags": list(stream._tag_list),
        }
        # (deleted bitmap copy or None, blob header, blob body); sealed bodies are
        # immutable and shared, the active node's body is serialised now.
        self.nodes = [
            (None if node.deleted is None else bytes(node.deleted), *node.blob_parts())
            for node in stream.node_list()
        ]
        self.groups = [group.export_state() for group in stream.groups.values()]


def capture(keyspace: Keyspace) -> list[StreamCapture]:
    """Take a consistent picture of the keyspace. Run on the event loop. O(nodes + groups)."""
    return [StreamCapture(key, stream) for key, stream in keyspace.items()]


def records(captured: list[StreamCapture]) -> Iterator[bytes]:
    """The framed records of a snapshot body, in file order."""
    for item in captured:
        yield frame(KIND_STREAM + _packb([item.key, item.meta]))
        for deleted, header, body in item.nodes:
            bitmap = deleted or b""
            yield frame(b"".join((KIND_NODE, _NODE_PREFIX.pack(len(bitmap)), bitmap, header, body)))
        for group in item.groups:
            yield frame(KIND_GROUP + _packb([item.key, group]))
    yield frame(KIND_END + _packb(len(captured)))


def write(captured: list[StreamCapture], path: str) -> int:
    """Write a snapshot to ``path`` atomically; returns its size. Safe in a worker thread."""
    directory = os.path.dirname(os.path.abspath(path))
    temp = os.path.join(directory, f"temp-{os.getpid()}-{time.monotonic_ns()}.tsr")
    crc = 0
    size = 0
    try:
        with open(temp, "wb", buffering=1 << 20) as handle:
            header = FILE_HEADER.pack(FILE_MAGIC, VERSION, 0, int(time.time() * 1000))
            for chunk in (header, *records(captured)):
                handle.write(chunk)
                crc = zlib.crc32(chunk, crc)
                size += len(chunk)
            handle.write(FOOTER.pack(FOOTER_MAGIC, crc))
            size += FOOTER.size
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    fsync_directory(directory)
    return size


def fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise PersistenceError(f"cannot read: {exc.strerror}", path) from None


def verify(data: bytes, path: str = "") -> int:
    """Check header, footer and whole-file checksum; returns where the records start."""
    if len(data) < FILE_HEADER.size + FOOTER.size:
        raise CorruptFile(f"too short to be a snapshot ({len(data)} bytes)", path, 0)
    magic, version, _flags, _created = FILE_HEADER.unpack_from(data, 0)
    if magic != FILE_MAGIC:
        raise CorruptFile("not a tstream snapshot (bad magic)", path, 0)
    if version != VERSION:
        raise CorruptFile(f"unsupported snapshot version {version}", path, 8)
    end = len(data) - FOOTER.size
    footer_magic, crc = FOOTER.unpack_from(data, end)
    if footer_magic != FOOTER_MAGIC:
        raise CorruptFile("missing end marker (truncated file?)", path, end)
    if zlib.crc32(memoryview(data)[:end]) != crc:
        # Find the first bad record to say where the damage is.
        try:
            for _ in iter_frames(memoryview(data)[:end], FILE_HEADER.size, path):
                pass
        except (CorruptFile, TornTail) as exc:
            raise CorruptFile(f"checksum mismatch: {exc}", path, exc.offset) from None
        raise CorruptFile("checksum mismatch in the file header or footer", path, end)
    return FILE_HEADER.size


def load(data: bytes, path: str = "") -> dict[bytes, Stream]:
    """Rebuild every stream of a snapshot. Raises PersistenceError naming file and offset."""
    start = verify(data, path)
    body = memoryview(data)[: len(data) - FOOTER.size]
    streams: dict[bytes, Stream] = {}
    pending: dict | None = None  # the stream being assembled: meta + node blobs + groups
    ended = False

    def finish(at: int) -> None:
        nonlocal pending
        if pending is None:
            return
        state = pending["meta"]
        state["config"] = {k.decode() if isinstance(k, bytes) else k: v for k, v in state["config"].items()}
        state["nodes"] = pending["nodes"]
        try:
            stream = Stream.from_state(state)
            for group_state in pending["groups"]:
                group = Group.from_state(group_state)
                stream.groups[group.name] = group
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptFile(f"stream {pending['key']!r} does not rebuild: {exc}", path, at) from None
        streams[pending["key"]] = stream
        pending = None

    # verify() checked the whole-file checksum: the records need no second pass.
    for offset, payload in iter_frames(body, start, path, check_crc=False):
        if ended:
            raise CorruptFile("records after the end record", path, offset)
        kind = bytes(payload[:1])
        try:
            if kind == KIND_STREAM:
                finish(offset)
                key, meta = unpack(payload[1:])
                meta = {k.decode(): v for k, v in meta.items()}
                pending = {"key": key, "meta": meta, "nodes": [], "groups": []}
            elif kind == KIND_NODE:
                (bitmap_len,) = _NODE_PREFIX.unpack_from(payload, 1)
                at = 1 + _NODE_PREFIX.size
                bitmap = bytes(payload[at : at + bitmap_len]) or None
                # A view: Node.from_blob copies what it keeps, once.
                pending["nodes"].append((payload[at + bitmap_len :], bitmap))
            elif kind == KIND_GROUP:
                key, group_state = unpack(payload[1:])
                group_state = {k.decode(): v for k, v in group_state.items()}
                if key != pending["key"]:
                    raise ValueError("group of another stream")
                pending["groups"].append(group_state)
            elif kind == KIND_END:
                finish(offset)
                if unpack(payload[1:]) != len(streams):
                    raise ValueError("key count does not match")
                ended = True
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except CorruptFile:
            raise
        except (ValueError, TypeError, KeyError, struct.error) as exc:
            raise CorruptFile(f"bad record: {exc}", path, offset) from None
    if not ended:
        raise CorruptFile("no end record", path, len(body))
    return streams


def load_file(path: str) -> dict[bytes, Stream]:
    return load(read_file(path), path)


def _packb(value) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


__all__ = ["capture", "write", "load", "load_file", "verify", "records"]
