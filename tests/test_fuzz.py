"""Fuzzing: the parser against a reference decoding, and every command with random arguments.

- The hiredis-based RequestParser and the plain-Python StrictRequestParser (the
  reference) must decode any byte stream, split anywhere, into the same commands,
  and refuse the same bad input.
- Random argument lists for every command in the table, pipelined over TCP: each
  gets a reply or an error, the server never crashes or hangs, and data written
  before (keys the fuzzer never names) is intact after every batch.
- The same fuzzer in process (tests/harness.py), tens of thousands of commands,
  random and garbled: every reply is well-formed RESP (RESP2 and RESP3 clients),
  nothing is logged at ERROR (no traceback, no "internal error" reply), every
  ``_check()`` holds, an error reply changes nothing (no effect record, same
  keyspace), and the effect log replays to the live keyspace.
"""

from __future__ import annotations

import logging
import random
import re
import socket
import string
from dataclasses import astuple

import hiredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tstream.commands import COMMANDS
from tstream.resp import ProtocolError, RequestParser, StrictRequestParser

from .harness import Harness, ReplyError


def decode_all(parser, chunks) -> tuple[list, bool]:
    commands = []
    try:
        for chunk in chunks:
            parser.feed(chunk)
            while (command := parser.next_command()) is not None:
                commands.append(command)
    except ProtocolError:
        return commands, True
    return commands, False


def multibulk(args) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


words = st.binary(min_size=0, max_size=12)
valid_command = st.lists(words, min_size=1, max_size=5).map(multibulk)
inline_command = st.lists(st.text(string.ascii_letters + string.digits, min_size=1, max_size=6),
                          min_size=1, max_size=4).map(lambda ws: " ".join(ws).encode() + b"\r\n")
junk = st.sampled_from([b"*", b"$", b"\r\n", b"*2\r\n", b"$3\r\n", b"*-1\r\n", b"*0\r\n", b":1\r\n",
                        b"*1\r\n:5\r\n", b"$-1\r\n", b"*1\r\n$x\r\n", b"\n"]) | st.binary(max_size=6)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(valid_command, min_size=1, max_size=6), st.lists(st.integers(1, 40), max_size=12))
def test_valid_streams_decode_identically_however_split(commands, cuts):
    data = b"".join(commands)
    chunks, pos = [], 0
    for cut in cuts:
        chunks.append(data[pos : pos + cut])
        pos += cut
    chunks.append(data[pos:])
    fast, fast_error = decode_all(RequestParser(), chunks)
    reference, reference_error = decode_all(StrictRequestParser(), [data])
    assert not fast_error and not reference_error
    assert fast == reference


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(valid_command | inline_command | junk, min_size=1, max_size=8))
def test_arbitrary_bytes_never_crash_and_agree_until_an_error(pieces):
    # Each piece arrives in its own read, as lines typed in telnet do (an inline
    # command in the same read as a multibulk one is refused: see resp/parser.py).
    data = b"".join(pieces)
    fast, fast_error = decode_all(RequestParser(), pieces)
    reference, reference_error = decode_all(StrictRequestParser(), [data])
    # Both parsers return the same commands up to the first error; where the
    # reference refuses the input, the fast parser returns no extra command
    # (it may stop earlier, as when inline text follows a multibulk command).
    shortest = min(len(fast), len(reference))
    assert fast[:shortest] == reference[:shortest]
    if reference_error:
        assert len(fast) <= len(reference)
    if not fast_error and not reference_error:
        assert fast == reference


# --- the command fuzzer ------------------------------------------------------------

# Commands that end the connection or the server, or change server-wide settings:
# fuzzing them would test the fuzzer, not the server.
# ((P)SUBSCRIBE and MONITOR turn the connection into a listener, (P)UNSUBSCRIBE replies once per channel:
# tests/test_pubsub.py and tests/test_tools.py drive them)
EXCLUDED = {b"shutdown", b"quit", b"flushall", b"flushdb", b"save", b"bgsave", b"bgrewriteaof", b"subscribe",
            b"psubscribe", b"unsubscribe", b"punsubscribe", b"monitor",
            # replication: PSYNC turns the connection into a replica's, REPLICAOF the
            # server into one, WAIT blocks, REPLCONF ACK is never answered
            b"psync", b"replicaof", b"slaveof", b"wait", b"replconf"}
SAFE_SUBCOMMANDS = {b"config": [b"GET"], b"acl": [b"WHOAMI", b"LIST", b"USERS"],
                    b"client": [b"ID", b"GETNAME", b"SETNAME", b"INFO", b"LIST", b"SETINFO"]}
KEYS = [b"fz:a", b"fz:b", b"fz:c", b"fz:d"]


def tokens_of(command) -> list[bytes]:
    words = re.findall(r"\b[A-Z][A-Z_]+\b", " ".join(command.syntax))
    return [w.encode() for w in words if w.encode() != command.name.upper()]  # every form's tokens


