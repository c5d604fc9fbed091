"""JetStream on the same engine, over TCP with redis-py (RESP2 and RESP3): DGET, MLAST, BATCH.

The scenarios port the behaviours nats-server's own suites check (direct get batches with
num_pending, max_bytes, start_time, multi-last up-to-seq/up-to-time/paging/max allowed,
atomic batch commit, EOB, limits, expectations, timeouts) plus ADR-31's KV example.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
import redis

TIME_RE = re.compile(rb"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z\Z")


def as_map(reply) -> dict:
    """A map reply as a dict with str keys, whatever the protocol."""
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2]))
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in reply.items()}


def maps(reply) -> list[dict]:
    return [as_map(x) for x in reply]


def seqs(reply) -> list[int]:
    """Sequences of the messages of a batched reply (the EOB marker excluded)."""
    items = maps(reply)
    assert items[-1]["status"] == 204 and items[-1]["description"] == b"EOB"
    return [m["seq"] for m in items[:-1]]


def eob(reply) -> dict:
    return as_map(reply[-1])


def write(r, key, *pairs) -> int:
    flat = [x for pair in pairs for x in pair]
    return r.execute_command("TWRITE", key, "ENTRIES", *flat)


def state(r, key):
    """What a client sees of a key: its entries and bounds, or None if it does not exist."""
    if not r.exists(key):
        return None
    return r.execute_command("TREAD", key, 1, 100000, "WITHINFO")


def info_stats(r) -> dict:
    return {k: str(v) for k, v in r.info("stats").items()}


def dget(r, key, *args):
    return r.execute_command("DGET", key, *args)


@pytest.fixture
def users(r):
    """ADR-31's KV example: four writes to USERS."""
    r.execute_command("TWRITE", "USERS", "1234.name", "Bob")
    r.execute_command("TWRITE", "USERS", "1234.surname", "Smith")
    r.execute_command("TWRITE", "USERS", "1234.address", "1 Main Street")
    r.execute_command("TWRITE", "USERS", "1234.address", "10 Oak Lane")
    return r


# ---------------------------------------------------------------------------
# ADR-31's KV example
# ---------------------------------------------------------------------------

class TestKVExample:
    def test_multi_last_and_point_in_time(self, users):
        r = users
        reply = r.execute_command("MLAST", "USERS", "SUBJECTS", "1234.>")
        assert seqs(reply) == [1, 2, 4]
        assert as_map(reply[2])["data"] == b"10 Oak Lane"
        reply = r.execute_command("MLAST", "USERS", "UP_TO_SEQ", 3, "SUBJECTS", "1234.>")
        assert seqs(reply) == [1, 2, 3]
        assert [m["data"] for m in maps(reply[:-1])] == [b"Bob", b"Smith", b"1 Main Street"]
        assert eob(reply)["upto_seq"] == 3

    def test_json_multi_last_is_served_as_mlast(self, users):
        r = users
        assert seqs(dget(r, "USERS", '{"multi_last":["1234.>"]}')) == [1, 2, 4]
        assert seqs(dget(r, "USERS", '{"multi_last":["1234.>"],"up_to_seq":3}')) == [1, 2, 3]
        reply = dget(r, "USERS", '{"multi_last":["1234.name","1234.address"]}')
        assert seqs(reply) == [1, 4]

    def test_message_map(self, users):
        r = users
        msg = as_map(dget(r, "USERS", "SUBJECT", "1234.address"))
        assert set(msg) == {"stream", "subject", "seq", "time", "data"}
        assert (msg["stream"], msg["subject"], msg["seq"], msg["data"]) == (
            b"USERS", b"1234.address", 4, b"10 Oak Lane")
        assert TIME_RE.match(msg["time"])


# ---------------------------------------------------------------------------
# DGET
# ---------------------------------------------------------------------------

