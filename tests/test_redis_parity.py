"""Connection-level behaviour against redis-server 7.0, byte for byte, over raw
sockets (RESP2 and RESP3): what a MONITOR shows and in what order, the order of
replies and pub/sub frames in a pipelined read, pub/sub frames under CLIENT
REPLY OFF|SKIP, CLIENT KILL's errors, CLIENT LIST/INFO of a client in MULTI,
and the ACL key check of XREAD/XREADGROUP (the keys after STREAMS)."""

from __future__ import annotations

import re
import socket
import time

import pytest

from .harness import encode_command
from .test_pubsub import Quiet
from .test_xstreams_oracle import run_both

# A MONITOR line's time and client address differ between two servers.
_MONITOR_LINE = re.compile(rb"\+\d+\.\d{6} \[0 [^\]]+\]")


def same_lines(data: bytes) -> bytes:
    return _MONITOR_LINE.sub(b"+<time> [0 <client>]", data)


def pipelined(conn: Quiet, *commands, quiet: float = 0.1) -> bytes:
    """Send ``commands`` in one write (one read for the server) and return all that comes back."""
    conn.sock.sendall(b"".join(encode_command(words) for words in commands))
    return conn.read(quiet)


def connect(port: int, protocol: int) -> Quiet:
    conn = Quiet(port)
    if protocol == 3:
        conn.call("HELLO", "3")
    return conn


def compare(script, server_port: int, redis_port: int, protocol: int) -> list:
    """Run ``script(port, protocol) -> [(label, bytes)]`` on both servers and
    compare; returns redis-server's."""
    ours, theirs = script(server_port, protocol), script(redis_port, protocol)
    assert [label for label, _ in ours] == [label for label, _ in theirs]
    for (label, mine), (_, want) in zip(ours, theirs):
        mine, want = same_lines(mine), same_lines(want)
        assert mine == want, f"{label}:\n tstream {mine!r}\n redis   {want!r}"
    return theirs


# --- MONITOR -------------------------------------------------------------------------------------

# Admin commands are not shown; the others are (whether a command is admin is Redis's call).
SHOWN_OR_NOT = [
    ("INFO", "server"), ("CLIENT", "SETNAME", "n"), ("CLIENT", "GETNAME"), ("CLIENT", "ID"), ("CLIENT", "LIST"),
    ("CLIENT", "INFO"), ("CLIENT", "REPLY", "ON"), ("CLIENT", "NO-EVICT", "on"), ("CLIENT", "KILL", "ID", "999999"),
    ("ACL", "WHOAMI"), ("ACL", "LIST"), ("ACL", "CAT"), ("COMMAND", "COUNT"), ("COMMAND", "DOCS", "get"),
    ("DBSIZE",), ("SELECT", "0"), ("TYPE", "k"), ("EXISTS", "k"), ("DEL", "k"), ("SLOWLOG", "LEN"),
    ("LATENCY", "LATEST"), ("MEMORY", "USAGE", "k"), ("OBJECT", "ENCODING", "k"), ("ROLE",), ("LASTSAVE",),
    ("SCAN", "0"), ("KEYS", "*"), ("CONFIG", "RESETSTAT"), ("MULTI",), ("PING",), ("NOSUCH",), ("EXEC",),
    ("WATCH", "k"), ("UNWATCH",), ("MULTI",), ("DISCARD",), ("ECHO", "\u00e9"), ("PUBLISH", "c", "m"),
    ("PUBSUB", "NUMPAT"), ("XADD", "k", "1-1", "f", "v"), ("XREAD", "STREAMS", "k", "0"),
    ("DEL", "k"), ("QUIT",),
]


