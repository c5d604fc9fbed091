"""Replication commands: PSYNC, REPLCONF (a replica's side of the handshake),
REPLICAOF/SLAVEOF, WAIT, ROLE.  The work is done by the server's replication
object (``client.server.replication``, server/replication.py); handlers only
parse and validate."""

from __future__ import annotations

from tstream.resp import NO_REPLY, OK, Raw

from .args import text, to_int
from .errors import CommandError, SyntaxErr

WAIT_ON_REPLICA = ("ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a "
                   "replica is configured to be writable (which is not the default) writes to replicas are just "
                   "local and are not propagated.")


def psync(client, argv):
    """PSYNC replicationid offset"""
    if client.replica is not None:
        return NO_REPLY  # already a replica connection: as Redis, ignored
    offset = to_int(argv[2])
    try:
        data = client.server.replication.psync(client, text(argv[1]), offset)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    return Raw(data) if data else NO_REPLY  # (a full resync answers when its snapshot starts)


def replconf(client, argv):
    """REPLCONF option value [option value ...]"""
    if len(argv) % 2 == 0:
        raise SyntaxErr()
    replication = client.server.replication
    for option, value in zip(argv[1::2], argv[2::2]):
        name = option.lower()
        if name == b"ack":
            replication.acked(client, to_int(value))
            return NO_REPLY  # (never answered)
        if name == b"listening-port":
            client.replica_port = to_int(value)
        elif name == b"tstream":  # a tstream replica says who it is: not itself
            if text(value) == client.server.run_id:
                raise CommandError("ERR a server can't be a replica of itself (same run_id)")
        elif name == b"getack":
            if replication.is_replica:
                replication.send_ack()
            return NO_REPLY
        elif name not in (b"capa", b"ip-address", b"rdb-only", b"rdb-filter-only"):
            raise CommandError(f"ERR Unrecognized REPLCONF option: {text(option)}")
    return OK


def replicaof(client, argv):
    """REPLICAOF host port | REPLICAOF NO ONE"""
    replication = client.server.replication
    if argv[1].lower() == b"no" and argv[2].lower() == b"one":
        replication.promote()
        return OK
    try:
        port = to_int(argv[2])
    except CommandError:
        port = -1
    if not 0 <= port <= 65535:
        raise CommandError("ERR Invalid master port")  # (Redis's words for both)
    host = text(argv[1])
    if replication.master == (host, port):
        return Raw(b"+OK Already connected to specified master\r\n")
    replication.replicate(host, port)
    return OK


def wait(client, argv):
    """WAIT numreplicas timeout"""
    count = to_int(argv[1])
    timeout = to_int(argv[2])
    if timeout < 0:
        raise CommandError("ERR timeout is negative")
    replication = client.server.replication
    if replication.is_replica:
        raise CommandError(WAIT_ON_REPLICA)
    if client.in_exec:  # (no blocking inside EXEC: the count now, as Redis)
        replication.flush()
        return replication.acked_count(replication.offset)
    answer = replication.wait(client, count, timeout)
    return NO_REPLY if answer is None else answer