class TestDirectGet:
    def test_by_seq_json_and_keywords(self, users):
        r = users
        for reply in (dget(r, "USERS", '{"seq": 2}'), dget(r, "USERS", "SEQ", 2)):
            assert as_map(reply)["data"] == b"Smith"
        assert dget(r, "USERS", "SEQ", 99) is None
        assert dget(r, "USERS", '{"seq": 5}') is None

    def test_missing_entries_are_404(self, r):
        write(r, "s", ("a", "1"), ("a", "2"), ("a", "3"))
        r.execute_command("TEVICT", "s", 1)
        r.execute_command("TCONFIG", "s", "SET", "max_msgs_per_subject", 1)  # deletes 2
        assert dget(r, "s", "SEQ", 1) is None
        assert dget(r, "s", "SEQ", 2) is None
        assert as_map(dget(r, "s", "SEQ", 3))["data"] == b"3"

    def test_missing_key_is_404_and_not_created(self, r):
        assert dget(r, "nope", "SEQ", 1) is None
        assert dget(r, "nope", "SUBJECT", "a") is None
        assert r.execute_command("MLAST", "nope", "SUBJECTS", ">") is None
        assert r.exists("nope") == 0

    def test_last_by_subject_forms(self, users):
        r = users
        for reply in (dget(r, "USERS", "SUBJECT", "1234.address"),
                      dget(r, "USERS", "LAST_BY_SUBJ", "1234.address"),
                      dget(r, "USERS", '{"last_by_subj": "1234.address"}')):
            assert as_map(reply)["seq"] == 4
        assert as_map(dget(r, "USERS", "SUBJECT", "1234.*"))["seq"] == 4
        assert as_map(dget(r, "USERS", "SUBJECT", "*.name"))["seq"] == 1
        assert dget(r, "USERS", "SUBJECT", "1234.phone") is None
        assert dget(r, "USERS", "SUBJECT", "9.>") is None

    def test_next_by_subject(self, users):
        r = users
        assert as_map(dget(r, "USERS", "NEXT_BY_SUBJ", "1234.address"))["seq"] == 3
        assert as_map(dget(r, "USERS", "SEQ", 4, "NEXT_BY_SUBJ", "1234.address"))["seq"] == 4
        assert as_map(dget(r, "USERS", '{"seq": 2, "next_by_subj": "1234.*"}'))["seq"] == 2
        assert dget(r, "USERS", "SEQ", 5, "NEXT_BY_SUBJ", "1234.*") is None

    def test_start_time_single_message(self, r):
        r.execute_command("TWRITE", "s", "foo", "only")
        t = as_map(dget(r, "s", "SEQ", 1))["time"]
        # the time string parses back: a message at or after it is the message itself
        assert as_map(dget(r, "s", "START_TIME", t))["seq"] == 1
        assert as_map(dget(r, "s", f'{{"start_time": "{t.decode()}", "next_by_subj": "foo"}}'))["seq"] == 1
        assert as_map(dget(r, "s", "START_TIME", "2000-01-01T00:00:00Z"))["seq"] == 1
        later = t[:-2] + bytes([t[-2] + 1]) + b"Z" if t[-2:-1] != b"9" else None
        if later is not None:
            assert dget(r, "s", "START_TIME", later) is None
        assert dget(r, "s", "START_TIME", "2999-01-01T00:00:00Z") is None
        # any RFC 3339 offset works; this one is the same instant
        assert as_map(dget(r, "s", "START_TIME", "1999-12-31T19:00:00-05:00"))["seq"] == 1

    def test_start_time_picks_the_first_message_at_or_after(self, r):
        r.execute_command("TWRITE", "s", "a", "1")
        time.sleep(0.01)
        r.execute_command("TWRITE", "s", "b", "2")
        r.execute_command("TWRITE", "s", "a", "3")
        t2 = as_map(dget(r, "s", "SEQ", 2))["time"]
        assert as_map(dget(r, "s", "START_TIME", t2))["seq"] == 2
        assert as_map(dget(r, "s", "START_TIME", t2, "NEXT_BY_SUBJ", "a"))["seq"] == 3
        reply = dget(r, "s", "START_TIME", t2, "BATCH", 10)
        assert seqs(reply) == [2, 3]

    def test_batch_with_num_pending(self, r):
        # nats: direct get batch; num_pending counts the whole stream after each message
        for i in range(12):
            r.execute_command("TWRITE", "s", ["foo.a", "foo.b", "bar"][i % 3], f"m{i + 1}")
        reply = dget(r, "s", '{"seq": 1, "batch": 3, "next_by_subj": "foo.*"}')
        items = maps(reply)
        assert [m["seq"] for m in items[:-1]] == [1, 2, 4]
        assert [m["num_pending"] for m in items[:-1]] == [7, 6, 5]
        assert [m["last_seq"] for m in items[:-1]] == [0, 1, 2]
        assert items[-1] == {"status": 204, "description": b"EOB", "num_pending": 5, "last_seq": 4}
        # the next call continues from last_seq + 1
        reply = dget(r, "s", "SEQ", 5, "BATCH", 100, "NEXT_BY_SUBJ", "foo.*")
        assert seqs(reply) == [5, 7, 8, 10, 11]
        assert eob(reply)["num_pending"] == 0 and eob(reply)["last_seq"] == 11
        # a literal subject, and any subject
        assert seqs(dget(r, "s", "BATCH", 2, "NEXT_BY_SUBJ", "bar")) == [3, 6]
        reply = dget(r, "s", "SEQ", 10, "BATCH", 2)
        assert seqs(reply) == [10, 11] and eob(reply)["num_pending"] == 1
        assert seqs(dget(r, "s", "SEQ", 1, "BATCH", 50, "NEXT_BY_SUBJ", ">")) == list(range(1, 13))

    def test_batch_skips_missing_and_404_when_nothing(self, r):
        write(r, "s", *[("k", str(i)) for i in range(10)])
        r.execute_command("TEVICT", "s", 3)
        reply = dget(r, "s", "SEQ", 1, "BATCH", 3)
        assert seqs(reply) == [4, 5, 6] and eob(reply)["num_pending"] == 4
        assert dget(r, "s", "SEQ", 11, "BATCH", 3) is None
        assert dget(r, "s", "SEQ", 1, "BATCH", 3, "NEXT_BY_SUBJ", "zzz") is None

    def test_batch_max_bytes(self, r):
        # nats: direct get batch max_bytes: subject + data bytes, at least one message
        for _i in range(10):
            r.execute_command("TWRITE", "s", "foo", "x" * 97)  # 100 bytes with the subject
        reply = dget(r, "s", "SEQ", 1, "BATCH", 10, "MAX_BYTES", 250)
        assert seqs(reply) == [1, 2, 3]
        assert eob(reply)["num_pending"] == 7 and eob(reply)["last_seq"] == 3
        assert seqs(dget(r, "s", '{"seq":1,"batch":10,"max_bytes":200,"next_by_subj":"foo"}')) == [1, 2]
        assert seqs(dget(r, "s", "SEQ", 1, "BATCH", 10, "MAX_BYTES", 1)) == [1]
        # the JSON form takes max_bytes up to 2**64 - 1: a budget the C page writer caps
        for huge in (1 << 63, (1 << 64) - 1):
            assert seqs(dget(r, "s", '{"seq":1,"batch":10,"max_bytes":%d}' % huge)) == list(range(1, 11))

    def test_batch_over_many_subjects(self, r):
        pairs = [(f"kv.{i % 40}", str(i)) for i in range(200)]
        write(r, "s", *pairs)
        reply = dget(r, "s", "SEQ", 50, "BATCH", 30, "NEXT_BY_SUBJ", "kv.*")
        assert seqs(reply) == list(range(50, 80)) and eob(reply)["num_pending"] == 121
        reply = dget(r, "s", "SEQ", 1, "BATCH", 10, "NEXT_BY_SUBJ", "kv.1")
        assert seqs(reply) == [2, 42, 82, 122, 162]

    @pytest.mark.parametrize("args, why", [
        (["{}"], "empty request"),
        ([""], "empty request"),
        (['{"batch": 5}'], "empty request"),
        (["{seq: 1}"], "malformed request"),
        (["[1, 2]"], "must be a JSON object"),
        (['{"seq": 1, "foo": 2}'], "unknown field 'foo'"),
        (['{"seq": -1}'], "seq must be a non-negative integer"),
        (['{"seq": 1.5}'], "seq must be a non-negative integer"),
        (['{"seq": "1"}'], "seq must be a non-negative integer"),
        (['{"seq": true}'], "seq must be a non-negative integer"),
        (['{"seq": 1, "batch": -2}'], "batch must be a non-negative integer"),
        (['{"seq": 1, "max_bytes": 1e3}'], "max_bytes must be a non-negative integer"),
        (['{"last_by_subj": 5}'], "last_by_subj must be a string"),
        (['{"start_time": "yesterday"}'], "start_time must be an RFC 3339 time"),
        (['{"multi_last": "a"}'], "multi_last must be an array"),
        (['{"seq": 1, "last_by_subj": "a"}'], "seq and last_by_subj cannot be combined"),
        (['{"seq": 1, "start_time": "2024-01-01T00:00:00Z"}'], "seq and start_time"),
        (['{"start_time": "2024-01-01T00:00:00Z", "last_by_subj": "a"}'], "start_time and last_by_subj"),
        (['{"last_by_subj": "a", "next_by_subj": "a"}'], "last_by_subj and next_by_subj"),
        (['{"last_by_subj": "a", "batch": 2}'], "last_by_subj and batch"),
        (['{"last_by_subj": "a", "multi_last": ["a"]}'], "last_by_subj and multi_last"),
        (['{"next_by_subj": "a", "multi_last": ["a"]}'], "next_by_subj and multi_last"),
        (['{"multi_last": ["a"], "up_to_seq": 1, "up_to_time": "2024-01-01T00:00:00Z"}'],
         "up_to_seq and up_to_time"),
        (['{"last_by_subj": "a..b"}'], "invalid subject last_by_subj 'a..b': empty token"),
        (['{"next_by_subj": "a.>.b"}'], "'>' must be the last token"),
        (['{"multi_last": ["a b"]}'], "whitespace"),
        (["SUBJECT", "a", "SEQ", "1"], "SUBJECT takes one subject and nothing else"),
        (["SEQ", "1", "SUBJECT", "a"], "SUBJECT takes one subject and nothing else"),
        (["SUBJECT", ""], "empty subject"),
        (["SEQ", "x"], "seq must be a non-negative integer"),
        (["SEQ", "-3"], "seq must be a non-negative integer"),
        (["SEQ", "1", "BATCH"], "BATCH needs a value"),
        (["SEQ", "1", "SEQ", "2"], "SEQ is given twice"),
        (["FOO", "1"], "unknown field 'FOO'"),
        (["SEQ", "0"], "empty request"),
        (["BATCH", "3"], "empty request"),
        (["SEQ", "1", "LAST_BY_SUBJ", "a"], "seq and last_by_subj"),
        (["START_TIME", "2024-13-01T00:00:00Z"], "RFC 3339"),
        (["START_TIME", "2024-02-30T00:00:00Z"], "RFC 3339"),
        (["START_TIME", "2024-01-01 00:00:00"], "RFC 3339"),
        (["NEXT_BY_SUBJ", "a.", "SEQ", "1"], "empty token"),
    ])
    def test_bad_requests_are_408_and_change_nothing(self, users, args, why):
        r = users
        before = state(r, "USERS")
        with pytest.raises(redis.ResponseError, match=re.escape(why)) as err:
            dget(r, "USERS", *args)
        assert str(err.value).startswith("408 Bad Request: ") or "ERR 408 Bad Request: " in str(err.value)
        assert state(r, "USERS") == before
        with pytest.raises(redis.ResponseError, match="408 Bad Request"):
            dget(r, "missing", *args)
        assert r.exists("missing") == 0
        assert r.ping()

    def test_allow_direct_off_is_503(self, users):
        r = users
        assert r.execute_command("TCONFIG", "USERS", "SET", "allow_direct", "no") in (b"OK", "OK", True)
        for args in (["SEQ", 1], ["SUBJECT", "1234.name"], ['{"multi_last": [">"]}']):
            with pytest.raises(redis.ResponseError, match="503 direct get is not allowed on this stream"):
                dget(r, "USERS", *args)
        with pytest.raises(redis.ResponseError, match="^503 |ERR 503 "):
            r.execute_command("MLAST", "USERS", "SUBJECTS", ">")
        # ADR-31: a per-subject limit forces direct get on
        r.execute_command("TCONFIG", "USERS", "SET", "allow_direct", "no", "max_msgs_per_subject", 5)
        assert as_map(r.execute_command("TCONFIG", "USERS", "GET"))["allow_direct"] == b"yes"
        assert as_map(dget(r, "USERS", "SEQ", 1))["seq"] == 1


