"""Group ``connection``, ACL category @connection: PING, ECHO, HELLO, AUTH, SELECT,
QUIT and the CLIENT subcommands (commands/connection.py)."""

from __future__ import annotations

from .. import connection as conn
from ..flags import ADMIN, FAST, LOADING, NOAUTH, NOSCRIPT, STALE
from .entry import command
from .help import help_command

GROUP = "connection"
CLIENT_SUB = NOSCRIPT | LOADING | STALE  # Redis's flags of the CLIENT subcommands

COMMANDS = [
    command(
        "ping", conn.ping, arity=-1, flags=FAST | STALE, acl="@connection", group=GROUP,
        syntax="PING [message]",
        summary="PONG, or the message.",
        complexity="O(1).",
    ),
    command(
        "echo", conn.echo, arity=2, flags=FAST | LOADING | STALE, acl="@connection", group=GROUP,
        syntax="ECHO message",
        summary="Replies the message.",
        complexity="O(1).",
    ),
    command(
        "hello", conn.hello, arity=-1, flags=FAST | NOAUTH | NOSCRIPT | LOADING | STALE, acl="@connection",
        group=GROUP,
        syntax="HELLO [protover [AUTH username password] [SETNAME clientname]]",
        summary="Switches the protocol (2 or 3), optionally authenticates and names the client, "
                "and replies a map describing the server.",
        complexity="O(1).",
    ),
    command(
        "auth", conn.auth, arity=-2, flags=FAST | NOAUTH | NOSCRIPT | LOADING | STALE, acl="@connection",
        group=GROUP,
        syntax="AUTH [username] password",
        summary="Authenticates the connection.",
        complexity="O(1).",
    ),
    command(
        "select", conn.select, arity=2, flags=FAST | LOADING | STALE, acl="@connection", group=GROUP,
        syntax="SELECT index",
        summary="Selects the database: only database 0 exists.",
        complexity="O(1).",
    ),
    command(
        "reset", conn.reset, arity=1, flags=FAST | NOAUTH | NOSCRIPT | LOADING | STALE, acl="@connection",
        group=GROUP,
        syntax="RESET",
        summary="Resets the connection: leaves MULTI, unsubscribes, stops monitoring, CLIENT REPLY ON, RESP2, "
                "no name, the default user again.",
        complexity="O(1).",
    ),
    command(
        "quit", conn.quit_, arity=-1, flags=FAST | NOAUTH | NOSCRIPT | LOADING | STALE, acl="@connection",
        group=GROUP,
        syntax="QUIT",
        summary="Replies OK and closes the connection once the reply is written.",
        complexity="O(1).",
    ),
    command(
        "client", None, arity=-2, group=GROUP,
        syntax="CLIENT subcommand [argument ...]",
        summary="A container for client connection commands.",
        complexity="Depends on subcommand.",
        subcommands=[
            command(
                "client|id", conn.client_id, arity=2, flags=CLIENT_SUB, acl="@connection", group=GROUP,
                syntax="CLIENT ID",
                summary="The connection's id.",
                complexity="O(1).",
            ),
            command(
                "client|getname", conn.client_getname, arity=2, flags=CLIENT_SUB, acl="@connection",
                group=GROUP,
                syntax="CLIENT GETNAME",
                summary="The connection's name, null when it has none.",
                complexity="O(1).",
            ),
            command(
                "client|setname", conn.client_setname, arity=3, flags=CLIENT_SUB, acl="@connection",
                group=GROUP,
                syntax="CLIENT SETNAME connection-name",
                summary="Names the connection (no spaces, newlines or special characters).",
                complexity="O(1).",
            ),
            command(
                "client|setinfo", conn.client_setinfo, arity=4, flags=CLIENT_SUB, acl="@connection",
                group=GROUP,
                syntax="CLIENT SETINFO LIB-NAME|LIB-VER value",
                summary="Sets the client library's name or version, shown by CLIENT LIST.",
                complexity="O(1).",
            ),
            command(
                "client|info", conn.client_info, arity=2, flags=CLIENT_SUB, acl="@connection", group=GROUP,
                syntax="CLIENT INFO",
                summary="Describes this connection, as one line of CLIENT LIST.",
                complexity="O(1).",
            ),
            command(
                "client|list", conn.client_list, arity=-2, flags=ADMIN | CLIENT_SUB, acl="@connection",
                group=GROUP,
                syntax=["CLIENT LIST [TYPE NORMAL|MASTER|REPLICA|PUBSUB]",
                        "CLIENT LIST ID client-id [client-id ...]"],
                summary="One line per connection describing it.",
                complexity="O(clients).",
            ),
            command(
                "client|kill", conn.client_kill, arity=-3, flags=ADMIN | CLIENT_SUB, acl="@connection",
                group=GROUP,
                syntax=["CLIENT KILL ip:port",
                        "CLIENT KILL [ID client-id] [TYPE NORMAL|MASTER|REPLICA|PUBSUB] [USER username] "
                        "[ADDR ip:port] [LADDR ip:port] [SKIPME YES|NO]"],
                summary="Closes the connection at ip:port (replies OK), or every connection matching "
                        "all the filters (replies how many).",
                complexity="O(clients).",
            ),
            command(
                "client|reply", conn.client_reply, arity=3, flags=CLIENT_SUB, acl="@connection", group=GROUP,
                syntax="CLIENT REPLY ON|OFF|SKIP",
                summary="Turns the replies to this connection's commands off, on, or off for the next one.",
                complexity="O(1).",
            ),
            command(
                "client|no-evict", conn.client_no_evict, arity=3, flags=ADMIN | CLIENT_SUB, acl="@connection",
                group=GROUP,
                syntax="CLIENT NO-EVICT ON|OFF",
                summary="Accepted for Redis's tools: tstream never evicts clients to free memory.",
                complexity="O(1).",
            ),
            help_command("client", GROUP, acl="@connection"),
        ],
    ),
]
