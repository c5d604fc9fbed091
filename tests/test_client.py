"""The typed client (``client.TStream``, ``client.AsyncTStream``) against the real
server, over RESP2 and RESP3, with and without ``decode_responses``."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
import redis
import redis.asyncio

from tstream import client
from tstream.client import (
    Batch,
    Entry,
    GroupInfo,
    Message,
    Pending,
    PubAck,
    StreamConfig,
    StreamInfo,
    TStream,
    TStreamError,
    Window,
)


@pytest.fixture(params=[(2, False), (3, False), (2, True), (3, True)],
                ids=["resp2", "resp3", "resp2-decoded", "resp3-decoded"])
def ts(server, request):
    protocol, decode = request.param
    conn = server.client(protocol=protocol, decode_responses=decode)
    yield TStream(conn)
    conn.close()


def b(ts: TStream, text: str):
    """What the server's bytes come back as on this connection."""
    return text if ts.redis.get_encoder().decode_responses else text.encode()


# --- RCP 11 streams -----------------------------------------------------------------------

def test_write_and_read(ts):
    assert ts.twrite("k", "a", "one") == 1
    assert ts.twrite_entries("k", [("b", "two"), ("c", b"three")]) == 2
    entries = ts.tread("k", "-", 10)
    assert entries == [Entry(1, b(ts, "a"), b(ts, "one")), Entry(2, b(ts, "b"), b(ts, "two")),
                       Entry(3, b(ts, "c"), b(ts, "three"))]
    assert all(type(e.offset) is int for e in entries)
    with pytest.raises(AttributeError):  # dataclasses.FrozenInstanceError
        entries[0].offset = 5  # frozen
    assert ts.tread("k", 3, 10) == [Entry(3, b(ts, "c"), b(ts, "three"))]
    assert ts.tread("k", "$", 10) == []
    assert ts.tread("missing", "-", 10) == []


def test_backlog_eviction_and_missing_entries(ts):
    ts.twrite_entries("k", [(f"t{i}", f"v{i}") for i in range(10)])
    ts.twrite_entries("k", [("t", "last")], backlog=3)
    window = ts.tread("k", 1, 20, withinfo=True)
    assert isinstance(window, Window)
    assert (window.first, window.last) == (9, 11)
    assert window.entries[:8] == [None] * 8  # evicted entries read as missing
    assert [e.offset for e in window.entries[8:]] == [9, 10, 11]
    assert len(window) == 11 and list(window) == window.entries
    assert ts.tevict("k", 9) == 1
    assert ts.tevict("k", -1) == 1
    assert ts.tread("k", "-", 10, withinfo=True) == Window(11, 11, [Entry(11, b(ts, "t"), b(ts, "last"))])
    assert ts.tread("nothing", "-", 0, withinfo=True) == Window(1, 0, [])


def test_blocking_read(ts, server):
    assert ts.tread("k", "$", 10, block=50) is None  # timeout

    def later():
        time.sleep(0.2)
        writer = server.client()
        writer.execute_command("TWRITE", "k", "late", "x")
        writer.close()

    thread = threading.Thread(target=later)
    thread.start()
    got = ts.tread("k", "$", 10, block=5000)
    thread.join()
    assert got == [Entry(1, b(ts, "late"), b(ts, "x"))]


def test_groups_retry_ack_pending(ts):
    ts.twrite_entries("k", [(f"t{i}", f"v{i}") for i in range(5)])
    got = ts.tread("k", "-", 3, group="g", retry=(60000, 600000))
    assert [e.offset for e in got] == [1, 2, 3]
    pending = ts.tpending("k", "g")
    assert [p.offset for p in pending] == [1, 2, 3]
    assert all(isinstance(p, Pending) and p.deliveries == 1 and 0 < p.ms_until_retry <= 60000 for p in pending)
    assert ts.tinfo_groups("k") == [GroupInfo(b(ts, "g"), 4, 3)]
    assert ts.tack("k", "g", 1, 3) == 2
    assert ts.tack_range("k", "g", 1, 5) == 1
    assert ts.tpending("k", "g") == []
    rest = ts.tread("k", "-", 10, group="g", withinfo=True)
    assert (rest.first, rest.last) == (1, 5) and [e.offset for e in rest] == [4, 5]
    assert ts.tread("k", "-", 10, group="g", block=50) is None
    with pytest.raises(ValueError):
        ts.tread("k", "-", 1, retry=(1, 2))


def test_retry_hands_out_again(ts):
    ts.twrite("k", "t", "v")
    assert [e.offset for e in ts.tread("k", "-", 10, group="g", retry=(50, 60000))] == [1]
    time.sleep(0.15)
    again = ts.tread("k", "-", 10, group="g", retry=(50, 60000))
    assert [e.offset for e in again] == [1]
    assert ts.tpending("k", "g")[0].deliveries == 2