# ---------------------------------------------------------------------------
# MLAST
# ---------------------------------------------------------------------------

def many_subjects(r, key, n, prefix="kv"):
    pairs = [(f"{prefix}.{i}", f"v{i}") for i in range(n)]
    for start in range(0, n, 1000):
        write(r, key, *pairs[start:start + 1000])


class TestMultiLast:
    def test_overlapping_filters_report_each_subject_once(self, users):
        r = users
        reply = r.execute_command("MLAST", "USERS", "SUBJECTS", "1234.*", "1234.address", "*.name", ">")
        assert seqs(reply) == [1, 2, 4]
        items = maps(reply)
        assert [m["num_pending"] for m in items[:-1]] == [2, 1, 0]
        assert [m["last_seq"] for m in items[:-1]] == [0, 1, 2]
        assert items[-1] == {"status": 204, "description": b"EOB", "num_pending": 0, "last_seq": 4,
                             "upto_seq": 4}

    def test_up_to_time_is_exclusive(self, r):
        r.execute_command("TWRITE", "s", "a", "1")
        r.execute_command("TWRITE", "s", "b", "1")
        time.sleep(0.01)
        r.execute_command("TWRITE", "s", "a", "2")
        t3 = as_map(dget(r, "s", "SEQ", 3))["time"]
        reply = r.execute_command("MLAST", "s", "UP_TO_TIME", t3, "SUBJECTS", ">")
        assert seqs(reply) == [1, 2] and eob(reply)["upto_seq"] == 2
        reply = dget(r, "s", f'{{"multi_last": [">"], "up_to_time": "{t3.decode()}"}}')
        assert seqs(reply) == [1, 2]
        t1 = as_map(dget(r, "s", "SEQ", 1))["time"]
        assert r.execute_command("MLAST", "s", "UP_TO_TIME", t1, "SUBJECTS", ">") is None
        assert seqs(r.execute_command("MLAST", "s", "UP_TO_TIME", "2999-01-01T00:00:00Z",
                                      "SUBJECTS", ">")) == [2, 3]

    def test_up_to_seq_and_clamp(self, users):
        r = users
        reply = r.execute_command("MLAST", "USERS", "UP_TO_SEQ", 1000, "SUBJECTS", "1234.>")
        assert seqs(reply) == [1, 2, 4] and eob(reply)["upto_seq"] == 4
        assert seqs(r.execute_command("MLAST", "USERS", "UP_TO_SEQ", 1, "SUBJECTS", "1234.>")) == [1]

    def test_paging_with_seq_batch_and_upto(self, r):
        many_subjects(r, "s", 10)
        reply = r.execute_command("MLAST", "s", "BATCH", 4, "SUBJECTS", "kv.*")
        assert seqs(reply) == [1, 2, 3, 4]
        end = eob(reply)
        assert end["num_pending"] == 6 and end["last_seq"] == 4 and end["upto_seq"] == 10
        r.execute_command("TWRITE", "s", "kv.0", "new")  # after the point in time of the read
        page2 = r.execute_command("MLAST", "s", "UP_TO_SEQ", end["upto_seq"], "SEQ", end["last_seq"] + 1,
                                  "BATCH", 4, "SUBJECTS", "kv.*")
        assert seqs(page2) == [5, 6, 7, 8] and eob(page2)["num_pending"] == 2
        assert as_map(page2[0])["num_pending"] == 5 and as_map(page2[0])["last_seq"] == 0
        page3 = r.execute_command("MLAST", "s", "UP_TO_SEQ", 10, "SEQ", 9, "BATCH", 4, "SUBJECTS", "kv.*")
        assert seqs(page3) == [9, 10] and eob(page3)["num_pending"] == 0
        # past the end: only the marker
        done = r.execute_command("MLAST", "s", "UP_TO_SEQ", 10, "SEQ", 11, "SUBJECTS", "kv.*")
        assert seqs(done) == [] and eob(done)["last_seq"] == 0
        # without UP_TO_SEQ the read sees the new kv.0
        assert seqs(r.execute_command("MLAST", "s", "SUBJECTS", "kv.*")) == list(range(2, 12))

    def test_max_bytes(self, r):
        for i in range(5):
            r.execute_command("TWRITE", "s", f"k.{i}", "x" * 97)  # 100 bytes each
        reply = r.execute_command("MLAST", "s", "MAX_BYTES", 300, "SUBJECTS", "k.*")
        assert seqs(reply) == [1, 2, 3] and eob(reply)["num_pending"] == 2
        assert seqs(r.execute_command("MLAST", "s", "MAX_BYTES", 1, "SUBJECTS", "k.*")) == [1]

    def test_max_allowed_subjects(self, r):
        many_subjects(r, "s", 1025)
        reply = r.execute_command("MLAST", "s", "UP_TO_SEQ", 1024, "SUBJECTS", "kv.*")
        assert len(seqs(reply)) == 1024  # 1024 is allowed
        with pytest.raises(redis.ResponseError, match="413 Too Many Results"):
            r.execute_command("MLAST", "s", "SUBJECTS", "kv.*")
        with pytest.raises(redis.ResponseError, match="413 Too Many Results"):
            dget(r, "s", '{"multi_last": [">"]}')
        assert len(seqs(r.execute_command("MLAST", "s", "SUBJECTS", "kv.1", "kv.2>", "kv.10"))) == 2

    def test_literal_prefix_among_many_subjects(self, r):
        pairs = [(f"kv.user.{u}.{f}", f"{u}-{f}") for u in range(300) for f in ("name", "mail")]
        write(r, "s", *pairs)
        reply = r.execute_command("MLAST", "s", "SUBJECTS", "kv.user.42.>")
        assert [m["data"] for m in maps(reply[:-1])] == [b"42-name", b"42-mail"]

    def test_none_is_null(self, users):
        assert users.execute_command("MLAST", "USERS", "SUBJECTS", "zzz.>") is None

    @pytest.mark.parametrize("args, why", [
        ([], "wrong number of arguments for 'mlast' command"),
        (["SUBJECTS"], "SUBJECTS needs at least one subject filter"),
        (["BATCH", "2"], "SUBJECTS and at least one"),
        (["UP_TO_SEQ", "x", "SUBJECTS", "a"], "up_to_seq must be a non-negative integer"),
        (["UP_TO_SEQ", "1", "UP_TO_TIME", "2024-01-01T00:00:00Z", "SUBJECTS", "a"], "up_to_seq and up_to_time"),
        (["UP_TO_TIME", "soon", "SUBJECTS", "a"], "RFC 3339"),
        (["FOO", "1", "SUBJECTS", "a"], "unknown field 'FOO'"),
        (["SEQ", "1", "SEQ", "1", "SUBJECTS", "a"], "SEQ is given twice"),
        (["SUBJECTS", "a", "b..c"], "empty token"),
        (["SUBJECTS", ">.a"], "'>' must be the last token"),
    ])
    def test_bad_requests(self, users, args, why):
        r = users
        before = state(r, "USERS")
        with pytest.raises(redis.ResponseError, match=re.escape(why)):
            r.execute_command("MLAST", "USERS", *args)
        assert state(r, "USERS") == before


