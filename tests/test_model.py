"""Model-checked stress test: random commands through the in-process harness
(tests/harness.py) against a plain-Python reference model of the log.

Each seed drives a stream of random commands, all forms of TWRITE (simple,
pipelined runs, ENTRIES, BACKLOG), TREAD (plain, WITHINFO, GROUP with and
without RETRY, BLOCK from waiting clients), TACK (offsets and ranges), TEVICT,
TCONFIG SET (max_len, max_age_ms, max_msgs_per_subject, allow_direct,
allow_atomic), DEL, FLUSHALL, DGET, MLAST and atomic BATCHes, with the virtual
clock moving between them.  After every step:

- every reply, to the client that sent the command and to every blocked client
  served or timed out, equals the model's;
- every stream's, group's and subject index's ``_check()`` holds;
- replaying the effect log (after a housekeeping pass, as the server runs one
  every 100 ms) rebuilds the live keyspace.

The model follows the client contract (offsets, eviction order: max_len, then
max_age_ms, then max_msgs_per_subject; group reads: due retries first, then new
entries, capped by group-max-pending; blocked readers served at the end of the
turn, group readers first come first served).  Bugs it found are pinned by the
regression tests at the bottom (the random commands still use RETRY >= 1 ms and
create groups within the log).
"""

from __future__ import annotations

import random
import time

import pytest

from .harness import Harness, ReplyError, keyspace_state

KEYS = [b"k0", b"k1", b"k2"]
TAGS = [b"a", b"b", b"c", b"a.x", b"a.y"]
MAX_PENDING = 6
HUGE = 10**9  # retry/expire ms that never come due during a run


