"""The Redis Streams data commands against redis-server, byte for byte.

Fixed sequences (errors, edge ids, trims, XSETID, XINFO) and seeded random
sequences (explicit ids, so the clock does not matter: ``XADD`` with ids and
``ms-*``, trims with ``=``, deletes, ranges with exclusive bounds and COUNT,
XREAD with COUNT and with a BLOCK that times out, bad syntax; 40 seeds of 300
commands, the first few in every run and the rest with ``-m slow``) run on both
servers over raw sockets, RESP2 and RESP3, and every reply must be the same
bytes; so do readers blocked in XREAD/XREADGROUP that another client's XADD
wakes.  Only XINFO's ``radix-tree-keys``/``radix-tree-nodes`` (Redis's
internal tree) are left out of the comparison.
"""

from __future__ import annotations

import random
import re
import time

import pytest

from .harness import encode_command
from .test_transactions import Raw

_RADIX = re.compile(rb"(\$1[56]\r\nradix-tree-(?:keys|nodes)\r\n):\d+\r\n")


def normalized(reply: bytes) -> bytes:
    return _RADIX.sub(rb"\1:0\r\n", reply)


def run_both(server_port: int, redis_port: int, commands, protocol: int, normalize=None) -> None:
    """Send ``commands`` to both servers, one by one, and compare each reply's
    bytes (after ``normalize``, which zeroes what depends on the clock)."""
    normalize = normalize or normalized
    ours, theirs = Raw(server_port, protocol), Raw(redis_port, protocol)
    try:
        ours.call("FLUSHALL")
        theirs.call("FLUSHALL")
        for words in commands:
            mine, want = normalize(ours.call(*words)), normalize(theirs.call(*words))
            assert mine == want, f"{' '.join(map(str, words))}:\n tstream {mine[:400]!r}\n redis   {want[:400]!r}"
    finally:
        ours.close()
        theirs.close()


