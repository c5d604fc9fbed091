"""The ``<container> HELP`` subcommand every container command has: its reply is
drawn from the container's table entry, so it lists exactly the subcommands the
dispatcher runs."""

from __future__ import annotations

from tstream.resp import Status

from .. import docs
from ..flags import LOADING, STALE
from .entry import command


def help_command(container: str, group: str, acl: str = "", lines: tuple[str, ...] = ()):
    """``lines``: Redis's own help text, where tstream copies a Redis command
    (replied as it is), else the text is drawn from the table."""
    if lines:
        fixed = [Status(line) for line in lines]

        def handler(client, argv):
            return fixed
    else:
        def handler(client, argv):
            return docs.help_lines(client.server.command_table.COMMANDS[container.encode()])

    return command(
        f"{container}|help", handler, arity=2, flags=LOADING | STALE, acl=acl, group=group,
        syntax=f"{container.upper()} HELP",
        summary="Show helpful text about the different subcommands.",
        complexity="O(1).",
    )
