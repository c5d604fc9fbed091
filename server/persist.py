"""Persistence in the running server: loading at startup, SAVE/BGSAVE, save points,
the append-only file's group commit and rewrites, and the final save at shutdown.

The file formats live in ``persistence/``; this module decides *when* things are
written, on the event loop, with the slow parts (writing a snapshot, fsync every
second) in worker threads.

Group commit: the records logged by every command of one event-loop turn are
written with one ``write`` at the end of the turn, and the replies of that turn
are held until then (server.turns), so no client hears "done" before its change
is in the file.  With ``appendfsync always`` the end of the turn hands the
fsync to a thread (one fsync in flight at a time; the turns written meanwhile
join the next one) and the loop goes on serving; the replies held for those
turns are released when their fsync has returned (``synced``).  A read whose
keys have no change waiting for an fsync is answered at once
(``settled``): it reveals nothing that is not on disk.  See
docs/operations.md, "appendfsync always: the fsync off the event loop".

When the disk fails, as in Redis: records that could not be written stay in
memory and are retried every 100 ms (cron) while write commands get MISCONF
(``write_error``); with ``always`` the process exits instead of releasing
replies it promised were durable.  A failed BGSAVE refuses writes while save
points are set (``stop-writes-on-bgsave-error``).  A failed rewrite leaves the
old history in use and automatic rewrites back off (60 s, doubling to an hour).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import queue
import threading
import time

from tstream.commands.errors import CommandError
from tstream.commands.flags import WRITE
from tstream.persistence import aof, effects, snapshot
from tstream.persistence.fileops import FileOps
from tstream.persistence.framing import PersistenceError

from .snapshotjob import SnapshotJob

log = logging.getLogger("tstream.persistence")

# Redis's MISCONF replies, with tstream's words for its snapshot ("RDB") files.
# The AOF one keeps Redis's text exactly ("-MISCONF Errors writing to the AOF
# file: <strerror>"); the snapshot one says "tstream" and "snapshots" where
# Redis says "Redis" and "RDB snapshots", and keeps the rest of its sentence.
MISCONF_SNAPSHOT = (
    "MISCONF tstream is configured to save snapshots, but it's currently unable to persist to disk. "
    "Commands that may modify the data set are disabled, because this instance is configured to report "
    "errors during writes if snapshotting fails (stop-writes-on-bgsave-error option). Please check the "
    "tstream logs for details about the snapshot error.")
MISCONF_AOF = "MISCONF Errors writing to the AOF file: {}"

# A failed automatic AOF rewrite is not retried before this many seconds, doubled
# after each further failure up to the maximum (Redis limits its retries too).
REWRITE_RETRY_DELAY = 60.0
REWRITE_RETRY_MAX_DELAY = 3600.0
# The first rewrite of an AOF just turned on is retried this long after a failure.
FIRST_REWRITE_RETRY_DELAY = 5.0
# After a failed BGSAVE, save points try again no sooner than this (Redis: 5 s).
BGSAVE_RETRY_DELAY = 5.0


class Persistence:
    def __init__(self, server) -> None:
        self.server = server
        self.file: aof.AppendOnlyFile | None = None
        self.last_save = int(time.time())
        self.last_bgsave_ok = True
        self.last_bgsave_seconds = -1
        self.bgsave_started: float | None = None
        self.rewrite_started: float | None = None
        self.rewrite_scheduled = False
        # A change is in memory that the AOF could not be told (MemoryError while
        # recording it, commands.writes): writes are refused (MISCONF) until a
        # rewrite started after that moment puts memory in a new base.
        self.log_behind_since: float | None = None
        self.last_rewrite_ok = True
        self.last_rewrite_seconds = -1
        self._fsync_thread: threading.Thread | None = None
        self._stop_fsync = threading.Event()
        # Every file step goes through this object (a test hands the server one
        # that fails chosen steps: tests/test_faults.py).
        self.file_ops = FileOps()
        self.rewrite_failures = 0  # consecutive failed rewrites
        self.next_auto_rewrite = 0.0  # monotonic time before which no automatic rewrite starts
        # The MISCONF error write commands get, or None (commands.dispatch reads it
        # on every write command: kept up to date by _update_write_gate).
        self.denied_writes: str | None = None
        self.last_bgsave_try = 0.0  # monotonic time of the last failed BGSAVE
        self._loop: asyncio.AbstractEventLoop | None = None
        # The replication id and offset the loaded data stands for (a snapshot's aux
        # fields), or None: server.replication picks them up when it starts.
        self.loaded_repl: dict | None = None
        # appendfsync always: the records go to the file in numbered units (a loop
        # turn's, or what the cron wrote); ``turn`` collects records now, ``written``
        # is the last unit written, ``synced`` the last one an fsync made durable.
        self.turn = 1
        self.written = 0
        self.synced = 0
        self.tracking = False  # key_turns kept (appendfsync always, Persistence.attach)
        self.key_turns: dict[bytes, int] = {}  # key -> the last unit with a record of it
        self.barrier = 0  # the last unit with a record of no one key (FLUSHALL): every read waits for it
        self._prune_at = 4096  # key_turns' size at which the synced keys are dropped
        self._syncing = 0  # the unit the fsync in flight covers (0: none in flight)
        self._sync_jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._sync_idle = threading.Event()
        self._sync_idle.set()
        self._sync_result = (0, 0)  # (bytes covered, ns taken) of the last fsync of the thread
        self._sync_thread: threading.Thread | None = None

    # --- paths ----------------------------------------------------------------------

    @property
    def dir(self) -> str:
        return self.server.config["dir"]

    @property
    def snapshot_path(self) -> str:
        return os.path.join(self.dir, self.server.config["dbfilename"])

    @property
    def aof_dir(self) -> str:
        return os.path.join(self.dir, self.server.config["appenddirname"])

    # --- startup --------------------------------------------------------------------

    def load(self) -> None:
        """Load the AOF when enabled (else the snapshot). Raises PersistenceError."""
        os.makedirs(self.dir, exist_ok=True)
        config = self.server.config
        started = time.monotonic()
        manifest = os.path.join(self.aof_dir, aof.MANIFEST)
        for name in snapshot.remove_temp_files(self.dir, self.file_ops):
            log.warning("removed %s, the temp file of a snapshot that never finished", name)
        if config["appendonly"] and os.path.exists(manifest):
            result = aof.load(self.aof_dir, truncate_torn_tail=config["aof-load-truncated"])
            self._install(result.keyspace.items())
            for name in aof.remove_strays(self.aof_dir, result.entries, self.file_ops):
                log.warning("removed %s from %s: a leftover of a rewrite that never finished", name, self.aof_dir)
            self.loaded_repl = self._aof_repl_state(result.entries)
            self.file = aof.AppendOnlyFile(self.aof_dir, config["appendfsync"], self.file_ops)
            self.file.open_existing(result.entries)
            log.info("DB loaded from append only file: %d keys, %d records, %.3f seconds",
                     len(self.server.keyspace), result.records, time.monotonic() - started)
        else:
            if os.path.exists(self.snapshot_path):
                fields: dict = {}
                streams = snapshot.load_file(self.snapshot_path, aux=fields)
                self.loaded_repl = fields if "repl-id" in fields else None
                self._install(streams.items())
                log.info("DB loaded from disk: %d keys, %.3f seconds", len(streams), time.monotonic() - started)
            if config["appendonly"]:
                self._create_aof_now()
        self._start_fsync_thread()

    def _aof_repl_state(self, entries) -> dict | None:
        """The replication id and offset of what the AOF holds: the snapshot's aux
        fields when that snapshot was saved with the AOF exactly as it is now (its
        ``aof`` field: the last file and its size, as a clean shutdown leaves
        them), else the base's when no record follows it; else None."""
        def size(entry) -> int:
            return os.path.getsize(os.path.join(self.aof_dir, entry.name))

        try:
            if os.path.exists(self.snapshot_path) and entries:
                fields = snapshot.read_aux(self.snapshot_path)
                if "repl-id" in fields and fields.get("aof") == [entries[-1].name, size(entries[-1])]:
                    return fields
            if entries and entries[0].kind == "b" and all(size(e) == 0 for e in entries[1:]):
                fields = snapshot.read_aux(os.path.join(self.aof_dir, entries[0].name))
                if "repl-id" in fields:
                    return fields
        except (OSError, PersistenceError) as exc:
            log.warning("replication id and offset not restored: %s", exc)
        return None

    def aux(self) -> dict:
        """The aux fields of a snapshot taken now: the replication id and offset
        (server.replication), and where the AOF ends when all of it is written."""
        fields = self.server.replication.snapshot_aux()
        file = self.file
        if fields and file is not None and file.current is not None and not file.records and not file.unwritten:
            fields["aof"] = [file.current.name, file.offset]
        return fields

    def _install(self, items) -> None:
        keyspace = self.server.keyspace
        fast = self.server.fast
        for key, stream in items:
            keyspace.put(key, stream)
            if stream._ingest is not None:  # fast batches known again: idle ones are abandoned in time
                for batch in stream._ingest.batches.values():
                    batch.key = key
                    fast.track(batch)

    def _create_aof_now(self) -> None:
        """Start an AOF from the current state, synchronously (nothing is served yet)."""
        os.makedirs(self.aof_dir, exist_ok=True)
        # No manifest: whatever AOF files are here (a first rewrite that never
        # finished) belong to no history.
        for name in aof.remove_strays(self.aof_dir, [], self.file_ops):
            log.warning("removed %s from %s: a leftover of a rewrite that never finished", name, self.aof_dir)
        file = aof.AppendOnlyFile(self.aof_dir, self.server.config["appendfsync"], self.file_ops)
        seq = file.begin_rewrite()
        size = snapshot.write(snapshot.capture(self.server.keyspace),
                              os.path.join(self.aof_dir, aof.base_name(seq)), self.file_ops,
                              aux=self.server.replication.snapshot_aux())
        file.finish_rewrite(seq, size)
        self.file = file

    def attach(self) -> None:
        """Make handlers log effects (called once the server is ready to serve)."""
        self.server.aof = self if self.file is not None else None
        # Replies wait for the end of the loop turn (server.turns), when the turn's
        # records are written (and fsynced with "always"): even with "everysec" a
        # client is never told "done" before its change reached the OS, so killing
        # the process (unlike losing the machine) loses nothing acknowledged, as in
        # Redis.  (Without an AOF the replies of pipelined reads wait too: see
        # ClientConnection._run_commands.)
        self.server.hold_replies = self.file is not None
        self.tracking = self.server.sync_early = (self.file is not None and self.file.fsync_policy == "always"
                                                  and bool(self.server.config["aof-fsync-in-thread"]))
        if not self.tracking:
            self.key_turns.clear()
        SnapshotJob.start_writer_thread()  # (not in a BGSAVE's turn)

    # --- the effect log (handlers call server.aof.log) ---------------------------

    def log(self, record: list) -> None:
        self.file.records.append(record)
        if self.tracking:
            self._note(record)
        self.server.turn_end.schedule()

    def _note(self, record: list) -> None:
        """The key ``record`` changes was changed in this unit (a FLUSH: every key)."""
        kind = record[0]
        if kind == effects.FLUSH:
            self.barrier = self.turn
        elif kind == effects.TXN:
            for inner in record[1]:
                self._note(inner)
        else:
            self.key_turns[record[1]] = self.turn

    def settled(self, client, argv: list) -> bool:
        """Whether the reply to ``argv``, just run by ``client``, may leave before the
        fsyncs in flight or to come (``appendfsync always``): it cannot reveal a
        change that is not on disk yet.  True for a command that is not a write,
        not a container's subcommand, names its keys (the table's key spec), runs
        outside MULTI, and none of whose keys has a record in a unit not yet synced
        (nor a FLUSHALL); its own records (a group read's) count as such.  Every
        other reply waits, as all did before: a write, a command without keys
        (INFO, DBSIZE, EXEC...), a pipelined read's replies (the caller asks only
        for a lone command)."""
        if not self.tracking or client.multi is not None:
            return False
        table = self.server.dispatch
        entry = table.get(argv[0]) or table.get(argv[0].lower())
        if entry is None or entry[8] is not None:
            return False
        command = entry[5]
        first, last, step = command.keys
        synced = self.synced
        if not first or command.flags & WRITE or self.barrier > synced:
            return False
        count = len(argv)
        if last < 0:
            last += count
        if last >= count:
            return False
        turns = self.key_turns
        for i in range(first, last + 1, step):
            if turns.get(argv[i], 0) > synced:
                return False
        return True

    def commit_turn(self) -> None:
        """Write (and with ``always``, fsync) this turn's records (called by
        server.turns.TurnEnd before it releases the turn's replies).

        A failure keeps the records for the next try (the cron retries every
        100 ms) and turns MISCONF on for write commands until a write succeeds,
        as Redis does; reads go on.  With ``appendfsync always`` the turn's
        replies were promised durability: the process exits instead (Redis
        too), and none of them is sent."""
        file = self.file
        if file is None or not (file.records or file.unwritten or file.write_errno):
            return
        try:
            file.write_buffer()
            if file.fsync_policy == "always":
                if self.tracking:
                    # The unit's records are in the file: the fsync thread makes them durable
                    # (with those written before, if one is in flight: they join the next).
                    self.written = self.turn
                    self.turn += 1
                    if not self._syncing:
                        self._start_sync()
                else:
                    # aof-fsync-in-thread no (the default): the fsync on the loop, as Redis does;
                    # the turn's replies go out right after it (written == synced).
                    started = time.monotonic_ns()
                    file.sync()
                    threshold = self.server.config["latency-monitor-threshold"]
                    millis = (time.monotonic_ns() - started) // 1_000_000
                    if threshold and millis >= threshold:
                        self.server.latency.record("aof-fsync-always", millis)
        except (OSError, MemoryError) as exc:
            if file.fsync_policy == "always":
                log.critical("Can't recover from AOF write error when the AOF fsync policy is 'always' "
                             "(%s). Exiting...", exc)
                os._exit(1)
            if isinstance(exc, MemoryError):
                file.write_errno = file.write_errno or 12  # ENOMEM: the records wait, unpacked
            if self.denied_writes is None:
                log.warning("Error writing to the AOF file: %s", exc if str(exc) else type(exc).__name__)
            self._update_write_gate()
            return
        if self.denied_writes is not None:
            self._update_write_gate()
            if self.denied_writes is None:
                log.warning("AOF write error looks solved, tstream can write again.")

    # --- appendfsync always: the fsync thread ------------------------------------------

    def _start_sync(self) -> None:
        """Hand the fsync of every unit written so far to the fsync thread (on the loop,
        none in flight)."""
        target = self.written
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # (no loop runs: the shutdown's last commit) on this thread
            self.wait_sync()
            return
        fd, covered = self.file.detach_sync()
        if fd < 0:  # nothing written since the last fsync
            self._synced_through(target)
            return
        self._syncing = target
        self._sync_idle.clear()
        if self._sync_thread is None:
            self._sync_thread = threading.Thread(target=self._sync_worker, name="aof-fsync-always", daemon=True)
            self._sync_thread.start()
        self._sync_jobs.put((self.file.ops, fd, covered, target))

    def _sync_worker(self) -> None:
        """The fsync thread: one job at a time; a failure ends the process (Redis too)
        before any reply waiting for that fsync is sent."""
        while True:
            job = self._sync_jobs.get()
            if job is None:
                return
            ops, fd, covered, target = job
            started = time.monotonic_ns()
            try:
                ops.fsync(fd)
            except BaseException as exc:
                log.critical("Can't recover from AOF write error when the AOF fsync policy is 'always' "
                             "(%s). Exiting...", exc)
                os._exit(1)
            self._sync_result = (covered, time.monotonic_ns() - started)
            self._sync_idle.set()
            self._call_on_loop(self._sync_finished, target)

    def _sync_finished(self, target: int) -> None:
        """On the loop: the fsync of unit ``target`` returned.  Start the next one if
        more was written meanwhile, then release the replies that waited for this one."""
        if target != self._syncing:  # (wait_sync took it already)
            return
        self._syncing = 0
        covered, took = self._sync_result
        if self.file is not None:
            self.file.last_sync_bytes = covered
        threshold = self.server.config["latency-monitor-threshold"]
        if threshold and took // 1_000_000 >= threshold:
            self.server.latency.record("aof-fsync-always", took // 1_000_000)
        self._synced_through(target, release=False)
        if self.written > target and self.file is not None:
            self._start_sync()  # (first: the disk works while the replies go out)
        self.server.turn_end.synced(self.synced)

    def _synced_through(self, unit: int, release: bool = True) -> None:
        if unit > self.synced:
            self.synced = unit
        turns = self.key_turns
        if len(turns) >= self._prune_at:
            synced = self.synced
            self.key_turns = {key: t for key, t in turns.items() if t > synced}
            self._prune_at = max(4096, 2 * len(self.key_turns))
        if release:
            self.server.turn_end.synced(self.synced)

    def wait_sync(self) -> None:
        """Block the loop until everything written is on disk (the fsync in flight, then
        one more for what was written since), and release the replies that waited:
        before a rewrite switches files, a configuration change, the shutdown."""
        while self._syncing:  # (_sync_finished may start the next one)
            self._sync_idle.wait()
            self._sync_finished(self._syncing)
        if self.written > self.synced:
            file = self.file
            if file is not None:
                fd, covered = file.detach_sync()
                if fd >= 0:
                    try:
                        file.ops.fsync(fd)
                    except BaseException as exc:
                        log.critical("Can't recover from AOF write error when the AOF fsync policy is "
                                     "'always' (%s). Exiting...", exc)
                        os._exit(1)
                    file.last_sync_bytes = covered
            self._synced_through(self.written)

    def unsynced_bytes(self) -> int:
        """Bytes of the append-only file not known to be on disk: written and not
        fsynced yet (``everysec``), or the last group commit's (``always``: what
        the last fsync covered, or what waits for one, whichever is more); 0 with
        ``appendfsync no`` or no AOF (fast-ingest flow control reads it)."""
        file = self.file
        if file is None or file.fsync_policy == "no":
            return 0
        if file.fsync_policy == "always":
            return max(file.last_sync_bytes, file.unsynced_bytes) + file.pending_bytes
        return file.unsynced_bytes + file.pending_bytes

    def write_error(self) -> str | None:
        """The MISCONF error write commands get now, or None.

        Redis's rules: a failed BGSAVE blocks writes while save points are set
        and ``stop-writes-on-bgsave-error`` is yes (until a save succeeds); an
        AOF write or fsync error blocks them until a write (fsync) succeeds.
        Reads are never blocked; PING is refused too, as redis-server 7 does.

        The texts (checked against redis-server 7): the AOF error is Redis's
        word for word, ``MISCONF Errors writing to the AOF file: <strerror>``;
        the snapshot error is Redis's sentence with "tstream" for "Redis",
        "snapshots" for "RDB snapshots" and "snapshotting" for "RDB
        snapshotting", so clients that match the ``MISCONF`` prefix (or the
        start of the sentence up to the product name) behave the same."""
        config = self.server.config
        if not self.last_bgsave_ok and config["stop-writes-on-bgsave-error"] and config["save"]:
            return MISCONF_SNAPSHOT
        file = self.file
        if file is not None and (file.write_errno or file.fsync_errno):
            return MISCONF_AOF.format(os.strerror(file.write_errno or file.fsync_errno))
        if file is not None and self.log_behind_since is not None:
            return MISCONF_AOF.format(os.strerror(errno.ENOMEM))
        return None

    def record_lost(self) -> None:
        """A change made in memory could not be recorded for the AOF (out of memory):
        refuse writes (MISCONF) and rewrite the AOF from memory; writes resume once
        a rewrite started after this moment has finished."""
        if self.file is None:
            return
        log.error("out of memory while recording a change for the append-only file: writes are "
                  "refused until an AOF rewrite has saved memory as it is")
        self.log_behind_since = time.monotonic()
        self.rewrite_scheduled = True
        self._update_write_gate()
        asyncio.get_running_loop().call_soon(self._run_scheduled)

    def _update_write_gate(self) -> None:
        self.denied_writes = self.write_error()
        self.server.update_refusing()

    def _start_fsync_thread(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        def run() -> None:
            while not self._stop_fsync.wait(1.0):
                file = self.file
                if file is not None and file.fsync_policy == "everysec":
                    failing = bool(file.fsync_errno)
                    try:
                        file.sync()
                    except OSError as exc:
                        if not failing:
                            log.error("fsync of the append-only file failed: %s", exc)
                    # the gate is read on the loop: recompute it there
                    if failing != bool(file.fsync_errno):
                        self._call_on_loop(self._update_write_gate)

        self._fsync_thread = threading.Thread(target=run, name="aof-fsync", daemon=True)
        self._fsync_thread.start()

    def _call_on_loop(self, callback, *args) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(callback, *args)
            except RuntimeError:  # the loop closed meanwhile
                pass

    # --- configuration changes ---------------------------------------------------

    def config_changed(self, old: dict, new: dict) -> None:
        self.wait_sync()  # (no fsync in flight while the policy or the file changes)
        if self.file is not None:
            self._set_policy(new["appendfsync"])
        if new["appendonly"] and not old["appendonly"] and self.file is None:
            try:
                os.makedirs(self.aof_dir, exist_ok=True)
                # An older history (the AOF was on before): its manifest stays until replaced.
                older: list[aof.ManifestEntry] = []
                readable = True
                if os.path.exists(os.path.join(self.aof_dir, aof.MANIFEST)):
                    try:
                        older = aof.read_manifest(self.aof_dir)
                    except PersistenceError:
                        readable = False  # delete nothing of a history we can't read
                if readable:
                    for name in aof.remove_strays(self.aof_dir, older, self.file_ops):
                        log.warning("removed %s from %s: a leftover of a rewrite that never finished",
                                    name, self.aof_dir)
                self.file = aof.AppendOnlyFile(self.aof_dir, new["appendfsync"], self.file_ops)
                self.file.replaces = older
                self.start_rewrite()
            except OSError as exc:
                log.warning("tstream needs to enable the AOF but can't start its first rewrite: %s", exc)
                if self.file is not None:
                    self.file.close()
                self.file = None
                self.server.config.values["appendonly"] = False
                self.attach()
                raise CommandError("ERR CONFIG SET failed (possibly related to argument 'appendonly') - "
                                   "Unable to turn on AOF. Check server logs.") from None
        elif old["appendonly"] and not new["appendonly"] and self.file is not None:
            try:
                self.file.close()
            except OSError as exc:
                log.warning("error flushing the append-only file while turning it off: %s", exc)
            self.file = None
        self.attach()
        self._update_write_gate()

    def _set_policy(self, policy: str) -> None:
        if policy == "always" and self.file.fsync_policy != "always":
            # What was written under the old policy: on disk before reads that show it
            # are answered without waiting (Persistence.settled).
            try:
                self.file.sync()
            except OSError as exc:
                log.warning("fsync of the append-only file failed: %s", exc)
        self.file.fsync_policy = policy

    # --- snapshots --------------------------------------------------------------------

    def save(self) -> None:
        """SAVE: write a snapshot now, on the loop (clients wait, as in Redis)."""
        dirty = self.server.dirty
        snapshot.write(snapshot.capture(self.server.keyspace), self.snapshot_path, self.file_ops, aux=self.aux())
        self.last_bgsave_ok = True  # as in Redis: a good save clears a failed BGSAVE's MISCONF
        self._saved(dirty)
        self._update_write_gate()

    def _saved(self, dirty_at_capture: int) -> None:
        self.server.dirty -= dirty_at_capture
        self.last_save = int(time.time())
        log.info("DB saved on disk")

    def background_busy(self) -> bool:
        return (self.bgsave_started is not None or self.rewrite_started is not None
                or self.server.replication.job_running)  # (a snapshot for replicas)

    def start_bgsave(self) -> None:
        """BGSAVE: capture on the loop, write in a worker thread."""
        dirty = self.server.dirty
        self.bgsave_started = time.monotonic()
        future = self._capture_and_write(self.snapshot_path)

        def done(fut: asyncio.Future) -> None:
            self.last_bgsave_seconds = int(time.monotonic() - self.bgsave_started)
            self.bgsave_started = None
            if fut.exception() is not None:
                self.last_bgsave_ok = False
                self.last_bgsave_try = time.monotonic()
                log.error("background save failed: %s", fut.exception())
            else:
                self.last_bgsave_ok = True
                self._saved(dirty)
                log.info("Background saving terminated with success")
            self._update_write_gate()
            self._run_scheduled()

        future.add_done_callback(done)
        log.info("Background saving started")

    def _capture_and_write(self, path: str) -> asyncio.Future:
        """Write a snapshot of the keyspace as it is now to ``path`` without holding
        the loop (server.snapshotjob); the future gives the file's size."""
        return SnapshotJob(self.server, path, self.file_ops).start()

    # --- AOF rewrites -----------------------------------------------------------------

    def start_rewrite(self) -> None:
        """BGREWRITEAOF: new incr file now, base written in a worker thread.

        Raises OSError when the new incr file or the manifest naming it can't
        be written: the rewrite failed before it began and records keep going
        to the current file.  A later failure (the base, the final manifest)
        is reported by INFO (aof_last_bgrewrite_status) and the log; the old
        files then still hold the whole history."""
        file = self.file
        started = time.monotonic()
        self.wait_sync()  # the new incr file replaces the fd an fsync in flight uses
        try:
            seq = file.begin_rewrite()
        except (OSError, MemoryError) as exc:
            self._rewrite_failed(started, exc)
            self._update_write_gate()
            raise OSError(getattr(exc, "errno", 12), f"can't start the AOF rewrite: {exc}") from None
        self.rewrite_started = started
        future = self._capture_and_write(os.path.join(self.aof_dir, aof.base_name(seq)))

        def done(fut: asyncio.Future) -> None:
            self.rewrite_started = None
            error = fut.exception()
            if error is None and self.file is file:
                try:
                    file.finish_rewrite(seq, fut.result())
                except OSError as exc:
                    error = exc
            if error is not None:
                self._rewrite_failed(started, error)
            else:
                self.last_rewrite_seconds = int(time.monotonic() - started)
                self.last_rewrite_ok = True
                self.rewrite_failures = 0
                log.info("Background AOF rewrite finished successfully")
                if self.log_behind_since is not None and started > self.log_behind_since:
                    self.log_behind_since = None  # the new base holds what the log missed
                    self._update_write_gate()
                if self.log_behind_since is not None:
                    self.rewrite_scheduled = True  # it started before the loss: one more
            self._run_scheduled()

        future.add_done_callback(done)
        log.info("Background append only file rewriting started")

    def _rewrite_failed(self, started: float, error: BaseException) -> None:
        self.last_rewrite_seconds = int(time.monotonic() - started)
        self.last_rewrite_ok = False
        self.rewrite_failures += 1
        delay = min(REWRITE_RETRY_DELAY * 2 ** (self.rewrite_failures - 1), REWRITE_RETRY_MAX_DELAY)
        if self.file is not None and not self.file.entries:
            # The AOF was just turned on and has no base yet: nothing it holds survives a
            # restart until one exists, so the cron tries again soon (as Redis does).
            delay = FIRST_REWRITE_RETRY_DELAY
        self.next_auto_rewrite = time.monotonic() + delay
        log.error("Background AOF rewrite failed: %s (no automatic rewrite for %d seconds)", error, delay)
        for name in snapshot.remove_temp_files(self.aof_dir, self.file_ops):
            log.warning("removed %s, the temp file of the failed rewrite", name)

    def _run_scheduled(self) -> None:
        if self.log_behind_since is not None and time.monotonic() >= self.next_auto_rewrite:
            self.rewrite_scheduled = True  # the log is behind memory: rewrite (after a failure's back-off)
        if self.rewrite_scheduled and self.file is not None and not self.background_busy():
            self.rewrite_scheduled = False
            try:
                self.start_rewrite()
            except OSError:
                pass  # logged; INFO says aof_last_bgrewrite_status:err

    # --- housekeeping -----------------------------------------------------------------

    def cron(self) -> None:
        """Retry a failed AOF write, save points, automatic AOF rewrites (called every 100 ms)."""
        file = self.file
        if file is not None and (file.unwritten or file.records or file.write_errno):
            self.commit_turn()  # as Redis's serverCron: retry the pending AOF buffer
        if self.background_busy():
            return
        self._run_scheduled()
        if self.background_busy():
            return
        server = self.server
        now = time.time()
        for seconds, changes in server.config["save"]:
            if server.dirty >= changes and server.dirty > 0 and now - self.last_save >= seconds:
                # After a failed BGSAVE, as Redis: retry no sooner than 5 seconds later.
                if not self.last_bgsave_ok and time.monotonic() - self.last_bgsave_try < BGSAVE_RETRY_DELAY:
                    continue
                log.info("%d changes in %d seconds. Saving...", changes, seconds)
                self.start_bgsave()
                return
        if file is not None and not file.write_errno and time.monotonic() >= self.next_auto_rewrite:
            if not file.entries:  # turned on, its first rewrite failed: no base yet
                log.info("Retrying the first rewrite of the append only file")
                try:
                    self.start_rewrite()
                except OSError:
                    pass  # logged; retried after FIRST_REWRITE_RETRY_DELAY
                return
            percentage = server.config["auto-aof-rewrite-percentage"]
            minimum = server.config["auto-aof-rewrite-min-size"]
            base = max(file.base_size, 1)
            if percentage and file.size >= minimum and file.size * 100 >= base * percentage:
                log.info("Starting automatic rewriting of AOF on %d%% growth", file.size * 100 // base)
                try:
                    self.start_rewrite()
                except OSError:
                    pass  # logged; retried after REWRITE_RETRY_DELAY

    def shutdown(self, save: bool | None) -> None:
        """Flush the AOF, then save a snapshot when save points are set (or SAVE)."""
        self._stop_fsync.set()
        if self.file is not None:
            try:
                self.server.turn_end.run()  # commit_turn reports its own errors
                self.wait_sync()
                if self._sync_thread is not None:
                    self._sync_jobs.put(None)  # the fsync thread ends
                    self._sync_thread = None
            finally:
                try:
                    self.file.close()
                except (OSError, MemoryError) as exc:
                    log.error("error flushing the append-only file at shutdown (%d bytes of records "
                              "not written): %s", self.file.pending_bytes, exc)
        if save is None:
            save = bool(self.server.config["save"])
        if save:
            log.info("Saving the final snapshot before exiting.")
            try:
                self.save()
            except OSError as exc:
                log.error("error saving the final snapshot: %s", exc)

    def info(self) -> dict:
        file = self.file
        now = time.monotonic()
        return {
            "rdb_changes_since_last_save": self.server.dirty,
            "rdb_bgsave_in_progress": int(self.bgsave_started is not None),
            "rdb_last_save_time": self.last_save,
            "rdb_last_bgsave_status": "ok" if self.last_bgsave_ok else "err",
            "rdb_last_bgsave_time_sec": self.last_bgsave_seconds,
            "rdb_current_bgsave_time_sec": int(now - self.bgsave_started) if self.bgsave_started else -1,
            "aof_enabled": int(file is not None),
            "aof_rewrite_in_progress": int(self.rewrite_started is not None),
            "aof_rewrite_scheduled": int(self.rewrite_scheduled),
            "aof_last_rewrite_time_sec": self.last_rewrite_seconds,
            "aof_current_rewrite_time_sec": int(now - self.rewrite_started) if self.rewrite_started else -1,
            "aof_last_bgrewrite_status": "ok" if self.last_rewrite_ok else "err",
            "aof_last_write_status": "ok" if file is None or file.last_write_ok else "err",
            "aof_buffer_length": file.pending_bytes if file is not None else 0,
            "aof_current_size": (file.size + file.base_size) if file is not None else 0,
            "aof_base_size": file.base_size if file is not None else 0,
        }


__all__ = ["Persistence", "PersistenceError"]
