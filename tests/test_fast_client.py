"""The typed client's FastPublisher / AsyncFastPublisher against a real server
(RESP2 and RESP3, sync and asyncio), including a resume after a server restart."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio

from tstream.client import AsyncFastPublisher, BatchEnded, FastPublisher, TStreamError


def datas(c, key) -> list:
    return [e[2] for e in c.execute_command("TREAD", key, 1, 100000)]


def test_add_and_end(r):
    with FastPublisher(r, "s", flow=8, max_outstanding_acks=2) as pub:
        acks = [pub.add("t", b"m%d" % i) for i in range(1, 101)]
        ack = pub.end()
    assert [a.batch_seq for a in acks] == list(range(1, 101))
    assert acks[0].ack_seq == 1
    for a in acks:  # never more than 2 acks outstanding
        assert a.batch_seq - a.ack_seq < 2 * 8 + 1
    assert all(x.ack_seq <= y.ack_seq for x, y in zip(acks, acks[1:]))
    assert ack.count == 100 and ack.seq == 100
    assert datas(r, "s") == [b"m%d" % i for i in range(1, 101)]


def test_add_many_writes_each_window_at_once(r):
    with FastPublisher(r, "s", flow=16, max_outstanding_acks=2) as pub:
        writes = []
        send = pub.conn.send_packed_command
        pub.conn.send_packed_command = lambda packed, *a, **k: (writes.append(packed), send(packed, *a, **k))[1]
        first = pub.add_many([("t", b"m1")])
        assert first == (1, 1)
        last = pub.add_many(("t", b"m%d" % i) for i in range(2, 1001))
        assert last.batch_seq == 1000 and 1000 - last.ack_seq <= 2 * pub.ack_msgs
        assert pub.add("t", b"m1001").batch_seq == 1001
        ack = pub.end()
    assert ack.count == 1001
    assert datas(r, "s") == [b"m%d" % i for i in range(1, 1002)]
    assert len(writes) < 100  # about an ack interval (16) per write; a write per message would be 1,001


def test_adopts_the_servers_ack_msgs_and_commits(r):
    for i in range(300):  # other publishers: the first ack's interval is 1 (1024 // (4 * 301))
        r.execute_command("BATCH", "s", f"other{i}", 1, "t", "x", "FAST", 10, "ok")
    pub = FastPublisher(r, "s", flow=32, max_outstanding_acks=1)
    assert pub.add("t", "a") == (1, 1)
    assert pub.ack_msgs == 1
    for _ in range(2, 40):
        batch_seq, ack_seq = pub.add("t", "x")
        assert batch_seq - ack_seq <= pub.ack_msgs
    assert pub.ack_msgs > 1
    ack = pub.commit("t", "last")
    assert ack.count == 40 and ack.batch in (pub.batch_id, pub.batch_id.encode())
    pub.close()


def test_errors_and_an_early_end(r):
    pub = FastPublisher(r, "s", gap="fail")
    pub.add("t", "a", expect_last_seq=0)
    with pytest.raises(BatchEnded) as info:
        for _ in range(3):
            pub.add("t", "b", expect_last_seq=0)
            pub.ping()
    assert int(info.value.pub_ack["count"]) == 1
    pub.close()
    r.execute_command("TCONFIG", "off", "SET", "allow_batched", "no")
    with pytest.raises(TStreamError) as err:
        FastPublisher(r, "off").add("t", "a")
    assert err.value.code == 10203
    with pytest.raises(ValueError):
        FastPublisher(r, "s", max_outstanding_acks=4)


def test_gap_ok_reports_refused_messages(r):
    pub = FastPublisher(r, "s", gap="ok", flow=4)
    pub.add("t", "a")
    pub.add("t", "b", expect_last_seq=99)
    pub.add("t", "c")
    ack = pub.end()
    assert ack.count == 3 and datas(r, "s") == [b"a", b"c"]
    assert pub.state.errors and pub.state.errors[0][0] == 2
    pub.close()


def test_resume_after_a_restart(make_server):
    proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always")
    c = proc.client(protocol=3)
    pub = FastPublisher(c, "s", flow=16, reconnect_timeout=20)
    for i in range(1, 301):
        pub.add("t", str(i))
        if i == 150:
            proc.kill()
            proc.start()
    ack = pub.end()
    assert ack.count == 300
    assert pub.state.reconnects >= 1
    c = proc.client(protocol=3)
    assert datas(c, "s") == [str(i).encode() for i in range(1, 301)]
    pub.close()


def test_async_publisher(server):
    async def main():
        for protocol in (2, 3):
            client = redis.asyncio.Redis(port=server.port, protocol=protocol)
            async with AsyncFastPublisher(client, f"a{protocol}", flow=8) as pub:
                acks = [await pub.add("t", b"%d" % i) for i in range(1, 31)]
                acks.append(await pub.add_many(("t", b"%d" % i) for i in range(31, 51)))
                assert acks[-1].batch_seq == 50 and acks[-1].ack_seq >= 50 - 16
                flow = await pub.ping()
                assert int(flow["seq"]) == 50
                ack = await pub.commit("t", b"51")
                assert ack.count == 51
            await client.aclose()

    asyncio.run(main())
    c = redis.Redis(port=server.port)
    assert datas(c, "a2") == [b"%d" % i for i in range(1, 52)] == datas(c, "a3")


def test_add_many_packs_each_message_as_redis_py_would(r):
    messages = [("t", b"bytes"), ("t", "text \u00e9"), ("t\u00e9", 42), (b"t", 1.5), ("u", memoryview(b"mv")),
                ("u", "")]
    pub = FastPublisher(r, "s", flow=16, gap="ok", batch_id="b1")
    pack = pub.state.packer(pub.conn.encoder.encode)
    packed = [pack(subject, data) for subject, data in messages]
    expected = [b"".join(pub.conn.pack_commands([args])) for _, args in pub.state.unacked]
    assert packed == expected
    pub.close()
    with FastPublisher(r, "s2", flow=4, gap="ok") as pub:
        pub.add_many(messages * 10)
        assert pub.end().count == 60
    stored = r.execute_command("TREAD", "s2", 1, 100)
    assert [(e[1], e[2]) for e in stored] == [
        (b"t", b"bytes"), (b"t", "text \u00e9".encode()), ("t\u00e9".encode(), b"42"), (b"t", b"1.5"),
        (b"u", b"mv"), (b"u", b"")] * 10


def _duplicates_then_add_many(r, pub):
    """Another connection sends batch-seqs 2-10 of the publisher's batch: its own
    2-10 come back as duplicates amid the +OKs and acks of add_many's stretches."""
    pub.add("t", b"1")
    for i in range(2, 11):
        r.execute_command("BATCH", "s", pub.batch_id, i, "t", b"other%d" % i, "FAST", 16, "ok")
    return pub.add_many(("t", b"%d" % i) for i in range(2, 301))


