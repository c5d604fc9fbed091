"""MULTI / EXEC / DISCARD / WATCH / UNWATCH through the real server.

Replies and errors are compared byte for byte with redis-server's (the oracle)
over raw sockets, in RESP2 and RESP3; then redis-py's pipeline() (MULTI/EXEC),
WATCH races between two clients, and the append-only file: a transaction is one
TXN record, restored whole, and cut off whole when a crash tears it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time

import hiredis
import pytest
import redis
import redis.asyncio

from tstream.persistence import aof as aof_files
from tstream.persistence import effects
from tstream.persistence.fileops import FileOps

from .conftest import ServerProcess, raw_exchange
from .harness import encode_command
from .test_faults import FaultyFileOps, FaultyServer, make_aof, replayed


class Raw:
    """A socket that sends one command and returns its reply's exact bytes."""

    def __init__(self, port: int, protocol: int = 2) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if protocol == 3:
            self.call("HELLO", "3")

    def call(self, *words) -> bytes:
        self.sock.sendall(encode_command(words))
        reader = hiredis.Reader()
        received = b""
        while True:
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed"
            received += chunk
            reader.feed(chunk)
            if reader.gets() is not False:
                return received

    def close(self) -> None:
        self.sock.close()


# Sequences of commands both servers know; each runs on a fresh connection.
SEQUENCES = {
    "exec without multi": [("EXEC",)],
    "discard without multi": [("DISCARD",)],
    "empty transaction": [("MULTI",), ("EXEC",)],
    "queued replies": [("MULTI",), ("PING",), ("ECHO", "hello"), ("EXISTS", "nokey"), ("TYPE", "nokey"),
                       ("DEL", "nokey"), ("PING", "msg"), ("EXEC",)],
    "nested multi": [("MULTI",), ("MULTI",), ("PING",), ("EXEC",)],
    "watch inside multi": [("MULTI",), ("WATCH", "k"), ("PING",), ("EXEC",)],
    "unknown command aborts": [("MULTI",), ("PING",), ("NOSUCHCOMMAND", "a"), ("ECHO", "x"), ("EXEC",),
                               ("EXEC",)],
    "wrong arity aborts": [("MULTI",), ("ECHO",), ("PING",), ("EXEC",)],
    "unknown subcommand aborts": [("MULTI",), ("CONFIG", "NOSUCH"), ("EXEC",)],
    "discard": [("MULTI",), ("PING",), ("DISCARD",), ("EXEC",), ("PING",)],
    "multi arity": [("MULTI", "extra"), ("EXEC", "extra"), ("DISCARD", "x"), ("WATCH",), ("UNWATCH", "x")],
    "exec arity in multi": [("WATCH", "k"), ("MULTI",), ("PING",), ("EXEC", "extra"), ("EXEC",), ("PING",)],
    "watch and unwatch": [("WATCH", "a", "b"), ("UNWATCH",), ("MULTI",), ("UNWATCH",), ("EXEC",)],
    "watch untouched key": [("WATCH", "nokey"), ("MULTI",), ("PING",), ("EXEC",)],
    "lowercase": [("multi",), ("ping",), ("exec",)],
}


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
@pytest.mark.parametrize("name", list(SEQUENCES))
def test_replies_match_redis(server, redis_oracle, protocol, name):
    replies = {}
    for port in (server.port, redis_oracle):
        conn = Raw(port, protocol)
        replies[port] = [conn.call(*command) for command in SEQUENCES[name]]
        conn.close()
    assert replies[server.port] == replies[redis_oracle]


def make_key(port: int, key: str, is_redis: bool) -> None:
    client = redis.Redis(port=port)
    if is_redis:
        client.xadd(key, {"t": "v"})
    else:
        client.execute_command("TWRITE", key, "t", "v")
    client.close()


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
@pytest.mark.parametrize("change", ["del", "flushall"])
def test_watched_key_changed_by_another_client_matches_redis(server, redis_oracle, protocol, change):
    replies = {}
    for port, is_redis in ((server.port, False), (redis_oracle, True)):
        redis.Redis(port=port).flushall()
        make_key(port, "w", is_redis)
        conn = Raw(port, protocol)
        sequence = [conn.call("WATCH", "w", "other")]
        other = redis.Redis(port=port)
        other.delete("w") if change == "del" else other.flushall()
        other.close()
        sequence += [conn.call("MULTI"), conn.call("PING"), conn.call("EXEC"),
                     # after EXEC nothing is watched any more: this one runs
                     conn.call("MULTI"), conn.call("PING"), conn.call("EXEC")]
        conn.close()
        replies[port] = sequence
    assert replies[server.port] == replies[redis_oracle]
    assert replies[redis_oracle][3] == (b"*-1\r\n" if protocol == 2 else b"_\r\n")


