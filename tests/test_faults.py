"""Fault injection: every persistence step that can fail, failed once, under real load.

Two ways of making the disk fail:

- a real one where the test can make it: a tiny tmpfs for ENOSPC (``mount -t
  tmpfs -o size=...``, grown back with ``remount,size=...``) and ``remount,ro``
  for EROFS (we run as root: a read-only *directory* would not stop us);
- the seam for the rest: ``FaultyFileOps`` (a ``persistence.fileops.FileOps``
  that fails one chosen operation of one chosen step once), handed to a
  server process started by this module's launcher (``python -m
  tests.test_faults SPEC [server options]``), or to an ``AppendOnlyFile`` in
  the unit tests; MemoryError is injected where the engine allocates.

What is checked, for every step: no acknowledged write is lost, no client ever
gets another client's data (every reply has the expected shape and value), the
files load after a restart (and after a SIGKILL once the server recovered), and
``tstream-check`` agrees with the server.  The load-driven suite is marked
``slow`` (``pytest -m slow``); the default part is fast.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from tstream.engine import Keyspace
from tstream.engine.node import ActiveNode, SealedNode
from tstream.engine.stream import Stream
from tstream.persistence import aof, effects, snapshot
from tstream.persistence.check import check_aof
from tstream.persistence.fileops import FileOps
from tstream.persistence.framing import CorruptFile, TornTail, iter_frames, pack

from .conftest import ROOT, ServerProcess

MISCONF_AOF_ENOSPC = "MISCONF Errors writing to the AOF file: No space left on device"


# --- the seam ---------------------------------------------------------------------------


class FaultyFileOps(FileOps):
    """Fails the ``nth`` call of operation ``op`` during step ``step`` once, with ``error``.

    A failing ``write`` first writes half of what it was given (a short write,
    as a filling disk does) and fails on the next call."""

    def __init__(self, op: str, step: str, nth: int = 1, error: int = errno.ENOSPC) -> None:
        self.op, self.step, self.nth, self.error = op, step, nth, error
        self.calls = 0
        self.fired = False
        self._fail_next_write = False
        self._lock = threading.Lock()

    @classmethod
    def parse(cls, spec: str) -> "FaultyFileOps":
        """``op:step:nth:ERRNAME`` as given to the launcher."""
        op, step, nth, name = spec.split(":")
        return cls(op, step, int(nth), getattr(errno, name))

    def _hit(self, op: str, step: str) -> bool:
        with self._lock:
            if self.fired or op != self.op or step != self.step:
                return False
            self.calls += 1
            if self.calls < self.nth:
                return False
            self.fired = True
            logging.getLogger("tstream.faults").warning("injected fault: %s during %s", op, step)
            return True

    def _fail(self) -> None:
        raise OSError(self.error, os.strerror(self.error))

    def open(self, path, flags, mode=0o644, step="open"):
        if self._hit("open", step):
            self._fail()
        return super().open(path, flags, mode, step)

    def write(self, fd, data, step="write"):
        if self._fail_next_write and step == self.step:
            self._fail_next_write = False
            self._fail()
        if self._hit("write", step):
            if len(data) > 1:
                self._fail_next_write = True
                return super().write(fd, memoryview(data)[: len(data) // 2], step)
            self._fail()
        return super().write(fd, data, step)

    def fsync(self, fd, step="fsync"):
        if self._hit("fsync", step):
            self._fail()
        return super().fsync(fd, step)

    def rename(self, source, target, step="rename"):
        if self._hit("rename", step):
            self._fail()
        return super().rename(source, target, step)


def _serve_with_faults(argv: list[str]) -> int:
    """The launcher: tstream-server with a FaultyFileOps (first argument: its spec)."""
    from tstream.server import main as server_main
    from tstream.server.app import Server

    config, config_file = server_main.parse_command_line(argv[1:])
    server_main.setup_logging(config)
    server = Server(config, config_file)
    if argv[0].startswith("memory:"):
        _inject_memory_error(argv[0])
    else:
        server.persistence.file_ops = FaultyFileOps.parse(argv[0])
    with asyncio.Runner(loop_factory=server_main.new_event_loop) as runner:
        return runner.run(server_main.run(server))


def _inject_memory_error(spec: str) -> None:
    """``memory:seal:nth`` / ``memory:pack:nth``: the nth sealing of a node, or the
    nth packing of an AOF record, raises MemoryError once (in this launcher
    process only: it replaces the function where it is called from)."""
    _, where, nth = spec.split(":")
    owner, name = {"seal": (ActiveNode, "seal"), "pack": (aof.Packer, "__call__")}[where]
    real = getattr(owner, name)
    calls = [0]

    def failing_once(*args, **kwargs):
        calls[0] += 1
        if calls[0] == int(nth):
            logging.getLogger("tstream.faults").warning("injected fault: MemoryError in %s", where)
            raise MemoryError
        return real(*args, **kwargs)

    setattr(owner, name, failing_once)


class FaultyServer(ServerProcess):
    """A ServerProcess started through the launcher, with one fault armed."""

    LAUNCHER = "tests.test_faults"  # (the module whose __main__ arms the fault and runs the server)

    def __init__(self, directory: Path, spec: str, *args: str) -> None:
        super().__init__(directory, *args)
        self.spec = spec

    def start(self, *extra: str, wait: bool = True) -> "FaultyServer":
        command = [sys.executable, "-m", self.LAUNCHER, self.spec, "--port", str(self.port),
                   "--dir", str(self.dir), *self.args, *extra]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(command, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()
        return self


def _write_accepted(client: redis.Redis) -> bool:
    """TWRITE k t c went through (MISCONF meanwhile)."""
    try:
        client.execute_command("TWRITE", "k", "t", "c")
        return True
    except redis.ResponseError as exc:
        assert str(exc).startswith("MISCONF") or "MISCONF" in repr(exc), exc
        return False


def run_check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tstream.persistence.check", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def info(client: redis.Redis) -> dict:
    return client.info("persistence")


def wait_for(predicate, what: str, timeout: float = 20.0):
    """Poll until ``predicate()`` is truthy (a wait, not a timed assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"gave up waiting: {what}")


