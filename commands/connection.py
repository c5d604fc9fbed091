"""Handlers of the connection commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT and
the CLIENT subcommands (their syntax and docs are in commands/table/)."""

from __future__ import annotations

from tstream.resp import NO_REPLY, OK, Status, Verbatim

from .args import text, to_int
from .errors import CommandError, NoAuth, SyntaxErr, WrongArity
from .gates import add_layer, remove_layer
from .pubsub import subscribe_mode_changed
from .tools import forget_monitor
from .transactions import end_transaction

SERVER_NAME = "tstream"
VERSION = "0.1.0"


def ping(client, argv):
    """PING [message]

    PONG, or the message. O(1).
    """
    if len(argv) > 2:
        raise WrongArity("ping")
    if client.subscriptions is not None and client.protocol == 2:  # subscribe mode: Redis's pong form
        return [b"pong", argv[1] if len(argv) == 2 else b""]
    return Status("PONG") if len(argv) == 1 else argv[1]


def echo(client, argv):
    """ECHO message

    The message. O(1).
    """
    return argv[1]


def log_in(client, user: bytes | None, password: bytes) -> None:
    """Authenticate as ``user`` (the default user when None), or raise WRONGPASS."""
    name = "default" if user is None else user.decode("utf-8", "replace")
    client.set_user(client.server.acl.authenticate(name, password))


def auth(client, argv):
    """AUTH [username] password

    Authenticates the connection. O(1).
    """
    if len(argv) > 3:
        raise SyntaxErr()
    user = argv[1] if len(argv) == 3 else None
    if user is None and client.server.acl.users["default"].nopass:
        raise CommandError(
            "ERR AUTH <password> called without any password configured for the default user. "
            "Are you sure your configuration is correct?"
        )
    log_in(client, user, argv[-1])
    return OK


def hello(client, argv):
    """HELLO [protover [AUTH username password] [SETNAME clientname]]

    Switches the protocol (2 or 3), optionally authenticates and names the client,
    and replies a map describing the server. O(1).
    """
    protocol = client.protocol
    if len(argv) > 1:
        try:
            protocol = to_int(argv[1])
        except CommandError:
            raise CommandError("ERR Protocol version is not an integer or out of range") from None
        if protocol not in (2, 3):
            raise CommandError("NOPROTO unsupported protocol version")
    i = 2
    credentials = None
    name = None
    while i < len(argv):
        word = argv[i].lower()
        if word == b"auth" and i + 2 < len(argv):
            credentials = (argv[i + 1], argv[i + 2])
            i += 3
        elif word == b"setname" and i + 1 < len(argv):
            name = validate_client_name(argv[i + 1])
            i += 2
        else:
            raise CommandError(f"ERR Syntax error in HELLO option '{text(argv[i])}'")
    if credentials is not None:
        log_in(client, *credentials)
    elif client.user is None:
        raise NoAuth("NOAUTH HELLO must be called with the client already authenticated, "
                     "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
                     "authenticate the client and select the RESP protocol version at the same time")
    if name is not None:
        client.name = name
    if protocol != client.protocol:
        client.protocol = protocol
        if client.subscriptions is not None:  # RESP2 subscribe mode starts or ends (as Redis's)
            subscribe_mode_changed(client)
    return {
        "server": SERVER_NAME,
        "version": VERSION,
        "proto": protocol,
        "id": client.id,
        "mode": "standalone",
        "role": "replica" if client.server.replication.is_replica else "master",
        "modules": [],
    }


def select(client, argv):
    """SELECT index

    Only database 0 exists. O(1).
    """
    if to_int(argv[1]) != 0:
        raise CommandError("ERR DB index is out of range")
    return OK


def reset(client, argv):
    """RESET

    Resets the connection as Redis 7.0 does: leaves MULTI (and unwatches),
    unsubscribes from everything, stops monitoring, CLIENT REPLY ON, RESP2, no
    name, logged in as the default user again (not authenticated when it has a
    password). Replies RESET. O(subscriptions + watched keys)."""
    server = client.server
    end_transaction(client)
    if client.subscriptions is not None:
        server.pubsub.forget(client)
        subscribe_mode_changed(client)
    forget_monitor(server, client)
    if client.reply_mode != REPLY_SKIPPING:  # (a RESET that CLIENT REPLY SKIP skips is not answered)
        client.reply_mode = REPLY_ON
        remove_layer(client, "reply")
    client.protocol = 2
    client.name = b""
    initial = server.acl.initial_user()
    if client.user is not initial:
        client.set_user(initial)
    return Status("RESET")