def monitor_script(port: int, protocol: int) -> list:
    out = []
    watcher = connect(port, protocol)
    other = Quiet(port)
    try:
        out.append(("MONITOR", watcher.call("MONITOR")))
        # Its own commands are shown too, each line after the command's reply.
        out.append(("own pipelined commands", pipelined(watcher, ("PING",), ("ECHO", "x"), ("PING", "y"))))
        out.append(("MONITOR again: no reply", watcher.call("MONITOR", quiet=0.1)))
        other.call("HELLO", "3", "AUTH", "nobody", "pw")  # refused, shown with its secrets hidden
        other.call("HELLO", "3", "AUTH", "nobody", "pw", "SETNAME", "x")
        other.call("HELLO", "5", "AUTH", "nobody", "pw")  # refused before AUTH: nothing to hide
        other.call("AUTH", "nobody", "pw")
        other.call("AUTH", "pw")
        other.call("AUTH", "a", "b", "c")  # a syntax error: shown as sent
        other.call("ECHO", 'say "hi"\n\x00\xff')
        other.call("NOSUCHCOMMAND", "a")  # not shown: refused before it ran
        other.call("ECHO")  # nor is a wrong arity
        other.call("CONFIG", "GET", "maxmemory")  # nor an admin command
        out.append(("MONITOR in MULTI is refused",
                    pipelined(other, ("MULTI",), ("PING",), ("MONITOR",), ("ECHO", "z"), ("EXEC",))))
        out.append(("the lines, EXEC's after its commands", watcher.read(0.2)))
        for words in SHOWN_OR_NOT:
            other.call(*words, quiet=0.02)
        out.append(("which commands are shown", watcher.read(0.2)))
    finally:
        watcher.close()
        other.close()
    return out


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_monitor_matches_redis(server, redis_oracle, protocol):
    compare(monitor_script, server.port, redis_oracle, protocol)


def monitor_modes_script(port: int, protocol: int) -> list:
    watcher = connect(port, protocol)
    other = Quiet(port)
    try:
        watcher.call("MONITOR")
        out = [("REPLY OFF", watcher.call("CLIENT", "REPLY", "OFF"))]
        other.call("PING", "a")
        out += [("others' lines dropped under OFF", watcher.read()),
                ("own under OFF", watcher.call("PING", "own")),
                ("REPLY ON: its line shown", watcher.call("CLIENT", "REPLY", "ON")),
                ("REPLY SKIP: its line shown", watcher.call("CLIENT", "REPLY", "SKIP"))]
        other.call("PING", "b")
        out += [("others' lines dropped until the skipped command ran", watcher.read()),
                ("the skipped command, then the next", pipelined(watcher, ("PING", "own2"), ("PING", "own3"))),
                # A monitor is a replica to Redis: no keyspace commands (nor PUBLISH), not shown either.
                ("keyspace commands refused", pipelined(
                    watcher, ("XADD", "k", "1-1", "f", "v"), ("XRANGE", "k", "-", "+"), ("PUBLISH", "c", "m"),
                    ("DBSIZE",), ("EXISTS", "k"), ("TYPE", "k"), ("MULTI",), ("XADD", "k", "2-1", "f", "v"),
                    ("EXEC",), ("XREAD", "STREAMS", "k", "0"), ("DEL", "k"), ("ECHO", "end")))]
    finally:
        watcher.close()
        other.close()
    return out


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_monitor_under_client_reply_and_keyspace_commands_match_redis(server, redis_oracle, protocol):
    compare(monitor_modes_script, server.port, redis_oracle, protocol)


# --- pub/sub frames and replies in one read ------------------------------------------------------

PIPELINED_PUBSUB = [
    ("SUBSCRIBE", "ch"), ("PING",), ("PUBLISH", "ch", "m1"), ("ECHO", "e"), ("PSUBSCRIBE", "c*"),
    ("PUBLISH", "ch", "m2"), ("UNSUBSCRIBE", "ch"), ("PUBLISH", "ch", "m3"), ("PUNSUBSCRIBE",), ("PING",),
    ("PUBLISH", "ch", "m4"),
]