# --- mounts -------------------------------------------------------------------------------


class Tmpfs:
    """A small tmpfs mounted for one test (unmounted at teardown)."""

    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here (needs root and mount rights): {done.stderr.strip()}")

    def inodes_used(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_files - stat.f_ffree

    def remount(self, options: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{options}", str(self.path)], check=True)

    def fill(self) -> Path:
        """Fill the file system up; returns the filler (delete it to free space)."""
        filler = self.path / "filler"
        with open(filler, "wb", buffering=0) as handle:
            try:
                while True:
                    handle.write(b"\0" * 4096)
            except OSError:
                pass
        return filler

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


@pytest.fixture
def tmpfs(tmp_path):
    mounted = []

    def make(size: str = "4m") -> Tmpfs:
        mount = Tmpfs(tmp_path / f"mnt{len(mounted)}", size)
        mounted.append(mount)
        return mount

    yield make
    for mount in mounted:
        mount.unmount()


# --- writers that check every reply ---------------------------------------------------


class Writers:
    """Clients writing to their own keys over TCP, reconnecting every few commands (so
    new sockets keep taking fresh file descriptors), checking every reply: a TWRITE
    answers the next offset of the client's own key or a MISCONF error, a TREAD of
    its own key returns its own payloads.  Anything else fails the test."""

    def __init__(self, port: int, count: int = 3, seeded: dict[str, list[bytes]] | None = None) -> None:
        self.port = port
        self.count = count
        self.acked: dict[str, list[bytes]] = {f"w{n}": list((seeded or {}).get(f"w{n}", [])) for n in range(count)}
        self.misconf = 0
        self.problems: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(f"w{n}",)) for n in range(count)]

    def __enter__(self) -> "Writers":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def _run(self, key: str) -> None:
        acked = self.acked[key]
        i = 0
        client = None
        try:
            while not self.stop.is_set():
                if client is None or i % 20 == 0:
                    if client is not None:
                        client.close()
                    client = redis.Redis(port=self.port, socket_timeout=10)
                payload = f"{key}-{i}-".encode() + b"x" * (i % 7 * 50)
                i += 1
                try:
                    reply = client.execute_command("TWRITE", key, "t", payload)
                except redis.ResponseError as exc:
                    if str(exc).startswith("MISCONF"):
                        self.misconf += 1
                        time.sleep(0.01)
                        continue
                    self.problems.append(f"{key}: unexpected error {exc}")
                    return
                if reply != len(acked) + 1:
                    self.problems.append(f"{key}: TWRITE replied {reply!r}, expected {len(acked) + 1}")
                    return
                acked.append(payload)
                if i % 10 == 0:
                    got = client.execute_command("TREAD", key, max(1, len(acked) - 3), 4)
                    want = list(range(max(1, len(acked) - 3), len(acked) + 1))
                    if [e[0] for e in got] != want or [e[2] for e in got] != acked[want[0] - 1:]:
                        self.problems.append(f"{key}: TREAD returned {got!r}")
                        return
        except (redis.ConnectionError, redis.TimeoutError):
            pass  # the server went away (an exit with appendfsync always): nothing acked after
        except Exception as exc:  # a reply that does not even parse: someone else's bytes
            self.problems.append(f"{key}: {type(exc).__name__}: {exc}")
        finally:
            if client is not None:
                client.close()

    def total(self) -> int:
        return sum(map(len, self.acked.values()))


def assert_everything_acked_is_there(client: redis.Redis, acked: dict[str, list[bytes]]) -> None:
    for key, payloads in acked.items():
        if not payloads:
            continue
        got = client.execute_command("TREAD", key, 1, len(payloads) + 10)
        assert [e[2] for e in got[: len(payloads)]] == payloads, f"acknowledged writes of {key} lost or changed"


def restart_and_verify(proc: ServerProcess, acked: dict[str, list[bytes]], aof_dir: Path) -> None:
    """SIGKILL the server (if it runs), then: files load, acknowledged writes are all
    there, tstream-check agrees; then once more after a SIGKILL of the recovered
    server.  (Starting it while the old process still ran would test that process.)"""
    proc.kill()
    for _ in range(2):
        proc.start()
        client = proc.client()
        assert_everything_acked_is_there(client, acked)
        client.execute_command("TWRITE", "after-restart", "t", "x")
        client.close()
        proc.kill()
        done = run_check(aof_dir)
        assert done.returncode == 0, done.stdout + done.stderr


# --- fast unit tests: framing, manifest, the AOF writer with a faulty seam ----------------


class TestTornTailIsToldByItsOwnHeader:
    def test_a_torn_record_whose_data_holds_a_valid_frame_is_a_torn_tail(self, tmp_path):
        planted = pack([effects.APPEND, b"k", 2, 2, b"t", b"planted"])  # a client's payload
        good = pack([effects.CREATE, b"k", 10]) + pack([effects.APPEND, b"k", 1, 1, b"t", b"a"])
        last = pack([effects.APPEND, b"k", 2, 2, b"t", b"<" + planted + b">" * 50])
        cut = last.index(planted) + len(planted) + 3  # the crash tore the record after the planted frame
        with pytest.raises(TornTail) as torn:
            list(iter_frames(good + last[:cut]))
        assert torn.value.offset == len(good)
        directory = tmp_path / "aof"
        directory.mkdir()
        (directory / aof.incr_name(1)).write_bytes(good + last[:cut])
        aof.write_manifest(str(directory), [aof.ManifestEntry(aof.incr_name(1), 1, "i")])
        result = aof.load(str(directory))  # the server starts (aof-load-truncated yes)
        assert result.truncated_at == (str(directory / aof.incr_name(1)), len(good))
        assert result.keyspace.get(b"k").read(1, 5) == [[1, b"t", b"a"]]

    def test_damage_is_still_damage(self):
        records = [pack([effects.APPEND, b"k", i, i, b"t", b"v" * 40]) for i in range(1, 6)]
        data = bytearray(b"".join(records))
        data[len(records[0]) + 3] ^= 0x10  # a length byte of the second record
        with pytest.raises(CorruptFile):
            list(iter_frames(bytes(data)))
        cut_short = b"".join(records[:2]) + records[2][:20] + b"".join(records[3:])
        with pytest.raises(CorruptFile):  # a short record with records after it: checksum
            list(iter_frames(cut_short))


