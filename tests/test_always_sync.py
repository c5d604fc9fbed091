"""appendfsync always with the fsync off the event loop (server.persist, server.turns):
what waits for an fsync and what does not, through the real server over TCP.

The fsync is made slow deterministically: the AOF's file operations are replaced by
ones whose fsync waits for the test to open a gate (the persistence layer's fault
seam, as tests/test_faults.py uses it); the tests count events, they time nothing."""

from __future__ import annotations

import select
import socket
import threading
import time

import hiredis
import redis

from tstream.persistence.fileops import FileOps
from tstream.server.embed import ServerThread

from .harness import encode_command

WAIT = 30.0  # the most any event may take before the test fails


class GatedFileOps(FileOps):
    """fsync waits for ``gate`` (the first one once ``armed``); counts the fsyncs begun and ended."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.begun = 0
        self.ended = 0
        self.armed = True

    def arm(self) -> None:
        """From now on: the next fsyncs wait for the gate, counted from 0."""
        self.begun = self.ended = 0
        self.armed = True

    def fsync(self, fd, step="fsync"):
        self.begun += 1
        if self.armed and step == "fsync":
            self.entered.set()
            assert self.gate.wait(WAIT)
        super().fsync(fd, step)
        self.ended += 1


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


class Raw:
    """A raw RESP2 connection: send now, read later, and see whether a reply is there."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.reader = hiredis.Reader()

    def send(self, *args) -> None:
        self.sock.sendall(encode_command(args))

    def has_reply(self) -> bool:
        return bool(select.select([self.sock], [], [], 0)[0])

    def reply(self):
        while True:
            got = self.reader.gets()
            if got is not False:
                return got
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed"
            self.reader.feed(chunk)

    def close(self) -> None:
        self.sock.close()


def _close(srv: ServerThread, ops: GatedFileOps, *connections) -> None:
    """A test's end, whatever happened: the gate open (no fsync left waiting), the
    connections closed, the server stopped."""
    ops.gate.set()
    for connection in connections:
        connection.close()
    srv.stop()


def _calls(srv: ServerThread, name: bytes) -> int:
    return srv.server.command_stats[name].calls


def _start(tmp_path) -> tuple[ServerThread, GatedFileOps]:
    srv = ServerThread(port=0, dir=tmp_path, save="", appendonly=True, appendfsync="always", aof_fsync_in_thread=True).start()
    ops = GatedFileOps()
    ops.armed = False
    srv.server.persistence.file.ops = ops  # (the AOF's fsyncs go through it from now on)
    return srv, ops


def test_a_read_of_an_unwritten_key_is_answered_while_a_write_waits_for_its_fsync(tmp_path):
    srv, ops = _start(tmp_path)
    writer = Raw(srv.port)
    reader = Raw(srv.port)
    other = redis.Redis(port=srv.port, socket_timeout=WAIT)
    try:
        other.execute_command("TWRITE", "mine", "t", "old")  # synced before the gate is armed
        ops.arm()
        writer.send("TWRITE", "log", "t", "new")
        assert ops.entered.wait(WAIT)  # its fsync began, and waits for the gate
        # A read of a key with no unsynced change: answered, the fsync still in flight.
        assert [e[2] for e in other.execute_command("TREAD", "mine", 1, 10)] == [b"old"]
        assert other.execute_command("TREAD", "nothing-here", 1, 10) in (None, [])
        assert ops.ended == 0 and not ops.gate.is_set()
        # A read of the written key: run, not answered before the fsync returns.
        reads = _calls(srv, b"tread")
        reader.send("TREAD", "log", 1, 10)
        _until(lambda: _calls(srv, b"tread") > reads, "the TREAD of log to run")
        assert other.execute_command("TREAD", "mine", 1, 10)  # (the loop went past that TREAD's turn)
        assert not reader.has_reply() and not writer.has_reply()
        # Its connection's later replies keep their order: behind the waiting one.
        reads = _calls(srv, b"tread")
        reader.send("TREAD", "mine", 1, 10)
        _until(lambda: _calls(srv, b"tread") > reads, "the second TREAD")
        assert other.execute_command("TREAD", "mine", 1, 10)
        assert not reader.has_reply()
        assert ops.ended == 0
        ops.gate.set()
        assert writer.reply() == 1
        assert [e[2] for e in reader.reply()] == [b"new"]
        assert [e[2] for e in reader.reply()] == [b"old"]
        assert ops.ended >= 1
    finally:
        _close(srv, ops, writer, reader, other)