# ---------------------------------------------------------------------------
# BATCH
# ---------------------------------------------------------------------------

def batch(r, key, batch_id, seq, *rest):
    return r.execute_command("BATCH", key, batch_id, seq, *rest)


def is_ok(reply) -> bool:
    return reply in (b"OK", "OK", True)


class TestAtomicBatch:
    def test_commit_is_atomic_and_invisible_until_then(self, r):
        r.execute_command("TWRITE", "s", "pre", "0")
        assert is_ok(batch(r, "s", "b1", 1, "foo.a", "1"))
        assert is_ok(batch(r, "s", "b1", 2, "foo.b", "2"))
        # staged messages are invisible to every read
        assert r.execute_command("TREAD", "s", 1, 10) == [[1, b"pre", b"0"]]
        assert dget(r, "s", "SUBJECT", "foo.a") is None
        assert dget(r, "s", "SEQ", 2) is None
        ack = as_map(batch(r, "s", "b1", 3, "foo.c", "3", "COMMIT"))
        assert ack == {"stream": b"s", "seq": 4, "batch": b"b1", "count": 3}
        assert [e[1] for e in r.execute_command("TREAD", "s", 2, 10)] == [b"foo.a", b"foo.b", b"foo.c"]
        times = {as_map(dget(r, "s", "SEQ", i))["time"] for i in (2, 3, 4)}
        assert len(times) == 1  # one write, one time
        # the id can be used again once committed
        assert as_map(batch(r, "s", "b1", 1, "x", "y", "COMMIT"))["seq"] == 5

    def test_single_message_commit_creates_the_stream(self, r):
        ack = as_map(batch(r, "new", "id", 1, "a", "1", "COMMIT"))
        assert ack == {"stream": b"new", "seq": 1, "batch": b"id", "count": 1}
        assert r.execute_command("TREAD", "new", 1, 5) == [[1, b"a", b"1"]]

    def test_eob_commits_without_a_message(self, r):
        assert is_ok(batch(r, "s", "b", 1, "a", "1"))
        assert is_ok(batch(r, "s", "b", 2, "b", "2"))
        ack = as_map(batch(r, "s", "b", 3, "EOB"))
        assert ack == {"stream": b"s", "seq": 2, "batch": b"b", "count": 2}
        assert len(r.execute_command("TREAD", "s", 1, 10)) == 2

    def test_eob_at_first_message_is_incomplete(self, r):
        before = int(info_stats(r)["batch_abandoned_incomplete"])
        with pytest.raises(redis.ResponseError, match="10176 batch publish is incomplete and was abandoned"):
            batch(r, "s", "b", 1, "EOB")
        assert r.exists("s") == 0
        assert int(info_stats(r)["batch_abandoned_incomplete"]) == before + 1

    def test_commit_wakes_blocked_readers(self, r, server):
        got = []
        reader = server.client()
        thread = threading.Thread(target=lambda: got.append(
            reader.execute_command("TREAD", "s", "$", 10, "BLOCK", 5000)))
        thread.start()
        time.sleep(0.2)
        batch(r, "s", "b", 1, "a", "1")
        batch(r, "s", "b", 2, "b", "2", "COMMIT")
        thread.join(10)
        reader.close()
        assert got == [[[1, b"a", b"1"], [2, b"b", b"2"]]]

    def test_gap_abandons_the_batch(self, r):
        before = int(info_stats(r)["batch_abandoned_incomplete"])
        batch(r, "s", "b", 1, "a", "1")
        batch(r, "s", "b", 2, "a", "2")
        with pytest.raises(redis.ResponseError, match="10176 batch publish is incomplete and was abandoned"):
            batch(r, "s", "b", 4, "a", "4", "COMMIT")
        with pytest.raises(redis.ResponseError, match="^10176 |ERR 10176 "):
            batch(r, "s", "b", 3, "a", "3", "COMMIT")  # the batch is gone
        assert r.exists("s") == 0
        assert int(info_stats(r)["batch_abandoned_incomplete"]) == before + 1

    def test_unknown_batch(self, r):
        with pytest.raises(redis.ResponseError, match="10176"):
            batch(r, "s", "never", 2, "a", "1")
        with pytest.raises(redis.ResponseError, match="10176"):
            batch(r, "s", "never", 2, "EOB")
        assert r.exists("s") == 0

    def test_restart_with_batch_seq_1_replaces_the_batch(self, r):
        batch(r, "s", "b", 1, "old", "1")
        batch(r, "s", "b", 1, "new", "1")
        ack = as_map(batch(r, "s", "b", 2, "new", "2", "COMMIT"))
        assert ack["count"] == 2
        assert [e[1] for e in r.execute_command("TREAD", "s", 1, 10)] == [b"new", b"new"]

    def test_batch_id_is_at_most_64_characters(self, r):
        assert as_map(batch(r, "s", "x" * 64, 1, "a", "1", "COMMIT"))["count"] == 1
        with pytest.raises(redis.ResponseError, match="10179 batch publish ID is invalid"):
            batch(r, "s", "x" * 65, 1, "a", "1", "COMMIT")
        with pytest.raises(redis.ResponseError, match="10179"):
            batch(r, "s", "", 1, "a", "1")
        assert r.execute_command("TREAD", "s", "-", 0, "WITHINFO") == [[1, 1]]

    @pytest.mark.parametrize("seq", ["0", "-1", "abc", "1.5", ""])
    def test_batch_sequence_missing(self, r, seq):
        with pytest.raises(redis.ResponseError, match="10175 batch publish sequence is missing"):
            batch(r, "s", "b", seq, "a", "1", "COMMIT")
        assert r.exists("s") == 0

    def test_bad_sequence_abandons_a_batch_in_flight(self, r):
        batch(r, "s", "b", 1, "a", "1")
        with pytest.raises(redis.ResponseError, match="10175"):
            batch(r, "s", "b", "zz", "a", "1")
        with pytest.raises(redis.ResponseError, match="10176"):
            batch(r, "s", "b", 2, "a", "1", "COMMIT")

    def test_atomic_publish_disabled(self, r):
        r.execute_command("TCONFIG", "s", "SET", "allow_atomic", "no")
        with pytest.raises(redis.ResponseError, match="10174 atomic publish is disabled"):
            batch(r, "s", "b", 1, "a", "1", "COMMIT")
        # disabled while a batch is staged: the commit fails, nothing is stored
        r.execute_command("TCONFIG", "t", "SET", "allow_atomic", "yes")
        batch(r, "t", "b", 1, "a", "1")
        r.execute_command("TCONFIG", "t", "SET", "allow_atomic", "no")
        with pytest.raises(redis.ResponseError, match="10174"):
            batch(r, "t", "b", 2, "a", "2", "COMMIT")
        r.execute_command("TCONFIG", "t", "SET", "allow_atomic", "yes")
        with pytest.raises(redis.ResponseError, match="10176"):
            batch(r, "t", "b", 3, "EOB")
        assert r.execute_command("TREAD", "t", 1, 10) == []

    def test_too_large(self, r):
        before = int(info_stats(r)["batch_abandoned_large"])
        pipe = r.pipeline(transaction=False)
        for i in range(1, 1000):
            pipe.execute_command("BATCH", "s", "big", i, "a", str(i))
        assert all(is_ok(x) for x in pipe.execute())
        ack = as_map(batch(r, "s", "big", 1000, "a", "1000", "COMMIT"))  # 1000 is allowed
        assert ack["count"] == 1000 and ack["seq"] == 1000
        pipe = r.pipeline(transaction=False)
        for i in range(1, 1001):
            pipe.execute_command("BATCH", "s", "big2", i, "a", str(i))
        assert all(is_ok(x) for x in pipe.execute())
        with pytest.raises(redis.ResponseError, match="10199 batch publish sequence exceeds server limit"):
            batch(r, "s", "big2", 1001, "a", "1001", "COMMIT")
        with pytest.raises(redis.ResponseError, match="10176"):
            batch(r, "s", "big2", 1002, "EOB")
        assert r.execute_command("TREAD", "s", "-", 0, "WITHINFO") == [[1, 1000]]
        assert int(info_stats(r)["batch_abandoned_large"]) == before + 1
        # EOB is not counted: 1000 messages then EOB commits
        pipe = r.pipeline(transaction=False)
        for i in range(1, 1001):
            pipe.execute_command("BATCH", "s", "big3", i, "a", str(i))
        pipe.execute()
        assert as_map(batch(r, "s", "big3", 1001, "EOB"))["count"] == 1000

    def test_fifty_batches_per_stream(self, r):
        for i in range(50):
            assert is_ok(batch(r, "lim", f"b{i}", 1, "a", "1"))
        with pytest.raises(redis.ResponseError, match="10210 too many atomic batches in flight"):
            batch(r, "lim", "b50", 1, "a", "1")
        assert is_ok(batch(r, "other", "b50", 1, "a", "1"))  # other streams are not affected
        assert as_map(batch(r, "lim", "b0", 2, "EOB"))["count"] == 1  # a commit makes room
        assert is_ok(batch(r, "lim", "b50", 1, "a", "1"))
        for i in range(1, 51):  # end them all (EOB commits)
            batch(r, "lim", f"b{i}", 2, "EOB")
        batch(r, "other", "b50", 2, "EOB")

    def test_expect_last_seq(self, r):
        write(r, "s", ("a", "1"), ("b", "2"))
        batch(r, "s", "ok", 1, "c", "3", "EXPECT_LAST_SEQ", 2)
        assert as_map(batch(r, "s", "ok", 2, "c", "4", "COMMIT"))["seq"] == 4
        # checked at commit against the stream as it was before the batch
        batch(r, "s", "late", 1, "c", "5", "EXPECT_LAST_SEQ", 4)
        r.execute_command("TWRITE", "s", "x", "interleaved")
        with pytest.raises(redis.ResponseError, match="10071 wrong last sequence: 5"):
            batch(r, "s", "late", 2, "EOB")
        assert r.execute_command("TREAD", "s", "-", 0, "WITHINFO") == [[1, 5]]
        # an empty stream's last sequence is 0
        assert as_map(batch(r, "fresh", "b", 1, "a", "1", "EXPECT_LAST_SEQ", 0, "COMMIT"))["seq"] == 1

    def test_expect_last_seq_only_on_first_message(self, r):
        before = int(info_stats(r)["batch_abandoned_rejected"])
        batch(r, "s", "b", 1, "a", "1")
        with pytest.raises(redis.ResponseError, match="10164 EXPECT_LAST_SEQ is only allowed on the first"):
            batch(r, "s", "b", 2, "a", "2", "EXPECT_LAST_SEQ", 0)
        with pytest.raises(redis.ResponseError, match="10176"):
            batch(r, "s", "b", 3, "EOB")
        assert r.exists("s") == 0
        assert int(info_stats(r)["batch_abandoned_rejected"]) == before + 1

    def test_expect_last_subject_seq(self, r):
        write(r, "s", ("a", "1"), ("b", "2"), ("a", "3"))
        batch(r, "s", "b1", 1, "a", "x", "EXPECT_LAST_SUBJECT_SEQ", 3)
        batch(r, "s", "b1", 2, "new", "y", "EXPECT_LAST_SUBJECT_SEQ", 0)
        assert as_map(batch(r, "s", "b1", 3, "b", "z", "EXPECT_LAST_SUBJECT_SEQ", 2, "COMMIT"))["seq"] == 6
        batch(r, "s", "b2", 1, "a", "x", "EXPECT_LAST_SUBJECT_SEQ", 3)
        with pytest.raises(redis.ResponseError, match="10071 wrong last sequence: 4"):
            batch(r, "s", "b2", 2, "a2", "y", "COMMIT")
        # a subject already written earlier in the batch
        batch(r, "s", "b3", 1, "a", "x")
        with pytest.raises(redis.ResponseError, match="10164 EXPECT_LAST_SUBJECT_SEQ on a subject already"):
            batch(r, "s", "b3", 2, "a", "y", "EXPECT_LAST_SUBJECT_SEQ", 4, "COMMIT")
        assert r.execute_command("TREAD", "s", "-", 0, "WITHINFO") == [[1, 6]]

    def test_syntax_errors_leave_the_batch_alone(self, r):
        batch(r, "s", "b", 1, "a", "1")
        for args in (["a", "2", "BOGUS"], ["a", "2", "EXPECT_LAST_SEQ"], ["a", "2", "EXPECT_LAST_SEQ", "x"],
                     ["a", "2", "COMMIT", "COMMIT"], ["EOF"]):
            with pytest.raises(redis.ResponseError):
                batch(r, "s", "b", 2, *args)
        with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
            r.execute_command("BATCH", "s", "b", 2)
        assert as_map(batch(r, "s", "b", 2, "a", "2", "COMMIT"))["count"] == 2

    def test_binary_subjects_and_data(self, r):
        blob = bytes(range(256))
        ack = as_map(batch(r, "s", b"\x00id", 1, b"sub\r\nject", blob, "COMMIT"))
        assert ack["batch"] == b"\x00id"
        assert r.execute_command("TREAD", "s", 1, 1) == [[1, b"sub\r\nject", blob]]


