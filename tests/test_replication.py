"""Replication through real server processes on loopback (server/replication.py):
full resync of a replica started late, partial resync (+CONTINUE) after a cut
shorter than the backlog, full resync beyond it, the data, groups and pending
entries equal on both, WAIT, read-only replicas serving reads, REPLICAOF NO ONE
(the other replicas continue at the promoted one), and the bad cases: a replica
of itself, of a redis-server, with the wrong masterauth."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest
import redis

from .conftest import ROOT, ServerProcess, free_port, read_until_quiet


def wait_for(predicate, timeout: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def info(client, section: str = "replication") -> dict:
    return client.info(section)


def linked(replica) -> bool:
    fields = info(replica)
    return fields.get("master_link_status") == "up"


def follower(pair, primary):
    """A replica of ``primary`` started with ``--replicaof``, once its link is up:
    (the process, a client of it)."""
    replica = pair("--replicaof", f"127.0.0.1 {primary.port}")
    r = replica.client()
    wait_for(lambda: linked(r), what="the link")
    return replica, r


def caught_up(primary, replica) -> bool:
    return linked(replica) and info(replica)["slave_repl_offset"] == info(primary)["master_repl_offset"]


def sync(primary, replica) -> None:
    assert primary.execute_command("WAIT", 1, 5000) >= 1
    wait_for(lambda: caught_up(primary, replica), what="the replica to catch up")


@pytest.fixture
def pair(tmp_path):
    """A primary and a replica (not linked yet), each in its own directory."""
    made = []

    def make(*args: str) -> ServerProcess:
        directory = tmp_path / f"s{len(made)}"
        directory.mkdir()
        proc = ServerProcess(directory, "--save", "", *args)
        made.append(proc)
        return proc.start()

    yield make
    for proc in made:
        proc.stop()


def fill(c: redis.Redis, n: int = 300, groups: bool = True) -> None:
    """Every kind of state: entries, a tag per entry, a group with pending entries,
    acks, X* streams with a group, consumers and pending ids, JetStream subjects."""
    pipe = c.pipeline(transaction=False)
    for i in range(n):
        pipe.execute_command("TWRITE", "log", f"t{i % 5}", f"entry-{i}")
    pipe.execute()
    c.execute_command("TREAD", "log", 0, 10, "GROUP", "g1")
    c.execute_command("TACK", "log", "g1", 1, 2, 3)
    for i in range(50):
        c.xadd("xs", {"f": i})
    if groups:
        c.xgroup_create("xs", "xg", id="0")
    c.xreadgroup("xg", "alice", {"xs": ">"}, count=7)
    c.execute_command("TWRITE", "subj", "orders.eu", '{"a": 1}')
    c.execute_command("TWRITE", "subj", "orders.us", '{"a": 2}')


def state(c: redis.Redis) -> dict:
    """What must be equal on a primary and its replica."""
    return {
        "keys": sorted(c.keys("*")),
        "log": c.execute_command("TREAD", "log", 0, 100000),
        # (TINFO's bytes is memory, not data: a node's allocation may differ)
        "tinfo": {k: v for k, v in c.execute_command("TINFO", "log").items() if k != b"bytes"},
        "pending": c.execute_command("TPENDING", "log", "g1"),
        "xs": c.xrange("xs"),
        "xgroups": c.xinfo_groups("xs"),
        "xpending": [{k: v for k, v in p.items() if k != "time_since_delivered"}
                     for p in c.xpending_range("xs", "xg", "-", "+", 100)],
        "dget": c.execute_command("DGET", "subj", "LAST_BY_SUBJ", "orders.eu"),
        "mlast": c.execute_command("MLAST", "subj", "SUBJECTS", "orders.>"),
    }


def check_files(proc: ServerProcess) -> None:
    """SAVE, then tstream-check on the snapshot."""
    c = proc.client()
    assert c.save()
    result = subprocess.run([sys.executable, "-m", "tstream.persistence.check", str(proc.dir / "dump.tsr")],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_full_resync_of_a_late_replica_then_the_stream(pair):
    primary = pair()
    p = primary.client()
    fill(p)
    replica = pair()
    r = replica.client()
    assert r.execute_command("REPLICAOF", "127.0.0.1", primary.port) == b"OK"
    wait_for(lambda: linked(r), what="the link")
    sync(p, r)
    assert state(r) == state(p)
    # what the primary does from now on reaches the replica as effects
    fill(p, 120, groups=False)
    p.execute_command("TREAD", "log", 0, 5, "GROUP", "g2")
    p.xack("xs", "xg", p.xrange("xs", count=1)[0][0])
    sync(p, r)
    assert state(r) == state(p)
    assert info(p, "stats")["sync_full"] == 1
    rep = info(p)
    assert rep["connected_slaves"] == 1 and rep["slave0"]["state"] == "online"
    assert rep["slave0"]["port"] == replica.port
    assert r.execute_command("ROLE")[:4] == [b"slave", b"127.0.0.1", primary.port, b"connected"]
    role = p.execute_command("ROLE")
    assert role[0] == b"master" and role[2][0][1] == str(replica.port).encode()
    check_files(primary)
    check_files(replica)


def test_replica_serves_reads_and_refuses_writes(pair):
    primary = pair()
    p = primary.client()
    fill(p, 20)
    replica, r = follower(pair, primary)
    sync(p, r)
    assert r.execute_command("TREAD", "log", 0, 3) == p.execute_command("TREAD", "log", 0, 3)
    assert r.xrange("xs", count=2) == p.xrange("xs", count=2)
    assert r.execute_command("DGET", "subj", "SEQ", 1) == p.execute_command("DGET", "subj", "SEQ", 1)
    for command in (("TWRITE", "log", "t", "x"), ("XADD", "xs", "*", "f", "v"), ("TACK", "log", "g1", 4),
                    ("TREAD", "log", 0, 1, "GROUP", "g1"), ("DEL", "log")):
        with pytest.raises(redis.ResponseError, match="^You can't write against a read only replica.$"):
            r.execute_command(*command)
    # READONLY as Redis words it, byte for byte
    raw = redis.Connection(port=replica.port)
    raw.send_command("TWRITE", "log", "t", "x")
    with pytest.raises(redis.ReadOnlyError):
        raw.read_response()
    raw.disconnect()
    with pytest.raises(redis.ResponseError, match="WAIT cannot be used with replica instances"):
        r.execute_command("WAIT", 1, 10)
    fields = info(r)
    assert fields["role"] == "slave" and fields["slave_read_only"] == 1 and fields["slave_priority"] == 100
    # replica-read-only no: local writes are allowed (and not propagated)
    r.config_set("replica-read-only", "no")
    assert r.execute_command("TWRITE", "local", "t", "x") == 1
    assert p.exists("local") == 0


def _cut(p: redis.Redis) -> None:
    assert p.execute_command("CLIENT", "KILL", "TYPE", "replica") == 1


def test_partial_resync_after_a_short_cut(pair):
    primary = pair()
    p = primary.client()
    fill(p, 50)
    replica, r = follower(pair, primary)
    sync(p, r)
    _cut(p)
    for i in range(100):  # while the replica is away (it reconnects after a second)
        p.execute_command("TWRITE", "log", "t", f"while-away-{i}")
    wait_for(lambda: info(p, "stats")["sync_partial_ok"] == 1, what="a partial resync")
    sync(p, r)
    assert state(r) == state(p)
    assert info(p, "stats")["sync_full"] == 1
    assert "Partial resynchronization request" in primary.output()


def test_full_resync_when_the_cut_outlasts_the_backlog(pair):
    primary = pair("--repl-backlog-size", "16kb")
    p = primary.client()
    replica, r = follower(pair, primary)
    fill(p, 10)
    sync(p, r)
    _cut(p)
    payload = "x" * 1000
    for _ in range(40):  # 40 KB: more than the backlog holds
        p.execute_command("TWRITE", "log", "t", payload)
    wait_for(lambda: info(p, "stats")["sync_full"] == 2, what="a second full resync")
    sync(p, r)
    assert state(r) == state(p)
    assert info(p, "stats")["sync_partial_err"] == 1


def test_wait(pair):
    primary = pair()
    p = primary.client()
    p.execute_command("TWRITE", "k", "t", "x")
    assert p.execute_command("WAIT", 0, 0) == 0
    started = time.monotonic()
    assert p.execute_command("WAIT", 1, 200) == 0  # no replica: the timeout
    assert time.monotonic() - started >= 0.19
    replica, r = follower(pair, primary)
    for i in range(20):
        p.execute_command("TWRITE", "k", "t", f"x{i}")
        assert p.execute_command("WAIT", 1, 2000) == 1
        assert r.execute_command("TREAD", "k", 0, 100) == p.execute_command("TREAD", "k", 0, 100)
    assert p.execute_command("WAIT", 2, 100) == 1  # only one replica acknowledges
    with pytest.raises(redis.ResponseError, match="timeout is negative"):
        p.execute_command("WAIT", 1, -1)


def test_min_replicas_to_write(pair):
    primary = pair("--min-replicas-to-write", "1", "--min-replicas-max-lag", "10")
    p = primary.client()
    with pytest.raises(redis.ResponseError, match="^NOREPLICAS Not enough good replicas to write.$"):
        p.execute_command("TWRITE", "k", "t", "x")
    assert p.execute_command("TREAD", "k", 0, 1) == []  # reads go on
    assert info(p)["min_slaves_good_slaves"] == 0
    replica = pair("--replicaof", f"127.0.0.1 {primary.port}")
    wait_for(lambda: linked(replica.client()), what="the link")
    wait_for(lambda: info(p)["min_slaves_good_slaves"] == 1, what="a good replica")
    assert p.execute_command("TWRITE", "k", "t", "x") == 1


def test_promotion_keeps_data_and_the_other_replica_continues(pair):
    primary = pair()
    p = primary.client()
    fill(p, 40)
    first = pair("--replicaof", f"127.0.0.1 {primary.port}")
    second = pair("--replicaof", f"127.0.0.1 {primary.port}")
    a, b = first.client(), second.client()
    wait_for(lambda: linked(a) and linked(b), what="the links")
    assert p.execute_command("WAIT", 2, 5000) == 2
    wait_for(lambda: caught_up(p, a) and caught_up(p, b), what="both replicas")
    old_replid = info(p)["master_replid"]
    primary.kill()
    assert a.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
    fields = info(a)
    assert fields["role"] == "master" and fields["master_replid2"] == old_replid
    assert fields["master_replid"] != old_replid
    assert fields["second_repl_offset"] == fields["master_repl_offset"] + 1
    assert a.execute_command("TWRITE", "log", "t", "after-failover") == 41
    b.execute_command("REPLICAOF", "127.0.0.1", first.port)
    wait_for(lambda: linked(b), what="the link to the promoted replica")
    sync(a, b)
    assert state(b) == state(a)
    assert info(a, "stats")["sync_partial_ok"] == 1 and info(a, "stats")["sync_full"] == 0


def test_bad_primaries_leave_the_server_serving(pair, tmp_path):
    server = pair()
    c = server.client()
    c.execute_command("TWRITE", "k", "t", "x")
    # itself
    c.execute_command("REPLICAOF", "127.0.0.1", server.port)
    wait_for(lambda: "itself" in info(c).get("master_link_error", ""), what="the error in INFO")
    assert info(c)["master_link_status"] == "down"
    assert c.execute_command("TREAD", "k", 0, 1)[0][1] == b"t"
    assert "itself" in server.output()
    # a redis-server
    if shutil.which("redis-server"):
        port = free_port()
        redis_dir = tmp_path / "redis"
        redis_dir.mkdir()
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                                 "--dir", str(redis_dir)], stdout=subprocess.DEVNULL)
        try:
            wait_for(lambda: _pings(port), what="redis-server")
            c.execute_command("REPLICAOF", "127.0.0.1", port)
            wait_for(lambda: "not a tstream server" in info(c).get("master_link_error", ""),
                     what="the error in INFO")
            assert c.execute_command("TREAD", "k", 0, 1)[0][1] == b"t"
        finally:
            proc.terminate()
            proc.wait(10)
    # the wrong password
    locked = pair("--requirepass", "secret")
    c.config_set("masterauth", "wrong")
    c.execute_command("REPLICAOF", "127.0.0.1", locked.port)
    wait_for(lambda: "Unable to AUTH" in info(c).get("master_link_error", ""), what="the error in INFO")
    assert "Unable to AUTH to MASTER" in server.output()
    # the right one: it syncs (and the old data goes, as with Redis)
    locked.client(password="secret").execute_command("TWRITE", "other", "t", "y")
    c.config_set("masterauth", "secret")
    wait_for(lambda: linked(c), what="the link with the right password")
    wait_for(lambda: c.keys("*") == [b"other"], what="the primary's data")
    assert c.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
    assert info(c)["role"] == "master"
    assert c.execute_command("TWRITE", "k2", "t", "x") == 1


def _pings(port: int) -> bool:
    try:
        return redis.Redis(port=port, socket_timeout=1).ping()
    except redis.ConnectionError:
        return False


def test_a_replica_with_an_aof_keeps_what_it_replicated(pair):
    """A full resync replaces the replica's data: its AOF is rewritten from it, then
    logs the records it applies; restarted as a primary, it has it all."""
    primary = pair()
    p = primary.client()
    fill(p, 60)
    replica = pair("--appendonly", "yes")
    r = replica.client()
    r.execute_command("TWRITE", "stale", "t", "gone after the resync")
    r.execute_command("REPLICAOF", "127.0.0.1", primary.port)
    wait_for(lambda: linked(r), what="the link")
    fill(p, 40, groups=False)
    p.execute_command("TACK", "log", "g1", 4)
    sync(p, r)
    expected = state(p)
    assert state(r) == expected
    wait_for(lambda: info(r, "persistence")["aof_rewrite_in_progress"] == 0, what="the AOF rewrite")
    replica.stop()
    replica.start("--replicaof", "no one")
    r = replica.client()
    assert state(r) == expected
    result = subprocess.run([sys.executable, "-m", "tstream.persistence.check", str(replica.dir / "appendonlydir")],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_blocked_readers_on_a_replica_are_served_by_replicated_writes(pair):
    primary = pair()
    p = primary.client()
    replica, r = follower(pair, primary)
    p.execute_command("TWRITE", "k", "t", "first")
    sync(p, r)
    reader = replica.client()
    answer = {}

    def read():
        answer["tread"] = reader.execute_command("TREAD", "k", 2, 10, "BLOCK", 5000)
        answer["xread"] = reader.xread({"xs": "$"}, block=5000)

    thread = threading.Thread(target=read)
    thread.start()
    time.sleep(0.3)
    p.execute_command("TWRITE", "k", "t", "second")
    time.sleep(0.3)
    p.xadd("xs", {"f": "v"}, id="5-1")
    thread.join(10)
    assert answer["tread"][0][2] == b"second"
    assert answer["xread"][0][1][0][0] == b"5-1"


def test_replies_match_redis_byte_for_byte(pair, redis_oracle):
    """redis-server is the oracle: REPLICAOF's replies, a replica's READONLY and WAIT
    errors, ROLE while the primary is unreachable, WAIT's errors, NOREPLICAS."""
    tstream = pair()
    dead = free_port()  # nothing listens there: both stay in state connect
    exchanges = [
        ("REPLICAOF", "127.0.0.1", "x"),
        ("REPLICAOF", "127.0.0.1", str(dead)),
        ("REPLICAOF", "127.0.0.1", str(dead)),
        ("{write}",),
        ("WAIT", "1", "10"),
        ("ROLE",),
        ("REPLICAOF", "NO", "ONE"),
        ("REPLICAOF", "NO", "ONE"),
        ("ROLE",),
        ("WAIT", "0", "0"),
        ("WAIT", "1", "-1"),
        ("WAIT", "x", "0"),
        ("CONFIG", "SET", "min-replicas-to-write", "1"),
        ("{write}",),
        ("CONFIG", "SET", "min-replicas-to-write", "0"),
    ]

    def run(port: int, write: tuple) -> list[bytes]:
        replies = []
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            for words in exchanges:
                words = write if words == ("{write}",) else words
                sock.sendall(_encode(words))
                time.sleep(0.15 if words[0] == "REPLICAOF" else 0.02)
                replies.append(read_until_quiet(sock, 0.15))
        return replies

    ours = run(tstream.port, ("TWRITE", "k", "t", "v"))
    theirs = run(redis_oracle, ("SET", "k", "v"))
    assert ours == theirs


