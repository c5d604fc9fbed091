"""The load mix shared by ``locustfile.py`` and ``soak.py``.

A ``Workload`` issues tstream commands through a ``call(name, *argv)`` function
given to it, which sends ``argv``, times it under ``name`` and returns the reply
(None when the command failed: the caller counts the error).  The locustfile's ``call`` fires locust's
``request`` event, the soak's records latencies per 10 s window.

Keys (``prefix`` defaults to ``load``), set up by ``setup`` with eviction
policies so the data stays bounded however long the load runs:

- ``load:orders:0..3``   ``max_len 20000``: producers TWRITE (single entries and
  ENTRIES of 10), consumer group ``billing`` reads with RETRY and TACKs,
  readers DGET by sequence and by subject and TREAD;
- ``load:events``        ``max_age_ms 30000``: written beside the orders,
  followed by a blocking TREAD tail reader;
- ``load:kv``            ``max_msgs_per_subject 1``, ``max_age_ms 120000``: a
  JetStream KV bucket written with atomic BATCHes and single TWRITEs, read with
  ``DGET ... SUBJECT`` and MLAST.

Command names as timed (``SINGLE`` are the single-entry ones the latency bar is
about): TWRITE, TWRITE ENTRIES, TREAD GROUP, TACK, TREAD, TREAD BLOCK, TPENDING,
DGET SEQ, DGET LAST_BY_SUBJ, DGET SUBJECT, MLAST, BATCH (a staged message),
BATCH COMMIT.
"""

from __future__ import annotations

import itertools
import os
import random
from typing import Any, Callable

ORDER_KEYS = 4
MAX_LEN = 20000
EVENTS_MAX_AGE_MS = 30000
KV_SUBJECTS_PER_BUCKET = 100
KV_BUCKETS = 5
KV_MAX_AGE_MS = 120000
GROUP = "billing"
RETRY_MS, EXPIRE_MS = 5000, 60000
REGIONS = ("eu", "us", "ap", "sa")

SINGLE = frozenset({"TWRITE", "TACK", "DGET SEQ", "DGET LAST_BY_SUBJ", "DGET SUBJECT", "BATCH"})

_WORDS = ("order", "paid", "shipped", "customer", "amount", "currency", "EUR", "USD", "status",
          "created", "warehouse", "priority", "express", "standard", "note")


def payload(rng: random.Random, size: int) -> bytes:
    """A JSON-ish body of about ``size`` bytes: mostly text, some random digits."""
    parts = [b'{"id": %d' % rng.randrange(10**9)]
    length = len(parts[0])
    while length < size - 2:
        word = rng.choice(_WORDS)
        part = b', "%s": "%s-%d"' % (word.encode(), rng.choice(_WORDS).encode(), rng.randrange(10**6))
        parts.append(part)
        length += len(part)
    parts.append(b"}")
    return b"".join(parts)


class Payloads:
    """A pool of ready-made bodies, so the load generator spends its CPU on
    sending commands rather than on formatting payloads."""

    def __init__(self, rng: random.Random, size: tuple[int, int], count: int = 256) -> None:
        self.items = [payload(rng, rng.randrange(*size)) for _ in range(count)]
        self.rng = rng

    def pick(self) -> bytes:
        return self.items[int(self.rng.random() * len(self.items))]


Call = Callable[..., Any]


