"""The replication stream's records wait, unpacked, for the next send (within
1 ms) or for whatever reads the stream's offset (server/replication.py,
``Replication.flush``): every client still sees the offset of every write made
before it asked, and every replica gets every write exactly once.  Through
real server processes over TCP: WAIT, INFO replication and ROLE in the same
pipeline as the writes, a replica whose PSYNC (partial or full) arrives in the
same read as a write, a partial resync right after writes not sent yet, with
and without an AOF."""

from __future__ import annotations

import socket
import time

import pytest

from tstream.persistence import effects, snapshot
from tstream.persistence.framing import HEADER, TornTail, iter_frames, pack, unpack

from . import test_replication
from .test_replication import _encode, caught_up, follower, info, sync, wait_for

pair = test_replication.pair  # (the fixture: a primary and its replicas, stopped whatever happens)

APPEND_TIME = time.time_ns()  # (a write's time packs to as many bytes as any time of today)


def frame_size(key: bytes, offset: int, *pairs: bytes) -> int:
    """The bytes an APPEND record of the entries ``pairs`` (tag, data, ...) adds to
    the stream (one TWRITE, or a run of them in one read)."""
    return len(pack([effects.APPEND, key, offset, APPEND_TIME, *pairs]))


def offsets(primary_client, *commands) -> list:
    """Run ``commands`` in one pipeline (one read: nothing is sent in between)."""
    pipe = primary_client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    return pipe.execute()


def role_offset(reply) -> int:
    assert reply[0] == b"master"
    return reply[1]


@pytest.mark.parametrize("aof", ["no", "yes"])
def test_wait_info_and_role_right_after_a_write_count_it(pair, aof):
    primary = pair("--appendonly", aof)
    p = primary.client()
    replica, r = follower(pair, primary)
    p.execute_command("TWRITE", "k", "t", "first")  # (k exists: each write below is one APPEND record)
    sync(p, r)
    one = frame_size(b"k", 2, b"t", b"x" * 10)
    replies = offsets(p, ("ROLE",), ("TWRITE", "k", "t", "x" * 10), ("ROLE",), ("INFO", "replication"),
                      ("TWRITE", "k", "t", "y" * 10), ("TWRITE", "k", "t", "z" * 10), ("ROLE",),
                      ("WAIT", 1, 5000))
    before = role_offset(replies[0])
    assert role_offset(replies[2]) == before + one
    assert replies[3]["master_repl_offset"] == before + one
    assert replies[3]["repl_backlog_histlen"] == before + one  # (the backlog holds the stream from 0)
    run = frame_size(b"k", 3, b"t", b"y" * 10, b"t", b"z" * 10)  # (two TWRITEs in a row: one record)
    assert role_offset(replies[6]) == before + one + run
    assert replies[7] == 1  # the replica acknowledged all three writes
    assert r.execute_command("TREAD", "k", 0, 10) == p.execute_command("TREAD", "k", 0, 10)
    assert info(p)["master_repl_offset"] == before + one + run + len(pack([101]))  # (and WAIT's GETACK)
    wait_for(lambda: caught_up(p, r), what="the replica to catch up")


def read_reply_line(sock: socket.socket, buffer: bytearray) -> bytes:
    while b"\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, "the primary closed the connection"
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\r\n")
    buffer[:] = rest
    return line


def read_records(sock: socket.socket, buffer: bytearray, count: int, timeout: float = 10.0) -> list:
    """``count`` effect records of the stream (PINGs left out), from ``buffer`` and then ``sock``."""
    deadline = time.monotonic() + timeout
    records: list = []
    while True:
        used = 0
        try:
            for position, payload in iter_frames(bytes(buffer)):
                used = position + HEADER.size + len(payload)
                record = unpack(payload)
                if record[0] < 100:
                    records.append(record)
        except TornTail:
            pass
        del buffer[:used]
        if len(records) >= count:
            return records
        assert time.monotonic() < deadline, f"only {len(records)} records of {count}: {records}"
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        chunk = sock.recv(65536)
        assert chunk, "the primary closed the connection"
        buffer += chunk


def appends(records: list) -> list:
    return [(record[1], record[2], record[5]) for record in records if record[0] == effects.APPEND]