def test_writes_during_an_fsync_join_the_next_one(tmp_path):
    """Group commit across turns: the writes that arrive while an fsync is in flight
    are answered after one more fsync, not one each."""
    srv, ops = _start(tmp_path)
    first = Raw(srv.port)
    others = [Raw(srv.port) for _ in range(5)]
    try:
        ops.arm()
        first.send("TWRITE", "log", "t", "a")
        assert ops.entered.wait(WAIT)
        writes = _calls(srv, b"twrite")
        for n, c in enumerate(others):
            c.send("TWRITE", f"k{n}", "t", "b")
        _until(lambda: _calls(srv, b"twrite") == writes + len(others), "the five writes to run")
        assert not any(c.has_reply() for c in [first, *others])
        begun = ops.begun
        ops.armed = False
        ops.gate.set()
        assert first.reply() == 1
        assert [c.reply() for c in others] == [1] * len(others)
        assert ops.begun == begun + 1  # the five writes' turns: one fsync
        srv.stop()
        srv = ServerThread(port=0, dir=tmp_path, save="", appendonly=True, appendfsync="always", aof_fsync_in_thread=True).start()
        check = redis.Redis(port=srv.port)
        assert [len(check.execute_command("TREAD", f"k{n}", 1, 10)) for n in range(5)] == [1] * 5
        check.close()
    finally:
        _close(srv, ops, first, *others)


def test_keyless_commands_wait_and_transactions_wait(tmp_path):
    """Replies that could reveal an unsynced change without naming its key (DBSIZE,
    EXEC) wait for the fsync; MULTI's QUEUED and EXEC keep their order."""
    srv, ops = _start(tmp_path)
    writer = Raw(srv.port)
    keyless = Raw(srv.port)
    other = redis.Redis(port=srv.port, socket_timeout=WAIT)
    try:
        other.execute_command("TWRITE", "mine", "t", "old")
        ops.arm()
        writer.send("TWRITE", "log", "t", "new")
        assert ops.entered.wait(WAIT)
        calls = _calls(srv, b"dbsize")
        keyless.send("DBSIZE")
        _until(lambda: _calls(srv, b"dbsize") > calls, "DBSIZE to run")
        assert other.execute_command("TREAD", "mine", 1, 10)
        assert not keyless.has_reply()
        calls = _calls(srv, b"exec")
        for command in (("MULTI",), ("TREAD", "mine", 1, 10), ("EXEC",)):
            keyless.send(*command)
        _until(lambda: _calls(srv, b"exec") > calls, "EXEC to run")
        assert other.execute_command("TREAD", "mine", 1, 10)
        assert not keyless.has_reply() and ops.ended == 0
        ops.gate.set()
        assert writer.reply() == 1
        assert keyless.reply() == 2
        assert [keyless.reply() for _ in range(3)][:2] == [b"OK", b"QUEUED"]
    finally:
        _close(srv, ops, writer, keyless, other)


def test_a_blocked_reader_served_by_a_write_waits_for_its_fsync(tmp_path):
    srv, ops = _start(tmp_path)
    blocked = Raw(srv.port)
    writer = Raw(srv.port)
    other = redis.Redis(port=srv.port, socket_timeout=WAIT)
    try:
        other.execute_command("TWRITE", "mine", "t", "old")
        blocked.send("TREAD", "log", 1, 10, "BLOCK", 0)
        _until(lambda: b"log" in srv.server.waiting_keys, "the reader to block")
        ops.arm()
        writer.send("TWRITE", "log", "t", "new")
        assert ops.entered.wait(WAIT)
        assert other.execute_command("TREAD", "mine", 1, 10)
        assert not blocked.has_reply() and not writer.has_reply()
        ops.gate.set()
        assert writer.reply() == 1
        assert [e[2] for e in blocked.reply()] == [b"new"]
    finally:
        _close(srv, ops, writer, blocked, other)


def test_bgrewriteaof_and_config_set_wait_for_the_fsync_in_flight(tmp_path):
    srv, ops = _start(tmp_path)
    writer = Raw(srv.port)
    admin = Raw(srv.port)
    try:
        ops.arm()
        writer.send("TWRITE", "log", "t", "a")
        assert ops.entered.wait(WAIT)
        admin.send("BGREWRITEAOF")  # switches files: waits for the fsync in flight first

        def release() -> None:
            time.sleep(0.05)  # (only to let BGREWRITEAOF reach the server first; either order is correct)
            ops.armed = False
            ops.gate.set()

        threading.Thread(target=release).start()
        assert writer.reply() == 1
        assert b"rewriting" in admin.reply()
        _until(lambda: srv.server.persistence.rewrite_started is None, "the rewrite to finish")
        admin.send("CONFIG", "SET", "appendfsync", "everysec")
        assert admin.reply() == b"OK"
        writer.send("TWRITE", "log", "t", "b")
        assert writer.reply() == 2
        srv.stop()
        srv = ServerThread(port=0, dir=tmp_path, save="", appendonly=True).start()
        check = redis.Redis(port=srv.port)
        assert [e[2] for e in check.execute_command("TREAD", "log", 1, 10)] == [b"a", b"b"]
        check.close()
    finally:
        _close(srv, ops, writer, admin)