def test_flushall_of_a_watched_missing_key_does_not_abort_matches_redis(server, redis_oracle):
    replies = {}
    for port in (server.port, redis_oracle):
        conn = Raw(port)
        replies[port] = [conn.call("WATCH", "missing"), conn.call("FLUSHALL"), conn.call("MULTI"),
                         conn.call("PING"), conn.call("EXEC")]
        conn.close()
    assert replies[server.port] == replies[redis_oracle]


# --- tstream's own commands in transactions ---------------------------------------------


def test_redis_py_pipeline_writes_once(r):
    """The issue's repro: redis-py's default pipeline() is MULTI ... EXEC."""
    pipe = r.pipeline()
    pipe.execute_command("TWRITE", "k", "t", "A")
    pipe.execute_command("TWRITE", "k2", "t", "B")
    pipe.execute_command("TREAD", "k", 1, 10)
    replies = pipe.execute()
    assert replies[:2] == [1, 1]
    assert [list(e) for e in replies[2]] == [[1, b"t", b"A"]]
    assert [list(e) for e in r.execute_command("TREAD", "k", 1, 10)] == [[1, b"t", b"A"]]


def test_nothing_runs_before_exec(r, server):
    other = server.client()
    assert r.execute_command("MULTI") in (b"OK", "OK", True)
    assert r.execute_command("TWRITE", "k", "t", "A") in (b"QUEUED", "QUEUED")
    assert other.execute_command("TREAD", "k", 1, 10) == []
    replies = r.execute_command("EXEC")
    assert replies == [1]
    assert len(other.execute_command("TREAD", "k", 1, 10)) == 1


def test_execabort_writes_nothing(server):
    r = server.client()
    pipe = r.pipeline()
    pipe.execute_command("TWRITE", "k", "t", "A")
    pipe.execute_command("TWRITE", "k")  # wrong arity: refused while queuing
    with pytest.raises(redis.exceptions.ResponseError, match="wrong number of arguments"):
        pipe.execute()  # redis-py raises the queuing error; EXEC replied EXECABORT
    assert r.execute_command("TREAD", "k", 1, 10) == []
    assert r.exists("k") == 0


def test_runtime_error_is_one_element_the_others_run(server):
    r = server.client()
    r.execute_command("TWRITE", "k", "t", "A")
    pipe = r.pipeline()
    pipe.execute_command("TWRITE", "k", "t", "B")
    pipe.execute_command("TACK", "k", "nogroup", "notanumber")
    pipe.execute_command("TWRITE", "k", "t", "C")
    replies = pipe.execute(raise_on_error=False)
    assert replies[0] == 2 and replies[2] == 3
    assert isinstance(replies[1], redis.exceptions.ResponseError)
    assert len(r.execute_command("TREAD", "k", 1, 10)) == 3


def test_watch_race_between_two_clients(server):
    a, b = server.client(), server.client()
    a.execute_command("TWRITE", "k", "t", "A")
    with a.pipeline() as pipe:
        pipe.watch("k")
        b.execute_command("TWRITE", "k", "t", "B")  # changes the watched key
        pipe.multi()
        pipe.execute_command("TWRITE", "k", "t", "from-a")
        with pytest.raises(redis.exceptions.WatchError):
            pipe.execute()
    assert [e[2] for e in a.execute_command("TREAD", "k", 1, 10)] == [b"A", b"B"]
    # Without a change in between, the same transaction runs.
    with a.pipeline() as pipe:
        pipe.watch("k")
        pipe.multi()
        pipe.execute_command("TWRITE", "k", "t", "from-a")
        assert pipe.execute() == [3]


