"""Per-command statistics: what ``INFO commandstats`` shows.

The dispatcher times every command with ``perf_counter_ns`` (two calls and a
few increments per command) and counts its calls, failures (the handler
raised) and rejections (arity, authentication, ACL), in one ``CommandStats``
per command and per server (``dispatch.build_dispatch``).
"""

from __future__ import annotations


class CommandStats:
    """Redis's ``cmdstat_<name>:calls=...,usec=...,rejected_calls=...,failed_calls=...``."""

    __slots__ = ("calls", "nanos", "failed", "rejected")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.nanos = 0
        self.failed = 0
        self.rejected = 0

    def used(self) -> bool:
        return bool(self.calls or self.failed or self.rejected)