FIXED = [
    # XADD: ids, errors, options
    ("XADD", "k", "1-1", "a", "1"), ("XADD", "k", "1-1", "a", "1"), ("XADD", "k", "0-0", "a", "1"),
    ("XADD", "k", "abc", "a", "1"), ("XADD", "k", "1-1", "a"), ("XADD", "k", "-1", "a", "1"),
    ("XADD", "k", "1-*", "a", "1"), ("XADD", "k", "*-1", "a", "1"), ("XADD", "k", "18446744073709551616", "a", "1"),
    # ids with leading zeros (accepted) and with thousands of digits (refused, not a Python error)
    ("XADD", "k", "0" * 50 + "1-1", "a", "1"), ("XADD", "k", "1-" + "0" * 45 + "2", "a", "1"),
    ("XADD", "k", "9" * 5000, "a", "1"), ("XADD", "k", "1-" + "9" * 5000, "a", "1"),
    ("XACK", "k", "g", "9" * 5000), ("XRANGE", "k", "0" * 50 + "1", "+"),
    ("XADD", "k", "MAXLEN", "abc", "5-*", "a", "1"), ("XADD", "k", "MAXLEN", "-1", "5-*", "a", "1"),
    ("XADD", "k", "LIMIT", "10", "5-*", "a", "1"), ("XADD", "k", "MAXLEN", "10", "LIMIT", "10", "5-*", "a", "1"),
    ("XADD", "k", "MAXLEN", "1", "MINID", "1", "6-*", "a", "1"), ("XADD", "k", "MAXLEN", "~", "10", "LIMIT", "10", "5-*", "a", "1"),
    ("XADD", "k", "NOMKSTREAM", "MINID", "0", "5-*", "f", "v", "g", "w"), ("XADD", "k2", "NOMKSTREAM", "7-7", "f", "v"),
    ("XADD", "k", "MAXLEN", "=", "3", "9-0", "x", "y"), ("XLEN", "k"), ("XADD", "z", "0-1", "f", "v"),
    # ranges
    ("XRANGE", "k", "-", "+"), ("XRANGE", "k", "abc", "+"), ("XRANGE", "k", "-", "+", "COUNT", "-1"),
    ("XRANGE", "k", "-", "+", "COUNT", "0"), ("XRANGE", "k", "-", "+", "COUNT", "1"), ("XRANGE", "k", "-", "+", "COUNT"),
    ("XRANGE", "k", "-", "+", "FOO", "1"), ("XRANGE", "k", "(", "+"), ("XRANGE", "k", "(-", "+"),
    ("XRANGE", "k", "(5-0", "+"), ("XRANGE", "k", "(18446744073709551615-18446744073709551615", "+"),
    ("XRANGE", "k", "-", "(0-0"), ("XRANGE", "k", "5", "5"), ("XRANGE", "k", "+", "-"), ("XRANGE", "nokey", "-", "+"),
    ("XREVRANGE", "k", "+", "-"), ("XREVRANGE", "k", "+", "-", "COUNT", "2"), ("XREVRANGE", "k", "9", "5"),
    ("XREVRANGE", "k", "(9-0", "-"), ("XREVRANGE", "k", "-", "+"),
    # deletes, trims
    ("XDEL", "k", "5-1", "99-9"), ("XDEL", "k", "abc"), ("XDEL", "nokey", "1-1"), ("XLEN", "k"), ("XLEN", "nokey"),
    ("XTRIM", "k"), ("XTRIM", "k", "MAXLEN"), ("XTRIM", "k", "FOO", "1"), ("XTRIM", "nokey", "MAXLEN", "1"),
    ("XTRIM", "k", "MAXLEN", "=", "1"), ("XRANGE", "k", "-", "+"), ("XTRIM", "k", "MINID", "~", "100"),
    ("XTRIM", "k", "MAXLEN", "1", "LIMIT", "5"),
    # XSETID
    ("XADD", "s", "1-1", "a", "1"), ("XSETID", "s", "0-5"), ("XSETID", "s", "1-0"), ("XSETID", "s", "1-1", "MAXDELETEDID", "2-0"),
    ("XSETID", "s", "3-0", "MAXDELETEDID", "2-0"), ("XSETID", "s", "3-0", "ENTRIESADDED", "0"),
    ("XSETID", "s", "3-0", "ENTRIESADDED", "-1"), ("XSETID", "s", "3-0", "ENTRIESADDED", "abc"),
    ("XSETID", "s", "3-0", "FOO"), ("XSETID", "nokey", "1-1"), ("XADD", "s", "3-0", "a", "1"), ("XADD", "s", "3-1", "a", "1"),
    ("XDEL", "s", "3-1"), ("XSETID", "s", "3-0"), ("XSETID", "s", "3-1"), ("XADD", "s", "3-*", "q", "r"),
    # XREAD (non-blocking, and a BLOCK that times out)
    ("XREAD", "STREAMS", "s"), ("XREAD", "COUNT", "1", "STREAMS", "s", "0"), ("XREAD", "STREAMS", "s", "s", "0"),
    ("XREAD", "BLOCK", "-1", "STREAMS", "s", "0"), ("XREAD", "STREAMS", "s", "abc"), ("XREAD", "FOO", "STREAMS", "s", "0"),
    ("XREAD", "STREAMS", "s", ">"), ("XREAD", "STREAMS", "s", "nokey", "0", "0"), ("XREAD", "STREAMS", "nokey", "0"),
    ("XREAD", "BLOCK", "5", "STREAMS", "nokey", "0"), ("XREAD", "BLOCK", "5", "STREAMS", "s", "$"),
    ("XREAD", "COUNT", "0", "STREAMS", "s", "k", "1-1", "0"), ("XREAD", "STREAMS", "s", "1"),
    # XINFO
    ("XINFO", "STREAM", "nokey"), ("XINFO", "FOO"), ("XINFO", "STREAM", "s"), ("XINFO", "STREAM", "s", "FULL"),
    ("XINFO", "STREAM", "s", "FULL", "COUNT", "1"), ("XINFO", "STREAM", "s", "FOO"), ("XINFO", "STREAM"),
    ("XADD", "e", "1-1", "a", "1"), ("XDEL", "e", "1-1"), ("XINFO", "STREAM", "e"), ("XINFO", "STREAM", "e", "FULL"),
    ("XINFO", "HELP"), ("xinfo", "help"), ("XINFO", "HELP", "x"),
    # several pairs, arity
    ("XADD", "m", "1-1", "f1", "v1", "f2", "v2", "f3", "v3"), ("XADD", "m", "1-2", "f1", "v1"), ("XRANGE", "m", "-", "+"),
    ("XREVRANGE", "m", "+", "-", "COUNT", "1"), ("XADD", "m"), ("XRANGE", "m", "-"), ("XLEN",), ("XDEL", "m"),
    ("xadd", "m", "maxlen", "=", "1", "2-0", "F", "V"), ("xrange", "m", "-", "+"),
]


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_fixed_sequence_matches_redis(server, redis_oracle, protocol):
    run_both(server.port, redis_oracle, FIXED, protocol)