class TestManifest:
    def test_non_utf8_manifest_is_a_clear_error(self, tmp_path):
        (tmp_path / aof.MANIFEST).write_bytes(b"file appendonly.aof.1.incr.aof seq 1 type i\n\xff\xfe\n")
        with pytest.raises(CorruptFile, match="not UTF-8"):
            aof.read_manifest(str(tmp_path))
        ok, lines = check_aof(str(tmp_path), False, lambda q: False)
        assert not ok and lines[0].startswith("BAD") and "not UTF-8" in lines[0]
        done = run_check(tmp_path)
        assert done.returncode == 1 and "Traceback" not in done.stderr and "not UTF-8" in done.stdout


def make_aof(directory: Path, ops: FileOps) -> aof.AppendOnlyFile:
    """A fresh AOF history (base 1 + incr 1) with one record, open for writing."""
    directory.mkdir(exist_ok=True)
    file = aof.AppendOnlyFile(str(directory), "always", ops)
    seq = file.begin_rewrite()
    keyspace = Keyspace()
    file.finish_rewrite(seq, snapshot.write(snapshot.capture(keyspace), str(directory / aof.base_name(seq))))
    file.log([effects.CREATE, b"k", 10])
    file.write_buffer()
    return file


def replayed(directory: Path) -> list:
    result = aof.load(str(directory), truncate_torn_tail=False)
    stream = result.keyspace.get(b"k")
    return [e[2] for e in stream.read(1, 100)] if stream else []


class TestAofWriterUnderFaults:
    def append(self, file: aof.AppendOnlyFile, n: int, payload: bytes) -> None:
        file.log([effects.APPEND, b"k", n, n, b"t", payload])

    def test_failed_open_of_the_new_incr_file_keeps_the_old_one(self, tmp_path):
        ops = FaultyFileOps("open", "open-incr", 1, errno.EROFS)
        file = make_aof(tmp_path, FileOps())
        file.ops = ops
        old_fd = file.fd
        with pytest.raises(OSError):
            file.begin_rewrite()
        assert file.fd == old_fd and os.fstat(old_fd)  # still open, still ours
        self.append(file, 1, b"after")
        file.write_buffer()
        file.close()
        assert replayed(tmp_path) == [b"after"]

    @pytest.mark.parametrize("op", ["write", "fsync", "rename"])
    def test_failed_manifest_keeps_records_in_a_named_file(self, tmp_path, op):
        file = make_aof(tmp_path, FileOps())
        file.ops = FaultyFileOps(op, "manifest", 1)
        with pytest.raises(OSError):
            file.begin_rewrite()
        assert file.current.name == aof.incr_name(1)
        self.append(file, 1, b"kept")
        file.write_buffer()
        file.sync()
        file.close()
        assert replayed(tmp_path) == [b"kept"]
        assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())

    def test_failed_final_manifest_keeps_the_old_history(self, tmp_path):
        file = make_aof(tmp_path, FileOps())
        self.append(file, 1, b"one")
        seq = file.begin_rewrite()
        self.append(file, 2, b"two")
        file.write_buffer()
        file.ops = FaultyFileOps("rename", "manifest", 1)
        keyspace = aof.load(str(tmp_path)).keyspace
        size = snapshot.write(snapshot.capture(keyspace), str(tmp_path / aof.base_name(seq)))
        with pytest.raises(OSError):
            file.finish_rewrite(seq, size)
        self.append(file, 3, b"three")
        file.close()
        assert replayed(tmp_path) == [b"one", b"two", b"three"]

    def test_short_write_then_enospc_is_cut_back_kept_and_retried(self, tmp_path):
        file = make_aof(tmp_path, FileOps())
        file.ops = FaultyFileOps("write", "write", 1)
        good = os.path.getsize(tmp_path / aof.incr_name(1))
        self.append(file, 1, b"a" * 100)
        self.append(file, 2, b"b" * 100)
        with pytest.raises(OSError):
            file.write_buffer()
        assert os.path.getsize(tmp_path / aof.incr_name(1)) == good  # no partial record left
        assert file.write_errno == errno.ENOSPC and file.unwritten
        self.append(file, 3, b"c")  # logged while the disk was full
        file.write_buffer()  # the space is back
        assert file.write_errno == 0 and not file.unwritten
        file.close()
        assert replayed(tmp_path) == [b"a" * 100, b"b" * 100, b"c"]

    def test_short_write_that_cannot_be_truncated_is_completed(self, tmp_path):
        class NoTruncate(FaultyFileOps):
            def truncate(self, fd, size):
                raise OSError(errno.EIO, "truncate failed")

        file = make_aof(tmp_path, FileOps())
        file.ops = NoTruncate("write", "write", 1)
        self.append(file, 1, b"a" * 100)
        with pytest.raises(OSError):
            file.write_buffer()
        file.write_buffer()
        file.close()
        assert replayed(tmp_path) == [b"a" * 100]

    def test_an_idle_failed_rewrite_does_not_grow_the_manifest(self, tmp_path):
        file = make_aof(tmp_path, FileOps())
        self.append(file, 1, b"x")
        seq = file.begin_rewrite()  # its base is never written (say the disk is full)
        for _ in range(5):
            assert file.begin_rewrite() == seq  # nothing written since: the same incr file
        assert len(aof.read_manifest(str(tmp_path))) == 3
        file.close()