def pubsub_order_script(port: int, protocol: int) -> list:
    conn = connect(port, protocol)
    try:
        out = [("one read", pipelined(conn, *PIPELINED_PUBSUB))]
        if protocol == 3:  # a message to itself inside EXEC sits in EXEC's reply, as Redis writes it
            out.append(("in EXEC", pipelined(conn, ("SUBSCRIBE", "t"), ("MULTI",), ("PUBLISH", "t", "x"),
                                             ("PING",), ("PUBLISH", "t", "y"), ("EXEC",), ("UNSUBSCRIBE",))))
        # Subscribing inside EXEC: the rest of the EXEC runs (RESP2 subscribe mode starts after it).
        out.append(("SUBSCRIBE in EXEC", pipelined(
            conn, ("MULTI",), ("SUBSCRIBE", "s"), ("PING",), ("PUBLISH", "s", "x"), ("ECHO", "e"), ("EXEC",),
            ("PING",), ("MULTI",), ("UNSUBSCRIBE",), ("EXEC",))))
        many = [("PUBLISH", "ch", str(i)) if i % 3 else ("PING", str(i)) for i in range(40)]
        out.append(("a long read", pipelined(conn, ("SUBSCRIBE", "ch"), *many, ("UNSUBSCRIBE",), quiet=0.2)))
    finally:
        conn.close()
    return out


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_replies_and_push_frames_leave_in_redis_order(server, redis_oracle, protocol):
    compare(pubsub_order_script, server.port, redis_oracle, protocol)


# --- CLIENT REPLY OFF|SKIP and pub/sub ------------------------------------------------------------

def reply_mode_script(port: int, protocol: int) -> list:
    publisher = Quiet(port)
    off = connect(port, protocol)
    skip = connect(port, protocol)
    try:
        out = [
            ("OFF then subscribe", pipelined(off, ("CLIENT", "REPLY", "OFF"), ("SUBSCRIBE", "ch"),
                                             ("PSUBSCRIBE", "c*"), ("PING",))),
            ("SKIP then subscribe", pipelined(skip, ("CLIENT", "REPLY", "SKIP"), ("SUBSCRIBE", "ch"), ("PING",))),
            ("publish", publisher.call("PUBLISH", "ch", "hello")),
            ("messages under OFF", off.read(0.1)),
            ("messages after SKIP", skip.read(0.1)),
            ("OFF: unsubscribe", pipelined(off, ("UNSUBSCRIBE",), ("PUNSUBSCRIBE", "c*"), ("PING",))),
        ]
    finally:
        for conn in (publisher, off, skip):
            conn.close()
    return out


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_pubsub_frames_are_sent_under_client_reply_off_and_skip(server, redis_oracle, protocol):
    compare(reply_mode_script, server.port, redis_oracle, protocol)



def blocked_reply_mode_script(port: int, protocol: int) -> list:
    """A blocking read right after CLIENT REPLY SKIP is the command skipped: its
    reply, served by a write or its timeout, is dropped, the next one sent."""
    writer = Quiet(port)
    reader = connect(port, protocol)
    try:
        writer.call("DEL", "bx")
        out = [("skip, block", pipelined(reader, ("CLIENT", "REPLY", "SKIP"),
                                         ("XREAD", "BLOCK", "0", "STREAMS", "bx", "$"), ("PING", "after")))]
        writer.call("XADD", "bx", "1-1", "f", "v", quiet=0.1)
        out.append(("served: skipped, then PING", reader.read(0.2)))
        out.append(("skip, time out", pipelined(reader, ("CLIENT", "REPLY", "SKIP"),
                                                ("XREAD", "BLOCK", "50", "STREAMS", "bx", "$"), ("PING", "next"),
                                                quiet=0.3)))
        out.append(("off, block", pipelined(reader, ("CLIENT", "REPLY", "OFF"),
                                            ("XREAD", "BLOCK", "0", "STREAMS", "bx", "$"), ("PING", "off"))))
        writer.call("XADD", "bx", "1-2", "f", "v", quiet=0.1)
        out.append(("off, served", reader.read(0.2)))
        out.append(("on again", reader.call("CLIENT", "REPLY", "ON", quiet=0.1)))
    finally:
        for conn in (writer, reader):
            conn.close()
    return out


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_a_blocked_command_under_client_reply_skip_is_the_one_skipped(server, redis_oracle, protocol):
    theirs = compare(blocked_reply_mode_script, server.port, redis_oracle, protocol)
    assert theirs[1][1] == b"$5\r\nafter\r\n"  # (the oracle too: the script shows what it means to)


