"""Reading a range of offsets from a running server, page by page.

Two ways to read a page, chosen per partition:

- ``DGET key SEQ lo BATCH n`` (JetStream direct get) when ``withTime`` is on and
  the server has DGET and the stream allows direct gets: message maps carry the
  entry's write time, so the ``time`` column is filled. Missing entries are
  skipped by the server.
- ``TREAD key lo n WITHINFO`` otherwise: one element per offset, null for a
  missing entry (skipped here); RCP 11 has no times on the wire, so ``time`` is
  null.

Both walk the range with a cursor that only moves forward and is set from the
offsets the server returned, so an eviction during the read can only make rows
absent: never duplicated, never shifted. For the streaming reader an eviction
of offsets it still had to read is *data loss* (offsets below the stream's
``first`` when the page was read) and raises :class:`DataLossError` unless
``failOnDataLoss`` is false; deleted entries above ``first`` (JetStream's
per-subject limit) are not loss, they are simply absent.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa

from .common import (DataLossError, Options, connect, decode_tags, record_batch,
                     rfc3339_to_times)

# Replies that mean "this server or stream cannot serve DGET": fall back to TREAD.
_NO_DGET = ("unknown command", "503")


def loss_message(key: str, lo: int, hi: int, first: int) -> str:
    return (f"tstream: offsets {lo} to {hi} of key {key!r} were evicted before the query read "
            f"them (the stream's first offset is now {first}): some data may have been lost "
            "(retention: TEVICT, BACKLOG, max_len, max_age_ms or max_msgs_per_subject removed it). "
            "If you don't want your streaming query to fail on such cases, set the source option "
            "failOnDataLoss to false.")


def read_range(options: Options, lo: int, hi: int, fail_on_loss: bool = False,
               client=None) -> Iterator[pa.RecordBatch]:
    """Record batches of the entries held at offsets ``lo..hi`` (inclusive), by
    offset, about one page each (``pageSize`` offsets, ending on macro-node
    boundaries where the page size is a multiple of the node size)."""
    own = client is None
    if own:
        client = connect(options)
    try:
        key = options.require_key()
        pages = None
        if options.with_time:
            pages = _dget_pages(client, key, lo, hi, options.page_size, fail_on_loss)
            try:
                first_page = next(pages)
            except StopIteration:
                return
            except Exception as exc:  # redis ResponseError: no DGET here
                if not any(text in str(exc) for text in _NO_DGET):
                    raise
                pages = None
            else:
                yield first_page
                yield from pages
                return
        yield from _tread_pages(client, key, lo, hi, options.page_size, fail_on_loss)
    finally:
        if own:
            client.close()


def _check_loss(key: str, cursor: int, hi: int, first: int, fail_on_loss: bool) -> None:
    if fail_on_loss and first > cursor:
        raise DataLossError(loss_message(key, cursor, min(hi, first - 1), first))


def _page_end(cursor: int, hi: int, page: int) -> int:
    """Last offset of the page starting at ``cursor``: aligned so that pages after
    the first one start on a multiple of ``page`` (node boundaries)."""
    end = (cursor - 1) // page * page + page
    return end if end < hi else hi


def _tread_pages(client, key: str, lo: int, hi: int, page: int,
                 fail_on_loss: bool) -> Iterator[pa.RecordBatch]:
    cursor = lo
    while cursor <= hi:
        end = _page_end(cursor, hi, page)
        reply = client.execute_command("TREAD", key, cursor, end - cursor + 1, "WITHINFO")
        first, last = reply[0]
        _check_loss(key, cursor, hi, first, fail_on_loss)
        rows = [row for row in reply[1:] if row is not None]
        if rows:
            offsets, tags, entries = zip(*rows)
            yield record_batch(pa.array(offsets, pa.int64()), decode_tags(tags),
                               pa.array(entries, pa.binary()), None)
        if first > end:  # the whole page was evicted: jump to what is held
            cursor = first
        else:
            cursor = end + 1
        if cursor > last:  # nothing more written (or the stream is gone)
            return


def _dget_pages(client, key: str, lo: int, hi: int, page: int,
                fail_on_loss: bool) -> Iterator[pa.RecordBatch]:
    cursor = lo
    while cursor <= hi:
        end = _page_end(cursor, hi, page)
        if fail_on_loss:
            # [first, last] just before the DGET, in the same round trip.
            pipe = client.pipeline(transaction=False)
            pipe.execute_command("TREAD", key, cursor, 0, "WITHINFO")
            pipe.execute_command("DGET", key, "SEQ", cursor, "BATCH", end - cursor + 1)
            info, reply = pipe.execute(raise_on_error=True)
            _check_loss(key, cursor, hi, info[0][0], fail_on_loss)
        else:
            reply = client.execute_command("DGET", key, "SEQ", cursor, "BATCH", end - cursor + 1)
        if reply is None:  # nothing held at or after cursor
            return
        offsets, tags, entries, times = [], [], [], []
        past_hi = False
        pending = None
        for message in reply:
            if isinstance(message, list):  # RESP2: flat arrays
                message = dict(zip(message[0::2], message[1::2]))
            seq = message.get(b"seq")
            if seq is None:  # the end-of-batch marker
                pending = message.get(b"num_pending")
                continue
            if seq > hi:
                past_hi = True
                break
            offsets.append(seq)
            tags.append(message[b"subject"])
            entries.append(message[b"data"])
            times.append(message[b"time"])
        if offsets:
            yield record_batch(pa.array(offsets, pa.int64()), decode_tags(tags),
                               pa.array(entries, pa.binary()), rfc3339_to_times(times))
        if past_hi or not offsets or pending == 0:
            return
        cursor = offsets[-1] + 1