class TestStartupCleansUp:
    def test_stale_first_rewrite_and_temp_files(self, make_server, tmp_path):
        """CONFIG SET appendonly yes, then a crash during the first rewrite: its incr
        file stays behind with no manifest; a start with appendonly yes must not
        reopen it under the new base (every later restart would then fail)."""
        proc = make_server("--save", "")
        proc.client().execute_command("TWRITE", "k", "t", "one")
        proc.client().save()
        proc.kill()
        aof_dir = tmp_path / "appendonlydir"
        aof_dir.mkdir()
        stale = [pack([effects.CREATE, b"k", 1000]), pack([effects.APPEND, b"k", 1, 1, b"t", b"one"]),
                 pack([effects.APPEND, b"k", 2, 2, b"t", b"two"])]
        (aof_dir / aof.incr_name(1)).write_bytes(b"".join(stale))
        (tmp_path / "temp-1234-5678.tsr").write_bytes(b"x" * 1000)
        (aof_dir / "temp-1234-9999.tsr").write_bytes(b"x" * 1000)
        proc.start("--appendonly", "yes")
        client = proc.client()
        assert client.execute_command("TWRITE", "k", "t", "three") == 2
        proc.kill()
        assert not list(tmp_path.glob("temp-*")) and not list(aof_dir.glob("temp-*"))
        proc.start("--appendonly", "yes")
        assert [e[2] for e in proc.client().execute_command("TREAD", "k", 1, 10)] == [b"one", b"three"]
        assert run_check(aof_dir).returncode == 0


# --- MemoryError where the engine allocates ---------------------------------------------