# --- CLIENT KILL ----------------------------------------------------------------------------------

# (Filters that match no client: both servers have other connections open.)
CLIENT_KILL = [
    ("CLIENT", "KILL", "ID", "abc"), ("CLIENT", "KILL", "ID", "-1"), ("CLIENT", "KILL", "ID", "0"),
    ("CLIENT", "KILL", "ID", "1.5"), ("CLIENT", "KILL", "ID", "18446744073709551616"),
    ("CLIENT", "KILL", "ID", "999999"), ("CLIENT", "KILL", "ID", "999999", "SKIPME", "yes"),
    ("CLIENT", "KILL", "ID", "999999", "SKIPME", "NO"), ("CLIENT", "KILL", "TYPE", "foo"),
    ("CLIENT", "KILL", "TYPE", "Master"), ("CLIENT", "KILL", "TYPE", "replica"), ("CLIENT", "KILL", "TYPE", "slave"),
    ("CLIENT", "KILL", "ID", "999999", "SKIPME", "maybe"), ("CLIENT", "KILL", "USER", "nosuch"),
    ("CLIENT", "KILL", "USER", "nosuch", "TYPE", "foo"), ("CLIENT", "KILL", "TYPE", "foo", "USER", "nosuch"),
    ("CLIENT", "KILL", "USER", "default", "ID", "999999"), ("CLIENT", "KILL", "FOO", "bar"),
    ("CLIENT", "KILL", "ID"), ("CLIENT", "KILL", "ID", "1", "ID"), ("CLIENT", "KILL", "ID", "1", "FOO"),
    ("CLIENT", "KILL", "1.2.3.4:5"), ("CLIENT", "KILL", "ADDR", "1.2.3.4:5"),
    ("CLIENT", "KILL", "LADDR", "1.2.3.4:5", "ID", "999999"), ("CLIENT", "KILL", "MAXAGE", "1"),
]


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_client_kill_errors_match_redis(server, redis_oracle, protocol):
    run_both(server.port, redis_oracle, CLIENT_KILL, protocol, normalize=lambda reply: reply)


def kill_itself(port: int) -> tuple[bytes, bytes]:
    conn = Quiet(port)
    try:
        own = conn.call("CLIENT", "ID").strip(b":\r\n").decode()
        reply = conn.call("CLIENT", "KILL", "ID", own, "SKIPME", "no", quiet=0.2)
        conn.sock.settimeout(2)
        try:
            after = conn.sock.recv(100)
        except (ConnectionResetError, socket.timeout):
            after = b"<reset>"
        return reply, after
    finally:
        conn.close()


def test_client_killing_itself_gets_its_reply_first(server, redis_oracle):
    assert kill_itself(server.port) == kill_itself(redis_oracle) == (b":1\r\n", b"")


# --- CLIENT LIST / CLIENT INFO in MULTI -------------------------------------------------------------

_FIELDS = ("flags", "db", "sub", "psub", "ssub", "multi", "events", "cmd", "user", "redir", "resp")


def fields(line: bytes) -> dict:
    pairs = dict(word.split(b"=", 1) for word in line.split())
    return {name: pairs[name.encode()] for name in _FIELDS}


def info_reply(reply: bytes) -> bytes:
    """The line of a CLIENT INFO reply (a bulk or verbatim string)."""
    return re.search(rb"(id=[^\n]*)\n", reply).group(1)


