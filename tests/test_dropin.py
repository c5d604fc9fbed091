"""What an app moving from Redis sends, and the tools Redis users run (issue #15):
malformed TWRITE forms refused, blank lines between commands, `databases`,
INFO's versions, and redis-cli's --pipe / --bigkeys / --memkeys / --stat / --latency
against the real server."""

from __future__ import annotations

import os
import pty
import select
import socket
import subprocess
import sys

import pytest
import redis

from .conftest import ServerProcess, read_until_quiet, redis_cli_path


@pytest.mark.parametrize("args,error", [
    (("ENTRIES", "a"), "ENTRIES needs one or more tag entry pairs"),
    (("entries", "a"), "ENTRIES needs one or more tag entry pairs"),
    (("BACKLOG", "5"), "syntax error"),
    (("Backlog", "5"), "syntax error"),
])
def test_a_keyword_where_the_tag_goes_is_the_keyword_form(r, args, error):
    with pytest.raises(redis.ResponseError, match=error):
        r.execute_command("TWRITE", "k", *args)
    assert r.exists("k") == 0


def test_a_tag_equal_to_a_keyword_is_written_with_entries(r):
    assert r.execute_command("TWRITE", "k", "ENTRIES", "ENTRIES", "x", "backlog", "y") == 1
    assert [e[1] for e in r.execute_command("TREAD", "k", 1, 10)] == [b"ENTRIES", b"backlog"]


def test_a_pipelined_run_with_a_keyword_tag_fails_only_that_command(r):
    pipe = r.pipeline(transaction=False)
    for tag in ("a", "Entries", "c"):
        pipe.execute_command("TWRITE", "k", tag, "v")
    replies = pipe.execute(raise_on_error=False)
    assert replies[0] == 1 and replies[2] == 2
    assert isinstance(replies[1], redis.ResponseError)
    assert [e[1] for e in r.execute_command("TREAD", "k", 1, 10)] == [b"a", b"c"]


def test_blank_lines_between_commands_are_ignored(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"PING\r\n\r\n*1\r\n$4\r\nPING\r\n\r\n\r\nPING\r\n\n")
        assert read_until_quiet(sock) == b"+PONG\r\n" * 3


@pytest.mark.parametrize("where", ["command line", "config file"])
def test_databases_other_than_one_is_refused_at_load(tmp_path, where):
    args = ["--databases", "16"]
    if where == "config file":
        (tmp_path / "tstream.conf").write_text("port 0\ndatabases 16\n")
        args = [str(tmp_path / "tstream.conf")]
    done = subprocess.run([sys.executable, "-m", "tstream.server", *args, "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert "databases must be 1" in done.stderr + done.stdout


def test_databases_one_is_accepted_and_select_zero_works(make_server):
    proc = make_server("--databases", "1")
    client = proc.client()
    assert client.execute_command("SELECT", 0) in (b"OK", "OK", True)


def test_info_says_which_redis_it_matches(r):
    info = r.info("server")
    assert info["redis_version"] == "7.0.15"
    assert info["tstream_version"]


# --- redis-cli's tools ------------------------------------------------------------------


def resp(*words: str) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w.encode()) for w in words)


