"""The one write path (commands/writes.py), seen from outside: through a real
server with ``appendonly yes``, the effect records of a command are in the
append-only file, in order, by the time its reply arrives (with what its
limits evicted or deleted on the way), its changes are counted, and the
readers it concerns are woken."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis

from tstream.persistence.effects import ACK, APPEND, CONFIG, CREATE, DELETE, DELKEY, EVICT, FLUSH, GROUP


def records(directory: Path) -> list:
    """Every record of the append-only file's incremental parts, in order."""
    from tstream.persistence.aof import records_of

    found = []
    for path in sorted((directory / "appendonlydir").glob("*.incr.aof")):
        found += records_of(path.read_bytes())
    return found


@pytest.fixture
def served(tmp_path):
    from tstream.server.embed import ServerThread

    with ServerThread(port=0, dir=tmp_path, save="", appendonly=True) as srv:
        client = redis.Redis(port=srv.port)
        yield srv, client, tmp_path
        client.close()


def wait_blocked(client) -> None:
    """Until one client is blocked (pytest's timeout ends a wait that never does)."""
    while client.info("clients")["blocked_clients"] != 1:
        time.sleep(0.01)


def changes(client) -> int:
    return client.info("persistence")["rdb_changes_since_last_save"]


def test_a_write_and_what_its_limits_evicted_are_logged_before_the_reply(served):
    _, c, directory = served
    c.execute_command("TCONFIG", "s", "SET", "max_len", 2)
    for data in ("1", "2", "3"):
        c.execute_command("TWRITE", "s", "t", data)
    kinds = [(rec[0], rec[1]) for rec in records(directory)]
    assert kinds == [(CREATE, b"s"), (CONFIG, b"s"), (APPEND, b"s"), (APPEND, b"s"), (APPEND, b"s"), (EVICT, b"s")]
    assert records(directory)[-1] == [EVICT, b"s", 2]
    assert changes(c) == 1 + 3


def test_per_subject_limit_deletes_follow_their_write(served):
    _, c, directory = served
    c.execute_command("TCONFIG", "kv", "SET", "max_msgs_per_subject", 1)
    c.execute_command("TWRITE", "kv", "k.a", "1")
    c.execute_command("TWRITE", "kv", "k.a", "2")  # deletes offset 1: logged with this write, not later
    append, evict, delete = records(directory)[-3:]
    assert append[:3] + append[4:] == [APPEND, b"kv", 2, b"k.a", b"2"]
    assert evict == [EVICT, b"kv", 2]  # the first entry was the one deleted
    assert delete == [DELETE, b"kv", 1]


def test_pipelined_writes_group_reads_and_acks(served):
    _, c, directory = served
    pipe = c.pipeline(transaction=False)
    for i in range(5):
        pipe.execute_command("TWRITE", "p", "t", str(i))  # one run: one record
    assert pipe.execute() == [1, 2, 3, 4, 5]
    before = changes(c)
    read = c.execute_command("TREAD", "p", "-", 2, "GROUP", "g", "RETRY", 60000, 60000)
    assert [entry[0] for entry in read] == [1, 2]
    assert c.execute_command("TACK", "p", "g", 1, 2) == 2
    logged = records(directory)
    assert [rec[0] for rec in logged] == [CREATE, APPEND, GROUP, GROUP, ACK]
    assert logged[1][2:4] != [] and logged[1][4:] == [b"t", b"0", b"t", b"1", b"t", b"2", b"t", b"3", b"t", b"4"]
    assert logged[-1] == [ACK, b"p", b"g", 1, 2]
    assert changes(c) == before + 3  # the group created, moved, then acked


def test_a_write_wakes_a_blocked_reader(served):
    srv, c, _ = served
    got = []
    reader = redis.Redis(port=srv.port)
    thread = threading.Thread(target=lambda: got.append(reader.execute_command("TREAD", "w", "$", 1, "BLOCK", 0)))
    thread.start()
    wait_blocked(c)
    c.execute_command("TWRITE", "w", "t", "hello")
    thread.join(10)
    assert got == [[[1, b"t", b"hello"]]]
    reader.close()


def test_deleting_a_key_unblocks_its_group_readers_and_is_logged(served):
    srv, c, directory = served
    c.execute_command("TWRITE", "d", "t", "x")
    c.execute_command("TREAD", "d", "-", 1, "GROUP", "g")  # reads everything there is
    got = []
    reader = redis.Redis(port=srv.port)

    def blocked_read():
        try:
            reader.execute_command("TREAD", "d", "-", 1, "GROUP", "g", "BLOCK", 0)
        except redis.ResponseError as exc:
            got.append(str(exc))

    thread = threading.Thread(target=blocked_read)
    thread.start()
    wait_blocked(c)
    before = changes(c)
    assert c.delete("d", "missing") == 1
    thread.join(10)
    assert got and got[0].startswith("UNBLOCKED the stream key no longer exists")
    assert records(directory)[-1] == [DELKEY, b"d"]
    assert changes(c) == before + 1
    c.execute_command("TWRITE", "e", "t", "x")
    c.flushall()
    assert records(directory)[-1] == [FLUSH]
    reader.close()
