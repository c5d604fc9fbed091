"""Atomic batches in flight (ADR-50): staged in server memory, never in the stream.

A batch is keyed by ``(stream key, batch id)``.  Its messages wait here, invisible
to every read, until the commit appends them all with one ``Stream.append_many``
(see ``commands/jetstream.py``).  This module only keeps the staging state and
its limits; the command handler decides what each BATCH request does.

Limits (ADR-50): 50 batches in flight per stream, 1000 per server, 1000 messages
per batch; a batch that receives nothing for ``batch-timeout-ms`` (10 s) is
abandoned by the server's housekeeping pass (``Server._cron``, every 100 ms),
which scans the batches only once the least recently active one can be stale.

This is engine state (no I/O): the server holds one registry, its housekeeping
expires idle batches and INFO shows ``abandoned``, the batches abandoned by reason:
``incomplete`` (a gap in batch-seq, EOB at batch-seq 1, or a new batch-seq 1
replacing a batch still in flight), ``timeout``, ``large`` (more than 1000
messages) and ``rejected`` (an expectation failed at commit, an expectation not
allowed where it was given, or atomic publish disabled on the stream).
"""

from __future__ import annotations

import time

MAX_PER_STREAM = 50
MAX_PER_SERVER = 1000
MAX_MESSAGES = 1000
MAX_ID_LENGTH = 64

REASONS = ("incomplete", "timeout", "large", "rejected")

# batch-seq arguments as clients spell them, for the staging hot path
SEQ_ARGS = [b"%d" % i for i in range(MAX_MESSAGES + 2)]


class Batch:
    """One batch being staged."""

    __slots__ = ("key", "id", "flat", "next_seq", "next_arg", "last_active", "expect_last_seq",
                 "subject_expects", "msgids")

    def __init__(self, key: bytes, batch_id: bytes) -> None:
        self.key = key
        self.id = batch_id
        self.flat: list[bytes] = []          # [subject, data, subject, data, ...]
        self.next_seq = 1                    # the batch-seq the next message must carry
        self.next_arg = b"1"                 # ... as the client spells it (fast path)
        self.last_active = time.monotonic()
        self.expect_last_seq: int | None = None          # EXPECT_LAST_SEQ of message 1
        self.subject_expects: list[tuple[bytes, int]] = []  # EXPECT_LAST_SUBJECT_SEQ, in order
        self.msgids: dict[bytes, int] | None = None  # MSGID -> index of its message, once one is given

    @property
    def count(self) -> int:
        return len(self.flat) >> 1

    def stage(self, subject: bytes, data: bytes) -> None:
        """Add the message with batch-seq ``next_seq``."""
        self.flat.append(subject)
        self.flat.append(data)
        self.next_seq += 1
        self.next_arg = SEQ_ARGS[self.next_seq]
        self.last_active = time.monotonic()

    def has_subject(self, subject: bytes) -> bool:
        """True if a message of ``subject`` is staged. O(messages)."""
        return subject in self.flat[::2]


class BatchRegistry:
    """Every batch in flight on the server."""

    def __init__(self) -> None:
        self.abandoned = dict.fromkeys(REASONS, 0)  # reason -> batches abandoned (INFO stats)
        self.by_id: dict[tuple[bytes, bytes], Batch] = {}  # (key, batch id) -> batch; read only
        self._per_key: dict[bytes, int] = {}
        self._oldest_active = 0.0  # a lower bound of every batch's last_active

    def __len__(self) -> int:
        return len(self.by_id)

    def get(self, key: bytes, batch_id: bytes) -> Batch | None:
        return self.by_id.get((key, batch_id))

    def room_for(self, key: bytes) -> bool:
        """True if one more batch may start on ``key`` (50 per stream, 1000 in all). O(1)."""
        return len(self.by_id) < MAX_PER_SERVER and self._per_key.get(key, 0) < MAX_PER_STREAM

    def start(self, key: bytes, batch_id: bytes) -> Batch:
        batch = Batch(key, batch_id)
        if not self.by_id:
            self._oldest_active = batch.last_active
        self.by_id[(key, batch_id)] = batch
        self._per_key[key] = self._per_key.get(key, 0) + 1
        return batch

    def remove(self, batch: Batch) -> None:
        """Forget a batch (committed or abandoned). O(1)."""
        if self.by_id.pop((batch.key, batch.id), None) is None:
            return
        left = self._per_key[batch.key] - 1
        if left:
            self._per_key[batch.key] = left
        else:
            del self._per_key[batch.key]

    def abandon(self, batch: Batch, reason: str) -> None:
        """Drop a batch and count it under ``reason`` (one of REASONS). O(1)."""
        self.remove(batch)
        self.count_abandoned(reason)

    def count_abandoned(self, reason: str) -> None:
        self.abandoned[reason] += 1

    def reset_counts(self) -> None:
        """CONFIG RESETSTAT: the abandoned counts start again from zero."""
        for reason in REASONS:
            self.abandoned[reason] = 0

    def expire(self, timeout_ms: int, now: float | None = None) -> int:
        """Abandon the batches idle for ``timeout_ms`` or more; returns how many. O(batches)."""
        if not self.by_id:
            return 0
        now = time.monotonic() if now is None else now
        limit = timeout_ms / 1000.0
        # No batch was active before _oldest_active (activity times only grow):
        # until that one can be stale, nothing is due and nothing is scanned.
        if now - self._oldest_active < limit:
            return 0
        stale = [b for b in self.by_id.values() if now - b.last_active >= limit]
        for batch in stale:
            self.abandon(batch, "timeout")
        self._oldest_active = min((b.last_active for b in self.by_id.values()), default=now)
        return len(stale)

    def clear(self) -> None:
        self.by_id.clear()
        self._per_key.clear()
