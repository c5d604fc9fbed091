"""Keep the cyclic garbage collector's full passes short on a big keyspace.

A key costs about ten objects the collector tracks (stream, config, node, lists,
dicts): a million keys are ten million objects, and one full (generation 2)
pass over them holds the event loop for seconds.  Those objects live until
their key is deleted, and deleting a key leaves no reference cycle behind (the
engine's objects form none: tests/test_scale.py checks it), so the collector
has nothing to find among them.  ``gc.freeze()`` moves every tracked object to
the permanent generation, which no pass walks; it costs O(1).

The process (server/main.py) freezes once the data is loaded; then, while it
serves, this policy freezes again

- when the keyspace grew by :data:`FREEZE_EVERY_KEYS` keys since the last
  freeze (a bulk load: what it created is the new long-lived data), and
- after a full pass that took longer than :data:`SLOW_FULL_PASS_NS` (whatever
  made the old generation that big survived it: long-lived too), and
- on a keyspace of :data:`FREEZE_EVERY_KEYS` keys or more, when objects
  reached the old generation (a generation-1 pass ran) since the last freeze:
  under writes spread over many keys those are the keys' new node tables
  (``array`` objects are tracked; three per node), which live as long as the
  node.  Frozen at the next housekeeping pass, they never pile up for a full
  pass to walk (1M writes over 1M keys left 1.3M arrays: a 100 ms full pass;
  frozen every 100 ms, a full pass walks a few ms at most).  A smaller
  keyspace cannot hold enough of them to make a full pass slow,

checked at each housekeeping pass (``Server._cron``).  The price: a reference
cycle among frozen objects that later becomes garbage is never collected;
request-sized garbage (lists of arguments) has no cycles, and asyncio breaks a
closed connection's transport/protocol cycle itself.

Only the process installs it: an application embedding tstream owns its gc.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger("tstream.server")

FREEZE_EVERY_KEYS = 10_000
SLOW_FULL_PASS_NS = 5_000_000


class CollectorPolicy:
    def __init__(self) -> None:
        self.freezes = 0
        self.slow_full_passes = 0
        self.last_full_pass_ns = 0
        self._keys_at_freeze = 0
        self._pass_started = 0
        self._freeze_due = False
        self._promoted = False  # a generation-1 pass ran since the last freeze

    def install(self, keys: int) -> None:
        """Freeze what exists now (the loaded data) and watch full passes."""
        gc.freeze()
        self._keys_at_freeze = keys
        gc.callbacks.append(self._on_collection)

    def uninstall(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict) -> None:
        generation = info["generation"]
        if generation == 1:
            self._promoted = True  # its survivors went to the old generation
            return
        if generation != 2:
            return
        if phase == "start":
            self._pass_started = time.perf_counter_ns()
        elif self._pass_started:
            self.last_full_pass_ns = time.perf_counter_ns() - self._pass_started
            if self.last_full_pass_ns > SLOW_FULL_PASS_NS:
                self.slow_full_passes += 1
                self._freeze_due = True  # not here: the collector is still running

    def cron(self, keys: int) -> None:
        """Freeze if the keyspace grew enough, the last full pass was slow or
        objects reached the old generation. O(1)."""
        if self._freeze_due:
            log.info("a full garbage collection pass took %.1f ms: freezing the objects it kept",
                     self.last_full_pass_ns / 1e6)
        promoted = self._promoted and keys >= FREEZE_EVERY_KEYS
        if self._freeze_due or promoted or keys - self._keys_at_freeze >= FREEZE_EVERY_KEYS:
            gc.freeze()
            self.freezes += 1
            self._freeze_due = False
            self._promoted = False
            self._keys_at_freeze = keys
        elif keys < self._keys_at_freeze:
            self._keys_at_freeze = keys  # keys deleted: growth counts from here