class TestBatchLimitsOwnServer:
    def test_thousand_batches_per_server(self, make_server):
        proc = make_server("--save", "")
        c = proc.client(protocol=3)
        pipe = c.pipeline(transaction=False)
        for i in range(1000):
            pipe.execute_command("BATCH", f"k{i // 50}", f"id{i}", 1, "a", "1")
        assert all(is_ok(x) for x in pipe.execute())
        assert info_stats(c)["batches_in_flight"] == "1000"
        with pytest.raises(redis.ResponseError, match="10210 too many atomic batches in flight"):
            batch(c, "k99", "id", 1, "a", "1")
        assert as_map(batch(c, "k0", "id0", 2, "EOB"))["count"] == 1
        assert is_ok(batch(c, "k99", "id", 1, "a", "1"))

    def test_inactivity_timeout(self, make_server):
        proc = make_server("--save", "", "--batch-timeout-ms", "300")
        c = proc.client(protocol=2)
        assert is_ok(batch(c, "s", "slow", 1, "a", "1"))
        time.sleep(0.15)
        assert is_ok(batch(c, "s", "slow", 2, "a", "2"))  # activity: the timer starts again
        time.sleep(0.2)
        assert is_ok(batch(c, "s", "slow", 3, "a", "3"))
        time.sleep(0.6)
        with pytest.raises(redis.ResponseError, match="10176"):
            batch(c, "s", "slow", 4, "a", "4", "COMMIT")
        stats = info_stats(c)
        assert stats["batch_abandoned_timeout"] == "1" and stats["batches_in_flight"] == "0"
        assert c.exists("s") == 0
        # the timeout is a runtime setting
        c.config_set("batch-timeout-ms", 100000)
        batch(c, "s", "b", 1, "a", "1")
        time.sleep(0.5)
        assert as_map(batch(c, "s", "b", 2, "EOB"))["count"] == 1
        c.config_resetstat()
        assert info_stats(c)["batch_abandoned_timeout"] == "0"


