"""A fast-ingest publisher's pipelined read run straight from its bytes (issue #16):
resp/_speedups.c ``scan_fast_run`` against its Python fallback and the request
parser on random reads, its MemoryErrors, and the server with the fast path
against one without it (``TSTREAM_NO_FAST_SCAN=1``) over TCP: the same replies
byte for byte, the same streams, INFO commandstats and AOF, on random streams of
BATCH ... FAST commands cut into random reads."""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import sys
import time

import hiredis
import pytest

from tstream.commands import ingest
from tstream.resp import RequestParser
from tstream.resp.scan import scan_fast_run_python

from .c_extensions import memory_error_count, needs_c
from .test_faults import FaultyServer

try:
    from tstream.resp._speedups import scan_fast_run as c_scan_fast_run
except ImportError:
    c_scan_fast_run = None
if ingest.scan_fast_run is scan_fast_run_python:  # (the extension turned off: TSTREAM_PURE_PYTHON)
    c_scan_fast_run = None

scan_python = scan_fast_run_python


def resp(*words) -> bytes:
    words = [w if isinstance(w, bytes) else str(w).encode() for w in words]
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


def message(key, bid, seq, subject, data, flow=b"8", gap=b"ok", name=b"BATCH", fast=b"FAST"):
    return resp(name, key, bid, seq, subject, data, fast, flow, gap)


TEMPLATE = [b"BATCH", b"k", b"b1", b"3", b"sub", b"whatever", b"FAST", b"8", b"ok"]


# --- the scan itself ---------------------------------------------------------------

def expected_prefix(data: bytes, template: list, lo: int, max_count: int, max_bulk: int):
    """What the scan must return, by the request parser: the leading whole commands
    that are ``template`` with batch-seqs lo, lo + 1, ... in canonical RESP."""
    datas, pos = [], 0
    while len(datas) < max_count:
        seq = b"%d" % (lo + len(datas))
        for size in range(1, len(data) - pos + 1):  # (the first whole command: the shortest prefix)
            parser = RequestParser(max_bulk=1 << 40)
            try:
                commands = parser.read_many(data[pos:pos + size])
            except Exception:
                commands = None
            if commands is not None and len(commands) == 1:
                break
        else:
            break
        argv = commands[0]
        if (len(argv) != 9 or argv[:3] != template[:3] or argv[3] != seq or argv[4] != template[4]
                or argv[6:] != template[6:] or len(argv[5]) > max_bulk
                or resp(*argv) != data[pos:pos + size]):  # (canonical spelling only)
            break
        datas.append(argv[5])
        pos += size
    return (len(datas), tuple(datas), pos) if datas else None


def random_read(rng: random.Random, template: list, lo: int) -> bytes:
    """Commands that are ``template`` with the next seqs, with now and then one
    that differs (a seq, a word, the spelling), cut at a random byte."""
    parts = []
    seq = lo
    for _ in range(rng.randrange(0, 8)):
        data = rng.choice([b"", b"x", b"\r\n", b"$5\r\n", b"*9\r\n", bytes(rng.randrange(256) for _ in range(rng.randrange(40)))])
        words = [*template[:3], b"%d" % seq, template[4], data, *template[6:]]
        kind = rng.randrange(14)
        if kind == 0:
            words[3] = b"%d" % (seq + rng.choice([-1, 1, 2]))
        elif kind == 1:
            words[3] = b"0" + words[3]
        elif kind == 2:
            words[rng.choice([0, 1, 2, 4, 6, 7, 8])] += b"x"
        elif kind == 3:
            words[0] = words[0].lower()
        if kind == 4:
            encoded = resp(*words).replace(b"$%d\r\n%s" % (len(data), data), b"$0%d\r\n%s" % (len(data), data), 1)
        elif kind == 5:
            encoded = resp(*words, b"COMMIT")
        elif kind == 6:
            encoded = b"*1\r\n$4\r\nPING\r\n"
        else:
            encoded = resp(*words)
        parts.append(encoded)
        seq += 1
    read = b"".join(parts)
    if read and rng.random() < 0.4:
        read = read[:rng.randrange(len(read) + 1)]
    return read