def _encode(words) -> bytes:
    out = [b"*%d\r\n" % len(words)]
    for word in words:
        data = word.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def test_a_primary_with_an_aof_packs_once_for_both(pair):
    """With appendonly yes and a replica, the turn's records are packed once and the
    same bytes go to the AOF and the stream: both replay to the same state."""
    primary = pair("--appendonly", "yes", "--appendfsync", "always")
    p = primary.client()
    replica, r = follower(pair, primary)
    fill(p, 200)
    with p.pipeline(transaction=True) as pipe:
        pipe.execute_command("TWRITE", "log", "t", "in-a-txn")
        pipe.execute_command("TACK", "log", "g1", 5)
        pipe.execute()
    sync(p, r)
    expected = state(p)
    assert state(r) == expected
    primary.kill()
    primary.start()
    assert state(primary.client()) == expected


def test_big_records_cross_many_reads(pair):
    """A record of several MB arrives in many reads: the replica waits for it whole."""
    primary = pair()
    p = primary.client()
    replica, r = follower(pair, primary)
    big = b"x" * (6 << 20)
    p.execute_command("TWRITE", "big", "t", big)
    p.execute_command("TWRITE", "big", "t", b"small")
    sync(p, r)
    assert r.execute_command("TREAD", "big", 1, 2) == p.execute_command("TREAD", "big", 1, 2)


