"""The multi-part append-only file, like Redis 7's.

    dir/appendonlydir/
        appendonly.aof.manifest            which files, in which order
        appendonly.aof.3.base.tsr          a snapshot (persistence.snapshot format)
        appendonly.aof.3.incr.aof          framed effect records appended since that base

Manifest lines (Redis's format): ``file <name> seq <n> type b|i``.  It is
replaced atomically (temp file, fsync, rename, directory fsync), so at any time
the directory describes a complete history.

A rewrite (BGREWRITEAOF, or automatic when the incremental files outgrow the
base) never loses a record and never stalls clients:

1. on the loop: open a new incr file and point new records at it; write a
   manifest listing the old base, the old incr files and the new one;
2. on the loop: capture the keyspace (see persistence.snapshot);
3. in a worker thread: write the capture as the new base;
4. on the loop: write a manifest with just the new base and the new incr file,
   then delete the old files.

A crash at any point leaves a manifest whose files replay to the latest state.

``fsync`` policies: ``always`` fsyncs once per event-loop turn (group commit),
before any reply of that turn leaves; ``everysec`` writes every turn and fsyncs
from a background thread once a second; ``no`` leaves flushing to the OS.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass

from tstream.engine import Keyspace

from . import effects, snapshot
from .framing import CorruptFile, PersistenceError, TornTail, iter_frames, pack, unpack

log = logging.getLogger("tstream.aof")

MANIFEST = "appendonly.aof.manifest"
_LINE = re.compile(r"file (\S+) seq (\d+) type ([bi])")


@dataclass
class ManifestEntry:
    name: str
    seq: int
    kind: str  # "b" base, "i" incremental


def read_manifest(directory: str) -> list[ManifestEntry]:
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise PersistenceError(f"cannot read the manifest: {exc.strerror}", path) from None
    entries = []
    offset = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            match = _LINE.fullmatch(stripped)
            if match is None or "/" in match.group(1):
                raise CorruptFile(f"bad manifest line {stripped[:80]!r}", path, offset)
            entries.append(ManifestEntry(match.group(1), int(match.group(2)), match.group(3)))
        offset += len(line.encode())
    if not entries:
        raise CorruptFile("the manifest lists no file", path, 0)
    if sum(1 for e in entries if e.kind == "b") > 1 or any(e.kind == "b" for e in entries[1:]):
        raise CorruptFile("the manifest must list at most one base, first", path, 0)
    return entries


def write_manifest(directory: str, entries: list[ManifestEntry]) -> None:
    path = os.path.join(directory, MANIFEST)
    temp = path + ".tmp"
    with open(temp, "w", encoding="utf-8") as handle:
        for entry in entries:
            handle.write(f"file {entry.name} seq {entry.seq} type {entry.kind}\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    snapshot.fsync_directory(directory)


def base_name(seq: int) -> str:
    return f"appendonly.aof.{seq}.base.tsr"


def incr_name(seq: int) -> str:
    return f"appendonly.aof.{seq}.incr.aof"


# --- loading ----------------------------------------------------------------------


@dataclass
class LoadResult:
    keyspace: Keyspace
    entries: list[ManifestEntry]
    records: int
    truncated_at: tuple[str, int] | None  # (file, offset) of a torn tail that was cut


def load(directory: str, truncate_torn_tail: bool = True) -> LoadResult:
    """Rebuild the keyspace from the manifest's files.

    A torn last record of the last incr file is cut off (when allowed) with a
    warning; any other damage raises PersistenceError naming the file and offset,
    and no file is changed.
    """
    entries = read_manifest(directory)
    keyspace = Keyspace()
    for entry in entries:
        if not os.path.exists(os.path.join(directory, entry.name)):
            raise PersistenceError("the manifest names a file that does not exist",
                                   os.path.join(directory, entry.name))
    count = 0
    truncated = None
    for i, entry in enumerate(entries):
        path = os.path.join(directory, entry.name)
        if entry.kind == "b":
            for key, stream in snapshot.load_file(path).items():
                keyspace.put(key, stream)
            continue
        data = snapshot.read_file(path)
        last_file = i == len(entries) - 1
        try:
            for offset, payload in iter_frames(data, 0, path):
                try:
                    effects.apply(keyspace, unpack(payload))
                except (effects.ReplayError, ValueError) as exc:
                    raise CorruptFile(f"record does not replay: {exc}", path, offset) from None
                count += 1
        except TornTail as torn:
            if not last_file:
                raise CorruptFile(f"torn record in the middle of the history: {torn}", path, torn.offset) from None
            if not truncate_torn_tail:
                raise PersistenceError(
                    "the last record is incomplete (a crash mid-write); start with "
                    "aof-load-truncated yes or run tstream-check --fix", path, torn.offset) from None
            log.warning("%s: the last record (from offset %d, %d bytes) is incomplete, probably a crash "
                        "while writing it: truncating the file to %d bytes",
                        path, torn.offset, len(data) - torn.offset, torn.offset)
            with open(path, "r+b") as handle:
                handle.truncate(torn.offset)
                handle.flush()
                os.fsync(handle.fileno())
            truncated = (path, torn.offset)
    return LoadResult(keyspace, entries, count, truncated)


# --- writing ----------------------------------------------------------------------


class AppendOnlyFile:
    """The open AOF: buffers records during a loop turn, writes and syncs them."""

    def __init__(self, directory: str, fsync: str) -> None:
        self.directory = directory
        self.fsync_policy = fsync
        self.entries: list[ManifestEntry] = []
        self.fd = -1
        self.buffer: list[bytes] = []
        self.size = 0          # bytes in the current incr files
        self.base_size = 0     # bytes of the base (for automatic rewrites)
        self.last_write_ok = True
        self._lock = threading.Lock()  # the fsync thread and the loop share the fd
        self._unsynced = False

    # setup

    def open_existing(self, entries: list[ManifestEntry]) -> None:
        """Continue the history a successful load read."""
        self.entries = entries
        last = entries[-1]
        if last.kind != "i":  # a base alone: start an incr file after it
            self._start_incr(last.seq)
            write_manifest(self.directory, self.entries)
        else:
            self._open_incr(last.name)
        base = entries[0]
        if base.kind == "b":
            self.base_size = os.path.getsize(os.path.join(self.directory, base.name))
        self.size = sum(os.path.getsize(os.path.join(self.directory, e.name)) for e in entries if e.kind == "i")

    def _start_incr(self, seq: int) -> None:
        entry = ManifestEntry(incr_name(seq), seq, "i")
        self.entries.append(entry)
        self._open_incr(entry.name)

    def _open_incr(self, name: str) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd = os.open(os.path.join(self.directory, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    # the hot path

    def log(self, record: list) -> None:
        """Queue one effect record; it reaches the file at the end of this loop turn."""
        self.buffer.append(pack(record))

    def write_buffer(self) -> None:
        """Write what this turn logged (no fsync). Raises OSError on failure."""
        if not self.buffer:
            return
        data = b"".join(self.buffer)
        self.buffer.clear()
        with self._lock:
            view = memoryview(data)
            while view:
                written = os.write(self.fd, view)
                view = view[written:]
            self._unsynced = True
        self.size += len(data)

    def sync(self) -> None:
        """fsync the current incr file if anything was written since the last one."""
        with self._lock:
            if self._unsynced and self.fd >= 0:
                os.fsync(self.fd)
                self._unsynced = False

    def close(self) -> None:
        self.write_buffer()
        self.sync()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # rewrites

    def begin_rewrite(self) -> int:
        """Step 1 of a rewrite: new records go to a fresh incr file. Returns the new seq.

        With no history yet (the AOF is being turned on), no manifest is written
        until the base exists: a crash before that leaves the AOF off, as it was.
        """
        self.write_buffer()
        self.sync()
        had_history = bool(self.entries)
        seq = max(e.seq for e in self.entries) + 1 if had_history else 1
        self._start_incr(seq)
        if had_history:
            write_manifest(self.directory, self.entries)
        self.size = 0
        return seq

    def finish_rewrite(self, seq: int, base_size: int) -> None:
        """Step 4: the base of ``seq`` is written: forget the files before it."""
        old = [e for e in self.entries if e.seq < seq]
        self.entries = [ManifestEntry(base_name(seq), seq, "b")] + [e for e in self.entries if e.seq >= seq]
        write_manifest(self.directory, self.entries)
        self.base_size = base_size
        for entry in old:
            try:
                os.unlink(os.path.join(self.directory, entry.name))
            except OSError as exc:
                log.warning("could not delete the old AOF file %s: %s", entry.name, exc)
