"""``FastPublisher`` / ``AsyncFastPublisher``: ADR-50 fast-ingest batches (``BATCH ... FAST``).

    pub = FastPublisher(redis.Redis(port=6380), "orders", flow=64, gap="fail")
    for event in events:
        batch_seq, ack_seq = pub.add("orders.created", event)   # ack_seq: stored up to there
    ack = pub.end()                                              # PubAck(stream, seq, batch, count)

The client design of ADR-50: the first message waits for the first flow ack; then
messages go out without waiting, at most ``max_outstanding_acks`` (1-3, default 2)
acks outstanding: ``add`` waits only when ``ack_seq + ack_msgs * max_outstanding_acks
<= batch_seq``.  The server's ``ack_msgs`` is adopted from every flow ack; an ack for
message n covers every earlier one (so a lost or merged ack never stalls it).  Gap
notices and duplicate replies are informational (``gaps``, ``errors`` keep what
the server reported).  A batch the server ended early (``gap fail`` after a gap or
a failed EXPECT_* check) raises ``BatchEnded`` carrying the final pub ack.

``add_many(messages)`` sends ``(subject, data)`` pairs under the same rules, each
stretch the flow allows in one socket write (``add`` writes each message on its
own): the way to publish a backlog at full speed.

The messages not yet acknowledged are kept; after a lost connection the publisher
reconnects, sends a PING (its batch-seq: the highest sent), learns the highest
batch-seq the server stored and resends the rest, so every message is stored once
(the server reports a resent one as a duplicate), also across a server restart
with the AOF on.

It holds one connection of the client's pool for its lifetime (``close``, or use it
as a context manager).
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections import deque
from typing import Any, Iterable, NamedTuple

import redis

from . import types as T
from .types import Text


class FastPubAck(NamedTuple):
    batch_seq: int  # this message's batch-seq
    ack_seq: int    # the highest batch-seq acknowledged (gap fail: everything up to it is stored)


class BatchEnded(T.TStreamError):
    """The server ended the batch early; ``pub_ack`` is its final pub ack (with
    ``last_seq``/``gap_seq`` after a gap, ``error`` after a failed check)."""

    def __init__(self, pub_ack: dict) -> None:
        super().__init__(f"10176 fast batch ended by the server: {pub_ack}")
        self.pub_ack = pub_ack


class _State:
    """What both publishers share: the batch, the flow, the unacknowledged messages."""

    def __init__(self, key: Text, batch_id: Text | None, flow: int, gap: str, max_outstanding_acks: int,
                 reconnect_timeout: float) -> None:
        if not 1 <= max_outstanding_acks <= 3:
            raise ValueError("max_outstanding_acks must be 1, 2 or 3")
        if gap not in ("ok", "fail"):
            raise ValueError("gap must be 'ok' or 'fail'")
        self.key = key
        self.batch_id = batch_id or uuid.uuid4().hex
        self.flow = flow
        self.gap = gap
        self.max_outstanding = max_outstanding_acks
        self.reconnect_timeout = reconnect_timeout
        self.seq = 0            # highest batch-seq sent
        self.ack_seq = 0        # highest batch-seq acknowledged
        self.ack_msgs = 1       # the server's ack interval
        self.pending = 0        # replies not read yet
        self.unacked: deque[tuple[int, list]] = deque()  # (batch-seq, args) not acknowledged yet
        self.gaps: list[tuple[int, int]] = []   # (last_seq, seq) the server reported
        self.errors: list[tuple[int, dict]] = []  # (batch-seq, error) of messages refused in gap ok mode
        self.final: dict | None = None
        self.ending = False     # COMMIT or EOB sent: the pub ack is expected
        self.reconnects = 0

    def args(self, seq: int, subject: Text, data: Text, expect_last_seq, expect_last_subject_seq, msgid,
             commit: bool) -> list:
        args: list[Any] = ["BATCH", self.key, self.batch_id, seq, subject, data, "FAST", self.flow, self.gap]
        if expect_last_seq is not None:
            args += ["EXPECT_LAST_SEQ", expect_last_seq]
        if expect_last_subject_seq is not None:
            args += ["EXPECT_LAST_SUBJECT_SEQ", expect_last_subject_seq]
        if msgid is not None:
            args += ["MSGID", msgid]
        if commit:
            args.append("COMMIT")
        return args

    def queue(self, subject: Text, data: Text) -> list:
        """The next plain message, numbered and kept until acknowledged: its args."""
        self.seq += 1
        args = self.args(self.seq, subject, data, None, None, None, False)
        self.unacked.append((self.seq, args))
        return args

    def packer(self, encode):
        """``pack(subject, data)``: ``queue``, then the message as the bytes of its
        command, from a template of the batch's words encoded once (``encode``:
        the connection's encoder); only the batch-seq, the subject (unless the
        same as the previous) and the data are encoded per message."""
        def bulk(value: Any) -> bytes:
            value = encode(value)
            return b"$%d\r\n%s\r\n" % (len(value), value)
        head = b"*9\r\n$5\r\nBATCH\r\n" + bulk(self.key) + bulk(self.batch_id)
        tail = bulk("FAST") + bulk(self.flow) + bulk(self.gap)
        last: list = [None, b""]  # the previous subject and its bulk string
        queue = self.queue

        def pack(subject: Text, data: Text) -> bytes:
            queue(subject, data)
            if subject != last[0] or subject.__class__ is not last[0].__class__:
                last[0], last[1] = subject, bulk(subject)
            value = encode(data)
            seq = b"%d" % self.seq
            return b"%s$%d\r\n%s\r\n%s$%d\r\n%s\r\n%s" % (head, len(seq), seq, last[1], len(value), value, tail)
        return pack

    def window_full(self) -> bool:
        """Whether the messages numbered so far reach the flow's limit (the
        next one may not go before an ack)."""
        return self.seq == 1 or self.ack_seq + self.ack_msgs * self.max_outstanding <= self.seq

    def op(self, seq: int, word: str) -> list:
        return ["BATCH", self.key, self.batch_id, seq, "FAST", self.flow, self.gap, word]

    def must_wait(self) -> bool:
        return self.pending > 0 and self.ack_seq + self.ack_msgs * self.max_outstanding <= self.seq

    def acked(self, seq: int) -> None:
        if seq > self.ack_seq:
            self.ack_seq = seq
        unacked = self.unacked
        while unacked and unacked[0][0] <= self.ack_seq:
            unacked.popleft()

    def on_reply(self, reply: Any) -> dict | None:
        """One reply read; the pub ack if it ends the batch."""
        self.pending -= 1
        if isinstance(reply, redis.ResponseError):
            raise T.convert_error(reply)
        if not isinstance(reply, (dict, list)):
            return None  # +OK
        fields = T.as_map(reply)
        kind = fields.get("type")
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "ack":
            self.ack_msgs = int(fields["ack_msgs"])
            seq = int(fields["seq"])
            if "error" in fields:
                self.errors.append((seq, T.as_map(fields["error"])))
            self.acked(seq)
        elif kind == "gap":
            self.gaps.append((int(fields["last_seq"]), int(fields["seq"])))
        elif kind == "duplicate":
            pass
        elif "batch" in fields:  # the final pub ack
            self.final = fields
            self.unacked.clear()
            return fields
        return None

    def after_ping(self, reply: Any) -> list[list]:
        """The PING's reply after a reconnect: what to resend."""
        fields = T.as_map(reply)
        self.ack_msgs = int(fields["ack_msgs"])
        self.ack_seq = 0
        self.acked(int(fields["seq"]))
        self.pending = 0
        return [args for _, args in self.unacked]