class _Load:
    """Writers on "log", followers of "log" and readers of "mine", until ``stop``."""

    def __init__(self, proc) -> None:
        self.proc = proc
        self.acked: list[tuple[int, bytes]] = []
        self.seen: dict[int, bytes] = {}
        self.own_reads = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def writer(self, n: int) -> None:
        c = self.proc.client(socket_timeout=5)
        i = 0
        try:
            while not self.stop.is_set():
                payload = f"w{n}-{i}".encode()
                offset = c.execute_command("TWRITE", "log", "t", payload)
                with self.lock:
                    self.acked.append((offset, payload))
                i += 1
        except (redis.ConnectionError, redis.TimeoutError):
            pass

    def follower(self) -> None:
        c = self.proc.client(socket_timeout=5)
        at = 1
        try:
            while not self.stop.is_set():
                for offset, _, payload in c.execute_command("TREAD", "log", at, 100) or ():
                    with self.lock:
                        self.seen[offset] = payload
                    at = offset + 1
        except (redis.ConnectionError, redis.TimeoutError):
            pass

    def own_reader(self) -> None:
        c = self.proc.client(socket_timeout=5)
        try:
            while not self.stop.is_set():
                assert [e[2] for e in c.execute_command("TREAD", "mine", 1, 10)] == [b"old"]
                self.own_reads += 1
        except (redis.ConnectionError, redis.TimeoutError):
            pass


def test_sigkill_keeps_every_acknowledged_write_and_every_entry_a_reader_saw(make_server):
    """Writers on one key, readers following it (plain TREADs, which wait for the
    fsync of what they would reveal) and readers of their own synced key, then
    SIGKILL: after the restart every acknowledged write and every entry any
    reader was shown is there."""
    proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always", "--aof-fsync-in-thread", "yes")
    setup = proc.client()
    setup.execute_command("TWRITE", "mine", "t", "old")
    setup.close()
    load = _Load(proc)
    threads = [threading.Thread(target=load.writer, args=(n,)) for n in range(3)]
    threads += [threading.Thread(target=load.follower) for _ in range(2)]
    threads.append(threading.Thread(target=load.own_reader))
    for t in threads:
        t.start()
    _until(lambda: len(load.acked) > 300 and len(load.seen) > 100 and load.own_reads > 100, "writes and reads")
    proc.kill()
    load.stop.set()
    for t in threads:
        t.join(10)
    proc.start()
    c = proc.client()
    entries = {e[0]: e[2] for e in c.execute_command("TREAD", "log", 1, 10**6) if e}
    for offset, payload in load.acked:
        assert entries.get(offset) == payload, f"acknowledged write {offset} lost or changed"
    for offset, payload in load.seen.items():
        assert entries.get(offset) == payload, f"entry {offset} shown to a reader, lost"
    c.close()


class ThreadNamingFileOps(FileOps):
    """Records the name of the thread each fsync of the AOF runs on."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def fsync(self, fd, step="fsync"):
        if step == "fsync":
            self.threads.append(threading.current_thread().name)
        super().fsync(fd, step)


def test_the_fsync_runs_on_the_loop_by_default_and_in_a_thread_when_asked(tmp_path):
    """aof-fsync-in-thread no (the default): the fsync on the event loop, as Redis does, and no
    read is let go early; CONFIG SET aof-fsync-in-thread yes moves the next fsyncs to the thread."""
    srv = ServerThread(port=0, dir=tmp_path, save="", appendonly=True, appendfsync="always").start()
    client = redis.Redis(port=srv.port, socket_timeout=WAIT)
    try:
        ops = ThreadNamingFileOps()
        srv.server.persistence.file.ops = ops
        assert client.config_get("aof-fsync-in-thread") == {"aof-fsync-in-thread": "no"}
        assert not srv.server.sync_early
        assert client.execute_command("TWRITE", "log", "t", "a") == 1
        loop_thread = ops.threads[-1]
        assert loop_thread != "aof-fsync-always"
        assert client.config_set("aof-fsync-in-thread", "yes")
        assert srv.server.sync_early
        assert client.execute_command("TWRITE", "log", "t", "b") == 2
        assert ops.threads[-1] == "aof-fsync-always"
        assert client.config_set("aof-fsync-in-thread", "no")
        assert client.execute_command("TWRITE", "log", "t", "c") == 3
        assert ops.threads[-1] == loop_thread
        assert [e[2] for e in client.execute_command("TREAD", "log", 1, 10)] == [b"a", b"b", b"c"]
    finally:
        client.close()
        srv.stop()