# ---------------------------------------------------------------------------
# max_msgs_per_subject (KV history)
# ---------------------------------------------------------------------------

class TestPerSubjectLimit:
    def test_oldest_become_missing(self, r):
        r.execute_command("TCONFIG", "kv", "SET", "max_msgs_per_subject", 2)
        for i in range(1, 7):
            r.execute_command("TWRITE", "kv", "k.a" if i % 2 else "k.b", f"v{i}")
        reply = r.execute_command("TREAD", "kv", 1, 10)
        assert reply[:2] == [None, None]
        assert [e[0] for e in reply[2:]] == [3, 4, 5, 6]
        assert as_map(dget(r, "kv", "SUBJECT", "k.a"))["data"] == b"v5"
        assert seqs(dget(r, "kv", "SEQ", 1, "BATCH", 10, "NEXT_BY_SUBJ", "k.a")) == [3, 5]
        assert seqs(r.execute_command("MLAST", "kv", "UP_TO_SEQ", 4, "SUBJECTS", "k.*")) == [3, 4]

    def test_retroactive_and_through_batches(self, r):
        write(r, "kv", *[("k", str(i)) for i in range(10)])
        r.execute_command("TCONFIG", "kv", "SET", "max_msgs_per_subject", 3)
        assert r.execute_command("TREAD", "kv", "-", 0, "WITHINFO") == [[8, 10]]
        batch(r, "kv", "b", 1, "k", "a")
        ack = as_map(batch(r, "kv", "b", 2, "k", "b", "COMMIT"))
        assert ack["seq"] == 12
        assert [e[0] for e in r.execute_command("TREAD", "kv", "-", 10)] == [10, 11, 12]

    def test_limit_survives_a_restart_with_the_aof(self, make_server, tmp_path):
        proc = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always")
        c = proc.client(protocol=3)
        write(c, "kv", *[("k.a", "1"), ("k.b", "1"), ("k.a", "2"), ("k.a", "3")])
        c.execute_command("TCONFIG", "kv", "SET", "max_msgs_per_subject", 2)  # deletes 1
        c.execute_command("TWRITE", "kv", "k.a", "4")                       # deletes 3
        c.execute_command("TWRITE", "kv", "k.b", "2")
        batch(c, "kv", "b", 1, "k.a", "5")
        batch(c, "kv", "b", 2, "k.c", "1", "COMMIT")                         # deletes 5
        time.sleep(0.3)  # the housekeeping pass logs the TWRITE/TCONFIG deletions
        before = state(c, "kv")
        assert [e[0] if e else None for e in before[1:]] == [None, 2, None, None, 5, 6, 7, 8]
        records = aof_records(tmp_path)
        appends = [rec for rec in records if rec[0] == 1 and rec[1] == b"kv"]
        assert appends[-1][2:3] == [7] and appends[-1][4:] == [b"k.a", b"5", b"k.c", b"1"]
        deleted = sorted(o for rec in records if rec[0] == 8 and rec[1] == b"kv" for o in rec[2:])
        assert deleted == [1, 3, 4]
        proc.stop()
        proc.start()
        c = proc.client(protocol=3)
        assert state(c, "kv") == before
        assert as_map(dget(c, "kv", "SUBJECT", "k.a"))["seq"] == 7
        c.execute_command("TWRITE", "kv", "k.b", "3")  # the limit still holds after the restart
        assert c.execute_command("TREAD", "kv", 2, 1) == [None]


