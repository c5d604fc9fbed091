"""Fixtures: a real tstream-server process on a free loopback port, and clients for it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """A tstream-server subprocess; ``start`` waits until it answers PING."""

    def __init__(self, directory: Path, *args: str) -> None:
        self.dir = directory
        self.args = list(args)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = directory / "server.log"

    def start(self, *extra: str, wait: bool = True) -> "ServerProcess":
        args = [*self.args, *extra]
        config_file = [args.pop(0)] if args and not args[0].startswith("--") else []
        command = [sys.executable, "-m", "tstream.server", *config_file, "--port", str(self.port),
                   "--dir", str(self.dir), *args]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(command, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith((b"+PONG", b"-NOAUTH")):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"server did not start:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def client(self, **kwargs) -> redis.Redis:
        kwargs.setdefault("socket_timeout", 10)
        return redis.Redis(port=self.port, **kwargs)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> int:
        return self.stop(signal.SIGKILL)


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory):
    """One server for the many tests that only need a clean keyspace."""
    server = ServerProcess(tmp_path_factory.mktemp("shared"), "--save", "").start()
    yield server
    server.stop()


@pytest.fixture
def server(shared_server):
    shared_server.client().flushall()
    return shared_server


@pytest.fixture
def make_server(tmp_path):
    """Start dedicated servers (own directory, own options); all stopped at teardown."""
    started = []

    def make(*args: str, directory: Path | None = None, start: bool = True) -> ServerProcess:
        proc = ServerProcess(directory or tmp_path, *args)
        started.append(proc)
        return proc.start() if start else proc

    yield make
    for proc in started:
        proc.stop()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def r(server, request):
    """A redis-py client speaking RESP2 or RESP3."""
    client = server.client(protocol=request.param)
    yield client
    client.close()


@pytest.fixture
def r2(server):
    client = server.client(protocol=2)
    yield client
    client.close()


@pytest.fixture
def r3(server):
    client = server.client(protocol=3)
    yield client
    client.close()


def wait_for_pong(proc: subprocess.Popen, port: int, what: str, timeout: float = 15) -> None:
    """Wait until the server ``proc`` started answers PING on ``port``; the test fails
    (and the process is killed) if it exits or ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                if sock.recv(16) == b"+PONG\r\n":
                    return
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"{what} did not start")
        time.sleep(0.05)


def read_until_quiet(sock: socket.socket, wait: float = 0.3) -> bytes:
    """Everything the server sends before going quiet for ``wait`` s; ends with <closed> if it closed."""
    sock.settimeout(wait)
    chunks = []
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                chunks.append(b"<closed>")
                break
            chunks.append(data)
    except (socket.timeout, ConnectionResetError):
        pass
    return b"".join(chunks)


def raw_exchange(port: int, payload: bytes, wait: float = 0.3) -> bytes:
    """Send bytes on a fresh socket and return what comes back before it goes quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload)
        return read_until_quiet(sock, wait)


def redis_cli_path() -> str:
    path = shutil.which("redis-cli")
    if path is None:
        pytest.fail("redis-cli is not installed (apt-get install -y redis-tools)")
    return path


@pytest.fixture
def cli(server):
    """Run redis-cli against the server: cli("TWRITE", "k", "a", "b") -> stdout text."""
    path = redis_cli_path()

    def run(*args: str, stdin: str | None = None, raw: bool = False) -> str:
        command = [path, "-p", str(server.port), "--raw" if raw else "--no-raw", *args]
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=30,
                              env={**os.environ, "REDISCLI_HISTFILE": "/dev/null"})
        return done.stdout

    return run


@pytest.fixture(scope="module")
def redis_oracle(tmp_path_factory):
    """A redis-server of its own (no persistence): the oracle where tstream copies Redis.
    Yields its port."""
    path = shutil.which("redis-server")
    if path is None:
        pytest.fail("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    proc = subprocess.Popen([path, "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path_factory.mktemp("redis"))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_pong(proc, port, "redis-server")
    yield port
    proc.terminate()
    proc.wait(10)
