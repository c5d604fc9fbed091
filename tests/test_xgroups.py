"""Redis Streams consumer groups through the real server: redis-py's group
helpers (RESP2 and RESP3), the same group read by XREADGROUP and TREAD ...
GROUP, blocking XREADGROUP, and owners, delivery counts and consumers kept by
the append-only file, its rewrite and snapshots, and across SIGKILL."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest
import redis

from .conftest import ServerProcess
from .test_faults import run_check
from .test_xstreams import save_for, server_for


def test_redis_py_group_helpers(r):
    for i in range(1, 6):
        r.xadd("k", {"n": str(i)}, id=f"1-{i}")
    assert r.xgroup_create("k", "g", id="0") is True
    got = r.xreadgroup("g", "alice", {"k": ">"}, count=2)
    entries = got[0][1] if isinstance(got, list) else got[b"k"][0]
    assert [e[0] for e in entries] == [b"1-1", b"1-2"]
    r.xreadgroup("g", "bob", {"k": ">"}, count=2)
    summary = r.xpending("k", "g")
    assert summary["pending"] == 4 and summary["min"] == b"1-1" and summary["max"] == b"1-4"
    assert sorted((c["name"], c["pending"]) for c in summary["consumers"]) == [(b"alice", 2), (b"bob", 2)]
    rows = r.xpending_range("k", "g", min="-", max="+", count=10, consumername="bob")
    assert [(row["message_id"], row["times_delivered"]) for row in rows] == [(b"1-3", 1), (b"1-4", 1)]
    assert r.xack("k", "g", "1-1", "1-3", "9-9") == 2
    claimed = r.xclaim("k", "g", "carol", min_idle_time=0, message_ids=["1-2"])
    assert [c[0] for c in claimed] == [b"1-2"]
    auto = r.xautoclaim("k", "g", "dave", min_idle_time=0, start_id="0-0", count=10, justid=True)
    assert auto == [b"1-2", b"1-4"]  # (redis-py gives the ids alone with JUSTID)
    groups = r.xinfo_groups("k")
    assert groups[0]["name"] == b"g" and groups[0]["pending"] == 2 and groups[0]["last-delivered-id"] == b"1-4"
    consumers = {c["name"]: c["pending"] for c in r.xinfo_consumers("k", "g")}
    assert consumers == {b"alice": 0, b"bob": 0, b"carol": 0, b"dave": 2}
    assert r.xgroup_delconsumer("k", "g", "dave") == 2
    assert r.xpending("k", "g")["pending"] == 0
    assert r.xgroup_destroy("k", "g") == 1


def test_xreadgroup_and_tread_share_one_group(r2):
    for i in range(1, 5):
        r2.execute_command("TWRITE", "s", "t", f"v{i}")
    r2.xgroup_create("s", "g", id="0")
    rows = r2.execute_command("TREAD", "s", "-", 2, "GROUP", "g", "RETRY", 60000, 600000)
    assert [row[0] for row in rows] == [1, 2]
    got = r2.xreadgroup("g", "x", {"s": ">"})
    assert [e[1] for e in got[0][1]] == [{b"t": b"v3"}, {b"t": b"v4"}]
    pending = r2.execute_command("TPENDING", "s", "g")
    assert [p[0] for p in pending] == [1, 2, 3, 4]  # TREAD's and XREADGROUP's entries, one list
    assert r2.execute_command("TACK", "s", "g", 3) == 1  # TACK acknowledges an X* delivery too
    assert r2.xpending("s", "g")["pending"] == 1  # the X* one left (TREAD's have no owner)


def test_blocking_xreadgroup_is_woken_and_owns_the_entry(server):
    reader, writer = server.client(), server.client()
    writer.xgroup_create("b", "g", id="$", mkstream=True)
    got = {}
    thread = threading.Thread(target=lambda: got.update(reply=reader.xreadgroup("g", "w", {"b": ">"}, block=5000)))
    thread.start()
    deadline = time.monotonic() + 5
    while writer.info("clients")["blocked_clients"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    xid = writer.xadd("b", {"job": "1"})
    thread.join(5)
    assert got["reply"][0][1][0][0] == xid
    rows = writer.xpending_range("b", "g", min="-", max="+", count=5)
    assert [(row["message_id"], row["consumer"]) for row in rows] == [(xid, b"w")]


def test_xreadgroup_block_in_multi_never_blocks(r2):
    r2.xgroup_create("m", "g", id="$", mkstream=True)
    pipe = r2.pipeline()
    pipe.xreadgroup("g", "c", {"m": ">"}, block=0)
    assert pipe.execute() in ([None], [[]], [{}])


def group_view(c) -> tuple:
    def no_idle(rows):
        return [(row["message_id"], row["consumer"], row["times_delivered"]) for row in rows]

    groups = [{k: v for k, v in g.items()} for g in c.xinfo_groups("p")]
    consumers = sorted((x["name"], x["pending"]) for x in c.xinfo_consumers("p", "g"))
    return (groups, consumers, c.xpending("p", "g"),
            no_idle(c.xpending_range("p", "g", min="-", max="+", count=100)), c.xrange("p"))


def fill_groups(c) -> None:
    for i in range(12):
        c.xadd("p", {"n": str(i)}, id=f"5-{i}")
    c.xgroup_create("p", "g", id="0")
    c.xgroup_create("p", "h", id="$")
    c.xreadgroup("g", "a", {"p": ">"}, count=4)
    c.xreadgroup("g", "b", {"p": ">"}, count=4)
    c.xreadgroup("g", "b", {"p": "0"})  # history: delivery counts go up
    c.xack("p", "g", "5-1", "5-5")
    c.xclaim("p", "g", "c", min_idle_time=0, message_ids=["5-2"], retrycount=9)
    c.xgroup_createconsumer("p", "g", "idle-one")
    c.xdel("p", "5-3")
    c.xgroup_setid("p", "h", id="5-6")


@pytest.mark.parametrize("how", ["aof", "aof-rewrite", "snapshot"])
def test_groups_survive_restarts(make_server, tmp_path, how):
    proc = server_for(make_server, how)
    c = proc.client()
    fill_groups(c)
    before = group_view(c)
    save_for(c, how)
    proc.kill()
    proc.start()
    c = proc.client()
    assert group_view(c) == before
    assert c.xreadgroup("g", "a", {"p": ">"}, count=1)[0][1][0][0] == b"5-8"  # the group goes on where it was
    proc.stop()
    check = run_check(tmp_path / ("dump.tsr" if how == "snapshot" else "appendonlydir"))
    assert check.returncode == 0, check.stdout + check.stderr


def _worker(port: int, stop: threading.Event, log: dict, seed: int) -> None:
    """MULTI/EXEC of three XADDs, then XREADGROUP and XACK; what the server
    acknowledged is written down."""
    rng = random.Random(seed)
    c = redis.Redis(port=port, socket_timeout=5)
    try:
        while not stop.is_set():
            pipe = c.pipeline(transaction=True)
            for i in range(3):
                pipe.xadd("crash", {"w": str(seed), "i": str(i)})
            ids = pipe.execute()
            log["txns"].append(ids)
            got = c.xreadgroup("g", f"c{seed}", {"crash": ">"}, count=5)
            delivered = [e[0] for e in got[0][1]] if got else []
            log["delivered"].extend(delivered)
            if delivered:
                chosen = [d for d in delivered if rng.random() < 0.6]
                log["acking"] = chosen  # sent, not answered yet: either outcome is right after a crash
                if chosen and c.xack("crash", "g", *chosen) == len(chosen):
                    log["acked"].extend(chosen)
                log["acking"] = []
    except (redis.ConnectionError, redis.TimeoutError, ConnectionResetError, OSError):
        pass


@pytest.mark.slow
def test_sigkill_keeps_transactions_whole_and_acks_acked(tmp_path):
    for round_ in range(3):
        directory = tmp_path / f"r{round_}"
        directory.mkdir()
        proc = ServerProcess(directory, "--save", "", "--appendonly", "yes", "--appendfsync", "always")
        try:
            _crash_round(proc, directory, round_)
        finally:
            proc.stop()


def _crash_round(proc, directory, round_: int) -> None:
    """One round of the SIGKILL test (the caller stops the server, whatever happens)."""
    proc.start()
    proc.client().xgroup_create("crash", "g", id="$", mkstream=True)
    stop = threading.Event()
    logs = [{"txns": [], "delivered": [], "acked": [], "acking": []} for _ in range(3)]
    threads = [threading.Thread(target=_worker, args=(proc.port, stop, logs[i], i)) for i in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(random.Random(round_).uniform(0.5, 1.5))
    os.kill(proc.proc.pid, signal.SIGKILL)
    proc.proc.wait(10)
    stop.set()
    for thread in threads:
        thread.join(10)
    proc.start()
    c = proc.client()
    stored = {e[0] for e in c.xrange("crash")}
    pending = {row["message_id"] for row in c.xpending_range("crash", "g", min="-", max="+", count=10**6)}
    for log in logs:
        for txn in log["txns"]:
            assert all(xid in stored for xid in txn), "an acknowledged transaction is whole"
        assert not set(log["acked"]) & pending, "an acknowledged XACK stays acknowledged"
        for xid in set(log["delivered"]) - set(log["acked"]) - set(log["acking"]):
            assert xid in pending, "a delivered entry not acknowledged is pending"
    # a transaction is all or nothing: group the stored entries by (worker, txn)
    rows = c.xrange("crash")
    by_worker: dict = {}
    for _, fields in rows:
        by_worker.setdefault(fields[b"w"], []).append(int(fields[b"i"]))
    for seq in by_worker.values():
        assert len(seq) % 3 == 0 and seq == [0, 1, 2] * (len(seq) // 3)
    proc.stop()
    check = run_check(directory / "appendonlydir")
    assert check.returncode == 0, check.stdout + check.stderr