def run_cli(server, *args: str, stdin: bytes | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([redis_cli_path(), "-p", str(server.port), *args], input=stdin,
                          capture_output=True, timeout=timeout)


def test_redis_cli_pipe_loads_everything(server):
    payload = b"".join(resp("TWRITE", "bulk", "t", str(i)) for i in range(2000))
    payload += b"TWRITE bulk t inline\r\n"  # an inline command, as hand-written files have
    done = run_cli(server, "--pipe", stdin=payload)
    assert done.returncode == 0, done.stdout + done.stderr
    assert b"errors: 0, replies: 2001" in done.stdout
    assert len(server.client().execute_command("TREAD", "bulk", 1, 3000)) == 2001


def test_redis_cli_bigkeys(server):
    client = server.client()
    client.execute_command("TWRITE", "big", "ENTRIES", *["t", "v"] * 50)
    client.execute_command("TWRITE", "small", "t", "v")
    done = run_cli(server, "--bigkeys")
    assert done.returncode == 0, done.stderr
    assert b"2 tstreams" in done.stdout


@pytest.mark.parametrize("args,expect", [
    (["--stat", "-i", "0.2"], b"keys"),
    (["--latency-history", "-i", "1"], b"min:"),
    (["--latency"], b"min:"),
])
def test_redis_cli_stat_and_latency_run(server, args, expect):
    """These tools print to a terminal until interrupted: run them on a pty for a second."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([redis_cli_path(), "-p", str(server.port), *args], stdout=slave,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    os.close(slave)
    try:
        proc.wait(1.5)
    except subprocess.TimeoutExpired:
        # SIGTERM, not SIGINT: a shell without job control starts background jobs
        # with SIGINT ignored, and children inherit that (CI may run so).
        proc.terminate()
        proc.wait(10)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert b"ERR" not in out, out
    assert expect in out, out


def test_server_process_fixture_is_usable(tmp_path):
    # A dedicated server with a config file naming databases 1 starts fine.
    (tmp_path / "ok.conf").write_text("databases 1\n")
    proc = ServerProcess(tmp_path, str(tmp_path / "ok.conf")).start()
    try:
        assert proc.client().ping()
    finally:
        proc.stop()


# --- maxmemory ---------------------------------------------------------------------------


def wait_until(predicate, timeout: float = 5.0) -> None:
    import time
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_over_maxmemory_writes_that_add_data_are_refused_and_the_rest_go_on(make_server):
    proc = make_server("--save", "")
    client = proc.client()
    client.execute_command("TWRITE", "k", "t", "a")
    client.execute_command("TWRITE", "k", "t", "b")
    client.execute_command("TREAD", "k", 1, 1, "GROUP", "g", "RETRY", 60000, 120000)
    client.config_set("maxmemory", "1mb")  # the process's RSS is far over it
    info = client.info("memory")
    assert info["maxmemory"] == 1024 * 1024 and info["maxmemory_policy"] == "noeviction"
    with socket.create_connection(("127.0.0.1", proc.port), timeout=5) as sock:  # Redis's exact text
        sock.sendall(b"TWRITE k t c\r\n")
        assert read_until_quiet(sock) == b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        client.execute_command("BATCH", "k", "b1", 1, "subj", "data", "COMMIT")
    # reads, and the writes that free memory, go on
    assert len(client.execute_command("TREAD", "k", 1, 10)) == 2
    assert client.execute_command("TACK", "k", "g", 1) == 1
    assert client.execute_command("TEVICT", "k", 1) >= 0
    assert client.delete("k") == 1
    # a transaction holding a refused write is discarded
    client.execute_command("MULTI")
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        client.execute_command("TWRITE", "k", "t", "c")
    with pytest.raises(redis.exceptions.ExecAbortError):
        client.execute_command("EXEC")
    client.config_set("maxmemory", "0")
    assert client.execute_command("TWRITE", "k", "t", "c") == 1


def test_maxmemory_from_the_command_line_is_checked_by_housekeeping(make_server):
    proc = make_server("--save", "", "--maxmemory", "2mb")
    client = proc.client()

    def refused() -> bool:
        try:
            client.execute_command("TWRITE", "k", "t", "v")
            return False
        except redis.exceptions.OutOfMemoryError:
            return True

    wait_until(refused)
    assert client.config_get("maxmemory") == {"maxmemory": str(2 * 1024 * 1024)}


def test_maxmemory_policy_other_than_noeviction_is_refused(r):
    with pytest.raises(redis.ResponseError, match="only noeviction"):
        r.config_set("maxmemory-policy", "allkeys-lru")
    assert r.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    r.config_set("maxmemory-policy", "noeviction")