def random_commands(seed: int, n: int = 300) -> list[tuple]:  # noqa: C901 (one branch per command)
    rng = random.Random(seed)
    keys = ["a", "b"]
    top = {key: [0, 0] for key in keys}
    made: dict[str, list[str]] = {key: [] for key in keys}
    out: list[tuple] = []

    def an_id(key: str) -> str:
        ms, seq = top[key]
        pick = rng.random()
        if pick < 0.1 and made[key]:
            return rng.choice(made[key])  # an existing id (refused by XADD)
        if pick < 0.2:
            return f"{max(0, ms - 1)}-{rng.randrange(3)}"
        return f"{ms + rng.choice([0, 0, 1, 2])}-{seq + rng.randrange(1, 3)}" if rng.random() < 0.5 \
            else f"{ms + rng.randrange(1, 4)}-{rng.randrange(3)}"

    def bound() -> str:
        key_ids = made[rng.choice(keys)]
        pick = rng.random()
        if pick < 0.15:
            return rng.choice(["-", "+"])
        base = rng.choice(key_ids) if key_ids else "1-0"
        if pick < 0.3:
            return base.split("-")[0]
        if pick < 0.45:
            return "(" + base
        return base

    for _ in range(n):
        key = rng.choice(keys)
        op = rng.random()
        if op < 0.35:
            words = ["XADD", key]
            if rng.random() < 0.15:
                words += rng.choice([["MAXLEN", "=", str(rng.randrange(0, 8))], ["MAXLEN", str(rng.randrange(0, 8))],
                                     ["MINID", "=", bound().lstrip("(") if rng.random() < 0.7 else "2"]])
            if rng.random() < 0.15:
                xid = f"{top[key][0] + rng.randrange(0, 2)}-*"
            else:
                xid = an_id(key)
            pairs = rng.choice([["f", str(rng.randrange(100))], ["f", "1", "g", "2"], ["x", "y", "x", "z", "w", ""]])
            words += [xid, *pairs]
            out.append(tuple(words))
            # track what redis would do (explicit ids only; a refused one changes nothing)
            if xid.endswith("-*"):
                ms = int(xid[:-2])
                new = [ms, 0] if ms > top[key][0] else ([ms, top[key][1] + 1] if ms == top[key][0] else None)
            else:
                ms, seq = map(int, xid.split("-"))
                new = [ms, seq] if [ms, seq] > top[key] else None
            if new is not None and new != [0, 0]:
                top[key] = new
                made[key].append(f"{new[0]}-{new[1]}")
        elif op < 0.5:
            words = ["XRANGE" if rng.random() < 0.6 else "XREVRANGE", key, bound(), bound()]
            if rng.random() < 0.5:
                words += ["COUNT", str(rng.randrange(-1, 5))]
            out.append(tuple(words))
        elif op < 0.6 and made[key]:
            ids = [rng.choice(made[key]) for _ in range(rng.randrange(1, 3))]
            out.append(("XDEL", key, *ids))
        elif op < 0.67:
            kind = rng.random()
            if kind < 0.5:
                out.append(("XTRIM", key, "MAXLEN", rng.choice(["=", "="]), str(rng.randrange(0, 10))))
            else:
                out.append(("XTRIM", key, "MINID", bound().lstrip("(")))
        elif op < 0.75:
            out.append(("XLEN", key))
        elif op < 0.85:
            words = ["XREAD"]
            if rng.random() < 0.5:
                words += ["COUNT", str(rng.randrange(0, 4))]
            if rng.random() < 0.2:
                words += ["BLOCK", "1"]
            chosen = rng.sample(keys, rng.randrange(1, 3))
            words += ["STREAMS", *chosen, *[bound().lstrip("(").replace("+", "$").replace("-", "0") for _ in chosen]]
            out.append(tuple(words))
        elif op < 0.9:
            words = ["XSETID", key, f"{max(0, top[key][0] + rng.randrange(-1, 3))}-{rng.randrange(0, 5)}"]
            if rng.random() < 0.3:
                words += ["ENTRIESADDED", str(rng.randrange(0, 30))]
            out.append(tuple(words))  # (a top redis accepts is not followed: later ids may be refused by both)
        elif op < 0.95:
            out.append(("XINFO", "STREAM", key))
        else:
            out.append(rng.choice([("XADD", key, "*"), ("XRANGE", key), ("XTRIM", key, "MAXLEN", "x"),
                                   ("XREAD", "STREAMS", key), ("XDEL", key, "a-b"), ("XSETID", key, "x")]))
    return out