def client_list_script(port: int, protocol: int) -> list:
    conn = connect(port, protocol)
    other = connect(port, protocol)
    try:
        conn.call("DEL", "w")
        inside = pipelined(conn, ("MULTI",), ("PING",), ("CLIENT", "INFO"), ("EXEC",))
        out = [("CLIENT INFO in EXEC", fields(info_reply(inside)))]
        own_id = conn.call("CLIENT", "ID").split(b":")[-1].strip()
        pipelined(conn, ("WATCH", "w"), ("MULTI",), ("PING",), ("ECHO", "x"))
        listed = [line for line in other.call("CLIENT", "LIST").split(b"\n") if b"id=" + own_id + b" " in line]
        out.append(("CLIENT LIST: queuing", fields(re.search(rb"id=.*", listed[0]).group(0))))
        other.call("XADD", "w", "1-1", "f", "v")
        listed = [line for line in other.call("CLIENT", "LIST").split(b"\n") if b"id=" + own_id + b" " in line]
        out.append(("CLIENT LIST: a WATCHed key changed", fields(re.search(rb"id=.*", listed[0]).group(0))))
        out.append(("EXEC", conn.call("EXEC")))
        out.append(("CLIENT INFO after", fields(info_reply(conn.call("CLIENT", "INFO")))))
    finally:
        conn.close()
        other.close()
    return [(label, repr(value).encode() if isinstance(value, dict) else value) for label, value in out]


CLIENT_LIST_ERRORS = [
    ("CLIENT", "LIST", "ID", "abc"), ("CLIENT", "LIST", "ID", "0"), ("CLIENT", "LIST", "ID", "-5"),
    ("CLIENT", "LIST", "ID", "999999"), ("CLIENT", "LIST", "TYPE", "foo"), ("CLIENT", "LIST", "TYPE", "master"),
    ("CLIENT", "LIST", "TYPE", "replica"), ("CLIENT", "LIST", "TYPE", "slave"), ("CLIENT", "LIST", "FOO"),
    ("CLIENT", "LIST", "ID"), ("CLIENT", "LIST", "TYPE"), ("CLIENT", "LIST", "TYPE", "normal", "x"),
]


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_client_list_arguments_match_redis(server, redis_oracle, protocol):
    run_both(server.port, redis_oracle, CLIENT_LIST_ERRORS, protocol, normalize=lambda reply: reply)


def test_client_list_type_filters_as_redis(server, redis_oracle):
    """TYPE pubsub lists the subscribers; TYPE normal the others, a monitor included."""
    def script(port: int, protocol: int) -> list:
        conns = {name: Quiet(port) for name in ("subscriber", "monitor", "plain")}
        try:
            ids = {name: conn.call("CLIENT", "ID").strip(b":\r\n") for name, conn in conns.items()}
            conns["subscriber"].call("SUBSCRIBE", "x")
            conns["monitor"].call("MONITOR")
            out = []
            for kind in ("pubsub", "normal"):
                listed = conns["plain"].call("CLIENT", "LIST", "TYPE", kind)
                out.append((kind, repr(sorted(name for name, cid in ids.items() if b"id=%s " % cid in listed)).encode()))
            return out
        finally:
            for conn in conns.values():
                conn.close()

    assert compare(script, server.port, redis_oracle, 2) == [("pubsub", b"['subscriber']"),
                                                              ("normal", b"['monitor', 'plain']")]


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_client_list_of_a_client_in_multi_matches_redis(server, redis_oracle, protocol):
    compare(client_list_script, server.port, redis_oracle, protocol)


# --- XREAD / XREADGROUP and ACL key patterns ----------------------------------------------------------