def test_a_replica_of_a_replica_gets_the_same_stream(pair):
    primary = pair()
    p = primary.client()
    fill(p, 30)
    middle = pair("--replicaof", f"127.0.0.1 {primary.port}")
    m = middle.client()
    wait_for(lambda: linked(m), what="the first link")
    leaf = pair("--replicaof", f"127.0.0.1 {middle.port}")
    leaf_client = leaf.client()
    wait_for(lambda: linked(leaf_client), what="the second link")
    fill(p, 30, groups=False)
    sync(p, m)
    wait_for(lambda: info(leaf_client)["slave_repl_offset"] == info(p)["master_repl_offset"],
             what="the leaf to catch up")
    assert state(leaf_client) == state(p)
    assert info(leaf_client)["master_replid"] == info(p)["master_replid"]
    with p.pipeline(transaction=True) as pipe:  # WAIT inside EXEC: the count at once
        pipe.execute_command("TWRITE", "log", "t", "x")
        pipe.execute_command("WAIT", 1, 0)
        assert pipe.execute()[1] in (0, 1)


def test_the_typed_client_reads_from_replicas(pair):
    from tstream.client import TStream

    primary = pair()
    replica, r = follower(pair, primary)
    ts = TStream(primary.client(), replicas=[replica.client()])
    first = ts.twrite("orders", "orders.eu", b'{"n": 1}')
    ts.twrite("orders", "orders.us", b'{"n": 2}')
    assert primary.client().execute_command("WAIT", 1, 5000) == 1
    wait_for(lambda: caught_up(primary.client(), r), what="the replica")
    r.config_resetstat()
    primary.client().config_resetstat()
    assert [e.data for e in ts.tread("orders", first, 10)] == [b'{"n": 1}', b'{"n": 2}']
    assert ts.dget("orders", seq=2).data == b'{"n": 2}'
    assert ts.tinfo("orders").length == 2
    ts.tread("orders", first, 1, group="g")  # a group read: on the primary
    stats = r.info("commandstats")
    assert stats["cmdstat_tread"]["calls"] == 1 and stats["cmdstat_dget"]["calls"] == 1
    assert stats["cmdstat_tinfo"]["calls"] == 1
    assert primary.client().info("commandstats")["cmdstat_tread"]["calls"] == 1


