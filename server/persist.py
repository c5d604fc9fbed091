"""Persistence in the running server: loading at startup, SAVE/BGSAVE, save points,
the append-only file's group commit and rewrites, and the final save at shutdown.

The file formats live in ``persistence/``; this module decides *when* things are
written, on the event loop, with the slow parts (writing a snapshot, fsync every
second) in worker threads.

Group commit: the records logged by every command of one event-loop turn are
written with one ``write`` at the end of the turn (and with ``appendfsync
always`` made durable with one ``fsync``), and the replies of that turn are held
until then (server.turns), so no client hears "done" before its change is in
the file (on disk, with ``always``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

from tstream.persistence import aof, snapshot
from tstream.persistence.framing import PersistenceError, pack

log = logging.getLogger("tstream.persistence")


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
        self.last_rewrite_ok = True
        self.last_rewrite_seconds = -1
        self._fsync_thread: threading.Thread | None = None
        self._stop_fsync = threading.Event()

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
        if config["appendonly"] and os.path.exists(manifest):
            result = aof.load(self.aof_dir, truncate_torn_tail=config["aof-load-truncated"])
            self._install(result.keyspace.items())
            self.file = aof.AppendOnlyFile(self.aof_dir, config["appendfsync"])
            self.file.open_existing(result.entries)
            log.info("DB loaded from append only file: %d keys, %d records, %.3f seconds",
                     len(self.server.keyspace), result.records, time.monotonic() - started)
        else:
            if os.path.exists(self.snapshot_path):
                streams = snapshot.load_file(self.snapshot_path)
                self._install(streams.items())
                log.info("DB loaded from disk: %d keys, %.3f seconds", len(streams), time.monotonic() - started)
            if config["appendonly"]:
                self._create_aof_now()
        self._start_fsync_thread()

    def _install(self, items) -> None:
        keyspace = self.server.keyspace
        for key, stream in items:
            keyspace.put(key, stream)

    def _create_aof_now(self) -> None:
        """Start an AOF from the current state, synchronously (nothing is served yet)."""
        os.makedirs(self.aof_dir, exist_ok=True)
        file = aof.AppendOnlyFile(self.aof_dir, self.server.config["appendfsync"])
        seq = file.begin_rewrite()
        size = snapshot.write(snapshot.capture(self.server.keyspace), os.path.join(self.aof_dir, aof.base_name(seq)))
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

    # --- the effect log (handlers call server.aof.log) ---------------------------

    def log(self, record: list) -> None:
        self.file.buffer.append(pack(record))
        self.server.turn_end.schedule()

    def commit_turn(self) -> None:
        """Write (and with ``always``, fsync) this turn's records (called by
        server.turns.TurnEnd before it releases the turn's replies)."""
        file = self.file
        if file is not None:
            try:
                file.write_buffer()
                if file.fsync_policy == "always":
                    started = time.monotonic_ns()
                    file.sync()
                    threshold = self.server.config["latency-monitor-threshold"]
                    millis = (time.monotonic_ns() - started) // 1_000_000
                    if threshold and millis >= threshold:
                        self.server.latency.record("aof-fsync-always", millis)
                file.last_write_ok = True
            except OSError as exc:
                file.last_write_ok = False
                if file.fsync_policy == "always":
                    # Replies were promised durability: never send them. Redis exits too.
                    log.critical("can't write the append-only file with appendfsync always (%s): exiting", exc)
                    os._exit(1)
                log.error("error writing the append-only file: %s", exc)

    def _start_fsync_thread(self) -> None:
        def run() -> None:
            while not self._stop_fsync.wait(1.0):
                file = self.file
                if file is not None and file.fsync_policy == "everysec":
                    try:
                        file.sync()
                    except OSError as exc:
                        log.error("fsync of the append-only file failed: %s", exc)

        self._fsync_thread = threading.Thread(target=run, name="aof-fsync", daemon=True)
        self._fsync_thread.start()

    # --- configuration changes ---------------------------------------------------

    def config_changed(self, old: dict, new: dict) -> None:
        if self.file is not None:
            self.file.fsync_policy = new["appendfsync"]
        if new["appendonly"] and not old["appendonly"] and self.file is None:
            os.makedirs(self.aof_dir, exist_ok=True)
            self.file = aof.AppendOnlyFile(self.aof_dir, new["appendfsync"])
            self.attach()
            self.start_rewrite()
        elif old["appendonly"] and not new["appendonly"] and self.file is not None:
            self.file.close()
            self.file = None
        self.attach()

    # --- snapshots --------------------------------------------------------------------

    def save(self) -> None:
        """SAVE: write a snapshot now, on the loop (clients wait, as in Redis)."""
        dirty = self.server.dirty
        snapshot.write(snapshot.capture(self.server.keyspace), self.snapshot_path)
        self._saved(dirty)

    def _saved(self, dirty_at_capture: int) -> None:
        self.server.dirty -= dirty_at_capture
        self.last_save = int(time.time())
        log.info("DB saved on disk")

    def background_busy(self) -> bool:
        return self.bgsave_started is not None or self.rewrite_started is not None

    def start_bgsave(self) -> None:
        """BGSAVE: capture on the loop, write in a worker thread."""
        loop = asyncio.get_running_loop()
        dirty = self.server.dirty
        captured = snapshot.capture(self.server.keyspace)
        self.bgsave_started = time.monotonic()
        path = self.snapshot_path
        future = loop.run_in_executor(None, snapshot.write, captured, path)

        def done(fut: asyncio.Future) -> None:
            self.last_bgsave_seconds = int(time.monotonic() - self.bgsave_started)
            self.bgsave_started = None
            if fut.exception() is not None:
                self.last_bgsave_ok = False
                log.error("background save failed: %s", fut.exception())
            else:
                self.last_bgsave_ok = True
                self._saved(dirty)
                log.info("Background saving terminated with success")
            self._run_scheduled()

        future.add_done_callback(done)
        log.info("Background saving started")

    # --- AOF rewrites -----------------------------------------------------------------

    def start_rewrite(self) -> None:
        """BGREWRITEAOF: new incr file now, base written in a worker thread."""
        loop = asyncio.get_running_loop()
        file = self.file
        seq = file.begin_rewrite()
        captured = snapshot.capture(self.server.keyspace)
        self.rewrite_started = time.monotonic()
        path = os.path.join(self.aof_dir, aof.base_name(seq))
        future = loop.run_in_executor(None, snapshot.write, captured, path)

        def done(fut: asyncio.Future) -> None:
            self.last_rewrite_seconds = int(time.monotonic() - self.rewrite_started)
            self.rewrite_started = None
            if fut.exception() is not None:
                self.last_rewrite_ok = False
                log.error("background AOF rewrite failed: %s", fut.exception())
            elif self.file is file:
                file.finish_rewrite(seq, fut.result())
                self.last_rewrite_ok = True
                log.info("Background AOF rewrite finished successfully")
            self._run_scheduled()

        future.add_done_callback(done)
        log.info("Background append only file rewriting started")

    def _run_scheduled(self) -> None:
        if self.rewrite_scheduled and self.file is not None and not self.background_busy():
            self.rewrite_scheduled = False
            self.start_rewrite()

    # --- housekeeping -----------------------------------------------------------------

    def cron(self) -> None:
        """Save points and automatic AOF rewrites (called every 100 ms)."""
        if self.background_busy():
            return
        self._run_scheduled()
        if self.background_busy():
            return
        server = self.server
        now = time.time()
        for seconds, changes in server.config["save"]:
            if server.dirty >= changes and server.dirty > 0 and now - self.last_save >= seconds:
                log.info("%d changes in %d seconds. Saving...", changes, seconds)
                self.start_bgsave()
                return
        file = self.file
        if file is not None:
            percentage = server.config["auto-aof-rewrite-percentage"]
            minimum = server.config["auto-aof-rewrite-min-size"]
            base = max(file.base_size, 1)
            if percentage and file.size >= minimum and file.size * 100 >= base * percentage:
                log.info("Starting automatic rewriting of AOF on %d%% growth", file.size * 100 // base)
                self.start_rewrite()

    def shutdown(self, save: bool | None) -> None:
        """Flush the AOF, then save a snapshot when save points are set (or SAVE)."""
        self._stop_fsync.set()
        if self.file is not None:
            try:
                self.server.turn_end.run()
                self.file.close()
            except OSError as exc:
                log.error("error flushing the append-only file at shutdown: %s", exc)
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
            "aof_current_size": (file.size + file.base_size) if file is not None else 0,
            "aof_base_size": file.base_size if file is not None else 0,
        }


__all__ = ["Persistence", "PersistenceError"]