ACL_READS = [
    ("XREAD", "STREAMS", "ok1", "0"), ("XREAD", "STREAMS", "bad", "0"), ("XREAD", "STREAMS", "ok1", "bad", "0", "0"),
    ("XREAD", "COUNT", "1", "STREAMS", "bad"), ("XREAD", "STREAMS", "ok", "bad", "0"),
    ("XREAD", "STREAMS", "STREAMS", "0"), ("XREAD", "BLOCK", "10", "STREAMS", "bad", "$"),
("XREAD", "COUNT", "STREAMS", "STREAMS", "ok1", "0"),
    ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "bad", ">"), ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "ok1", ">"),
    ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "ok2", "bad", ">", ">"),
    ("XREADGROUP", "GROUP", "streams", "c", "STREAMS", "ok1", ">"),
    ("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "bad", ">"),
    ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "bad"), ("XINFO", "STREAM", "bad"), ("XADD", "bad", "1-1", "f", "v"),
    ("CONFIG", "GET", "port"),
]


GETKEYS = [
    ("COMMAND", "GETKEYS", "XREAD", "STREAMS", "a", "b", "0", "0"),
    ("COMMAND", "GETKEYS", "XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "a", "$"),
    ("COMMAND", "GETKEYS", "XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", ">"),
    ("COMMAND", "GETKEYS", "XREADGROUP", "GROUP", "streams", "c", "STREAMS", "a", "b", ">", ">"),
    ("COMMAND", "GETKEYS", "XREAD", "COUNT", "1", "STREAMS", "a"), ("COMMAND", "GETKEYS", "XREAD", "STREAMS"),
]


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_command_getkeys_of_xread_matches_redis(server, redis_oracle, protocol):
    run_both(server.port, redis_oracle, GETKEYS, protocol, normalize=lambda reply: reply)


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_xread_keys_are_checked_against_acl_patterns(make_server, redis_oracle, protocol):
    proc = make_server("--save", "")
    user = f"reader{protocol}"
    for port in (proc.port, redis_oracle):
        admin = Quiet(port)
        assert admin.call("ACL", "SETUSER", user, "on", ">pw", "~ok*", "+@all", "-@admin") == b"+OK\r\n"
        admin.call("DEL", "ok1")
        admin.close()

    def script(port: int, protocol: int) -> list:
        conn = connect(port, protocol)
        try:
            assert conn.call("AUTH", user, "pw") == b"+OK\r\n"
            return [(" ".join(words), conn.call(*words, quiet=0.1)) for words in ACL_READS]
        finally:
            conn.close()

    try:
        compare(script, proc.port, redis_oracle, protocol)
    finally:
        admin = Quiet(redis_oracle)
        admin.call("ACL", "DELUSER", user)
        admin.close()


def test_monitor_sees_a_blocked_read_once(server, redis_oracle):
    """A blocking XREAD is shown when it runs (and blocks), not again when served."""
    def script(port: int, protocol: int) -> list:
        watcher, reader, writer = Quiet(port), Quiet(port), Quiet(port)
        try:
            writer.call("DEL", "mb")
            watcher.call("MONITOR")
            reader.sock.sendall(encode_command(("XREAD", "BLOCK", "5000", "STREAMS", "mb", "$")))
            time.sleep(0.2)
            writer.call("XADD", "mb", "1-1", "f", "v")
            return [("reader", reader.read(0.3)), ("lines", watcher.read(0.2))]
        finally:
            for conn in (watcher, reader, writer):
                conn.close()

    compare(script, server.port, redis_oracle, 2)


# --- RESET, and HELLO on a subscribed connection --------------------------------------------------

_HELLO_MAP = re.compile(rb"\$\d+\r\n(?:redis|tstream)\r\n\$7\r\nversion\r\n\$\d+\r\n[\d.]+\r\n(.*?id\r\n):\d+", re.S)


def same_hello(data: bytes) -> bytes:
    """HELLO's server name, version and client id differ between two servers."""
    return _HELLO_MAP.sub(rb"<server>\1:<id>", data)


def reset_script(port: int, protocol: int) -> list:
    conns = [connect(port, protocol) for _ in range(4)]
    sub, plain, watcher, other = conns
    try:
        out = [
            ("HELLO 2 enters subscribe mode, RESET leaves it", same_hello(pipelined(
                sub, ("SUBSCRIBE", "ch"), ("HELLO", "2"), ("ECHO", "x"), ("PING",), ("RESET",), ("ECHO", "y"),
                ("SUBSCRIBE", "z"), ("PUBLISH", "z", "q"), ("HELLO", "3"), ("PING",), ("UNSUBSCRIBE",),
                ("HELLO", "3"), ("PING",)))),
            ("RESET: MULTI, name, CLIENT REPLY", pipelined(
                plain, ("CLIENT", "SETNAME", "nm"), ("MULTI",), ("PING",), ("RESET",), ("EXEC",),
                ("CLIENT", "GETNAME"), ("CLIENT", "REPLY", "OFF"), ("PING",), ("RESET",), ("PING",),
                ("CLIENT", "REPLY", "SKIP"), ("RESET",), ("PING", "after"))),
            ("RESET stops a MONITOR", pipelined(watcher, ("MONITOR",), ("RESET",))),
        ]
        other.call("PING")
        out.append(("no more lines", watcher.read()))
        pipelined(watcher, ("WATCH", "wk"), ("RESET",), ("MULTI",))
        pipelined(other, ("DEL", "wk"), ("XADD", "wk", "1-1", "a", "b"))
        out.append(("RESET unwatches", watcher.call("EXEC")))
    finally:
        for conn in conns:
            conn.close()
    return out


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_reset_and_hello_while_subscribed_match_redis(server, redis_oracle, protocol):
    compare(reset_script, server.port, redis_oracle, protocol)


def test_reset_logs_the_connection_out_when_the_default_user_has_a_password(make_server):
    proc = make_server("--save", "", "--requirepass", "pw")
    conn = Quiet(proc.port)
    try:
        assert conn.call("AUTH", "pw") == b"+OK\r\n"
        assert pipelined(conn, ("RESET",), ("PING",)).startswith(b"+RESET\r\n-NOAUTH")
    finally:
        conn.close()


def test_client_list_of_listeners_matches_redis(server, redis_oracle):
    """A RESP2 subscriber, a monitor and a RESP3 subscriber as CLIENT LIST shows them."""
    def script(port: int, protocol: int) -> list:
        conns = {"subscriber": Quiet(port), "monitor": Quiet(port), "resp3 subscriber": connect(port, 3)}
        other = Quiet(port)
        try:
            ids = {name: conn.call("CLIENT", "ID").strip(b":\r\n") for name, conn in conns.items()}
            pipelined(conns["subscriber"], ("SUBSCRIBE", "a", "b"), ("PSUBSCRIBE", "c*"))
            pipelined(conns["monitor"], ("MONITOR",), ("PING",))
            pipelined(conns["resp3 subscriber"], ("SUBSCRIBE", "z"), ("XADD", "lk", "*", "a", "b"), ("DEL", "lk"))
            listed = other.call("CLIENT", "LIST")
            return [(name, repr(fields(re.search(rb"id=%s .*" % ids[name], listed).group(0))).encode())
                    for name in conns]
        finally:
            for conn in (*conns.values(), other):
                conn.close()

    compare(script, server.port, redis_oracle, 2)


def test_a_group_read_after_client_reply_skip_is_skipped(server):
    """TREAD GROUP is answered at the end of its turn (a deferred read, as a
    blocked one): after CLIENT REPLY SKIP its reply is the one dropped."""
    writer = Quiet(server.port)
    reader = Quiet(server.port)
    try:
        writer.call("TWRITE", "gk", "t", "v")
        got = pipelined(reader, ("CLIENT", "REPLY", "SKIP"), ("TREAD", "gk", "1", "10", "GROUP", "g"),
                        ("PING", "after"), quiet=0.2)
        assert got == b"$5\r\nafter\r\n"
        assert reader.call("TREAD", "gk", "1", "10", "GROUP", "g", quiet=0.2) == b"*0\r\n"  # (it did read)
    finally:
        for conn in (writer, reader):
            conn.close()
