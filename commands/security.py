"""Handlers of the ACL subcommands: WHOAMI, LIST, USERS, SETUSER, DELUSER, CAT.

The dispatcher picks the handler from the command table (``acl|whoami``, ...)
after checking its arity; the syntax and docs are in commands/table/server.py.
"""

from __future__ import annotations

from tstream.resp import OK

from .args import text
from .errors import CommandError, SubcommandSyntax
from .flags import CATEGORIES


def acl_whoami(client, argv):
    """ACL WHOAMI"""
    return client.user.name if client.user is not None else "default"


def acl_list(client, argv):
    """ACL LIST"""
    return [user.describe() for user in client.server.acl.users.values()]


def acl_users(client, argv):
    """ACL USERS"""
    return list(client.server.acl.users)


def acl_setuser(client, argv):
    """ACL SETUSER username [rule ...]"""
    try:
        client.server.acl.setuser(text(argv[2]), [text(a) for a in argv[3:]])
    except ValueError as exc:
        raise CommandError(f"ERR {exc}") from None
    return OK


def acl_deluser(client, argv):
    """ACL DELUSER username [username ...]"""
    names = [text(a) for a in argv[2:]]
    if "default" in names:
        raise CommandError("ERR The 'default' user cannot be removed")
    control = client.server.acl
    removed = 0
    for name in names:
        if control.users.pop(name, None) is not None:
            removed += 1
            for other in list(client.server.clients.values()):
                if other.user is not None and other.user.name == name:
                    other.kill()
    return removed


def acl_cat(client, argv):
    """ACL CAT [category]: the categories, or every command and subcommand in one."""
    if len(argv) == 2:
        return list(CATEGORIES)
    if len(argv) > 3:
        raise SubcommandSyntax(argv)
    category = text(argv[2]).lower()
    if category not in CATEGORIES:
        raise CommandError(f"ERR Unknown category '{text(argv[2])}'")
    return [entry.name for entry in client.server.command_table.every_command() if category in entry.categories]