def test_the_python_scan_on_random_reads():
    """scan_fast_run_python is what the request parser sees: the leading commands
    that are the template with the next batch-seqs, spelled canonically."""
    rng = random.Random(17)
    for _ in range(3000):
        lo = rng.choice([1, 3, 9, 10, 99, 999, 12345])
        template = list(TEMPLATE)
        if rng.random() < 0.3:
            template[4] = b""
        read = random_read(rng, template, lo)
        max_count = rng.choice([1, 2, 3, 256])
        max_bulk = rng.choice([1 << 20, 3, 0])
        assert scan_python(read, template, lo, max_count, max_bulk) == expected_prefix(
            read, template, lo, max_count, max_bulk), (read, lo)


@needs_c(c_scan_fast_run)
def test_the_c_scan_is_the_python_one_on_random_reads():
    rng = random.Random(1617)
    for _ in range(20000):
        lo = rng.choice([1, 3, 9, 10, 99, 999, 12345, 99999, 10 ** 17, 10 ** 17 + 1, 0, -5])
        template = list(TEMPLATE)
        if rng.random() < 0.2:
            template[rng.randrange(9)] = rng.choice([b"", b"0", b"x" * 300, b"x" * 790, b"x" * 800])
        read = random_read(rng, template, max(lo, 1))
        max_count = rng.choice([0, 1, 2, 3, 256])
        max_bulk = rng.choice([1 << 20, 3, 2, 1, 0, -1, 1 << 70])
        assert c_scan_fast_run(read, template, lo, max_count, max_bulk) == scan_python(
            read, template, lo, max_count, max_bulk), (read, template, lo, max_count, max_bulk)


@needs_c(c_scan_fast_run)
def test_the_c_scan_on_edge_cases():
    t = TEMPLATE
    run = b"".join(message(b"k", b"b1", seq, b"sub", b"d%d" % seq) for seq in range(8, 13))
    assert c_scan_fast_run(run, t, 8, 256, 100) == (5, tuple(b"d%d" % s for s in range(8, 13)), len(run))
    assert c_scan_fast_run(run, t, 9, 256, 100) is None  # (not even the first)
    assert c_scan_fast_run(run + b"*1\r\n", t, 8, 2, 100)[:2] == (2, (b"d8", b"d9"))
    # the carry of the decimal counter: 99 -> 100, 999 -> 1000
    carry = b"".join(message(b"k", b"b1", seq, b"sub", b"v") for seq in range(97, 1003))
    assert c_scan_fast_run(carry, t, 97, 10000, 100)[0] == 1003 - 97
    assert c_scan_fast_run(b"", t, 1, 5, 100) is None
    # at most 1024 commands a call (SCAN_MAX_COUNT), templates of at most 1024 bytes (SCAN_TEMPLATE_MAX)
    many = b"".join(message(b"k", b"b1", seq, b"sub", b"v") for seq in range(1, 1100))
    assert c_scan_fast_run(many, t, 1, 5000, 100)[0] == scan_python(many, t, 1, 5000, 100)[0] == 1024
    for size, answer in ((839, 1), (840, None)):  # (6 fixed words + 24 bytes each, the key's size)
        long_key = [t[0], b"k" * size, *t[2:]]
        one = message(b"k" * size, b"b1", 1, b"sub", b"v")
        assert c_scan_fast_run(one, long_key, 1, 5, 100) == scan_python(one, long_key, 1, 5, 100)
        assert (c_scan_fast_run(one, long_key, 1, 5, 100) or (None,))[0] == answer
    assert c_scan_fast_run(run, t[:8], 8, 5, 100) is None
    assert c_scan_fast_run(run, [*t[:8], "ok"], 8, 5, 100) is None
    assert c_scan_fast_run(run, t, 8, 0, 100) is None
    with pytest.raises(TypeError):
        c_scan_fast_run(bytearray(run), t, 8, 5, 100)
    with pytest.raises(TypeError):
        c_scan_fast_run(run, tuple(t), 8, 5, 100)
    with pytest.raises(TypeError):
        c_scan_fast_run(run, t, 8, 5)