def continues_after_restart(p, replica) -> None:
    """Start the stopped ``replica`` again on its files: it resyncs partially (its one
    full resync was the first), catches up and holds what the primary holds."""
    replica.start()
    r = replica.client()
    wait_for(lambda: info(p, "stats")["sync_partial_ok"] == 1, what="a partial resync")
    sync(p, r)
    assert info(p, "stats")["sync_full"] == 1
    assert state(r) == state(p)


def test_a_replica_restarted_on_its_snapshot_continues(pair):
    """A clean shutdown saves a snapshot holding the replication id and offset
    (aux fields, as Redis 7's RDB): restarted on it, the replica resumes with
    +CONTINUE, not a full resync."""
    primary = pair()
    p = primary.client()
    fill(p, 80)
    replica = pair("--save", "3600 1", "--replicaof", f"127.0.0.1 {primary.port}")
    r = replica.client()
    wait_for(lambda: linked(r), what="the link")
    sync(p, r)
    replid = info(p)["master_replid"]
    assert replica.stop() == 0  # SIGTERM: the final snapshot, aux fields included
    fields = {}
    from tstream.persistence import snapshot
    snapshot.load_file(str(replica.dir / "dump.tsr"), aux=fields)
    assert fields["repl-id"] == replid and fields["repl-offset"] == info(p)["master_repl_offset"]
    fill(p, 30, groups=False)  # while it is down: within the backlog
    continues_after_restart(p, replica)
    assert "restored from disk" in replica.output()