# 40 seeds of 300 commands each: the first ones in every run, the rest marked slow.
SEEDS = 40
FAST_SEEDS = 6


def seeds(fast: int) -> list:
    return [*range(fast), *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(fast, SEEDS))]


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
@pytest.mark.parametrize("seed", seeds(FAST_SEEDS))
def test_random_sequences_match_redis(server, redis_oracle, seed, protocol):
    run_both(server.port, redis_oracle, random_commands(seed), protocol)


# --- consumer groups ------------------------------------------------------------------------------

_IDLE = re.compile(rb"(\$4\r\nidle\r\n):\d+\r\n")
_PENDING_ROW = re.compile(rb"(\*4\r\n\$\d+\r\n[0-9]+-[0-9]+\r\n\$\d+\r\n[^\r]*\r\n):\d+\r\n(:-?\d+\r\n)")


def normalized_groups(reply: bytes) -> bytes:
    """Idle times (XPENDING's rows, XINFO CONSUMERS) depend on the clock: zeroed."""
    return _PENDING_ROW.sub(rb"\1:0\r\n\2", _IDLE.sub(rb"\1:0\r\n", normalized(reply)))


def run_both_groups(server_port: int, redis_port: int, commands, protocol: int) -> None:
    run_both(server_port, redis_port, commands, protocol, normalized_groups)


