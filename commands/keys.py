"""Handlers of the keyspace commands: DEL, EXISTS, TYPE, KEYS, SCAN, DBSIZE, FLUSHALL."""

from __future__ import annotations

from tstream.resp import OK, Status

from .args import to_int, to_positive
from .errors import CommandError, SyntaxErr


def del_(client, argv):
    """DEL key [key ...]

    Removes the streams, with their groups. Replies how many existed. O(keys).
    """
    server = client.server
    removed = 0
    for key in argv[1:]:
        if server.keyspace.delete(key):
            server.writes.deleted(key)
            removed += 1
    return removed


def exists(client, argv):
    """EXISTS key [key ...]

    Replies how many of the keys exist (a key named twice counts twice). O(keys).
    """
    keyspace = client.server.keyspace
    return sum(1 for key in argv[1:] if keyspace.get(key) is not None)


def type_(client, argv):
    """TYPE key

    Replies tstream for a stream (config stream-type-name: or stream), none for
    a missing key. O(1).
    """
    if client.server.keyspace.get(argv[1]) is None:
        return Status("none")
    return Status(client.server.config.values["stream-type-name"])


def keys(client, argv):
    """KEYS pattern

    Every key matching the glob-style pattern. O(keys).
    """
    return visible_keys(client, client.server.keyspace.keys(argv[1]))


def visible_keys(client, keys: list) -> list:
    """The keys an ACL user may see (all of them for an unrestricted user)."""
    user = client.user
    if user is None or user.all_keys:
        return keys
    return [key for key in keys if user.may_access(key)]


def scan(client, argv):
    """SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]

    Incremental iteration: every key present for the whole scan is returned at least
    once; cursor 0 starts and ends it. O(count) per call.
    """
    try:
        cursor = to_int(argv[1])
    except CommandError:
        raise CommandError("ERR invalid cursor") from None
    if cursor < 0:
        raise CommandError("ERR invalid cursor")
    pattern = None
    count = 10
    only_streams = True
    i = 2
    while i < len(argv):
        word = argv[i].lower()
        if i + 1 >= len(argv):
            raise SyntaxErr()
        if word == b"match":
            pattern = argv[i + 1]
        elif word == b"count":
            count = to_positive(argv[i + 1], "COUNT")
        elif word == b"type":
            only_streams = argv[i + 1].lower() == client.server.config.values["stream-type-name"].encode()
        else:
            raise SyntaxErr()
        i += 2
    if not only_streams:
        return [b"0", []]
    next_cursor, found = client.server.keyspace.scan(cursor, count, pattern)
    return [b"%d" % next_cursor, visible_keys(client, found)]


def dbsize(client, argv):
    """DBSIZE

    The number of keys. O(1).
    """
    return len(client.server.keyspace)


def flushall(client, argv):
    """FLUSHALL [ASYNC|SYNC]

    Removes every key. O(keys).
    """
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() not in (b"async", b"sync")):
        raise SyntaxErr()
    server = client.server
    count = len(server.keyspace)
    existed = [key for key in server.watched if key in server.streams] if server.watched else ()
    server.keyspace.flush()
    server.fast.clear()  # the fast batches went with their streams
    server.writes.flushed(count, existed)
    return OK
