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

1. on the loop: open a new incr file, write a manifest listing the old base,
   the old incr files and the new one, and only then point new records at it
   (if either step fails, records keep going to the old file: the rewrite
   failed, nothing else changed);
2. on the loop: capture the keyspace (see persistence.snapshot);
3. in a worker thread: write the capture as the new base;
4. on the loop: write a manifest with just the new base and the new incr file,
   then delete the old files.

A crash at any point leaves a manifest whose files replay to the latest state.
Files a crash leaves outside the manifest (temp files, a new incr or base file
never named) are deleted at the next start (``remove_strays``).

Every file operation goes through a ``persistence.fileops.FileOps`` (the
fault-injection seam); how the writer survives a failing disk is drawn in
``AppendOnlyFile``.

``fsync`` policies: ``always`` fsyncs what the event-loop turns wrote (group
commit: the server's fsync thread, one fsync at a time, ``detach_sync``), before
any reply that could reveal those records leaves; ``everysec`` writes every turn and fsyncs
from a background thread once a second; ``no`` leaves flushing to the OS.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import struct
import threading
import zlib
from dataclasses import dataclass

from tstream.engine import Keyspace

from . import crcahead, effects, snapshot
from .fileops import FileOps
from .framing import HEADER, CorruptFile, Packer, PersistenceError, TornTail, iter_frames, unpack
from .sealer import BackgroundSealer

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
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise PersistenceError(f"cannot read the manifest: {exc.strerror}", path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptFile("the manifest is not UTF-8 text (damaged?)", path, exc.start) from None
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


def write_manifest(directory: str, entries: list[ManifestEntry], ops: FileOps | None = None) -> None:
    """Replace the manifest durably: temp file, fsync, rename, directory fsync.
    Raises OSError; the old manifest then still describes a complete history
    (or, when only the directory fsync failed, the new one may already)."""
    text = "".join(f"file {e.name} seq {e.seq} type {e.kind}\n" for e in entries)
    (ops or FileOps()).write_file(os.path.join(directory, MANIFEST), text.encode(), step="manifest")


_FILE_NAME = re.compile(r"appendonly\.aof\.(\d+)\.(base\.tsr|incr\.aof)")


def seqs_on_disk(directory: str) -> list[int]:
    """The seqs of every AOF file in ``directory``, named by a manifest or not."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [int(match.group(1)) for match in map(_FILE_NAME.fullmatch, names) if match]


def remove_strays(directory: str, named: list[ManifestEntry], ops: FileOps | None = None) -> list[str]:
    """Delete what a crash or a failed step left in the AOF directory: temp
    files of snapshots and manifests, and AOF files the manifest does not name
    (``named``: the manifest's entries; none when there is no manifest yet).
    Returns the names deleted."""
    ops = ops or FileOps()
    keep = {entry.name for entry in named}
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        if name in keep:
            continue
        if snapshot.is_temp_name(name) or name == MANIFEST + ".tmp" or _FILE_NAME.fullmatch(name):
            try:
                ops.unlink(os.path.join(directory, name))
                removed.append(name)
            except OSError as exc:
                log.warning("could not delete the stray file %s: %s", name, exc)
    return removed


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


_STORED_CRC = struct.Struct("<I").unpack_from  # a frame's crc, 6 bytes into its header (framing.HEADER)
_HEADER_SIZE = HEADER.size
_CRC_PIECE = 5120  # zlib.crc32 lets the GIL go above this


def _crc(payload) -> int:
    """zlib.crc32 of a record's payload, in pieces that keep the GIL: the
    load's sealer thread (persistence/sealer.py) would take it at every
    record, and the loading thread wait for it to come back."""
    if len(payload) <= _CRC_PIECE:
        return zlib.crc32(payload)
    crc = 0
    for i in range(0, len(payload), _CRC_PIECE):
        crc = zlib.crc32(payload[i:i + _CRC_PIECE], crc)
    return crc


def _map_file(path: str):
    """An incr file's bytes for the load: the file mapped read-only (its
    page-cache pages, not a copy: reading 1 GB into fresh memory costs
    about a second of page faults and copying before the first record
    applies), or read whole where it cannot be mapped (an empty file, a
    file system without mmap).  The mapping goes when the last view of it
    does (a failed load's traceback may hold one a while: it is never read
    again)."""
    try:
        with open(path, "rb") as handle:
            try:
                return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # empty (ValueError), or not mappable
                return handle.read()
    except OSError as exc:
        raise PersistenceError(f"cannot read: {exc.strerror}", path) from None


def _cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
        return os.cpu_count() or 1


def load(directory: str, truncate_torn_tail: bool = True, background_seal: bool | None = None) -> LoadResult:
    """Rebuild the keyspace from the manifest's files.

    A torn last record of the last incr file is cut off (when allowed) with a
    warning; any other damage raises PersistenceError naming the file and offset,
    and no file is changed.  ``background_seal``: nodes sealed by the replay
    compress in a second thread (persistence/sealer.py; the same keyspace
    either way); None: when the process may run on more than one CPU.
    """
    entries = read_manifest(directory)
    keyspace = Keyspace()
    for entry in entries:
        if not os.path.exists(os.path.join(directory, entry.name)):
            raise PersistenceError("the manifest names a file that does not exist",
                                   os.path.join(directory, entry.name))
    # Seals compress in a thread meanwhile (persistence/sealer.py): the
    # keyspace ends as sealing at once leaves it.
    if background_seal is None:
        background_seal = _cores() > 1
    sealer = BackgroundSealer(keyspace.cache).open() if background_seal else None
    try:
        count, truncated = _load_files(directory, entries, keyspace, truncate_torn_tail, sealer)
    except BaseException:
        if sealer is not None:
            sealer.close(complete=False)
        raise
    if sealer is not None:
        sealer.close()
    return LoadResult(keyspace, entries, count, truncated)


def _load_files(directory: str, entries: list[ManifestEntry], keyspace: Keyspace, truncate_torn_tail: bool,
                sealer: BackgroundSealer | None) -> tuple[int, tuple[str, int] | None]:
    """:func:`load`'s reading and replaying: (records, torn tail cut)."""
    counted = [0]  # records applied (as they are: a torn tail keeps those before it)
    truncated = None
    for i, entry in enumerate(entries):
        path = os.path.join(directory, entry.name)
        if entry.kind == "b":
            if sealer is not None:
                sealer.settle_all()
            for key, stream in snapshot.load_file(path).items():
                keyspace.put(key, stream)
            continue
        data = _map_file(path)
        last_file = i == len(entries) - 1
        # Runs of appends to one key go to the engine in one call (effects.Replay);
        # whatever stops the reading applies the run held first, so that the
        # first bad record is the one reported, as record by record.
        replay = effects.Replay(keyspace, before_other=None if sealer is None else sealer.settle_all)
        # A big file's CRCs are checked ahead in a helper process
        # (persistence/crcahead.py); a frame it has not verified (yet) is
        # checked here, so a bad one is reported here, at its offset.
        ahead = crcahead.CrcAhead(path) if sealer is not None and len(data) >= crcahead.MIN_BYTES else None
        try:
            try:
                _replay_frames(data, path, replay, ahead, counted)
            finally:
                if ahead is not None:
                    ahead.close()  # (before a torn tail is cut off)
                replay.flush()
        except effects.ReplayError as exc:
            raise CorruptFile(f"record does not replay: {exc}", path, exc.where) from None
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
    return counted[0], truncated


def _replay_frames(data, path: str, replay: effects.Replay, ahead: crcahead.CrcAhead | None,
                   counted: list[int]) -> None:
    """Check and apply the records of one incr file's ``data``, counted in
    ``counted[0]`` as they apply.  A frame ``ahead`` has verified is not
    checked again."""
    verified = 0
    for offset, payload in iter_frames(data, 0, path, check_crc=False):
        end = offset + _HEADER_SIZE + len(payload)
        if end > verified and ahead is not None:
            verified = ahead.verified()
        if end > verified and _crc(payload) != _STORED_CRC(data, offset + 6)[0]:
            replay.flush()
            raise CorruptFile("record checksum mismatch", path, offset)
        try:
            record = unpack(payload)
        except ValueError as exc:
            replay.flush()
            raise CorruptFile(f"record does not replay: {exc}", path, offset) from None
        replay.apply(record, offset)
        counted[0] += len(record) - 1 if record[0] == effects.BUNDLE else 1


def records_of(data, path: str = "") -> list:
    """Every record of an AOF file's ``data``, in order, the records of each
    BUNDLE in its place (raises TornTail / CorruptFile as ``iter_frames``)."""
    return effects.unbundled([unpack(payload) for _, payload in iter_frames(data, 0, path)])


# --- writing ----------------------------------------------------------------------


class AppendOnlyFile:
    """The open AOF: collects a turn's records, writes and syncs them.

    Failure rules (no acknowledged record is ever dropped or misplaced):

    - a write that fails keeps every unwritten byte (``unwritten``) and cuts a
      short write back to the last whole record, so the file never holds a
      partial record followed by others; the next ``write_buffer`` retries;
    - ``write_errno`` / ``fsync_errno`` say why the last write / fsync failed
      (0 once one succeeds): the server refuses writes meanwhile (MISCONF);
    - records only ever go to a file the manifest on disk names (or, before
      the very first base exists, to the one file that base will be paired
      with): a new incr file is opened, the manifest naming it written
      durably, and only then are records pointed at it; a failure of either
      step leaves records going to the old file, and the rewrite fails.
    """

    def __init__(self, directory: str, fsync: str, ops: FileOps | None = None) -> None:
        self.directory = directory
        self.fsync_policy = fsync
        self.ops = ops or FileOps()
        self.entries: list[ManifestEntry] = []  # what the manifest on disk names (none yet: empty)
        # The files of an older history the manifest on disk still names while this
        # AOF has no base yet (appendonly turned on again): kept, their seqs not
        # reused, deleted once the first rewrite replaced that manifest.
        self.replaces: list[ManifestEntry] = []
        self.current: ManifestEntry | None = None  # the incr file records go to
        self.fd = -1
        self.records: list[list] = []  # logged this turn, packed when written
        self.pack = Packer()  # (framing.pack, reusing its msgpack packer)
        self.unwritten = b""  # packed records a failed write left behind (whole records)
        self.offset = 0        # bytes of whole records in the current incr file
        self.size = 0          # bytes in the incr files since the base (for automatic rewrites)
        self.base_size = 0     # bytes of the base
        self.write_errno = 0   # errno of the last failed write (0: the last write succeeded)
        self.fsync_errno = 0   # errno of the last failed fsync (0: the last fsync succeeded)
        self._lock = threading.Lock()  # the fsync thread and the loop share the fd
        self._unsynced = False
        self.unsynced_bytes = 0  # written since the last fsync
        self.last_sync_bytes = 0  # what the last fsync made durable

    @property
    def last_write_ok(self) -> bool:
        return not self.write_errno and not self.fsync_errno

    @property
    def pending_bytes(self) -> int:
        return len(self.unwritten)

    # setup

    def open_existing(self, entries: list[ManifestEntry]) -> None:
        """Continue the history a successful load read."""
        self.entries = list(entries)
        last = entries[-1]
        if last.kind != "i":  # a base alone: start an incr file after it, named first
            self._switch_to_new_incr(last.seq)
        else:
            fd = self.ops.open(os.path.join(self.directory, last.name), os.O_WRONLY | os.O_APPEND,
                               step="open-existing")
            self.current, self.fd = last, fd
            self.offset = os.fstat(fd).st_size
        base = entries[0]
        if base.kind == "b":
            self.base_size = os.path.getsize(os.path.join(self.directory, base.name))
        self.size = sum(os.path.getsize(os.path.join(self.directory, e.name)) for e in entries if e.kind == "i")

    def _open_new_incr(self, name: str) -> int:
        """A new, empty incr file (a stale one of the same name, left by a
        crash or a failed step, is emptied: it was never part of a history)."""
        return self.ops.open(os.path.join(self.directory, name),
                             os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644, step="open-incr")

    def _switch_to_new_incr(self, seq: int) -> None:
        """Point records at a new incr file ``seq``, after a manifest naming it
        is durable (when a manifest exists).  Raises OSError with nothing
        changed: records keep going to the current file."""
        entry = ManifestEntry(incr_name(seq), seq, "i")
        fd = self._open_new_incr(entry.name)
        if self.entries:
            try:
                write_manifest(self.directory, self.entries + [entry], self.ops)
            except BaseException:
                # The new file stays (empty): if only the directory fsync failed the
                # manifest on disk may name it, and an empty incr file replays to nothing.
                self.ops.close(fd)
                raise
            self.entries.append(entry)
        with self._lock:
            old_fd, old = self.fd, self.current
            self.fd, self.current, self.offset = fd, entry, 0
            self._unsynced = False
        if old_fd >= 0:
            self.ops.close(old_fd)
        if old is not None and old not in self.entries:  # never named by a manifest: no history
            try:
                self.ops.unlink(os.path.join(self.directory, old.name))
            except OSError as exc:
                log.warning("could not delete the unused AOF file %s: %s", old.name, exc)

    # the hot path

    def log(self, record: list) -> None:
        """Queue one effect record; it reaches the file at the end of this loop turn."""
        self.records.append(record)

    def take_packed(self, records: list, packed: bytes) -> bool:
        """``packed``: ``records`` already packed (the replication stream packs a turn's
        records once, for itself and for this file).  Taken when they are exactly
        the records logged here since the last write, in order; else False (and
        ``write_buffer`` packs its own)."""
        mine = self.records
        if len(mine) != len(records) or any(a is not b for a, b in zip(mine, records)):
            return False
        mine.clear()
        self.unwritten = self.unwritten + packed if self.unwritten else packed
        return True

    def write_buffer(self) -> None:
        """Write what was logged and not written yet (no fsync).

        Raises OSError (or MemoryError while packing) and keeps everything
        not written for the next call; a short write is cut back to the last
        whole record (or, if that fails too, its written part is counted so
        the next write completes the record)."""
        if self.records:
            packed = self.pack(effects.bundled(self.records))  # (a turn's records: one frame)
            self.records.clear()
            self.unwritten = self.unwritten + packed if self.unwritten else packed
        data = self.unwritten
        if not data:
            self.write_errno = 0  # nothing left that failed to be written
            return
        with self._lock:
            written = 0
            view = memoryview(data)
            try:
                while written < len(data):
                    written += self.ops.write(self.fd, view[written:])
            except OSError as exc:
                self.write_errno = exc.errno or 5
                if written:
                    self._undo_short_write(data, written)
                raise
            finally:
                view.release()
            self._unsynced = True
            self.unsynced_bytes += len(data)
            self.offset += len(data)
        self.size += len(data)
        self.unwritten = b""
        self.write_errno = 0

    def _undo_short_write(self, data: bytes, written: int) -> None:
        try:
            self.ops.truncate(self.fd, self.offset)
            log.warning("short write to the append-only file (%d of %d bytes): truncated back to "
                        "%d bytes, the last whole record", written, len(data), self.offset)
        except OSError as exc:
            # The file keeps the written prefix: the retry appends the rest, so the
            # record ends up whole (a crash before that leaves a torn tail).
            log.warning("could not truncate a short write of the append-only file (%s): the next "
                        "write completes it", exc)
            self.unwritten = data[written:]
            self.offset += written
            self.size += written

    def sync(self) -> None:
        """fsync the current incr file if anything was written since the last one."""
        with self._lock:
            if self._unsynced and self.fd >= 0:
                try:
                    self.ops.fsync(self.fd)
                except OSError as exc:
                    self.fsync_errno = exc.errno or 5
                    raise
                self._unsynced = False
                self.fsync_errno = 0
                self.last_sync_bytes, self.unsynced_bytes = self.unsynced_bytes, 0

    def detach_sync(self) -> tuple[int, int]:
        """For an fsync made by someone else (``appendfsync always``: the server's
        fsync thread, which ends the process if it fails): the fd to fsync and the
        bytes written since the last fsync, counted as synced from now on; (-1, 0)
        when nothing was written since.  The caller makes sure the fd stays open
        (no rewrite switches files, no ``close``) until that fsync returns."""
        with self._lock:
            if not self._unsynced or self.fd < 0:
                return -1, 0
            self._unsynced = False
            covered, self.unsynced_bytes = self.unsynced_bytes, 0
            return self.fd, covered

    def close(self) -> None:
        try:
            self.write_buffer()
            self.sync()
        finally:
            if self.fd >= 0:
                self.ops.close(self.fd)
                self.fd = -1

    # rewrites

    def begin_rewrite(self) -> int:
        """Step 1 of a rewrite: new records go to a fresh incr file. Returns the
        seq of the base to write (captured right after this returns).

        Raises OSError with nothing changed (records keep going to the current
        file).  With no history yet (the AOF is being turned on), no manifest
        is written until the base exists: a crash before that leaves the AOF
        off, as it was.  When nothing was written to the current incr file
        since it began, the base can take its place: no new file, so failed
        rewrites retried on an idle server do not grow the manifest.
        """
        self.write_buffer()
        self.sync()
        if self.current is not None and self.offset == 0:
            self.size = 0
            return self.current.seq
        seqs = [e.seq for e in self.entries + self.replaces] + ([self.current.seq] if self.current is not None else [])
        if not self.entries:  # no history of ours yet: never reuse the name of a file still here
            seqs += seqs_on_disk(self.directory)
        seq = max(seqs) + 1 if seqs else 1
        self._switch_to_new_incr(seq)
        self.size = 0
        return seq

    def finish_rewrite(self, seq: int, base_size: int) -> None:
        """Step 4: the base of ``seq`` is written: a manifest naming it and the
        incr files from ``seq`` on, then the old files go.  Raises OSError
        (the rewrite failed) with the old history still complete."""
        incrs = [e for e in self.entries if e.kind == "i" and e.seq >= seq]
        if self.current is not None and self.current not in incrs:
            incrs.append(self.current)
        new_entries = [ManifestEntry(base_name(seq), seq, "b")] + incrs
        write_manifest(self.directory, new_entries, self.ops)
        old = [e for e in self.entries + self.replaces if e not in new_entries]
        self.entries = new_entries
        self.replaces = []
        self.base_size = base_size
        for entry in old:
            try:
                self.ops.unlink(os.path.join(self.directory, entry.name))
            except OSError as exc:
                log.warning("could not delete the old AOF file %s: %s", entry.name, exc)
