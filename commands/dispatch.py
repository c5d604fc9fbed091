"""Run one command: look it up, check its arity and auth, call its handler.

This is the one boundary where CommandError (and any bug) becomes a RESP error
reply, so a bad command never breaks the connection or the server.
"""

from __future__ import annotations

import logging
from time import perf_counter_ns

from resp import encode, encode_error
from server.observability import CommandStats

from .errors import CommandError, UnknownCommand, WrongArity
from .flags import FAST
from .streams import NO_REPLY
from .table import COMMANDS

log = logging.getLogger("tstream.commands")

# The table in the shape the hot path wants: name -> (canonical name, handler, fewest
# words, most words, is fast, the Command), under the lower- and the upper-case
# spelling (clients send one or the other; other spellings go through .lower()).
# Derived once from COMMANDS, never edited by hand.
_DISPATCH = {}
for _name, _cmd in COMMANDS.items():
    _entry = (_name, _cmd.handler, abs(_cmd.arity), _cmd.arity if _cmd.arity > 0 else 1 << 62,
              bool(_cmd.flags & FAST), _cmd)
    _DISPATCH[_name] = _DISPATCH[_name.upper()] = _entry


def execute(client, argv: list) -> bytes | None:
    """The encoded reply to ``argv`` for ``client``; None when nothing is to be sent."""
    server = client.server
    entry = _DISPATCH.get(argv[0]) or _DISPATCH.get(argv[0].lower())
    if entry is None:
        server.stats.errors += 1
        return encode_error(UnknownCommand(argv[0], argv[1:]).message)
    name, handler, fewest, most, fast, command = entry
    stats = server.command_stats.get(name)
    if stats is None:
        stats = server.command_stats[name] = CommandStats()
    if not fewest <= len(argv) <= most:
        stats.rejected += 1
        server.stats.errors += 1
        return encode_error(WrongArity(name.decode("utf-8", "replace")).message)
    if client.gate is not None:  # not authenticated yet, or an ACL user with limits
        try:
            client.gate(client, name, argv, command)
        except CommandError as exc:
            stats.rejected += 1
            server.stats.errors += 1
            return encode_error(exc.message)
    started = perf_counter_ns()
    try:
        reply = handler(client, argv)
        if reply.__class__ is int:  # the common TWRITE/TACK reply, without a trip through encode()
            out = b":%d\r\n" % reply
        elif reply is NO_REPLY:
            out = None
        else:
            out = encode(reply, client.protocol)
    except CommandError as exc:
        stats.failed += 1
        server.stats.errors += 1
        out = encode_error(exc.message)
    except Exception:
        log.exception("command %r failed", argv[:3])
        stats.failed += 1
        server.stats.errors += 1
        out = encode_error("ERR internal error while running the command (see the server log)")
    elapsed = perf_counter_ns() - started
    stats.calls += 1
    stats.nanos += elapsed
    if elapsed >= server.slow_threshold_ns:
        server.observe_slow(argv, elapsed, client, fast)
    return out