def test_limit_deletions_are_logged_by_their_own_server_when_two_share_a_process(tmp_path):
    # Each keyspace keeps its own set of subject indexes with deletions to log:
    # one embedded server's housekeeping must not take (and drop) the other's.
    from tstream.server.embed import ServerThread

    dirs = [tmp_path / "one", tmp_path / "two"]
    for d in dirs:
        d.mkdir()
    with ServerThread(port=0, dir=dirs[0], save="", appendonly=True) as one, \
            ServerThread(port=0, dir=dirs[1], save="", appendonly=True) as two:
        clients = [redis.Redis(port=srv.port) for srv in (one, two)]
        for c in clients:
            write(c, "kv", ("k.a", "1"), ("k.a", "2"))
            c.execute_command("TCONFIG", "kv", "SET", "max_msgs_per_subject", 1)  # deletes 1
        for c in clients:
            c.execute_command("TWRITE", "kv", "k.a", "3")                       # deletes 2
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            logged = [sorted(o for rec in aof_records(d) if rec[0] == 8 and rec[1] == b"kv" for o in rec[2:])
                      for d in dirs]
            if logged == [[1, 2], [1, 2]]:
                break
            time.sleep(0.05)
        assert logged == [[1, 2], [1, 2]]
        for c in clients:
            c.close()


def aof_records(directory: Path) -> list:
    """Every record of the append-only file's incremental parts, in order."""
    from tstream.persistence.aof import records_of

    records = []
    for path in sorted((directory / "appendonlydir").glob("*.incr.aof")):
        records += records_of(path.read_bytes())
    return records


def test_commands_are_documented(cli):
    out = cli("COMMAND", "DOCS", "DGET", "MLAST", "BATCH", raw=True)
    for name in ("dget", "mlast", "batch"):
        assert name in out
    assert "JetStream direct get" in out and "Atomic batch publish" in out
    assert "batch-seq" in out and "SUBJECTS" in out.upper()


def test_wire_format_of_maps_and_nulls(server):
    """Message maps are RESP3 maps (flat arrays in RESP2); a miss is *-1 / _."""
    import socket

    def exchange(sock, payload: bytes) -> bytes:
        sock.sendall(payload)
        time.sleep(0.2)
        return sock.recv(65536)

    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        exchange(sock, b"TWRITE w a.b hello\r\n")
        assert exchange(sock, b"DGET w SEQ 9\r\n") == b"*-1\r\n"
        reply = exchange(sock, b"DGET w SUBJECT a.b\r\n")
        assert reply.startswith(b"*10\r\n$6\r\nstream\r\n$1\r\nw\r\n$7\r\nsubject\r\n$3\r\na.b\r\n$3\r\nseq\r\n:1\r\n")
        assert reply.endswith(b"$4\r\ndata\r\n$5\r\nhello\r\n")
        exchange(sock, b"HELLO 3\r\n")
        assert exchange(sock, b"DGET w SEQ 9\r\n") == b"_\r\n"
        assert exchange(sock, b"DGET w SUBJECT a.b\r\n").startswith(b"%5\r\n$6\r\nstream\r\n")
        reply = exchange(sock, b"DGET w SEQ 1 BATCH 1\r\n")
        assert reply.startswith(b"*2\r\n%7\r\n") and b"%4\r\n$6\r\nstatus\r\n:204\r\n" in reply


def test_time_texts_page_forms():
    """TimeTexts.page's three forms (one second's prefix, each message's
    prefix, texts) all give each time's RFC 3339 text."""
    import random

    from tstream.commands.jetstream import TimeTexts

    def texts_of(fractions, prefix):
        if prefix is None:
            return fractions
        prefixes = prefix if isinstance(prefix, list) else [prefix] * len(fractions)
        return [b"%s.%09dZ" % (p, f) for p, f in zip(prefixes, fractions)]

    rng = random.Random(5)
    texts = TimeTexts()
    base = 1_732_000_000 * 10**9
    cases = [[], [base + 5], sorted(base + rng.randrange(10**9) for _ in range(50)),
             sorted(base + rng.randrange(30 * 10**9) for _ in range(50)),
             [base + k * 10**9 for k in range(TimeTexts.MAX + 10)],  # more seconds than are kept: texts
             [10**9 * 253_402_300_799, 10**9 * 253_402_300_800 + 7]]  # 9999-12-31T23:59:59 then year 10000
    kinds = set()
    for times in cases:
        fractions, prefix = texts.page(times)
        kinds.add(type(prefix).__name__)
        assert texts_of(fractions, prefix) == [TimeTexts().format(t) for t in times]
    assert kinds == {"bytes", "list", "NoneType"}


