"""A small typed client for tstream on top of redis-py.

    import redis
    from tstream import client
    ts = client.TStream(redis.Redis(port=6380))            # or protocol=3, decode_responses=True
    offset = ts.twrite("orders", "orders.eu.created", b'{"id": 1}')
    entries = ts.tread("orders", "-", 10, group="billing", retry=(30000, 600000))
    ts.tack("orders", "billing", *(e.offset for e in entries))
    msg = ts.dget_subject("orders", "orders.eu.created")    # Message(stream, subject, seq, time, data)

    ats = client.AsyncTStream(redis.asyncio.Redis(port=6380))
    offset = await ats.twrite("orders", "orders.eu.created", b"{}")

    pub = client.FastPublisher(redis.Redis(port=6380), "orders")  # ADR-50 fast ingest
    batch_seq, ack_seq = pub.add("orders.eu.created", b"{}")
    pub_ack = pub.end()

Replies become plain Python objects: offsets and counts are ints, entries
``Entry(offset, tag, data)`` (None for a missing one), JetStream messages
``Message(stream, subject, seq, time, data, ...)`` and batched replies ``Batch``.
Tags, subjects and data come back as redis-py gives them: bytes, or str with
``decode_responses=True``.  Error replies carrying a JetStream status or ADR-50
code raise ``TStreamError`` (a ``redis.ResponseError``) with ``.code``.
"""

from .api import AsyncTStream, TStream
from .fast import AsyncFastPublisher, BatchEnded, FastPubAck, FastPublisher
from .types import Batch, Entry, GroupInfo, Message, Pending, PubAck, StreamConfig, StreamInfo, TStreamError, Window

__all__ = ["TStream", "AsyncTStream", "FastPublisher", "AsyncFastPublisher", "FastPubAck", "BatchEnded", "Entry", "Window", "Pending", "StreamInfo", "StreamConfig",
           "GroupInfo", "Message", "Batch", "PubAck", "TStreamError"]
