"""RCP 11 core commands over TCP with redis-py, RESP2 and RESP3: TWRITE, TREAD, TEVICT, TINFO, TCONFIG."""

from __future__ import annotations

import pytest
import redis


def entries(reply):
    """TREAD reply elements as tuples (nulls stay None)."""
    return [tuple(e) if e is not None else None for e in reply]


def info_map(reply):
    """A map reply as a dict with str keys, whatever the protocol."""
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2]))
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in reply.items()}


class TestTwrite:
    def test_simple_form_returns_consecutive_offsets(self, r):
        assert r.execute_command("TWRITE", "s", "tag1", "hello") == 1
        assert r.execute_command("TWRITE", "s", "tag2", "world") == 2
        assert entries(r.execute_command("TREAD", "s", 1, 10)) == [(1, b"tag1", b"hello"), (2, b"tag2", b"world")]

    def test_entries_form_returns_first_offset(self, r):
        r.execute_command("TWRITE", "s", "a", "1")
        assert r.execute_command("TWRITE", "s", "ENTRIES", "b", "2", "c", "3", "d", "4") == 2
        assert [e[0] for e in r.execute_command("TREAD", "s", "-", 10)] == [1, 2, 3, 4]

    def test_binary_safe_and_empty_entries(self, r):
        blob = bytes(range(256))
        r.execute_command("TWRITE", "s", b"\x00tag\r\n", blob)
        r.execute_command("TWRITE", "s", "t", "")
        assert entries(r.execute_command("TREAD", "s", 1, 2)) == [(1, b"\x00tag\r\n", blob), (2, b"t", b"")]

    def test_backlog_keeps_exactly_count(self, r):
        for i in range(10):
            r.execute_command("TWRITE", "s", "t", i)
        assert r.execute_command("TWRITE", "s", "BACKLOG", 3, "ENTRIES", "t", "x") == 11
        reply = r.execute_command("TREAD", "s", "-", 100, "WITHINFO")
        assert reply[0] == [9, 11]
        assert [e[0] for e in reply[1:]] == [9, 10, 11]

    def test_backlog_zero_empties_but_keeps_offsets(self, r):
        r.execute_command("TWRITE", "s", "BACKLOG", 0, "ENTRIES", "t", "x", "t", "y")
        assert r.execute_command("TREAD", "s", "-", 0, "WITHINFO") == [[3, 2]]
        assert r.execute_command("TWRITE", "s", "t", "z") == 3
        assert r.exists("s") == 1

    def test_keywords_are_case_insensitive(self, r):
        assert r.execute_command("twrite", "s", "backlog", "5", "entries", "t", "x") == 1
        assert r.execute_command("TwRiTe", "s", "t", "y") == 2

    def test_many_entries_across_nodes(self, r):
        args = []
        for i in range(2500):
            args += [f"t{i % 7}", f"payload-{i}"]
        assert r.execute_command("TWRITE", "big", "ENTRIES", *args) == 1
        reply = r.execute_command("TREAD", "big", 995, 10)
        assert [e[0] for e in reply] == list(range(995, 1005))
        assert reply[5] == [1000, b"t5", b"payload-999"]
        assert info_map(r.execute_command("TINFO", "big"))["nodes"] == 3

    @pytest.mark.parametrize(
        "args, error",
        [
            (["s", "t"], "wrong number of arguments for 'twrite' command"),
            (["s"], "wrong number of arguments"),
            (["s", "ENTRIES", "t", "x", "u"], "ENTRIES needs one or more tag entry pairs"),
            (["s", "ENTRIES"], "wrong number of arguments"),
            (["s", "BACKLOG", "x", "ENTRIES", "t", "e"], "value is not an integer"),
            (["s", "BACKLOG", "-1", "ENTRIES", "t", "e"], "must be positive or zero"),
            (["s", "BACKLOG", "1", "t", "e"], "syntax error"),
            (["s", "FOO", "1", "ENTRIES", "t", "e"], "syntax error"),
            (["s", "BACKLOG", "1", "ENTRIES"], "ENTRIES needs"),
        ],
    )
    def test_bad_input_errors_and_leaves_no_key(self, r, args, error):
        with pytest.raises(redis.ResponseError, match=error):
            r.execute_command("TWRITE", *args)
        assert r.exists("s") == 0
        assert r.ping()  # the connection is still usable


