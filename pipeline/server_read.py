"""Reading a range of offsets from a running server, page by page.

A range ``lo..hi`` is cut into fixed pages of ``pageSize`` offsets, aligned on
multiples of the page size (so on macro-node boundaries when the page size is
a multiple of the node size). Requests are pipelined: the request for the next
page leaves before the reply of the current one is converted, so the server
produces a page while the task turns the previous one into Arrow arrays.

Two ways to read a page, chosen per task:

- ``DGET key SEQ a BATCH n`` (JetStream direct get) when ``withTime`` is on and
  the server has DGET and the stream allows direct gets: message maps carry the
  entry's write time, so the ``time`` column is filled. The server skips
  missing entries (and may then return messages past the page: they are
  dropped, the next page reads them).
- ``TREAD key a n WITHINFO`` otherwise: one element per offset, null for a
  missing entry (skipped); RCP 11 has no times on the wire, so ``time`` is null.

Pages are disjoint and each keeps only offsets inside itself, so an eviction
during the read can only make rows absent: never duplicated, never shifted.
When a reply shows that the stream's ``first`` offset moved past pages not
requested yet, those pages are skipped. For the streaming reader an eviction of
offsets it still had to read is *data loss* (offsets below the stream's
``first`` when the page was read) and raises :class:`DataLossError` unless
``failOnDataLoss`` is false; entries deleted above ``first`` (JetStream's
per-subject limit) are not loss, they are simply absent.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Iterator

import pyarrow as pa
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .common import (
    DataLossError,
    Options,
    backoff,
    connect,
    decode_tags,
    loss_message,
    record_batch,
    rfc3339_to_times,
    stream_info,
)
from .nodes_read import read_nodes

PREFETCH = 2  # requests in flight per task
PROBE = 4     # TREAD (no byte cap on the server): the first page's entries, to learn their size

# Replies that mean "this server or stream cannot serve DGET": fall back to TREAD.
_NO_DGET = ("unknown command", "503")



def read_range(options: Options, lo: int, hi: int, fail_on_loss: bool = False,
               client=None, key: str | None = None, tag: str | None = None) -> Iterator[pa.RecordBatch]:
    """Record batches (one per page) of the entries of ``key`` (default: the
    option key) held at offsets ``lo..hi`` (inclusive), by offset."""
    if hi < lo:
        return
    own = client is None
    if own:
        client = connect(options)
    try:
        yield from _read(client, key or options.require_key(), lo, hi, options, fail_on_loss, tag)
    finally:
        if own:
            client.close()


REPLICA_POLL = 0.05  # s between two looks at a replica that has not caught up yet


def read_partition(options: Options, address: str | None, key: str, lo: int, hi: int,
                   fail_on_loss: bool = False, tag: str | None = None) -> Iterator[pa.RecordBatch]:
    """``read_range`` of one planned partition: from the replica at ``address``
    (``readFrom=replica``) once it holds offset ``hi`` (the plan was made on the
    primary), else from the primary (``url``): a replica that does not catch up
    within ``timeoutMs``, or cannot be reached, is logged and passed over."""
    if address is None or hi < lo:
        yield from read_range(options, lo, hi, fail_on_loss=fail_on_loss, key=key, tag=tag)
        return
    import logging

    at = options.at(address)
    client = connect(at)
    try:
        try:
            ready = _caught_up(client, key, hi, at.timeout_ms / 1000)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            ready, why = False, f"cannot be reached ({exc})"
        else:
            why = f"does not hold offset {hi} of {key!r} after {at.timeout_ms} ms"
        if ready:
            yield from read_range(at, lo, hi, fail_on_loss=fail_on_loss, client=client, key=key, tag=tag)
            return
    finally:
        client.close()
    logging.getLogger("pipeline.read").warning("tstream: replica %s %s: reading offsets %d..%d from the primary",
                                               address, why, lo, hi)
    yield from read_range(options, lo, hi, fail_on_loss=fail_on_loss, key=key, tag=tag)


def _caught_up(client, key: str, hi: int, timeout: float) -> bool:
    """Whether the replica holds offset ``hi`` of ``key``, waiting up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        if stream_info(client, key).last >= hi:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(REPLICA_POLL)


def _read(client, key: str, lo: int, hi: int, options: Options, fail_on_loss: bool,
          tag: str | None) -> Iterator[pa.RecordBatch]:
    """The first way the server can serve the read: a tag's entries through the
    subject index; the nodes as stored (TNODES: times included, the decoding
    done here); DGET pages (times); TREAD pages."""
    if tag is not None:
        try:
            yield from _read_tag(client, key, lo, hi, tag, options.page_size, options.max_page_bytes,
                                 fail_on_loss)
            return
        except _NoDirectGet:
            pass  # read every entry: Spark's filter keeps the tag's
    if options.read_mode != "pages":
        nodes = read_nodes(client, key, lo, hi, max_bytes=options.max_page_bytes, fail_on_loss=fail_on_loss)
        if (yield from _served(nodes, ("unknown command",) if options.read_mode == "auto" else ())):
            return
    if options.with_time:
        pages = _PageReader(client, key, lo, hi, options, fail_on_loss, dget=True)
        if (yield from _served(pages, _NO_DGET)):
            return
    yield from _PageReader(client, key, lo, hi, options, fail_on_loss, dget=False)