def quit_(client, argv):
    """QUIT

    Replies OK and closes the connection once the reply is written. O(1).
    """
    client.close_after_reply()
    return OK


def validate_client_name(name: bytes) -> bytes:
    if any(c < 0x21 or c > 0x7E for c in name):
        raise CommandError("ERR Client names cannot contain spaces, newlines or special characters.")
    return name


# --- CLIENT subcommands (the dispatcher picks them from the command table) ---------


def client_id(client, argv):
    """CLIENT ID"""
    return client.id


def client_getname(client, argv):
    """CLIENT GETNAME"""
    return client.name or None


def client_setname(client, argv):
    """CLIENT SETNAME connection-name"""
    client.name = validate_client_name(argv[2])
    return OK


def client_setinfo(client, argv):
    """CLIENT SETINFO LIB-NAME|LIB-VER value"""
    attr = argv[2].lower()
    if attr not in (b"lib-name", b"lib-ver"):
        raise CommandError(f"ERR Unrecognized option '{text(argv[2])}'")
    value = validate_client_name(argv[3]) if argv[3] else b""
    setattr(client, "lib_name" if attr == b"lib-name" else "lib_ver", value)
    return OK


def client_info(client, argv):
    """CLIENT INFO"""
    if not client.in_exec:  # (in EXEC, Redis shows cmd=exec)
        client.last_argv = argv  # what is running now, as Redis shows it
    return Verbatim(client.describe() + "\n")


def client_list(client, argv):
    """CLIENT LIST [TYPE normal|master|replica|pubsub] | CLIENT LIST ID client-id [client-id ...]"""
    n = len(argv)
    if not client.in_exec:  # (in EXEC, Redis shows cmd=exec)
        client.last_argv = argv  # what is running now, as Redis shows it
    clients = list(client.server.clients.values())
    if n > 2:
        if argv[2].lower() == b"id" and n > 3:
            try:
                wanted = {to_int(a) for a in argv[3:]}
            except CommandError:
                raise CommandError("ERR Invalid client ID") from None
            clients = [c for c in clients if c.id in wanted]
        elif argv[2].lower() == b"type" and n == 4:
            kind = _CLIENT_TYPES.get(argv[3].lower())
            if kind is None:
                raise CommandError(f"ERR Unknown client type '{text(argv[3])}'")
            clients = [c for c in clients if _client_type(c) == kind]
        else:
            raise SyntaxErr()
    return Verbatim("".join(c.describe() + "\n" for c in clients))


def client_kill(client, argv):
    """CLIENT KILL ip:port | CLIENT KILL [ID client-id] [TYPE type] [USER username] [ADDR ip:port] ..."""
    return _client_kill(client, argv)


def client_no_evict(client, argv):
    """CLIENT NO-EVICT ON|OFF

    OK: tstream never evicts clients to make room (maxmemory refuses writes
    instead), so the flag changes nothing. O(1)."""
    if argv[2].lower() not in (b"on", b"off"):
        raise SyntaxErr()
    return OK


# CLIENT REPLY's modes (ClientConnection.reply_mode): replies sent, none sent, the
# next command's reply not sent, this command's reply not sent.
REPLY_ON, REPLY_OFF, REPLY_SKIP_NEXT, REPLY_SKIPPING = 0, 1, 2, 3
MUTED = (REPLY_OFF, REPLY_SKIPPING)  # the modes in which the command running has its reply dropped


def client_reply(client, argv):
    """CLIENT REPLY ON|OFF|SKIP

    ON: replies again (OK); OFF: no more replies; SKIP: no reply to the next
    command. Neither OFF nor SKIP is answered. O(1)."""
    word = argv[2].lower()
    if word == b"on":
        client.reply_mode = REPLY_ON
        remove_layer(client, "reply")
        return OK
    if word not in (b"off", b"skip"):
        raise SyntaxErr()
    client.reply_mode = REPLY_OFF if word == b"off" else REPLY_SKIP_NEXT
    add_layer(client, "reply", _reply_mode_check)
    return NO_REPLY