def _not_enough_data(parser) -> Any:
    """What redis-py's hiredis reader returns when a reply is incomplete: its
    ``NOT_ENOUGH_DATA`` sentinel (redis-py 5+), else hiredis's False."""
    return getattr(sys.modules.get(type(parser).__module__), "NOT_ENOUGH_DATA", False)


def _pub_ack(fields: dict) -> T.PubAck:
    return T.PubAck(fields["stream"], int(fields["seq"]), fields["batch"], int(fields["count"]))


class _Publisher:
    """What the sync and asyncio publishers share: the batch's state, the pool."""

    def __init__(self, redis_client, key: Text, *, batch_id: Text | None = None, flow: int = 64,
                 gap: str = "fail", max_outstanding_acks: int = 2, reconnect_timeout: float = 30.0) -> None:
        self.state = _State(key, batch_id, flow, gap, max_outstanding_acks, reconnect_timeout)
        self.pool = redis_client.connection_pool
        self.conn = None

    @property
    def batch_id(self) -> Text:
        return self.state.batch_id

    @property
    def ack_msgs(self) -> int:
        return self.state.ack_msgs


class FastPublisher(_Publisher):
    """A fast-ingest batch on a ``redis.Redis`` (see the module docstring)."""

    def __init__(self, redis_client: redis.Redis, key: Text, **options) -> None:
        super().__init__(redis_client, key, **options)
        self.conn = self.pool.get_connection()

    # --- the API ---------------------------------------------------------------------------

    def add(self, subject: Text, data: Text, *, expect_last_seq: int | None = None,
            expect_last_subject_seq: int | None = None, msgid: Text | None = None) -> FastPubAck:
        """Send one message; returns ``(batch_seq, ack_seq)`` once the flow allows the next."""
        s = self.state
        s.seq += 1
        args = s.args(s.seq, subject, data, expect_last_seq, expect_last_subject_seq, msgid, False)
        s.unacked.append((s.seq, args))
        self._send(args)
        if s.seq == 1:
            self._drain()  # the first flow ack: the server's ack_msgs, or an error
        self._read_stretch()
        return FastPubAck(s.seq, s.ack_seq)

    def add_many(self, messages: Iterable[tuple[Text, Text]]) -> FastPubAck:
        """Send ``(subject, data)`` pairs as ``add`` would, each stretch the flow
        allows in one write; the last message's ``(batch_seq, ack_seq)``."""
        s = self.state
        pack = s.packer(self.conn.encoder.encode)
        stretch: list[bytes] = []
        for subject, data in messages:
            stretch.append(pack(subject, data))
            if s.window_full():
                self._send_many(stretch)
                stretch = []
                if s.seq == 1:
                    self._drain()
                self._read_stretch()
        if stretch:
            self._send_many(stretch)
        return FastPubAck(s.seq, s.ack_seq)

    def commit(self, subject: Text, data: Text, **options: Any) -> T.PubAck:
        """Send the last message with COMMIT; the final pub ack."""
        s = self.state
        s.seq += 1
        args = s.args(s.seq, subject, data, options.get("expect_last_seq"),
                      options.get("expect_last_subject_seq"), options.get("msgid"), True)
        s.unacked.append((s.seq, args))
        s.ending = True
        self._send(args)
        return self._finish()

    def end(self) -> T.PubAck:
        """End the batch without a message (EOB); the final pub ack."""
        s = self.state
        args = s.op(s.seq + 1, "EOB")
        s.unacked.append((s.seq + 1, args))
        s.ending = True
        self._send(args)
        return self._finish()

    def ping(self) -> dict:
        """Keep the batch alive; the current flow ack (every reply before it read)."""
        self._drain()
        s = self.state
        self.conn.send_command(*s.op(max(s.seq, 1), "PING"))
        reply = self._read_raw()
        if isinstance(reply, redis.ResponseError):
            raise T.convert_error(reply)
        return T.as_map(reply)

    def close(self) -> None:
        if self.conn is not None:
            if self.state.pending:  # replies left unread: the connection is not reusable
                self.conn.disconnect()
            self.pool.release(self.conn)
            self.conn = None

    def __enter__(self) -> "FastPublisher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- the wire ----------------------------------------------------------------------------

    def _finish(self) -> T.PubAck:
        s = self.state
        while s.pending:
            self._read_one()
        if s.final is None:
            raise redis.DataError("no final pub ack")
        return _pub_ack(s.final)

    def _drain(self) -> None:
        while self.state.pending:
            self._read_one()

    def _send(self, args: list) -> None:
        try:
            self.conn.send_command(*args)
        except (redis.ConnectionError, redis.TimeoutError):
            self._resume()
            return
        self.state.pending += 1

    def _send_many(self, stretch: list[bytes]) -> None:
        """The packed messages of a stretch (``_State.packer``), in one write."""
        try:
            self.conn.send_packed_command([b"".join(stretch)])
        except (redis.ConnectionError, redis.TimeoutError):
            self._resume()  # (resends every message not acknowledged, these too)
            return
        self.state.pending += len(stretch)

    def _read_stretch(self) -> None:
        """Read replies while the flow says wait (up to the next flow ack): each
        ``+OK`` taken from redis-py's hiredis reader with one C call, anything
        else through ``_read_one``'s handling; ``_read_one`` for each reply with
        another parser."""
        s = self.state
        parser = getattr(self.conn, "_parser", None)
        reader = getattr(parser, "_reader", None)
        if reader is None or not hasattr(parser, "read_from_socket"):
            while s.must_wait():
                self._read_one()
            return
        gets = reader.gets
        more = _not_enough_data(parser)
        while s.must_wait():
            reply = gets()
            if reply is more or reply is False:  # (hiredis: more bytes needed)
                try:
                    parser.read_from_socket()
                except (redis.ConnectionError, redis.TimeoutError):
                    self._resume()
                    return
            elif reply.__class__ is bytes or reply.__class__ is str:  # +OK
                s.pending -= 1
            elif isinstance(reply, redis.ConnectionError):
                self._resume()
                return
            else:
                self._on_reply(reply)

    def _read_raw(self) -> Any:
        try:
            return self.conn.read_response()
        except redis.ResponseError as exc:
            return exc

    def _read_one(self) -> None:
        try:
            reply = self._read_raw()
        except (redis.ConnectionError, redis.TimeoutError):
            self._resume()
            return
        self._on_reply(reply)

    def _on_reply(self, reply: Any) -> None:
        s = self.state
        if s.final is not None and not s.ending:
            raise BatchEnded(s.final)
        if s.on_reply(reply) is not None and not s.ending:
            raise BatchEnded(s.final)

    def _resume(self) -> None:
        """Reconnect, PING, resend what the server did not store."""
        s = self.state
        deadline = time.monotonic() + s.reconnect_timeout
        while True:
            try:
                self.conn.disconnect()
                self.conn.connect()
                self.conn.send_command(*s.op(max(s.seq, 1), "PING"))
                reply = self.conn.read_response()
                break
            except redis.ResponseError as exc:
                error = T.convert_error(exc)
                if getattr(error, "code", 0) == 10206 and s.ack_seq == 0:
                    reply = None  # nothing of the batch was stored: start it again
                    break
                raise error from None
            except (redis.ConnectionError, redis.TimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        s.reconnects += 1
        if reply is None:
            resend = [args for _, args in s.unacked]
            s.pending = 0
        else:
            resend = s.after_ping(reply)
        for args in resend:
            self.conn.send_command(*args)
            s.pending += 1
        if resend and resend[0][3] == 1:
            self._drain()


class AsyncFastPublisher(_Publisher):
    """``FastPublisher`` on a ``redis.asyncio.Redis``: the same API, awaitable
    (it connects on first use)."""

    async def _connection(self):
        if self.conn is None:
            self.conn = await self.pool.get_connection()
        return self.conn

    async def add(self, subject: Text, data: Text, *, expect_last_seq: int | None = None,
                  expect_last_subject_seq: int | None = None, msgid: Text | None = None) -> FastPubAck:
        s = self.state
        s.seq += 1
        args = s.args(s.seq, subject, data, expect_last_seq, expect_last_subject_seq, msgid, False)
        s.unacked.append((s.seq, args))
        await self._send(args)
        if s.seq == 1:
            await self._drain()
        await self._read_stretch()
        return FastPubAck(s.seq, s.ack_seq)

    async def add_many(self, messages: Iterable[tuple[Text, Text]]) -> FastPubAck:
        s = self.state
        pack = s.packer((await self._connection()).encoder.encode)
        stretch: list[bytes] = []
        for subject, data in messages:
            stretch.append(pack(subject, data))
            if s.window_full():
                await self._send_many(stretch)
                stretch = []
                if s.seq == 1:
                    await self._drain()
                await self._read_stretch()
        if stretch:
            await self._send_many(stretch)
        return FastPubAck(s.seq, s.ack_seq)

    async def commit(self, subject: Text, data: Text, **options: Any) -> T.PubAck:
        s = self.state
        s.seq += 1
        args = s.args(s.seq, subject, data, options.get("expect_last_seq"),
                      options.get("expect_last_subject_seq"), options.get("msgid"), True)
        s.unacked.append((s.seq, args))
        s.ending = True
        await self._send(args)
        return await self._finish()

    async def end(self) -> T.PubAck:
        s = self.state
        args = s.op(s.seq + 1, "EOB")
        s.unacked.append((s.seq + 1, args))
        s.ending = True
        await self._send(args)
        return await self._finish()

    async def ping(self) -> dict:
        await self._drain()
        s = self.state
        conn = await self._connection()
        await conn.send_command(*s.op(max(s.seq, 1), "PING"))
        try:
            reply = await conn.read_response()
        except redis.ResponseError as exc:
            raise T.convert_error(exc) from None
        return T.as_map(reply)

    async def close(self) -> None:
        if self.conn is not None:
            if self.state.pending:
                await self.conn.disconnect()
            await self.pool.release(self.conn)
            self.conn = None

    async def __aenter__(self) -> "AsyncFastPublisher":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _finish(self) -> T.PubAck:
        s = self.state
        while s.pending:
            await self._read_one()
        if s.final is None:
            raise redis.DataError("no final pub ack")
        return _pub_ack(s.final)

    async def _drain(self) -> None:
        while self.state.pending:
            await self._read_one()

    async def _send(self, args: list) -> None:
        conn = await self._connection()
        try:
            await conn.send_command(*args)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            await self._resume()
            return
        self.state.pending += 1

    async def _send_many(self, stretch: list[bytes]) -> None:
        conn = await self._connection()
        try:
            await conn.send_packed_command([b"".join(stretch)])
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            await self._resume()
            return
        self.state.pending += len(stretch)

    async def _read_stretch(self) -> None:
        """``FastPublisher._read_stretch``, awaitable."""
        s = self.state
        conn = await self._connection()
        parser = getattr(conn, "_parser", None)
        reader = getattr(parser, "_reader", None)
        if reader is None or not hasattr(parser, "read_from_socket"):
            while s.must_wait():
                await self._read_one()
            return
        gets = reader.gets
        more = _not_enough_data(parser)
        while s.must_wait():
            reply = gets()
            if reply is more or reply is False:
                try:
                    await parser.read_from_socket()
                except (redis.ConnectionError, redis.TimeoutError, OSError):
                    await self._resume()
                    return
            elif reply.__class__ is bytes or reply.__class__ is str:  # +OK
                s.pending -= 1
            elif isinstance(reply, redis.ConnectionError):
                await self._resume()
                return
            else:
                self._on_reply(reply)

    async def _read_one(self) -> None:
        conn = await self._connection()
        try:
            reply = await conn.read_response()
        except redis.ResponseError as exc:
            reply = exc
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            await self._resume()
            return
        self._on_reply(reply)

    def _on_reply(self, reply: Any) -> None:
        s = self.state
        if s.final is not None and not s.ending:
            raise BatchEnded(s.final)
        if s.on_reply(reply) is not None and not s.ending:
            raise BatchEnded(s.final)

    async def _resume(self) -> None:
        s = self.state
        conn = await self._connection()
        deadline = time.monotonic() + s.reconnect_timeout
        while True:
            try:
                await conn.disconnect()
                await conn.connect()
                await conn.send_command(*s.op(max(s.seq, 1), "PING"))
                reply = await conn.read_response()
                break
            except redis.ResponseError as exc:
                error = T.convert_error(exc)
                if getattr(error, "code", 0) == 10206 and s.ack_seq == 0:
                    reply = None
                    break
                raise error from None
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        s.reconnects += 1
        if reply is None:
            resend = [args for _, args in s.unacked]
            s.pending = 0
        else:
            resend = s.after_ping(reply)
        for args in resend:
            await conn.send_command(*args)
            s.pending += 1
        if resend and resend[0][3] == 1:
            await self._drain()
