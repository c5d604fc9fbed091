"""BATCH ... FAST (ADR-50 fast-ingest batches) over TCP with redis-py, RESP2 and RESP3:
operations 0-4, flow acks, gap modes, duplicates, EXPECT_* per message, errors
10203-10206, abandonment, the pipelined run, durable resume across restarts."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tstream.engine.ingest import BUDGET, FastBatch, Ingest


def as_map(reply) -> dict:
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2]))
    out = {}
    for k, v in reply.items():
        k = k.decode() if isinstance(k, bytes) else k
        if isinstance(v, (list, dict)):
            v = as_map(v)
        out[k] = v.decode() if isinstance(v, bytes) and k in ("type", "description") else v
    return out


def is_ok(reply) -> bool:
    return reply in (b"OK", "OK", True)


def fast(c, key, bid, seq, subject, data, flow=10, gap="ok", *extra):
    return c.execute_command("BATCH", key, bid, seq, subject, data, "FAST", flow, gap, *extra)


def op(c, key, bid, seq, word, flow=10, gap="ok"):
    return c.execute_command("BATCH", key, bid, seq, "FAST", flow, gap, word)


def entries(c, key) -> list:
    return [(e[0], e[2]) for e in c.execute_command("TREAD", key, 1, 100000)]


def error_of(call) -> str:
    with pytest.raises(redis.ResponseError) as info:
        call()
    return str(info.value)


class TestOperations:
    def test_first_message_gets_the_first_flow_ack(self, r):
        assert as_map(fast(r, "s", "b", 1, "a", "1", 100)) == {"type": "ack", "seq": 1, "ack_msgs": 16}
        # another is active: the floor of the flow control, 1024 // (4 * 2), under the flow
        assert as_map(fast(r, "s", "c", 1, "a", "1", 5)) == {"type": "ack", "seq": 1, "ack_msgs": 5}
        assert as_map(fast(r, "s", "d", 1, "a", "1", 500)) == {"type": "ack", "seq": 1, "ack_msgs": 85}

    def test_alone_with_a_small_flow_starts_at_the_flow(self, r):
        assert as_map(fast(r, "s", "b", 1, "a", "1", 4))["ack_msgs"] == 4

    def test_messages_are_stored_at_once_and_acked_every_k(self, r):
        fast(r, "s", "b", 1, "a", "m1", 3)
        replies = [fast(r, "s", "b", i, "a", f"m{i}", 3) for i in range(2, 11)]
        acks = [i + 2 for i, x in enumerate(replies) if not is_ok(x)]
        assert acks == [4, 7, 10]
        assert all(as_map(replies[i - 2]) == {"type": "ack", "seq": i, "ack_msgs": 3} for i in acks)
        assert entries(r, "s") == [(i, b"m%d" % i) for i in range(1, 11)]  # readable before any commit

    def test_commit_stores_the_final_message_and_ends_the_batch(self, r):
        r.execute_command("TWRITE", "s", "x", "before")
        fast(r, "s", "b", 1, "a", "1")
        fast(r, "s", "b", 2, "a", "2")
        ack = as_map(fast(r, "s", "b", 3, "a", "3", 10, "ok", "COMMIT"))
        assert ack == {"stream": b"s", "seq": 4, "batch": b"b", "count": 3}
        assert "10206" in error_of(lambda: fast(r, "s", "b", 4, "a", "4"))
        assert len(entries(r, "s")) == 4

    def test_commit_at_the_first_message(self, r):
        ack = as_map(fast(r, "new", "b", 1, "a", "1", 10, "fail", "COMMIT"))
        assert ack == {"stream": b"new", "seq": 1, "batch": b"b", "count": 1}

    def test_eob_ends_without_a_message(self, r):
        fast(r, "s", "b", 1, "a", "1")
        fast(r, "s", "b", 2, "a", "2")
        assert as_map(op(r, "s", "b", 3, "EOB")) == {"stream": b"s", "seq": 2, "batch": b"b", "count": 2}
        assert len(entries(r, "s")) == 2
        assert "10206" in error_of(lambda: op(r, "s", "b", 3, "PING"))

    def test_ping_replies_the_current_flow_ack_and_does_not_advance(self, r):
        fast(r, "s", "b", 1, "a", "1", 8)
        for i in range(2, 6):
            fast(r, "s", "b", i, "a", str(i), 8)
        assert as_map(op(r, "s", "b", 5, "PING", 8)) == {"type": "ack", "seq": 5, "ack_msgs": 8}
        assert is_ok(fast(r, "s", "b", 6, "a", "6", 8))  # not a gap: the ping took no batch-seq
        assert as_map(fast(r, "s", "b", 9, "a", "9", 8)) == {"type": "gap", "last_seq": 6, "seq": 9}
        assert as_map(op(r, "s", "b", 9, "PING", 8)) == {"type": "ack", "seq": 9, "ack_msgs": 8,
                                                         "last_seq": 6, "gap_seq": 9}

    def test_unknown_operation_is_refused(self, r):
        fast(r, "s", "b", 1, "a", "1")
        assert "10204" in error_of(lambda: op(r, "s", "b", 1, "NOPE"))


class TestGapsAndDuplicates:
    def test_gap_ok_stores_and_reports(self, r):
        fast(r, "s", "b", 1, "a", "1")
        assert as_map(fast(r, "s", "b", 4, "a", "4")) == {"type": "gap", "last_seq": 1, "seq": 4}
        assert is_ok(fast(r, "s", "b", 5, "a", "5"))
        assert [d for _, d in entries(r, "s")] == [b"1", b"4", b"5"]

    def test_gap_fail_ends_the_batch_with_the_final_pub_ack(self, r):
        fast(r, "s", "b", 1, "a", "1", 10, "fail")
        fast(r, "s", "b", 2, "a", "2", 10, "fail")
        ack = as_map(fast(r, "s", "b", 4, "a", "4", 10, "fail"))
        assert ack == {"stream": b"s", "seq": 2, "batch": b"b", "count": 2, "last_seq": 2, "gap_seq": 4}
        assert [d for _, d in entries(r, "s")] == [b"1", b"2"]
        assert "10206" in error_of(lambda: fast(r, "s", "b", 3, "a", "3", 10, "fail"))

    def test_resent_messages_are_duplicates(self, r):
        for i in range(1, 4):
            fast(r, "s", "b", i, "a", str(i))
        assert as_map(fast(r, "s", "b", 2, "a", "2")) == {"type": "duplicate", "seq": 2}
        assert as_map(fast(r, "s", "b", 1, "a", "1")) == {"type": "duplicate", "seq": 1}
        assert len(entries(r, "s")) == 3


class TestExpectations:
    def test_gap_ok_refuses_the_message_and_goes_on(self, r):
        r.execute_command("TWRITE", "s", "x", "0")
        fast(r, "s", "b", 1, "a", "1", 10, "ok", "EXPECT_LAST_SEQ", 1)
        reply = as_map(fast(r, "s", "b", 2, "a", "2", 10, "ok", "EXPECT_LAST_SEQ", 7))
        assert reply == {"type": "ack", "seq": 2, "ack_msgs": 10,
                         "error": {"code": 10071, "description": "wrong last sequence: 2"}}
        assert is_ok(fast(r, "s", "b", 3, "a", "3"))  # not a gap: 2 was received
        ack = as_map(op(r, "s", "b", 4, "EOB"))
        assert ack["count"] == 3 and ack["seq"] == 3
        assert [d for _, d in entries(r, "s")] == [b"0", b"1", b"3"]

    def test_gap_fail_ends_the_batch_with_the_error(self, r):
        fast(r, "s", "b", 1, "a", "1", 10, "fail")
        ack = as_map(fast(r, "s", "b", 2, "a", "2", 10, "fail", "EXPECT_LAST_SUBJECT_SEQ", 5))
        assert ack == {"stream": b"s", "seq": 1, "batch": b"b", "count": 1,
                       "error": {"code": 10071, "description": "wrong last sequence: 1"}}
        assert "10206" in error_of(lambda: fast(r, "s", "b", 3, "a", "3", 10, "fail"))

    def test_expectations_that_hold(self, r):
        fast(r, "s", "b", 1, "a", "1", 10, "fail", "EXPECT_LAST_SEQ", 0)
        assert is_ok(fast(r, "s", "b", 2, "a", "2", 10, "fail", "EXPECT_LAST_SEQ", 1,
                          "EXPECT_LAST_SUBJECT_SEQ", 1))
        assert len(entries(r, "s")) == 2


class TestErrors:
    def test_not_enabled(self, r):
        r.execute_command("TCONFIG", "s", "SET", "allow_batched", "no")
        assert error_of(lambda: fast(r, "s", "b", 1, "a", "1")) == "10203 batch publish not enabled on stream"
        assert as_map(r.execute_command("TCONFIG", "s", "GET"))["allow_batched"] == b"no"
        r.execute_command("TCONFIG", "s", "SET", "allow_batched", "yes")
        assert as_map(fast(r, "s", "b", 1, "a", "1"))["type"] == "ack"

    @pytest.mark.parametrize("flow, gap", [(0, "ok"), (65536, "ok"), ("x", "ok"), (10, "maybe")])
    def test_invalid_pattern(self, r, flow, gap):
        assert error_of(lambda: fast(r, "s", "b", 1, "a", "1", flow, gap)).startswith(
            "10204 batch publish invalid pattern used")
        assert r.exists("s") == 0

    def test_fast_missing_or_mixed_with_an_atomic_batch(self, r):
        fast(r, "s", "b", 1, "a", "1")
        assert "10204" in error_of(lambda: r.execute_command("BATCH", "s", "b", 2, "a", "2"))
        r.execute_command("BATCH", "s", "atomic", 1, "a", "1")
        assert "10204" in error_of(lambda: fast(r, "s", "atomic", 2, "a", "2"))

    def test_id_too_long(self, r):
        assert error_of(lambda: fast(r, "s", "x" * 65, 1, "a", "1")).startswith("10205 ")
        assert as_map(fast(r, "s", "x" * 64, 1, "a", "1"))["type"] == "ack"

    @pytest.mark.parametrize("call", ["message", "eob", "ping"])
    def test_unknown_id(self, r, call):
        send = {"message": lambda: fast(r, "s", "never", 2, "a", "2"),
                "eob": lambda: op(r, "s", "never", 1, "EOB"),
                "ping": lambda: op(r, "s", "never", 1, "PING")}[call]
        assert error_of(send) == "10206 batch publish ID is unknown"

    def test_not_counted_against_the_atomic_limits(self, r):
        for i in range(60):
            fast(r, "s", f"b{i}", 1, "a", "1")
        assert r.info("stats")["fast_batches_in_flight"] == 60

    def test_abandoned_after_the_timeout(self, make_server):
        proc = make_server("--save", "", "--batch-timeout-ms", "300")
        c = proc.client(protocol=3)
        fast(c, "s", "b", 1, "a", "1")
        time.sleep(0.15)
        assert is_ok(fast(c, "s", "b", 2, "a", "2"))
        time.sleep(0.2)
        assert is_ok(fast(c, "s", "b", 3, "a", "3"))  # activity restarts the timer
        time.sleep(0.7)
        assert "10206" in error_of(lambda: fast(c, "s", "b", 4, "a", "4"))
        stats = c.info("stats")
        assert stats["fast_batch_abandoned_timeout"] == 1 and stats["fast_batches_in_flight"] == 0
        assert len(entries(c, "s")) == 3


def _burn_cpu(ns: int) -> None:
    """Spend ``ns`` of this thread's CPU time."""
    end = time.thread_time_ns() + ns
    while time.thread_time_ns() < end:
        pass