def test_info_and_config(ts):
    ts.twrite_entries("k", [("a", "1"), ("b", "2")])
    info = ts.tinfo("k")
    assert isinstance(info, StreamInfo)
    assert (info.length, info.first, info.last, info.groups) == (2, 1, 2, 0)
    assert info.nodes >= 1 and info.bytes > 0
    assert info.config == StreamConfig()
    assert ts.tconfig_set("k", max_len=1, allow_atomic=False) is True
    assert ts.tconfig_get("k") == StreamConfig(max_len=1, allow_atomic=False)
    assert ts.tinfo("k").length == 1
    assert ts.tconfig_set("kv", max_msgs_per_subject=1, allow_direct=False)
    assert ts.tconfig_get("kv").allow_direct is True  # ADR-31: forced on
    with pytest.raises(redis.ResponseError, match="no such key"):
        ts.tinfo("missing")


# --- JetStream ----------------------------------------------------------------------------

@pytest.fixture
def users(ts):
    """ADR-31's KV example."""
    for subject, value in [("1234.name", "Bob"), ("1234.surname", "Smith"),
                           ("1234.address", "1 Main Street"), ("1234.address", "10 Oak Lane")]:
        ts.twrite("USERS", subject, value)
    return ts


def test_dget_message(users):
    ts = users
    before = datetime.now(timezone.utc)
    msg = ts.dget("USERS", seq=2)
    assert isinstance(msg, Message)
    assert (msg.stream, msg.subject, msg.seq, msg.data) == (b(ts, "USERS"), b(ts, "1234.surname"), 2, b(ts, "Smith"))
    assert isinstance(msg.time, datetime) and msg.time.tzinfo is not None
    assert before - timedelta(seconds=30) < msg.time <= before + timedelta(seconds=1)
    assert abs(msg.time_ns / 1e9 - msg.time.timestamp()) < 1e-5
    assert msg.num_pending is None and msg.last_seq is None
    assert ts.dget("USERS", last_by_subj="1234.address").data == b(ts, "10 Oak Lane")
    assert ts.dget_subject("USERS", "1234.name").seq == 1
    assert ts.dget("USERS", next_by_subj="1234.address").seq == 3
    assert ts.dget("USERS", seq=99) is None
    assert ts.dget("nothing", seq=1) is None
    assert ts.dget("USERS", start_time=msg.time_ns).seq <= 2
    assert ts.dget("USERS", start_time=datetime(2000, 1, 1)).seq == 1


def test_dget_raw_times(server):
    conn = server.client(protocol=3)
    ts = TStream(conn, parse_times=False)
    ts.twrite("k", "a", "b")
    msg = ts.dget("k", seq=1)
    assert isinstance(msg.time, str) and msg.time.endswith("Z") and len(msg.time) == 30
    assert client.types.time_to_ns(msg.time) == msg.time_ns
    conn.close()


def test_dget_batch_and_eob(users):
    ts = users
    batch = ts.dget("USERS", seq=1, batch=2)
    assert isinstance(batch, Batch)
    assert [m.seq for m in batch] == [1, 2] and len(batch) == 2
    assert [(m.num_pending, m.last_seq) for m in batch] == [(3, 0), (2, 1)]
    assert (batch.num_pending, batch.last_seq, batch.upto_seq) == (2, 2, None)
    assert batch[0].subject == b(ts, "1234.name")
    assert [m.seq for m in ts.dget("USERS", next_by_subj="1234.address", batch=10)] == [3, 4]
    assert ts.dget("USERS", seq=1, batch=10, max_bytes=1).messages[0].seq == 1
    assert ts.dget("USERS", next_by_subj="nope", batch=10) is None
    assert ts.dget_json("USERS", {"seq": 2}).seq == 2
    assert [m.seq for m in ts.dget_json("USERS", {"seq": 3, "batch": 5})] == [3, 4]
    assert [m.seq for m in ts.dget_json("USERS", '{"multi_last": ["1234.>"]}')] == [1, 2, 4]


def test_mlast(users):
    ts = users
    batch = ts.mlast("USERS", "1234.>")
    assert [m.seq for m in batch] == [1, 2, 4] and batch.upto_seq == 4
    batch = ts.mlast("USERS", "1234.>", up_to_seq=3)
    assert [m.seq for m in batch] == [1, 2, 3] and batch[-1].data == b(ts, "1 Main Street")
    assert [m.seq for m in ts.mlast("USERS", "1234.name", "1234.surname", batch=1)] == [1]
    assert [m.seq for m in ts.mlast("USERS", "1234.>", seq=2)] == [2, 4]
    assert ts.mlast("USERS", "other.>") is None
    assert ts.mlast("USERS", "1234.>", up_to_time=datetime(2000, 1, 1, tzinfo=timezone.utc)) is None


def test_jetstream_errors(users):
    ts = users
    with pytest.raises(TStreamError) as caught:
        ts.dget("USERS", seq=1, last_by_subj="x")
    assert caught.value.code == 408 and "Bad Request" in caught.value.description
    assert isinstance(caught.value, redis.ResponseError)
    with pytest.raises(TStreamError) as caught:
        ts.dget_json("USERS", "{")
    assert caught.value.code == 408
    with pytest.raises(redis.ResponseError) as caught:
        ts.tread("USERS", "x", 1)
    assert not isinstance(caught.value, TStreamError)