def _served(reader: Iterator[pa.RecordBatch], refusals: tuple[str, ...]):
    """Yield what ``reader`` yields and return True; return False, having yielded
    nothing, when its first step fails with an error that says this way of
    reading is not served (one of ``refusals``)."""
    try:
        first = next(reader)
    except StopIteration:
        return True
    except Exception as exc:  # a ResponseError: not on this server or stream
        if not any(text in str(exc) for text in refusals):
            raise
        return False
    yield first
    yield from reader
    return True


class _NoDirectGet(Exception):
    """DGET cannot serve this read (an old server, or direct gets off on the stream)."""


def _messages(reply) -> list[dict]:
    return [dict(zip(m[0::2], m[1::2])) if isinstance(m, list) else m for m in reply]


def _read_tag(client, key: str, lo: int, hi: int, tag: str, size: int, max_bytes: int,
              fail_on_loss: bool) -> Iterator[pa.RecordBatch]:
    """The entries of ``tag`` (a subject filter: a tag, or ``T.>``) in ``lo..hi``,
    through the server's subject index:
    ``DGET key SEQ a BATCH n NEXT_BY_SUBJ tag``, each request from the offset
    after the last one returned (no prefetch: the next start depends on the reply)."""
    from redis.exceptions import ResponseError

    a = lo
    while a <= hi:
        try:
            if fail_on_loss:
                first = client.execute_command("TREAD", key, a, 0, "WITHINFO")[0][0]
                if first > a:
                    raise DataLossError(loss_message(key, a, min(hi, first - 1), first))
            reply = client.execute_command("DGET", key, "SEQ", a, "BATCH", size, "NEXT_BY_SUBJ", tag,
                                           "MAX_BYTES", max_bytes)
        except ResponseError as exc:
            if any(text in str(exc) for text in _NO_DGET) and a == lo:
                raise _NoDirectGet() from None
            raise
        if not reply:
            return
        offsets, tags, entries, times = [], [], [], []
        pending = 0
        for message in _messages(reply):
            seq = message.get(b"seq")
            if seq is None:
                pending = message.get(b"num_pending") or 0
                continue
            if seq > hi:
                pending = 0
                break
            offsets.append(seq)
            tags.append(message[b"subject"])
            entries.append(message[b"data"])
            times.append(message[b"time"])
        if offsets:
            yield record_batch(pa.array(offsets, pa.int64()), decode_tags(tags),
                               pa.array(entries, pa.binary()), rfc3339_to_times(times), key)
        if not pending or not offsets:
            return
        a = offsets[-1] + 1


