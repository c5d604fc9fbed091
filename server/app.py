"""The server's shared state: keyspace, configuration, clients, statistics, timers.

Command handlers reach it as ``client.server``.  It owns no sockets itself; the
listening and the per-connection protocol live in ``server.connection`` and the
process wiring in ``server.main``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from tstream.commands import table as command_table
from tstream.commands.dispatch import build_dispatch
from tstream.commands.info import rss_bytes
from tstream.commands.jetstream import TimeTexts
from tstream.commands.pubsub import PubSub
from tstream.commands.streams import TreadParses
from tstream.commands.writes import Writes
from tstream.engine import Keyspace
from tstream.engine.batches import BatchRegistry
from tstream.engine.ingest import FastRegistry

from .acl import AccessControl
from .blocking import BlockingRegistry
from .config import Config
from .observability import LatencyMonitor, SlowLog
from .persist import Persistence
from .replication import Replication
from .turns import TurnEnd

log = logging.getLogger("tstream.server")

CRON_INTERVAL = 0.1  # seconds between housekeeping passes (time eviction, idle clients)
CRON_BUDGET_NS = 2_000_000  # time eviction work per pass; the rest waits for the next one


class Stats:
    """Counters shown by INFO stats; CONFIG RESETSTAT zeroes them."""

    def __init__(self) -> None:
        self.reset()
        self._samples: list[tuple[float, int]] = []

    def reset(self) -> None:
        self.connections = 0
        self.commands = 0
        self.net_input = 0
        self.net_output = 0
        self.rejected = 0
        self.errors = 0
        self.evicted = 0
        self.hits = 0
        self.misses = 0
        self.fast_scanned = 0  # reads of fast-ingest messages run straight from their bytes (execute_scan)

    def sample(self, now: float) -> None:
        """Keep a second of (time, commands) samples for instantaneous_ops_per_sec."""
        self._samples.append((now, self.commands))
        while len(self._samples) > 2 and now - self._samples[0][0] > 1.0:
            self._samples.pop(0)

    def ops_per_sec(self) -> int:
        if len(self._samples) < 2:
            return 0
        (t0, c0), (t1, c1) = self._samples[0], self._samples[-1]
        return int((c1 - c0) / (t1 - t0)) if t1 > t0 else 0


class Server:
    def __init__(self, config: Config, config_file: str | None = None) -> None:
        self.config = config
        self.config_file = config_file
        self.keyspace = Keyspace()
        self.keyspace.node_max_bytes = config["node-max-bytes"]
        self.streams = self.keyspace.streams  # key -> Stream, for the hot paths' lookups
        self.waiting_keys: set[bytes] = set()  # keys some blocked client waits on
        self.blocking = BlockingRegistry(self)
        self.pubsub = PubSub()  # channels, patterns and their subscribers (commands.pubsub)
        self.monitors: list = []  # clients in MONITOR (commands.tools)
        self.dirty = 0  # changes since the last snapshot
        # The write path: handlers describe their changes, the dispatcher commits them
        # (logged to the effect sinks, counted in dirty, blocked readers woken).
        self.watched: dict[bytes, set] = {}  # WATCHed key -> its connections (commands.transactions)
        self.writes = Writes(self)
        self._aof: Persistence | None = None
        self.hold_replies = False  # AOF on: every reply waits for the turn's records (Persistence.attach)
        self.sync_early = False  # appendfsync always: a read that reveals no unsynced change does not (ditto)
        self.turn_end = TurnEnd(self)  # what waits for the end of the loop turn
        # Primary and replica sides of replication (server.replication): an effect sink
        # while replicas may connect, the link to our own primary when we are one.
        self.replication = Replication(self)
        # Over maxmemory (RSS, checked every housekeeping pass): DENYOOM commands refused.
        self.over_maxmemory = False
        # A snapshot being captured a slice at a time (persistence.snapshot.IncrementalCapture):
        # commands tell it before they change a key (commands.dispatch).
        self.capture = None
        # The dispatcher's one test for what is rare: OOM, MISCONF, a capture (update_refusing).
        self.refusing = False
        self.persistence = Persistence(self)
        self.acl = AccessControl()
        self.acl.set_requirepass(config["requirepass"])
        for rules in config["user"]:
            name, *words = rules.split()
            self.acl.setuser(name, words)
        # name -> handler entry, and name -> commands.stats.CommandStats (see commands.dispatch)
        self.dispatch, self.command_stats = build_dispatch()
        self.command_table = command_table  # the table module (COMMANDS, find), for COMMAND and ACL CAT
        # the commands' caches: each server its own
        self.tread_parses = TreadParses()  # TREAD ... GROUP parses kept
        self.time_texts = TimeTexts()  # RFC 3339 texts of DGET/MLAST messages
        self.slowlog = SlowLog()
        self.latency = LatencyMonitor()
        self.slow_threshold = 0.0  # seconds: a command this slow goes to observe_slow (the dispatcher's one test)
        self._configure_observability()
        self.clients: dict[int, object] = {}
        self.next_client_id = 1
        self.stats = Stats()
        self.batches = BatchRegistry()  # JetStream atomic batches in flight
        self.fast = FastRegistry()  # JetStream fast-ingest batches (commands/ingest.py)
        self.started = time.time()
        # Refreshed by every housekeeping pass (_cron): what a connection notes as the time
        # of its last read (ClientConnection.last_interaction), a look at the clock less per read.
        self.clock = self.started
        self.run_id = os.urandom(20).hex()
        self.port = 0
        self.event_loop_name = "asyncio"
        self.node_entries = config["node-entries"]
        self._peak_memory = 0
        self._shutdown: asyncio.Future | None = None
        self._cron_handle: asyncio.TimerHandle | None = None
        self.collector = None  # the process's CollectorPolicy (server/collector.py); None when embedded

    @property
    def aof(self) -> Persistence | None:
        """The append-only file while appendonly is on (Persistence.attach sets it):
        one of the write path's effect sinks."""
        return self._aof

    @aof.setter
    def aof(self, sink: Persistence | None) -> None:
        if self._aof is not None:
            self.writes.remove_sink(self._aof)
        self._aof = sink
        if sink is not None:
            self.writes.add_sink(sink)

    # --- what handlers call -------------------------------------------------------

    def create_stream(self, key: bytes):
        """A new, empty stream at ``key`` (which must not exist), logged."""
        stream = self.keyspace.get_or_create(key, self.node_entries)
        self.writes.created(key, stream)
        return stream

    def stream_for_write(self, key: bytes):
        """The stream at ``key``, created if needed."""
        stream = self.streams.get(key)
        return stream if stream is not None else self.create_stream(key)

    def key_deleted(self, key: bytes) -> None:
        """``key`` is about to disappear (DEL, FLUSHALL)."""
        if key in self.waiting_keys:
            self.blocking.key_deleted(key)

    def blocked_count(self) -> int:
        return self.blocking.count

    def request_shutdown(self, save: bool | None) -> None:
        """Stop serving; ``save`` True/False forces or skips the final snapshot."""
        if self._shutdown is not None and not self._shutdown.done():
            self._shutdown.set_result(save)

    def _configure_observability(self) -> None:
        slowlog = self.config["slowlog-log-slower-than"]
        latency = self.config["latency-monitor-threshold"]
        thresholds = ([slowlog * 1000] if slowlog >= 0 else []) + ([latency * 1_000_000] if latency else [])
        self.slow_threshold = min(thresholds) / 1e9 if thresholds else float("inf")
        self.slowlog.resize(self.config["slowlog-max-len"])

    def observe_slow(self, argv: list, nanos: int, client, fast: bool) -> None:
        """A command took at least ``slow_threshold`` (``nanos``): slow log and latency events."""
        slowlog = self.config["slowlog-log-slower-than"]
        if 0 <= slowlog * 1000 <= nanos:
            self.slowlog.add(argv, nanos // 1000, client)
        latency = self.config["latency-monitor-threshold"]
        if latency and nanos >= latency * 1_000_000:
            self.latency.record("fast-command" if fast else "command", nanos // 1_000_000)

    def protected_mode_denies(self, address: str) -> bool:
        """Redis's protected mode: no password, so only loopback clients get in."""
        from .connection import is_loopback

        return bool(self.config["protected-mode"]) and not self.acl.has_password and not is_loopback(address)

    def apply_config(self, new: Config) -> None:
        old = self.config.values
        self.config.values = new.values
        if new["requirepass"] != old["requirepass"]:
            self.acl.set_requirepass(new["requirepass"])
        self.node_entries = new["node-entries"]
        self.keyspace.node_max_bytes = new["node-max-bytes"]
        self._configure_observability()
        self.persistence.config_changed(old, new.values)
        self.replication.config_changed()
        self.check_memory()

    def check_memory(self) -> None:
        """Compare the process's RSS with maxmemory (0: no limit)."""
        limit = self.config["maxmemory"]
        self.over_maxmemory = bool(limit) and rss_bytes() > limit
        self.update_refusing()

    def update_refusing(self) -> None:
        """Some commands are refused now (OOM or MISCONF), or must tell a snapshot
        capture before they change a key: the dispatcher checks which."""
        self.refusing = (self.over_maxmemory or self.persistence.denied_writes is not None
                         or self.capture is not None or bool(self.monitors)
                         or self.replication.denied_writes is not None)

    def reset_stats(self) -> None:
        self.stats.reset()
        self.batches.reset_counts()
        for stats in self.command_stats.values():
            stats.reset()

    def persistence_info(self) -> dict:
        return self.persistence.info()

    def peak_memory(self, current: int) -> int:
        self._peak_memory = max(self._peak_memory, current)
        return self._peak_memory

    # --- lifecycle ------------------------------------------------------------------

    def new_client_id(self) -> int:
        client_id = self.next_client_id
        self.next_client_id += 1
        return client_id

    async def serve(self, servers: list[asyncio.AbstractServer]) -> bool | None:
        """Run until SHUTDOWN or a signal; returns the SHUTDOWN save choice."""
        loop = asyncio.get_running_loop()
        self._shutdown = loop.create_future()
        self._cron_handle = loop.call_later(CRON_INTERVAL, self._cron)
        self.replication.start()
        save = None
        try:
            save = await self._shutdown
        finally:
            self._cron_handle.cancel()
            self.replication.stop()
            for listener in servers:
                listener.close()
            self.persistence.shutdown(save)
            for client in list(self.clients.values()):
                client.kill()
        return save

    def _cron(self) -> None:
        """Housekeeping every CRON_INTERVAL: time-based eviction, idle clients, ops/sec."""
        loop = asyncio.get_running_loop()
        try:
            now = time.time()
            # (idle is measured up to the pass before: the reads since then noted its clock,
            # maybe long ago if the loop was busy, e.g. DEBUG SLEEP, when they were made)
            idle_until, self.clock = self.clock, now
            self.stats.sample(now)
            # Only the keys whose oldest entry aged out cost anything (engine/agetimers.py),
            # for a few ms at most: what is left is due again at the next pass.
            writes = self.writes
            # (Not while a snapshot is captured: eviction would change keys the capture
            # still owes; they are due again at the next pass after it.)
            if self.capture is None and not self.replication.is_replica:  # (a replica follows its primary's)
                for key, stream, first, evicted in self.keyspace.evict_aged(time.time_ns(), CRON_BUDGET_NS):
                    self.stats.evicted += evicted
                    writes.wrote(key, stream, first, evicted, wake=False)
            # JetStream: abandon idle atomic batches; log per-subject limit deletions
            self.batches.expire(self.config["batch-timeout-ms"])
            if self.capture is None:  # idle fast batches: abandoned, and logged as ended
                for batch in self.fast.expire(self.config["batch-timeout-ms"]):
                    stream = self.keyspace.get(batch.key)
                    if stream is not None and stream._ingest is batch.owner:
                        writes.ingested(batch.key, stream, stream.first, stream.next_offset, (), (), batch.id,
                                        batch.stored, True, [])
            writes.limit_deletes(self.keyspace)
            writes.commit()
            self.persistence.cron()
            self.check_memory()
            if self.collector is not None:
                self.collector.cron(len(self.keyspace))
            idle_limit = self.config["timeout"]
            if idle_limit:
                for client in list(self.clients.values()):
                    if (idle_until - client.last_interaction > idle_limit and not client.is_blocked()
                            and client.replica is None):
                        client.kill()
        except Exception:
            log.exception("housekeeping failed")
        finally:
            self._cron_handle = loop.call_later(CRON_INTERVAL, self._cron)
