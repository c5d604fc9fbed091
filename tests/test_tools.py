"""The commands Redis's tools send: MONITOR (raw and redis-cli), ROLE, OBJECT,
MEMORY, LATENCY DOCTOR, CLIENT KILL TYPE, CLIENT NO-EVICT; redis-cli --memkeys
and --hotkeys behave as against a redis-server with the same policy."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import threading
import time

import pytest
import redis

from .test_pubsub import Quiet
from .test_xstreams_oracle import run_both

LINE = re.compile(rb'\+(\d+)\.(\d{6}) \[0 127\.0\.0\.1:\d+\] (.*)\r\n')


def monitor_lines(raw: Quiet, wanted: int, timeout: float = 5) -> list[bytes]:
    lines: list[bytes] = []
    deadline = time.monotonic() + timeout
    buffer = b""
    while len(lines) < wanted and time.monotonic() < deadline:
        buffer += raw.read(0.05)
        lines = [m.group(3) for m in LINE.finditer(buffer)]
    return lines


def test_monitor_shows_commands_as_redis_does(server):
    watcher = Quiet(server.port)
    assert watcher.call("MONITOR") == b"+OK\r\n"
    c = server.client()
    c.execute_command("TWRITE", "mon", "tag", 'say "hi"\n')
    c.execute_command("XADD", "mon2", "*", "f", b"\x00\xff")
    c.config_get("maxmemory")  # admin commands are not shown
    try:
        c.execute_command("AUTH", "someone", "s3cret")
    except redis.RedisError:
        pass
    c.execute_command("PING")
    lines = [line for line in monitor_lines(watcher, 6)
             if line.split(b" ")[0] in (b'"TWRITE"', b'"XADD"', b'"AUTH"', b'"PING"', b'"CONFIG"')]
    assert lines[0] == b'"TWRITE" "mon" "tag" "say \\"hi\\"\\n"'
    assert lines[1] == b'"XADD" "mon2" "*" "f" "\\x00\\xff"'
    assert b'"AUTH" "(redacted)" "(redacted)"' in lines and b'"PING"' in lines  # AUTH's words are hidden
    assert not any(line.startswith(b'"CONFIG"') for line in lines)  # admin commands are not shown
    watcher.close()
    deadline = time.monotonic() + 5
    while c.info("clients")["connected_clients"] > 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert c.execute_command("TWRITE", "mon", "t", "v")  # no monitor left: the fast paths again


def test_redis_cli_monitor(server):
    cli = shutil.which("redis-cli")
    proc = subprocess.Popen(["stdbuf", "-oL", cli, "-p", str(server.port), "monitor"], stdout=subprocess.PIPE,
                            text=True)
    try:
        c = server.client()
        deadline = time.monotonic() + 5
        while not any(x.get("cmd") == "monitor" for x in c.client_list()):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        c.execute_command("TWRITE", "cli-mon", "t", "v")
        found: list[str] = []

        def read_lines() -> None:
            for line in iter(proc.stdout.readline, ""):
                found.append(line)

        reader = threading.Thread(target=read_lines)
        reader.daemon = True
        reader.start()
        deadline = time.monotonic() + 10
        while not any("TWRITE" in line for line in found):
            assert time.monotonic() < deadline, f"redis-cli printed {found!r}"
            time.sleep(0.05)
        assert any('"TWRITE" "cli-mon" "t" "v"' in line for line in found)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(5)


SAME_AS_REDIS = [
    ("ROLE",), ("XADD", "k", "1-1", "f", "v"), ("OBJECT", "REFCOUNT", "k"), ("OBJECT", "FREQ", "k"),
    ("OBJECT", "ENCODING", "nokey"), ("OBJECT", "IDLETIME", "nokey"), ("OBJECT", "FREQ", "nokey"),
    ("OBJECT", "NOSUCH", "k"), ("OBJECT", "ENCODING"), ("MEMORY", "USAGE", "nokey"),
    ("MEMORY", "USAGE", "k", "SAMPLES"), ("MEMORY", "USAGE", "k", "FOO", "1"), ("MEMORY", "NOSUCH"),
    ("CLIENT", "NO-EVICT", "maybe"), ("CLIENT", "NO-EVICT", "on"), ("CLIENT", "NO-EVICT", "off"),
    ("CLIENT", "KILL", "TYPE", "nosuch"), ("CLIENT", "KILL", "TYPE", "master"), ("CLIENT", "KILL", "TYPE", "pubsub"),
]


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_tool_commands_match_redis(server, redis_oracle, protocol):
    run_both(server.port, redis_oracle, SAME_AS_REDIS, protocol, normalize=lambda reply: reply)


def test_object_and_memory_describe_a_stream(r2):
    r2.execute_command("TWRITE", "obj", "t", "v" * 1000)
    assert r2.object("encoding", "obj") == b"macronodes"
    assert r2.object("refcount", "obj") == 1
    assert 0 <= r2.object("idletime", "obj") < 60
    usage = r2.memory_usage("obj")
    assert 1000 < usage < 100_000
    assert b"Sam" in r2.execute_command("MEMORY", "DOCTOR")
    assert b"Dave" in r2.execute_command("LATENCY", "DOCTOR")


def test_client_kill_type_pubsub_closes_only_subscribers(server):
    sub = Quiet(server.port)
    sub.call("SUBSCRIBE", "k")
    plain = server.client()
    assert plain.execute_command("CLIENT", "KILL", "TYPE", "pubsub") == 1
    assert plain.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") >= 0
    assert plain.ping()
    assert sub.read(0.2) == b""  # closed by the server
    sub.close()


def test_redis_cli_memkeys_and_hotkeys(server):
    c = server.client()
    for i in range(5):
        c.execute_command("TWRITE", f"mk:{i}", "t", "x" * (1000 * (i + 1)))
    cli = shutil.which("redis-cli")
    memkeys = subprocess.run([cli, "-p", str(server.port), "--memkeys"], capture_output=True, text=True, timeout=60)
    assert memkeys.returncode == 0, memkeys.stderr
    assert "mk:4" in memkeys.stdout and "Biggest" in memkeys.stdout
    # --hotkeys needs an LFU maxmemory policy: tstream, like redis-server under
    # noeviction, says so and redis-cli stops with that error.
    hotkeys = subprocess.run([cli, "-p", str(server.port), "--hotkeys"], capture_output=True, text=True, timeout=60)
    assert "LFU maxmemory policy is not selected" in hotkeys.stdout + hotkeys.stderr


def test_config_rewrite_keeps_the_file_and_writes_the_changes(make_server, tmp_path):
    conf = tmp_path / "tstream.conf"
    conf.write_text("# my settings\nsave \"\"\n\n# the memory cap\nmaxmemory 0\nmaxmemory 0\ntimeout 0\n")
    proc = make_server(str(conf))
    c = proc.client()
    c.config_set("maxmemory", "100mb")
    c.config_set("stream-type-name", "stream")
    assert c.execute_command("CONFIG", "REWRITE") == b"OK"
    text = conf.read_text().splitlines()
    assert text[:5] == ["# my settings", "save ''", "", "# the memory cap", "maxmemory 104857600"]
    assert text.count("maxmemory 104857600") == 1 and "timeout 0" in text
    assert "# Generated by CONFIG REWRITE" in text and "stream-type-name stream" in text
    proc.stop()
    proc.start()
    c = proc.client()
    assert c.config_get("maxmemory") == {"maxmemory": "104857600"}
    assert c.config_get("stream-type-name") == {"stream-type-name": "stream"}


def test_config_rewrite_without_a_file_is_redis_s_error(server, redis_oracle):
    from .test_transactions import Raw
    ours, theirs = Raw(server.port), Raw(redis_oracle)
    assert ours.call("CONFIG", "REWRITE") == theirs.call("CONFIG", "REWRITE")
    ours.close()
    theirs.close()


def test_client_reply_matches_redis(server, redis_oracle):
    sequence = [("CLIENT", "REPLY", "OFF"), ("PING",), ("ECHO", "a"), ("XADD", "rk", "1-1", "f", "v"),
                ("CLIENT", "REPLY", "ON"), ("PING",), ("CLIENT", "REPLY", "SKIP"), ("ECHO", "skipped"),
                ("ECHO", "shown"), ("CLIENT", "REPLY", "maybe"), ("CLIENT", "REPLY", "SKIP"),
                ("CLIENT", "REPLY", "SKIP"), ("ECHO", "x"), ("ECHO", "y"), ("XLEN", "rk")]
    streams = []
    for port in (server.port, redis_oracle):
        raw = Quiet(port)
        raw.call("DEL", "rk")
        streams.append(b"".join(raw.call(*words) for words in sequence))
        raw.close()
    assert streams[0] == streams[1]
    assert b"skipped" not in streams[0] and b"shown" in streams[0]


def test_mode_layers_come_and_go_in_any_order():
    from tstream.commands.gates import add_layer, has_layer, rebase, remove_layer

    class Client:
        gate = None

    seen = []
    client = Client()
    client.gate = lambda c, name, argv, command: seen.append(("acl", name))
    acl = client.gate
    add_layer(client, "subscribe", lambda c, name: seen.append(("subscribe", name)))
    add_layer(client, "reply", lambda c, name: seen.append(("reply", name)))
    add_layer(client, "reply", lambda c, name: seen.append(("twice", name)))  # once only
    client.gate(client, b"ping", [b"ping"], None)
    assert seen == [("reply", b"ping"), ("subscribe", b"ping"), ("acl", b"ping")]
    remove_layer(client, "subscribe")  # from under another layer
    assert has_layer(client, "reply") and not has_layer(client, "subscribe")
    rebase(client, None)  # a new user without limits: the modes stay
    seen.clear()
    client.gate(client, b"echo", [b"echo"], None)
    assert seen == [("reply", b"echo")]
    remove_layer(client, "reply")
    assert client.gate is None and acl is not None