@pytest.mark.parametrize("change", [
    ("TWRITE", "k", "t", "x"),
    ("TACK", "k", "g", 1),
    ("TREAD", "k", 1, 1, "GROUP", "g2"),
    ("TCONFIG", "k", "SET", "max_len", 10),
    ("TEVICT", "k", 1),
    ("DEL", "k"),
])
def test_every_kind_of_change_aborts_a_watching_exec(server, change):
    a, b = server.client(), server.client()
    a.execute_command("TWRITE", "k", "t", "A")
    a.execute_command("TWRITE", "k", "t", "B")
    a.execute_command("TREAD", "k", 1, 1, "GROUP", "g", "RETRY", 60000, 120000)
    a.execute_command("WATCH", "k")
    b.execute_command(*change)
    a.execute_command("MULTI")
    a.execute_command("PING")
    assert a.execute_command("EXEC") is None


def test_blocking_read_in_exec_times_out_at_once(server):
    r = server.client()
    started = time.monotonic()
    pipe = r.pipeline()
    pipe.execute_command("TREAD", "empty", 1, 10, "BLOCK", 0)
    pipe.execute_command("TREAD", "empty", 1, 10, "GROUP", "g", "BLOCK", 0)
    pipe.execute_command("TWRITE", "empty", "t", "A")
    pipe.execute_command("TREAD", "empty", 1, 10, "GROUP", "g", "BLOCK", 0)
    replies = pipe.execute()
    assert time.monotonic() - started < 5
    assert replies[0] is None and replies[1] is None and replies[2] == 1
    assert [list(e) for e in replies[3]] == [[1, b"t", b"A"]]


def test_asyncio_pipeline(server):
    async def run():
        client = redis.asyncio.Redis(port=server.port, protocol=3)
        pipe = client.pipeline()
        pipe.execute_command("TWRITE", "ak", "t", "A")
        pipe.execute_command("TWRITE", "ak", "t", "B")
        replies = await pipe.execute()
        entries = await client.execute_command("TREAD", "ak", 1, 10)
        await client.aclose()
        return replies, entries

    replies, entries = asyncio.run(run())
    assert replies == [1, 2]
    assert len(entries) == 2


def test_a_closed_connection_forgets_its_watches(server):
    a = server.client()
    a.execute_command("WATCH", "k")
    a.close()
    b = server.client()
    b.execute_command("TWRITE", "k", "t", "v")  # nothing left to mark
    assert b.execute_command("TREAD", "k", 1, 1)[0][2] == b"v"


# --- the append-only file ------------------------------------------------------------


def aof_records(directory) -> list:
    entries = aof_files.read_manifest(os.path.join(directory, "appendonlydir"))
    incr = os.path.join(directory, "appendonlydir", entries[-1].name)
    with open(incr, "rb") as handle:
        data = handle.read()
    return aof_files.records_of(data, incr), incr


def test_exec_is_one_txn_record_and_survives_a_restart(make_server, tmp_path):
    proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always")
    c = proc.client()
    pipe = c.pipeline()
    for i in range(5):
        pipe.execute_command("TWRITE", f"k{i}", "t", f"v{i}")
    pipe.execute()
    records, _ = aof_records(tmp_path)
    txns = [record for record in records if record[0] == effects.TXN]
    assert len(txns) == 1
    assert [inner[0] for inner in txns[0][1]].count(effects.APPEND) == 5
    proc.kill()
    proc.start()
    c = proc.client()
    assert [c.execute_command("TREAD", f"k{i}", 1, 1)[0][2] for i in range(5)] == [b"v%d" % i for i in range(5)]


def test_a_torn_transaction_is_cut_off_whole(make_server, tmp_path):
    proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always")
    c = proc.client()
    c.execute_command("TWRITE", "before", "t", "kept")
    pipe = c.pipeline()
    for i in range(5):
        pipe.execute_command("TWRITE", f"k{i}", "t", "x" * 200)
    pipe.execute()
    proc.kill()
    _, incr = aof_records(tmp_path)
    size = os.path.getsize(incr)
    with open(incr, "r+b") as handle:  # a crash in the middle of writing the TXN frame
        handle.truncate(size - 300)
    proc.start()
    c = proc.client()
    assert c.execute_command("TREAD", "before", 1, 1)[0][2] == b"kept"
    assert [c.exists(f"k{i}") for i in range(5)] == [0] * 5