def _reply_mode_check(client, name: bytes) -> None:
    """While CLIENT REPLY is OFF or SKIP (commands/gates.py): the layer sends the
    client's commands through the dispatcher's rare path, where ``reply_wanted``
    drops their replies; the command after a SKIP is the one skipped."""
    if client.reply_mode == REPLY_SKIP_NEXT and name != b"client|reply":
        client.reply_mode = REPLY_SKIPPING


# Commands whose replies are pub/sub frames: Redis 7.0 sends them even under
# CLIENT REPLY OFF|SKIP, as it sends the messages.
PUSHING = frozenset({b"subscribe", b"unsubscribe", b"psubscribe", b"punsubscribe"})


def reply_wanted(client, out, name: bytes = b""):
    """The reply to send after a command under CLIENT REPLY OFF/SKIP (None: none)."""
    if client.reply_mode == REPLY_SKIPPING:  # the one reply SKIP dropped: replies resume
        if out is None and client.blocked is not None:
            return None  # a command that blocked: its reply, once served, is the one dropped (unblock)
        client.reply_mode = REPLY_ON
        remove_layer(client, "reply")
        return out if name in PUSHING else None
    return None if client.reply_mode == REPLY_OFF and name not in PUSHING else out


def _client_type(client) -> bytes:
    """CLIENT KILL TYPE's class of a client: replica (a replica's PSYNC connection),
    pubsub while subscribed, else normal.  (A replica's link to its primary is no
    client connection: TYPE master matches nothing.)"""
    if client.replica is not None:
        return b"replica"
    return b"pubsub" if client.subscriptions is not None else b"normal"


def _client_kill(client, argv):  # noqa: C901 (one branch per filter, as Redis's)
    """Redis 7.0's CLIENT KILL: the same filters (a later one of a kind replaces an
    earlier one), the same error texts, and the calling client killed after its reply."""
    server = client.server
    if len(argv) == 3:  # old form: CLIENT KILL addr:port
        address = text(argv[2])
        for other in list(server.clients.values()):
            if other.addr == address:
                _kill(client, other)
                return OK
        raise CommandError("ERR No such client")
    wanted: dict[str, object] = {}
    skipme = True
    i = 2
    while i < len(argv):
        if i + 1 >= len(argv):
            raise SyntaxErr()
        word, value = argv[i].lower(), argv[i + 1]
        if word == b"id":
            try:
                wanted["id"] = to_int(value)
            except CommandError:
                wanted["id"] = 0
            if wanted["id"] < 1:
                raise CommandError("ERR client-id should be greater than 0")
        elif word == b"type":
            kind = value.lower()
            if kind not in _CLIENT_TYPES:
                raise CommandError(f"ERR Unknown client type '{value.decode(errors='replace')}'")
            wanted["type"] = _CLIENT_TYPES[kind]
        elif word == b"addr":
            wanted["addr"] = text(value)
        elif word == b"laddr":
            wanted["laddr"] = text(value)
        elif word == b"user":
            name = value.decode(errors="replace")
            if name not in server.acl.users:
                raise CommandError(f"ERR No such user '{name}'")
            wanted["user"] = name
        elif word == b"skipme":
            answer = value.lower()
            if answer not in (b"yes", b"no"):
                raise SyntaxErr()
            skipme = answer == b"yes"
        else:
            raise SyntaxErr()
        i += 2
    killed = 0
    for other in list(server.clients.values()):
        if (("id" in wanted and other.id != wanted["id"]) or ("addr" in wanted and other.addr != wanted["addr"])
                or ("laddr" in wanted and other.laddr != wanted["laddr"])
                or ("type" in wanted and _client_type(other) != wanted["type"])
                or ("user" in wanted and (other.user.name if other.user else "default") != wanted["user"])):
            continue
        if skipme and other is client:
            continue
        _kill(client, other)
        killed += 1
    return killed


# CLIENT KILL TYPE's names (replica and slave are one class).
_CLIENT_TYPES = {b"normal": b"normal", b"pubsub": b"pubsub", b"master": b"master", b"replica": b"replica",
                 b"slave": b"replica"}


def _kill(client, other) -> None:
    """Close ``other``; the calling client itself is closed after its reply (as in Redis)."""
    if other is client:
        client.close_after_reply()
    else:
        other.kill()
