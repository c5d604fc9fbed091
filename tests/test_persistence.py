"""Persistence through the real server: SAVE/BGSAVE, AOF, SIGKILL crashes, damaged files, tstream-check."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from tstream.persistence import aof as aof_files
from tstream.persistence.framing import pack

ROOT = Path(__file__).resolve().parent.parent


def as_map(reply) -> dict:
    return reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2]))


def state_of(client: redis.Redis) -> dict:
    """Everything a client can see of every stream: entries, info, groups, pending."""
    state = {}
    for key in sorted(client.keys("*")):
        first_last = client.execute_command("TREAD", key, "-", 0, "WITHINFO")[0]
        entries = client.execute_command("TREAD", key, 1, max(first_last[1], 1) + 5)
        groups = client.execute_command("TINFO", key, "GROUPS")
        pending = {}
        for group in groups:
            fields = as_map(group)
            pending[fields[b"name"]] = [p[:2] for p in client.execute_command("TPENDING", key, fields[b"name"])]
        config = client.execute_command("TCONFIG", key, "GET")
        state[key] = (first_last, entries, [as_map(g) for g in groups], pending, as_map(config))
    return state


def fill(client: redis.Redis) -> None:
    client.execute_command("TWRITE", "s1", "ENTRIES", *[x for i in range(2500) for x in (f"t{i % 5}", f"v{i}")])
    client.execute_command("TEVICT", "s1", 700)
    client.execute_command("TCONFIG", "s1", "SET", "max_len", 100000, "allow_atomic", "no")
    client.execute_command("TREAD", "s1", "-", 30, "GROUP", "g", "RETRY", 600000, 6000000)
    client.execute_command("TACK", "s1", "g", "705-710")
    client.execute_command("TREAD", "s1", "$", 1, "GROUP", "late")
    client.execute_command("TWRITE", "s2", "only", "one")
    client.execute_command("TCONFIG", "s3", "SET", "max_age_ms", 0)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tstream.persistence.check", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


class TestSnapshots:
    def test_save_and_restart(self, make_server, tmp_path):
        proc = make_server("--save", "")
        c = proc.client()
        fill(c)
        before = state_of(c)
        assert c.save()
        assert (tmp_path / "dump.tsr").exists()
        proc.kill()
        proc.start()
        assert state_of(proc.client()) == before

    def test_bgsave_lastsave_and_info(self, make_server):
        proc = make_server("--save", "")
        c = proc.client()
        fill(c)
        assert c.info("persistence")["rdb_changes_since_last_save"] > 0
        before_save = c.lastsave()
        time.sleep(1.1)
        assert c.bgsave()
        deadline = time.monotonic() + 10
        while c.info("persistence")["rdb_bgsave_in_progress"] and time.monotonic() < deadline:
            time.sleep(0.02)
        info = c.info("persistence")
        assert info["rdb_last_bgsave_status"] == "ok"
        assert info["rdb_changes_since_last_save"] == 0
        assert c.lastsave() > before_save
        before = state_of(c)
        proc.kill()
        proc.start()
        assert state_of(proc.client()) == before

    def test_shutdown_saves_when_save_points_are_set(self, make_server, tmp_path):
        proc = make_server("--save", "3600 1")
        c = proc.client()
        c.execute_command("TWRITE", "k", "t", "v")
        before = state_of(c)
        c.shutdown()
        assert proc.proc.wait(10) == 0
        assert (tmp_path / "dump.tsr").exists()
        proc.start()
        assert state_of(proc.client()) == before

    def test_sigterm_saves_and_nosave_does_not(self, make_server, tmp_path):
        proc = make_server("--save", "3600 1")
        proc.client().execute_command("TWRITE", "k", "t", "v")
        assert proc.stop(signal.SIGTERM) == 0
        assert (tmp_path / "dump.tsr").exists()
        (tmp_path / "dump.tsr").unlink()
        proc.start()
        proc.client().execute_command("TWRITE", "k", "t", "v")
        proc.client().shutdown(nosave=True)
        assert proc.proc.wait(10) == 0
        assert not (tmp_path / "dump.tsr").exists()

    def test_save_points_trigger_a_background_save(self, make_server, tmp_path):
        proc = make_server("--save", "1 3")
        c = proc.client()
        for i in range(3):
            c.execute_command("TWRITE", "k", "t", i)
        deadline = time.monotonic() + 10
        while not (tmp_path / "dump.tsr").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "dump.tsr").exists()

    def test_damaged_snapshot_refuses_to_start(self, make_server, tmp_path):
        proc = make_server("--save", "")
        fill(proc.client())
        proc.client().save()
        proc.kill()
        dump = tmp_path / "dump.tsr"
        data = bytearray(dump.read_bytes())
        data[len(data) // 2] ^= 0xFF
        dump.write_bytes(bytes(data))
        digest = sha(dump)
        with pytest.raises(RuntimeError, match=r"dump.tsr at offset \d+"):
            proc.start()
        assert proc.proc.returncode != 0
        assert sha(dump) == digest  # never rewritten
        dump.write_bytes(b"")
        with pytest.raises(RuntimeError, match="too short"):
            proc.start()


class TestAppendOnlyFile:
    def test_restart_replays_everything(self, make_server):
        proc = make_server("--save", "", "--appendonly", "yes")
        c = proc.client()
        fill(c)
        before = state_of(c)
        proc.kill()
        proc.start()
        assert state_of(proc.client()) == before

    def test_pipelined_runs_replay_exactly(self, make_server):
        """A pipelined run of TWRITEs is logged as one APPEND effect; replay gives the
        same offsets, tags, data and times."""
        proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always")
        c = proc.client()
        with c.pipeline(transaction=False) as pipe:
            for i in range(300):
                pipe.execute_command("TWRITE", "runs", f"t{i % 7}", f"v{i}")
            pipe.execute_command("TWRITE", "other", "t", "x")
            for i in range(5):
                pipe.execute_command("TWRITE", "runs", "t", f"w{i}")
            replies = pipe.execute()
        assert replies == [*range(1, 301), 1, *range(301, 306)]
        before = c.execute_command("TREAD", "runs", "-", 1000, "WITHINFO")
        times = c.execute_command("DGET", "runs", "SEQ", 300)
        proc.kill()
        proc.start()
        c = proc.client()
        assert c.execute_command("TREAD", "runs", "-", 1000, "WITHINFO") == before
        assert c.execute_command("DGET", "runs", "SEQ", 300) == times

    def test_rewrite_compacts_and_keeps_writes_made_during_it(self, make_server, tmp_path):
        proc = make_server("--save", "", "--appendonly", "yes")
        c = proc.client()
        fill(c)
        assert c.bgrewriteaof()
        for i in range(50):
            c.execute_command("TWRITE", "during", "t", i)
        deadline = time.monotonic() + 10
        while c.info("persistence")["aof_rewrite_in_progress"] and time.monotonic() < deadline:
            time.sleep(0.02)
        manifest = (tmp_path / "appendonlydir" / aof_files.MANIFEST).read_text()
        assert "seq 2 type b" in manifest and "seq 1" not in manifest
        assert sorted(os.listdir(tmp_path / "appendonlydir")) == [
            "appendonly.aof.2.base.tsr", "appendonly.aof.2.incr.aof", "appendonly.aof.manifest"]
        before = state_of(c)
        proc.kill()
        proc.start()
        assert state_of(proc.client()) == before

    def test_turning_aof_on_at_runtime(self, make_server, tmp_path):
        proc = make_server("--save", "")
        c = proc.client()
        fill(c)
        assert c.config_set("appendonly", "yes")
        c.execute_command("TWRITE", "after", "t", "x")
        deadline = time.monotonic() + 10
        while not (tmp_path / "appendonlydir" / aof_files.MANIFEST).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        before = state_of(c)
        proc.kill()
        proc.start("--appendonly", "yes")
        assert state_of(proc.client()) == before

    def test_bgrewriteaof_needs_appendonly(self, server):
        with pytest.raises(redis.ResponseError, match="needs appendonly yes"):
            server.client().bgrewriteaof()

    def aof_with_data(self, make_server, tmp_path):
        proc = make_server("--save", "", "--appendonly", "yes")
        c = proc.client()
        for i in range(20):
            c.execute_command("TWRITE", "k", "t", f"v{i}")
        proc.kill()
        return proc, tmp_path / "appendonlydir" / aof_files.incr_name(1)

    def test_torn_tail_is_truncated_and_appending_goes_on(self, make_server, tmp_path):
        proc, incr = self.aof_with_data(make_server, tmp_path)
        good = incr.stat().st_size
        with open(incr, "ab") as handle:
            handle.write(pack([1, b"k", 21, 1, b"t", b"torn"])[:7])
        proc.start()
        assert f"{incr}" in proc.output() and f"from offset {good}" in proc.output()
        c = proc.client()
        assert c.execute_command("TWRITE", "k", "t", "after") == 21
        proc.kill()
        proc.start()
        assert proc.client().execute_command("TREAD", "k", 20, 5) == [[20, b"t", b"v19"], [21, b"t", b"after"]]

    def test_torn_tail_refused_without_aof_load_truncated(self, make_server, tmp_path):
        proc, incr = self.aof_with_data(make_server, tmp_path)
        with open(incr, "ab") as handle:
            handle.write(pack([1, b"k", 21, 1, b"t", b"torn"])[:7])
        digest = sha(incr)
        with pytest.raises(RuntimeError, match="incomplete"):
            proc.start("--aof-load-truncated", "no")
        assert proc.proc.returncode != 0 and sha(incr) == digest

    def test_flipped_byte_in_the_middle_refuses_to_start(self, make_server, tmp_path):
        proc, incr = self.aof_with_data(make_server, tmp_path)
        data = bytearray(incr.read_bytes())
        data[len(data) // 3] ^= 0x20
        incr.write_bytes(bytes(data))
        digest = sha(incr)
        with pytest.raises(RuntimeError, match=rf"{incr.name} at offset \d+"):
            proc.start()
        assert proc.proc.returncode != 0 and sha(incr) == digest

    def test_missing_file_and_empty_manifest_refuse_to_start(self, make_server, tmp_path):
        proc, incr = self.aof_with_data(make_server, tmp_path)
        incr.rename(incr.with_suffix(".moved"))
        with pytest.raises(RuntimeError, match="does not exist"):
            proc.start()
        incr.with_suffix(".moved").rename(incr)
        manifest = tmp_path / "appendonlydir" / aof_files.MANIFEST
        manifest.write_text("")
        with pytest.raises(RuntimeError, match="lists no file"):
            proc.start()

    def test_empty_incr_file_is_fine(self, make_server, tmp_path):
        proc, incr = self.aof_with_data(make_server, tmp_path)
        proc.start()
        proc.client().bgrewriteaof()
        time.sleep(0.5)
        proc.kill()
        proc.start()
        assert len(proc.client().execute_command("TREAD", "k", 1, 100)) == 20


class TestCrashes:
    """SIGKILL under concurrent writers and group readers, then compare with what clients were told."""

    def run_load(self, proc, seconds: float):  # noqa: C901 (over the limit when it came in)
        acked_writes: list[tuple[int, bytes, float]] = []
        acked_reads: dict[int, float] = {}
        acks: list[int] = []
        acks_sent: list[int] = []  # TACKs sent, whether or not the reply came back before the kill
        stop = threading.Event()
        lock = threading.Lock()

        def writer(n: int):
            c = proc.client(socket_timeout=5)
            i = 0
            try:
                while not stop.is_set():
                    payload = f"w{n}-{i}".encode()
                    if i % 3 == 0:
                        first = c.execute_command("TWRITE", "log", "ENTRIES", "t", payload + b"a", "t", payload + b"b")
                        with lock:
                            acked_writes.extend([(first, payload + b"a", time.monotonic()),
                                                 (first + 1, payload + b"b", time.monotonic())])
                    else:
                        offset = c.execute_command("TWRITE", "log", "t", payload)
                        with lock:
                            acked_writes.append((offset, payload, time.monotonic()))
                    i += 1
            except (redis.ConnectionError, redis.TimeoutError):
                pass

        def reader():
            c = proc.client(socket_timeout=5)
            try:
                while not stop.is_set():
                    reply = c.execute_command("TREAD", "log", "-", 5, "GROUP", "g", "RETRY", 3600000, 7200000,
                                              "BLOCK", 100)
                    if reply:
                        now = time.monotonic()
                        with lock:
                            for entry in reply:
                                acked_reads[entry[0]] = now
                        got = [entry[0] for entry in reply[::2]]
                        with lock:
                            acks_sent.extend(got)
                        if c.execute_command("TACK", "log", "g", *got) == len(got):
                            with lock:
                                acks.extend(got)
            except (redis.ConnectionError, redis.TimeoutError):
                pass

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
        threads += [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        killed_at = time.monotonic()
        proc.kill()
        stop.set()
        for t in threads:
            t.join(10)
        self.acks_sent = acks_sent
        return acked_writes, acked_reads, acks, killed_at

    def test_appendfsync_always_loses_nothing_acknowledged(self, make_server):
        proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always")
        writes, reads, acks, _ = self.run_load(proc, 2.0)
        assert len(writes) > 100 and reads
        proc.start()
        c = proc.client()
        entries = {e[0]: e[2] for e in c.execute_command("TREAD", "log", 1, 10**6) if e}
        for offset, payload, _ in writes:
            assert entries.get(offset) == payload, f"acknowledged write {offset} lost or changed"
        group = next(as_map(g) for g in c.execute_command("TINFO", "log", "GROUPS"))
        assert group[b"next"] > max(reads)  # no handed-out entry is handed out again as new
        pending = {p[0] for p in c.execute_command("TPENDING", "log", "g")}
        assert not pending & set(acks)  # acknowledged entries stay acknowledged
        # Delivered and never acknowledged: still pending (a TACK whose reply was lost may have applied).
        assert set(reads) - set(self.acks_sent) <= pending

    def test_batches_are_all_or_nothing(self, make_server):
        proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always")
        writes, _, _, _ = self.run_load(proc, 1.5)
        proc.start()
        entries = {e[0]: e[2] for e in proc.client().execute_command("TREAD", "log", 1, 10**6) if e}
        for payload in entries.values():
            if payload.endswith(b"a"):
                partner = [o for o, p in entries.items() if p == payload[:-1] + b"b"]
                assert partner, f"half of a TWRITE ENTRIES survived: {payload!r}"

    def test_appendfsync_everysec_loses_at_most_about_a_second(self, make_server):
        proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "everysec")
        writes, _, _, killed_at = self.run_load(proc, 3.0)
        proc.start()
        entries = {e[0]: e[2] for e in proc.client().execute_command("TREAD", "log", 1, 10**6) if e}
        old_enough = [(o, p) for o, p, at in writes if at < killed_at - 2.0]
        assert old_enough
        for offset, payload in old_enough:
            assert entries.get(offset) == payload


class TestCheckTool:
    def test_good_torn_fixed_and_corrupt(self, make_server, tmp_path):
        proc = make_server("--save", "", "--appendonly", "yes")
        for i in range(10):
            proc.client().execute_command("TWRITE", "k", "t", i)
        proc.client().save()
        proc.kill()
        aof_dir = tmp_path / "appendonlydir"
        incr = aof_dir / aof_files.incr_name(1)
        done = run_check(str(aof_dir))
        assert done.returncode == 0 and "OK" in done.stdout
        assert run_check(str(tmp_path / "dump.tsr")).returncode == 0
        good = incr.stat().st_size
        with open(incr, "ab") as handle:
            handle.write(pack([1, b"k", 11, 1, b"t", b"x"])[:5])
        done = run_check(str(aof_dir))
        assert done.returncode == 1 and f"good up to offset {good}" in done.stdout
        assert incr.stat().st_size == good + 5  # no --fix: untouched
        done = run_check(str(aof_dir), "--fix")  # stdin is not a terminal and no --yes: not fixed
        assert done.returncode == 1 and incr.stat().st_size == good + 5
        done = run_check(str(aof_dir), "--fix", "--yes")
        assert done.returncode == 0 and "FIXED" in done.stdout and incr.stat().st_size == good
        data = bytearray(incr.read_bytes())
        data[good // 2] ^= 0x01
        incr.write_bytes(bytes(data))
        done = run_check(str(aof_dir), "--fix", "--yes")
        assert done.returncode == 1 and "BAD" in done.stdout
        assert incr.read_bytes() == bytes(data)  # damage is never "fixed" away
        assert run_check(str(tmp_path / "nothing")).returncode == 2