def test_a_primary_restarted_on_its_snapshot_keeps_its_replicas(pair):
    """The primary's own restart: its old replid becomes its replid2 at the saved
    offset, so the replica continues (+CONTINUE) and follows the new id."""
    primary = pair("--save", "3600 1")
    p = primary.client()
    fill(p, 80)
    replica, r = follower(pair, primary)
    sync(p, r)
    old = info(p)
    assert primary.stop() == 0
    primary.start()
    p = primary.client()
    restarted = info(p)
    assert restarted["master_replid2"] == old["master_replid"]
    assert restarted["master_repl_offset"] == old["master_repl_offset"]
    wait_for(lambda: info(p, "stats")["sync_partial_ok"] == 1, what="a partial resync")
    fill(p, 20, groups=False)
    sync(p, r)
    assert info(p, "stats")["sync_full"] == 0
    assert info(r)["master_replid"] == restarted["master_replid"]
    assert state(r) == state(p)


def test_a_replica_with_an_aof_continues_after_a_clean_restart(pair):
    """With appendonly the data comes from the AOF: the final snapshot's aux fields
    say where the AOF ended when it was saved, so they apply when it still does."""
    primary = pair()
    p = primary.client()
    fill(p, 60)
    replica = pair("--save", "3600 1", "--appendonly", "yes", "--replicaof", f"127.0.0.1 {primary.port}")
    r = replica.client()
    wait_for(lambda: linked(r), what="the link")
    fill(p, 30, groups=False)  # records in the replica's AOF after its base
    sync(p, r)
    assert replica.stop() == 0
    continues_after_restart(p, replica)


