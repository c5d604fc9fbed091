"""bench/ceiling_server.py in bench/groups.py's consumer-group loop.

The ceiling server (uvloop + hiredis, the least a server must do) stands beside
tstream in ``bench/groups.py --ceiling``: it must run the loop correctly (every
message consumed exactly once) and answer every command the loop and redis-py
send with the bytes tstream answers them with.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest
import redis

from tests.conftest import ROOT, free_port, read_until_quiet, wait_for_pong

BENCH = str(ROOT / "bench")
sys.path.insert(0, BENCH)
try:
    import groups  # noqa: E402  (bench/ is not a package)
finally:
    while BENCH in sys.path:  # (bench/groups.py puts it there too)
        sys.path.remove(BENCH)


@pytest.fixture(scope="module")
def ceiling_port():
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "ceiling_server.py"), str(port), "--groups"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_for_pong(proc, port, "the ceiling server")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def command(*words) -> bytes:
    words = [w if isinstance(w, bytes) else str(w).encode() for w in words]
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


def exchange(sock: socket.socket, payload: bytes, wait: float = 0.15) -> bytes:
    sock.sendall(payload)
    return read_until_quiet(sock, wait)


READ = ("TREAD", "k", "-", 10, "GROUP", "g", "RETRY", 30000, 600000, "BLOCK")

# What bench/groups.py's throughput runs and redis-py send, in order, with a short BLOCK
# where a read finds nothing (its null reply).
LOOP = [
    ("CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "internal-ip"),
    ("CLIENT", "SETINFO", "LIB-NAME", "redis-py"),
    ("CLIENT", "SETINFO", "LIB-VER", "8.1.0"),
    ("CLIENT", "SETNAME", "consumer"),
    ("PING",),
    ("FLUSHALL",),
    ("TREAD", "k", "-", 0, "GROUP", "g"),
    ("TWRITE", "k", "orders.new", b"0:0:" + b"x" * 96),
    ("TWRITE", "k", "orders.new", b"0:1:" + b"x" * 96),
    (*READ, 1000),
    ("TACK", "k", "g", 1, 2),
    ("TACK", "k", "g", 1, 2, 7),
    (*READ, 100),
    ("TACK", "nokey", "g", 1),
    ("DEL", "k", "other"),
    ("DEL", "k"),
    ("TREAD", "k", "-", 0, "GROUP", "g"),
]


def normalized(reply: bytes) -> bytes:
    """A HELLO reply's connection id and server name are the server's own."""
    return re.sub(rb"\$2\r\nid\r\n:\d+\r\n", b"$2\r\nid\r\n:N\r\n", reply)


@pytest.mark.parametrize("hello", [None, 2, 3])
def test_replies_are_tstreams(server, ceiling_port, hello):
    """Each command's reply, byte for byte, as a real tstream server's (RESP2 and RESP3)."""
    script = ([("HELLO", hello)] if hello else []) + LOOP
    replies = {}
    for name, port in (("tstream", server.port), ("ceiling", ceiling_port)):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            replies[name] = [normalized(exchange(sock, command(*words))) for words in script]
    for words, ours, theirs in zip(script, replies["ceiling"], replies["tstream"]):
        assert ours == theirs, words
    timed_out = replies["ceiling"][script.index((*READ, 100))]
    assert timed_out == (b"_\r\n" if hello == 3 else b"*-1\r\n")


def test_parked_reads_are_served_first_in_first_out(server, ceiling_port):
    """Two readers parked on the group; three writes in one turn: the head gets them all
    (its COUNT allowing), the other stays parked until the next write -- as tstream."""
    replies = {}
    for name, port in (("tstream", server.port), ("ceiling", ceiling_port)):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as writer, \
                socket.create_connection(("127.0.0.1", port), timeout=5) as first, \
                socket.create_connection(("127.0.0.1", port), timeout=5) as second:
            got = [exchange(writer, command("FLUSHALL") + command("TREAD", "k", "-", 0, "GROUP", "g"))]
            assert exchange(first, command(*READ, 5000)) == b""
            assert exchange(second, command(*READ[:3], 2, *READ[4:], 5000)) == b""
            got.append(exchange(writer, b"".join(command("TWRITE", "k", "t", b"m%d" % i) for i in range(3))))
            got += [read_until_quiet(first, 0.3), read_until_quiet(second, 0.05)]
            got.append(exchange(writer, command("TWRITE", "k", "t", b"m3")))
            got.append(read_until_quiet(second, 0.3))
            got.append(exchange(first, command("TACK", "k", "g", 1, 2, 3, 4)))
            replies[name] = got
    assert replies["ceiling"] == replies["tstream"]
    assert replies["ceiling"][2].startswith(b"*3\r\n*3\r\n:1\r\n")  # the head got the turn's three
    assert replies["ceiling"][3] == b""  # the second reader was still parked
    assert replies["ceiling"][5].startswith(b"*1\r\n*3\r\n:4\r\n")
    assert replies["ceiling"][-1] == b":4\r\n"  # the group's four pending offsets, whoever reads them


def test_commands_behind_a_parked_read_wait_for_it(ceiling_port):
    with socket.create_connection(("127.0.0.1", ceiling_port), timeout=5) as sock:
        exchange(sock, command("FLUSHALL") + command("TREAD", "k", "-", 0, "GROUP", "g"))
        assert exchange(sock, command(*READ[:-1], 200) + command("PING")) == b"*-1\r\n+PONG\r\n"


def test_group_loop_exactly_once():
    """bench/groups.py's throughput run (4 redis-py producers, 4 consumers) against the ceiling."""
    server = groups.Server("ceiling", ["--groups"]).start()
    try:
        result = groups.throughput_run(server, n=300, producers=4, consumers=4, batch=10, timeout=120)
        assert result["exactly_once"], result
        assert result["consumed"] == 1200
        assert result["server_cpu_us_per_msg"] >= 0 and result["avg_batch"] >= 1
        client = redis.Redis(port=server.port, socket_timeout=10)  # RESP3: redis-py 8's default
        try:
            assert client.ping()
            assert client.execute_command("TINFO", groups.KEY) == {b"length": 1200}
        finally:
            client.close()
    finally:
        server.stop()


def test_group_read_with_entries_waits_for_the_end_of_its_turn(server, ceiling_port):
    """A group read that finds entries is served at the end of its turn, after the parked
    readers, and the commands behind it wait for it -- tstream's order, byte for byte."""
    replies = {}
    for name, port in (("tstream", server.port), ("ceiling", ceiling_port)):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as writer, \
                socket.create_connection(("127.0.0.1", port), timeout=5) as parked:
            got = [exchange(writer, command("FLUSHALL") + command("TREAD", "k", "-", 0, "GROUP", "g"))]
            assert exchange(parked, command(*READ[:3], 1, *READ[4:], 5000)) == b""
            got.append(exchange(writer, command("TWRITE", "k", "t", b"a") + command("TWRITE", "k", "t", b"b")
                                + command(*READ, 1000) + command("TWRITE", "k", "t", b"c")
                                + command(*READ, 1000))
                       + b"|" + read_until_quiet(parked, 0.1))
            replies[name] = got
    assert replies["ceiling"] == replies["tstream"]
    assert replies["ceiling"][1] == (b":1\r\n:2\r\n*1\r\n*3\r\n:2\r\n$1\r\nt\r\n$1\r\nb\r\n:3\r\n"
                                     b"*1\r\n*3\r\n:3\r\n$1\r\nt\r\n$1\r\nc\r\n|*1\r\n*3\r\n:1\r\n$1\r\nt\r\n$1\r\na\r\n")