class Err:
    """An expected error reply: its text starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __repr__(self) -> str:
        return f"Err({self.prefix!r})"


BLOCKED = object()  # the model's "no reply now: the client blocks"


# --- the reference model ------------------------------------------------------------------


class MPending:
    def __init__(self, deliveries, retry_at, expire_at, retry_ms):
        self.deliveries, self.retry_at, self.expire_at, self.retry_ms = deliveries, retry_at, expire_at, retry_ms


class MGroup:
    def __init__(self, next_offset: int) -> None:
        self.next = next_offset
        self.pending: dict[int, MPending] = {}

    def purge(self, stream: "MStream", now_ms: int) -> None:
        for offset, p in list(self.pending.items()):
            if p.expire_at <= now_ms or offset < stream.first:
                del self.pending[offset]

    def read(self, stream: "MStream", count: int, now_ms: int, retry) -> list:
        self.purge(stream, now_ms)
        out = []
        due = sorted((p.retry_at, offset) for offset, p in self.pending.items() if p.retry_at <= now_ms)
        for _, offset in due:
            if len(out) >= count:
                break
            entry = stream.entries.get(offset)
            if entry is None:  # deleted since it was handed out
                del self.pending[offset]
                continue
            p = self.pending[offset]
            if retry is not None:
                p.retry_ms = retry[0]
            p.deliveries += 1
            p.retry_at = now_ms + p.retry_ms
            out.append([offset, entry[0], entry[1]])
        room = count - len(out)
        if retry is not None:
            room = min(room, MAX_PENDING - len(self.pending))
        if room > 0:
            new = [o for o in stream.entries if o >= max(self.next, stream.first)][:room]
            self.next = new[-1] + 1 if len(new) == room else stream.next
            for offset in new:
                tag, data, _ = stream.entries[offset]
                out.append([offset, tag, data])
                if retry is not None:
                    self.pending[offset] = MPending(1, now_ms + retry[0], now_ms + retry[1], retry[0])
        return out


class MStream:
    def __init__(self) -> None:
        self.next = 1
        self.entries: dict[int, tuple] = {}  # held entries only, by offset: (tag, data, time_ns)
        self.last_time = 0
        self.config = {"max_len": 0, "max_age_ms": 0, "max_msgs_per_subject": 0,
                       "allow_direct": True, "allow_atomic": True}
        self.groups: dict[bytes, MGroup] = {}

    @property
    def first(self) -> int:
        return next(iter(self.entries), self.next)

    @property
    def last(self) -> int:
        return self.next - 1

    def append(self, pairs: list, now_ns: int) -> int:
        """Append (tag, data) pairs with one time, then enforce the limits."""
        first_offset = self.next
        self.last_time = max(self.last_time, now_ns)
        for tag, data in pairs:
            self.entries[self.next] = (tag, data, self.last_time)
            self.next += 1
        self.enforce(self.last_time)
        return first_offset

    def evict_to(self, new_first: int) -> int:
        gone = [o for o in self.entries if o < new_first]
        for o in gone:
            del self.entries[o]
        return len(gone)

    def enforce(self, now_ns: int) -> None:
        cfg = self.config
        if cfg["max_len"]:
            self.evict_to(self.next - cfg["max_len"])
        if cfg["max_age_ms"]:
            cutoff = now_ns - cfg["max_age_ms"] * 1_000_000
            keep = [o for o, e in self.entries.items() if e[2] >= cutoff]
            self.evict_to(keep[0] if keep else self.next)
        limit = cfg["max_msgs_per_subject"]
        if limit:
            by_subject: dict[bytes, list] = {}
            for o, e in self.entries.items():
                by_subject.setdefault(e[0], []).append(o)
            for offsets in by_subject.values():
                for o in offsets[:-limit]:
                    del self.entries[o]

    def read(self, start: int, count: int) -> list:
        return [[o, *self.entries[o][:2]] if o in self.entries else None
                for o in range(start, min(start + count, self.next))]


def resolve(stream: MStream | None, offset) -> int:
    if offset == b"-":
        return stream.first if stream is not None else 1
    if offset == b"$":
        return stream.next if stream is not None else 1
    return offset


def format_time(ns: int) -> bytes:
    seconds, fraction = divmod(ns, 10**9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)).encode() + b".%09dZ" % fraction


def message(key: bytes, offset: int, entry: tuple, batched=None) -> dict:
    m = {b"stream": key, b"subject": entry[0], b"seq": offset, b"time": format_time(entry[2]), b"data": entry[1]}
    if batched is not None:
        m[b"num_pending"], m[b"last_seq"] = batched
    return m


class Waiting:
    """A blocked read in the model (plain or group)."""

    def __init__(self, client_index: int, key: bytes, offset: int, count: int, group, withinfo: bool,
                 deadline_ns: int | None) -> None:
        self.client_index, self.key, self.offset, self.count = client_index, key, offset, count
        self.group, self.withinfo, self.deadline_ns = group, withinfo, deadline_ns


class Model:
    def __init__(self, harness: Harness) -> None:
        self.h = harness
        self.streams: dict[bytes, MStream] = {}
        self.plain: list[Waiting] = []  # in arrival order
        self.group_queues: dict[bytes, dict[bytes, list[Waiting]]] = {}  # key -> group -> FIFO
        self.ready: list[bytes] = []
        self.delivered: dict[int, list] = {}  # waiter client index -> replies due to it

    @property
    def now_ns(self) -> int:
        return self.h.clock.ns

    @property
    def now_ms(self) -> int:
        return self.h.clock.ns // 1_000_000

    def stream_for_write(self, key: bytes) -> MStream:
        if key not in self.streams:
            self.streams[key] = MStream()
        return self.streams[key]

    def wake(self, key: bytes) -> None:
        if key not in self.ready:
            self.ready.append(key)

    # --- commands: each returns the expected reply (BLOCKED when it blocks) ---------------

    def twrite(self, key: bytes, pairs: list, backlog: int | None = None) -> int:
        stream = self.stream_for_write(key)
        offset = stream.append(pairs, self.now_ns)
        if backlog is not None:
            stream.evict_to(stream.next - backlog)
        self.wake(key)
        return offset

    def tread(self, key: bytes, offset, count: int, withinfo: bool, group=None, retry=None,
              block: bool = False):
        stream = self.streams.get(key)
        if group is None:
            start = resolve(stream, offset)
            if block and count and (stream is None or start >= stream.next):
                return BLOCKED, start
            reply = stream.read(start, count) if stream is not None and count else []
        else:
            stream = self.stream_for_write(key)
            g = stream.groups.get(group)
            if g is None:
                g = stream.groups[group] = MGroup(resolve(stream, offset))
            reply = g.read(stream, count, self.now_ms, retry) if count else []
            if not reply and block and count:
                return BLOCKED, None
        if withinfo:
            reply.insert(0, [stream.first, stream.last] if stream is not None else [1, 0])
        return reply, None

    def tack(self, key: bytes, group: bytes, offsets: list) -> int:
        stream = self.streams.get(key)
        g = stream.groups.get(group) if stream is not None else None
        if g is None:
            return 0
        was_full = len(g.pending) >= MAX_PENDING
        acked = sum(1 for o in set(offsets) if g.pending.pop(o, None) is not None)
        if acked and was_full:
            self.wake(key)
        return acked

    def pending_range(self, key: bytes, group: bytes, start: int, end: int) -> list:
        stream = self.streams.get(key)
        g = stream.groups.get(group) if stream is not None else None
        return sorted(o for o in g.pending if start <= o <= end) if g is not None else []

    def tevict(self, key: bytes, n: int) -> int:
        stream = self.streams.get(key)
        if stream is None:
            return 0
        return stream.evict_to(stream.next + n if n < 0 else n + 1)

    def tconfig_set(self, key: bytes, changes: dict):
        stream = self.stream_for_write(key)
        stream.config.update(changes)
        if stream.config["max_msgs_per_subject"] > 0:
            stream.config["allow_direct"] = True
        stream.enforce(self.now_ns)
        return b"OK"

    def delete(self, keys: list) -> int:
        removed = 0
        for key in keys:
            if key in self.streams:
                self._unblock_groups(key)
                del self.streams[key]
                removed += 1
        return removed

    def flushall(self):
        for key in list(self.streams):
            self._unblock_groups(key)
        self.streams.clear()
        return b"OK"

    def _unblock_groups(self, key: bytes) -> None:
        for queue in self.group_queues.pop(key, {}).values():
            for w in queue:
                self.delivered.setdefault(w.client_index, []).append(
                    Err("UNBLOCKED the stream key no longer exists"))

    def dget_seq(self, key: bytes, seq: int):
        stream = self.streams.get(key)
        if stream is None:
            return None
        if not stream.config["allow_direct"]:
            return Err("ERR 503")
        entry = stream.entries.get(seq)
        return message(key, seq, entry) if entry is not None else None

    def dget_last(self, key: bytes, subject: bytes):
        stream = self.streams.get(key)
        if stream is None:
            return None
        if not stream.config["allow_direct"]:
            return Err("ERR 503")
        offsets = [o for o, e in stream.entries.items() if e[0] == subject]
        return message(key, offsets[-1], stream.entries[offsets[-1]]) if offsets else None

    def mlast_all(self, key: bytes):
        stream = self.streams.get(key)
        if stream is None:
            return None
        if not stream.config["allow_direct"]:
            return Err("ERR 503")
        upto = stream.last
        if upto < stream.first:
            return None
        newest = {}
        for o, e in stream.entries.items():
            newest[e[0]] = o
        seqs = sorted(newest.values())
        if not seqs:
            return None
        out, last_seq = [], 0
        for j, seq in enumerate(seqs):
            out.append(message(key, seq, stream.entries[seq], (len(seqs) - 1 - j, last_seq)))
            last_seq = seq
        out.append({b"status": 204, b"description": b"EOB", b"num_pending": 0, b"last_seq": last_seq,
                    b"upto_seq": upto})
        return out

    def batch(self, key: bytes, batch_id: bytes, messages: list, expect_last: int | None) -> list:
        """A whole atomic batch sent at once: messages 1..n, COMMIT on the last."""
        stream = self.streams.get(key)
        if stream is not None and not stream.config["allow_atomic"]:
            return [Err("ERR 10174")] * len(messages)
        replies = [b"OK"] * (len(messages) - 1)
        last = stream.last if stream is not None else 0
        if expect_last is not None and expect_last != last:
            return replies + [Err(f"ERR 10071 wrong last sequence: {last}")]
        stream = self.stream_for_write(key)
        offset = stream.append(messages, self.now_ns)
        self.wake(key)
        return replies + [{b"stream": key, b"seq": offset + len(messages) - 1, b"batch": batch_id,
                           b"count": len(messages)}]

    # --- blocking ------------------------------------------------------------------------

    def block(self, waiting: Waiting) -> None:
        if waiting.group is None:
            self.plain.append(waiting)
        else:
            self.group_queues.setdefault(waiting.key, {}).setdefault(waiting.group, []).append(waiting)

    def end_of_turn(self) -> None:
        """Serve the clients blocked on the keys this turn made ready (server.blocking)."""
        ready, self.ready = self.ready, []
        for key in ready:
            stream = self.streams.get(key)
            if stream is None:
                continue
            for w in [w for w in self.plain if w.key == key and w.offset < stream.next]:
                self.plain.remove(w)
                reply = stream.read(w.offset, w.count)
                if w.withinfo:
                    reply.insert(0, [stream.first, stream.last])
                self.delivered.setdefault(w.client_index, []).append(reply)
            for group, queue in list(self.group_queues.get(key, {}).items()):
                while queue:
                    w = queue[0]
                    reply, _ = self.tread(key, b"-", w.count, w.withinfo, group, self.retry_of(group), block=True)
                    if reply is BLOCKED:
                        break
                    queue.pop(0)
                    self.delivered.setdefault(w.client_index, []).append(reply)
                if not queue:
                    del self.group_queues[key][group]
            if not self.group_queues.get(key, True):
                del self.group_queues[key]

    def time_out(self) -> None:
        """Answer (null) every blocked read whose BLOCK timeout has passed."""
        expired = [w for w in self.all_waiting() if w.deadline_ns is not None and w.deadline_ns <= self.h.clock.mono_ns]
        for w in sorted(expired, key=lambda w: w.deadline_ns):
            if w.group is None:
                self.plain.remove(w)
            else:
                queue = self.group_queues[w.key][w.group]
                queue.remove(w)
                if not queue:
                    del self.group_queues[w.key][w.group]
                    if not self.group_queues[w.key]:
                        del self.group_queues[w.key]
            self.delivered.setdefault(w.client_index, []).append(None)

    def all_waiting(self) -> list:
        return self.plain + [w for queues in self.group_queues.values() for q in queues.values() for w in q]

    def forget(self, client_index: int) -> None:
        for w in self.all_waiting():
            if w.client_index == client_index:
                if w.group is None:
                    self.plain.remove(w)
                else:
                    self.group_queues[w.key][w.group].remove(w)
                    if not self.group_queues[w.key][w.group]:
                        del self.group_queues[w.key][w.group]
                    if not self.group_queues[w.key]:
                        del self.group_queues[w.key]

    @staticmethod
    def retry_of(group: bytes):
        return (HUGE, HUGE) if group == b"g2" else None  # only g1 and g2 block (see Runner)

    def housekeeping(self) -> None:
        for stream in self.streams.values():
            if stream.config["max_age_ms"]:
                stream.enforce(self.now_ns)


# --- comparing replies ----------------------------------------------------------------------


def as_protocol(value, protocol: int):
    """A model reply as hiredis decodes it: maps are dicts under RESP3, flat lists under RESP2."""
    if isinstance(value, dict):
        if protocol == 3:
            return {k: as_protocol(v, protocol) for k, v in value.items()}
        return [x for k, v in value.items() for x in (k, as_protocol(v, protocol))]
    if isinstance(value, list):
        return [as_protocol(v, protocol) for v in value]
    return value


def same(actual, expected, protocol: int) -> bool:
    if isinstance(expected, Err):
        return isinstance(actual, ReplyError) and str(actual).startswith(expected.prefix)
    return actual == as_protocol(expected, protocol)


# --- the random run ---------------------------------------------------------------------------


class Runner:
    def __init__(self, seed: int, harness: Harness) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.h = harness
        self.protocol = self.rng.choice([2, 3])
        self.main = harness.client(self.protocol)
        self.waiters = [harness.client(self.rng.choice([2, 3])) for _ in range(3)]
        self.model = Model(harness)
        self.batch_ids = 0
        self.step = 0
        self.log: list = []  # the last commands, for the failure message

    # one command from the main client, compared with the model
    def expect(self, argvs: list, expected: list) -> None:
        self.log = (self.log + [argvs])[-12:]
        self.main.send(*argvs)
        actual = self.main.replies()
        self.model.end_of_turn()
        assert len(actual) == len(expected), self.fail(f"{len(actual)} replies, expected {len(expected)}", actual)
        for a, e in zip(actual, expected):
            assert same(a, e, self.protocol), self.fail(f"reply {a!r}\nexpected {as_protocol(e, self.protocol)!r}")

    def fail(self, what: str, *extra) -> str:
        return f"seed {self.seed} step {self.step}: {what}\nlast commands: {self.log}"

    def pick_key(self) -> bytes:
        return self.rng.choice(KEYS)

    def pairs(self, n: int) -> list:
        return [(self.rng.choice(TAGS), self.rng.randbytes(self.rng.randrange(0, 6))) for _ in range(n)]

    def offset_arg(self, key: bytes):
        stream = self.model.streams.get(key)
        nxt = stream.next if stream is not None else 1
        choice = self.rng.randrange(4)
        if choice == 0:
            return b"-"
        if choice == 1:
            return b"$"
        if choice == 2:
            return 0
        return self.rng.randrange(1, nxt + 3)

    # --- actions ---------------------------------------------------------------------------

    def act(self) -> None:  # noqa: C901 (over the limit when it came in)
        rng, m = self.rng, self.model
        key = self.pick_key()
        action = rng.choices(
            ["write", "run", "entries", "read", "group", "tack", "tack_range", "tevict", "tconfig", "del",
             "flushall", "dget", "mlast", "batch", "advance", "block", "close_waiter", "tpending"],
            [14, 4, 6, 10, 12, 5, 2, 4, 4, 1, 0.3, 3, 2, 3, 8, 5, 0.5, 2])[0]
        if action == "write":
            (tag, data), = self.pairs(1)
            self.expect([[b"TWRITE", key, tag, data]], [m.twrite(key, [(tag, data)])])
        elif action == "run":  # a pipelined run: one call appends them all (commands/dispatch.py)
            pairs = self.pairs(rng.randrange(2, 8))
            first = m.twrite(key, pairs)
            self.expect([[b"TWRITE", key, t, d] for t, d in pairs], list(range(first, first + len(pairs))))
        elif action == "entries":
            pairs = self.pairs(rng.randrange(1, 6))
            argv = [b"TWRITE", key]
            backlog = None
            if rng.random() < 0.3:
                backlog = rng.randrange(0, 6)
                argv += [b"BACKLOG", backlog]
            argv += [b"ENTRIES"] + [x for p in pairs for x in p]
            self.expect([argv], [m.twrite(key, pairs, backlog)])
        elif action == "read":
            offset, count, withinfo = self.offset_arg(key), rng.randrange(0, 7), rng.random() < 0.3
            reply, _ = m.tread(key, b"-" if offset == 0 else offset, count, withinfo)
            self.expect([[b"TREAD", key, offset, count] + ([b"WITHINFO"] if withinfo else [])], [reply])
        elif action == "group":
            self.group_read(key)
        elif action in ("tack", "tack_range"):
            group = rng.choice([b"g1", b"g2", b"g3"])
            stream = m.streams.get(key)
            g = stream.groups.get(group) if stream is not None else None
            pending = sorted(g.pending) if g is not None else []
            if action == "tack":
                offsets = rng.sample(pending, min(len(pending), rng.randrange(1, 4))) + [rng.randrange(1, 40)]
                self.expect([[b"TACK", key, group, *offsets]], [m.tack(key, group, offsets)])
            else:
                start = rng.randrange(1, 30)
                end = start + rng.randrange(0, 10)
                offsets = m.pending_range(key, group, start, end)
                self.expect([[b"TACK", key, group, b"%d-%d" % (start, end)]], [m.tack(key, group, offsets)])
        elif action == "tpending":
            group = rng.choice([b"g1", b"g2", b"g3"])
            stream = m.streams.get(key)
            g = stream.groups.get(group) if stream is not None else None
            expected = []
            if g is not None:
                g.purge(stream, m.now_ms)
                expected = [[o, p.deliveries, max(0, p.retry_at - m.now_ms)] for o, p in sorted(g.pending.items())]
            self.expect([[b"TPENDING", key, group]], [expected])
        elif action == "tevict":
            n = rng.randrange(-5, 30)
            self.expect([[b"TEVICT", key, n]], [m.tevict(key, n)])
        elif action == "tconfig":
            options = {"max_len": lambda: rng.choice([0, 0, 3, 5, 8]),
                       "max_age_ms": lambda: rng.choice([0, 0, 5, 30, 200, 10**6]),
                       "max_msgs_per_subject": lambda: rng.choice([0, 0, 1, 2, 3]),
                       "allow_direct": lambda: rng.choice([True, True, False]),
                       "allow_atomic": lambda: rng.choice([True, True, False])}
            changes = {name: options[name]() for name in rng.sample(sorted(options), rng.randrange(1, 3))}
            argv = [b"TCONFIG", key, b"SET"]
            for name, value in changes.items():
                argv += [name.encode(), (b"yes" if value else b"no") if isinstance(value, bool) else value]
            self.expect([argv], [m.tconfig_set(key, changes)])
        elif action == "del":
            keys = rng.sample(KEYS, rng.randrange(1, 3))
            self.expect([[b"DEL", *keys]], [m.delete(keys)])
        elif action == "flushall":
            self.expect([[b"FLUSHALL"]], [m.flushall()])
        elif action == "dget":
            form = rng.randrange(3)
            if form == 0:
                seq = rng.randrange(1, 30)
                self.expect([[b"DGET", key, b"SEQ", seq]], [m.dget_seq(key, seq)])
            else:
                tag = rng.choice(TAGS)
                argv = [b"DGET", key, b"LAST_BY_SUBJ", tag] if form == 1 else [b"DGET", key, b"SUBJECT", tag]
                self.expect([argv], [m.dget_last(key, tag)])
        elif action == "mlast":
            self.expect([[b"MLAST", key, b"SUBJECTS", b">"]], [m.mlast_all(key)])
        elif action == "batch":
            self.batch_ids += 1
            batch_id = b"b%d" % self.batch_ids
            messages = self.pairs(rng.randrange(1, 5))
            expect_last = None
            if rng.random() < 0.3:
                stream = m.streams.get(key)
                expect_last = (stream.last if stream is not None else 0) + rng.choice([0, 0, 1])
            argvs = []
            for i, (subject, data) in enumerate(messages, 1):
                argv = [b"BATCH", key, batch_id, i, subject, data]
                if i == 1 and expect_last is not None:
                    argv += [b"EXPECT_LAST_SEQ", expect_last]
                if i == len(messages):
                    argv.append(b"COMMIT")
                argvs.append(argv)
            self.expect(argvs, m.batch(key, batch_id, messages, expect_last))
        elif action == "advance":
            # whole ms plus 1 ns: the clock never lands exactly on a BLOCK deadline
            self.h.clock.advance(rng.choice([0, 1, 2, 5, 13, 40, 150]))
            self.h.clock.mono_ns += 1
            self.h.clock.ns += 1
            m.time_out()
            self.h.advance(0)
        elif action == "block":
            self.block(key)
        elif action == "close_waiter":
            i = rng.randrange(len(self.waiters))
            self.collect_waiters()
            self.waiters[i].close()
            m.forget(i)
            m.delivered.pop(i, None)
            self.waiters[i] = self.h.client(rng.choice([2, 3]))
        self.collect_waiters()

    def group_read(self, key: bytes) -> None:
        rng, m = self.rng, self.model
        group = rng.choice([b"g1", b"g2", b"g3"])
        offset = rng.choice([b"-", b"$", 0, 1])  # not past the end: see test_group_created_past_the_end
        count, withinfo = rng.randrange(0, 6), rng.random() < 0.3
        argv = [b"TREAD", key, offset, count, b"GROUP", group]
        retry = None
        if group == b"g2":
            retry = (HUGE, HUGE)
        elif group == b"g3":  # retry-ms >= 1: see test_retry_0_hands_out_each_entry_once_per_read
            retry = (rng.randrange(1, 30), rng.choice([0, 10, 50, 300]))
        if retry is not None:
            argv += [b"RETRY", *retry]
        if withinfo:
            argv.append(b"WITHINFO")
        reply, _ = m.tread(key, b"-" if offset == 0 else offset, count, withinfo, group, retry)
        self.expect([argv], [reply])

    def block(self, key: bytes) -> None:
        rng, m = self.rng, self.model
        idle = [i for i, w in enumerate(self.waiters) if not w.blocked]
        if not idle:
            return
        i = rng.choice(idle)
        client = self.waiters[i]
        count, withinfo = rng.randrange(1, 4), rng.random() < 0.2
        block_ms = rng.choice([0, 1, 10, 50, 300])
        group = rng.choice([None, None, b"g1", b"g2"])
        offset = rng.choice([b"$", b"$", b"-"]) if group is None else b"$"
        argv = [b"TREAD", key, offset, count, b"BLOCK", block_ms]
        if group is not None:
            argv += [b"GROUP", group] + ([b"RETRY", HUGE, HUGE] if group == b"g2" else [])
        if withinfo:
            argv.append(b"WITHINFO")
        self.log = (self.log + [[argv]])[-12:]
        reply, start = m.tread(key, offset, count, withinfo, group, m.retry_of(group) if group else None, block=True)
        if reply is BLOCKED:
            deadline = client.harness.clock.mono_ns + block_ms * 1_000_000 if block_ms else None
            m.block(Waiting(i, key, start, count, group, withinfo, deadline))
        else:
            m.delivered.setdefault(i, []).append(reply)
        client.send(argv)
        m.end_of_turn()

    def collect_waiters(self) -> None:
        for i, client in enumerate(self.waiters):
            actual = client.replies()
            expected = self.model.delivered.pop(i, [])
            assert len(actual) == len(expected), self.fail(f"waiter {i}: replies {actual!r}, expected {expected!r}")
            for a, e in zip(actual, expected):
                assert same(a, e, client.connection.protocol), self.fail(f"waiter {i}: reply {a!r}, expected {e!r}")

    def run(self, steps: int, replay_every: int = 1) -> None:
        for self.step in range(steps):
            self.act()
            self.h.check()
            if self.step % replay_every == 0:
                self.h.housekeeping()
                self.model.housekeeping()
                self.h.replay.assert_matches()
        # the end: every blocked client times out or stays blocked as the model says
        assert {(i, w.blocked) for i, w in enumerate(self.waiters)} == {
            (i, any(x.client_index == i for x in self.model.all_waiting())) for i in range(len(self.waiters))}


def run_seed(seed: int, steps: int) -> None:
    with Harness(node_entries=4, group_max_pending=MAX_PENDING) as h:
        Runner(seed, h).run(steps)


@pytest.mark.parametrize("seed", range(8))
def test_random_commands_match_the_model(seed):
    run_seed(seed, 2000)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 116))
def test_random_commands_match_the_model_long(seed):
    run_seed(seed, 20000)


# --- bugs the model found, fixed: their regression tests ---------------------------------------


def test_retry_0_hands_out_each_entry_once_per_read():
    with Harness() as h:
        c = h.client()
        c.call("TWRITE", "k", "ENTRIES", "a", "1", "b", "2")
        assert c.call("TREAD", "k", "-", 1, "GROUP", "g", "RETRY", 0, 100000) == [[1, b"a", b"1"]]
        h.advance(1)
        assert c.call("TREAD", "k", "-", 5, "GROUP", "g", "RETRY", 0, 100000) == [[1, b"a", b"1"], [2, b"b", b"2"]]


def test_group_created_past_the_end_starts_there():
    with Harness() as h:
        c = h.client()
        c.call("TWRITE", "k", "ENTRIES", "a", "1", "b", "2")
        assert c.call("TREAD", "k", 10, 5, "GROUP", "g") == []
        c.call("TWRITE", "k", "ENTRIES", "a", "3", "b", "4")
        assert c.call("TREAD", "k", 10, 5, "GROUP", "g") == []


def test_subject_limit_deletions_are_logged_with_the_tconfig():
    with Harness() as h:
        c = h.client()
        c.call("TWRITE", "k", "ENTRIES", "b", "1", "a", "2", "a", "3")
        assert c.call("TCONFIG", "k", "SET", "max_msgs_per_subject", 1) == b"OK"
        assert c.call("TREAD", "k", 1, 5) == [[1, b"b", b"1"], None, [3, b"a", b"3"]]
        h.replay.assert_matches()  # the effect log as it stands after the command


@pytest.mark.parametrize("seed", [7, 8])
def test_random_commands_with_the_append_only_file(tmp_path, seed):
    """The same run with ``appendonly yes`` (replies held for the turn's AOF commit):
    the files the real loader reads back hold the live keyspace."""
    with Harness(aof_dir=str(tmp_path), node_entries=4, group_max_pending=MAX_PENDING) as h:
        runner = Runner(seed, h)
        runner.run(800, replay_every=50)
        h.housekeeping()
        loaded = h.reload_aof()
        now_ms = h.clock.ns // 1_000_000
        assert keyspace_state(loaded, now_ms) == keyspace_state(h.server.keyspace, now_ms)
