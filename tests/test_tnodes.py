"""TNODES: a stream's nodes as stored, decoded by the reader, give exactly the
entries TREAD gives (sealed and compressed nodes, short nodes, the active node,
deleted and evicted entries); bad input gets a clear error and changes nothing."""

from __future__ import annotations

import pytest
import redis

from tstream.pipeline.nodes_read import read_nodes
from tstream.server.embed import ServerThread


@pytest.fixture
def client(tmp_path):
    with ServerThread(port=0, dir=tmp_path, save="", node_entries=100) as srv:
        c = redis.Redis(port=srv.port)
        yield c
        c.close()


def write(c, key: str, start: int, count: int, size: int = 20) -> None:
    words = []
    for i in range(start, start + count):
        words += [f"tag{i % 7}", (f"payload {i} " + "x" * size)[:size]]
    c.execute_command("TWRITE", key, "ENTRIES", *words)


def rows_by_tread(c, key: str, lo: int, hi: int) -> list:
    got = c.execute_command("TREAD", key, lo, hi - lo + 1)
    return [(e[0], e[1].decode(), e[2]) for e in got if e is not None and e[0] <= hi]


def rows_by_tnodes(c, key: str, lo: int, hi: int, **kw) -> list:
    rows = []
    for batch in read_nodes(c, key, lo, hi, **kw):
        d = batch.to_pydict()
        rows += list(zip(d["offset"], d["tag"], d["entry"]))
    return rows


def test_every_entry_as_tread_gives_it(client):
    write(client, "k", 0, 1050)  # ten sealed nodes and an active one
    assert client.execute_command("TINFO", "k")[b"nodes"] == 11
    assert rows_by_tnodes(client, "k", 1, 1050) == rows_by_tread(client, "k", 1, 1050)
    assert rows_by_tnodes(client, "k", 250, 777, nodes_per_call=2) == rows_by_tread(client, "k", 250, 777)
    assert rows_by_tnodes(client, "k", 1049, 5000) == rows_by_tread(client, "k", 1049, 1050)


def test_times_are_the_entries_times(client):
    for i in range(150):
        client.execute_command("TWRITE", "k", "t", "v%d" % i)
    times = []
    for batch in read_nodes(client, "k", 1, 150):
        times += [t.timestamp() * 1000 for t in batch.column("time").to_pylist()]
    # the same times DGET gives (RFC 3339, microseconds kept by Spark's timestamp type)
    assert len(times) == 150 and times == sorted(times)
    ids = [int(entry[0].split(b"-")[0]) for entry in client.execute_command("XRANGE", "k", "-", "+")]
    assert [int(t) for t in times] == ids  # an auto id's milliseconds are its entry's time


def test_evicted_and_deleted_entries_are_left_out(client):
    write(client, "k", 0, 500)
    client.execute_command("TEVICT", "k", 150)  # the first node goes, the second keeps 151..200
    client.execute_command("XDEL", "k", *[_xid(client, "k", o) for o in (160, 333, 499)])
    want = rows_by_tread(client, "k", 1, 500)
    assert want[0][0] == 151 and len(want) == 350 - 3
    assert rows_by_tnodes(client, "k", 1, 500) == want


def _xid(c, key: str, offset: int) -> str:
    """The Redis id of the entry at ``offset`` (XRANGE over the whole stream)."""
    ids = [entry[0] for entry in c.execute_command("XRANGE", key, "-", "+")]
    first = c.execute_command("TINFO", key)[b"first"]
    return ids[offset - first].decode()


def test_short_nodes_and_big_payloads(tmp_path):
    with ServerThread(port=0, dir=tmp_path, save="", node_entries=100, node_max_bytes=4096) as srv:
        c = redis.Redis(port=srv.port)
        write(c, "k", 0, 300, size=500)  # about 8 entries a node
        assert c.execute_command("TINFO", "k")[b"nodes"] > 30
        assert rows_by_tnodes(c, "k", 1, 300, max_bytes=1) == rows_by_tread(c, "k", 1, 300)
        c.close()


def test_a_reply_holds_at_most_count_nodes_and_says_where_to_go_on(client):
    write(client, "k", 0, 450)
    reply = client.execute_command("TNODES", "k", 120, "COUNT", 2)
    first, following, node_entries, tags = reply[:4]
    assert (first, following, node_entries) == (1, 301, 100)
    assert len(reply) == 4 + 2
    assert dict(zip(tags[0::2], tags[1::2])) == {i + 1: b"tag%d" % i for i in range(7)} or len(tags) == 14
    header, body, deleted = reply[4]
    assert isinstance(header, bytes) and isinstance(body, bytes) and deleted is None
    assert client.execute_command("TNODES", "k", 451)[:2] == [1, 451]  # past the end: no node
    assert len(client.execute_command("TNODES", "k", 451)) == 4


@pytest.mark.parametrize("args, error", [
    (["k", "x"], "value is not an integer"),
    (["k", "-5"], "offset must be positive or zero"),
    (["k", "1", "COUNT", "0"], "COUNT must be positive"),
    (["k", "1", "COUNT"], "syntax error"),
    (["k", "1", "LIMIT", "3"], "syntax error"),
    (["missing", "1"], "no such key"),
])
def test_bad_input_is_refused(client, args, error):
    write(client, "k", 0, 10)
    with pytest.raises(redis.ResponseError, match=error):
        client.execute_command("TNODES", *args)
    assert client.execute_command("TINFO", "k")[b"length"] == 10


def test_resp3(tmp_path):
    with ServerThread(port=0, dir=tmp_path, save="", node_entries=100) as srv:
        c = redis.Redis(port=srv.port, protocol=3)
        write(c, "k", 0, 250)
        assert rows_by_tnodes(c, "k", 1, 250) == rows_by_tread(c, "k", 1, 250)
        c.close()


def test_a_range_evicted_before_it_was_read_is_data_loss_when_asked(client):
    from tstream.pipeline.common import DataLossError

    write(client, "k", 0, 300)
    client.execute_command("TEVICT", "k", 120)
    with pytest.raises(DataLossError, match="offsets 1 to 120 of key 'k' were evicted"):
        list(read_nodes(client, "k", 1, 300, fail_on_loss=True))
    assert rows_by_tnodes(client, "k", 121, 300) == rows_by_tread(client, "k", 121, 300)
    assert sum(b.num_rows for b in read_nodes(client, "k", 121, 300, fail_on_loss=True)) == 180