def random_arg(rng: random.Random, tokens: list[bytes]) -> bytes:
    kind = rng.randrange(10)
    if kind < 3 and tokens:
        word = rng.choice(tokens)
        return word.lower() if rng.random() < 0.2 else word
    if kind < 5:
        return str(rng.choice([0, 1, 2, 3, -1, -2, 10, 1000, 2**63, -(2**63), rng.randrange(-50, 5000)])).encode()
    if kind < 6:
        return rng.choice([b"-", b"$", b"+", b"*", b"", b"1-5", b"5-1", b"a.b.>", b"a.*", b">", b"*.>",
                           b'{"seq":1}', b'{"last_by_subj":"a.b"}', b"{bad json", b"2024-01-01T00:00:00Z"])
    if kind < 8:
        return rng.choice(KEYS)
    return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12)))


def random_command(rng: random.Random, name: bytes, command) -> list[bytes]:
    tokens = tokens_of(command)
    if name in SAFE_SUBCOMMANDS:
        args = [name, rng.choice(SAFE_SUBCOMMANDS[name])]
    else:
        args = [name]
        if command.keys[0]:
            args.append(rng.choice(KEYS))
    for _ in range(rng.randrange(0, 9)):
        args.append(random_arg(rng, tokens))
    for i, arg in enumerate(args[:-1]):  # BLOCK briefly: a fuzzed command must not hang the run
        if arg.lower() == b"block":
            args[i + 1] = b"1"
    if name == b"client" and args[1] == b"SETNAME":
        args[2:] = [b"fuzz"]
    return args


def read_replies(sock: socket.socket, count: int, timeout: float = 10.0) -> list:
    reader = hiredis.Reader()
    replies = []
    sock.settimeout(timeout)
    while len(replies) < count:
        data = sock.recv(1 << 20)
        assert data, f"the server closed the connection after {len(replies)} of {count} replies"
        reader.feed(data)
        while (reply := reader.gets()) is not False:
            replies.append(reply)
    return replies


def snapshot_of(sock: socket.socket, keys: list[bytes]) -> list:
    sock.sendall(b"".join(multibulk([b"TREAD", key, b"1", b"1000", b"WITHINFO"]) for key in keys))
    return read_replies(sock, len(keys))


def test_random_commands_get_replies_and_leave_other_data_intact(server):
    rng = random.Random(20261121)
    admin = server.client()
    keep = [b"keep:%d" % i for i in range(3)]
    for i, key in enumerate(keep):
        admin.execute_command("TWRITE", key, "ENTRIES", *[x for j in range(50) for x in (f"t{j % 3}", f"v{i}-{j}")])
    admin.execute_command("TREAD", keep[0], "-", 5, "GROUP", "g", "RETRY", 600000, 6000000)
    sock = socket.create_connection(("127.0.0.1", server.port))
    before = snapshot_of(sock, keep)
    groups_before = [p[:2] for p in admin.execute_command("TPENDING", keep[0], "g")]
    names = sorted(n for n in COMMANDS if n not in EXCLUDED)
    sent = 0
    for batch in range(30):
        commands = [random_command(rng, name, COMMANDS[name]) for name in rng.choices(names, k=60)]
        sock.sendall(b"".join(multibulk(c) for c in commands))
        replies = read_replies(sock, len(commands))
        assert len(replies) == len(commands)
        sent += len(commands)
        sock.sendall(multibulk([b"DISCARD"]))  # a MULTI the batch left open (else an error reply)
        read_replies(sock, 1)
        assert snapshot_of(sock, keep) == before, f"data changed in batch {batch}"
    assert [p[:2] for p in admin.execute_command("TPENDING", keep[0], "g")] == groups_before
    assert admin.ping()
    assert sent == 1800
    sock.close()


@pytest.mark.parametrize("garbage", [
    b"*3\r\n$4\r\nPING\r\n",                # incomplete, then the connection closes
    b"*1\r\n$999999999999999999999\r\n",     # absurd bulk length
    b"*-5\r\nPING\r\n",
    b"\x00\x01\x02\xff\r\n",
    b"*2\r\n$4\r\nECHO\r\n$2\r\nabcdef\r\n",  # bulk not followed by CRLF
])
def test_broken_protocol_never_disturbs_other_clients(server, garbage):
    other = server.client()
    other.execute_command("TWRITE", "stay", "t", "v")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(garbage)
        sock.settimeout(0.3)
        try:
            sock.recv(1000)
        except socket.timeout:
            pass
    assert other.execute_command("TREAD", "stay", 1, 1) == [[1, b"t", b"v"]]


# --- the command fuzzer, in process -------------------------------------------------------

# In process, only what would stop the server or start background threads is left out.
IN_PROCESS_EXCLUDED = {b"shutdown", b"bgsave", b"bgrewriteaof", b"subscribe", b"psubscribe", b"unsubscribe",
                       b"punsubscribe", b"monitor", b"psync", b"replicaof", b"slaveof", b"wait", b"replconf"}