def test_add_many_reads_duplicates_amid_a_stretch(r):
    with FastPublisher(r, "s", flow=16, gap="ok") as pub:
        last = _duplicates_then_add_many(r, pub)
        assert last.batch_seq == 300
        assert pub.end().count == 300
    assert datas(r, "s") == [b"1"] + [b"other%d" % i for i in range(2, 11)] + [b"%d" % i for i in range(11, 301)]


def test_async_add_many_reads_duplicates_and_decoded_replies(server):
    async def main():
        for protocol in (2, 3):
            client = redis.asyncio.Redis(port=server.port, protocol=protocol, decode_responses=True)
            async with AsyncFastPublisher(client, f"d{protocol}", flow=16, gap="ok") as pub:
                await pub.add("t", "1")
                for i in range(2, 11):
                    await client.execute_command("BATCH", f"d{protocol}", pub.batch_id, i, "t", f"other{i}",
                                                 "FAST", 16, "ok")
                last = await pub.add_many(("t", str(i)) for i in range(2, 1001))
                assert last.batch_seq == 1000 and 1000 - last.ack_seq <= 2 * pub.ack_msgs
                ack = await pub.end()
                assert ack.count == 1000
            await client.aclose()

    asyncio.run(main())
    c = redis.Redis(port=server.port)
    expected = [b"1"] + [b"other%d" % i for i in range(2, 11)] + [b"%d" % i for i in range(11, 1001)]
    assert datas(c, "d2") == expected == datas(c, "d3")


def test_add_many_with_decoded_replies(server):
    for protocol in (2, 3):
        c = redis.Redis(port=server.port, protocol=protocol, decode_responses=True)
        with FastPublisher(c, f"s{protocol}", flow=8) as pub:
            assert pub.add_many(("t", str(i)) for i in range(1, 501)).batch_seq == 500
            assert pub.end().count == 500
        assert datas(c, f"s{protocol}") == [str(i) for i in range(1, 501)]


def test_add_many_with_redis_pys_own_parser(server):
    from redis._parsers import _RESP2Parser, _RESP3Parser

    for protocol, parser in ((2, _RESP2Parser), (3, _RESP3Parser)):
        pool = redis.ConnectionPool(port=server.port, protocol=protocol, parser_class=parser)
        c = redis.Redis(connection_pool=pool)
        with FastPublisher(c, f"p{protocol}", flow=8, gap="ok") as pub:
            assert not hasattr(pub.conn._parser, "_reader")  # the reply-by-reply reading
            assert pub.add_many(("t", b"%d" % i) for i in range(1, 301)).batch_seq == 300
            assert pub.end().count == 300
        assert datas(c, f"p{protocol}") == [b"%d" % i for i in range(1, 301)]
        c.close()
