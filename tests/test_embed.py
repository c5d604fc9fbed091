"""The embedding API (server/embed.py): a server on the host's event loop, and in a
background thread; the same start/serve/shutdown code as tstream-server."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis
import redis.asyncio

from tstream.persistence.framing import PersistenceError
from tstream.server.config import ConfigError
from tstream.server.embed import EmbeddedServer, ServerThread, make_config, tstream_server

ROOT = Path(__file__).resolve().parent.parent


def no_retry_async():
    """redis-py 8 retries a failed command 3 times with backoff: not against a
    server that is meant to have gone."""
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    return Retry(NoBackoff(), 0)


def no_retry():
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    return Retry(NoBackoff(), 0)


async def test_async_context_manager_serves_and_saves(tmp_path):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    async with tstream_server(port=0, dir=tmp_path) as srv:
        assert srv.port > 0 and srv.running
        assert srv.url == f"redis://127.0.0.1:{srv.port}"
        # no signal handler installed: the host program owns signals
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
        r = redis.asyncio.Redis(port=srv.port, protocol=3)
        assert await r.execute_command("TWRITE", "k", "t", "v") == 1
        info = await r.info("server")
        assert info["tcp_port"] == srv.port
        await r.aclose()
    assert not srv.running
    assert (tmp_path / "dump.tsr").exists()  # the final snapshot, as on SIGTERM
    # a new server loads it
    async with tstream_server(port=0, dir=tmp_path, save="") as again:
        r = redis.asyncio.Redis(port=again.port)
        assert await r.execute_command("TREAD", "k", "-", 10) == [[1, b"t", b"v"]]
        await r.aclose()


async def test_append_only_file_flushed_on_exit(tmp_path):
    async with tstream_server(port=0, dir=tmp_path, save="", appendonly=True, appendfsync="no") as srv:
        r = redis.asyncio.Redis(port=srv.port)
        for i in range(100):
            await r.execute_command("TWRITE", "k", "t", str(i))
        await r.aclose()
    assert not (tmp_path / "dump.tsr").exists()  # no save points: no snapshot
    assert (tmp_path / "appendonlydir").is_dir()
    async with tstream_server(port=0, dir=tmp_path, save="", appendonly=True) as srv:
        r = redis.asyncio.Redis(port=srv.port)
        assert (await r.execute_command("TREAD", "k", "$", 0, "WITHINFO")) == [[1, 100]]
        await r.aclose()


async def test_stop_choices_and_blocked_clients(tmp_path):
    srv = EmbeddedServer(port=0, dir=tmp_path, save=[(3600, 1)])
    await srv.start()
    r = redis.asyncio.Redis(port=srv.port, socket_timeout=10, retry=no_retry_async())
    await r.execute_command("TWRITE", "k", "t", "v")
    blocked = asyncio.create_task(r.execute_command("TREAD", "k", "$", 1, "BLOCK", 0))
    await asyncio.sleep(0.1)
    await srv.stop(save=False)  # the snapshot skipped despite the save point
    assert not (tmp_path / "dump.tsr").exists()
    with pytest.raises(redis.ConnectionError):
        await blocked  # released by the shutdown, not left hanging
    await srv.stop()  # twice: nothing more
    await r.aclose()
    with pytest.raises(RuntimeError):
        await srv.start()


async def test_shutdown_command_stops_embedded_server(tmp_path):
    async with tstream_server(port=0, dir=tmp_path, save="") as srv:
        r = redis.asyncio.Redis(port=srv.port, retry=no_retry_async())
        with pytest.raises(redis.ConnectionError):
            await r.execute_command("SHUTDOWN", "SAVE")
        await asyncio.wait_for(srv.wait_closed(), 10)
        assert not srv.running
        await r.aclose()
    assert (tmp_path / "dump.tsr").exists()


async def test_two_servers_on_one_loop(tmp_path):
    async with tstream_server(port=0, dir=tmp_path / "a", save="") as a, \
            tstream_server(port=0, dir=tmp_path / "b", save="") as b:
        assert a.port != b.port
        ra, rb = redis.asyncio.Redis(port=a.port), redis.asyncio.Redis(port=b.port)
        await ra.execute_command("TWRITE", "k", "t", "a")
        assert await rb.exists("k") == 0
        await ra.aclose()
        await rb.aclose()


def test_options():
    config = make_config(port=0, dir=Path("/tmp/x"), appendonly=True, group_max_pending=5,
                         save=[(60, 10), (300, 1)], requirepass=None)
    assert config["port"] == 0 and config["dir"] == "/tmp/x" and config["appendonly"] is True
    assert config["group-max-pending"] == 5 and config["save"] == [(60, 10), (300, 1)]
    assert config["requirepass"] == ""
    with pytest.raises(ConfigError):
        make_config(no_such_option=1)
    with pytest.raises(ConfigError):
        make_config(port="many")


def test_config_file(tmp_path):
    path = tmp_path / "t.conf"
    path.write_text("port 7777\nnode-entries 10\n")
    config = make_config(config_file=str(path), port=0)
    assert config["port"] == 0 and config["node-entries"] == 10


def test_server_thread(tmp_path):
    with ServerThread(port=0, dir=tmp_path) as srv:
        assert srv.running and srv.port > 0
        r = redis.Redis(port=srv.port, protocol=3)
        assert r.execute_command("TWRITE", "k", "t", "v") == 1
        assert r.ping()
        assert srv.call(lambda: len(srv.server.keyspace)) == 1
        r.close()
    assert not srv.running
    assert (tmp_path / "dump.tsr").exists()
    srv.stop()  # again: nothing
    with ServerThread(port=0, dir=tmp_path, use_uvloop=False) as again:
        r = redis.Redis(port=again.port)
        assert r.execute_command("TREAD", "k", "-", 10) == [[1, b"t", b"v"]]
        assert r.info("server")["multiplexing_api"] == "asyncio"
        r.close()
        again.stop(save=False)
    assert threading.active_count() < 50


def test_server_thread_shutdown_command(tmp_path):
    srv = ServerThread(port=0, dir=tmp_path, save="").start()
    r = redis.Redis(port=srv.port, retry=no_retry())
    with pytest.raises(redis.ConnectionError):
        r.execute_command("SHUTDOWN")
    srv._thread.join(10)
    assert not srv.running
    srv.stop()
    r.close()


def test_server_thread_start_errors(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        with pytest.raises(OSError):
            ServerThread(port=busy, dir=tmp_path, save="").start()
    (tmp_path / "dump.tsr").write_bytes(b"not a snapshot")
    with pytest.raises(PersistenceError):
        ServerThread(port=0, dir=tmp_path).start()
    assert (tmp_path / "dump.tsr").read_bytes() == b"not a snapshot"  # nothing changed


def test_cli_still_starts_and_stops(tmp_path):
    """tstream-server runs the same open_server/serve code: SIGTERM saves, exits 0."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tstream.server", "--port", str(port), "--dir", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        r = _wait(port)
        r.execute_command("TWRITE", "k", "t", "v")
        r.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=20)[0].decode()
    assert proc.returncode == 0, out
    assert "ready to accept connections" in out and "bye bye" in out
    assert (tmp_path / "dump.tsr").exists()


def test_example_runs():
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "embedded.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "acknowledged 3" in done.stdout and "orders: 3 entries" in done.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(port: int) -> redis.Redis:
    import time

    deadline = time.monotonic() + 15
    while True:
        try:
            r = redis.Redis(port=port, socket_timeout=5)
            r.ping()
            return r
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