def _write_mb(p: redis.Redis, mb: int, key: str = "big") -> None:
    payload = "y" * 10_000
    for _ in range(mb):
        pipe = p.pipeline(transaction=False)
        for _ in range(100):
            pipe.execute_command("TWRITE", key, "t", payload)
        pipe.execute()


def test_a_replica_that_stops_reading_is_let_go(pair):
    """client-output-buffer-limit replica <hard>: a replica connection that never
    reads (a raw socket that asked PSYNC) is closed once the stream held for it
    passes the hard limit, instead of the primary's memory growing."""
    primary = pair("--client-output-buffer-limit", "normal 0 0 0 replica 2mb 0 0")
    p = primary.client()
    assert p.config_get("client-output-buffer-limit")["client-output-buffer-limit"] == \
        "normal 0 0 0 slave 2097152 0 0 pubsub 33554432 8388608 60"
    with socket.create_connection(("127.0.0.1", primary.port), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(_encode(["REPLCONF", "listening-port", "1"]) + _encode(["PSYNC", "?", "-1"]))
        wait_for(lambda: info(p)["connected_slaves"] == 1 and info(p)["slave0"]["state"] == "online",
                 what="the raw replica online")
        _write_mb(p, 30)  # never read: kernel buffers fill, then the primary's
        wait_for(lambda: info(p)["connected_slaves"] == 0, what="the replica let go")
    assert "over client-output-buffer-limit replica" in primary.output()
    assert p.execute_command("TWRITE", "log", "t", "still serving") >= 1


def test_a_stalled_replica_is_let_go_then_resyncs(pair):
    """The soft limit (over it for longer than its seconds): a replica process that
    stalls (SIGSTOP) is disconnected; resumed, it resyncs in full and converges."""
    import signal
    primary = pair("--client-output-buffer-limit", "normal 0 0 0 replica 0 1mb 1")
    p = primary.client()
    fill(p, 20)
    replica, r = follower(pair, primary)
    sync(p, r)
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        _write_mb(p, 20)
        wait_for(lambda: info(p)["connected_slaves"] == 0, what="the replica let go")
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: info(p, "stats")["sync_full"] == 2, what="a full resync", timeout=30)
    sync(p, r)
    assert state(r) == state(p)
    assert r.execute_command("TINFO", "big")[b"length"] == 2000
    assert "over client-output-buffer-limit replica" in primary.output()