class TestTread:
    @pytest.fixture
    def filled(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *[x for i in range(1, 11) for x in (f"t{i}", f"e{i}")])
        return r

    def test_reads_count_from_offset(self, filled):
        assert [e[0] for e in filled.execute_command("TREAD", "s", 4, 3)] == [4, 5, 6]

    def test_stops_at_end_and_past_end_is_empty(self, filled):
        assert [e[0] for e in filled.execute_command("TREAD", "s", 9, 100)] == [9, 10]
        assert filled.execute_command("TREAD", "s", 11, 5) == []
        assert filled.execute_command("TREAD", "s", 500, 5) == []

    def test_dash_zero_and_dollar(self, filled):
        filled.execute_command("TEVICT", "s", 3)
        assert filled.execute_command("TREAD", "s", "-", 1)[0][0] == 4
        assert filled.execute_command("TREAD", "s", 0, 1)[0][0] == 4
        assert filled.execute_command("TREAD", "s", "$", 10) == []

    def test_evicted_entries_are_nulls_and_count(self, filled):
        assert filled.execute_command("TEVICT", "s", 5) == 5
        reply = filled.execute_command("TREAD", "s", 3, 4)
        assert reply == [None, None, None, [6, b"t6", b"e6"]]

    def test_withinfo(self, filled):
        filled.execute_command("TEVICT", "s", 2)
        assert filled.execute_command("TREAD", "s", 4, 0, "WITHINFO") == [[3, 10]]
        reply = filled.execute_command("TREAD", "s", 10, 5, "WITHINFO")
        assert reply == [[3, 10], [10, b"t10", b"e10"]]

    def test_withinfo_on_missing_key_and_empty_stream(self, r):
        assert r.execute_command("TREAD", "nokey", "-", 10, "WITHINFO") == [[1, 0]]
        assert r.execute_command("TREAD", "nokey", 1, 10) == []
        r.execute_command("TWRITE", "s", "BACKLOG", 0, "ENTRIES", "t", "x", "t", "y", "t", "z")
        assert r.execute_command("TREAD", "s", "-", 10, "WITHINFO") == [[4, 3]]

    def test_count_zero(self, filled):
        assert filled.execute_command("TREAD", "s", 1, 0) == []

    def test_reading_a_missing_key_creates_nothing(self, r):
        r.execute_command("TREAD", "ghost", 1, 10)
        assert r.exists("ghost") == 0

    @pytest.mark.parametrize(
        "args, error",
        [
            (["s", "x", "1"], "not an integer"),
            (["s", "-5", "1"], "offset must be"),
            (["s", "1", "-1"], "count must be positive or zero"),
            (["s", "1", "abc"], "not an integer"),
            (["s", "1", "1", "NOPE"], "syntax error"),
            (["s", "1"], "wrong number of arguments for 'tread' command"),
            (["s", "1", "99999999999999999999"], "not an integer"),
        ],
    )
    def test_bad_input(self, filled, args, error):
        with pytest.raises(redis.ResponseError, match=error):
            filled.execute_command("TREAD", *args)
        assert len(filled.execute_command("TREAD", "s", 1, 100)) == 10


class TestTevict:
    def test_positive_offset_evicts_through(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 10)
        assert r.execute_command("TEVICT", "s", 4) == 4
        assert r.execute_command("TEVICT", "s", 4) == 0
        assert r.execute_command("TREAD", "s", "-", 0, "WITHINFO") == [[5, 10]]

    def test_negative_keeps_n(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 10)
        assert r.execute_command("TEVICT", "s", -3) == 7
        assert r.execute_command("TREAD", "s", "-", 0, "WITHINFO") == [[8, 10]]

    def test_beyond_last_evicts_all_keeps_next_offset(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 5)
        assert r.execute_command("TEVICT", "s", 100) == 5
        assert r.execute_command("TWRITE", "s", "t", "e") == 6

    def test_missing_key_is_zero_and_not_created(self, r):
        assert r.execute_command("TEVICT", "nokey", 5) == 0
        assert r.exists("nokey") == 0

    def test_bad_input(self, r):
        r.execute_command("TWRITE", "s", "t", "e")
        with pytest.raises(redis.ResponseError, match="not an integer"):
            r.execute_command("TEVICT", "s", "abc")
        with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
            r.execute_command("TEVICT", "s")
        assert r.execute_command("TREAD", "s", 1, 1) == [[1, b"t", b"e"]]


