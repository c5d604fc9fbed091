"""The end of an event-loop turn: what waits for it, and in which order it happens.

Replies are held (``hold``) until the end of the turn when the turn's effects must
reach the append-only file first (every reply, with ``appendonly yes``) and for
pipelined reads (see ClientConnection._run_commands).  The end of the turn then
does what Redis does before it sleeps:

1. serve the clients blocked on keys the turn changed (their replies and
   records join this turn's);
2. write the turn's AOF records, fsynced with ``appendfsync always`` (group
   commit: one write and one fsync per turn, see server.persist);
3. release the held replies, in the order they were held.
"""

from __future__ import annotations

import asyncio


class TurnEnd:
    def __init__(self, server) -> None:
        self.server = server
        self._held: list[tuple[object, bytes, bool]] = []
        self._scheduled = False

    def schedule(self) -> None:
        """Make sure the end of this turn runs (once)."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.run)

    def hold(self, connection, data: bytes, close: bool) -> None:
        """Keep a reply (and whether to close after it) until the end of the turn."""
        self._held.append((connection, data, close))
        if not self._scheduled:
            self.schedule()

    def run(self) -> None:
        """Serve the ready blocked clients, commit the AOF records, release the replies."""
        server = self.server
        server.blocking.serve_ready()
        self._scheduled = False
        server.persistence.commit_turn()
        held, self._held = self._held, []
        for connection, data, close in held:
            connection.write_now(data, close)