def test_the_async_typed_client_spreads_reads_over_two_replicas(pair):
    """AsyncTStream with two replicas: plain reads (TREAD without GROUP, DGET,
    MLAST, TINFO) alternate between them; writes and group reads stay on the
    primary; each replica answers what the primary would."""
    import asyncio

    import redis.asyncio as aioredis

    from tstream.client import AsyncTStream

    primary = pair()
    replicas = [pair("--replicaof", f"127.0.0.1 {primary.port}") for _ in range(2)]
    for proc in replicas:
        wait_for(lambda proc=proc: linked(proc.client()), what="the link")

    async def run() -> None:
        clients = [aioredis.Redis(port=proc.port) for proc in (primary, *replicas)]
        try:
            ts = AsyncTStream(clients[0], replicas=clients[1:])
            first = await ts.twrite("orders", "orders.eu", b"a")
            await ts.twrite("orders", "orders.us", b"b")
            assert await clients[0].execute_command("WAIT", 2, 5000) == 2
            for proc in replicas:
                wait_for(lambda proc=proc: caught_up(primary.client(), proc.client()), what="the replica")
                proc.client().config_resetstat()
            primary.client().config_resetstat()
            for _ in range(2):
                assert [e.data for e in await ts.tread("orders", first, 10)] == [b"a", b"b"]
                assert (await ts.dget("orders", seq=2)).data == b"b"
                assert [m.data for m in await ts.mlast("orders", "orders.>")] == [b"a", b"b"]
                assert (await ts.tinfo("orders")).length == 2
            await ts.tread("orders", first, 1, group="g")
        finally:
            for c in clients:
                await c.aclose()

    asyncio.run(run())
    names = ("tread", "dget", "mlast", "tinfo")
    calls = [{name: s.get(f"cmdstat_{name}", {"calls": 0})["calls"] for name in names}
             for s in (proc.client().info("commandstats") for proc in replicas)]
    assert [sum(c.values()) for c in calls] == [4, 4]  # in turn: half of the 8 reads each
    assert [calls[0][name] + calls[1][name] for name in names] == [2, 2, 2, 2]
    stats = primary.client().info("commandstats")
    assert stats["cmdstat_tread"]["calls"] == 1 and "cmdstat_dget" not in stats


