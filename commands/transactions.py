"""Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH, as in Redis 7.

A connection in MULTI keeps its commands instead of running them (the
dispatcher queues them and replies ``+QUEUED``, commands.dispatch); EXEC runs
the queue with nothing interleaved, because the event loop runs nothing else
while a handler runs.  What a transaction can end with::

    MULTI ... EXEC   every queued command ran: one reply each (an error among them
                     is one element, the others still ran)
    EXECABORT        a command was refused while queuing (unknown, wrong arity, ACL,
                     MISCONF): nothing ran
    null             a WATCHed key changed between WATCH and EXEC: nothing ran

WATCH: ``server.watched`` maps each watched key to the connections watching
it; the one write path (commands.writes) marks those connections ``dirty_cas``
when it commits a change of the key (any write, DEL, FLUSHALL of an existing
key, eviction by max_age, group moves and acks).  With nothing watched the
write path pays one truth test of an empty dict.

On disk a transaction is all or nothing: while EXEC runs, the write path
collects the effect records of its commands (``Writes.begin_transaction``)
and logs them as ONE compound ``TXN`` record (persistence.effects), a single
checksummed frame: a crash leaves either the whole frame or a torn tail that
loading cuts off.

Inside EXEC a read that would block (TREAD ... BLOCK) answers at once, as if
its timeout had passed, and a group read is served on the spot instead of at
the end of the turn.
"""

from __future__ import annotations

from tstream.resp import NULL_ARRAY, OK

from .errors import CommandError

# Run at once even in MULTI (Redis's processCommand exceptions).
NOT_QUEUED = frozenset({b"exec", b"discard", b"multi", b"watch", b"quit", b"reset"})
# Refused in MULTI, which it then dooms (Redis's no-multi flag: SYNC, PSYNC).
NO_MULTI = frozenset({b"psync"})

EXECABORT = "EXECABORT Transaction discarded because of previous errors."
EXEC_REFUSED = "EXECABORT Transaction discarded because of: "  # + why EXEC itself was refused


def multi(client, argv):
    """MULTI

    Starts a transaction: the next commands are queued until EXEC. O(1).
    """
    if client.multi is not None:
        raise CommandError("ERR MULTI calls can not be nested")
    client.multi = []
    client.multi_failed = False
    return OK


def discard(client, argv):
    """DISCARD

    Drops the queued commands and every WATCH. O(queued commands + watched keys).
    """
    if client.multi is None:
        raise CommandError("ERR DISCARD without MULTI")
    end_transaction(client)
    return OK


def watch(client, argv):
    """WATCH key [key ...]

    EXEC will do nothing if one of the keys changes before it. O(keys).
    """
    if client.multi is not None:
        raise CommandError("ERR WATCH inside MULTI is not allowed")
    watched = client.server.watched
    mine = client.watching
    if mine is None:
        mine = client.watching = set()
    for key in argv[1:]:
        if key not in mine:
            mine.add(key)
            watched.setdefault(key, set()).add(client)
    return OK


def unwatch(client, argv):
    """UNWATCH

    Forgets every WATCHed key of the connection. O(watched keys).
    """
    unwatch_all(client)
    return OK


def exec_(client, argv):
    """EXEC

    Runs the queued commands, nothing else in between; replies their replies.
    O(queued commands).
    """
    queued = client.multi
    if queued is None:
        raise CommandError("ERR EXEC without MULTI")
    failed, dirty = client.multi_failed, client.dirty_cas
    end_transaction(client)
    client.last_argv = argv  # what runs now: CLIENT LIST shows cmd=exec during the EXEC, as Redis
    if failed:
        raise CommandError(EXECABORT)
    if dirty:
        return NULL_ARRAY
    return Queued(queued)


class Queued(list):
    """EXEC's reply before it runs: the queued commands, which the dispatcher
    runs (``commands.dispatch.run_queued``; it owns executing commands)."""

    __slots__ = ()


def end_transaction(client) -> None:
    """Leave MULTI and drop every WATCH (after EXEC and DISCARD, as Redis)."""
    client.multi = None
    client.multi_failed = False
    unwatch_all(client)


def unwatch_all(client) -> None:
    mine = client.watching
    client.dirty_cas = False
    if not mine:
        return
    client.watching = None
    watched = client.server.watched
    for key in mine:
        clients = watched.get(key)
        if clients is not None:
            clients.discard(client)
            if not clients:
                del watched[key]
