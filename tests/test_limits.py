"""Fairness and limits over real sockets: one connection's pipeline does not hold the
others, a client that stops reading is closed by the soft output limit, and
requests are refused from their headers, with Redis's error texts."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from .conftest import read_until_quiet


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def twrite(key: bytes, value: bytes = b"v") -> bytes:
    return b"*4\r\n$6\r\nTWRITE\r\n$%d\r\n%s\r\n$1\r\nt\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value)


def read_exactly_lines(sock: socket.socket, count: int) -> list[bytes]:
    """``count`` one-line replies (integers, simple strings, errors)."""
    data = b""
    while data.count(b"\r\n") < count:
        chunk = sock.recv(1 << 20)
        assert chunk, "the server closed the connection"
        data += chunk
    return data.split(b"\r\n")[:count]


def client_ids(client) -> list[int]:
    listing = client.execute_command("CLIENT", "LIST")
    listing = listing.decode() if isinstance(listing, bytes) else listing
    return [int(line.split()[0].split("=")[1]) for line in listing.splitlines()]


def wait_for(condition, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


# --- 3. one connection's pipeline is cut into turns -------------------------------------


@pytest.mark.parametrize("aof", ["no", "yes"])
def test_a_long_pipeline_lets_other_clients_in_and_keeps_its_replies_in_order(make_server, aof):
    server = make_server("--save", "", "--appendonly", aof)
    count = 200_000
    pipe = connect(server.port)
    payload = twrite(b"pipe") * count
    sender = threading.Thread(target=pipe.sendall, args=(payload,))
    sender.start()
    other = server.client()
    wait_for(lambda: other.exists("pipe"))
    # Served while the pipeline is still running: its later commands wait for later turns.
    first, last = other.execute_command("TREAD", "pipe", "-", 0, "WITHINFO")[0]
    assert 0 < last < count
    replies = read_exactly_lines(pipe, count)
    sender.join()
    assert replies == [b":%d" % i for i in range(1, count + 1)]
    pipe.close()
    if aof == "yes":
        server.stop()
        server.start()
        assert server.client().execute_command("TREAD", "pipe", "-", 0, "WITHINFO")[0] == [1, count]


def test_mixed_pipeline_across_turns_answers_every_command_in_order(server):
    sock = connect(server.port)
    commands = []
    expected = []
    for i in range(3000):
        commands.append(twrite(b"a%d" % (i % 7)))
        commands.append(b"*1\r\n$4\r\nPING\r\n")
        expected.append(None)  # a TWRITE offset, checked below
        expected.append(b"+PONG")
    sock.sendall(b"".join(commands))
    replies = read_exactly_lines(sock, len(commands))
    counts = {}
    for i, reply in enumerate(replies):
        if expected[i] is None:
            key = i // 2 % 7
            counts[key] = counts.get(key, 0) + 1
            assert reply == b":%d" % counts[key]
        else:
            assert reply == expected[i]
    sock.close()


def test_a_blocked_read_inside_a_long_pipeline_still_holds_what_follows(server):
    sock = connect(server.port)
    before = twrite(b"x") * 2000
    block = b"*6\r\n$5\r\nTREAD\r\n$7\r\nblocked\r\n$1\r\n1\r\n$1\r\n1\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n"
    after = twrite(b"y") * 2000
    sock.sendall(before + block + after)
    replies = read_exactly_lines(sock, 2000)
    assert replies[-1] == b":2000"
    other = server.client()
    assert not other.exists("y")  # waits behind the blocked read
    other.execute_command("TWRITE", "blocked", "t", "woken")
    data = b""
    while data.count(b"\r\n") < 5 + 2000:  # the read's reply (an array of one entry), then the rest
        data += sock.recv(1 << 20)
    assert data.startswith(b"*1\r\n*3\r\n:1\r\n$1\r\nt\r\n$5\r\nwoken\r\n")
    assert data.endswith(b":2000\r\n")
    sock.close()


# --- 4. client-output-buffer-limit: the soft limit -----------------------------------------


def test_soft_output_limit_closes_a_client_that_stopped_reading(make_server):
    server = make_server("--save", "", "--client-output-buffer-limit", "normal 0 256kb 1")
    c = server.client()
    c.execute_command("TWRITE", "big", "ENTRIES", *[b"t", b"y" * 10_000] * 2000)  # 20 MB of entries
    before = set(client_ids(c))
    sock = connect(server.port)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    # 20 MB of replies, more than the kernel's socket buffers take: most of it stays in the
    # server's buffer, over the soft limit; this client never reads, and sends nothing more.
    sock.sendall(b"TREAD big 1 2000\r\n")
    wait_for(lambda: len(set(client_ids(c)) - before) == 1)
    wait_for(lambda: set(client_ids(c)) == before)  # closed once over 256 kB for more than 1 s
    assert "over client-output-buffer-limit" in server.output()
    assert c.ping()
    sock.close()


def test_soft_output_limit_spares_a_client_that_reads(make_server):
    server = make_server("--save", "", "--client-output-buffer-limit", "normal 0 256kb 1")
    c = server.client()
    c.execute_command("TWRITE", "big", "ENTRIES", *[b"t", b"y" * 1000] * 2000)
    reader = server.client()
    for _ in range(5):  # each reply is 2 MB, over the soft limit while it is sent, read at once
        assert len(reader.execute_command("TREAD", "big", 1, 2000)) == 2000
    assert reader.ping()


# --- 5. requests are refused from their headers, with Redis's texts ---------------------------

# (One known difference: a simple string "+OK" in an argument's place, which hiredis
# returns like a bulk string, is taken as one; Redis refuses it.)
PROTOCOL_CASES = [
    b"*1\r\n$9999999999999\r\n",
    b"*1\r\n$2147483648\r\n",
    b"*1\r\n$536870913\r\n",
    b"*4000000000\r\n",
    b"*2147483648\r\n",
    b"*abc\r\n",
    b"*01\r\n$4\r\nPING\r\n",
    b"*1\r\n$-1\r\n",
    b"*1\r\n$abc\r\n",
    b"*1\r\n$+5\r\n",
    b"*1\r\n$05\r\nHELLO\r\n",
    b"*1\r\n%1\r\n$1\r\na\r\n$1\r\nb\r\n",
    b"*1\r\n~1\r\n$1\r\na\r\n",
    b"*1\r\n_\r\n",
    b"*1\r\n-ERR\r\n",
    b"*1\r\n,1.5\r\n",
    b"*1\r\n#t\r\n",
    b"*2\r\n$4\r\nPING\r\n:1\r\n",
    b"*2\r\n$4\r\nPING\r\n*1\r\n$1\r\na\r\n",
    b"*1\r\n$" + b"1" * 40 + b"\r\n",
    b"*" + b"1" * 40 + b"\r\n",
    b"*-5\r\n*1\r\n$4\r\nPING\r\n",
    b"*1\r\n$4\r\nPING\r\n\r\n*1\r\n$4\r\nPING\r\n",  # a blank line between commands
]


def exchange(port: int, payload: bytes) -> bytes:
    with connect(port) as sock:
        sock.sendall(payload)
        return read_until_quiet(sock, 0.3)


@pytest.mark.parametrize("payload", PROTOCOL_CASES, ids=[repr(p[:24]) for p in PROTOCOL_CASES])
def test_protocol_errors_match_redis(server, redis_oracle, payload):
    assert exchange(server.port, payload) == exchange(redis_oracle, payload)


def test_protocol_errors_leave_no_traceback_and_reserve_nothing(make_server):
    server = make_server("--save", "")
    for payload in PROTOCOL_CASES:
        exchange(server.port, payload)
    with connect(server.port) as sock:  # announces 100 million arguments and sends none
        sock.sendall(b"*100000000\r\n")
        assert read_until_quiet(sock, 0.3) == b""
        with open(f"/proc/{server.proc.pid}/status") as f:
            vm = {line.split(":")[0]: int(line.split()[1]) for line in f if line.startswith(("VmSize", "VmRSS"))}
        assert vm["VmSize"] < 700 * 1024  # kB: hiredis would have reserved 800 MB for the list
    assert server.client().ping()
    assert "Traceback" not in server.output()


def test_many_tiny_arguments_count_against_the_query_buffer_limit(make_server):
    server = make_server("--save", "", "--client-query-buffer-limit", "1mb")
    with connect(server.port) as sock:
        # 300,000 one-byte arguments: 2.1 MB on the wire, over 14 MB as objects
        # while the command is incomplete (its header announces 10 million).
        sock.sendall(b"*10000000\r\n$4\r\nPING\r\n")
        try:
            for _ in range(30):
                sock.sendall(b"$1\r\na\r\n" * 10_000)
        except OSError:
            pass
        assert b"query buffer limit" in read_until_quiet(sock, 3.0)
    assert server.client().ping()


def test_redis_cli_pipe_mass_insertion(server):
    import subprocess

    from .conftest import redis_cli_path

    payload = b"".join(twrite(b"mass%d" % (i % 10)) for i in range(50_000))
    done = subprocess.run([redis_cli_path(), "-p", str(server.port), "--pipe"], input=payload,
                          capture_output=True, timeout=60)
    assert b"errors: 0, replies: 50000" in done.stdout, done.stdout + done.stderr