class TestEngineAppendUnderMemoryError:
    def test_a_failed_table_append_stores_nothing(self):
        stream = Stream(node_entries=10)
        stream.append(b"t", b"first", 1)
        node = stream._active
        node.expand()  # a node of one entry keeps no tables (compact); the next test covers that form
        real = node.times

        class Times(type(real)):
            def append(self, value):
                raise MemoryError

        node.times = Times(real.typecode, real)
        with pytest.raises(MemoryError):
            stream.append(b"new-tag", b"second", 2)
        node.times = real
        stream._check()
        assert stream.next_offset == 2 and stream.read(1, 5) == [[1, b"t", b"first"]]
        assert stream.append(b"t", b"second", 3) == 2
        stream._check()

    def test_a_failed_seal_keeps_the_entry_and_seals_later(self, monkeypatch):
        stream = Stream(node_entries=4)
        real_seal = ActiveNode.seal
        calls = []

        def seal_once_fails(self, *args, **kwargs):
            calls.append(1)
            if len(calls) == 1:
                raise MemoryError
            return real_seal(self, *args, **kwargs)

        monkeypatch.setattr(ActiveNode, "seal", seal_once_fails)
        offsets = [stream.append(b"t", b"v%d" % i, i) for i in range(1, 5)]  # the 4th seals: fails
        assert offsets == [1, 2, 3, 4]
        assert offsets + [stream.append_many([b"t", b"v5", b"t", b"v6"], 9)] == [1, 2, 3, 4, 5]
        stream._check()
        assert [e[2] for e in stream.read(1, 10)] == [b"v1", b"v2", b"v3", b"v4", b"v5", b"v6"]
        assert stream.node_list()[0].sealed

    def test_a_failed_expand_of_a_compact_node_stores_nothing(self, monkeypatch):
        stream = Stream(node_entries=10)
        stream.append(b"t", b"first", 1)  # a compact node: no tables until the second entry

        def no_memory(self, first_len=None):
            raise MemoryError

        monkeypatch.setattr(ActiveNode, "expand", no_memory)
        with pytest.raises(MemoryError):
            stream.append(b"new-tag", b"second", 2)
        monkeypatch.undo()
        stream._check()
        assert stream.next_offset == 2 and stream.read(1, 5) == [[1, b"t", b"first"]]
        assert stream.tag_count() == 1  # the new tag is forgotten
        assert stream.append(b"t", b"second", 3) == 2
        stream._check()

    def test_a_seal_failing_at_its_last_step_leaves_the_node_active_and_whole(self, monkeypatch):
        """The sealed node is built aside; the active one is spent only once
        every allocation succeeded."""
        stream = Stream(node_entries=4)
        for i in range(1, 4):
            stream.append(b"t", b"v%d" % i, i)
        calls = []

        def no_memory(self):
            calls.append(1)
            raise MemoryError

        monkeypatch.setattr(SealedNode, "_sealed_mem", no_memory)
        assert stream.append(b"t", b"v4", 4) == 4  # stored; the seal is owed
        assert calls and not stream.node_list()[0].sealed
        stream._check()
        assert [e[2] for e in stream.read(1, 10)] == [b"v1", b"v2", b"v3", b"v4"]
        with pytest.raises(MemoryError):  # the owed seal comes first and fails again: nothing stored
            stream.append(b"t", b"v5", 5)
        stream._check()
        monkeypatch.undo()
        assert stream.append(b"t", b"v5", 5) == 5
        stream._check()
        assert stream.node_list()[0].sealed and [e[2] for e in stream.read(1, 10)] == [b"v%d" % i for i in range(1, 6)]

    def test_a_failed_seal_by_bytes_stores_nothing(self, monkeypatch):
        stream = Stream(node_entries=10, node_max_bytes=10)
        stream.append(b"t", b"12345678", 1)
        real_seal = ActiveNode.seal

        def no_memory(self, *args, **kwargs):
            raise MemoryError

        monkeypatch.setattr(ActiveNode, "seal", no_memory)
        for append in (lambda: stream.append(b"new", b"abcdefgh", 2),
                       lambda: stream.append_many([b"new", b"abcdefgh"], 2)):
            with pytest.raises(MemoryError):
                append()
            stream._check()
            assert stream.next_offset == 2 and stream.tag_count() == 1
        monkeypatch.setattr(ActiveNode, "seal", real_seal)
        assert stream.append_many([b"new", b"abcdefgh", b"t", b"x"], 3) == 2
        stream._check()
        assert stream.node_list()[0].sealed and stream.node_list()[0].short
        assert stream.read(1, 5) == [[1, b"t", b"12345678"], [2, b"new", b"abcdefgh"], [3, b"t", b"x"]]

    def test_a_batch_is_all_or_nothing_until_it_seals_a_node(self, monkeypatch):
        stream = Stream(node_entries=4)
        stream.append_many([b"t", b"v1", b"t", b"v2"], 1)
        real_seal = ActiveNode.seal
        calls = []

        def second_fails(self, *args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                raise MemoryError
            return real_seal(self, *args, **kwargs)

        monkeypatch.setattr(ActiveNode, "seal", second_fails)
        # The first node's seal fails with pairs left: the whole batch is taken back.
        calls.append(1)
        with pytest.raises(MemoryError):
            stream.append_many([b"t", b"v3", b"new", b"v4", b"t", b"v5"], 2)
        stream._check()
        assert stream.next_offset == 3 and stream.tag_count() == 1
        assert [e[2] for e in stream.read(1, 10)] == [b"v1", b"v2"]
        # Nine pairs: the first node seals (kept), the second one's seal fails with
        # pairs left: what went into sealed nodes and the full second node stays
        # (its seal owed), the rest is not stored.
        calls.clear()
        with pytest.raises(MemoryError):
            stream.append_many([x for i in range(3, 12) for x in (b"t", b"v%d" % i)], 3)
        stream._check()
        assert stream.next_offset == 9 and stream.node_list()[0].sealed and not stream.node_list()[1].sealed
        assert [e[2] for e in stream.read(1, 20)] == [b"v%d" % i for i in range(1, 9)]
        monkeypatch.undo()
        assert stream.append(b"t", b"v9", 9) == 9  # seals the owed node first
        stream._check()
        assert [n.sealed for n in stream.node_list()] == [True, True, False]

    def test_a_failed_seal_after_a_whole_batch_is_owed(self, monkeypatch):
        stream = Stream(node_entries=4)

        def no_memory(self, *args, **kwargs):
            raise MemoryError

        monkeypatch.setattr(ActiveNode, "seal", no_memory)
        assert stream.append_many([b"t", b"v1", b"t", b"v2", b"t", b"v3", b"t", b"v4"], 1) == 1
        stream._check()
        with pytest.raises(MemoryError):  # the owed seal fails again: nothing stored
            stream.append_many([b"t", b"v5"], 2)
        stream._check()
        monkeypatch.undo()
        assert stream.append_many([b"t", b"v5"], 2) == 5
        stream._check()
        assert [e[2] for e in stream.read(1, 10)] == [b"v%d" % i for i in range(1, 6)]

    def test_over_tcp_a_failed_seal_leaves_memory_and_aof_in_step(self, tmp_path, monkeypatch):
        from tstream.server.embed import ServerThread

        real_seal = ActiveNode.seal
        state = {"calls": 0}

        def seal_once_fails(self, *args, **kwargs):
            state["calls"] += 1
            if state["calls"] == 1:
                raise MemoryError
            return real_seal(self, *args, **kwargs)

        monkeypatch.setattr(ActiveNode, "seal", seal_once_fails)
        options = dict(port=0, dir=tmp_path, save="", appendonly=True, appendfsync="always", node_entries=5)
        with ServerThread(**options) as srv:
            client = redis.Redis(port=srv.port)
            replies = [client.execute_command("TWRITE", "k", "t", f"v{i}") for i in range(1, 13)]
            assert replies == list(range(1, 13))
            client.execute_command("TWRITE", "k", "ENTRIES", "t", "v13", "t", "v14")
            client.close()
        monkeypatch.setattr(ActiveNode, "seal", real_seal)
        with ServerThread(**options) as srv:
            client = redis.Redis(port=srv.port)
            assert [e[2] for e in client.execute_command("TREAD", "k", 1, 20)] == [b"v%d" % i for i in range(1, 15)]
            client.close()
        assert run_check(tmp_path / "appendonlydir").returncode == 0

    @pytest.mark.parametrize("form", ["entries", "run", "batch"])
    def test_over_tcp_a_batch_failing_after_a_seal_is_logged_as_what_it_stored(self, tmp_path, monkeypatch, form):
        """Nine entries into nodes of four: the first node seals, the second seal
        fails (MemoryError) with entries left.  What went into sealed nodes stays:
        it is logged as an append of its own and the client is told which offsets
        were stored; memory and the AOF agree after a restart."""
        from tstream.server.embed import ServerThread

        real_seal = ActiveNode.seal
        state = {"calls": 0, "armed": False}

        def second_seal_fails(self, *args, **kwargs):
            if state["armed"]:
                state["calls"] += 1
                if state["calls"] == 2:
                    raise MemoryError
            return real_seal(self, *args, **kwargs)

        monkeypatch.setattr(ActiveNode, "seal", second_seal_fails)
        options = dict(port=0, dir=tmp_path, save="", appendonly=True, appendfsync="always", node_entries=4)
        values = [b"v%d" % i for i in range(1, 10)]
        with ServerThread(**options) as srv:
            client = redis.Redis(port=srv.port)
            state["armed"] = True
            if form == "entries":
                with pytest.raises(redis.ResponseError, match="out of memory after storing 8 of 9 entries"):
                    client.execute_command("TWRITE", "k", "ENTRIES", *[x for v in values for x in (b"t", v)])
            elif form == "run":
                pipe = client.pipeline(transaction=False)
                for value in values:
                    pipe.execute_command("TWRITE", "k", "t", value)
                replies = pipe.execute(raise_on_error=False)
                assert replies[:8] == list(range(1, 9))
                assert isinstance(replies[8], redis.ResponseError)
            else:
                for seq, value in enumerate(values, 1):
                    args = ["BATCH", "k", "b1", seq, "subj", value] + (["COMMIT"] if seq == 9 else [])
                    if seq < 9:
                        client.execute_command(*args)
                    else:
                        with pytest.raises(redis.ResponseError, match="out of memory after storing 8 of 9"):
                            client.execute_command(*args)
            state["armed"] = False
            live = [e[2] for e in client.execute_command("TREAD", "k", 1, 20)]
            assert live == values[:8]
            client.close()
        monkeypatch.setattr(ActiveNode, "seal", real_seal)
        with ServerThread(**options) as srv:
            client = redis.Redis(port=srv.port)
            assert [e[2] for e in client.execute_command("TREAD", "k", 1, 20)] == live
            assert client.execute_command("TWRITE", "k", "t", "after") == 9
            client.close()
        assert run_check(tmp_path / "appendonlydir").returncode == 0

    @pytest.mark.parametrize("pipelined", [False, True])
    def test_over_tcp_a_change_that_cannot_be_logged_is_not_acknowledged(self, tmp_path, monkeypatch,
                                                                         pipelined):
        """MemoryError while a write's record is handed to the AOF: the entry is in
        memory but not in the file.  The client gets an error (not an
        acknowledgement), writes are refused (MISCONF) until a rewrite has saved
        memory as it is, then go on; after a restart memory and the files agree."""
        from tstream.server.embed import ServerThread
        from tstream.server.persist import Persistence

        real_log = Persistence.log
        state = {"armed": False}

        def log_fails_once(self, record):
            if state["armed"]:
                state["armed"] = False
                raise MemoryError
            return real_log(self, record)

        monkeypatch.setattr(Persistence, "log", log_fails_once)
        options = dict(port=0, dir=tmp_path, save="", appendonly=True, appendfsync="always")
        with ServerThread(**options) as srv:
            client = redis.Redis(port=srv.port)
            assert client.execute_command("TWRITE", "k", "t", "a") == 1
            state["armed"] = True
            if pipelined:
                pipe = client.pipeline(transaction=False)
                pipe.execute_command("TWRITE", "k", "t", "b")
                pipe.execute_command("TWRITE", "k", "t", "b2")
                replies = pipe.execute(raise_on_error=False)
                assert all(isinstance(r, redis.ResponseError) and "not acknowledged" in str(r) for r in replies)
            else:
                with pytest.raises(redis.ResponseError, match="not acknowledged"):
                    client.execute_command("TWRITE", "k", "t", "b")
            wait_for(lambda: _write_accepted(client), "writes to be accepted after the rewrite")
            held = [e[2] for e in client.execute_command("TREAD", "k", 1, 20)]
            assert held[0] == b"a" and held[-1] == b"c"
            assert info(client)["aof_last_bgrewrite_status"] == "ok"
            client.close()
        monkeypatch.setattr(Persistence, "log", real_log)
        with ServerThread(**options) as srv:
            client = redis.Redis(port=srv.port)
            assert [e[2] for e in client.execute_command("TREAD", "k", 1, 20)] == held
            client.close()
        assert run_check(tmp_path / "appendonlydir").returncode == 0


# --- real disks: EROFS and ENOSPC through the server ------------------------------------


class TestRealDiskFaults:
    def test_failed_rewrite_with_no_inode_left_leaks_nothing_to_clients(self, make_server, tmpfs, tmp_path):
        """The new incr file can't be created (no inode left: ENOSPC on open, while the
        open incr file can still grow): the rewrite fails and records keep going to
        the old file, never to a descriptor number a new client socket may take."""
        disk = tmpfs("8m")
        proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always",
                           directory=disk.path, start=False)
        proc.log_path = tmp_path / "server.log"
        proc.start()
        client = proc.client()
        client.execute_command("TWRITE", "secret", "t", "other-clients-data")
        disk.remount(f"nr_inodes={disk.inodes_used()}")
        with pytest.raises(redis.ResponseError, match="Can't execute an AOF background rewriting"):
            client.execute_command("BGREWRITEAOF")
        assert info(client)["aof_last_bgrewrite_status"] == "err"
        assert "No space left on device" in proc.output()
        acked: dict[str, list[bytes]] = {"secret": [b"other-clients-data"]}
        for n in range(5):  # new connections: a recycled descriptor would receive AOF records
            fresh = proc.client()
            for i in range(5):
                payload = f"n{n}-{i}".encode()
                assert fresh.execute_command("TWRITE", "secret", "t", payload) == len(acked["secret"]) + 1
                acked["secret"].append(payload)
            assert fresh.ping() is True
            fresh.close()
        assert info(client)["aof_last_write_status"] == "ok"
        client.close()
        restart_and_verify(proc, acked, disk.path / "appendonlydir")

    def test_disk_full_everysec_misconf_then_resume_losing_nothing(self, make_server, tmpfs):
        disk = tmpfs("600k")
        proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
                           directory=disk.path)
        client = proc.client()
        acked: list[bytes] = []
        error = None
        for i in range(400):
            payload = f"{i}-".encode() + b"y" * 3000
            try:
                assert client.execute_command("TWRITE", "k", "t", payload) == len(acked) + 1
            except redis.ResponseError as exc:
                error = str(exc)
                break
            acked.append(payload)
        assert error == MISCONF_AOF_ENOSPC
        fields = info(client)
        assert fields["aof_last_write_status"] == "err" and fields["aof_buffer_length"] > 0
        with pytest.raises(redis.ResponseError, match="^MISCONF"):
            client.ping()
        assert [e[2] for e in client.execute_command("TREAD", "k", 1, 1000)] == acked  # reads go on
        disk.remount("size=8m")
        wait_for(lambda: info(client)["aof_last_write_status"] == "ok", "the AOF write to be retried")
        assert client.execute_command("TWRITE", "k", "t", "after") == len(acked) + 1
        acked.append(b"after")
        assert info(client)["aof_buffer_length"] == 0
        client.close()
        restart_and_verify(proc, {"k": acked}, disk.path / "appendonlydir")

    def test_redis_answers_the_same_misconf_on_a_full_disk(self, tmpfs):
        disk = tmpfs("400k")
        port = ServerProcess(disk.path).port
        server = subprocess.Popen(["redis-server", "--port", str(port), "--dir", str(disk.path), "--save", "",
                                   "--appendonly", "yes", "--appendfsync", "everysec"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client = redis.Redis(port=port, socket_timeout=10)
            wait_for(lambda: _pings(client), "redis-server to start")
            with pytest.raises(redis.ResponseError) as caught:
                for i in range(400):
                    client.set(f"k{i}", b"y" * 3000)
            assert str(caught.value) == MISCONF_AOF_ENOSPC
            with pytest.raises(redis.ResponseError, match="^MISCONF"):
                client.ping()
            assert client.get("k0") == b"y" * 3000
        finally:
            server.kill()
            server.wait()

    def test_bgrewriteaof_on_a_full_disk_with_always_loses_nothing(self, make_server, tmpfs):
        disk = tmpfs("8m")
        proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always",
                           "--auto-aof-rewrite-percentage", "0", directory=disk.path)
        client = proc.client()
        acked = [b"before"]
        client.execute_command("TWRITE", "k", "t", "before")
        filler = disk.fill()
        # The new incr file opens (an inode), the manifest naming it can't be written.
        with pytest.raises(redis.ResponseError, match="Can't execute an AOF background rewriting"):
            client.execute_command("BGREWRITEAOF")
        assert info(client)["aof_last_bgrewrite_status"] == "err"
        filler.unlink()
        for i in range(20):
            payload = f"after-{i}".encode()
            assert client.execute_command("TWRITE", "k", "t", payload) == len(acked) + 1
            acked.append(payload)
        client.close()
        restart_and_verify(proc, {"k": acked}, disk.path / "appendonlydir")

    def test_failed_bgsave_stops_writes_until_a_save_succeeds(self, make_server, tmpfs):
        disk = tmpfs("8m")
        proc = make_server("--save", "3600 1", directory=disk.path, start=False)
        proc.log_path = disk.path.parent / "bgsave-server.log"  # no open file: the mount can turn read-only
        proc.start()
        client = proc.client()
        client.execute_command("TWRITE", "k", "t", "one")
        disk.remount("ro")
        client.bgsave()
        wait_for(lambda: info(client)["rdb_bgsave_in_progress"] == 0, "the BGSAVE to end")
        assert info(client)["rdb_last_bgsave_status"] == "err"
        with pytest.raises(redis.ResponseError) as caught:
            client.execute_command("TWRITE", "k", "t", "two")
        assert str(caught.value).startswith("MISCONF tstream is configured to save snapshots, but it's "
                                            "currently unable to persist to disk.")
        assert "stop-writes-on-bgsave-error" in str(caught.value)
        with pytest.raises(redis.ResponseError, match="^MISCONF"):
            client.ping()  # as redis-server: PING says so too
        assert client.execute_command("TREAD", "k", 1, 5) == [[1, b"t", b"one"]]  # reads go on
        client.config_set("stop-writes-on-bgsave-error", "no")
        assert client.execute_command("TWRITE", "k", "t", "two") == 2
        client.config_set("stop-writes-on-bgsave-error", "yes")
        with pytest.raises(redis.ResponseError, match="^MISCONF"):
            client.execute_command("TWRITE", "k", "t", "three")
        disk.remount("rw")
        client.save()
        assert client.execute_command("TWRITE", "k", "t", "three") == 3
        assert info(client)["rdb_last_bgsave_status"] == "ok"
        client.close()


    def test_redis_refuses_writes_and_ping_after_a_failed_bgsave_too(self, tmpfs):
        disk = tmpfs("4m")
        port = ServerProcess(disk.path).port
        server = subprocess.Popen(["redis-server", "--port", str(port), "--dir", str(disk.path),
                                   "--save", "3600 1", "--logfile", ""],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client = redis.Redis(port=port, socket_timeout=10)
            wait_for(lambda: _pings(client), "redis-server to start")
            client.set("k", "one")
            disk.remount("ro")
            client.bgsave()
            wait_for(lambda: client.info("persistence")["rdb_bgsave_in_progress"] == 0, "the BGSAVE to end")
            with pytest.raises(redis.ResponseError) as caught:
                client.set("k", "two")
            assert str(caught.value).startswith("MISCONF Redis is configured to save RDB snapshots, but it's "
                                                "currently unable to persist to disk.")
            with pytest.raises(redis.ResponseError, match="^MISCONF"):
                client.ping()
            assert client.get("k") == b"one"
            client.config_set("stop-writes-on-bgsave-error", "no")
            assert client.set("k", "two")
        finally:
            server.kill()
            server.wait()


def _pings(client: redis.Redis) -> bool:
    try:
        return client.ping()
    except redis.ConnectionError:
        return False


# --- the load-driven suite: each step fails once under writers ---------------------------

# (op, step, nth, errno name, appendfsync, triggers rewrites): nth counts from the
# restart on an existing AOF, so the first rewrite is the first open-incr/manifest/snapshot.
STEPS = [
    ("write", "write", 150, "ENOSPC", "everysec", False),
    ("write", "write", 150, "ENOSPC", "always", False),
    ("fsync", "fsync", 150, "EIO", "always", False),
    ("fsync", "fsync", 1, "EIO", "everysec", False),
    ("open", "open-incr", 1, "EROFS", "always", True),
    ("open", "open-incr", 1, "EACCES", "everysec", True),
    ("write", "manifest", 1, "ENOSPC", "always", True),
    ("fsync", "manifest", 1, "EIO", "always", True),
    ("rename", "manifest", 2, "ENOSPC", "always", True),
    ("write", "snapshot-write", 1, "ENOSPC", "always", True),
    ("rename", "snapshot-rename", 1, "EIO", "everysec", True),
    ("memory", "seal", 2, "-", "always", False),
    ("memory", "pack", 300, "-", "everysec", False),
]


@pytest.mark.slow
@pytest.mark.parametrize("op,step,nth,error,policy,rewrites", STEPS,
                         ids=[f"{s[0]}-{s[1]}-{s[3]}-{s[4]}" for s in STEPS])
def test_each_step_fails_once_under_load(tmp_path, op, step, nth, error, policy, rewrites):
    _fails_once_under_load(tmp_path, op, step, nth, error, policy, rewrites, ())


# The same with the fsync in a thread (aof-fsync-in-thread yes): a failed fsync there
# must end the process before any reply waiting for it is sent.
THREAD_STEPS = [s for s in STEPS if s[4] == "always" and s[0] in ("write", "fsync")]


@pytest.mark.slow
@pytest.mark.parametrize("op,step,nth,error,policy,rewrites", THREAD_STEPS,
                         ids=[f"{s[0]}-{s[1]}-{s[3]}-thread" for s in THREAD_STEPS])
def test_each_step_fails_once_under_load_with_the_fsync_in_a_thread(tmp_path, op, step, nth, error, policy,
                                                                     rewrites):
    _fails_once_under_load(tmp_path, op, step, nth, error, policy, rewrites, ("--aof-fsync-in-thread", "yes"))


def _fails_once_under_load(tmp_path, op, step, nth, error, policy, rewrites, more: tuple) -> None:
    options = ("--save", "", "--appendonly", "yes", "--appendfsync", policy,
               "--auto-aof-rewrite-percentage", "0", *more)
    setup = ServerProcess(tmp_path, *options).start()  # an AOF history to continue
    setup.client().execute_command("TWRITE", "w0", "t", "seed")
    setup.stop()
    spec = f"memory:{step}:{nth}" if op == "memory" else f"{op}:{step}:{nth}:{error}"
    extra = ("--node-entries", "50") if op == "memory" else ()
    proc = FaultyServer(tmp_path, spec, *options, *extra).start()
    admin = proc.client()
    with Writers(proc.port, seeded={"w0": [b"seed"]}) as writers:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and proc.proc.poll() is None:
            if rewrites:
                try:
                    admin.execute_command("BGREWRITEAOF")
                except redis.ResponseError as exc:  # refused (a failed start, or one in progress)
                    assert "rewriting" in str(exc)
                except redis.ConnectionError:
                    break
            time.sleep(0.2)
    assert not writers.problems, writers.problems
    assert writers.total() > 20
    assert "injected fault" in proc.output()
    if proc.proc.poll() is None:  # it survived the fault: it must have recovered from it
        fields = wait_for(lambda: (lambda f: f if f["aof_last_write_status"] == "ok" else None)(info(admin)),
                          "the AOF to be writable again")
        assert fields["aof_buffer_length"] == 0
    else:
        assert policy == "always" and op in ("write", "fsync") and step in ("write", "fsync")
    admin.close()
    proc.kill()
    restart_and_verify(ServerProcess(tmp_path, *options), writers.acked, tmp_path / "appendonlydir")


@pytest.mark.slow
def test_appendonly_turned_on_whose_first_rewrite_fails_then_sigkill(tmp_path):
    """CONFIG SET appendonly yes, the first base can't be written, a SIGKILL: every
    later start works, and the first rewrite is retried until it succeeds."""
    proc = FaultyServer(tmp_path, "write:snapshot-write:1:ENOSPC", "--save", "").start()
    client = proc.client()
    client.execute_command("TWRITE", "k", "t", "before")
    client.config_set("appendonly", "yes")
    wait_for(lambda: info(client)["aof_last_bgrewrite_status"] == "err", "the first rewrite to fail")
    client.execute_command("TWRITE", "k", "t", "meanwhile")
    proc.kill()
    restarted = ServerProcess(tmp_path, "--save", "", "--appendonly", "yes")
    for _ in range(2):
        restarted.start()
        restarted.client().execute_command("TWRITE", "k", "t", "later")
        restarted.kill()
    assert run_check(tmp_path / "appendonlydir").returncode == 0
    proc = FaultyServer(tmp_path, "write:snapshot-write:1:ENOSPC", "--save", "").start()
    client = proc.client()
    client.config_set("appendonly", "yes")
    wait_for(lambda: info(client)["aof_last_bgrewrite_status"] == "ok", "the first rewrite to be retried")
    acked = [e[2] for e in client.execute_command("TREAD", "k", 1, 100)]
    client.close()
    proc.kill()
    restart_and_verify(ServerProcess(tmp_path, "--save", "", "--appendonly", "yes"), {"k": acked},
                       tmp_path / "appendonlydir")


@pytest.mark.slow
def test_auto_rewrite_failures_back_off_and_do_not_grow_the_manifest(tmp_path):
    options = ("--save", "", "--appendonly", "yes", "--auto-aof-rewrite-percentage", "1",
               "--auto-aof-rewrite-min-size", "1")
    setup = ServerProcess(tmp_path, *options).start()
    setup.client().execute_command("TWRITE", "k", "t", "seed")
    setup.stop()
    proc = FaultyServer(tmp_path, "write:snapshot-write:1:ENOSPC", *options).start()
    client = proc.client()
    for _i in range(50):
        client.execute_command("TWRITE", "k", "t", "x" * 1000)
    wait_for(lambda: info(client)["aof_last_bgrewrite_status"] == "err", "the automatic rewrite to fail")
    manifest = aof.read_manifest(str(tmp_path / "appendonlydir"))
    for _i in range(50):  # 50 more turns of growth, with the cron running every 100 ms
        client.execute_command("TWRITE", "k", "t", "x" * 1000)
        time.sleep(0.01)
    assert aof.read_manifest(str(tmp_path / "appendonlydir")) == manifest  # no retry yet: backing off
    assert proc.output().count("Background AOF rewrite failed") == 1
    assert not list((tmp_path / "appendonlydir").glob("temp-*"))
    client.close()
    proc.kill()


if __name__ == "__main__":
    sys.exit(_serve_with_faults(sys.argv[1:]))