@needs_c(c_scan_fast_run)
def test_the_c_scan_survives_a_memory_error_at_each_allocation():
    """It allocates the datas tuple, each data, the result and its consumed
    count: with each allocation failing in turn it raises MemoryError (nothing
    leaked, nothing crashed) and answers rightly again afterwards."""
    run = b"".join(message(b"k", b"b1", seq, b"sub", b"data%d" % seq) for seq in range(3, 6))
    assert memory_error_count(lambda: c_scan_fast_run(run * 30, TEMPLATE, 3, 3, 100), 6) == 5
    assert memory_error_count(lambda: c_scan_fast_run(run, TEMPLATE, 4, 3, 100), 6) == 0  # (no match: no allocation)
    assert c_scan_fast_run(run, TEMPLATE, 3, 3, 100) == (3, (b"data3", b"data4", b"data5"), len(run))


# --- the server, with the fast path and without it -----------------------------------

def replies_of(sock: socket.socket, count: int, timeout: float = 20.0) -> bytes:
    """Read until ``count`` whole replies arrived: their bytes."""
    reader = hiredis.Reader()
    got = bytearray()
    seen = 0
    deadline = time.monotonic() + timeout
    sock.settimeout(timeout)
    while seen < count:
        assert time.monotonic() < deadline, f"{seen} of {count} replies"
        chunk = sock.recv(1 << 16)
        assert chunk, f"closed after {seen} of {count} replies: {bytes(got[-300:])!r}"
        got += chunk
        reader.feed(chunk)
        while reader.gets() is not False:
            seen += 1
    return bytes(got)