class TestTinfoTconfig:
    def test_tinfo_fields(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 5)
        r.execute_command("TEVICT", "s", 2)
        info = info_map(r.execute_command("TINFO", "s"))
        assert info["length"] == 3 and info["first"] == 3 and info["last"] == 5
        assert info["nodes"] == 1 and info["bytes"] > 0 and info["groups"] == 0
        assert info["max_len"] == 0 and info["allow_direct"] in (b"yes", "yes")

    def test_node_max_bytes_seals_nodes_by_bytes(self, r):
        default = r.config_get("node-max-bytes")["node-max-bytes"]
        assert r.config_set("node-max-bytes", "1kb")
        try:
            r.execute_command("TWRITE", "s", "ENTRIES", *["t", "x" * 600] * 10)
            r.execute_command("TWRITE", "s", "t", "y" * 3000)  # bigger than the limit: alone
            r.execute_command("TWRITE", "s", "t", "z")
            info = info_map(r.execute_command("TINFO", "s"))
            assert info["nodes"] == 12 and info["length"] == 12
            assert entries(r.execute_command("TREAD", "s", 9, 4)) == [
                (9, b"t", b"x" * 600), (10, b"t", b"x" * 600), (11, b"t", b"y" * 3000), (12, b"t", b"z")]
            with pytest.raises(redis.ResponseError):
                r.config_set("node-max-bytes", "-1")
        finally:
            r.config_set("node-max-bytes", default)
        assert r.config_get("node-max-bytes") == {"node-max-bytes": default}

    def test_tinfo_missing_key(self, r):
        with pytest.raises(redis.ResponseError, match="no such key"):
            r.execute_command("TINFO", "nokey")

    def test_tconfig_set_get_and_max_len(self, r):
        r.execute_command("TWRITE", "s", "ENTRIES", *["t", "e"] * 10)
        assert r.execute_command("TCONFIG", "s", "SET", "max_len", 4) in (b"OK", "OK", True)
        assert r.execute_command("TREAD", "s", "-", 0, "WITHINFO") == [[7, 10]]
        r.execute_command("TWRITE", "s", "t", "e")
        assert r.execute_command("TREAD", "s", "-", 0, "WITHINFO") == [[8, 11]]
        config = info_map(r.execute_command("TCONFIG", "s", "GET"))
        assert config["max_len"] == 4

    def test_tconfig_creates_the_stream(self, r):
        r.execute_command("TCONFIG", "new", "SET", "max_age_ms", 1000)
        assert r.exists("new") == 1
        assert r.execute_command("TREAD", "new", "-", 0, "WITHINFO") == [[1, 0]]

    def test_max_msgs_per_subject_forces_allow_direct(self, r):
        r.execute_command("TCONFIG", "kv", "SET", "allow_direct", "no", "max_msgs_per_subject", 1)
        assert info_map(r.execute_command("TCONFIG", "kv", "GET"))["allow_direct"] in (b"yes", "yes")

    @pytest.mark.parametrize(
        "args, error",
        [
            (["SET", "max_len"], "wrong number of arguments"),
            (["SET", "bogus", "1"], "unknown stream config 'bogus'"),
            (["SET", "max_len", "-1"], "must be positive or zero"),
            (["SET", "max_len", "x"], "not an integer"),
            (["SET", "allow_direct", "maybe"], "must be 'yes' or 'no'"),
            (["SET", "max_len", "5", "bogus", "1"], "unknown stream config"),
            (["FROB"], "unknown TCONFIG subcommand"),
        ],
    )
    def test_bad_config_changes_nothing(self, r, args, error):
        with pytest.raises(redis.ResponseError, match=error):
            r.execute_command("TCONFIG", "s", *args)
        assert r.exists("s") == 0

    def test_max_age_evicts_old_entries(self, r):
        import time

        r.execute_command("TWRITE", "s", "t", "old")
        time.sleep(0.25)
        r.execute_command("TWRITE", "s", "t", "new")
        r.execute_command("TCONFIG", "s", "SET", "max_age_ms", 150)
        assert r.execute_command("TREAD", "s", "-", 0, "WITHINFO") == [[2, 2]]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the server's housekeeping evicts without a write
            if r.execute_command("TREAD", "s", "-", 0, "WITHINFO") == [[3, 2]]:
                break
            time.sleep(0.05)
        assert r.execute_command("TREAD", "s", "-", 0, "WITHINFO") == [[3, 2]]