def test_a_txn_record_cut_by_a_short_write_is_kept_out_whole(tmp_path):
    """The AOF writer under a short write then ENOSPC: the TXN frame is cut back,
    never left half in the file; once the space is back it is written whole."""
    file = make_aof(tmp_path, FileOps())
    file.ops = FaultyFileOps("write", "write", 1)
    file.log([effects.TXN, [[effects.APPEND, b"k", 1, 1, b"t", b"a" * 100],
                            [effects.APPEND, b"k", 2, 1, b"t", b"b" * 100]]])
    with pytest.raises(OSError):
        file.write_buffer()
    assert replayed(tmp_path) == []  # as after a crash now: none of it
    file.write_buffer()
    file.close()
    assert replayed(tmp_path) == [b"a" * 100, b"b" * 100]


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_a_failed_aof_write_during_exec_is_all_or_nothing(tmp_path, fsync):
    """Transactions writing the same value to four keys, the AOF's 3rd write failing
    (ENOSPC after a short write; with ``always`` the server exits, as Redis does,
    with ``everysec`` it refuses writes until a retry succeeds): after a restart
    every key holds the same values, and every transaction the client was told
    succeeded is there."""
    proc = FaultyServer(tmp_path, "write:write:3:ENOSPC", "--save", "", "--appendonly", "yes",
                        "--appendfsync", fsync).start()
    client = proc.client()
    acked, refused = [], 0
    for i in range(8):
        pipe = client.pipeline()
        for j in range(4):
            pipe.execute_command("TWRITE", f"k{j}", "t", str(i))
        try:
            pipe.execute()
            acked.append(str(i).encode())
        except redis.ResponseError:  # MISCONF while the AOF cannot be written
            refused += 1
        except redis.ConnectionError:  # appendfsync always: the server exited
            break
        time.sleep(0.05)
    # The fault was met: with ``everysec`` a retry (every 100 ms) may succeed before
    # the next transaction, which then sees no MISCONF, so the log tells.
    assert len(acked) < 8 or refused or "Error writing to the AOF file" in proc.output()
    proc.kill()
    plain = ServerProcess(tmp_path, "--save", "", "--appendonly", "yes").start()
    try:
        client = plain.client()
        values = [[e[2] for e in client.execute_command("TREAD", f"k{j}", 1, 100)] for j in range(4)]
        assert values[0] == values[1] == values[2] == values[3]
        assert set(acked) <= set(values[0])
    finally:
        plain.stop()


@pytest.mark.slow
def test_sigkill_during_transactions_keeps_each_whole(tmp_path):
    """Writers doing MULTI/EXEC of TWRITEs on four keys under appendfsync always,
    the server SIGKILLed mid-stream, three times: after each restart every acknowledged
    transaction is there and none is partial (the four keys hold the same values)."""
    proc = ServerProcess(tmp_path, "--save", "", "--appendonly", "yes", "--appendfsync", "always").start()
    acked: list[bytes] = []
    lock = threading.Lock()

    def writer(name: str, stop: threading.Event) -> None:
        client = proc.client()
        i = 0
        while not stop.is_set():
            value = f"{name}-{i}".encode()
            pipe = client.pipeline()
            for j in range(4):
                pipe.execute_command("TWRITE", f"k{j}", "t", value)
            try:
                pipe.execute()
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                return
            with lock:
                acked.append(value)
            i += 1

    try:
        for round_ in range(3):
            stop = threading.Event()
            threads = [threading.Thread(target=writer, args=(f"r{round_}w{n}", stop)) for n in range(4)]
            for thread in threads:
                thread.start()
            time.sleep(0.7)
            proc.kill()
            stop.set()
            for thread in threads:
                thread.join(10)
            proc.start()
            client = proc.client()
            values = [[e[2] for e in client.execute_command("TREAD", f"k{j}", 1, 1_000_000)] for j in range(4)]
            assert values[0] == values[1] == values[2] == values[3]
            assert set(acked) <= set(values[0])
        assert len(acked) > 10
    finally:
        proc.stop()


def test_psync_in_multi_is_refused_as_redis(server, redis_oracle):
    """PSYNC is Redis's no-multi: refused when queued, which dooms the
    transaction (its answer and the stream cannot go inside EXEC's reply)."""
    script = b"".join(encode_command(words) for words in (
        ("MULTI",), ("PSYNC", "?", "-1"), ("EXEC",), ("PING",)))
    ours, theirs = raw_exchange(server.port, script), raw_exchange(redis_oracle, script)
    assert ours == theirs == (b"+OK\r\n-ERR Command not allowed inside a transaction\r\n"
                              b"-EXECABORT Transaction discarded because of previous errors.\r\n+PONG\r\n")
    assert server.client().info("replication")["connected_slaves"] == 0
