"""Replication, as Redis does it: an asynchronous primary-replica stream with
partial resync, and WAIT.

    primary                                         replica
    -------                                         -------
    Writes -> sinks: AOF, Replication.log (kept)    REPLICAOF host port
    within SEND_DELAY (or at the end of the turn     handshake: PING, AUTH, REPLCONF
      with an AOF): flush() packs the records        listening-port, REPLCONF capa,
      kept (persistence.framing frames), appends     REPLCONF tstream <run_id>, PSYNC
      them to the backlog (repl-backlog-size),       replid offset+1
      send() writes them to every online replica
    PSYNC: +CONTINUE from the backlog, else          +FULLRESYNC: $<len> snapshot (loaded,
      +FULLRESYNC replid offset, a snapshot          replaces the keyspace), then frames:
      (server.snapshotjob: captured a slice at a     each one applied with the AOF's replay
      time, written by a thread), then the frames    (persistence.effects.apply), logged to
      logged since the capture began                 its own AOF, kept in its own backlog
    REPLCONF ACK offset: WAIT, lag, min-replicas     REPLCONF ACK every second (and on GETACK)

The stream is the effect records the AOF logs, framed as in the AOF
(``persistence.framing.pack``), so offsets count bytes of that stream.  A
record is kept as it is until the next flush, which packs every record kept
in one call: whatever reads the stream's offset or bytes (WAIT, INFO, ROLE,
PSYNC, a snapshot's aux fields, PING and GETACK, REPLICAOF, SHUTDOWN) flushes
first, so every client sees the offset of every write made before it asked.
Control records, never applied, have a type >= 100: PING (every
``repl-ping-replica-period``) and GETACK (WAIT asks for acks).  A replica keeps
the bytes it received in its own backlog, so that once promoted (REPLICAOF NO
ONE: a new replid, the old one kept as replid2) the other replicas continue
with +CONTINUE.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque

from tstream.commands.connection import MUTED
from tstream.persistence import effects, snapshot
from tstream.persistence.fileops import FileOps
from tstream.persistence.framing import HEADER, Packer, PersistenceError, TornTail, iter_frames, pack, unpack
from tstream.resp import encode, encode_integer

from .snapshotjob import SnapshotJob

log = logging.getLogger("tstream.replication")

PING, GETACK = 100, 101  # control records (not effects): never applied, never in an AOF
TICK = 0.1  # seconds between housekeeping passes
SEND_DELAY = 0.001  # the stream reaches the replicas at most this late (seconds)
READONLY = "READONLY You can't write against a read only replica."
NOREPLICAS = "NOREPLICAS Not enough good replicas to write."


def new_replid() -> str:
    return os.urandom(20).hex()


class Backlog:
    """At least the last ``size`` bytes of the replication stream, as the chunks
    it was fed (no copy: a send's bytes are one chunk), the oldest dropped
    while the rest still holds ``size`` bytes; ``end`` is the offset of its
    last byte (master_repl_offset), the first byte held is ``start + 1``."""

    def __init__(self, size: int, offset: int) -> None:
        self.size = size
        self.chunks: deque[bytes] = deque()
        self.held = 0  # bytes in chunks
        self.end = offset

    @property
    def start(self) -> int:
        return self.end - self.held

    def add(self, data: bytes) -> None:
        self.chunks.append(data)
        self.held += len(data)
        self.end += len(data)
        self._trim()

    def _trim(self) -> None:
        chunks = self.chunks
        while self.held - len(chunks[0]) >= self.size:
            self.held -= len(chunks.popleft())

    def since(self, offset: int) -> bytes | None:
        """The bytes after ``offset``, or None when the backlog no longer holds them all."""
        if offset < self.start or offset > self.end:
            return None
        return b"".join(self.chunks)[offset - self.start:]

    def resize(self, size: int) -> None:
        self.size = size
        if self.chunks:
            self._trim()


class Replica:
    """A replica connected to this primary (its PSYNC connection)."""

    def __init__(self, client, port: int) -> None:
        self.client = client
        self.ip = client.addr.rsplit(":", 1)[0].strip("[]")
        self.port = port
        self.state = "wait_bgsave"  # then send_bulk, online
        self.ack = 0  # the offset the replica acknowledged
        self.ack_time = time.monotonic()
        self.waiting: list[bytes] | None = []  # the stream logged while its snapshot is made
        self.waiting_bytes = 0
        self.start = 0  # the stream offset its snapshot stands for
        self.written = 0  # bytes handed to the transport
        self.bulk_end = 0  # ``written`` at the end of its snapshot (not counted by the limits)
        self.soft_since = 0.0  # since when its output is over the soft limit
        # While its PSYNC runs: what is written to it (+CONTINUE and the backlog, or
        # +FULLRESYNC), which PSYNC then replies through the connection's reply path,
        # after the replies of the commands before it.
        self.answer: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        """Stream bytes (or PSYNC's answer) for this replica, in order with the
        connection's replies: behind those it holds (end of turn, an fsync under
        appendfsync always), else at once."""
        if self.answer is not None:
            self.written += len(data)
            self.answer.append(data)
            return
        client = self.client
        transport = client.transport
        if transport is not None and not transport.is_closing():
            client.net_out += len(data)
            self.written += len(data)
            if client._holding:
                client._hold(data, False)
            else:
                transport.write(data)

    def output(self) -> int:
        """The stream held for it, as Redis's replica output buffer: unsent bytes
        after its snapshot, plus what waits for the snapshot to be sent."""
        transport = self.client.transport
        size = transport.get_write_buffer_size() if transport is not None else 0
        return min(size, self.written - self.bulk_end) + self.waiting_bytes

    def over_limit(self, limits: tuple[int, int, int], now: float) -> int:
        """The size of its output when it passes ``client-output-buffer-limit
        replica`` (hard, or soft for longer than its seconds), else 0."""
        hard, soft, seconds = limits
        size = self.output()
        if hard and size > hard:
            return size
        if soft and size > soft:
            if not self.soft_since:
                self.soft_since = now
            elif now - self.soft_since > seconds:
                return size
        else:
            self.soft_since = 0.0
        return 0


class Waiter:
    """A client blocked in WAIT (the connection's ``blocked`` slot holds it)."""

    queued = False  # (not in server.blocking's queues: its forget() only clears the slot)

    def __init__(self, client, offset: int, count: int, deadline: float) -> None:
        self.client = client
        self.offset = offset
        self.count = count
        self.deadline = deadline


class Replication:
    def __init__(self, server) -> None:
        self.server = server
        self.replid = new_replid()
        self.replid2 = "0" * 40
        self.second_offset = -1
        self.offset = 0  # master_repl_offset: bytes of the stream so far
        self.backlog: Backlog | None = None
        self.records: list[list] = []  # records not packed yet (flush() packs them onto the stream)
        self.pack = Packer()  # (framing.pack, reusing its msgpack packer)
        self.replicas: list[Replica] = []
        self.waiters: list[Waiter] = []
        self.syncs: list[Replica] = []  # replicas waiting for a snapshot job
        self.job_running = False
        self.last_ping = time.monotonic()
        self.denied_writes: str | None = None
        # replica side
        self.master: tuple[str, int] | None = None
        self.link_state = "none"  # connect, connecting, handshake, sync, connected
        self.link_task: asyncio.Task | None = None
        self.link_writer: asyncio.StreamWriter | None = None
        self.link_down_since = time.monotonic()
        self.last_io = time.monotonic()
        self.last_ack_sent = 0.0
        self.last_error = ""
        self.sync_in_progress = False
        self.sync_count = 0  # full resyncs this replica did
        self.partial_count = 0
        self.full_syncs = 0  # full resyncs this primary served (INFO stats sync_full)
        self.partial_ok = 0
        self.partial_err = 0
        self._tick: asyncio.TimerHandle | None = None
        self.unsent: list[bytes] = []  # stream bytes not written to the online replicas yet
        self._send_handle: asyncio.TimerHandle | None = None

    # --- the effect sink (commands.writes) ------------------------------------------

    def log(self, record: list) -> None:
        """A record for the stream: kept as it is until the next flush, which packs
        every record waiting at once (within SEND_DELAY, at the end of the loop
        turn, or first thing when something reads the stream's offset)."""
        self.records.append(record)
        if self._send_handle is None:
            self._send_handle = asyncio.get_running_loop().call_later(SEND_DELAY, self.send, True)
        # Until that send, a record only needs appending: ``log`` is the list's own
        # append (no Python call per write); send() puts this method back.
        self.log = self.records.append  # type: ignore[method-assign]

    def flush(self) -> None:
        """Pack the records waiting onto the stream: backlog and online replicas, and
        the same bytes to the AOF (serialized once: AppendOnlyFile.take_packed).
        Whatever reads the stream's offset or bytes (WAIT, INFO, ROLE, PSYNC, a
        snapshot's aux fields, PINGs and GETACKs, REPLICAOF, SHUTDOWN) calls this
        first, so that it sees every write made so far."""
        records = self.records
        if not records:
            return
        try:
            data = self.pack(effects.bundled(records))  # (one frame: one msgpack call, header and checksum)
        except MemoryError:
            records.clear()
            self._stream_lost()
            return
        aof = self.server.aof
        if aof is not None and aof.file is not None:
            aof.file.take_packed(records, data)
        records.clear()
        self.feed(data)

    def _stream_lost(self) -> None:
        """Records could not be packed (MemoryError): the stream has a hole, so every
        replica resyncs in full (a new replid, no backlog to continue from)."""
        log.error("out of memory while packing the replication stream: replicas will resync in full")
        self.replid, self.replid2, self.second_offset = new_replid(), "0" * 40, -1
        if self.backlog is not None:
            self.backlog = Backlog(self.backlog.size, self.offset)
        self._disconnect_replicas()

    def feed(self, data: bytes) -> None:
        """Bytes of the stream (packed here, or received from our own primary)."""
        if self.backlog is None:
            self.offset += len(data)
            return
        self.backlog.add(data)
        self.offset = self.backlog.end
        online = False
        over = None
        for replica in self.replicas:
            if replica.waiting is not None:
                replica.waiting.append(data)
                replica.waiting_bytes += len(data)
                hard = self.server.config["client-output-buffer-limit"].replica[0]
                if hard and replica.waiting_bytes > hard:
                    over = over or []
                    over.append(replica)
            else:
                online = True
        if over:
            for replica in over:
                self._over_limit(replica, replica.output())
        if online:
            # Sent within SEND_DELAY: one write per replica for many loop turns (a
            # write per turn cost a quarter of an unpipelined writer's throughput).
            self.unsent.append(data)
            if self._send_handle is None:
                self._send_handle = asyncio.get_running_loop().call_later(SEND_DELAY, self.send, True)

    def send(self, timer: bool = False) -> None:
        """Pack the records waiting, and write what the stream got since the last
        send to the online replicas (``timer``: called by the send's own timer)."""
        if self.records:
            self.flush()
        if self._send_handle is not None:
            if not timer:
                self._send_handle.cancel()
            self._send_handle = None
            self.__dict__.pop("log", None)  # (the next record schedules the next send)
        if not self.unsent:
            return
        unsent = self.unsent
        data = unsent[0] if len(unsent) == 1 else b"".join(unsent)
        unsent.clear()
        limits = self.server.config["client-output-buffer-limit"].replica
        now = time.monotonic()
        for replica in list(self.replicas):
            if replica.waiting is None:
                replica.write(data)
                if size := replica.over_limit(limits, now):
                    self._over_limit(replica, size)

    def _over_limit(self, replica: Replica, size: int) -> None:
        """A replica that does not keep up is let go (it resyncs when it comes
        back): the primary's memory never grows without bound for it."""
        log.warning("closing replica %s:%d: %d bytes of replication stream not sent are over "
                    "client-output-buffer-limit replica", replica.ip, replica.port, size)
        replica.client.kill()
        self.forget(replica.client)

    def _control(self, kind: int) -> None:
        self.flush()
        self.feed(pack([kind]))
        self.send()

    @property
    def is_replica(self) -> bool:
        return self.master is not None

    # --- lifecycle ------------------------------------------------------------------

    def snapshot_aux(self) -> dict:
        """The aux fields of a snapshot of the keyspace as it is now (Redis's
        repl-id / repl-offset): the offset of the stream the data stands for,
        when that offset counts every change (a backlog exists), else {}."""
        self.flush()  # (this turn's records are in the data: on the stream too)
        if self.backlog is None or self.sync_in_progress:
            return {}
        return {"repl-id": self.replid, "repl-offset": self.offset}

    def restore(self, fields: dict | None) -> None:
        """The replication id and offset the loaded data stands for (a snapshot's
        aux fields), as Redis 7 restores them: a replica offers them in PSYNC
        (+CONTINUE when its primary's backlog still covers them); a primary keeps
        them as its second id (as a promotion does, so a history is never
        continued twice from one file) with an empty backlog at that offset, so
        its replicas continue with +CONTINUE."""
        try:
            replid, offset = str(fields["repl-id"]), int(fields["repl-offset"])
        except (TypeError, KeyError, ValueError):
            return
        if len(replid) != 40 or offset < 0:
            return
        self.replid, self.offset = replid, offset
        if self.server.config["replicaof"]:
            self._ensure_backlog_replica()
            log.info("replication id and offset restored from disk: %s %d", replid, offset)
        else:
            self._shift_replid()
            self._ensure_backlog()
            log.info("replication id and offset restored from disk: %s %d (kept as replid2; new replid %s)",
                     replid, offset, self.replid)

    def start(self) -> None:
        """Called once the server serves: the timer, and config ``replicaof``."""
        self._tick = asyncio.get_running_loop().call_later(TICK, self._cron)
        self.restore(self.server.persistence.loaded_repl)
        target = self.server.config["replicaof"]
        if target:
            host, port = target.split()
            self.replicate(host, int(port))
        self.update_gate()

    def stop(self) -> None:
        self.flush()
        self.send()
        if self._tick is not None:
            self._tick.cancel()
        if self.link_task is not None:
            self.link_task.cancel()

    def config_changed(self) -> None:
        if self.backlog is not None:
            self.backlog.resize(self.server.config["repl-backlog-size"])
        self.update_gate()

    def _cron(self) -> None:
        try:
            self.cron()
        except Exception:
            log.exception("replication housekeeping failed")
        finally:
            self._tick = asyncio.get_running_loop().call_later(TICK, self._cron)

    def cron(self) -> None:
        now = time.monotonic()
        if self.replicas and now - self.last_ping >= self.server.config["repl-ping-replica-period"]:
            self.last_ping = now
            if not self.is_replica:
                self._control(PING)
        if self.syncs and not self.job_running:
            self._start_snapshot()
        timeout = self.server.config["repl-timeout"]
        limits = self.server.config["client-output-buffer-limit"].replica
        for replica in list(self.replicas):
            if size := replica.over_limit(limits, now):  # (the soft limit's time: it may get no more writes)
                self._over_limit(replica, size)
            elif replica.state == "online" and now - replica.ack_time > timeout:
                log.warning("replica %s:%d timed out (no ACK for %d s): disconnecting", replica.ip, replica.port,
                            timeout)
                replica.client.kill()
                self.forget(replica.client)
        if self.link_writer is not None and self.link_state == "connected":
            if now - self.last_ack_sent >= 1.0:
                self.send_ack()
            if now - self.last_io > timeout:
                log.warning("MASTER timeout: no data nor PING received for %d s", timeout)
                self.link_writer.close()
        self._expire_waiters(now)
        self.update_gate()

    def update_gate(self) -> None:
        """Writes refused now: READONLY on a read-only replica, NOREPLICAS below
        min-replicas-to-write good replicas (commands.dispatch reads it)."""
        config = self.server.config
        denied = None
        if self.is_replica:
            if config["replica-read-only"]:
                denied = READONLY
        elif config["min-replicas-to-write"]:
            max_lag = config["min-replicas-max-lag"]
            now = time.monotonic()
            good = sum(1 for r in self.replicas if r.state == "online" and now - r.ack_time <= max_lag)
            if good < config["min-replicas-to-write"]:
                denied = NOREPLICAS
        if denied != self.denied_writes:
            self.denied_writes = denied
            self.server.update_refusing()

    # --- primary side: PSYNC, REPLCONF ----------------------------------------------

    def psync(self, client, replid: str, offset: int) -> bytes:
        """PSYNC replid offset (offset: the first byte wanted): the client becomes a
        replica connection; returns PSYNC's reply, +CONTINUE and the backlog, or
        +FULLRESYNC when its snapshot starts now (else b"": it goes out when the
        snapshot starts), or raises ValueError."""
        if self.is_replica and self.link_state != "connected":
            raise ValueError("NOMASTERLINK Can't SYNC while not connected with my master")
        self.flush()
        self.send()  # (what the backlog holds is on its way to the others: the new one starts after it)
        port = client.replica_port
        replica = Replica(client, port)
        replica.answer = []
        try:
            self._resync(client, replica, replid, offset)
        finally:
            answer, replica.answer = replica.answer, None
        if client.reply_mode in MUTED and answer:  # CLIENT REPLY OFF|SKIP drops replies, not this (as Redis)
            replica.written -= sum(map(len, answer))
            for data in answer:
                replica.write(data)
            return b""
        return b"".join(answer)

    def _resync(self, client, replica: Replica, replid: str, offset: int) -> None:
        """:meth:`psync`'s choice: +CONTINUE from the backlog, else a full resync."""
        port = replica.port
        client.replica = replica
        self._ensure_backlog()
        have = offset - 1
        backlog = self.backlog
        if (replid == self.replid or (replid == self.replid2 and offset <= self.second_offset)) and (
                data := backlog.since(have)) is not None:
            self.partial_ok += 1
            replica.waiting = None
            replica.state = "online"
            replica.ack = have
            self.replicas.append(replica)
            log.info("Partial resynchronization request from %s:%d accepted: sending %d bytes of backlog",
                     replica.ip, port, len(data))
            # (PSYNC's reply: the stream that follows goes behind it, see Replica.write)
            replica.write(f"+CONTINUE {self.replid}\r\n".encode() + data)
            return
        if replid != "?":
            self.partial_err += 1
        self.full_syncs += 1
        self.replicas.append(replica)
        self.syncs.append(replica)
        log.info("Full resync requested by replica %s:%d", replica.ip, port)
        if not self.job_running:
            self._start_snapshot()  # (+FULLRESYNC goes out when its snapshot's capture starts)

    def _ensure_backlog(self) -> None:
        if self.backlog is None:
            self.backlog = Backlog(self.server.config["repl-backlog-size"], self.offset)
            if not self.is_replica:
                self.server.writes.add_sink(self)

    def _start_snapshot(self) -> None:
        if self.server.capture is not None or self.server.persistence.background_busy():
            return  # a BGSAVE or rewrite captures now: the cron tries again
        self.flush()
        syncs, self.syncs = self.syncs, []
        syncs = [r for r in syncs if not r.client.closing]
        if not syncs:
            return
        for replica in syncs:
            replica.start = self.offset
            replica.waiting = []
            replica.write(f"+FULLRESYNC {self.replid} {replica.start}\r\n".encode())
        path = os.path.join(self.server.persistence.dir, f"temp-repl-{os.getpid()}-{time.monotonic_ns()}.tsr")
        self.job_running = True
        diskless = self.server.config["repl-diskless-sync"]
        ops = _InMemory() if diskless else self.server.persistence.file_ops
        future = SnapshotJob(self.server, path, ops).start()
        log.info("Starting BGSAVE for SYNC with target: %s", "replicas sockets (in memory, diskless)" if diskless
                 else "disk")

        def done(fut: asyncio.Future) -> None:
            self.job_running = False
            if fut.exception() is not None:
                log.error("snapshot for replicas failed: %s", fut.exception())
                if not diskless:
                    _unlink(path)
                self._sync_failed(syncs)
                return
            loop = asyncio.get_running_loop()
            if diskless:
                read = loop.create_future()
                read.set_result(ops.result)
                ops.result = None
                self._send_snapshot(syncs, read)
                return
            # (read by a thread: a big snapshot would hold the loop)
            read = loop.run_in_executor(None, _read_and_unlink, path)
            read.add_done_callback(lambda f: self._send_snapshot(syncs, f))

        future.add_done_callback(done)

    def _sync_failed(self, syncs: list[Replica]) -> None:
        for replica in syncs:
            replica.client.kill()
            self.forget(replica.client)

    def _send_snapshot(self, syncs: list[Replica], read: asyncio.Future) -> None:
        if read.exception() is not None:
            log.error("could not read the snapshot for replicas: %s", read.exception())
            self._sync_failed(syncs)
            return
        data = read.result()
        self.send()  # (the unsent bytes are in the new replicas' waiting lists too: sent once)
        for replica in syncs:
            if replica.client.closing:
                continue
            replica.write(b"$%d\r\n" % len(data))
            replica.write(data)
            replica.bulk_end = replica.written
            for chunk in replica.waiting or ():
                replica.write(chunk)
            replica.waiting = None
            replica.waiting_bytes = 0
            replica.state = "online"
            replica.ack_time = time.monotonic()
            log.info("Synchronization with replica %s:%d succeeded", replica.ip, replica.port)
        self.update_gate()

    def acked(self, client, offset: int) -> None:
        replica = client.replica
        if replica is None:
            return
        replica.ack = max(replica.ack, offset)
        replica.ack_time = time.monotonic()
        if self.waiters:
            self._serve_waiters()
        if self.denied_writes is not None:
            self.update_gate()

    def forget(self, client) -> None:
        """A replica's connection closed."""
        replica = client.replica
        if replica is None:
            return
        if replica in self.replicas:
            self.replicas.remove(replica)
            log.info("Connection with replica %s:%d lost", replica.ip, replica.port)
        if replica in self.syncs:
            self.syncs.remove(replica)
        if self.waiters:
            self._serve_waiters()
        self.update_gate()

    # --- WAIT -----------------------------------------------------------------------

    def acked_count(self, offset: int) -> int:
        return sum(1 for r in self.replicas if r.state == "online" and r.ack >= offset)

    def wait(self, client, count: int, timeout_ms: int):
        """WAIT numreplicas timeout: the count now, or None when the client blocks."""
        self.flush()
        target = self.offset
        have = self.acked_count(target)
        if have >= count:
            return have
        self._control(GETACK)
        deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms else 0.0
        waiter = Waiter(client, target, count, deadline)
        client.blocked = waiter
        self.waiters.append(waiter)
        return None

    def _serve_waiters(self) -> None:
        for waiter in list(self.waiters):
            have = self.acked_count(waiter.offset)
            if have >= waiter.count:
                self._answer(waiter, have)

    def _expire_waiters(self, now: float) -> None:
        for waiter in list(self.waiters):
            if waiter.client.closing or waiter.client.blocked is not waiter:
                self.waiters.remove(waiter)
            elif waiter.deadline and now >= waiter.deadline:
                self._answer(waiter, self.acked_count(waiter.offset))

    def _answer(self, waiter: Waiter, count: int) -> None:
        self.waiters.remove(waiter)
        if waiter.client.blocked is waiter:
            waiter.client.unblock(encode_integer(count))

    # --- replica side ---------------------------------------------------------------

    def replicate(self, host: str, port: int) -> None:
        """REPLICAOF host port: drop the current link (and replicas: they resync)."""
        if self.master == (host, port) and self.link_task is not None:
            return
        self.flush()
        # (Our replid and offset stay: PSYNC offers them, as Redis's cached master
        # made from ourselves, so a former primary may continue at the new one.)
        self.master = (host, port)
        self.server.writes.remove_sink(self)
        self.server.config.values["replicaof"] = f"{host} {port}"
        self._disconnect_replicas()
        self._cancel_waiters()
        if self.link_task is not None:
            self.link_task.cancel()
        self.link_state = "connect"
        self.link_down_since = time.monotonic()
        self.link_task = asyncio.get_running_loop().create_task(self._link(host, port))
        self.update_gate()
        log.info("Connecting to MASTER %s:%d", host, port)

    def promote(self) -> None:
        """REPLICAOF NO ONE: keep the data, become a primary with a new replid."""
        if self.master is None:
            return
        if self.link_task is not None:
            self.link_task.cancel()
            self.link_task = None
        self.master = None
        self.link_state = "none"
        self.link_writer = None
        self.server.config.values["replicaof"] = ""
        self._shift_replid()
        self._ensure_backlog()
        self.server.writes.add_sink(self)
        self._disconnect_replicas()
        self.update_gate()
        log.info("MASTER MODE enabled (new replid %s, replid2 %s up to offset %d)", self.replid, self.replid2,
                 self.second_offset)

    def _shift_replid(self) -> None:
        self.replid2 = self.replid
        self.second_offset = self.offset + 1
        self.replid = new_replid()

    def _disconnect_replicas(self) -> None:
        for replica in list(self.replicas):
            replica.client.kill()
            self.forget(replica.client)

    def _cancel_waiters(self) -> None:
        for waiter in list(self.waiters):
            self._answer(waiter, 0)

    async def _link(self, host: str, port: int) -> None:
        while self.master == (host, port):
            try:
                await self._sync(host, port)
            except asyncio.CancelledError:
                raise
            except (OSError, EOFError, ValueError, PersistenceError, asyncio.TimeoutError) as exc:
                message = str(exc) or type(exc).__name__
                if message != self.last_error or self.link_state != "connect":
                    log.warning("replication from %s:%d: %s", host, port, message)
                self.last_error = message
            except Exception as exc:  # a bug: say so and retry
                log.exception("replication from %s:%d failed", host, port)
                self.last_error = str(exc)
            finally:
                if self.link_writer is not None:
                    self.link_writer.close()
                    self.link_writer = None
                if self.link_state == "connected":
                    self.link_down_since = time.monotonic()
                    log.info("Connection with MASTER lost")
                self.link_state = "connect"
                self.sync_in_progress = False
            await asyncio.sleep(1.0)

    async def _sync(self, host: str, port: int) -> None:
        self.link_state = "connecting"
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
        self.link_writer = writer
        self.link_state = "handshake"
        reply = await self._handshake(reader, writer, host, port)
        if reply.startswith(b"+FULLRESYNC"):
            await self._full_sync(reader, reply)
        elif reply.startswith(b"+CONTINUE"):
            words = reply.decode().split()
            if len(words) > 1 and words[1] != self.replid:
                self.replid2, self.second_offset = self.replid, self.offset + 1
                self.replid = words[1]
                self._disconnect_replicas()
            self._ensure_backlog_replica()
            self.partial_count += 1
            log.info("Successful partial resynchronization with master (offset %d)", self.offset)
        else:
            raise ValueError(f"unexpected reply to PSYNC: {reply.decode(errors='replace')}")
        self.link_state = "connected"
        self.last_io = time.monotonic()
        self.last_error = ""
        log.info("MASTER <-> REPLICA sync: finished with success")
        self.send_ack()
        await self._stream(reader)

    async def _handshake(self, reader, writer, host: str, port: int) -> bytes:
        """PING, AUTH, REPLCONF ..., PSYNC: the reply to PSYNC."""
        config = self.server.config

        async def call(*words) -> bytes:
            writer.write(_command(words))
            line = await asyncio.wait_for(reader.readline(), config["repl-timeout"])
            if not line:
                raise EOFError("the primary closed the connection during the handshake")
            return line.rstrip(b"\r\n")

        reply = await call("PING")
        if reply.startswith(b"-") and not reply.startswith(b"-NOAUTH"):
            raise ValueError(f"Error reply to PING from primary: {reply.decode(errors='replace')}")
        if config["masterauth"]:
            words = ["AUTH", config["masteruser"], config["masterauth"]] if config["masteruser"] else \
                ["AUTH", config["masterauth"]]
            reply = await call(*words)
            if reply.startswith(b"-"):
                raise ValueError(f"Unable to AUTH to MASTER: {reply[1:].decode(errors='replace')}")
        reply = await call("REPLCONF", "tstream", self.server.run_id)
        if reply.startswith(b"-"):
            text = reply[1:].decode(errors="replace")
            if "itself" in text:
                raise ValueError(f"the primary {host}:{port} is this server itself: {text}")
            if "NOAUTH" in text or "NOPERM" in text:
                raise ValueError(f"the primary refuses us ({text}): set masterauth/masteruser")
            raise ValueError(f"the primary {host}:{port} is not a tstream server (REPLCONF tstream: {text})")
        await call("REPLCONF", "listening-port", str(self.server.port))
        await call("REPLCONF", "capa", "eof", "capa", "psync2")
        # (a history of our own, or our last primary's, may continue: else "? -1")
        cached = (self.replid, self.offset + 1) if self.offset or self.sync_count or self.backlog is not None else ("?", -1)
        reply = await call("PSYNC", cached[0], str(cached[1]))
        return reply

    async def _full_sync(self, reader, reply: bytes) -> None:
        _, replid, offset = reply.decode().split()
        self.link_state = "sync"
        self.sync_in_progress = True
        log.info("Full resync from master: %s:%s", replid, offset)
        header = await asyncio.wait_for(reader.readline(), 3600)
        while header == b"\n":  # (Redis sends newlines while it prepares the payload)
            header = await asyncio.wait_for(reader.readline(), 3600)
        if not header.startswith(b"$"):
            raise ValueError(f"bad snapshot header from the primary: {header[:40]!r}")
        size = int(header[1:].strip())
        data = await reader.readexactly(size)
        self._load(data, replid, int(offset))
        self.sync_count += 1
        self.sync_in_progress = False

    def _ensure_backlog_replica(self) -> None:
        if self.backlog is None:
            self.backlog = Backlog(self.server.config["repl-backlog-size"], self.offset)

    def _load(self, data: bytes, replid: str, offset: int) -> None:
        """A full resync's snapshot replaces the keyspace (of the stream ``replid``
        at ``offset``)."""
        if not data.startswith(snapshot.FILE_MAGIC):
            raise ValueError("the primary sent a snapshot that is not a tstream snapshot "
                             f"(starts with {data[:9]!r}): is it a tstream server?")
        streams = snapshot.load(data)
        server = self.server
        capture = server.capture
        if capture is not None:
            capture.before_flush()
        keyspace = server.keyspace
        writes = server.writes
        writes.flushed(len(keyspace), list(keyspace.streams))
        writes.commit()
        keyspace.flush()
        for key, stream in streams.items():
            keyspace.put(key, stream)
        server.dirty += len(streams)
        # (set before the AOF rewrite below captures: its base's aux fields)
        self.replid, self.replid2, self.second_offset = replid, "0" * 40, -1
        self.offset = offset
        self.backlog = Backlog(server.config["repl-backlog-size"], offset)
        self.sync_in_progress = False
        self._disconnect_replicas()  # they follow the new history from scratch
        persistence = server.persistence
        if persistence.file is not None:  # the AOF restarts from the loaded data
            if persistence.background_busy():
                persistence.rewrite_scheduled = True
            else:
                try:
                    persistence.start_rewrite()
                except OSError as exc:
                    log.error("could not rewrite the AOF after a full resync: %s", exc)
        log.info("MASTER <-> REPLICA sync: loaded %d keys", len(streams))

    async def _stream(self, reader: asyncio.StreamReader) -> None:
        pending = bytearray()
        while True:
            data = await reader.read(1 << 18)
            if not data:
                raise EOFError("the primary closed the connection")
            self.last_io = time.monotonic()
            if not pending:
                used = self._apply(data)
                if used < len(data):
                    pending += memoryview(data)[used:]
                continue
            pending += data
            if len(pending) < _frame_end(pending):
                continue  # a big record still arriving: not parsed again until it is whole
            used = self._apply(bytes(pending))
            del pending[:used]

    def _apply(self, data: bytes) -> int:
        """Apply every whole frame of ``data``; the number of bytes used.  A run
        of appends to one key goes to the engine in one call (effects.Replay),
        each record then logged and counted as if applied alone."""
        server = self.server
        writes = server.writes
        capture = server.capture
        used = 0
        getack = False
        replay = effects.Replay(server.keyspace, writes.replicated, applied_run=writes.replicated_run)
        try:
            try:
                for position, payload in iter_frames(data):
                    end = position + HEADER.size + len(payload)
                    record = unpack(payload)
                    kind = record[0]
                    if kind == GETACK:
                        getack = True
                    elif kind != PING:
                        if capture is not None:
                            _before_change(capture, record)
                        replay.apply(record)
                    used = end
            except TornTail:
                pass
            finally:
                replay.flush()  # (before anything else: the records before a bad frame stay applied)
        except effects.ReplayError as exc:
            self.replid = new_replid()  # our data no longer follows: full resync next
            raise ValueError(f"a record from the primary does not apply ({exc}): "
                             "resynchronizing in full") from None
        if used:
            self.feed(data[:used])  # (the same bytes, in our own backlog: offsets stay the primary's)
            writes.commit()
        if getack:
            self.send_ack()
        return used

    def send_ack(self) -> None:
        writer = self.link_writer
        if writer is not None and not writer.is_closing():
            writer.write(_command(("REPLCONF", "ACK", str(self.offset))))
            self.last_ack_sent = time.monotonic()

    # --- INFO replication, ROLE -----------------------------------------------------

    def info(self) -> dict:
        self.flush()  # (master_repl_offset and the backlog's counts include every write)
        config = self.server.config
        now = time.monotonic()
        fields: dict = {}
        if self.is_replica:
            host, port = self.master
            fields.update({
                "role": "slave",
                "master_host": host,
                "master_port": port,
                "master_link_status": "up" if self.link_state == "connected" else "down",
                "master_last_io_seconds_ago": int(now - self.last_io) if self.link_state == "connected" else -1,
                "master_sync_in_progress": int(self.sync_in_progress),
                "slave_read_repl_offset": self.offset,
                "slave_repl_offset": self.offset,
            })
            if self.link_state != "connected":
                fields["master_link_down_since_seconds"] = int(now - self.link_down_since)
                if self.last_error:
                    fields["master_link_error"] = self.last_error.replace("\r", " ").replace("\n", " ")
            fields.update({
                "slave_priority": config["replica-priority"],
                "slave_read_only": int(config["replica-read-only"]),
                "replica_announced": 1,
            })
        else:
            fields["role"] = "master"
        online = [r for r in self.replicas]
        fields["connected_slaves"] = len(online)
        for i, replica in enumerate(online):
            state = "online" if replica.state == "online" else "wait_bgsave"
            fields[f"slave{i}"] = (f"ip={replica.ip},port={replica.port},state={state},offset={replica.ack},"
                                   f"lag={int(now - replica.ack_time)}")
        if not self.is_replica and config["min-replicas-to-write"]:
            max_lag = config["min-replicas-max-lag"]
            fields["min_slaves_good_slaves"] = sum(
                1 for r in self.replicas if r.state == "online" and now - r.ack_time <= max_lag)
        backlog = self.backlog
        histlen = min(backlog.held, backlog.size) if backlog is not None else 0
        fields.update({
            "master_failover_state": "no-failover",
            "master_replid": self.replid,
            "master_replid2": self.replid2,
            "master_repl_offset": self.offset,
            "second_repl_offset": self.second_offset,
            "repl_backlog_active": int(backlog is not None),
            "repl_backlog_size": config["repl-backlog-size"],
            "repl_backlog_first_byte_offset": backlog.end - histlen + 1 if backlog is not None else 0,
            "repl_backlog_histlen": histlen,
        })
        return fields

    def role(self) -> list:
        self.flush()
        if self.is_replica:
            host, port = self.master
            state = {"connected": "connected", "sync": "sync", "handshake": "handshake",
                     "connecting": "connecting"}.get(self.link_state, "connect")
            return [b"slave", host.encode(), port, state.encode(), self.offset if state == "connected" else -1]
        return [b"master", self.offset,
                [[r.ip.encode(), str(r.port).encode(), str(r.ack).encode()] for r in self.replicas
                 if r.state == "online"]]


class _InMemory(FileOps):
    """The file operations of a snapshot made in memory (repl-diskless-sync):
    what ``persistence.snapshot.write`` writes lands in ``result`` when it
    "renames" its temp file; nothing touches the disk."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.result: bytearray | None = None

    def open(self, path: str, flags: int, mode: int = 0o644, step: str = "open") -> int:
        self.data = bytearray()
        return -1

    def write(self, fd: int, data, step: str = "write") -> int:
        self.data += data
        return len(data)

    def fsync(self, fd: int, step: str = "fsync") -> None:
        pass

    def truncate(self, fd: int, size: int) -> None:
        del self.data[size:]

    def close(self, fd: int) -> None:
        pass

    def rename(self, source: str, target: str, step: str = "rename") -> None:
        self.result, self.data = self.data, bytearray()

    def unlink(self, path: str) -> None:
        pass

    def fsync_directory(self, directory: str) -> None:
        pass


def _frame_end(data) -> int:
    """Where the first frame of ``data`` ends (its header's length field), or 0
    while its header is incomplete or not a header."""
    if len(data) < HEADER.size:
        return 0
    _, length, _, inverted = HEADER.unpack_from(data, 0)
    return HEADER.size + length if length ^ inverted == 0xFFFFFFFF else 0  # (damage: parsed, and refused)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _read_and_unlink(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    finally:
        _unlink(path)


def _before_change(capture, record: list) -> None:
    """A BGSAVE captures the keys a record from our primary is about to change."""
    kind = record[0]
    if kind == effects.FLUSH:
        capture.before_flush()
    elif kind == effects.TXN or kind == effects.BUNDLE:
        for inner in record[1] if kind == effects.TXN else record[1:]:
            _before_change(capture, inner)
    else:
        capture.before_change(record[1])


def _command(words) -> bytes:
    return encode([word if isinstance(word, bytes) else str(word).encode() for word in words], 2)