def test_a_partial_resync_asked_right_after_a_write_gets_it_exactly_once(pair):
    """A connection writes and asks for the stream in the same read: its write is
    packed onto the stream before the backlog is read, and sent once."""
    primary = pair()
    p = primary.client()
    replica, r = follower(pair, primary)
    p.execute_command("TWRITE", "k", "t", "first")
    sync(p, r)
    fields = info(p)
    replid, offset = fields["master_replid"], fields["master_repl_offset"]
    with socket.create_connection(("127.0.0.1", primary.port)) as sock:
        sock.sendall(_encode(["TWRITE", "k", "t", "mine"]) + _encode(["PSYNC", replid, str(offset + 1)]))
        buffer = bytearray()
        line = read_reply_line(sock, buffer)
        if line == b":2":
            line = read_reply_line(sock, buffer)
            reply = b""
        else:  # (the pipelined TWRITE's reply waited for the end of the turn: after the backlog's bytes)
            reply = b":2"
        assert line == b"+CONTINUE " + replid.encode()
        size = frame_size(b"k", 2, b"t", b"mine")  # what the backlog had after ``offset``
        while len(buffer) < size:
            buffer += sock.recv(65536)
        backlog = bytearray(buffer[:size])
        del buffer[:size]
        assert appends(read_records(sock, backlog, 1)) == [(b"k", 2, b"mine")] and not backlog
        if reply:
            assert read_reply_line(sock, buffer) == reply
        p.execute_command("TWRITE", "k", "t", "next")
        assert appends(read_records(sock, buffer, 1)) == [(b"k", 3, b"next")]  # (not "mine" again)
        assert info(p)["master_repl_offset"] == offset + frame_size(b"k", 2, b"t", b"mine") + frame_size(
            b"k", 3, b"t", b"next")
    sync(p, r)
    assert r.execute_command("TREAD", "k", 0, 10) == p.execute_command("TREAD", "k", 0, 10)


def test_a_full_resync_asked_right_after_a_write_has_it_in_its_snapshot_only(pair):
    primary = pair()
    p = primary.client()
    p.execute_command("TWRITE", "k", "t", "first")
    replica, r = follower(pair, primary)  # (the stream's backlog exists from here on)
    with socket.create_connection(("127.0.0.1", primary.port)) as sock:
        sock.sendall(_encode(["TWRITE", "k", "t", "mine"]) + _encode(["PSYNC", "?", "-1"]))
        buffer = bytearray()
        lines = [read_reply_line(sock, buffer) for _ in range(2)]
        while not lines[-1].startswith(b"$"):  # (newlines while the snapshot is made)
            lines.append(read_reply_line(sock, buffer))
        header = lines.pop()
        lines = [line for line in lines if line]
        assert b":2" in lines and len(lines) == 2  # (the TWRITE's reply, before or after +FULLRESYNC)
        words = lines[1 - lines.index(b":2")].split()
        assert words[0] == b"+FULLRESYNC" and int(words[2]) == info(p)["master_repl_offset"]
        size = int(header[1:])
        while len(buffer) < size:
            buffer += sock.recv(65536)
        loaded = snapshot.load(bytes(buffer[:size]))
        del buffer[:size]
        assert loaded[b"k"].next_offset == 3  # "first" and "mine" are in the snapshot
        p.execute_command("TWRITE", "k", "t", "next")
        assert appends(read_records(sock, buffer, 1)) == [(b"k", 3, b"next")]  # and "mine" is not sent again
    sync(p, r)
    assert r.execute_command("TREAD", "k", 0, 10) == p.execute_command("TREAD", "k", 0, 10)


@pytest.mark.parametrize("aof", ["no", "yes"])
def test_a_partial_resync_right_after_writes_not_sent_yet_gets_them(pair, aof):
    """Writes, then the replica's link cut in the same read (their records not
    sent yet): the replica continues from the backlog, which has them all."""
    primary = pair("--appendonly", aof)
    p = primary.client()
    replica, r = follower(pair, primary)
    p.execute_command("TWRITE", "log", "t", "first")
    sync(p, r)
    commands = [("TWRITE", "log", "t", f"cut-{i}") for i in range(50)]
    replies = offsets(p, *commands, ("CLIENT", "KILL", "TYPE", "replica"))
    assert replies[-1] == 1
    wait_for(lambda: info(p, "stats")["sync_partial_ok"] == 1, what="a partial resync")
    sync(p, r)
    assert r.execute_command("TREAD", "log", 0, 100) == p.execute_command("TREAD", "log", 0, 100)
    assert len(p.execute_command("TREAD", "log", 0, 100)) == 51
    assert info(p, "stats")["sync_full"] == 1
    assert caught_up(p, r)
