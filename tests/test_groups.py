"""Blocking reads and consumer groups over TCP: BLOCK, GROUP, RETRY, TACK, TPENDING.

Several real clients and threads; times are generous where the server's clock is involved
(these are behaviour tests, not timing benchmarks).
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import redis


def offsets(reply):
    return [e[0] for e in reply]


def tread_in_thread(client: redis.Redis, *args):
    """Run a TREAD in a thread; returns (thread, box) where box["reply"] is set when done."""
    box = {}

    def run():
        try:
            box["reply"] = client.execute_command("TREAD", *args)
        except Exception as exc:  # surfaced by the test
            box["error"] = exc
        box["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def wait_blocked(admin: redis.Redis, count: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if admin.info("clients")["blocked_clients"] >= count:
            return
        time.sleep(0.01)
    raise AssertionError(f"expected {count} blocked clients, INFO says "
                         f"{admin.info('clients')['blocked_clients']}")


class TestBlockingPlain:
    def test_block_wakes_on_write(self, server):
        admin = server.client()
        thread, box = tread_in_thread(server.client(), "s", "$", 10, "BLOCK", 5000)
        wait_blocked(admin, 1)
        admin.execute_command("TWRITE", "s", "t", "hello")
        thread.join(5)
        assert box["reply"] == [[1, b"t", b"hello"]]
        assert admin.info("clients")["blocked_clients"] == 0

    def test_timeout_replies_null(self, server):
        c = server.client()
        start = time.monotonic()
        assert c.execute_command("TREAD", "s", 1, 10, "BLOCK", 200) is None
        assert time.monotonic() - start >= 0.19
        c3 = server.client(protocol=3)
        assert c3.execute_command("TREAD", "s", 1, 10, "BLOCK", 50) is None

    def test_data_present_returns_at_once(self, server):
        c = server.client()
        c.execute_command("TWRITE", "s", "t", "x")
        assert c.execute_command("TREAD", "s", 1, 10, "BLOCK", 0) == [[1, b"t", b"x"]]

    def test_block_on_offset_beyond_next(self, server):
        admin = server.client()
        admin.execute_command("TWRITE", "s", "t", "1")
        thread, box = tread_in_thread(server.client(), "s", 4, 10, "BLOCK", 5000)
        wait_blocked(admin, 1)
        admin.execute_command("TWRITE", "s", "t", "2")
        admin.execute_command("TWRITE", "s", "t", "3")
        time.sleep(0.1)
        assert "reply" not in box  # offsets 2 and 3 do not wake it
        admin.execute_command("TWRITE", "s", "t", "4")
        thread.join(5)
        assert box["reply"] == [[4, b"t", b"4"]]

    def test_block_forever_and_many_readers(self, server):
        admin = server.client()
        readers = [tread_in_thread(server.client(), "s", "$", 5, "BLOCK", 0) for _ in range(5)]
        wait_blocked(admin, 5)
        admin.execute_command("TWRITE", "s", "ENTRIES", "a", "1", "b", "2")
        for thread, box in readers:
            thread.join(5)
            assert offsets(box["reply"]) == [1, 2]  # plain readers all see the same entries

    def test_disconnect_while_blocked_is_forgotten(self, server):
        admin = server.client()
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"TREAD s $ 1 BLOCK 0\r\n")
        wait_blocked(admin, 1)
        sock.close()
        deadline = time.monotonic() + 5
        while admin.info("clients")["blocked_clients"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert admin.info("clients")["blocked_clients"] == 0
        assert admin.execute_command("TWRITE", "s", "t", "x") == 1

    def test_client_kill_releases_blocked_client(self, server):
        admin = server.client()
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"CLIENT ID\r\n")
        victim = int(sock.recv(100)[1:-2])
        sock.sendall(b"TREAD s $ 1 BLOCK 0\r\n")
        wait_blocked(admin, 1)
        assert admin.execute_command("CLIENT", "KILL", "ID", victim) == 1
        sock.settimeout(5)
        assert sock.recv(100) == b""
        assert admin.info("clients")["blocked_clients"] == 0

    def test_pipelined_commands_wait_behind_a_blocked_one(self, server):
        admin = server.client()
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"TREAD s $ 1 BLOCK 0\r\nPING\r\n")
        wait_blocked(admin, 1)
        admin.execute_command("TWRITE", "s", "t", "x")
        sock.settimeout(5)
        data = b""
        while not data.endswith(b"+PONG\r\n"):
            data += sock.recv(1000)
        assert data == b"*1\r\n*3\r\n:1\r\n$1\r\nt\r\n$1\r\nx\r\n+PONG\r\n"

    def test_plain_reader_stays_blocked_when_key_deleted(self, server):
        admin = server.client()
        admin.execute_command("TWRITE", "s", "t", "x")
        thread, box = tread_in_thread(server.client(), "s", 2, 1, "BLOCK", 5000)
        wait_blocked(admin, 1)
        admin.delete("s")
        time.sleep(0.1)
        assert "reply" not in box
        admin.execute_command("TWRITE", "s", "ENTRIES", "t", "a", "t", "b")
        thread.join(5)
        assert box["reply"] == [[2, b"t", b"b"]]

    @pytest.mark.parametrize("args, error", [
        (["BLOCK", "-1"], "timeout is negative"),
        (["BLOCK", "x"], "not an integer"),
        (["BLOCK"], "syntax error"),
        (["RETRY", "10", "100"], "syntax error"),
        (["GROUP"], "syntax error"),
        (["GROUP", "g", "RETRY", "10"], "syntax error"),
        (["GROUP", "g", "RETRY", "-1", "10"], "must be positive or zero"),
    ])
    def test_bad_options(self, server, args, error):
        c = server.client()
        with pytest.raises(redis.ResponseError, match=error):
            c.execute_command("TREAD", "s", 1, 1, *args)
        assert c.exists("s") == 0


class TestGroups:
    def test_group_created_at_offset_then_ignored(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 5)
        assert offsets(r.execute_command("TREAD", "s", 3, 2, "GROUP", "g")) == [3, 4]
        assert offsets(r.execute_command("TREAD", "s", 1, 10, "GROUP", "g")) == [5]
        assert r.execute_command("TREAD", "s", 1, 10, "GROUP", "g") == []

    def test_group_start_positions(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 3)
        r.execute_command("TEVICT", "s", 1)
        assert offsets(r.execute_command("TREAD", "s", "-", 10, "GROUP", "first")) == [2, 3]
        assert offsets(r.execute_command("TREAD", "s", 0, 10, "GROUP", "zero")) == [2, 3]
        assert r.execute_command("TREAD", "s", "$", 10, "GROUP", "new") == []
        r.execute_command("TWRITE", "s", "t", "e")
        assert offsets(r.execute_command("TREAD", "s", "$", 10, "GROUP", "new")) == [4]

    def test_repeated_group_read_words_are_parsed_once_and_stay_correct(self, r):
        # The server keeps the parse of a group read by its words (consumers repeat
        # theirs): a repeat must still see the stream as it is now, and a bad read
        # must fail every time.
        read = ("TREAD", "s", "$", 2, "GROUP", "g", "RETRY", 60000, 60000)
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 3)
        assert r.execute_command(*read) == []  # the group starts at the next offset
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 3)
        assert offsets(r.execute_command(*read)) == [4, 5]
        assert offsets(r.execute_command(*read)) == [6]
        assert r.execute_command(*read) == []
        assert [p[:2] for p in r.execute_command("TPENDING", "s", "g")] == [[4, 1], [5, 1], [6, 1]]
        assert offsets(r.execute_command("tread", "s", "$", 2, "GROUP", "h")) == []  # another spelling, group
        for _ in range(2):
            with pytest.raises(redis.ResponseError, match="must be positive or zero"):
                r.execute_command("TREAD", "s", "$", 2, "GROUP", "g", "RETRY", -1, 10)

    def test_group_read_creates_stream(self, r):
        assert r.execute_command("TREAD", "fresh", "-", 10, "GROUP", "g") == []
        assert r.exists("fresh") == 1
        info = r.execute_command("TINFO", "fresh", "GROUPS")
        assert len(info) == 1

    def test_groups_are_independent_and_disjoint_within(self, server):
        a, b, c = server.client(), server.client(), server.client()
        a.execute_command("TWRITE", "s", "ENTRIES", *[x for i in range(10) for x in ("t", str(i))])
        got_a = offsets(a.execute_command("TREAD", "s", "-", 3, "GROUP", "g1"))
        got_b = offsets(b.execute_command("TREAD", "s", "-", 3, "GROUP", "g1"))
        got_c = offsets(c.execute_command("TREAD", "s", "-", 100, "GROUP", "g2"))
        assert got_a == [1, 2, 3] and got_b == [4, 5, 6] and got_c == list(range(1, 11))

    def test_group_skips_missing_entries(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 6)
        r.execute_command("TREAD", "s", "-", 1, "GROUP", "g")
        r.execute_command("TEVICT", "s", 4)
        assert offsets(r.execute_command("TREAD", "s", "-", 10, "GROUP", "g")) == [5, 6]

    def test_group_with_withinfo(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 2)
        reply = r.execute_command("TREAD", "s", "-", 10, "GROUP", "g", "WITHINFO")
        assert reply[0] == [1, 2] and offsets(reply[1:]) == [1, 2]

    def test_blocked_group_readers_are_served_fifo(self, server):
        admin = server.client()
        order = []
        readers = []
        for i in range(3):
            thread, box = tread_in_thread(server.client(), "s", "$", 1, "GROUP", "g", "BLOCK", 5000)
            wait_blocked(admin, i + 1)
            readers.append((i, thread, box))
        for n in range(3):
            admin.execute_command("TWRITE", "s", "t", f"m{n}")
            time.sleep(0.05)
        for i, thread, box in readers:
            thread.join(5)
            order.append((i, offsets(box["reply"])))
        assert order == [(0, [1]), (1, [2]), (2, [3])]

    def test_served_client_requeues_at_the_back(self, server):
        admin = server.client()
        first = socket.create_connection(("127.0.0.1", server.port))
        first.settimeout(5)
        # The first client blocks twice in a row (pipelined); the second blocks once in between.
        first.sendall(b"TREAD s $ 1 GROUP g BLOCK 5000\r\nTREAD s $ 1 GROUP g BLOCK 5000\r\n")
        wait_blocked(admin, 1)
        thread, box = tread_in_thread(server.client(), "s", "$", 1, "GROUP", "g", "BLOCK", 5000)
        wait_blocked(admin, 2)
        admin.execute_command("TWRITE", "s", "t", "a")  # -> first; first re-blocks behind the second
        admin.execute_command("TWRITE", "s", "t", "b")  # -> the second client
        thread.join(5)
        assert offsets(box["reply"]) == [2]
        admin.execute_command("TWRITE", "s", "t", "c")  # -> first again
        data = b""
        while data.count(b"*1\r\n*3\r\n") < 2:
            data += first.recv(1000)
        assert b"$1\r\na\r\n" in data and b"$1\r\nc\r\n" in data

    def test_group_reader_gets_error_when_key_deleted(self, server):
        admin = server.client()
        thread, box = tread_in_thread(server.client(), "s", "$", 1, "GROUP", "g", "BLOCK", 5000)
        wait_blocked(admin, 1)
        admin.delete("s")
        thread.join(5)
        assert "UNBLOCKED" in str(box["error"])


class TestRetryAndAck:
    def test_pending_and_ack(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 5)
        assert offsets(r.execute_command("TREAD", "s", "-", 3, "GROUP", "g", "RETRY", 60000, 600000)) == [1, 2, 3]
        pending = r.execute_command("TPENDING", "s", "g")
        assert [p[0] for p in pending] == [1, 2, 3] and all(p[1] == 1 for p in pending)
        assert all(50000 < p[2] <= 60000 for p in pending)
        assert r.execute_command("TACK", "s", "g", 1, 3, 99) == 2
        assert r.execute_command("TACK", "s", "g", 1) == 0
        assert [p[0] for p in r.execute_command("TPENDING", "s", "g")] == [2]

    def test_ack_range(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 10)
        r.execute_command("TREAD", "s", "-", 10, "GROUP", "g", "RETRY", 60000, 600000)
        assert r.execute_command("TACK", "s", "g", "3-7") == 5
        assert [p[0] for p in r.execute_command("TPENDING", "s", "g")] == [1, 2, 8, 9, 10]

    def test_ack_unknowns_count_zero(self, r):
        assert r.execute_command("TACK", "nokey", "g", 1) == 0
        r.execute_command("TWRITE", "s", "t", "e")
        assert r.execute_command("TACK", "s", "nogroup", 1) == 0
        assert r.execute_command("TPENDING", "s", "nogroup") == []
        assert r.exists("nokey") == 0

    @pytest.mark.parametrize("args, error", [
        (["x"], "not an integer"),
        (["0"], "must be positive"),
        (["5-"], "invalid range"),
        (["7-x"], "invalid range"),
        (["1", "-2"], "must be positive"),
        # the list of plain numbers is checked in one pass (commands/args.py): each of
        # these must still fall back to the per-offset error
        (["1", "01"], "not an integer"),
        (["1", ""], "not an integer"),
        (["2", "0", "3"], "must be positive"),
        (["1", "+2"], "not an integer"),
        (["1", "9" * 19], "not an integer"),
    ])
    def test_ack_bad_input(self, r, args, error):
        r.execute_command("TWRITE", "s", "t", "e")
        r.execute_command("TREAD", "s", "-", 1, "GROUP", "g", "RETRY", 60000, 600000)
        with pytest.raises(redis.ResponseError, match=error):
            r.execute_command("TACK", "s", "g", *args)
        assert len(r.execute_command("TPENDING", "s", "g")) == 1

    def test_due_retry_is_redelivered_before_new_entries(self, server):
        a, b = server.client(), server.client()
        a.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 4)
        assert offsets(a.execute_command("TREAD", "s", "-", 2, "GROUP", "g", "RETRY", 150, 60000)) == [1, 2]
        a.execute_command("TACK", "s", "g", 1)
        assert offsets(b.execute_command("TREAD", "s", "-", 1, "GROUP", "g", "RETRY", 150, 60000)) == [3]
        time.sleep(0.3)
        assert offsets(b.execute_command("TREAD", "s", "-", 2, "GROUP", "g", "RETRY", 150, 60000)) == [2, 3]
        pending = {p[0]: p[1] for p in b.execute_command("TPENDING", "s", "g")}
        assert pending == {2: 2, 3: 2}

    def test_expired_entries_are_dropped(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 2)
        r.execute_command("TREAD", "s", "-", 2, "GROUP", "g", "RETRY", 50, 200)
        time.sleep(0.3)
        assert r.execute_command("TPENDING", "s", "g") == []
        assert r.execute_command("TREAD", "s", "-", 10, "GROUP", "g", "RETRY", 50, 200) == []

    def test_evicted_pending_entries_are_dropped(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 4)
        r.execute_command("TREAD", "s", "-", 4, "GROUP", "g", "RETRY", 60000, 600000)
        r.execute_command("TEVICT", "s", 2)
        assert [p[0] for p in r.execute_command("TPENDING", "s", "g")] == [3, 4]

    def test_max_pending_caps_new_entries(self, server):
        c = server.client()
        c.config_set("group-max-pending", 3)
        try:
            c.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 10)
            assert offsets(c.execute_command("TREAD", "s", "-", 5, "GROUP", "g", "RETRY", 60000, 600000)) == [1, 2, 3]
            assert c.execute_command("TREAD", "s", "-", 5, "GROUP", "g", "RETRY", 60000, 600000) == []
            c.execute_command("TACK", "s", "g", 2)
            assert offsets(c.execute_command("TREAD", "s", "-", 5, "GROUP", "g", "RETRY", 60000, 600000)) == [4]
        finally:
            c.config_set("group-max-pending", 10000)

    def test_blocked_capped_reader_wakes_on_ack(self, server):
        admin = server.client()
        admin.config_set("group-max-pending", 2)
        try:
            admin.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 5)
            admin.execute_command("TREAD", "s", "-", 5, "GROUP", "g", "RETRY", 60000, 600000)
            thread, box = tread_in_thread(server.client(), "s", "-", 5, "GROUP", "g", "RETRY", 60000,
                                          600000, "BLOCK", 5000)
            wait_blocked(admin, 1)
            admin.execute_command("TACK", "s", "g", 1)
            thread.join(5)
            assert offsets(box["reply"]) == [3]
        finally:
            admin.config_set("group-max-pending", 10000)

    def test_blocked_reader_wakes_on_due_retry(self, server):
        admin = server.client()
        admin.execute_command("TWRITE", "s", "t", "e")
        admin.execute_command("TREAD", "s", "-", 1, "GROUP", "g", "RETRY", 200, 60000)
        start = time.monotonic()
        thread, box = tread_in_thread(server.client(), "s", "-", 1, "GROUP", "g", "RETRY", 200, 60000,
                                      "BLOCK", 5000)
        thread.join(5)
        assert offsets(box["reply"]) == [1]
        assert 0.1 < box["at"] - start < 2.0

    def test_tinfo_groups(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 3)
        r.execute_command("TREAD", "s", "-", 2, "GROUP", "g", "RETRY", 60000, 600000)
        groups = r.execute_command("TINFO", "s", "GROUPS")
        group = groups[0]
        if isinstance(group, list):
            group = dict(zip(group[::2], group[1::2]))
        group = {(k.decode() if isinstance(k, bytes) else k): v for k, v in group.items()}
        assert group == {"name": b"g", "next": 3, "pending": 2}
        info = r.execute_command("TINFO", "s")
        info = dict(zip(info[::2], info[1::2])) if isinstance(info, list) else info
        assert info.get(b"groups", info.get("groups")) == 1


class TestConcurrentConsumers:
    def test_four_consumers_get_each_entry_exactly_once(self, server):
        admin = server.client()
        total = 2000
        seen: list[int] = []
        lock = threading.Lock()
        done = threading.Event()

        def consume():
            c = server.client()
            while not done.is_set():
                reply = c.execute_command("TREAD", "work", "-", 10, "GROUP", "g", "RETRY", 30000, 60000,
                                          "BLOCK", 200)
                if not reply:
                    continue
                got = offsets(reply)
                c.execute_command("TACK", "work", "g", *got)
                with lock:
                    seen.extend(got)
                    if len(seen) >= total:
                        done.set()

        threads = [threading.Thread(target=consume, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        for i in range(0, total, 50):
            admin.execute_command("TWRITE", "work", "ENTRIES", *[x for j in range(50) for x in ("t", str(i + j))])
        done.wait(20)
        for t in threads:
            t.join(5)
        assert sorted(seen) == list(range(1, total + 1))
        assert admin.execute_command("TPENDING", "work", "g") == []


class TestBlockTimeouts:
    """BLOCK timeouts live in one heap with one loop timer (server/blocking.py)."""

    def test_timeouts_fire_in_deadline_order_and_served_readers_do_not_time_out(self, server):
        admin = server.client()
        readers = []
        for i, ms in enumerate([600, 200, 400, 5000, 300]):
            key = "tmo-served" if ms == 5000 else f"tmo-{i}"
            readers.append((ms, tread_in_thread(server.client(), key, "$", 1, "BLOCK", ms)))
        wait_blocked(admin, 5)
        start = time.monotonic()
        admin.execute_command("TWRITE", "tmo-served", "t", "v")
        for _, (thread, _) in readers:
            thread.join(10)
        timed_out = sorted((box["at"], ms) for ms, (_, box) in readers if box["reply"] is None)
        assert [ms for _, ms in timed_out] == [200, 300, 400, 600]
        assert timed_out[-1][0] - start < 3  # nobody waits for the 5 s reader's deadline
        served = [box for ms, (_, box) in readers if ms == 5000][0]
        assert served["reply"] == [[1, b"t", b"v"]]
        assert admin.info("clients")["blocked_clients"] == 0

    @pytest.mark.parametrize("read", [("$", 1), ("-", 10, "GROUP", "g")], ids=["plain", "group"])
    def test_served_waiters_do_not_pile_up_in_the_timeout_heap(self, tmp_path, read):
        """Each served waiter leaves a stale entry in the timeout heap, which is counted
        and compacted.  A woken group reader (the head of its queue) leaves in the
        wake-up's own path (BlockingRegistry._serve_key), which must count it as
        _remove does for the others."""
        from tstream.server.embed import ServerThread

        with ServerThread(port=0, dir=tmp_path, save="") as srv:
            reader = redis.Redis(port=srv.port)
            writer = redis.Redis(port=srv.port)
            if "GROUP" in read:
                reader.execute_command("TREAD", "heap", "-", 0, "GROUP", "g")
            for i in range(400):
                thread, box = tread_in_thread(reader, "heap", *read, "BLOCK", 60000)
                while srv.call(lambda: srv.server.blocking.count) < 1:
                    time.sleep(0.001)
                writer.execute_command("TWRITE", "heap", "t", str(i))
                thread.join(5)
                assert box["reply"][0][2] == str(i).encode()
            blocking = srv.server.blocking
            size, stale = srv.call(lambda: (len(blocking._deadlines), blocking._stale_deadlines))
            assert size <= 64 + 1 and stale == size  # compacted: bounded, all of them stale
            assert srv.call(lambda: blocking.count) == 0
            reader.close()
            writer.close()


def test_replies_keep_their_order_when_a_pipelined_read_blocks_and_is_served_in_the_same_turn(server):
    """A pipelined read's replies wait for the end of the loop turn; a blocked command of
    that pipeline served in the same turn must still reply after them."""
    from .conftest import read_until_quiet

    def mb(*args: bytes) -> bytes:
        return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)

    for i in range(40):
        key = b"order-%d" % i
        with socket.create_connection(("127.0.0.1", server.port)) as a, \
                socket.create_connection(("127.0.0.1", server.port)) as b:
            a.sendall(mb(b"PING"))
            b.sendall(mb(b"PING"))
            assert read_until_quiet(a, 0.05) == b"+PONG\r\n" and read_until_quiet(b, 0.05) == b"+PONG\r\n"
            a.sendall(mb(b"TWRITE", key + b"-other", b"t", b"x") + mb(b"TREAD", key, b"1", b"1", b"BLOCK", b"2000"))
            b.sendall(mb(b"TWRITE", key, b"t", b"from-b"))  # often read in the same turn as a's
            reply = read_until_quiet(a, 0.3)
            assert reply == b":1\r\n*1\r\n*3\r\n:1\r\n$1\r\nt\r\n$6\r\nfrom-b\r\n", reply


def test_kept_group_read_parses_are_bounded():
    from tstream.commands.streams import TreadParses

    parses = TreadParses()  # each server has its own (server.tread_parses)
    for i in range(TreadParses.MAX + 10):
        request = parses.parse([b"TREAD", b"k%d" % i, b"-", b"10", b"GROUP", b"g"])
        assert (request.key, request.count, request.group) == (b"k%d" % i, 10, b"g")
        assert len(parses.kept) <= TreadParses.MAX
    parses.parse([b"TREAD", b"k", b"5", b"1"])  # a plain read is not kept
    assert b"TREAD\0k\0005\0001" not in parses.kept
    plain = parses.parse([b"TREAD", b"k", b"$", b"1", b"BLOCK", b"0"])
    plain.offset = 42  # what perform_read does with a plain read's "$": each read has its own request
    again = parses.parse([b"TREAD", b"k", b"$", b"1", b"BLOCK", b"0"])
    assert again is not plain and again.offset == b"$" and again.block_ms == 0
    # A group read's request is never changed: the repeat is the kept one, shared.
    first = parses.parse([b"TREAD", b"k", b"$", b"1", b"GROUP", b"g", b"BLOCK", b"0"])
    assert parses.parse([b"TREAD", b"k", b"$", b"1", b"GROUP", b"g", b"BLOCK", b"0"]) is first


def test_kept_group_read_parses_tell_words_with_nul_bytes_apart():
    """The kept parses are keyed by the words joined with NUL bytes: a repeat whose
    words join to the same bytes but split differently (a NUL inside a word) is a
    different read, parsed on its own (and an error stays an error)."""
    from tstream.commands.errors import CommandError
    from tstream.commands.streams import TreadParses

    parses = TreadParses()
    kept = parses.parse([b"TREAD", b"k", b"-", b"10", b"GROUP", b"g"])
    assert (kept.key, kept.group) == (b"k", b"g")
    # b"k\0-" as the key: the same joined bytes, one word fewer (a count "GROUP": an error)
    with pytest.raises(CommandError):
        parses.parse([b"TREAD", b"k\0-", b"10", b"GROUP", b"g"])
    other = parses.parse([b"TREAD", b"k\0-", b"10", b"5", b"GROUP", b"g"])
    assert (other.key, other.offset, other.count, other.group) == (b"k\0-", 10, 5, b"g")
    assert b"TREAD\0k\0-\00010\0005\0GROUP\0g" not in parses.kept  # a word with a NUL: not kept
    kept_block = parses.parse([b"TREAD", b"k", b"-", b"10", b"GROUP", b"g", b"BLOCK", b"5"])
    assert kept_block.block_ms == 5
    with pytest.raises(CommandError):  # the same joined bytes, with b"g\0BLOCK" as the group: "5" is no keyword
        parses.parse([b"TREAD", b"k", b"-", b"10", b"GROUP", b"g\0BLOCK", b"5"])
    group_with_nul = parses.parse([b"TREAD", b"k", b"-", b"10", b"GROUP", b"g\0BLOCK"])
    assert group_with_nul.group == b"g\0BLOCK" and group_with_nul.block_ms is None
    assert parses.parse([b"TREAD", b"k", b"-", b"10", b"GROUP", b"g", b"BLOCK", b"5"]) is kept_block


class TestGroupReadsAtTheEndOfTheTurn:
    """Group reads run at the end of the loop turn they arrive in (server/turns.py)."""

    @staticmethod
    def mb(*args) -> bytes:
        args = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)

    def test_a_new_reader_queues_behind_the_blocked_ones(self, server):
        # The write and the new reader's read arrive in one read of one connection: the
        # reader blocked before gets the entry, the newcomer finds nothing left.
        from .conftest import read_until_quiet

        admin = server.client()
        admin.execute_command("TREAD", "fifo", "$", 0, "GROUP", "g")
        thread, box = tread_in_thread(server.client(), "fifo", "-", 10, "GROUP", "g", "BLOCK", 5000)
        wait_blocked(admin, 1)
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(self.mb("TWRITE", "fifo", "t", "x") + self.mb("TREAD", "fifo", "-", 10, "GROUP", "g"))
            assert read_until_quiet(sock, 0.3) == b":1\r\n*0\r\n"
        thread.join(5)
        assert box["reply"] == [[1, b"t", b"x"]]

    def test_pipelined_commands_after_a_group_read_keep_their_order(self, server):
        from .conftest import read_until_quiet

        admin = server.client()
        admin.execute_command("TWRITE", "pipe", "t", "a")
        calls_before = admin.info("commandstats").get("cmdstat_tread", {}).get("calls", 0)
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(self.mb("TWRITE", "pipe", "t", "b") + self.mb("TWRITE", "pipe", "t", "c")
                         + self.mb("TREAD", "pipe", "-", 10, "GROUP", "g")
                         + self.mb("PING") + self.mb("TWRITE", "pipe", "t", "d")
                         + self.mb("TREAD", "pipe", "-", 10, "GROUP", "g"))
            reply = read_until_quiet(sock, 0.3)
        # the first read sees the writes before it, not the one after it
        assert reply == (b":2\r\n:3\r\n"
                         b"*3\r\n*3\r\n:1\r\n$1\r\nt\r\n$1\r\na\r\n*3\r\n:2\r\n$1\r\nt\r\n$1\r\nb\r\n"
                         b"*3\r\n:3\r\n$1\r\nt\r\n$1\r\nc\r\n"
                         b"+PONG\r\n:4\r\n"
                         b"*1\r\n*3\r\n:4\r\n$1\r\nt\r\n$1\r\nd\r\n"), reply
        calls = admin.info("commandstats")["cmdstat_tread"]["calls"]
        assert calls - calls_before == 2  # a read that waited for the end of the turn counts once

    def test_a_client_killed_before_the_end_of_the_turn_reads_nothing(self, tmp_path):
        # The read arrives and the client goes in one loop turn (run on the loop
        # thread, so nothing else can interleave): nothing is handed out.
        from tstream.server.embed import ServerThread

        with ServerThread(port=0, dir=tmp_path, save="") as srv:
            admin = redis.Redis(port=srv.port)
            admin.execute_command("TWRITE", "gone", "t", "a")
            victim = redis.Redis(port=srv.port)
            victim_id = victim.client_id()

            def read_then_die():
                connection = srv.server.clients[victim_id]
                connection.data_received(self.mb("TREAD", "gone", "-", 10, "GROUP", "g", "RETRY", 60000, 60000))
                assert connection.blocked is not None  # waiting for the end of the turn
                connection.kill()

            srv.call(read_then_die)
            assert admin.execute_command("TPENDING", "gone", "g") == []
            assert offsets(admin.execute_command("TREAD", "gone", "-", 10, "GROUP", "g")) == [1]
            assert admin.info("clients")["blocked_clients"] == 0
            admin.close()

    def test_a_failing_read_at_the_end_of_the_turn_spares_the_others(self, tmp_path):
        from tstream.commands.errors import CommandError
        from tstream.server.embed import ServerThread

        from .conftest import read_until_quiet

        with ServerThread(port=0, dir=tmp_path, save="") as srv:
            admin = redis.Redis(port=srv.port)
            admin.execute_command("TWRITE", "ok", "t", "a")
            socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(2)]
            ids = []
            for sock in socks:
                sock.sendall(self.mb("CLIENT", "ID"))
                ids.append(int(read_until_quiet(sock, 0.2)[1:-2]))
            blocking = srv.server.blocking
            real = blocking._perform_read

            def perform_read(server, request, blocking):
                if request.key == b"boom":
                    raise RuntimeError("a bug")
                if request.key == b"refused":
                    raise CommandError("ERR refused at the end of the turn")
                return real(server, request, blocking)

            def both_in_one_turn():  # on the loop thread: both reads wait for the same turn end
                blocking._perform_read = perform_read
                srv.server.clients[ids[0]].data_received(self.mb("TREAD", "boom", "-", 1, "GROUP", "g"))
                srv.server.clients[ids[1]].data_received(self.mb("TREAD", "ok", "-", 1, "GROUP", "g"))

            def refused_then_ok():  # a command error reaches its client as is
                srv.server.clients[ids[0]].data_received(self.mb("TREAD", "refused", "-", 1, "GROUP", "g"))
                srv.server.clients[ids[1]].data_received(self.mb("TREAD", "ok", "-", 1, "GROUP", "g"))

            try:
                srv.call(both_in_one_turn)
                assert read_until_quiet(socks[0], 0.3).startswith(b"-ERR internal error")
                assert read_until_quiet(socks[1], 0.3) == b"*1\r\n*3\r\n:1\r\n$1\r\nt\r\n$1\r\na\r\n"
                admin.execute_command("TWRITE", "ok", "t", "b")
                srv.call(refused_then_ok)
                assert read_until_quiet(socks[0], 0.3) == b"-ERR refused at the end of the turn\r\n"
                assert read_until_quiet(socks[1], 0.3) == b"*1\r\n*3\r\n:2\r\n$1\r\nt\r\n$1\r\nb\r\n"
                assert admin.exists("refused") == 0  # nothing was created
            finally:
                srv.call(lambda: setattr(blocking, "_perform_read", real))
            for sock in socks:  # both connections go on
                sock.sendall(self.mb("PING"))
                assert read_until_quiet(sock, 0.2) == b"+PONG\r\n"
                sock.close()
            admin.close()


class TestGroupReadsThatWaitAtOnce:
    """A BLOCK group read whose group has nothing to hand out waits at once (no
    deferral to the end of the turn: BlockingRegistry.wait_now), where the end of
    the turn would have put it."""

    mb = staticmethod(TestGroupReadsAtTheEndOfTheTurn.mb)

    def test_a_read_of_a_drained_group_waits_at_once_and_keeps_its_place(self, tmp_path):
        from tstream.server.embed import ServerThread

        from .conftest import read_until_quiet

        with ServerThread(port=0, dir=tmp_path, save="") as srv:
            admin = redis.Redis(port=srv.port)
            admin.execute_command("TREAD", "now", "$", 0, "GROUP", "g")
            socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(3)]
            ids = []
            for sock in socks:
                sock.sendall(self.mb("CLIENT", "ID"))
                ids.append(int(read_until_quiet(sock, 0.2)[1:-2]))
            blocking = srv.server.blocking

            def three_reads_in_one_turn():  # on the loop thread: nothing else interleaves
                waited = []
                for client_id in ids:
                    connection = srv.server.clients[client_id]
                    connection.data_received(self.mb("TREAD", "now", "-", 10, "GROUP", "g", "BLOCK", 5000))
                    waited.append((connection.blocked is not None, len(blocking.deferred)))
                queue = blocking.groups[b"now"][b"g"]
                return waited, [srv.server.clients[i].blocked is queue[k] for k, i in enumerate(ids)]

            waited, in_order = srv.call(three_reads_in_one_turn)
            assert waited == [(True, 0)] * 3  # blocked, none of them waiting for the turn's end
            assert in_order == [True] * 3  # queued in arrival order
            assert admin.info("clients")["blocked_clients"] == 3
            for n in range(3):
                admin.execute_command("TWRITE", "now", "t", f"m{n}")
            for n, sock in enumerate(socks):  # first come, first served
                assert read_until_quiet(sock, 0.3) == b"*1\r\n*3\r\n:%d\r\n$1\r\nt\r\n$2\r\nm%d\r\n" % (n + 1, n)
                sock.close()
            admin.close()

    def test_a_read_behind_a_deferred_one_of_the_same_turn_is_deferred_too(self, tmp_path):
        # The first read finds an entry (deferred to the turn's end); the second, from
        # another client in the same turn, must not overtake it by waiting at once.
        from tstream.server.embed import ServerThread

        from .conftest import read_until_quiet

        with ServerThread(port=0, dir=tmp_path, save="") as srv:
            admin = redis.Redis(port=srv.port)
            admin.execute_command("TREAD", "turn", "$", 0, "GROUP", "g")
            admin.execute_command("TWRITE", "turn", "t", "a")
            socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(2)]
            ids = []
            for sock in socks:
                sock.sendall(self.mb("CLIENT", "ID"))
                ids.append(int(read_until_quiet(sock, 0.2)[1:-2]))
            blocking = srv.server.blocking

            def two_reads_in_one_turn():
                for client_id in ids:
                    srv.server.clients[client_id].data_received(
                        self.mb("TREAD", "turn", "-", 10, "GROUP", "g", "BLOCK", 5000))
                return len(blocking.deferred)

            assert srv.call(two_reads_in_one_turn) == 2
            assert read_until_quiet(socks[0], 0.3) == b"*1\r\n*3\r\n:1\r\n$1\r\nt\r\n$1\r\na\r\n"
            wait_blocked(admin, 1)  # the second found nothing at the turn's end: it waits
            admin.execute_command("TWRITE", "turn", "t", "b")
            assert read_until_quiet(socks[1], 0.3) == b"*1\r\n*3\r\n:2\r\n$1\r\nt\r\n$1\r\nb\r\n"
            for sock in socks:
                sock.close()
            admin.close()

    def test_reads_that_wait_at_once_time_out_or_wait_and_leave_nothing_behind(self, tmp_path):
        # The wait taken at once (wait_now parks the reader itself): a BLOCK ms read
        # times out with a null, a BLOCK 0 read waits until a write, the woken reader
        # leaves its queue by the head, and nothing of either wait stays behind.
        from tstream.server.embed import ServerThread

        with ServerThread(port=0, dir=tmp_path, save="") as srv:
            admin = redis.Redis(port=srv.port)
            admin.execute_command("TREAD", "once", "$", 0, "GROUP", "g")
            read = ("once", "-", 10, "GROUP", "g", "RETRY", 30000, 600000)
            start = time.monotonic()
            timed, timed_box = tread_in_thread(redis.Redis(port=srv.port), *read, "BLOCK", 300)
            wait_blocked(admin, 1)
            forever, forever_box = tread_in_thread(redis.Redis(port=srv.port), *read, "BLOCK", 0)
            wait_blocked(admin, 2)
            timed.join(5)
            assert timed_box == {"reply": None, "at": timed_box["at"]}  # the timeout's null
            assert 0.2 < timed_box["at"] - start < 3.0
            assert admin.info("clients")["blocked_clients"] == 1
            admin.execute_command("TWRITE", "once", "t", "a")
            forever.join(5)
            assert offsets(forever_box["reply"]) == [1]
            blocking = srv.server.blocking

            def left_behind():
                return (blocking.count, dict(blocking.groups), b"once" in srv.server.waiting_keys,
                        [item for item in blocking._deadlines if item[2].queued])

            assert srv.call(left_behind) == (0, {}, False, [])
            assert admin.info("clients")["blocked_clients"] == 0
            admin.close()

    def test_a_due_retry_wakes_a_reader_after_an_ack_left_the_heap_top_stale(self, server):
        # The blocked reader's timer is armed from the heaps' tops, stale or not
        # (Group.due_bound_ms): entry 1's acknowledged items still head them, so the
        # timer may fire early; entry 2's retry must still reach the reader on time.
        admin = server.client()
        admin.execute_command("TWRITE", "stale", "t", "a")
        admin.execute_command("TWRITE", "stale", "t", "b")
        got = admin.execute_command("TREAD", "stale", "-", 10, "GROUP", "g", "RETRY", 400, 60000)
        assert offsets(got) == [1, 2]
        assert admin.execute_command("TACK", "stale", "g", 1) == 1
        start = time.monotonic()
        thread, box = tread_in_thread(server.client(), "stale", "-", 10, "GROUP", "g", "RETRY", 400, 60000,
                                      "BLOCK", 5000)
        thread.join(5)
        assert offsets(box["reply"]) == [2]  # the retry, not a timeout
        assert 0.2 < box["at"] - start < 3.0


class TestKeptGroupReadParses:
    """The repeat of a TREAD ... GROUP reuses its kept parse (commands/streams.py
    TreadParses): only the words are kept, so everything that depends on anything
    else is decided at every read as before -- a changed read, an error, ACL,
    MULTI, a config change."""

    READ = ("TREAD", "kp", "-", 2, "GROUP", "g", "RETRY", 60000, 600000)

    def test_a_changed_read_is_parsed_anew(self, server):
        c = server.client()
        c.execute_command("TWRITE", "kp", "ENTRIES", *["t", "e"] * 6)
        assert offsets(c.execute_command(*self.READ)) == [1, 2]
        assert offsets(c.execute_command(*self.READ)) == [3, 4]  # the same words: the kept parse
        assert offsets(c.execute_command("TREAD", "kp", "-", 1, "GROUP", "g", "RETRY", 60000, 600000)) == [5]
        assert c.execute_command("TREAD", "kp", "-", 2, "GROUP", "h", "RETRY", 60000, 600000, "WITHINFO") == [
            [1, 6], [1, b"t", b"e"], [2, b"t", b"e"]]
        assert offsets(c.execute_command(*self.READ)) == [6]

    def test_errors_stay_errors(self, server):
        c = server.client()
        c.execute_command("TWRITE", "kp", "t", "e")
        for _ in range(3):  # never kept: each repeat is parsed and refused again
            with pytest.raises(redis.ResponseError, match="syntax"):
                c.execute_command("TREAD", "kp", "-", 2, "GROUP", "g", "RETRY", 60000)
            with pytest.raises(redis.ResponseError, match="syntax"):
                c.execute_command("TREAD", "kp", "-", 2, "RETRY", 60000, 600000)
            with pytest.raises(redis.ResponseError, match="negative"):
                c.execute_command("TREAD", "kp", "-", 2, "GROUP", "g", "BLOCK", -1)
        assert offsets(c.execute_command("TREAD", "kp", "-", 2, "GROUP", "g", "BLOCK", 10)) == [1]
        with pytest.raises(redis.ResponseError, match="WRONGTYPE|wrong kind|syntax|integer"):
            c.execute_command("TREAD", "kp", "-", "x", "GROUP", "g", "BLOCK", 10)

    def test_acl_is_checked_at_every_read(self, server):
        admin = server.client()
        admin.execute_command("TWRITE", "kp", "ENTRIES", *["t", "e"] * 4)
        assert offsets(admin.execute_command(*self.READ)) == [1, 2]  # kept now
        admin.execute_command("ACL", "SETUSER", "kp-other", "on", ">pw", "~other:*", "+@all")
        admin.execute_command("ACL", "SETUSER", "kp-reader", "on", ">pw", "~kp", "+@all")
        admin.execute_command("ACL", "SETUSER", "kp-noread", "on", ">pw", "~kp", "+@all", "-tread")
        try:
            other = redis.Redis(port=server.port, username="kp-other", password="pw")
            reader = redis.Redis(port=server.port, username="kp-reader", password="pw")
            noread = redis.Redis(port=server.port, username="kp-noread", password="pw")
            for _ in range(2):
                with pytest.raises(redis.exceptions.NoPermissionError, match="keys"):
                    other.execute_command(*self.READ)
                with pytest.raises(redis.exceptions.NoPermissionError, match="tread"):
                    noread.execute_command(*self.READ)
            assert offsets(reader.execute_command(*self.READ)) == [3, 4]
            for client in (other, reader, noread):
                client.close()
        finally:
            admin.execute_command("ACL", "DELUSER", "kp-other", "kp-reader", "kp-noread")

    def test_multi_queues_and_exec_serves_the_kept_read(self, server):
        c = server.client()
        c.execute_command("TWRITE", "kp", "ENTRIES", *["t", "e"] * 3)
        read = self.READ + ("BLOCK", 1000)
        assert offsets(c.execute_command(*read)) == [1, 2]  # kept now
        pipe = c.pipeline(transaction=True)
        pipe.execute_command(*read)
        pipe.execute_command(*read)  # nothing left: BLOCK in EXEC times out at once
        first, second = pipe.execute()
        assert offsets(first) == [3] and second is None

    def test_a_config_change_applies_to_the_kept_read(self, server):
        c = server.client()
        c.execute_command("TWRITE", "kp", "ENTRIES", *["t", "e"] * 8)
        read = ("TREAD", "kp", "-", 5, "GROUP", "g", "RETRY", 60000, 600000)
        c.config_set("group-max-pending", 2)
        try:
            assert offsets(c.execute_command(*read)) == [1, 2]
            assert c.execute_command(*read) == []  # the cap, read at this read
            c.config_set("group-max-pending", 4)
            assert offsets(c.execute_command(*read)) == [3, 4]
            c.config_set("group-max-pending", 10000)
            assert offsets(c.execute_command(*read)) == [5, 6, 7, 8]
        finally:
            c.config_set("group-max-pending", 10000)

    def test_blocked_consumers_sharing_a_kept_read_are_served_apart(self, server):
        """Several consumers block on the very same words (one kept request, shared):
        each is served its own entries, first come first served."""
        admin = server.client()
        admin.execute_command("TREAD", "kp", "-", 0, "GROUP", "g")
        read = ("kp", "-", 2, "GROUP", "g", "RETRY", 60000, 600000, "BLOCK", 5000)
        threads = []
        for count in (1, 2, 3):
            threads.append(tread_in_thread(server.client(), *read))
            wait_blocked(admin, count)
        admin.execute_command("TWRITE", "kp", "ENTRIES", *["t", "e"] * 5)
        got = []
        for thread, box in threads:
            thread.join(5)
            got.append(offsets(box["reply"]))
        assert got == [[1, 2], [3, 4], [5]]