GROUPS_FIXED = [
    ("XGROUP", "CREATE", "k", "g", "$"), ("XGROUP", "CREATE", "k", "g", "$", "MKSTREAM"),
    ("XGROUP", "CREATE", "k", "g", "$", "MKSTREAM"), ("XGROUP", "CREATE", "k", "g2", "0", "ENTRIESREAD", "-5"),
    ("XGROUP", "CREATE", "k", "g2", "0", "FOO"), ("XGROUP", "CREATE", "k", "g2", "abc"),
    ("XADD", "k", "1-1", "a", "1"), ("XADD", "k", "1-2", "b", "2"), ("XADD", "k", "2-0", "c", "3", "d", "4"),
    ("XREADGROUP", "GROUP", "g", "alice", "COUNT", "1", "STREAMS", "k", ">"),
    ("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "k", ">"), ("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "k", ">"),
    ("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "k", "0"), ("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "k", "0-0"),
    ("XREADGROUP", "GROUP", "nog", "bob", "STREAMS", "k", ">"), ("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "nokey", ">"),
    ("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "k", "$"), ("XREADGROUP", "STREAMS", "k", ">"),
    ("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "k"), ("XREADGROUP", "GROUP", "g", "bob", "COUNT", "x", "STREAMS", "k", ">"),
    ("XREADGROUP", "GROUP", "g", "bob", "BLOCK", "5", "STREAMS", "k", ">"),
    # the 9-word form the handler serves on its own: bad counts, no group, no key, lower case
    ("XREADGROUP", "GROUP", "g", "bob", "COUNT", "-5", "STREAMS", "k", ">"),
    ("XREADGROUP", "GROUP", "g", "bob", "COUNT", "99999999999999999999", "STREAMS", "k", ">"),
    ("XREADGROUP", "GROUP", "nog", "bob", "COUNT", "1", "STREAMS", "k", ">"),
    ("XREADGROUP", "GROUP", "g", "bob", "COUNT", "1", "STREAMS", "nokey", ">"),
    ("xreadgroup", "group", "g", "bob", "count", "0", "streams", "k", ">"),
    ("XPENDING", "k", "g"), ("XPENDING", "k", "nog"), ("XPENDING", "k", "g", "-", "+", "10", "bob"),
    ("XPENDING", "k", "g", "-", "+", "10", "nobody"), ("XPENDING", "k", "g", "-", "+"),
    ("XPENDING", "k", "g", "IDLE", "0", "-", "+", "10"), ("XPENDING", "k", "g", "(1-1", "+", "1"),
    ("XACK", "k", "g", "1-2", "9-9"), ("XACK", "k", "g", "abc"), ("XACK", "nokey", "g", "1-1"), ("XPENDING", "k", "g"),
    ("XINFO", "GROUPS", "k"), ("XINFO", "GROUPS", "nokey"), ("XINFO", "CONSUMERS", "k", "nog"), ("XINFO", "CONSUMERS", "k", "g"),
    ("XGROUP", "CREATECONSUMER", "k", "g", "carol"), ("XGROUP", "CREATECONSUMER", "k", "g", "carol"),
    ("XGROUP", "CREATECONSUMER", "k", "nog", "carol"), ("XGROUP", "DELCONSUMER", "k", "g", "bob"),
    ("XGROUP", "DELCONSUMER", "k", "g", "nobody"), ("XPENDING", "k", "g"), ("XGROUP", "SETID", "k", "g", "0"),
    ("XGROUP", "SETID", "k", "g", "$", "ENTRIESREAD", "3"), ("XGROUP", "SETID", "k", "nog", "0"),
    ("XGROUP", "SETID", "nokey", "g", "0"), ("XGROUP", "SETID", "k", "g", "0"), ("XINFO", "GROUPS", "k"),
    ("XREADGROUP", "GROUP", "g", "dave", "NOACK", "STREAMS", "k", ">"), ("XPENDING", "k", "g"), ("XINFO", "GROUPS", "k"),
    ("XCLAIM", "k", "g", "erin", "0", "1-1"), ("XCLAIM", "k", "g", "erin", "0", "1-1", "JUSTID"),
    ("XCLAIM", "k", "g", "erin", "0", "1-2", "FORCE"), ("XPENDING", "k", "g", "-", "+", "10"),
    ("XCLAIM", "k", "g", "erin", "abc", "1-1"), ("XCLAIM", "k", "g", "erin", "0", "1-1", "FOO"),
    ("XCLAIM", "k", "g", "erin", "0", "1-1", "RETRYCOUNT", "7", "JUSTID"), ("XCLAIM", "k", "nog", "erin", "0", "1-1"),
    ("XCLAIM", "k", "g", "erin", "0", "1-1", "LASTID", "5-0"), ("XINFO", "GROUPS", "k"),
    ("XAUTOCLAIM", "k", "g", "frank", "0", "0"), ("XAUTOCLAIM", "k", "g", "frank", "0", "0", "COUNT", "1"),
    ("XAUTOCLAIM", "k", "g", "frank", "0", "0", "COUNT", "0"), ("XAUTOCLAIM", "k", "g", "frank", "0", "0", "JUSTID"),
    ("XAUTOCLAIM", "k", "g", "frank", "abc", "0"), ("XAUTOCLAIM", "k", "nog", "frank", "0", "0"),
    ("XAUTOCLAIM", "k", "g", "frank", "0", "0", "COUNT", "abc"),
    ("XAUTOCLAIM", "k", "g", "frank", "0", "0", "COUNT", "9223372036854775808"),
    ("XDEL", "k", "1-1"), ("XAUTOCLAIM", "k", "g", "frank", "0", "0"), ("XREADGROUP", "GROUP", "g", "frank", "STREAMS", "k", "0"),
    ("XINFO", "STREAM", "k"), ("XGROUP", "DESTROY", "k", "g"), ("XGROUP", "DESTROY", "k", "g"),
    ("XGROUP", "DESTROY", "nokey", "g"), ("XGROUP", "FOO", "k", "g"), ("XGROUP", "CREATE", "k"),
    ("XGROUP", "HELP"), ("xgroup", "help"), ("XGROUP", "HELP", "x"),
]


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_group_sequence_matches_redis(server, redis_oracle, protocol):
    run_both_groups(server.port, redis_oracle, GROUPS_FIXED, protocol)


# New entries handed out by XREADGROUP's 9-word form, served from columns: entries of
# two pairs (bench/xstreams.py's), of three, of one, mixed runs, empty and binary values.
PAIRS_FIXED = [
    ("XGROUP", "CREATE", "p", "g", "$", "MKSTREAM"),
    *[("XADD", "p", f"1-{i}", "seq", str(i), "payload", "x" * (i * 37 % 120)) for i in range(1, 13)],
    ("XREADGROUP", "GROUP", "g", "c1", "COUNT", "10", "STREAMS", "p", ">"),
    ("XREADGROUP", "GROUP", "g", "c2", "COUNT", "10", "STREAMS", "p", ">"),
    ("XADD", "p", "2-0", "a", "1", "b", "2", "c", "3"), ("XADD", "p", "2-1", "a", "", "b", ""),
    ("XADD", "p", "2-2", "only", "one"), ("XADD", "p", "3-0", "f\r\n", "v\x00\xff", "g", "w" * 300),
    ("XREADGROUP", "GROUP", "g", "c1", "COUNT", "2", "STREAMS", "p", ">"),
    ("XREADGROUP", "GROUP", "g", "c1", "COUNT", "10", "STREAMS", "p", ">"),
    ("XADD", "p", "4-0", "x", "1", "y", "2"), ("XADD", "p", "4-1", "x", "1", "y", "2", "z", "3", "w", "4"),
    ("XDEL", "p", "4-0"), ("XADD", "p", "4-2", "x", "1", "y", "2"),
    ("XREADGROUP", "GROUP", "g", "c2", "COUNT", "10", "STREAMS", "p", ">"),
    ("XPENDING", "p", "g", "-", "+", "20"), ("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "p", "0"),
    ("XACK", "p", "g", "1-1", "1-2", "1-3", "1-4", "1-5", "1-6", "1-7", "1-8", "1-9", "1-10"),
    ("XACK", "p", "g", "1-11", "1-11", "1-012", "2-0", "9-9"), ("XPENDING", "p", "g"),
    ("XACK", "p", "g", "2-1", "2-2", "3-0", "4-1", "4-2"), ("XPENDING", "p", "g"), ("XINFO", "GROUPS", "p"),
]


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_group_reads_of_several_pairs_match_redis(server, redis_oracle, protocol):
    run_both_groups(server.port, redis_oracle, PAIRS_FIXED, protocol)


def random_group_commands(seed: int, n: int = 300) -> list[tuple]:  # noqa: C901 (one branch per command)
    rng = random.Random(seed)
    out: list[tuple] = [("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM")]
    ms = 1
    made: list[str] = []
    consumers = ["c1", "c2", "c3"]
    groups = ["g", "h"]

    def some_id() -> str:
        if made and rng.random() < 0.8:
            return rng.choice(made)
        return f"{rng.randrange(0, ms + 2)}-{rng.randrange(3)}"

    for _ in range(n):
        op = rng.random()
        group = rng.choice(groups)
        consumer = rng.choice(consumers)
        if op < 0.25:
            ms += rng.randrange(0, 3)
            xid = f"{ms}-{rng.randrange(0, 3) + (len(made) if made and made[-1].startswith(f'{ms}-') else 0)}"
            out.append(("XADD", "s", xid, "f", str(rng.randrange(50))))
            if not made or tuple(map(int, xid.split("-"))) > tuple(map(int, made[-1].split("-"))):
                made.append(xid)
        elif op < 0.45:
            words = ["XREADGROUP", "GROUP", group, consumer]
            if rng.random() < 0.6:
                words += ["COUNT", str(rng.randrange(0, 4))]
            if rng.random() < 0.15:
                words += ["NOACK"]
            if rng.random() < 0.1:
                words += ["BLOCK", "1"]
            words += ["STREAMS", "s", ">" if rng.random() < 0.7 else rng.choice(["0", some_id()])]
            out.append(tuple(words))
        elif op < 0.55:
            out.append(("XACK", "s", group, *[some_id() for _ in range(rng.randrange(1, 4))]))
        elif op < 0.62:
            words = ["XPENDING", "s", group]
            if rng.random() < 0.6:
                words += ["-", "+", str(rng.randrange(0, 6))]
                if rng.random() < 0.4:
                    words.append(consumer)
            out.append(tuple(words))
        elif op < 0.7:
            words = ["XCLAIM", "s", group, consumer, "0", *[some_id() for _ in range(rng.randrange(1, 3))]]
            words += rng.choice([[], ["JUSTID"], ["RETRYCOUNT", "3"], ["FORCE"], ["LASTID", some_id()]])
            out.append(tuple(words))
        elif op < 0.76:
            words = ["XAUTOCLAIM", "s", group, consumer, "0", rng.choice(["0", "-", some_id()])]
            words += rng.choice([[], ["COUNT", str(rng.randrange(1, 4))], ["JUSTID"]])
            out.append(tuple(words))
        elif op < 0.8 and made:
            out.append(("XDEL", "s", some_id()))
        elif op < 0.83:
            out.append(("XTRIM", "s", "MAXLEN", "=", str(rng.randrange(2, 12))))
        elif op < 0.87:
            out.append(rng.choice([("XGROUP", "CREATE", "s", group, rng.choice(["0", "$", some_id()])),
                                   ("XGROUP", "SETID", "s", group, rng.choice(["0", "$", some_id()])),
                                   ("XGROUP", "CREATECONSUMER", "s", group, consumer),
                                   ("XGROUP", "DELCONSUMER", "s", group, consumer)]))
        elif op < 0.89:
            out.append(("XGROUP", "DESTROY", "s", group))
        elif op < 0.95:
            out.append(rng.choice([("XINFO", "GROUPS", "s"), ("XINFO", "CONSUMERS", "s", group), ("XINFO", "STREAM", "s")]))
        else:
            out.append(rng.choice([("XREADGROUP", "GROUP", group, consumer, "STREAMS", "s", "$"), ("XACK", "s", group, "x"),
                                   ("XCLAIM", "s", group, consumer, "x", "1-1"), ("XPENDING", "s", group, "x", "+", "1"),
                                   ("XAUTOCLAIM", "s", group, consumer, "0", "0", "COUNT", "0")]))
    return out


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
@pytest.mark.parametrize("seed", seeds(8))
def test_random_group_sequences_match_redis(server, redis_oracle, seed, protocol):
    run_both_groups(server.port, redis_oracle, random_group_commands(seed), protocol)


# --- blocked reads woken by another client ----------------------------------------------------------

def _wait_blocked(port: int, count: int) -> None:
    """Until ``count`` clients are blocked on the server (INFO clients)."""
    probe = Raw(port)
    try:
        deadline = time.monotonic() + 5
        while b"blocked_clients:%d\r\n" % count not in probe.call("INFO", "clients"):
            assert time.monotonic() < deadline, "the reader never blocked"
            time.sleep(0.01)
    finally:
        probe.close()


def _woken_reads(port: int, protocol: int) -> list[bytes]:
    """Readers blocked in XREAD/XREADGROUP (with commands pipelined after them),
    then the XADDs of another client that serve them: what each reader got."""
    setup, writer = Raw(port, protocol), Raw(port, protocol)
    readers = [Raw(port, protocol) for _ in range(3)]
    try:
        for words in [("FLUSHALL",), ("XADD", "w1", "1-1", "f", "old"), ("XGROUP", "CREATE", "w1", "g", "$"),
                      ("XADD", "w2", "1-1", "f", "old")]:
            setup.call(*words)
        readers[0].sock.sendall(encode_command(("XREAD", "BLOCK", "5000", "STREAMS", "w1", "$"))
                                + encode_command(("PING", "after")))
        readers[1].sock.sendall(encode_command(("XREAD", "COUNT", "1", "BLOCK", "5000", "STREAMS", "w2", "w1",
                                                "1-1", "$")))
        readers[2].sock.sendall(encode_command(("XREADGROUP", "GROUP", "g", "alice", "BLOCK", "5000", "STREAMS",
                                                "w1", ">")) + encode_command(("XPENDING", "w1", "g")))
        _wait_blocked(port, 3)
        got = [writer.call("XADD", "w1", "2-1", "f", "new", "g", "h")]
        got += [read_quiet(reader.sock) for reader in readers]
        got.append(writer.call("XINFO", "GROUPS", "w1"))
        return got
    finally:
        for conn in (setup, writer, *readers):
            conn.close()


def read_quiet(sock, quiet: float = 0.2) -> bytes:
    received = b""
    sock.settimeout(quiet)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    except (TimeoutError, OSError):
        pass
    finally:
        sock.settimeout(10)
    return received


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_blocked_reads_woken_by_another_client_match_redis(server, redis_oracle, protocol):
    ours, theirs = _woken_reads(server.port, protocol), _woken_reads(redis_oracle, protocol)
    assert len(ours) == len(theirs) and all(theirs)  # every reader was served
    for mine, want in zip(ours, theirs):
        assert normalized_groups(mine) == normalized_groups(want)


# A delivery count past 2**63 - 1 (RETRYCOUNT at the limit, then one more
# delivery): Redis replies it as a long long (negative), never an integer reply
# out of range, which no client can read.
COUNT_AT_THE_LIMIT = [
    ("XADD", "k", "1-1", "a", "1"), ("XGROUP", "CREATE", "k", "g", "0"),
    ("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "k", ">"),
    ("XCLAIM", "k", "g", "bob", "0", "1-1", "RETRYCOUNT", "9223372036854775807", "JUSTID"),
    ("XPENDING", "k", "g", "-", "+", "10"), ("XCLAIM", "k", "g", "carol", "0", "1-1"),
    ("XPENDING", "k", "g", "-", "+", "10"), ("XAUTOCLAIM", "k", "g", "dave", "0", "0"),
    ("XPENDING", "k", "g", "-", "+", "10"),
]


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_a_delivery_count_past_int64_matches_redis(server, redis_oracle, protocol):
    run_both_groups(server.port, redis_oracle, COUNT_AT_THE_LIMIT, protocol)
    # XINFO STREAM FULL (delivery times differ between the two servers): a count a client reads
    full = server.client(protocol=protocol).execute_command("XINFO", "STREAM", "k", "FULL")
    group = full[b"groups"][0] if isinstance(full, dict) else dict(zip(full[::2], full[1::2]))[b"groups"][0]
    group = group if isinstance(group, dict) else dict(zip(group[::2], group[1::2]))
    assert group[b"pending"][0][3] == -(2**63) + 1