def _embedded_server(tmp_path, aof: str | None):
    """A Server (no listener) in ``tmp_path``, its AOF on with ``appendfsync aof``
    (loaded) unless ``aof`` is None: for the turn measures' tests."""
    from tstream.server.app import Server
    from tstream.server.config import Config

    config = Config()
    config.set("save", "")
    config.set("dir", str(tmp_path))
    if aof is not None:
        config.set("appendonly", "yes")
        config.set("appendfsync", aof)
    server = Server(config)
    if aof is not None:
        server.persistence.load()
        assert server.persistence.file is not None and server.persistence.file.fsync_policy == aof
    return server


class TestFlow:
    def test_flow_is_never_above_the_clients(self, r):
        fast(r, "s", "b", 1, "a", "1", 5)
        pipe = r.pipeline(transaction=False)
        for i in range(2, 2000):
            fast(pipe, "s", "b", i, "a", "x", 5)
        acks = [as_map(x) for x in pipe.execute() if not is_ok(x)]
        assert acks and all(1 <= a["ack_msgs"] <= 5 for a in acks)

    def test_slows_down_when_fast_publishers_grow(self, r):
        assert as_map(fast(r, "s", "b", 1, "a", "1", 64))["ack_msgs"] == 16
        for n in range(16):
            as_map(fast(r, "s", f"other{n}", 1, "a", "1", 64))
        replies = [fast(r, "s", "b", i, "a", "x", 64) for i in range(2, 18)]
        # 17 active: halving stops at the floor, BUDGET // (4 * 17) = 15
        assert as_map(replies[-1]) == {"type": "ack", "seq": 17, "ack_msgs": 15}

    def test_ramp_up_and_down_by_doubling_and_halving(self):
        batch = FastBatch(b"k", b"b", Ingest())
        batch.set_mode(100, False, b"100", b"ok")
        batch.start_flow(2)
        assert batch.ack_msgs == 100                       # another publisher: the floor (128) under the flow
        assert batch.adjust(2, 9 << 20, 0) == 50           # unsynced AOF bytes grew
        assert batch.adjust(2, 9 << 20, 0) == 25
        assert batch.adjust(2, 0, 6_000_000) == 25         # a slow loop turn: below its floor (100), kept
        assert batch.adjust(3, 0, 0) == 25                 # one more publisher: the same
        assert batch.adjust(3, 0, 3_000_000) == 50         # it keeps up: doubled
        assert batch.adjust(3, 0, 999_999) == 100          # with time to spare: up by 4 (to the flow)
        batch.ack_msgs = 1
        assert [batch.adjust(3, 0, 0) for _ in range(5)] == [4, 16, 64, 100, 100]
        batch.ack_msgs = 1
        assert [batch.adjust(3, 0, 1_000_000) for _ in range(8)] == [2, 4, 8, 16, 32, 64, 100, 100]
        many = BUDGET // 64
        assert batch.adjust(64, 0, 0) <= many              # a share of the budget
        crowded = FastBatch(b"k", b"c", Ingest())  # 16 publishers: a slow turn halves down to 1024 // 64
        crowded.set_mode(64, False, b"64", b"ok")
        crowded.start_flow(16)
        assert crowded.ack_msgs == 16
        assert [crowded.adjust(16, 0, 2_000_000) for _ in range(3)] == [32, 64, 64]
        assert [crowded.adjust(16, 0, 6_000_000) for _ in range(3)] == [32, 16, 16]
        assert [crowded.adjust(16, 9 << 20, 0) for _ in range(5)] == [8, 4, 2, 1, 1]  # unsynced bytes: to 1
        late = FastBatch(b"k", b"d", Ingest())  # 300 publishers: the floor is below 1, start at 1
        late.set_mode(64, False, b"64", b"ok")
        late.start_flow(300)
        assert late.ack_msgs == 1

    def test_keeps_steady_only_when_adjust_would_change_nothing(self):
        """FastBatch.keeps_steady (which the pipelined run inlines to skip adjust):
        over random walks of the measures, whenever it holds, adjust leaves the
        interval and the publishers seen as they are; and a batch alone that keeps
        up settles there (the skip is taken)."""
        import random

        from tstream.engine.ingest import TURN_HIGH_NS, UNSYNCED_HIGH

        rng = random.Random(16)
        steady_seen = 0
        for _ in range(300):
            batch = FastBatch(b"k", b"b", Ingest())
            flow = rng.choice([1, 3, 16, 64, 100, 1000, 10_000])
            batch.set_mode(flow, False, b"%d" % flow, b"ok")
            batch.start_flow(rng.choice([0, 1, 2, 17, 300]))
            for _ in range(40):
                if rng.random() < 0.05:
                    flow = rng.choice([1, 3, 16, 64, 100, 1000])
                    batch.set_mode(flow, False, b"%d" % flow, b"ok")
                measures = (rng.choice([0, 1, 1, 1, 2, 3, 17, 300]),
                            rng.choice([0, 0, 0, UNSYNCED_HIGH, UNSYNCED_HIGH + 1]),
                            rng.choice([0, 999_999, 1_000_000, 3_000_000, TURN_HIGH_NS, TURN_HIGH_NS + 1]))
                before = (batch.ack_msgs, batch.seen_active)
                if batch.keeps_steady(*measures):
                    steady_seen += 1
                    assert batch.adjust(*measures) == before[0]
                    assert (batch.ack_msgs, batch.seen_active) == before and batch.keeps_steady(*measures)
                else:
                    batch.adjust(*measures)
        assert steady_seen > 300
        alone = FastBatch(b"k", b"a", Ingest())
        alone.set_mode(64, False, b"64", b"ok")
        alone.start_flow(1)
        assert not alone.keeps_steady(1, 0, 0)
        assert [alone.adjust(1, 0, 0) for _ in range(2)] == [64, 64] and alone.keeps_steady(1, 0, 0)
        assert not alone.keeps_steady(2, 0, 0) and not alone.keeps_steady(1, UNSYNCED_HIGH + 1, 0)
        assert not alone.keeps_steady(1, 0, TURN_HIGH_NS + 1)

    @pytest.mark.parametrize("aof", [None, "no", "always"])
    def test_the_turn_measure_is_the_loop_threads_cpu_time(self, tmp_path, aof):
        """The flow control reads the loop turns' CPU time (TurnEnd.busy_cpu_ns): turns
        long in wall time only (the loop waiting, as for a core) leave ack_msgs as it
        is, turns long in CPU halve it.  The real Server and TurnEnd, no connection.
        With the AOF on, the turn ends through the commit (its CPU time left out: read
        from the thread's clock under ``always``, its wall time under ``no``)."""
        import asyncio

        from tstream.commands.ingest import _measures

        async def main() -> None:
            server = _embedded_server(tmp_path, aof)
            turn_end = server.turn_end
            turn_end.schedule()
            turn_end.run()
            assert turn_end.busy_cpu_ns == 0  # no fast batch active: not measured
            batch = FastBatch(b"k", b"b", Ingest())
            batch.set_mode(1000, False, b"1000", b"ok")
            server.fast.track(batch)
            batch.start_flow(1)
            batch.ack_msgs = 1000
            for _ in range(12):  # turns of 20 ms of wall time, almost no CPU
                turn_end.schedule()
                time.sleep(0.02)
                turn_end.run()
            assert turn_end.busy_ns > 10_000_000 and turn_end.busy_cpu_ns < 2_000_000
            assert batch.adjust(*_measures(server)) == 1000  # not halved (at the flow already)
            for _ in range(12):  # turns of 20 ms of CPU
                turn_end.schedule()
                _burn_cpu(20_000_000)
                turn_end.run()
            assert turn_end.busy_cpu_ns > 10_000_000
            assert batch.adjust(*_measures(server)) == 500  # halved
            server.fast.ended(batch)

        asyncio.run(main())

    def test_a_commit_that_waited_leaves_the_turn_out_of_the_cpu_measure(self, tmp_path):
        """Under ``appendfsync no`` the commit's wall time stands for its CPU time;
        a commit that waited longer than COMMIT_WALL_BOUND (preempted, throttled)
        would make a busy turn read as free: that turn is left out of the average."""
        import asyncio

        from tstream.server.turns import COMMIT_WALL_BOUND

        async def main() -> None:
            server = _embedded_server(tmp_path, "no")
            turn_end = server.turn_end
            batch = FastBatch(b"k", b"b", Ingest())
            batch.set_mode(1000, False, b"1000", b"ok")
            server.fast.track(batch)
            for _ in range(12):  # busy turns, quick commits: measured
                turn_end.schedule()
                _burn_cpu(5_000_000)
                turn_end.run()
            measured = turn_end.busy_cpu_ns
            assert measured > 3_000_000
            commit = server.persistence.commit_turn

            def slow_commit() -> None:  # (a write that waits: the wall time, not the CPU)
                commit()
                time.sleep(COMMIT_WALL_BOUND * 20)
            server.persistence.commit_turn = slow_commit
            for _ in range(12):  # busy turns whose commit waited 10 ms: left out, not read as 0
                turn_end.schedule()
                _burn_cpu(5_000_000)
                turn_end.run()
            assert turn_end.busy_cpu_ns == measured
            server.fast.ended(batch)

        asyncio.run(main())

    def test_a_runs_batch_seqs_are_checked_exactly(self):
        """commands.ingest.consecutive, the pipelined run's check, against the
        formatted seqs: only ``lo, lo + 1, ...`` in plain decimal pass."""
        import random

        from tstream.commands.ingest import consecutive, consecutive_python

        def formatted(seqs, lo):
            return list(seqs) == [b"%d" % i for i in range(lo, lo + len(seqs))]

        rng = random.Random(7)
        passed = 0
        for _ in range(5000):
            lo = rng.choice([1, 2, 9, 10, 99, 999, 1000, 999_990, rng.randint(1, 10**9)])
            seqs = [b"%d" % i for i in range(lo, lo + rng.choice([1, 2, 3, 64, 700]))]
            if rng.random() < 0.6:  # one seq spelled otherwise, or another number
                i = rng.randrange(len(seqs))
                seqs[i] = rng.choice([b"0" + seqs[i], b"+" + seqs[i], seqs[i][:-1], seqs[i] + b"0",
                                      b" " + seqs[i][1:], seqs[i][:1] + b"_" + seqs[i][1:], b"%d" % (lo + i + 1),
                                      seqs[i - 1], seqs[i] + b" "])
            start = lo + rng.choice([0, 0, 0, -1, 1]) or 1
            expected = formatted(seqs, start)
            assert consecutive(tuple(seqs), start) == expected, (seqs[:3], start)
            assert consecutive_python(tuple(seqs), start) == expected, (seqs[:3], start)
            passed += formatted(seqs, start)
        assert 1000 < passed < 4000

    def test_pipelined_run_replies_and_data(self, r):
        r.config_resetstat()
        assert as_map(fast(r, "s", "b", 1, "a", "d1", 64))["ack_msgs"] == 16
        pipe = r.pipeline(transaction=False)
        for i in range(2, 1001):
            fast(pipe, "s", "b", i, f"sub.{i % 3}", f"d{i}", 64)
        replies = pipe.execute()
        acked = [(i + 2, as_map(x)) for i, x in enumerate(replies) if not is_ok(x)]
        seq, expect = 1, []
        k = 16
        for at, ack in acked:
            assert ack["type"] == "ack" and ack["seq"] == at and 1 <= ack["ack_msgs"] <= 64
            expect.append(seq + k)
            seq, k = at, ack["ack_msgs"]
        assert [at for at, _ in acked] == expect
        got = r.execute_command("TREAD", "s", 1, 2000)
        assert [(e[0], e[1], e[2]) for e in got] == [(1, b"a", b"d1")] + [
            (i, b"sub.%d" % (i % 3), b"d%d" % i) for i in range(2, 1001)]
        stats = r.info("commandstats")["cmdstat_batch"]
        assert stats["calls"] == 1000

    def test_pipelined_run_after_a_gap_acks_in_step(self, r):
        fast(r, "s", "b", 1, "a", "1", 4)  # the next ack point is 5
        assert as_map(fast(r, "s", "b", 10, "a", "10", 4))["type"] == "gap"
        replies = _publish_plain(r, range(11, 23), 4)
        acks = [(i, as_map(x)) for i, x in zip(range(11, 23), replies) if not is_ok(x)]
        # The first message after the gap acks; each ack announces where the next one
        # comes (ack_msgs: 4 here, unless the flow control halved it on a loaded machine).
        assert acks[0][0] == 11 and all(ack["type"] == "ack" and ack["seq"] == i for i, ack in acks)
        for (i, ack), (following, _) in zip(acks, acks[1:]):
            assert following == i + ack["ack_msgs"]
        assert acks[-1][0] + acks[-1][1]["ack_msgs"] > 22 and 1 <= acks[0][1]["ack_msgs"] <= 4
        assert r.execute_command("PING") in (b"PONG", "PONG", True)  # one reply per command: in step

    def test_pipelined_run_on_a_stream_that_turned_batches_off(self, r):
        """The run's allow_batched check (batch_run reads the stream's own config, None
        being the defaults, which allow batches): a stream without a config of its own
        takes the run; once TCONFIG turns batches off, every message of a run is refused."""
        fast(r, "s", "b", 1, "a", "1", 64)
        assert all(is_ok(x) for x in _publish_plain(r, range(2, 10), 64))
        r.execute_command("TCONFIG", "s", "SET", "allow_batched", "no")
        pipe = r.pipeline(transaction=False)
        for i in range(10, 14):
            fast(pipe, "s", "b", i, "a", str(i), 64)
        replies = pipe.execute(raise_on_error=False)
        assert [str(x) for x in replies] == ["10203 batch publish not enabled on stream"] * 4
        assert len(entries(r, "s")) == 9

    def test_pipelined_run_with_duplicates_and_a_gap_falls_back(self, r):
        fast(r, "s", "b", 1, "a", "1")
        pipe = r.pipeline(transaction=False)
        for i in (2, 3, 3, 6, 7):
            fast(pipe, "s", "b", i, "a", str(i))
        replies = [x if is_ok(x) else as_map(x) for x in pipe.execute()]
        assert replies[2] == {"type": "duplicate", "seq": 3}
        assert replies[3] == {"type": "gap", "last_seq": 3, "seq": 6}
        assert [d for _, d in entries(r, "s")] == [b"1", b"2", b"3", b"6", b"7"]


