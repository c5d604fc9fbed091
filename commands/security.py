"""Handler of ACL: WHOAMI, LIST, USERS, SETUSER, DELUSER, GETUSER."""

from __future__ import annotations

from tstream.resp import OK

from .args import text
from .errors import CommandError


def acl(client, argv):
    """ACL WHOAMI | ACL LIST | ACL USERS | ACL SETUSER username [rule ...] | ACL DELUSER username [username ...]

    Users, passwords and permissions (see docs/operations.md, "Security"). O(users).
    """
    sub = argv[1].lower()
    control = client.server.acl
    if sub == b"whoami" and len(argv) == 2:
        return client.user.name if client.user is not None else "default"
    if sub == b"list" and len(argv) == 2:
        return [user.describe() for user in control.users.values()]
    if sub == b"users" and len(argv) == 2:
        return list(control.users)
    if sub == b"setuser" and len(argv) >= 3:
        try:
            control.setuser(text(argv[2]), [text(a) for a in argv[3:]])
        except ValueError as exc:
            raise CommandError(f"ERR {exc}") from None
        return OK
    if sub == b"deluser" and len(argv) >= 3:
        names = [text(a) for a in argv[2:]]
        if "default" in names:
            raise CommandError("ERR The 'default' user cannot be removed")
        removed = 0
        for name in names:
            if control.users.pop(name, None) is not None:
                removed += 1
                for other in list(client.server.clients.values()):
                    if other.user is not None and other.user.name == name:
                        other.kill()
        return removed
    if sub == b"help" and len(argv) == 2:
        return ["ACL WHOAMI", "ACL LIST", "ACL USERS", "ACL SETUSER <username> [<rule> ...]",
                "ACL DELUSER <username> [<username> ...]"]
    raise CommandError(
        f"ERR unknown subcommand or wrong number of arguments for '{text(argv[1])}'. Try ACL HELP."
    )