def test_diskless_sync_sends_a_snapshot_made_in_memory(pair):
    """repl-diskless-sync yes: the full resync's snapshot is made in memory (no
    temp file in the primary's dir), and the replica ends with the same data."""
    primary = pair("--repl-diskless-sync", "yes")
    p = primary.client()
    fill(p, 200)
    replica, r = follower(pair, primary)
    fill(p, 20, groups=False)
    sync(p, r)
    assert state(r) == state(p)
    assert "in memory, diskless" in primary.output()
    assert not [name for name in os.listdir(primary.dir) if name.startswith("temp-")]
    p.config_set("repl-diskless-sync", "no")
    r.execute_command("REPLICAOF", "NO", "ONE")  # (a new replid: it comes back with a full resync)
    p.execute_command("TWRITE", "log", "t", "while away")
    r.execute_command("REPLICAOF", "127.0.0.1", primary.port)
    wait_for(lambda: info(p, "stats")["sync_full"] == 2, what="a second full resync")
    sync(p, r)
    assert state(r) == state(p)
    assert "target: disk" in primary.output()


def _read_exactly_prefix(sock: socket.socket, want: int, timeout: float = 10.0) -> bytes:
    """At least ``want`` bytes from ``sock`` (less if it goes quiet for ``timeout``)."""
    sock.settimeout(timeout)
    data = b""
    while len(data) < want:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_psync_pipelined_after_a_write_answers_after_its_reply(pair, fsync):
    """A connection's replies keep their order: TWRITE then PSYNC in one read
    (the TWRITE's reply held for the end of the turn, under appendfsync always
    for its fsync too) gets the TWRITE's reply first, then +CONTINUE and the
    backlog (the TWRITE's own record); likewise +FULLRESYNC after a write's reply."""
    primary = pair("--appendonly", "yes", "--appendfsync", fsync)
    p = primary.client()
    p.execute_command("TWRITE", "k", "t", "first")
    with socket.create_connection(("127.0.0.1", primary.port), timeout=10) as first:
        # a first replica makes the backlog; the second continues from it
        first.sendall(_encode(["PSYNC", "?", "-1"]))
        assert _read_exactly_prefix(first, 11).startswith(b"+FULLRESYNC")
        wait_for(lambda: info(p)["connected_slaves"] == 1 and info(p)["slave0"]["state"] == "online",
                 what="the first raw replica online")
        replid, offset = info(p)["master_replid"], info(p)["master_repl_offset"]
        with socket.create_connection(("127.0.0.1", primary.port), timeout=10) as sock:
            sock.sendall(_encode(["TWRITE", "k", "t", "second"]) + _encode(["PSYNC", replid, str(offset + 1)]))
            got = _read_exactly_prefix(sock, 4 + 11 + len(replid) + 2)
            assert got.startswith(b":2\r\n+CONTINUE " + replid.encode() + b"\r\n"), got
            got += read_until_quiet(sock, 0.5)
            assert b"second" in got  # the backlog from offset on: the TWRITE's record
        with socket.create_connection(("127.0.0.1", primary.port), timeout=10) as sock:
            sock.sendall(_encode(["TWRITE", "k", "t", "third"]) + _encode(["PSYNC", "?", "-1"]))
            got = _read_exactly_prefix(sock, 4 + 12)
            assert got.startswith(b":3\r\n+FULLRESYNC "), got
        with socket.create_connection(("127.0.0.1", primary.port), timeout=10) as sock:
            # CLIENT REPLY OFF drops replies, not PSYNC's answer (Redis writes it to the socket itself)
            sock.sendall(_encode(["CLIENT", "REPLY", "OFF"]) + _encode(["TWRITE", "k", "t", "fourth"])
                         + _encode(["PSYNC", replid, str(info(p)["master_repl_offset"] + 1)]))
            got = _read_exactly_prefix(sock, 11 + len(replid) + 2)
            assert got.startswith(b"+CONTINUE " + replid.encode() + b"\r\n"), got