# ---------------------------------------------------------------------------
# Durable resume
# ---------------------------------------------------------------------------

def _publish_plain(c, seqs, flow):
    pipe = c.pipeline(transaction=False)
    for i in seqs:
        fast(pipe, "s", "b", i, "a", str(i), flow)
    return pipe.execute()


def _publish(c, key, bid, seqs, gap="fail"):
    pipe = c.pipeline(transaction=False)
    for i in seqs:
        fast(pipe, key, bid, i, "t", f"m{i}", 32, gap)
    return pipe.execute()


def _resume_check(c, stored_before: int):
    ping = as_map(op(c, "s", "b", 500, "PING", 32, "fail"))
    assert ping["type"] == "ack" and ping["seq"] == stored_before
    replies = _publish(c, "s", "b", range(stored_before - 5, stored_before + 11))
    assert [as_map(x)["type"] for x in replies[:6]] == ["duplicate"] * 6
    assert [d for _, d in entries(c, "s")] == [b"m%d" % i for i in range(1, stored_before + 11)]
    ack = as_map(op(c, "s", "b", stored_before + 11, "EOB", 32, "fail"))
    assert ack["count"] == stored_before + 10 and ack["seq"] == stored_before + 10


class TestDurableResume:
    def test_restart_from_the_aof(self, make_server, tmp_path):
        proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always")
        c = proc.client(protocol=3)
        fast(c, "s", "b", 1, "t", "m1", 32, "fail")
        _publish(c, "s", "b", range(2, 51))
        proc.kill()
        proc.start()
        _resume_check(proc.client(protocol=3), 50)
        check = subprocess.run([sys.executable, "-m", "tstream.persistence.check",
                                str(tmp_path / "appendonlydir")], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr

    def test_restart_after_an_aof_rewrite(self, make_server):
        proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always")
        c = proc.client(protocol=2)
        fast(c, "s", "b", 1, "t", "m1", 32, "fail")
        _publish(c, "s", "b", range(2, 31))
        c.execute_command("BGREWRITEAOF")
        deadline = time.time() + 10
        while c.info("persistence")["aof_rewrite_in_progress"] and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        proc.kill()
        proc.start()
        _resume_check(proc.client(protocol=2), 30)

    def test_restart_from_a_snapshot(self, make_server):
        proc = make_server("--save", "")
        c = proc.client(protocol=3)
        fast(c, "s", "b", 1, "t", "m1", 32, "fail")
        _publish(c, "s", "b", range(2, 21))
        c.execute_command("SAVE")
        proc.kill()
        proc.start()
        _resume_check(proc.client(protocol=3), 20)

    def test_an_abandoned_batch_stays_abandoned_after_a_restart(self, make_server):
        proc = make_server("--save", "", "--appendonly", "yes", "--batch-timeout-ms", "400")
        c = proc.client(protocol=3)
        fast(c, "s", "b", 1, "t", "m1", 32, "fail")
        fast(c, "s", "keep", 1, "t", "k1", 32, "fail")
        for i in range(2, 12):  # "keep" stays active, "b" goes idle
            time.sleep(0.1)
            fast(c, "s", "keep", i, "t", f"k{i}", 32, "fail")
        assert "10206" in error_of(lambda: op(c, "s", "b", 1, "PING"))
        proc.stop()
        proc.start()
        c = proc.client(protocol=3)
        assert "10206" in error_of(lambda: op(c, "s", "b", 1, "PING"))
        assert as_map(op(c, "s", "keep", 11, "PING", 32, "fail"))["seq"] == 11

    def test_a_committed_batch_stays_over_after_a_restart(self, make_server):
        proc = make_server("--save", "", "--appendonly", "yes")
        c = proc.client(protocol=3)
        fast(c, "s", "b", 1, "t", "m1", 32, "fail")
        fast(c, "s", "b", 2, "t", "m2", 32, "fail", "COMMIT")
        proc.stop()
        proc.start()
        c = proc.client(protocol=3)
        assert "10206" in error_of(lambda: op(c, "s", "b", 2, "PING"))


# ---------------------------------------------------------------------------
# Exactly once across SIGKILL
# ---------------------------------------------------------------------------

def _publisher(port: int, n: int, total: int, stop, done: dict, kills_done) -> None:
    """Publisher ``n``: messages 1..total of batch ``p{n}`` (gap fail), resuming with PING
    after every reconnect; records what it saw in ``done[n]``.

    The publisher paces its chunks and holds its final EOB until ``kills_done`` (an
    Event) is set, when the test has finished killing the server, so that every publisher
    lives through the kills (a fast publisher would otherwise finish before the
    first one and never resume)."""
    import random

    key, bid, subject = "s", f"p{n}", f"p{n}"
    rng = random.Random(n)
    nxt, pings, resumed_mid_batch = 1, 0, 0
    c = None
    while not stop.is_set():
        try:
            if c is None:
                # no transparent retry: every crash is seen, and answered with a PING
                c = redis.Redis(port=port, protocol=3, socket_timeout=5, retry=Retry(NoBackoff(), 0))
                try:
                    ping = as_map(c.execute_command("BATCH", key, bid, max(nxt - 1, 1), "FAST", 64, "fail", "PING"))
                    nxt = ping["seq"] + 1
                    pings += 1
                    resumed_mid_batch += nxt <= total
                except redis.ResponseError as exc:
                    if "10206" not in str(exc):
                        raise
                    nxt = 1  # nothing of the batch was stored
            if nxt > total:
                if not kills_done.is_set():
                    time.sleep(0.02)
                    continue
                ack = as_map(c.execute_command("BATCH", key, bid, total + 1, "FAST", 64, "fail", "EOB"))
                done[n] = (ack, pings, resumed_mid_batch)
                return
            if nxt == 1:
                first = as_map(c.execute_command("BATCH", key, bid, 1, subject, "1", "FAST", 64, "fail"))
                assert first["type"] == "ack"
                nxt = 2
                continue
            chunk = range(nxt, min(nxt + rng.randint(1, 80), total + 1))
            pipe = c.pipeline(transaction=False)
            for i in chunk:
                pipe.execute_command("BATCH", key, bid, i, subject, str(i), "FAST", 64, "fail")
            for reply in pipe.execute():
                if not is_ok(reply):
                    assert isinstance(reply, (dict, list)) and as_map(reply)["type"] in ("ack", "duplicate"), reply
            nxt = chunk[-1] + 1
            time.sleep(rng.uniform(0, 0.05))
        except (redis.ConnectionError, redis.TimeoutError, ConnectionResetError):
            c = None
            time.sleep(0.05)


@pytest.mark.slow
def test_sigkill_every_message_stored_exactly_once_in_order(make_server, tmp_path):
    import random
    import threading

    proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always")
    stop, kills_done = threading.Event(), threading.Event()
    done: dict = {}
    total = 4000
    threads = [threading.Thread(target=_publisher, args=(proc.port, n, total, stop, done, kills_done), daemon=True)
               for n in range(8)]
    for t in threads:
        t.start()
    rng = random.Random(7)
    try:
        for _ in range(10):
            time.sleep(rng.uniform(0.1, 0.6))
            proc.kill()
            proc.start()
        kills_done.set()
        deadline = time.time() + 120
        while len(done) < 8 and time.time() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert len(done) == 8
    c = proc.client(protocol=3)
    got = c.execute_command("TREAD", "s", 1, 100000)
    per: dict = {}
    for _, subject, data in got:
        per.setdefault(subject, []).append(int(data))
    for n in range(8):
        assert per[b"p%d" % n] == list(range(1, total + 1)), n
        ack, pings, resumed_mid_batch = done[n]
        assert ack["count"] == total
    assert all(pings >= 1 for _, pings, _ in done.values())  # each resumed with PING
    # and the kills fell inside the batches: every publisher resumed mid-batch at least once
    assert sum(mid >= 1 for _, _, mid in done.values()) == 8, done
    check = subprocess.run([sys.executable, "-m", "tstream.persistence.check", str(tmp_path / "appendonlydir")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


# ---------------------------------------------------------------------------
# Message ids and the duplicate window
# ---------------------------------------------------------------------------

def tw(c, *args):
    return c.execute_command("TWRITE", *args)


class TestMessageIds:
    def test_twrite_with_an_id_stored_once(self, r):
        assert tw(r, "k", "t", "a", "MSGID", "m1") == 1
        assert tw(r, "k", "t", "b", "MSGID", "m2") == 2
        assert tw(r, "k", "t", "again", "MSGID", "m1") == 1  # the original offset
        assert tw(r, "k", "t", "c") == 3
        assert [d for _, d in entries(r, "k")] == [b"a", b"b", b"c"]

    def test_entries_with_msgids(self, r):
        tw(r, "k", "t", "a", "MSGID", "m1")
        assert tw(r, "k", "MSGIDS", "m2", "m1", "m3", "m3", "ENTRIES", "t", "b", "t", "dup", "t", "c", "t",
                  "dup2") == 2
        assert [d for _, d in entries(r, "k")] == [b"a", b"b", b"c"]
        assert tw(r, "k", "BACKLOG", 10, "MSGIDS", "m1", "m4", "ENTRIES", "t", "x", "t", "d") == 1
        assert [d for _, d in entries(r, "k")] == [b"a", b"b", b"c", b"d"]
        assert "one id per entry" in error_of(lambda: tw(r, "k", "MSGIDS", "m9", "ENTRIES", "t", "x", "t", "y"))
        assert "syntax" in error_of(lambda: tw(r, "k", "t", "a", "MSGIDX", "m1"))

    def test_pipelined_ids(self, r):
        tw(r, "k", "t", "first", "MSGID", "first")
        pipe = r.pipeline(transaction=False)
        for i in range(200):
            pipe.execute_command("TWRITE", "k", "t", f"d{i}", "MSGID", f"id{i}")
        assert pipe.execute() == list(range(2, 202))
        pipe = r.pipeline(transaction=False)
        for i in range(195, 205):
            pipe.execute_command("TWRITE", "k", "t", f"d{i}", "MSGID", f"id{i}")
        assert pipe.execute() == [197, 198, 199, 200, 201, 202, 203, 204, 205, 206]
        assert len(entries(r, "k")) == 206

    def test_pipelined_ids_repeated_within_a_run(self, r):
        tw(r, "k", "t", "first", "MSGID", "first")
        pipe = r.pipeline(transaction=False)
        for i in (1, 2, 1, 3, 2, 4):
            pipe.execute_command("TWRITE", "k", "t", f"d{i}", "MSGID", f"id{i}")
        assert pipe.execute() == [2, 3, 2, 4, 3, 5]
        pipe = r.pipeline(transaction=False)  # the ids of the run that fell back are in the window
        for i in (4, 5, 3, 6):
            pipe.execute_command("TWRITE", "k", "t", f"d{i}", "MSGID", f"id{i}")
        assert pipe.execute() == [5, 6, 4, 7]
        assert [d for _, d in entries(r, "k")] == [b"first", b"d1", b"d2", b"d3", b"d4", b"d5", b"d6"]

    def test_window_ages_out_and_zero_disables(self, r):
        r.execute_command("TCONFIG", "k", "SET", "duplicate_window_ms", 150)
        assert tw(r, "k", "t", "a", "MSGID", "m") == 1
        assert tw(r, "k", "t", "a", "MSGID", "m") == 1
        time.sleep(0.25)
        assert tw(r, "k", "t", "a", "MSGID", "m") == 2
        r.execute_command("TCONFIG", "k", "SET", "duplicate_window_ms", 0)
        assert tw(r, "k", "t", "a", "MSGID", "m") == 3
        assert tw(r, "k", "t", "a", "MSGID", "m") == 4

    def test_atomic_batch(self, r):
        tw(r, "k", "t", "a", "MSGID", "m1")
        r.execute_command("BATCH", "k", "b", 1, "t", "x", "MSGID", "m1")
        r.execute_command("BATCH", "k", "b", 2, "t", "y", "MSGID", "m2")
        ack = as_map(r.execute_command("BATCH", "k", "b", 3, "t", "z", "COMMIT"))
        assert ack == {"stream": b"k", "seq": 3, "batch": b"b", "count": 3, "duplicate": 1}
        assert [d for _, d in entries(r, "k")] == [b"a", b"y", b"z"]
        r.execute_command("BATCH", "k", "c", 1, "t", "x", "MSGID", "m5")
        assert error_of(lambda: r.execute_command("BATCH", "k", "c", 2, "t", "x", "MSGID", "m5")) == \
            "10201 duplicate message id is in process"
        assert "10176" in error_of(lambda: r.execute_command("BATCH", "k", "c", 3, "EOB"))

    def test_fast_batch(self, r):
        tw(r, "k", "t", "a", "MSGID", "m1")
        fast(r, "k", "b", 1, "t", "x", 10, "ok", "MSGID", "m2")
        assert as_map(fast(r, "k", "b", 2, "t", "y", 10, "ok", "MSGID", "m1")) == {
            "type": "ack", "seq": 2, "ack_msgs": 10, "duplicate": 1}
        assert is_ok(fast(r, "k", "b", 3, "t", "z", 10, "ok", "MSGID", "m3"))
        ack = as_map(fast(r, "k", "b", 4, "t", "w", 10, "ok", "MSGID", "m3", "COMMIT"))
        assert ack == {"stream": b"k", "seq": 3, "batch": b"b", "count": 4, "duplicate": 1}
        assert [d for _, d in entries(r, "k")] == [b"a", b"x", b"z"]

    def test_claim_run_enters_a_run_or_nothing(self):
        ingest = Ingest()
        ingest.add_ids([b"old"], 1, 100)
        assert ingest.claim_run((b"a", b"b", b"c"), 2, 200, 1000, 200)
        assert [ingest.seen(m, 300, 1000) for m in (b"old", b"a", b"b", b"c", b"d")] == [1, 2, 3, 4, None]
        before = ingest.window.live()
        assert not ingest.claim_run((b"d", b"e", b"d"), 5, 300, 1000, 300)  # repeated within the run
        assert not ingest.claim_run((b"d", b"b"), 5, 300, 1000, 300)  # stored within the window
        assert ingest.window.live() == before and ingest.window.records() == 2
        assert ingest.export()["ids"] == [(b"old", 1), (b"a", 2), (b"b", 3), (b"c", 4)]
        assert Ingest.load(b"k", ingest.export()).seen(b"c", 300, 1000) == 4
        assert ingest.claim_run((b"old", b"f"), 5, 1100, 1000, 1100)  # "old" aged out (stored at 100)
        assert [ingest.seen(m, 1150, 1000) for m in (b"old", b"a", b"f")] == [5, 2, 6]

    def test_expiry_drops_each_record_s_own_ids(self):
        # Each write's or run's record drops exactly its ids, never by the table's
        # order: an id entered again (as the AOF's replay does once the window let it
        # go) keeps its newer entry; a run stored in part records only what it stored.
        ingest = Ingest()
        ingest.add_ids([b"x", None, b"y"], 1, 100)
        assert ingest.claim_run((b"a", b"b", b"c"), 4, 150, 1000, 150)
        ingest.truncate_run(2)  # c was not stored
        ingest.add_ids([b"x"], 6, 200)  # entered again (a replay): its newer offset
        assert ingest.export()["ids"] == [(b"y", 3), (b"a", 4), (b"b", 5), (b"x", 6)]
        assert ingest.export()["runs"] == [[100, 1], [150, 2], [200, 1]]
        loaded = Ingest.load(b"k", ingest.export())
        for table in (ingest, loaded):
            assert [table.seen(m, 1120, 1000) for m in (b"x", b"y", b"a", b"c")] == [6, None, 4, None]
            assert [table.seen(m, 1160, 1000) for m in (b"x", b"a", b"b")] == [6, None, None]
            assert table.seen(b"x", 1200, 1000) is None and not len(table.window) and not table.window.records()

    @pytest.mark.parametrize("how", ["aof", "snapshot"])
    def test_window_survives_a_restart(self, make_server, how):
        args = ("--save", "", "--appendonly", "yes") if how == "aof" else ("--save", "")
        proc = make_server(*args)
        c = proc.client(protocol=3)
        tw(c, "k", "t", "a", "MSGID", "m1")
        tw(c, "k", "MSGIDS", "m2", "m3", "ENTRIES", "t", "b", "t", "c")
        r0 = c.pipeline(transaction=False)
        for i in range(5):
            r0.execute_command("TWRITE", "k", "t", f"p{i}", "MSGID", f"p{i}")
        r0.execute()
        if how == "snapshot":
            c.execute_command("SAVE")
        proc.stop() if how == "aof" else proc.kill()
        proc.start()
        c = proc.client(protocol=3)
        assert [tw(c, "k", "t", "x", "MSGID", m) for m in ("m1", "m2", "m3", "p0", "p4")] == [1, 2, 3, 4, 8]
        assert tw(c, "k", "t", "new", "MSGID", "m4") == 9


def _exchange(port: int, chunks: list[list[bytes]]) -> bytes:
    """Send each chunk of commands in one write, waiting for its replies before
    the next; the replies' bytes as received."""
    import socket

    import hiredis
    raw = []
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        reader = hiredis.Reader()
        for chunk in chunks:
            sock.sendall(b"".join(chunk))
            got = 0
            while got < len(chunk):
                if reader.gets() is not False:
                    got += 1
                    continue
                data = sock.recv(1 << 16)
                assert data, "connection closed"
                raw.append(data)
                reader.feed(data)
    return b"".join(raw)


def test_pipelined_msgid_runs_reply_as_one_by_one(server):
    """The MSGID runs of one read (commands.streams._msgid_run) reply byte for
    byte as the same commands sent one at a time, and store the same entries:
    an id repeated within the run, an id stored within the window, an id that
    aged out of it, a run mixing TWRITE with and without MSGID, a run of new
    ids, then the same run again."""
    def run(key: str, *ids) -> list[bytes]:
        return [_encode("TWRITE", key, "t", f"v-{mid}", "MSGID", mid) if mid is not None
                else _encode("TWRITE", key, "t", "plain") for mid in ids]

    keys = ("mrun:pipelined", "mrun:one")
    for key in keys:
        _exchange(server.port, [[_encode("TCONFIG", key, "SET", "duplicate_window_ms", 2000)],
                                run(key, "aged", "old0")])
    time.sleep(2.2)  # "aged" and "old0" age out
    for key in keys:
        _exchange(server.port, [run(key, "old")])
    runs = [("n1", "n2", "n1", "n3", "n2"),                 # repeated within the run
            ("n4", "old", "n5"),                            # stored within the window
            ("aged", "n6"),                                 # aged out: stored again
            ("n7", None, "n7", "n8", None),                 # with and without MSGID
            ("n9", "n10", "n11", "n12"),                    # all new
            ("n9", "n10", "n11", "n12"),                    # all stored
            ("old0", "old0", "n13")]                        # aged out, then repeated
    pipelined = _exchange(server.port, [run(keys[0], *ids) for ids in runs])
    one = _exchange(server.port, [[command] for ids in runs for command in run(keys[1], *ids)])
    assert pipelined == one
    assert one == b"".join(b":%d\r\n" % n for n in (
        4, 5, 4, 6, 5, 7, 3, 8, 9, 10, 11, 12, 11, 13, 14, 15, 16, 17, 18, 15, 16, 17, 18, 19, 19, 20))
    c = server.client()
    try:
        assert c.execute_command("TREAD", keys[0], 1, 100) == c.execute_command("TREAD", keys[1], 1, 100)
    finally:
        c.close()


# ---------------------------------------------------------------------------
# The turn budget across connections (server.connection TURN_TOTAL_NS)
# ---------------------------------------------------------------------------

def _raw_pipeline(port: int, commands: list[bytes]):
    """A socket that has sent ``commands`` (encoded) in one write."""
    import socket
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(b"".join(commands))
    return sock


def _read_replies(sock, count: int) -> list:
    import hiredis
    reader = hiredis.Reader()
    replies: list = []
    while len(replies) < count:
        reply = reader.gets()
        if reply is False:
            chunk = sock.recv(1 << 16)
            assert chunk, "connection closed"
            reader.feed(chunk)
            continue
        replies.append(reply)
    return replies


def _encode(*words) -> bytes:
    parts = [b"*%d\r\n" % len(words)]
    for word in words:
        word = word if isinstance(word, bytes) else str(word).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(word), word))
    return b"".join(parts)


class TestTurnBudget:
    def test_many_pipelining_connections_get_every_reply_in_order(self, server, r2):
        """Eight connections each send thousands of commands at once: turns pass
        their budget, reads wait for later turns, and every reply still comes
        back, in order, on its own connection."""
        n = 3000
        socks = []
        for i in range(4):
            socks.append(_raw_pipeline(server.port, [_encode("TWRITE", f"tb:w{i}", "t", f"v{j}")
                                                     for j in range(n)]))
        for i in range(4):
            socks.append(_raw_pipeline(server.port, [_encode("BATCH", "tb:fast", f"b{i}", j, "s", f"{i}-{j}",
                                                             "FAST", 64, "ok") for j in range(1, n + 1)]
                                       + [_encode("BATCH", "tb:fast", f"b{i}", n + 1, "FAST", 64, "ok", "EOB")]))
        try:
            for i, sock in enumerate(socks[:4]):
                assert _read_replies(sock, n) == list(range(1, n + 1)), f"TWRITE connection {i}"
            for sock in socks[4:]:
                replies = _read_replies(sock, n + 1)
                acks = [x for x in replies[:n] if x != b"OK"]
                assert acks and all(x[:2] == [b"type", b"ack"] for x in acks), acks[:3]
                seqs = [x[3] for x in acks]
                assert seqs == sorted(seqs) and seqs[0] == 1
                final = dict(zip(replies[n][::2], replies[n][1::2]))
                assert final[b"count"] == n
        finally:
            for sock in socks:
                sock.close()
        datas = [d for _, d in entries(r2, "tb:fast")]
        assert len(datas) == 4 * n
        for i in range(4):  # each batch's messages in its order
            mine = [d for d in datas if d.startswith(b"%d-" % i)]
            assert mine == [b"%d-%d" % (i, j) for j in range(1, n + 1)]


def _c_decimal_run():
    """resp/_speedups.c's ``decimal_run``; fails (not skips) where the extension is
    off or not built, as the C parser's own tests do (marked ``speedups``)."""
    from tstream.commands import ingest
    if ingest.decimal_run is None:
        pytest.fail("the C extension is off (TSTREAM_PURE_PYTHON) or not built: deselect with -m 'not speedups'")
    return ingest.decimal_run


@pytest.mark.speedups
def test_the_c_batch_seq_check_agrees_with_the_python_one():
    """decimal_run (C) against consecutive_python on random runs, right and
    wrong (a digit changed, a sign, a leading zero, a seq cut or lengthened,
    two swapped, the run off by one), across powers of ten and up to 10**19:
    True/False exactly as the Python check, None only where it may not decide."""
    import random

    from tstream.commands.ingest import consecutive_python
    decimal_run = _c_decimal_run()
    rng = random.Random(16)
    decided = passed = 0
    for _ in range(20000):
        lo = max(1, rng.choice([rng.randint(1, 10 ** rng.randint(1, 19)),
                                10 ** rng.randint(0, 18) - rng.randint(0, 700)]))
        seqs = [b"%d" % i for i in range(lo, lo + rng.choice([1, 2, 3, 16, 64, 128, 700]))]
        for _ in range(rng.choice([0, 0, 1, 2])):
            i = rng.randrange(len(seqs))
            seq = bytearray(seqs[i])
            seq[rng.randrange(len(seq))] = rng.choice(b"0123456789 +-x")
            seqs[i] = bytes(seq)
        if rng.random() < 0.2:
            i = rng.randrange(len(seqs))
            seqs[i] = rng.choice([b"0" + seqs[i], b"+" + seqs[i], seqs[i][:-1], seqs[i] + b"0", b"", seqs[i - 1]])
        start = max(1, lo + rng.choice([0, 0, 0, -1, 1]))
        expected = consecutive_python(tuple(seqs), start)
        answer = decimal_run(tuple(seqs), start)
        if answer is None:
            assert start > 10 ** 17
            continue
        assert answer is expected, (seqs[:3], start)
        decided += 1
        passed += expected
    assert decided > 15000 and 3000 < passed < decided - 3000
    # What it leaves to Python: a start it does not count from, an element that is not bytes.
    assert decimal_run((b"0", b"1"), 0) is None and decimal_run((b"1",), 10 ** 17 + 1) is None
    assert decimal_run((b"1", bytearray(b"2")), 1) is None and decimal_run((b"1", "2"), 1) is None
    assert decimal_run((b"1", b"2"), -5) is None and decimal_run((b"1",), 1 << 80) is None
    assert decimal_run((b"9", b"10", b"11"), 9) is True and decimal_run((b"99", b"100"), 99) is True
    assert decimal_run((b"9", b"010"), 9) is False and decimal_run((), 1) is True
    with pytest.raises(TypeError):
        decimal_run([b"1"], 1)
    with pytest.raises(TypeError):
        decimal_run((b"1",), b"1")


@pytest.mark.speedups
def test_the_c_batch_seq_check_allocates_nothing():
    """decimal_run allocates no memory (the expected seq is a counter on the C
    stack): with every allocation failing it still answers, and rightly."""
    import _testcapi
    decimal_run = _c_decimal_run()
    seqs = tuple(b"%d" % i for i in range(99_990, 100_120))
    wrong = seqs[:5] + (b"99996",) + seqs[6:]
    lo = 99_990
    answers = []
    for start in range(0, 8):
        right = bad = None
        _testcapi.set_nomemory(start, 0)  # every allocation from the start-th on fails
        try:
            right = decimal_run(seqs, lo)
            bad = decimal_run(wrong, lo)
        finally:
            _testcapi.remove_mem_hooks()
        answers.append((right, bad))
    assert answers == [(True, False)] * 8


def _c_fast_run_columns():
    """resp/_speedups.c's ``fast_run_columns``; fails (not skips) without the extension."""
    from tstream.commands import ingest
    if ingest.fast_run_columns is None:
        pytest.fail("the C extension is off (TSTREAM_PURE_PYTHON) or not built: deselect with -m 'not speedups'")
    return ingest.fast_run_columns


def _random_fast_run(rng):
    """A random run of 9-word FAST commands (lists of bytes) and a start: mostly
    one batch's consecutive messages, the words shared as the parser shares them,
    with random faults (another key, id, flow, gap or FAST spelling, a seq off,
    a word equal but not the same object, subjects that differ)."""
    lo = max(1, rng.choice([rng.randint(1, 10 ** rng.randint(1, 18)), 10 ** rng.randint(0, 17) - rng.randint(0, 40)]))
    count = rng.choice([1, 2, 3, 16, 64, 128])
    model = [b"BATCH", b"k", b"b1", None, b"orders", None, b"FAST", b"64", b"ok"]
    argvs = []
    for i in range(count):
        argv = list(model)
        argv[3] = b"%d" % (lo + i)
        argv[5] = b"data-%d" % rng.randrange(1000)
        argvs.append(argv)
    faults = rng.choice([0, 0, 1, 2, 3])
    for _ in range(faults):
        argv = argvs[rng.randrange(count)]
        place = rng.choice([1, 2, 3, 4, 4, 6, 7, 8])
        argv[place] = rng.choice([
            bytes(bytearray(argv[place])),  # equal, not the same object
            argv[place] + b"x", b"", b"fast", b"0" + argv[place], b"%d" % (lo + rng.randint(-2, count + 2)),
        ])
    start = max(1, lo + rng.choice([0, 0, 0, -1, 1]))
    return argvs, start


@pytest.mark.speedups
def test_the_c_run_columns_agree_with_the_python_ones():
    """fast_run_columns (C) against run_columns_python on random runs: the same
    False, or the same columns (equal, and the one-subject column made of the
    first subject object, as Python's); None only where it may not decide."""
    import random

    from tstream.commands.ingest import run_columns_python
    fast_run_columns = _c_fast_run_columns()
    rng = random.Random(11)
    taken = refused = 0
    for _ in range(6000):
        argvs, start = _random_fast_run(rng)
        expected = run_columns_python(argvs, start)
        answer = fast_run_columns(argvs, start)
        if answer is None:
            assert start > 10 ** 17
            continue
        if expected is False:
            assert answer is False, (argvs[:2], start)
            refused += 1
            continue
        subjects, datas = answer
        assert type(subjects) is tuple and type(datas) is tuple
        assert subjects == expected[0] and datas == expected[1]
        assert all(a is b for a, b in zip(datas, expected[1]))
        one = expected[0].count(expected[0][0]) == len(argvs)
        assert all(s is argvs[0][4] for s in subjects) == (one or all(a[4] is argvs[0][4] for a in argvs))
        taken += 1
    assert taken > 1500 and refused > 1500
    # What it leaves to Python: a start it does not count from, a word that is not bytes, a command
    # that is not a 9-word list.
    run = [[b"BATCH", b"k", b"b", b"%d" % i, b"t", b"v", b"FAST", b"64", b"ok"] for i in (1, 2)]
    assert fast_run_columns(run, 1) == ((b"t", b"t"), (b"v", b"v"))
    assert fast_run_columns(run, 2) is False and fast_run_columns(run, 0) is None
    assert fast_run_columns(run, 10 ** 17 + 1) is None and fast_run_columns(run, 1 << 80) is None
    assert fast_run_columns([run[0], run[1][:8]], 1) is None
    assert fast_run_columns([run[0], tuple(run[1])], 1) is None
    assert fast_run_columns([run[0], run[1][:5] + [bytearray(b"v")] + run[1][6:]], 1) is None
    assert fast_run_columns([run[0], run[1][:2] + ["b"] + run[1][3:]], 1) is None
    with pytest.raises(TypeError):
        fast_run_columns(tuple(run), 1)
    with pytest.raises(TypeError):
        fast_run_columns(run, b"1")


@pytest.mark.speedups
def test_the_c_run_columns_survive_a_memory_error_at_each_allocation():
    """fast_run_columns allocates three tuples: with each allocation failing in
    turn it raises MemoryError (nothing leaked, nothing crashed) and answers
    rightly again afterwards."""
    from .c_extensions import memory_error_count
    fast_run_columns = _c_fast_run_columns()
    run = [[b"BATCH", b"k", b"b", b"%d" % i, b"t%d" % (i % 2), b"v%d" % i, b"FAST", b"64", b"ok"]
           for i in range(95, 160)]
    assert memory_error_count(lambda: fast_run_columns(run, 95), 3) == 3
    assert memory_error_count(lambda: fast_run_columns(run, 96), 3) == 0  # (refused before allocating)
    subjects, datas = fast_run_columns(run, 95)
    assert list(datas) == [argv[5] for argv in run] and list(subjects) == [argv[4] for argv in run]
