"""``TStream`` (redis.Redis) and ``AsyncTStream`` (redis.asyncio.Redis).

Both share every method: each builds the command's arguments, and a parser
turns the reply into plain Python objects (``client.types``).  On ``TStream`` a
method returns the result; on ``AsyncTStream`` it returns an awaitable of it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Callable, Iterable, Sequence, Union

import redis

from . import types as T
from .types import Text

Offset = Union[int, str, bytes]  # an integer >= 1, "-" (first held) or "$" (next to be written)
TimeArg = Union[datetime, str, bytes, int]


def _flag_text(value: Any) -> Any:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return value


class _Commands:
    """The commands; ``_run``/``_run_many`` send them (sync or async)."""

    def __init__(self, redis_client, *, parse_times: bool = True, replicas: Sequence[Any] = ()) -> None:
        self.redis = redis_client
        self.parse_times = parse_times
        # Reads that a replica serves as the primary would (TREAD without GROUP,
        # DGET, MLAST, TINFO, TPENDING, TCONFIG GET) go to these clients in turn.
        self.replicas = list(replicas)
        self._next_replica = 0

    def _client_for(self, args: Sequence[Any]):
        """The client to send ``args`` to: a replica for a plain read, else the primary."""
        if not self.replicas or args[0] not in _REPLICA_READS:
            return self.redis
        if (args[0] == "TREAD" and "GROUP" in args) or (args[0] == "TCONFIG" and args[2] != "GET"):
            return self.redis
        self._next_replica = (self._next_replica + 1) % len(self.replicas)
        return self.replicas[self._next_replica]

    def _run(self, args: Sequence[Any], parse: Callable[[Any], Any]):
        raise NotImplementedError

    def _run_many(self, commands: list[Sequence[Any]], parse: Callable[[Any], Any]):
        raise NotImplementedError

    # --- RCP 11 streams ------------------------------------------------------------------

    def twrite(self, key: Text, tag: Text, data: Text) -> int:
        """Append one entry; its offset."""
        return self._run(("TWRITE", key, tag, data), int)

    def twrite_entries(self, key: Text, entries: Iterable[tuple[Text, Text]], *,
                       backlog: int | None = None) -> int:
        """Append several ``(tag, data)`` entries atomically; the first one's offset.
        ``backlog``: then evict old entries so exactly that many remain."""
        args: list[Any] = ["TWRITE", key]
        if backlog is not None:
            args += ["BACKLOG", backlog]
        args.append("ENTRIES")
        count = len(args)
        for tag, data in entries:
            args += [tag, data]
        if len(args) == count:
            raise ValueError("twrite_entries needs at least one (tag, data) entry")
        return self._run(args, int)

    def tread(self, key: Text, offset: Offset = "-", count: int = 100, *, block: int | None = None,
              group: Text | None = None, retry: tuple[int, int] | None = None,
              withinfo: bool = False):
        """Read up to ``count`` entries from ``offset``: a list of ``Entry``, None
        for a missing (evicted) one; with ``withinfo`` a ``Window(first, last,
        entries)``.  ``block`` ms (0: forever) waits for new entries and returns
        None on timeout (keep redis-py's ``socket_timeout`` above it).  ``group``
        reads as that consumer group; ``retry=(retry_ms, expire_ms)`` makes the
        entries pending until ``tack``."""
        args: list[Any] = ["TREAD", key, offset, count]
        if block is not None:
            args += ["BLOCK", block]
        if group is not None:
            args += ["GROUP", group]
        if retry is not None:
            if group is None:
                raise ValueError("retry needs a group")
            args += ["RETRY", retry[0], retry[1]]
        if withinfo:
            args.append("WITHINFO")
        return self._run(args, lambda reply: T.parse_read(reply, withinfo))

    def tack(self, key: Text, group: Text, *offsets: int) -> int:
        """Acknowledge pending entries; how many were pending."""
        if not offsets:
            raise ValueError("tack needs at least one offset")
        return self._run(("TACK", key, group, *offsets), int)

    def tack_range(self, key: Text, group: Text, start: int, end: int) -> int:
        """Acknowledge every pending entry from ``start`` to ``end`` (inclusive)."""
        return self._run(("TACK", key, group, f"{start}-{end}"), int)

    def tpending(self, key: Text, group: Text) -> list[T.Pending]:
        return self._run(("TPENDING", key, group), T.parse_pending)

    def tinfo(self, key: Text) -> T.StreamInfo:
        """``StreamInfo``; raises ``redis.ResponseError`` ("no such key") for a missing key."""
        return self._run(("TINFO", key), T.parse_info)

    def tinfo_groups(self, key: Text) -> list[T.GroupInfo]:
        return self._run(("TINFO", key, "GROUPS"), T.parse_groups)

    def tevict(self, key: Text, offset: int) -> int:
        """Evict every entry <= ``offset``; negative ``-n`` keeps the newest n. How many went."""
        return self._run(("TEVICT", key, offset), int)

    def tconfig_get(self, key: Text) -> T.StreamConfig:
        return self._run(("TCONFIG", key, "GET"), lambda reply: T.parse_config(T.as_map(reply)))

    def tconfig_set(self, key: Text, **settings: Any) -> bool:
        """``tconfig_set(key, max_len=1000, allow_atomic=False)``; creates the stream."""
        if not settings:
            raise ValueError("tconfig_set needs at least one setting")
        args: list[Any] = ["TCONFIG", key, "SET"]
        for name, value in settings.items():
            args += [name, _flag_text(value)]
        return self._run(args, lambda reply: True)

    # --- JetStream: direct get (ADR-31) ------------------------------------------------

    def dget(self, key: Text, *, seq: int | None = None, last_by_subj: Text | None = None,
             next_by_subj: Text | None = None, start_time: TimeArg | None = None,
             batch: int | None = None, max_bytes: int | None = None):
        """Direct get: one ``Message`` (None when nothing matches); with ``batch``
        a ``Batch`` of up to that many messages (None when nothing matches)."""
        args = ["DGET", key, *_keywords(
            ("SEQ", seq), ("LAST_BY_SUBJ", last_by_subj), ("NEXT_BY_SUBJ", next_by_subj),
            ("START_TIME", None if start_time is None else T.format_time(start_time)),
            ("BATCH", batch), ("MAX_BYTES", max_bytes))]
        return self._run(args, self._message_parser(batch is not None))

    def dget_subject(self, key: Text, subject: Text) -> T.Message | None:
        """The newest message of ``subject`` (``DGET key SUBJECT subject``)."""
        return self._run(("DGET", key, "SUBJECT", subject), self._message_parser(False))

    def dget_json(self, key: Text, request: Union[dict, str, bytes]):
        """``DGET key <json>`` with the ADR-31 request payload; a Message, a Batch
        (``batch`` or ``multi_last`` given) or None."""
        import json

        payload = request if isinstance(request, (str, bytes)) else json.dumps(request)
        return self._run(("DGET", key, payload), self._any_message)

    def mlast(self, key: Text, *filters: Text, up_to_seq: int | None = None,
              up_to_time: TimeArg | None = None, seq: int | None = None, batch: int | None = None,
              max_bytes: int | None = None) -> T.Batch | None:
        """The newest message of every subject matching ``filters`` (a ``Batch`` with
        ``upto_seq``), None when none matches."""
        if not filters:
            raise ValueError("mlast needs at least one subject filter")
        args = ["MLAST", key, *_keywords(
            ("UP_TO_SEQ", up_to_seq),
            ("UP_TO_TIME", None if up_to_time is None else T.format_time(up_to_time)),
            ("SEQ", seq), ("BATCH", batch), ("MAX_BYTES", max_bytes)), "SUBJECTS", *filters]
        return self._run(args, self._message_parser(True))

    def _message_parser(self, batched: bool) -> Callable[[Any], Any]:
        parse_times = self.parse_times
        if batched:
            return lambda reply: T.parse_batch(reply, parse_times)
        return lambda reply: T.parse_message(reply, parse_times)

    def _any_message(self, reply: Any):
        if isinstance(reply, list) and reply and isinstance(reply[0], (list, dict)):
            return T.parse_batch(reply, self.parse_times)
        return T.parse_message(reply, self.parse_times)

    # --- JetStream: atomic batch publish (ADR-50) -------------------------------------

    def batch(self, key: Text, batch_id: Text, batch_seq: int, subject: Text, data: Text, *,
              commit: bool = False, expect_last_seq: int | None = None,
              expect_last_subject_seq: int | None = None) -> T.PubAck | None:
        """One ``BATCH`` message: None once staged, the ``PubAck`` with ``commit``."""
        args: list[Any] = ["BATCH", key, batch_id, batch_seq, subject, data]
        if expect_last_seq is not None:
            args += ["EXPECT_LAST_SEQ", expect_last_seq]
        if expect_last_subject_seq is not None:
            args += ["EXPECT_LAST_SUBJECT_SEQ", expect_last_subject_seq]
        if commit:
            args.append("COMMIT")
        return self._run(args, T.parse_pub_ack)

    def batch_eob(self, key: Text, batch_id: Text, batch_seq: int) -> T.PubAck:
        """Commit the batch without adding a message (``BATCH key id seq EOB``)."""
        return self._run(("BATCH", key, batch_id, batch_seq, "EOB"), T.parse_pub_ack)

    def publish_batch(self, key: Text, messages: Iterable[Sequence[Any]], *,
                      batch_id: Text | None = None, expect_last_seq: int | None = None) -> T.PubAck:
        """Publish ``(subject, data)`` messages (or ``(subject, data,
        expect_last_subject_seq)``) as one atomic batch, in one round trip:
        all are stored, or none (``TStreamError`` with the ADR-50 code)."""
        batch_id = batch_id or uuid.uuid4().hex
        commands = []
        for seq, message in enumerate(messages, 1):
            subject, data = message[0], message[1]
            args: list[Any] = ["BATCH", key, batch_id, seq, subject, data]
            if seq == 1 and expect_last_seq is not None:
                args += ["EXPECT_LAST_SEQ", expect_last_seq]
            if len(message) > 2 and message[2] is not None:
                args += ["EXPECT_LAST_SUBJECT_SEQ", message[2]]
            commands.append(args)
        if not commands:
            raise ValueError("publish_batch needs at least one message")
        commands[-1].append("COMMIT")
        return self._run_many(commands, T.parse_pub_ack)


def _raise_first_error(results: list[Any]) -> None:
    for result in results:
        if isinstance(result, redis.ResponseError):
            raise T.convert_error(result) from None
        if isinstance(result, Exception):
            raise result


_REPLICA_READS = frozenset({"TREAD", "DGET", "MLAST", "TINFO", "TPENDING", "TCONFIG"})


class TStream(_Commands):
    """Typed tstream commands on a ``redis.Redis`` (RESP2 or RESP3, any
    ``decode_responses``)::

        ts = TStream(redis.Redis(port=6380))
        first = ts.twrite("orders", "created", b"{}")
        for entry in ts.tread("orders", first, 10):
            ...

    ``replicas``: clients of read-only replicas of that primary; plain reads
    (``tread`` without ``group``, ``dget``, ``mlast``, ``tinfo``, ``tpending``,
    ``tconfig_get``) go to them in turn, everything else to the primary.  A
    replica is asynchronous: a read right after a write may not see it yet
    (``WAIT`` on the primary first when it must).
    """

    def __init__(self, redis_client: redis.Redis, *, parse_times: bool = True,
                 replicas: Sequence[redis.Redis] = ()) -> None:
        super().__init__(redis_client, parse_times=parse_times, replicas=replicas)

    def _run(self, args, parse):
        try:
            reply = self._client_for(args).execute_command(*args)
        except redis.ResponseError as exc:
            converted = T.convert_error(exc)
            if converted is exc:
                raise
            raise converted from None
        return parse(reply)

    def _run_many(self, commands, parse):
        pipe = self.redis.pipeline(transaction=False)
        for args in commands:
            pipe.execute_command(*args)
        results = pipe.execute(raise_on_error=False)
        _raise_first_error(results)
        return parse(results[-1])


class AsyncTStream(_Commands):
    """Typed tstream commands on a ``redis.asyncio.Redis``; every method returns
    an awaitable::

        ts = AsyncTStream(redis.asyncio.Redis(port=6380))
        first = await ts.twrite("orders", "created", b"{}")
    """

    def __init__(self, redis_client, *, parse_times: bool = True, replicas: Sequence[Any] = ()) -> None:
        super().__init__(redis_client, parse_times=parse_times, replicas=replicas)

    async def _run(self, args, parse):
        try:
            reply = await self._client_for(args).execute_command(*args)
        except redis.ResponseError as exc:
            converted = T.convert_error(exc)
            if converted is exc:
                raise
            raise converted from None
        return parse(reply)

    async def _run_many(self, commands, parse):
        pipe = self.redis.pipeline(transaction=False)
        for args in commands:
            pipe.execute_command(*args)
        results = await pipe.execute(raise_on_error=False)
        _raise_first_error(results)
        return parse(results[-1])


def _keywords(*pairs) -> list:
    """``KEYWORD value`` arguments for the pairs whose value is given (not None)."""
    return [word_or_value for word, value in pairs if value is not None for word_or_value in (word, value)]