def garble(rng: random.Random, argv: list[bytes]) -> list[bytes]:
    """A command mangled the way a broken client would: case, arguments dropped,
    repeated, swapped, truncated or replaced with junk."""
    argv = list(argv)
    for _ in range(rng.randrange(1, 3)):
        kind = rng.randrange(7)
        i = rng.randrange(len(argv))
        if kind == 0:
            argv[0] = bytes(c ^ 0x20 if 65 <= (c & ~0x20) <= 90 and rng.random() < 0.5 else c for c in argv[0])
        elif kind == 1 and len(argv) > 1:
            del argv[max(1, i)]
        elif kind == 2:
            argv.insert(i + 1, argv[i])
        elif kind == 3 and len(argv) > 2:
            j = rng.randrange(1, len(argv))
            argv[max(1, i)], argv[j] = argv[j], argv[max(1, i)]
        elif kind == 4:
            argv = argv[: max(1, i)]
        elif kind == 5:
            argv.insert(max(1, i), bytes(rng.randrange(256) for _ in range(rng.randrange(0, 8))))
        else:
            argv.append(rng.choice([b"-1", b"0", b"18446744073709551616", b"", b"\x00", b"nan", b"1e3"]))
    return argv


def well_formed(reply) -> bool:
    """A decoded reply made only of RESP types; errors start with an upper-case code word."""
    if isinstance(reply, ReplyError):
        code = str(reply).split(" ", 1)[0]
        return code.isupper() and "internal error" not in str(reply)
    if isinstance(reply, list):
        return all(well_formed(x) for x in reply)
    if isinstance(reply, dict):
        return all(well_formed(k) and well_formed(v) for k, v in reply.items())
    return reply is None or isinstance(reply, (int, float, bytes, bool))


def shape(server) -> tuple:
    """What any change to the keyspace changes, cheap enough to take around every command."""
    return tuple((key, s.first, s.next_offset, s.length, s.last_time, astuple(s.config),
                  tuple((name, g.next, g.pending_count) for name, g in sorted(s.groups.items())))
                 for key, s in sorted(server.keyspace.items()))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_commands_in_process(tmp_path, caplog, seed):
    caplog.set_level(logging.WARNING, logger="tstream")
    rng = random.Random(seed)
    names = sorted(n for n in COMMANDS if n not in IN_PROCESS_EXCLUDED)
    with Harness(dir=str(tmp_path), node_entries=8, group_max_pending=20) as h:
        clients = [h.client(2), h.client(3)]
        errors = 0
        for i in range(15000):
            name = rng.choice(names)
            argv = random_command(rng, name, COMMANDS[name])
            if rng.random() < 0.3:
                argv = garble(rng, argv)
            k = rng.randrange(len(clients))
            records, before = len(h.recorder), shape(h.server)
            reply = clients[k].call(*argv)
            assert well_formed(reply), (argv, reply)
            if isinstance(reply, ReplyError):
                errors += 1
                assert len(h.recorder) == records, f"{argv!r} failed with {reply} but logged effects"
                assert shape(h.server) == before, f"{argv!r} failed with {reply} but changed the keyspace"
            if clients[k].closed:  # QUIT
                clients[k] = h.client(rng.choice([2, 3]))
            if i % 25 == 0:
                h.check()
        h.check()
        h.housekeeping()
        h.replay.assert_matches()
        assert errors > 3000  # the fuzzer does reach the error paths
    problems = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not problems, problems[0].getMessage()


def test_pipelined_random_commands_and_garbage_in_process(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="tstream")
    rng = random.Random(20261123)
    names = sorted(n for n in COMMANDS if n not in IN_PROCESS_EXCLUDED | {b"quit"})
    with Harness(dir=str(tmp_path), node_entries=8) as h:
        client = h.client(3)
        for batch in range(300):
            commands = [random_command(rng, name, COMMANDS[name]) for name in rng.choices(names, k=60)]
            commands = [garble(rng, c) if rng.random() < 0.3 else c for c in commands]
            replies = client.pipeline(commands)
            assert all(well_formed(r) for r in replies)
            if batch % 10 == 0:
                # broken protocol: well-formed replies, then (if the input can't be
                # parsed) a protocol error and the connection closes; the server goes on
                victim = h.client(rng.choice([2, 3]))
                victim.send_bytes(rng.choice([b"*1\r\n$x\r\n", b"*-5\r\nPING\r\n", b"$3\r\nabc\r\n",
                                              b"*2\r\n$4\r\nECHO\r\n$2\r\nabcdef\r\n",
                                              b"PING\r\n*1\r\n$99999999999\r\n", rng.randbytes(40)]))
                answers = victim.replies()
                assert all(well_formed(r) for r in answers)
                if victim.closed:
                    assert str(answers[-1]).startswith("ERR Protocol error")
                else:
                    victim.close()
                h.check()
        h.housekeeping()
        h.replay.assert_matches()
        client.call("DISCARD")  # a MULTI the last batch left open (else an error reply)
        assert client.call("PING") == b"PONG"
    problems = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not problems, problems[0].getMessage()
