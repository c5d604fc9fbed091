"""Shared helpers of the benchmark scripts: servers, a raw RESP client, machine facts, results.

Every benchmark starts its own tstream-server and redis-server on free loopback ports, in
temporary directories, with persistence off, and stops them when it ends, also on an error,
Ctrl-C or SIGTERM (and, through PR_SET_PDEATHSIG, if the benchmark process itself dies).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hiredis

from tstream.client.types import as_map  # noqa: F401  (the scripts import it from here)

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
# Where a run writes its results (*.json) and reports (RESULTS*.md): bench/runs/, ignored
# by git, unless TSTREAM_BENCH_OUT names another directory.  The committed results
# change only when asked: TSTREAM_BENCH_OUT=bench (bench/run_all.sh --out bench).
OUT_DIR = Path(os.environ.get("TSTREAM_BENCH_OUT") or BENCH_DIR / "runs").resolve()
RESULTS_DIR = OUT_DIR / "results"
TSTREAM_SERVER = os.environ.get("TSTREAM_SERVER") or str(Path(sys.executable).parent / "tstream-server")
REDIS_SERVER = os.environ.get("REDIS_SERVER") or shutil.which("redis-server") or "redis-server"
REDIS_BENCHMARK = os.environ.get("REDIS_BENCHMARK") or shutil.which("redis-benchmark") or "redis-benchmark"


# --- process hygiene -----------------------------------------------------------------

def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when this benchmark process dies, however it dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def sigterm_as_exit() -> None:
    """Turn SIGTERM/SIGHUP into SystemExit so that every ``finally`` stops the servers."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- a small RESP client --------------------------------------------------------------

def _arg(a) -> bytes:
    if isinstance(a, bytes):
        return a
    if isinstance(a, str):
        return a.encode()
    return str(a).encode()


def encode(*args) -> bytes:
    """One command as a RESP multibulk array."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = _arg(a)
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


class ReplyError(Exception):
    pass


class Client:
    """A blocking RESP2 client on a plain socket, hiredis for the replies: as little
    client overhead as Python allows, and explicit pipelining (send, then read N)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 300.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_reply(self, check: bool = True):
        reader = self.reader
        while True:
            reply = reader.gets()
            if reply is not False:
                break
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("server closed the connection")
            reader.feed(chunk)
        if check and isinstance(reply, hiredis.ReplyError):
            raise ReplyError(str(reply))
        return reply

    def read_replies(self, n: int, check: bool = True) -> list:
        return [self.read_reply(check) for _ in range(n)]

    def execute(self, *args):
        self.send(encode(*args))
        return self.read_reply()

    def info(self, section: str = "") -> dict[str, str]:
        raw = self.execute("INFO", section) if section else self.execute("INFO")
        out = {}
        for line in raw.decode(errors="replace").splitlines():
            if ":" in line and not line.startswith("#"):
                k, _, v = line.partition(":")
                out[k] = v
        return out


# --- servers --------------------------------------------------------------------------

class ServerProcess:
    """A tstream-server or redis-server child on a free loopback port in a temp dir."""

    def __init__(self, kind: str, extra: list[str] | None = None) -> None:
        assert kind in ("tstream", "redis", "ceiling")
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix=f"bench-{kind}-")
        self.port = free_port()
        self.log_path = os.path.join(self.dir, "server.log")
        if kind == "tstream":
            self.argv = [TSTREAM_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                         "--dir", self.dir, "--save", "", "--appendonly", "no", *(extra or [])]
        elif kind == "ceiling":  # bench/ceiling_server.py: uvloop + hiredis, no tstream
            self.argv = [sys.executable, str(REPO / "bench" / "ceiling_server.py"), str(self.port), *(extra or [])]
        else:
            self.argv = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                         "--dir", self.dir, "--save", "", "--appendonly", "no",
                         "--daemonize", "no", *(extra or [])]
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def command_line(self) -> str:
        return shlex.join(self.argv)

    def start(self, timeout: float = 30.0) -> "ServerProcess":
        self._log = open(self.log_path, "wb")
        env = dict(os.environ)
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, cwd=self.dir, env=env,
                                     preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode} at start:\n"
                                   f"{self.log_tail()}")
            try:
                c = Client(self.port, timeout=5)
                try:
                    if c.execute("PING") in (b"PONG", "PONG"):
                        return self
                finally:
                    c.close()
            except (OSError, ReplyError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.kind} did not answer PING in {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def client(self, **kw) -> Client:
        return Client(self.port, **kw)

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def log_tail(self, n: int = 30) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if getattr(self, "_log", None):
            self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def servers(*specs):
    """``with servers(("tstream", [...]), ("redis", [])) as (t, r):`` started, always stopped."""
    with contextlib.ExitStack() as stack:
        started = []
        for kind, extra in specs:
            s = ServerProcess(kind, extra)
            stack.callback(s.stop)
            s.start()
            started.append(s)
        try:
            yield started
        except BaseException:
            for s in started:
                tail = s.log_tail() if s.kind == "tstream" or s.proc.poll() is not None else ""
                if tail:
                    print(f"--- last lines of the {s.kind} server's log:\n{tail}", file=sys.stderr)
            raise


# --- facts and results ----------------------------------------------------------------

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def loadavg() -> str:
    """/proc/loadavg's 1, 5 and 15 minute figures: other work on the machine skews the numbers."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def _git(*args) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_facts(tstream: ServerProcess | None = None, redis: ServerProcess | None = None) -> dict:
    facts = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "git_commit": _git("rev-parse", "--short", "HEAD") or "(none)",
        "git_dirty": bool(_git("status", "--porcelain")),
        "loadavg_at_start": loadavg(),
    }
    try:
        import uvloop  # noqa: F401
        facts["uvloop_installed"] = True
    except ImportError:
        facts["uvloop_installed"] = False
    if tstream is not None:
        c = tstream.client()
        try:
            info = c.info("server")
        finally:
            c.close()
        facts["tstream_version"] = info.get("redis_version") or info.get("tstream_version", "")
        facts["tstream_multiplexing_api"] = info.get("multiplexing_api", "?")
    if redis is not None:
        c = redis.client()
        try:
            info = c.info("server")
        finally:
            c.close()
        facts["redis_version"] = info.get("redis_version", "")
        facts["redis_multiplexing_api"] = info.get("multiplexing_api", "?")
    return facts


def save_result(name: str, result: dict) -> Path:
    result.setdefault("loadavg_at_end", loadavg())
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return path


def script_command() -> str:
    """How this script was invoked, relative to the repo root, for the results file."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), REPO)
    py = os.path.relpath(sys.executable, REPO) if sys.executable.startswith(str(REPO)) else sys.executable
    return shlex.join([py, script, *sys.argv[1:]])


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, int(round(p / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


median = statistics.median


def in_probe_process(target, port: int, count: int = 0, during=None):
    """Run ``target(port, stop, count, sender, ready)`` in a process of its own (a
    probe: a thread of the benchmark would share its GIL with the benchmark's other
    threads and read replies late) and return what it sends back: its probes while
    ``during()`` runs (from 0.2 s after it is ready), or ``count`` of them."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    stop, ready = context.Event(), context.Event()
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=target, args=(port, stop, count, sender, ready))
    process.start()
    try:
        if during is not None:
            ready.wait(60)  # (the process started and probing)
            time.sleep(0.2)
            during()
            stop.set()
        return receiver.recv()
    finally:
        stop.set()
        process.join()
