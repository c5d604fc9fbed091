"""Per-command statistics: what ``INFO commandstats`` shows.

The dispatcher times every command with ``perf_counter`` (two calls and a
few increments per command; float seconds, not ``perf_counter_ns``: a time in
nanoseconds is an int of three digits, which Python allocates and adds on its
slow path, about 500 instructions more per command) and counts its calls, failures (the handler
raised) and rejections (arity, authentication, ACL), in one ``CommandStats``
per command and per server (``dispatch.build_dispatch``).
"""

from __future__ import annotations


class CommandStats:
    """Redis's ``cmdstat_<name>:calls=...,usec=...,rejected_calls=...,failed_calls=...``."""

    __slots__ = ("calls", "seconds", "failed", "rejected")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.seconds = 0.0  # the calls' total time
        self.failed = 0
        self.rejected = 0

    def used(self) -> bool:
        return bool(self.calls or self.failed or self.rejected)