def _multibulk(*args) -> bytes:
    args = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class TestPipelinedRuns:
    """Pipelined simple TWRITEs on one key are appended as one run (commands/dispatch.py):
    the replies and the data must be exactly those of one call per command."""

    def _pipeline(self, server, commands) -> bytes:
        from .conftest import raw_exchange

        return raw_exchange(server.port, b"".join(_multibulk(*c) for c in commands))

    def test_runs_reply_each_offset_and_keep_order(self, server):
        r = server.client()
        commands = ([("TWRITE", "ra", f"t{i % 3}", f"a{i}") for i in range(20)]
                    + [("twrite", "rb", "t", f"b{i}") for i in range(3)]
                    + [("TWRITE", "ra", "ENTRIES", "x", "e1", "y", "e2")]
                    + [("TWRITE", "ra", "t", f"c{i}") for i in range(5)]
                    + [("twrite", "ra", "t", "d0"), ("TWRITE", "ra", "t", "d1")])
        reply = self._pipeline(server, commands)
        expected = [*range(1, 21), 1, 2, 3, 21, *range(23, 28), 28, 29]
        assert reply == b"".join(b":%d\r\n" % n for n in expected)
        got = r.execute_command("TREAD", "ra", "-", 100)
        datas = [f"a{i}" for i in range(20)] + ["e1", "e2"] + [f"c{i}" for i in range(5)] + ["d0", "d1"]
        assert [e[2].decode() for e in got] == datas
        assert [e[0] for e in got] == list(range(1, 30))
        assert [e[1] for e in got[:4]] == [b"t0", b"t1", b"t2", b"t0"]
        assert [e[2] for e in r.execute_command("TREAD", "rb", "-", 10)] == [b"b0", b"b1", b"b2"]

    def test_errors_in_a_pipeline_stay_with_their_command(self, server):
        commands = [("TWRITE", "re", "t", "1"), ("TWRITE", "re", "t"), ("TWRITE", "re", "t", "2"),
                    ("TWRITE", "re", "t", "3"), ("NOSUCH", "re"), ("TWRITE", "re", "t", "4")]
        reply = self._pipeline(server, commands)
        assert reply.startswith(b":1\r\n-ERR wrong number of arguments for 'twrite' command\r\n:2\r\n:3\r\n-ERR unknown command")
        assert reply.endswith(b":4\r\n")

    def test_commandstats_count_every_command_of_a_run(self, server):
        r = server.client()
        before = r.info("commandstats").get("cmdstat_twrite", {}).get("calls", 0)
        self._pipeline(server, [("TWRITE", "rs", "t", str(i)) for i in range(50)])
        assert r.info("commandstats")["cmdstat_twrite"]["calls"] == before + 50

    def test_a_run_honours_max_len_and_wakes_blocked_readers(self, server):
        import threading

        r = server.client()
        r.execute_command("TWRITE", "rl", "t", "seed")
        r.execute_command("TCONFIG", "rl", "SET", "max_len", 5)
        box = {}
        reader = server.client()
        thread = threading.Thread(target=lambda: box.setdefault(
            "reply", reader.execute_command("TREAD", "rl", "$", 3, "BLOCK", 5000)), daemon=True)
        thread.start()
        deadline = __import__("time").monotonic() + 5
        while r.info("clients")["blocked_clients"] < 1:
            assert __import__("time").monotonic() < deadline
        reply = self._pipeline(server, [("TWRITE", "rl", "t", f"v{i}") for i in range(12)])
        assert reply == b"".join(b":%d\r\n" % n for n in range(2, 14))
        thread.join(5)
        info = info_map(r.execute_command("TINFO", "rl"))
        assert (info["length"], info["first"], info["last"]) == (5, 9, 13)
        # The reader waits from offset 2 on and is served after the commands of that
        # read (as it would be without runs): 2-4 were evicted by then, so nulls.
        assert box["reply"] == [None, None, None]


@pytest.mark.parametrize("count", ["01", "+1", " 1", "1 ", "", "9223372036854775808", "1.0"])
def test_integer_arguments_are_strict(r, count):
    """to_int's fast path (plain digits) and its regular-expression path agree with
    Redis's string2ll: no leading zeros, signs, spaces or overflow."""
    r.execute_command("TWRITE", "ints", "t", "e")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r.execute_command("TREAD", "ints", 1, count)