def test_batch_publish(users):
    ts = users
    ack = ts.publish_batch("USERS", [("1234.name", "Alice"), ("1234.email", "a@example.com")],
                           batch_id="b1", expect_last_seq=4)
    assert ack == PubAck(b(ts, "USERS"), 6, b(ts, "b1"), 2)
    ack = ts.publish_batch("USERS", [("1234.name", "Carol", 5)])
    assert ack.seq == 7 and ack.count == 1 and len(ack.batch) == 32
    with pytest.raises(TStreamError) as caught:
        ts.publish_batch("USERS", [("1234.name", "X"), ("1234.name", "Y")], expect_last_seq=1)
    assert caught.value.code == 10071
    assert ts.tinfo("USERS").last == 7  # nothing of the failed batch was stored
    # message by message
    assert ts.batch("USERS", "b2", 1, "a", "1") is None
    assert ts.batch("USERS", "b2", 2, "b", "2") is None
    assert ts.batch_eob("USERS", "b2", 3) == PubAck(b(ts, "USERS"), 9, b(ts, "b2"), 2)
    assert ts.batch("USERS", "b3", 1, "c", "3", commit=True).count == 1
    with pytest.raises(TStreamError) as caught:
        ts.batch("USERS", "b4", 2, "c", "3")
    assert caught.value.code == 10176
    with pytest.raises(ValueError):
        ts.publish_batch("USERS", [])


# --- asyncio ------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", [2, 3])
async def test_async_client(server, protocol):
    conn = redis.asyncio.Redis(port=server.port, protocol=protocol, socket_timeout=10)
    ats = client.AsyncTStream(conn)
    try:
        await conn.flushall()
        assert await ats.twrite("k", "a.x", "1") == 1
        assert await ats.twrite_entries("k", [("a.y", "2"), ("a.x", "3")]) == 2
        assert await ats.tread("k", "-", 10) == [Entry(1, b"a.x", b"1"), Entry(2, b"a.y", b"2"),
                                                 Entry(3, b"a.x", b"3")]
        got = await ats.tread("k", "-", 2, group="g", retry=(60000, 600000))
        assert [e.offset for e in got] == [1, 2]
        assert [p.offset for p in await ats.tpending("k", "g")] == [1, 2]
        assert await ats.tack("k", "g", 1, 2) == 2
        assert (await ats.tinfo("k")).length == 3
        assert (await ats.dget_subject("k", "a.x")).seq == 3
        assert [m.seq for m in await ats.mlast("k", "a.*")] == [2, 3]
        assert [m.seq for m in await ats.dget("k", seq=1, batch=5)] == [1, 2, 3]
        ack = await ats.publish_batch("k", [("a.z", "4"), ("a.z", "5")])
        assert (ack.seq, ack.count) == (5, 2)
        with pytest.raises(TStreamError):
            await ats.dget("k", seq=1, last_by_subj="a.x")
        # a blocked read woken by a write on another connection
        waiter = asyncio.create_task(ats.tread("k", "$", 10, block=5000))
        await asyncio.sleep(0.1)
        assert await ats.twrite("k", "late", "6") == 6
        assert await waiter == [Entry(6, b"late", b"6")]
        assert await ats.tread("k", "$", 1, block=20) is None
    finally:
        await conn.aclose()


# --- the load test's command mix (loadtest/workload.py) -----------------------------------

def test_load_mix_runs_without_errors(server):
    """Every step of the locust/soak mix against the real server: no error reply."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "loadtest"))
    try:
        import workload
    finally:
        sys.path.pop(0)
    conn = server.client(protocol=3)
    seen: dict[str, int] = {}

    def call(name, *argv):
        seen[name] = seen.get(name, 0) + 1
        return conn.execute_command(*argv)  # raises on an error reply

    load = workload.Workload(call, prefix="t", seed=7)
    load.setup()
    for _ in range(300):
        load.produce()
        load.publish_batch()
        load.consume()
        load.read()
    writer = server.client()
    writer.execute_command("TWRITE", load.events, "event.eu", "x")
    timer = threading.Timer(0.1, lambda: writer.execute_command("TWRITE", load.events, "event.eu", "y"))
    timer.start()
    assert load.follow(block_ms=5000) == 1
    timer.join()  # its TWRITE has its reply: only now close the connection under it
    writer.close()
    assert set(seen) >= {"TWRITE", "TWRITE ENTRIES", "BATCH", "BATCH COMMIT", "TREAD GROUP", "TACK",
                         "DGET LAST_BY_SUBJ", "DGET SUBJECT", "DGET SEQ", "MLAST", "TREAD", "TREAD BLOCK"}
    assert TStream(conn).tconfig_get(load.orders[0]).max_len == workload.MAX_LEN
    conn.close()