def raw_exchange(sock, reader, *words) -> tuple[bytes, object]:
    """Send one request, return its reply's bytes and what hiredis parses of them."""
    from tstream.resp import encode

    sock.sendall(encode([w if isinstance(w, bytes) else str(w).encode() for w in words], 2))
    got = b""
    while True:
        chunk = sock.recv(1 << 20)
        assert chunk
        got += chunk
        reader.feed(chunk)
        reply = reader.gets()
        if reply is not False:
            return got, reply


def check_page(exchange, key: str, messages: dict, start: int, batch: int, held: list) -> None:
    """``DGET key SEQ start BATCH batch`` holds the held messages from ``start``
    on as ``messages`` has them, with their num_pending and last_seq."""
    reply = maps(exchange("DGET", key, "SEQ", start, "BATCH", batch)[1])
    after = [o for o in held if o >= start]
    want = after[:batch]
    assert [m["seq"] for m in reply[:-1]] == want
    for k, m in enumerate(reply[:-1]):
        first = messages[m["seq"]]
        assert (m["subject"], m["data"], m["time"]) == (first["subject"], first["data"], first["time"])
        assert m["num_pending"] == len(after) - k - 1 and m["last_seq"] == (want[k - 1] if k else 0)
    assert reply[-1]["num_pending"] == len(after) - len(want) and reply[-1]["last_seq"] == want[-1]


@pytest.mark.parametrize("protocol", [2, 3])
def test_pages_read_again_are_their_first_reads_bytes(server, protocol):
    """DGET pages over sealed nodes: a block read a second time serves its
    messages from the pieces it keeps rendered (Stream.read_pieces); every page
    read again is byte for byte its first read (columns), RESP2 and RESP3, pages
    of other alignments hold the same messages, and deleted or evicted
    entries are skipped after the blocks were rendered."""
    import socket
    from functools import partial

    import hiredis

    client = server.client()
    key = "pages:%d" % protocol
    for first in range(0, 2600, 200):
        write(client, key, *[(f"t.{i % 30}", "x" * (i % 150) + f"-{i}") for i in range(first, first + 200)])
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        exchange = partial(raw_exchange, sock, hiredis.Reader())
        if protocol == 3:
            exchange("HELLO", 3)
        pages = [("SEQ", o, "BATCH", 100) for o in range(1, 2601, 100)] + [("SEQ", 37, "BATCH", 1000)]
        first = [exchange("DGET", key, *page)[0] for page in pages]
        for _ in range(3):
            assert [exchange("DGET", key, *page)[0] for page in pages] == first
        # every message as its first read gave it (bar num_pending and last_seq)
        messages = {m["seq"]: m for page in pages for m in maps(exchange("DGET", key, *page)[1])[:-1]}
        assert sorted(messages) == list(range(1, 2601))
        for start, batch in [(1, 37), (5, 100), (990, 30), (1, 1), (2590, 50), (1500, 333)]:
            check_page(exchange, key, messages, start, batch, list(range(1, 2601)))
        # evicted up to the middle of a block, then deleted entries, after the blocks were rendered
        client.execute_command("TEVICT", key, 1015)
        for start, batch in [(1, 100), (1016, 50), (1100, 7)]:
            check_page(exchange, key, messages, start, batch, list(range(1016, 2601)))
        client.execute_command("TCONFIG", key, "SET", "max_msgs_per_subject", 40)  # the newest 1,200 are kept
        for start, batch in [(1, 100), (1200, 300), (1990, 20), (2590, 50)]:
            check_page(exchange, key, messages, start, batch, list(range(1401, 2601)))
    client.close()


def test_pages_written_in_c_are_the_pure_python_servers_bytes(make_server, tmp_path, monkeypatch):
    """DGET pages written in C from the log's tables (resp.encode_table_page)
    are, byte for byte, the pages of a server running the pure-Python path
    (TSTREAM_PURE_PYTHON=1: columns, encode_message_page) on the same data (its
    snapshot): sealed nodes of several blocks, the active node, every alignment
    of pages of 1-1,024, MAX_BYTES cuts, RESP2 and RESP3, then after TEVICT to
    the middle of a block and after deletions (whose nodes go the columns' way
    in both)."""
    import random
    import shutil
    import socket
    from functools import partial

    import hiredis

    (tmp_path / "c").mkdir()
    c_server = make_server("--save", "", directory=tmp_path / "c")
    client = c_server.client()
    for first in range(0, 3000, 250):
        write(client, "k", *[(f"t.{i % 37}" + "x" * (i % 5), "y" * (i * 7 % 300) + f"-{i}") for i in range(first, first + 250)])
    write(client, "k%", ("s", "1"), ("s", "2"))
    client.execute_command("SAVE")
    shutil.copytree(tmp_path / "c", tmp_path / "py", ignore=shutil.ignore_patterns("server.log"))
    monkeypatch.setenv("TSTREAM_PURE_PYTHON", "1")
    py_server = make_server("--save", "", directory=tmp_path / "py")
    rng = random.Random(11)
    with socket.create_connection(("127.0.0.1", c_server.port)) as c_sock, \
            socket.create_connection(("127.0.0.1", py_server.port)) as py_sock:
        c_exchange = partial(raw_exchange, c_sock, hiredis.Reader())
        py_exchange = partial(raw_exchange, py_sock, hiredis.Reader())

        def same(*words):
            got = c_exchange(*words)[0]
            assert got == py_exchange(*words)[0], words
            return got

        for protocol in (2, 3, 2):
            c_exchange("HELLO", protocol)  # (the replies hold each server's client id)
            py_exchange("HELLO", protocol)
            for _ in range(120):
                page = ["SEQ", rng.randrange(0, 3010), "BATCH", rng.choice((1, 2, 37, 100, 1000, 1024))]
                if rng.random() < 0.3:
                    page += ["MAX_BYTES", rng.choice((1, 100, 2000, 30_000))]
                same("DGET", "k", *page)
            same("DGET", "k%", "SEQ", 1, "BATCH", 5)
            same("DGET", "k", "SEQ", 2990, "BATCH", 1024)
        for words in (("TEVICT", "k", 1003), ("TCONFIG", "k", "SET", "max_msgs_per_subject", 50)):
            same(*words)
            for _ in range(60):
                same("DGET", "k", "SEQ", rng.randrange(0, 3010), "BATCH", rng.choice((1, 100, 1024)))
