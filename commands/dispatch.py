"""Run one command: look it up, check its arity and auth, call its handler.

This is the one boundary where CommandError (and any bug) becomes a RESP error
reply, so a bad command never breaks the connection or the server.
"""

from __future__ import annotations

import logging

from resp import encode, encode_error

from .errors import CommandError, NoAuth, UnknownCommand, WrongArity
from .flags import NOAUTH
from .streams import NO_REPLY
from .table import COMMANDS

log = logging.getLogger("tstream.commands")

# The table in the shape the hot path wants: name -> (handler, fewest words, most
# words, needs auth).  Derived once from COMMANDS, never edited by hand.
_DISPATCH = {
    name: (cmd.handler, abs(cmd.arity), cmd.arity if cmd.arity > 0 else 1 << 62, not cmd.flags & NOAUTH)
    for name, cmd in COMMANDS.items()
}


def execute(client, argv: list) -> bytes | None:
    """The encoded reply to ``argv`` for ``client``; None when nothing is to be sent."""
    try:
        try:
            handler, fewest, most, needs_auth = _DISPATCH[argv[0].lower()]
        except KeyError:
            raise UnknownCommand(argv[0], argv[1:]) from None
        if not fewest <= len(argv) <= most:
            raise WrongArity(argv[0].lower().decode("utf-8", "replace"))
        if needs_auth and not client.authenticated:
            raise NoAuth()
        reply = handler(client, argv)
    except CommandError as exc:
        client.server.stats.errors += 1
        return encode_error(exc.message)
    except Exception:
        log.exception("command %r failed", argv[:3])
        client.server.stats.errors += 1
        return encode_error("ERR internal error while running the command (see the server log)")
    if reply.__class__ is int:  # the common TWRITE/TACK reply, without a trip through encode()
        return b":%d\r\n" % reply
    if reply is NO_REPLY:
        return None
    return encode(reply, client.protocol)