def send_in_reads(sock: socket.socket, stream: bytes, rng: random.Random, boundaries: list) -> None:
    """``stream`` in reads: cut mostly at command boundaries, now and then at a random byte."""
    cuts = sorted({b for b in boundaries if rng.random() < 0.3} | {rng.randrange(len(stream)) for _ in range(len(boundaries) // 20)})
    at = 0
    for cut in [*cuts, len(stream)]:
        if cut > at:
            sock.sendall(stream[at:cut])
            at = cut
            time.sleep(0.002)


def commands_stream(rng: random.Random, size: int) -> list[bytes]:  # noqa: C901 (a branch per kind)
    """Random BATCH ... FAST traffic: runs of plain messages on several keys and
    batches (now and then a gap or a duplicate), options, COMMIT/EOB/PING, a
    TREAD, an error, a MULTI."""
    out = []
    next_seq = {}
    for _ in range(size):
        key = rng.choice([b"k1", b"k2"])
        bid = rng.choice([b"a", b"b"])
        gap = b"fail" if (key, bid) == (b"k2", b"b") else b"ok"
        flow = b"8" if bid == b"a" else b"64"
        seq = next_seq.get((key, bid), 1)
        kind = rng.randrange(40)
        if kind < 30:  # a run of plain messages
            subject = rng.choice([b"s", b"s", b"t"])
            for _ in range(rng.choice([1, 2, 5, 16, 16, 40])):
                shift = rng.random()
                use = seq + 2 if shift < 0.02 else max(seq - 1, 1) if shift < 0.04 else seq
                out.append(message(key, bid, use, subject, b"m%d" % rng.randrange(1000), flow, gap))
                seq = max(seq, use + 1)
        elif kind == 30:
            out.append(resp(b"BATCH", key, bid, seq, b"s", b"e", b"FAST", flow, gap, b"EXPECT_LAST_SEQ", rng.randrange(5)))
            seq += 1
        elif kind == 31:
            out.append(resp(b"BATCH", key, bid, seq, b"s", b"id", b"FAST", flow, gap, b"MSGID", b"m%d" % rng.randrange(5)))
            seq += 1
        elif kind == 32:
            out.append(resp(b"BATCH", key, bid, seq, b"s", b"c", b"FAST", flow, gap, b"COMMIT"))
            seq = 1
        elif kind == 33:
            out.append(resp(b"BATCH", key, bid, seq, b"FAST", flow, gap, b"EOB"))
            seq = 1
        elif kind == 34:
            out.append(resp(b"BATCH", key, bid, max(seq - 1, 1), b"FAST", flow, gap, b"PING"))
        elif kind == 35:
            out.append(resp(b"TREAD", key, 1, 5))
        elif kind == 36:
            out.append(resp(b"BATCH", key, bid))  # wrong arity
        elif kind == 37:
            out.append(resp(b"MULTI"))
            out.append(message(key, bid, seq, b"s", b"in multi", flow, gap))
            out.append(resp(b"EXEC"))
            seq += 1
        elif kind == 38:
            out.append(message(key, bid, seq, b"s", b"lower", flow, gap, name=b"batch"))
            seq += 1
        else:
            out.append(message(key, bid, seq, b"s", b"fast", flow, gap, fast=b"fast"))
            seq += 1
        next_seq[(key, bid)] = seq
    return out


def make_pair(make_server, tmp_path, monkeypatch, *options: str):
    """A server with the fast path and one without it (TSTREAM_NO_FAST_SCAN=1)."""
    args = ("--save", "", "--appendonly", "yes", *options)
    monkeypatch.setenv("TSTREAM_NO_FAST_SCAN", "1")
    (tmp_path / "off").mkdir()
    (tmp_path / "on").mkdir()
    off = make_server(*args, directory=tmp_path / "off")
    monkeypatch.delenv("TSTREAM_NO_FAST_SCAN")
    on = make_server(*args, directory=tmp_path / "on")
    return on, off


def stream_contents(server) -> dict:
    c = server.client()
    try:
        return {key: c.execute_command("TREAD", key, 1, 1_000_000) for key in sorted(c.keys())}
    finally:
        c.close()


def command_calls(server) -> dict:
    c = server.client()
    try:
        return {name: stats["calls"] for name, stats in c.info("commandstats").items()}
    finally:
        c.close()


def scanned_reads(server, password: str | None = None) -> int:
    """INFO's count of reads run straight from their bytes."""
    c = server.client(password=password or server_password(server))
    try:
        return int(c.info("stats")["fast_ingest_scanned_reads"])
    finally:
        c.close()


def server_password(server) -> str | None:
    """The ``--requirepass`` the test server was started with, if any."""
    args = list(server.args)
    return args[args.index("--requirepass") + 1] if "--requirepass" in args else None


def converse(server, chunks: list, rng_seed: int, protocol: int, count: int) -> bytes:
    sock = socket.create_connection(("127.0.0.1", server.port))
    try:
        if protocol == 3:
            sock.sendall(resp(b"HELLO", 3))
            replies_of(sock, 1)
        stream = b"".join(chunks)
        boundaries = []
        at = 0
        for chunk in chunks:
            at += len(chunk)
            boundaries.append(at)
        send_in_reads(sock, stream, random.Random(rng_seed), boundaries)
        return replies_of(sock, count)
    finally:
        sock.close()


@pytest.mark.parametrize("protocol", [2, 3])
def test_random_streams_give_the_same_replies_data_and_aof(make_server, tmp_path, monkeypatch, protocol):
    on, off = make_pair(make_server, tmp_path, monkeypatch)
    rng = random.Random(protocol)
    for round_ in range(4):
        chunks = commands_stream(rng, 60)
        seed = rng.randrange(1 << 30)
        got_on = converse(on, chunks, seed, protocol, len(chunks))
        got_off = converse(off, chunks, seed, protocol, len(chunks))
        assert got_on == got_off, round_
    contents = stream_contents(on)
    assert contents == stream_contents(off) and contents
    calls = command_calls(on)
    assert calls == command_calls(off) and calls["cmdstat_batch"] > 200
    assert scanned_reads(on) > 0 and scanned_reads(off) == 0  # (the path was taken, and only where on)
    on.stop()
    off.stop()
    on.start()
    off.start()
    assert stream_contents(on) == stream_contents(off) == contents


def test_clients_with_a_gate_take_the_usual_path(make_server, tmp_path, monkeypatch):
    """A client not authenticated yet (its strict parser), or an ACL user with
    limits, has each command checked by its gate: no read is run from its bytes.
    The unauthenticated client's 9-word BATCH and what follows get NOAUTH on an
    open connection; once authenticated, the default user's reads are scanned;
    a limited user's get the same replies without a scan."""
    on, off = make_pair(make_server, tmp_path, monkeypatch, "--requirepass", "pw")
    for server in (on, off):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(message(b"k", b"b", 1, b"s", b"v"))
        assert replies_of(sock, 1).startswith(b"-NOAUTH")
        sock.sendall(message(b"k", b"b", 2, b"s", b"v") * 2 + resp(b"PING"))
        assert replies_of(sock, 3).count(b"-NOAUTH") == 3  # (answered, not dropped)
        sock.sendall(resp(b"AUTH", b"pw"))
        assert replies_of(sock, 1) == b"+OK\r\n"
        sock.sendall(message(b"k", b"b", 1, b"s", b"v"))
        replies_of(sock, 1)
        sock.sendall(b"".join(message(b"k", b"b", seq, b"s", b"v%d" % seq) for seq in range(2, 40)))
        replies_of(sock, 38)
        sock.sendall(resp(b"ACL", b"SETUSER", b"limited", b"on", b">pw2", b"~*", b"+@all", b"-xadd"))
        assert replies_of(sock, 1) == b"+OK\r\n"
        sock.close()
        before_limited = scanned_reads(server)
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(resp(b"AUTH", b"limited", b"pw2"))
        assert replies_of(sock, 1) == b"+OK\r\n"
        sock.sendall(message(b"k", b"c", 1, b"s", b"w"))
        replies_of(sock, 1)
        sock.sendall(b"".join(message(b"k", b"c", seq, b"s", b"w%d" % seq) for seq in range(2, 40)))
        replies_of(sock, 38)
        sock.close()
        assert scanned_reads(server) == before_limited  # (the limited user's reads: none scanned)
    assert scanned_reads(on) > 0 and scanned_reads(off) == 0
    assert stream_contents_auth(on) == stream_contents_auth(off)
    assert len(stream_contents_auth(on)[b"k"]) == 78


def stream_contents_auth(server) -> dict:
    c = server.client(password="pw")
    try:
        return {key: c.execute_command("TREAD", key, 1, 1_000_000) for key in sorted(c.keys())}
    finally:
        c.close()


def test_a_read_of_more_than_a_window(make_server, tmp_path, monkeypatch):
    """600 messages in one read: the first WINDOW run from the read's bytes, the
    rest the usual way (the turn's budget); the same replies as without."""
    on, off = make_pair(make_server, tmp_path, monkeypatch)
    first = [message(b"k", b"b", 1, b"s", b"first", b"64")]
    run = [message(b"k", b"b", seq, b"s", b"v%d" % seq, b"64") for seq in range(2, 602)]
    for server in (on, off):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(first[0])
        replies_of(sock, 1)
        sock.sendall(b"".join(run * 1))
        assert replies_of(sock, 600).count(b"+OK") >= 590
        sock.sendall(b"".join(message(b"k", b"b", seq, b"s", b"w", b"64") for seq in range(602, 1400)))
        replies_of(sock, 798)
        sock.close()
    calls = command_calls(on)
    assert calls == command_calls(off) and calls["cmdstat_batch"] == 1399
    assert scanned_reads(on) > 0 and scanned_reads(off) == 0
    contents = stream_contents(on)
    assert contents == stream_contents(off) and len(contents[b"k"]) == 1399


def test_replies_and_stats_over_tcp(make_server, tmp_path, monkeypatch):
    """A publisher: one message, then reads of 16 (the fast path): the flow acks
    at the ack points, +OK between, every message stored, counted, in the AOF."""
    on, _ = make_pair(make_server, tmp_path, monkeypatch)
    sock = socket.create_connection(("127.0.0.1", on.port))
    sock.sendall(message(b"k", b"b", 1, b"s", b"m1", b"16"))
    assert replies_of(sock, 1).startswith(b"*6\r\n$4\r\ntype\r\n$3\r\nack")  # the first flow ack (RESP2: an array)
    got = b""
    for first in range(2, 66, 16):
        sock.sendall(b"".join(message(b"k", b"b", seq, b"s", b"m%d" % seq, b"16") for seq in range(first, first + 16)))
        got += replies_of(sock, 16)
    assert got.count(b"+OK\r\n") == 64 - got.count(b"$4\r\ntype\r\n$3\r\nack\r\n") == 60
    sock.sendall(resp(b"BATCH", b"k", b"b", 66, b"FAST", b"16", b"ok", b"EOB"))
    replies_of(sock, 1)
    sock.close()
    c = on.client()
    assert [e[2] for e in c.execute_command("TREAD", "k", 1, 1000)] == [b"m%d" % i for i in range(1, 66)]
    assert c.info("commandstats")["cmdstat_batch"]["calls"] == 66
    assert c.info("stats")["total_commands_processed"] >= 66
    on.stop()
    on.start()
    assert len(on.client().execute_command("TREAD", "k", 1, 1000)) == 65


class LoggingFaultServer(FaultyServer):
    """A server whose ``nth`` AOF record handed over (server.persist.Persistence.log)
    raises MemoryError once: the commit's ``writes.lost`` (started through this module)."""

    LAUNCHER = "tests.test_fast_scan"


def test_the_slow_log_and_client_list_see_a_run_read_from_its_bytes(make_server, tmp_path, monkeypatch):
    """With every command slow: a run read from its bytes is logged as its first
    command (its own batch-seq and data), as execute_at logs a run; CLIENT LIST
    shows cmd=batch."""
    on, off = make_pair(make_server, tmp_path, monkeypatch, "--slowlog-log-slower-than", "0")
    for server in (on, off):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(message(b"k", b"b", 1, b"s", b"m1", b"64"))
        replies_of(sock, 1)
        sock.sendall(b"".join(message(b"k", b"b", seq, b"s", b"m%d" % seq, b"64") for seq in range(2, 18)))
        replies_of(sock, 16)
        c = server.client()
        batches = [entry[3] for entry in c.execute_command("SLOWLOG", "GET", 20) if entry[3][0] == b"BATCH"]
        assert batches == [[b"BATCH", b"k", b"b", b"2", b"s", b"m2", b"FAST", b"64", b"ok"],  # (newest first)
                           [b"BATCH", b"k", b"b", b"1", b"s", b"m1", b"FAST", b"64", b"ok"]], batches
        assert b"cmd=batch" in [line for line in c.execute_command("CLIENT", "LIST").split(b"\n")
                                if b"cmd=client" not in line][0]
        c.close()
        sock.close()


@pytest.mark.parametrize("spec", ["memory:seal:3", "log:5"])
def test_a_memory_error_during_the_store(tmp_path, monkeypatch, spec):
    """A node's seal (store_run's MemoryError: what was stored is acknowledged, the
    rest refused) or the commit's hand-over of the run's record (writes.lost: none
    acknowledged) failing inside a run read from its bytes: the same replies and
    data as without the fast path."""
    results = []
    for name, env in (("on", "0"), ("off", "1")):
        monkeypatch.setenv("TSTREAM_NO_FAST_SCAN", env)
        (tmp_path / name).mkdir()
        launcher = FaultyServer if spec.startswith("memory:") else LoggingFaultServer
        server = launcher(tmp_path / name, spec, "--save", "", "--appendonly", "yes", "--node-entries", "50").start()
        try:
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(message(b"k", b"b", 1, b"s", b"m1", b"64"))
            got = replies_of(sock, 1)
            for first in range(2, 202, 20):
                sock.sendall(b"".join(message(b"k", b"b", seq, b"s", b"m%d" % seq, b"64")
                                      for seq in range(first, first + 20)))
                got += replies_of(sock, 20)
                time.sleep(0.01)
            sock.close()
            results.append((got, stream_contents(server)))
            assert "injected fault" in server.output()
        finally:
            server.stop()
    assert results[0] == results[1]
    assert b"out of memory" in results[0][0]


def _serve_with_a_logging_fault(argv: list[str]) -> int:
    """The launcher of LoggingFaultServer (first argument: ``log:nth``)."""
    from tstream.server import main as server_main
    from tstream.server.app import Server
    from tstream.server.persist import Persistence

    config, config_file = server_main.parse_command_line(argv[1:])
    server_main.setup_logging(config)
    server = Server(config, config_file)
    nth = int(argv[0].split(":")[1])
    real = Persistence.log
    calls = [0]

    def failing_once(self, record):
        calls[0] += 1
        if calls[0] == nth:
            logging.getLogger("tstream.faults").warning("injected fault: MemoryError in log")
            raise MemoryError
        return real(self, record)

    Persistence.log = failing_once
    with asyncio.Runner(loop_factory=server_main.new_event_loop) as runner:
        return runner.run(server_main.run(server))


if __name__ == "__main__":
    sys.exit(_serve_with_a_logging_fault(sys.argv[1:]))
