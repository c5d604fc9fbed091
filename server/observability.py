"""What an operator looks at: the slow log and latency events.

(The per-command statistics of ``INFO commandstats`` are the dispatcher's, in
``commands/stats.py``.)

- ``SlowLog``: commands slower than ``slowlog-log-slower-than`` microseconds, the
  newest ``slowlog-max-len`` kept, shown by ``SLOWLOG GET``;
- ``LatencyMonitor``: Redis's ``LATENCY`` events (``command``, ``fast-command``,
  ``aof-fsync-always``) at or above ``latency-monitor-threshold`` milliseconds:
  the latest and the maximum per event and a history of 160 samples.

Every command is timed with ``perf_counter`` by the dispatcher (two calls and
a few increments per command); one that takes ``slow_threshold`` or more is
reported to ``Server.observe_slow``, which feeds these two.
"""

from __future__ import annotations

import time
from collections import deque


class SlowLog:
    def __init__(self) -> None:
        self.entries: deque = deque(maxlen=128)
        self.next_id = 0

    def resize(self, max_len: int) -> None:
        if max_len != self.entries.maxlen:
            self.entries = deque(self.entries, maxlen=max_len)

    def add(self, argv: list, micros: int, client) -> None:
        # As Redis: at most 32 arguments, each cut to 128 bytes, with a note of what was cut.
        shown = [arg if len(arg) <= 128 else arg[:128] + b"... (%d more bytes)" % (len(arg) - 128)
                 for arg in argv[:32]]
        if len(argv) > 32:
            shown[-1] = b"... (%d more arguments)" % (len(argv) - 31)
        self.entries.appendleft([self.next_id, int(time.time()), micros, shown,
                                 client.addr.encode(), client.name])
        self.next_id += 1

    def reset(self) -> None:
        self.entries.clear()


class LatencyMonitor:
    HISTORY = 160

    def __init__(self) -> None:
        self.events: dict[str, deque] = {}
        self.maxima: dict[str, int] = {}

    def record(self, event: str, millis: int) -> None:
        now = int(time.time())
        history = self.events.setdefault(event, deque(maxlen=self.HISTORY))
        if history and history[-1][0] == now:  # one sample per second: keep the worst
            if millis > history[-1][1]:
                history[-1] = (now, millis)
        else:
            history.append((now, millis))
        self.maxima[event] = max(self.maxima.get(event, 0), millis)

    def latest(self) -> list:
        return [[name.encode(), h[-1][0], h[-1][1], self.maxima[name]] for name, h in self.events.items() if h]

    def history(self, event: str) -> list:
        return [[t, ms] for t, ms in self.events.get(event, ())]

    def reset(self, events: list[str] | None = None) -> int:
        names = list(self.events) if not events else [e for e in events if e in self.events]
        for name in names:
            del self.events[name]
            self.maxima.pop(name, None)
        return len(names)