class _PageReader:
    """Iterator of record batches over the pages of one range, ``PREFETCH``
    requests in flight on one connection of ``client``'s pool.

    A connection error or a timeout (``timeoutMs``) drops the connection and the
    requests in flight; after a backoff the reader reconnects and asks again from
    the page after the last one it handed out, up to ``retries`` times in a row.

    Pages hold ``pageSize`` offsets, fewer when entries are big: the reader keeps
    the mean size of the entries read so far and sizes the next pages to about
    ``maxPageBytes``. DGET pages also carry that as ``MAX_BYTES``: a page the
    server cuts short is handed out as it is, the requests in flight after it are
    dropped (with their connection) and the reader asks again from the next offset.
    TREAD has no byte cap, so its first page asks for ``PROBE`` entries only."""

    def __init__(self, client, key: str, lo: int, hi: int, options: Options, fail_on_loss: bool,
                 dget: bool) -> None:
        self.client = client
        self.key = key
        self.hi = hi
        self.size = options.page_size
        self.max_bytes = options.max_page_bytes
        self.cur = self.size if dget else min(self.size, PROBE)  # entries of the next page
        self.cut = None            # the last offset of a DGET page cut short by MAX_BYTES
        self.retries = options.retries
        self.backoff = backoff(options)
        self.failures = 0
        self.fail_on_loss = fail_on_loss
        self.dget = dget
        self.pages = self._pages(lo)
        self.resume = lo           # the first offset of the first page not handed out yet
        self.skip_to = lo          # pages ending below this hold nothing any more
        self.inflight: deque = deque()
        self.conn = None
        self.done = False

    def __iter__(self):
        return self

    def _send_next(self) -> bool:
        for a, b in self.pages:
            if b < self.skip_to:
                continue
            a = max(a, self.skip_to) if not self.fail_on_loss else a
            conn = self.conn
            if self.dget:
                if self.fail_on_loss:  # [first, last] just before the DGET, same round trip
                    conn.send_command("TREAD", self.key, a, 0, "WITHINFO")
                conn.send_command("DGET", self.key, "SEQ", a, "BATCH", b - a + 1, "MAX_BYTES", self.max_bytes)
            else:
                conn.send_command("TREAD", self.key, a, b - a + 1, "WITHINFO")
            self.inflight.append((a, b))
            return True
        return False

    def __next__(self) -> pa.RecordBatch:
        while True:
            try:
                batch = self._next_page()
            except StopIteration:
                raise
            except (RedisConnectionError, RedisTimeoutError):
                self._release(broken=True)
                if self.failures >= self.retries:
                    raise
                self.failures += 1
                time.sleep(self.backoff.compute(self.failures))
                # Again from the first page not handed out: the replies in flight are lost.
                self.pages = self._pages(self.resume)
                self.done = False
                continue
            except BaseException:
                self._release(broken=True)  # replies may still be owed on the connection
                raise
            self.failures = 0
            return batch

    def _next_page(self) -> pa.RecordBatch:
        if self.conn is None:
            pool = self.client.connection_pool
            try:
                self.conn = pool.get_connection()
            except TypeError:  # redis-py < 5.3 wants a command name
                self.conn = pool.get_connection("TREAD")
        while True:
            while not self.done and len(self.inflight) < PREFETCH and self._send_next():
                pass
            if not self.inflight:
                self._release()
                raise StopIteration
            a, b = self.inflight[0]
            batch = self._dget_page(a, b) if self.dget else self._tread_page(a, b)
            self.inflight.popleft()
            self.resume = b + 1
            if batch is not None and batch.num_rows:
                size = (batch.column(1).nbytes + batch.column(2).nbytes) // batch.num_rows
                self.cur = max(1, min(self.size, self.max_bytes // max(1, size)))
            if self.cut is not None:
                # Cut short by MAX_BYTES: again from the next offset, without the requests in flight.
                self.resume, self.cut = self.cut + 1, None
                self._release(broken=True)
                self.pages = self._pages(self.resume)
                self.done = False
            if batch is not None:
                return batch

    def _pages(self, a: int) -> Iterator[tuple[int, int]]:
        """``(a, b)`` inclusive pages from ``a`` to the end of the range: of ``pageSize``
        offsets cut at its multiples (macro-node boundaries when the node size is a
        multiple of it), or of ``self.cur`` offsets when entries are big."""
        size = self.size
        while a <= self.hi:
            if self.cur >= size:
                b = min((a - 1) // size * size + size, self.hi)
            else:
                b = min(a + self.cur - 1, self.hi)
            yield a, b
            a = b + 1

    def close(self) -> None:
        self._release()

    def __del__(self) -> None:
        try:
            self._release()
        except Exception:  # at interpreter exit the pool may be gone
            pass

    def _release(self, broken: bool = False) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        if broken or self.inflight:  # replies still owed: the connection cannot be reused
            self.inflight.clear()
            conn.disconnect()
        self.client.connection_pool.release(conn)

    def _check_loss(self, a: int, b: int, first: int) -> None:
        if self.fail_on_loss and first > a:
            raise DataLossError(loss_message(self.key, a, min(self.hi, first - 1), first))

    def _tread_page(self, a: int, b: int) -> pa.RecordBatch | None:
        reply = self.conn.read_response()
        first, last = reply[0]
        self._check_loss(a, b, first)
        if first > self.skip_to:
            self.skip_to = first
        if last < b or first > self.hi:  # the log ends in this page: nothing after it
            self.done = True
        rows = [row for row in reply[1:] if row is not None]
        if not rows:
            return None
        offsets, tags, entries = zip(*rows)
        return record_batch(pa.array(offsets, pa.int64()), decode_tags(tags),
                            pa.array(entries, pa.binary()), None, self.key)

    def _dget_page(self, a: int, b: int) -> pa.RecordBatch | None:
        if self.fail_on_loss:
            info = self.conn.read_response()
            self._check_loss(a, b, info[0][0])
        reply = self.conn.read_response()
        if reply is None:  # nothing held at or after a
            self.done = True
            return None
        offsets, tags, entries, times = [], [], [], []
        pending = None
        beyond = False
        for message in reply:
            if isinstance(message, list):  # RESP2: flat arrays
                message = dict(zip(message[0::2], message[1::2]))
            seq = message.get(b"seq")
            if seq is None:  # the end-of-batch marker
                pending = message.get(b"num_pending")
                if pending == 0:
                    self.done = True
                continue
            if seq > b:  # past this page: the next page has it; nothing held in (last kept, seq)
                beyond = True
                if seq > self.skip_to:
                    self.skip_to = seq
                if seq > self.hi:
                    self.done = True
                break
            offsets.append(seq)
            tags.append(message[b"subject"])
            entries.append(message[b"data"])
            times.append(message[b"time"])
        if pending and not beyond and offsets and offsets[-1] < b:
            # Fewer messages than asked, none past the page, more held: MAX_BYTES cut the
            # batch short; the rest of the page is asked for again.
            self.cut = offsets[-1]
        if not offsets:
            return None
        return record_batch(pa.array(offsets, pa.int64()), decode_tags(tags),
                            pa.array(entries, pa.binary()), rfc3339_to_times(times), self.key)
