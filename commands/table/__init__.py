"""The command table: the one description of every command, modelled on Redis's
``src/commands/*.json``.

Each command, and each subcommand of a container command (``config|get``,
``client|setname``, ``acl|whoami``, ... as in Redis), is one ``Command`` entry
written out literally in the module of its group (``stream``, ``generic``,
``connection``, ``server``).  Everything else reads the entry; nothing guesses:

- the dispatcher (commands.dispatch): handler, arity, the pipelined ``run``
  handler, and for a container the subcommand to run (looked up once, centrally,
  as ``name|sub``: handlers never parse their own subcommand word);
- the ACL gate (server.acl): flags (no_auth), categories, key positions;
- COMMAND COUNT/LIST/INFO/DOCS/GETKEYS, ``<CONTAINER> HELP`` and ACL CAT
  (commands.docs, commands.admin, commands.security).

Fields: ``arity`` follows Redis (N: exactly N words with the command name, -N:
at least N; a subcommand's words count its container's).  ``keys`` is (first,
last, step) of the key arguments.  ``syntax`` lists every form of the command,
as in the docs (``UPPER`` tokens, lower-case arguments, ``[...]`` optional,
``a|b`` one of, ``...`` repeats); COMMAND DOCS describes all of them and HELP
shows all of them.  ``acl`` holds the explicit ACL categories; those implied by
the flags are added here, once (commands.flags).  ``run``, when set, executes a
pipelined run of the command's simplest form (on one key or several) in one call.
"""

from __future__ import annotations

from typing import Iterator

from . import connection, generic, pubsub, server, stream, transaction, xstream
from .entry import ALL_KEYS, NO_KEYS, ONE_KEY, Command, command

__all__ = ["COMMANDS", "Command", "command", "every_command", "find", "ONE_KEY", "ALL_KEYS", "NO_KEYS"]


def _build() -> dict[bytes, Command]:
    table: dict[bytes, Command] = {}
    for module in (stream, xstream, generic, connection, server, transaction, pubsub):
        for entry in module.COMMANDS:
            if entry.name in table:
                raise ValueError(f"command {entry.name!r} is in the table twice")
            table[entry.name] = entry
    return table


COMMANDS: dict[bytes, Command] = _build()
"""Top-level commands by lower-case name (subcommands hang off their container)."""


def every_command() -> Iterator[Command]:
    """Every entry: each command, then its subcommands."""
    for entry in COMMANDS.values():
        yield entry
        yield from entry.subcommands


def find(name: bytes) -> Command | None:
    """The entry called ``name`` (any case): ``twrite`` or ``config|get``."""
    top, bar, sub = name.lower().partition(b"|")
    entry = COMMANDS.get(top)
    if entry is None or not bar:
        return entry
    return entry.by_name.get(sub)
