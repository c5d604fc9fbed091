"""Reading a stream through TNODES: the server hands out its macro nodes as
stored, this module decodes them into Arrow record batches.

The server's cost per node is a copy of its stored bytes (no decompression, no
object per entry); decoding runs here, in the reader, with the engine's own
node decoder and the offline snapshot reader's node-to-Arrow step
(``pipeline.offline``), so a read through the server and a read of a snapshot
file give the same rows.  Each reply holds up to ``COUNT`` nodes; the reader
asks again from the reply's ``next`` offset until it passes the range.  The
next request leaves as soon as a reply is parsed, before it is decoded, so the
server copies (and the kernel carries) the next nodes while this reader
decodes the last ones.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .common import DataLossError, loss_message
from .offline import grouped_batches, node_slice


def tag_table(flat: list) -> pa.Array:
    """The Arrow string array indexed by tag id, from TNODES's flat [id, tag, ...]."""
    ids = flat[0::2]
    names: list = [None] * ((max(ids) + 1) if ids else 1)
    for tid, tag in zip(ids, flat[1::2]):
        names[tid] = tag.decode("utf-8", "replace") if isinstance(tag, bytes) else tag
    return pa.array(names, pa.string())


def reply_batches(reply: list, lo: int, hi: int, key: str) -> tuple[list[pa.RecordBatch], int, int]:
    """The record batches of one TNODES reply, keeping offsets ``lo..hi`` (and
    none below the stream's first): its nodes gathered into batches of about
    ``offline.BATCH_BYTES`` of entries; with the reply's ``next`` and ``first``."""
    from tstream.engine.node import Node

    first, following, node_entries, flat = reply[0], reply[1], reply[2], reply[3]
    tags = tag_table(flat)
    slices = (node_slice(Node.from_parts(header, body, node_entries, check=False), deleted, max(lo, first), hi)
              for header, body, deleted in reply[4:])
    return list(grouped_batches(slices, tags, key)), following, first


def read_nodes(client, key: str, lo: int, hi: int, nodes_per_call: int = 16,
               max_bytes: int = 8 << 20, fail_on_loss: bool = False,
               read_ahead: bool = True) -> Iterator[pa.RecordBatch]:
    """Record batches of offsets ``lo..hi`` of ``key`` through TNODES on
    ``client`` (a redis-py client).  With ``read_ahead`` one request is in
    flight while a reply is decoded; after a connection error or a timeout the
    read goes on from the first offset not handed out, one call at a time
    through ``client`` (whose retries reconnect and send a call again: each
    call stands alone).  With ``fail_on_loss``, offsets of the range evicted
    before they were read raise :class:`DataLossError`."""
    resume = [lo]  # the first offset not handed out yet
    if read_ahead:
        try:
            yield from _read_ahead(client, key, lo, hi, nodes_per_call, max_bytes, fail_on_loss, resume)
            return
        except (RedisConnectionError, RedisTimeoutError):
            pass  # the rest one call at a time, with the client's retries
    at = resume[0]
    while at <= hi:
        reply = client.execute_command("TNODES", key, at, "COUNT", nodes_per_call, "MAXBYTES", max_bytes)
        batches, following, first = reply_batches(reply, lo, hi, key)
        if fail_on_loss and first > at:
            raise DataLossError(loss_message(key, at, min(hi, first - 1), first))
        yield from batches
        if following <= at:
            return  # nothing at or after ``at``
        at = following


def _read_ahead(client, key: str, lo: int, hi: int, count: int, max_bytes: int, fail_on_loss: bool,
                resume: list) -> Iterator[pa.RecordBatch]:
    """``read_nodes`` on one connection of ``client``'s pool, the request for
    the next nodes sent before the last reply is decoded."""
    pool = client.connection_pool
    try:
        conn = pool.get_connection()
    except TypeError:  # redis-py < 5.3 wants a command name
        conn = pool.get_connection("TNODES")
    owed = 0
    try:
        at = lo
        conn.send_command("TNODES", key, at, "COUNT", count, "MAXBYTES", max_bytes)
        owed = 1
        while True:
            reply = conn.read_response()
            owed -= 1
            following = reply[1]
            more = at < following <= hi
            if more:
                conn.send_command("TNODES", key, following, "COUNT", count, "MAXBYTES", max_bytes)
                owed += 1
            batches, following, first = reply_batches(reply, lo, hi, key)
            if fail_on_loss and first > at:
                raise DataLossError(loss_message(key, at, min(hi, first - 1), first))
            yield from batches
            if not more:
                return
            at = resume[0] = following
    finally:
        if owed:  # a reply still owed (an error, or the reader stopped early): not reusable
            conn.disconnect()
        pool.release(conn)
