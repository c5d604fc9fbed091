"""The command table: every command the server knows, in one literal.

name -> Command(handler, arity, flags, keys, run)

arity follows Redis: N means exactly N words including the command name, -N at
least N.  It is checked once, centrally, by the dispatcher.  keys is
(first, last, step) of the key arguments, for COMMAND INFO/GETKEYS.  run, when
set, executes a pipelined run of the command's simplest form on one key in one
call (see commands.dispatch).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from . import admin, connection, jetstream, keys, saving, security, streams
from .flags import ADMIN, BLOCKING, CONNECTION, DENYOOM, FAST, LOADING, NOAUTH, NOSCRIPT, READONLY, STALE, WRITE


class Command(NamedTuple):
    handler: Callable
    arity: int
    flags: int
    keys: tuple[int, int, int] = (0, 0, 0)
    run: Callable | None = None


ONE_KEY = (1, 1, 1)
ALL_KEYS = (1, -1, 1)

COMMANDS: dict[bytes, Command] = {
    # RCP 11 streams
    b"twrite": Command(streams.twrite, -4, WRITE | DENYOOM | FAST, ONE_KEY, streams.twrite_run),
    b"tread": Command(streams.tread, -4, READONLY | BLOCKING, ONE_KEY),
    b"tevict": Command(streams.tevict, 3, WRITE, ONE_KEY),
    b"tack": Command(streams.tack, -4, WRITE | FAST, ONE_KEY),
    b"tpending": Command(streams.tpending, 3, READONLY, ONE_KEY),
    b"tinfo": Command(streams.tinfo, -2, READONLY, ONE_KEY),
    b"tconfig": Command(streams.tconfig, -3, WRITE, ONE_KEY),
    # JetStream (ADR-31 direct get, ADR-50 atomic batch), commands/jetstream.py
    b"dget": Command(jetstream.dget, -3, READONLY, ONE_KEY),
    b"mlast": Command(jetstream.mlast, -3, READONLY, ONE_KEY),
    b"batch": Command(jetstream.batch, -5, WRITE | DENYOOM | FAST, ONE_KEY),
    # keyspace
    b"del": Command(keys.del_, -2, WRITE, ALL_KEYS),
    b"exists": Command(keys.exists, -2, READONLY | FAST, ALL_KEYS),
    b"type": Command(keys.type_, 2, READONLY | FAST, ONE_KEY),
    b"keys": Command(keys.keys, 2, READONLY),
    b"scan": Command(keys.scan, -2, READONLY),
    b"dbsize": Command(keys.dbsize, 1, READONLY | FAST),
    b"flushall": Command(keys.flushall, -1, WRITE),
    b"flushdb": Command(keys.flushall, -1, WRITE),
    # connection
    b"ping": Command(connection.ping, -1, FAST | CONNECTION | STALE),
    b"echo": Command(connection.echo, 2, FAST | CONNECTION),
    b"hello": Command(connection.hello, -1, FAST | NOAUTH | CONNECTION | LOADING | STALE),
    b"auth": Command(connection.auth, -2, FAST | NOAUTH | CONNECTION | LOADING | STALE),
    b"select": Command(connection.select, 2, FAST | CONNECTION | LOADING | STALE),
    b"client": Command(connection.client_, -2, CONNECTION | LOADING | STALE),
    b"quit": Command(connection.quit_, -1, FAST | NOAUTH | CONNECTION | LOADING | STALE),
    # server
    b"command": Command(admin.command, -1, CONNECTION | LOADING | STALE),
    b"config": Command(admin.config, -2, ADMIN | LOADING | STALE),
    b"info": Command(admin.info_, -1, LOADING | STALE),
    b"slowlog": Command(admin.slowlog, -2, ADMIN | LOADING | STALE),
    b"latency": Command(admin.latency, -2, ADMIN | LOADING | STALE),
    b"acl": Command(security.acl, -2, ADMIN | LOADING | STALE),
    b"time": Command(admin.time_, 1, FAST | LOADING | STALE),
    b"save": Command(saving.save, 1, ADMIN | NOSCRIPT),
    b"bgsave": Command(saving.bgsave, -1, ADMIN | NOSCRIPT),
    b"lastsave": Command(saving.lastsave, 1, FAST | LOADING | STALE),
    b"bgrewriteaof": Command(saving.bgrewriteaof, 1, ADMIN | NOSCRIPT),
    b"shutdown": Command(admin.shutdown, -1, ADMIN | LOADING | STALE),
}