class Workload:
    def __init__(self, call: Call, prefix: str = "load", seed: int | None = None) -> None:
        self.call = call
        self.rng = random.Random(seed if seed is not None else os.getpid() ^ id(self))
        self.prefix = prefix
        self.orders = [f"{prefix}:orders:{i}" for i in range(ORDER_KEYS)]
        self.events = f"{prefix}:events"
        self.kv = f"{prefix}:kv"
        self._batch_ids = itertools.count()
        self._tag = f"{os.getpid()}-{id(self) & 0xffffff:x}"
        self._follow_next: int | str = "$"
        self._orders_data = Payloads(self.rng, (100, 400))
        self._kv_data = Payloads(self.rng, (140, 160))
        self._event_data = Payloads(self.rng, (110, 130))
        self._order_subjects = [f"orders.{region}.{n}" for region in REGIONS for n in range(50)]
        self._kv_subjects = [f"kv.{b}.{n}" for b in range(KV_BUCKETS) for n in range(KV_SUBJECTS_PER_BUCKET)]

    # --- setup ----------------------------------------------------------------------

    def setup(self) -> None:
        """Eviction policies that bound the data (idempotent)."""
        for key in self.orders:
            self.call("TCONFIG", "TCONFIG", key, "SET", "max_len", MAX_LEN)
        self.call("TCONFIG", "TCONFIG", self.events, "SET", "max_age_ms", EVENTS_MAX_AGE_MS)
        self.call("TCONFIG", "TCONFIG", self.kv, "SET", "max_msgs_per_subject", 1, "max_age_ms", KV_MAX_AGE_MS)

    # --- helpers --------------------------------------------------------------------

    def _order_subject(self) -> str:
        subjects = self._order_subjects
        return subjects[int(self.rng.random() * len(subjects))]

    def _kv_subject(self) -> str:
        subjects = self._kv_subjects
        return subjects[int(self.rng.random() * len(subjects))]

    # --- producers ------------------------------------------------------------------

    def produce(self) -> None:
        """One write: 90% a single order entry, 5% ENTRIES of 10, 5% an event."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.90:
            self.call("TWRITE", "TWRITE", rng.choice(self.orders), self._order_subject(),
                      self._orders_data.pick())
        elif roll < 0.95:
            flat = []
            for _ in range(10):
                flat += [self._order_subject(), self._orders_data.pick()]
            self.call("TWRITE ENTRIES", "TWRITE", rng.choice(self.orders), "ENTRIES", *flat)
        else:
            self.call("TWRITE", "TWRITE", self.events, f"event.{rng.choice(REGIONS)}", self._event_data.pick())

    # --- group consumers --------------------------------------------------------------

    def consume(self) -> int:
        """One group read (RETRY: at-least-once) of up to 10 entries, then TACK
        them; 1% are left unacknowledged so retries happen. Returns entries read."""
        rng = self.rng
        key = rng.choice(self.orders)
        reply = self.call("TREAD GROUP", "TREAD", key, "-", 10, "GROUP", GROUP, "RETRY", RETRY_MS, EXPIRE_MS)
        if not reply:
            if rng.random() < 0.01:
                self.call("TPENDING", "TPENDING", key, GROUP)
            return 0
        acks = [item[0] for item in reply if item is not None and rng.random() >= 0.01]
        if acks:
            self.call("TACK", "TACK", key, GROUP, *acks)
        return len(reply)

    # --- readers ----------------------------------------------------------------------

    def read(self) -> None:
        """One read: DGET by subject or sequence, KV gets, MLAST of a bucket, TREAD."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.30:
            self.call("DGET LAST_BY_SUBJ", "DGET", rng.choice(self.orders), "LAST_BY_SUBJ", self._order_subject())
        elif roll < 0.55:
            self.call("DGET SUBJECT", "DGET", self.kv, "SUBJECT", self._kv_subject())
        elif roll < 0.80:
            key = rng.choice(self.orders)
            info = self.call("TREAD", "TREAD", key, "$", 0, "WITHINFO")
            if not info:
                return
            first, last = _bounds(info)
            if last >= first:
                self.call("DGET SEQ", "DGET", key, "SEQ", rng.randint(first, last))
        elif roll < 0.90:
            self.call("MLAST", "MLAST", self.kv, "BATCH", 20, "SUBJECTS", f"kv.{rng.randrange(KV_BUCKETS)}.>")
        else:
            self.call("TREAD", "TREAD", rng.choice(self.orders), "-", 10)

    # --- batch publishers -------------------------------------------------------------

    def publish_batch(self, size: int | None = None) -> None:
        """An atomic batch of 2-6 KV updates (BATCH ... COMMIT), or one plain TWRITE (20%)."""
        rng = self.rng
        if rng.random() < 0.2:
            self.call("TWRITE", "TWRITE", self.kv, self._kv_subject(), self._kv_data.pick())
            return
        size = size or rng.randint(2, 6)
        batch_id = f"{self._tag}-{next(self._batch_ids)}"
        for seq in range(1, size):
            self.call("BATCH", "BATCH", self.kv, batch_id, seq, self._kv_subject(), self._kv_data.pick())
        self.call("BATCH COMMIT", "BATCH", self.kv, batch_id, size, self._kv_subject(),
                  self._kv_data.pick(), "COMMIT")

    # --- a tail follower (blocking reads) -----------------------------------------

    def follow(self, block_ms: int = 1000) -> int:
        """Block for new events (TREAD ... BLOCK): the time includes the wait."""
        reply = self.call("TREAD BLOCK", "TREAD", self.events, self._follow_next, 100, "BLOCK", block_ms)
        if not reply:
            return 0
        last = None
        for item in reply:
            if item is not None:
                last = item[0]
        if last is not None:
            self._follow_next = last + 1
        elif isinstance(self._follow_next, int):
            self._follow_next += len(reply)
        return len(reply)


def _bounds(info) -> tuple[int, int]:
    """``[first, last]`` out of a ``TREAD ... 0 WITHINFO`` reply."""
    first, last = info[0]
    return int(first), int(last)
