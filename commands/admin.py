"""Handlers of the server commands: CONFIG, INFO, TIME, SHUTDOWN, COMMAND."""

from __future__ import annotations

import fnmatch
import time

from tstream.resp import NO_REPLY, OK, Verbatim

from . import docs, info
from .args import text, to_int
from .errors import CommandError, SyntaxErr


def config(client, argv):
    """CONFIG GET parameter [parameter ...] | CONFIG SET parameter value [parameter value ...] | CONFIG RESETSTAT

    Reads or changes the server configuration. O(options).
    """
    sub = argv[1].lower()
    server = client.server
    if sub == b"get" and len(argv) >= 3:
        found = {}
        for pattern in argv[2:]:
            pattern_text = text(pattern).lower()
            for name in server.config.values:  # every option, in the option table's order
                if fnmatch.fnmatchcase(name, pattern_text):
                    found[name] = server.config.show(name)
        return found
    if sub == b"set" and len(argv) >= 4 and len(argv) % 2 == 0:
        # Check every pair before applying any, so a bad pair changes nothing.
        pending = server.config.copy_for_update()
        try:
            for name, value in zip(argv[2::2], argv[3::2]):
                pending.set(text(name), text(value), at_runtime=True)
        except ValueError as exc:  # server.config.ConfigError
            raise CommandError(f"ERR {exc}") from None
        server.apply_config(pending)
        return OK
    if sub == b"resetstat" and len(argv) == 2:
        server.reset_stats()
        return OK
    raise CommandError(
        f"ERR unknown subcommand or wrong number of arguments for '{text(argv[1])}'. Try CONFIG HELP."
    )


def info_(client, argv):
    """INFO [section [section ...]]

    Server state in Redis's "field:value" text format. O(clients + keys) for some sections.
    """
    return Verbatim(info.render(client.server, [text(a).lower() for a in argv[1:]]))


def time_(client, argv):
    """TIME

    The server's clock as [unix seconds, microseconds]. O(1).
    """
    now = time.time_ns() // 1000
    return [b"%d" % (now // 1_000_000), b"%d" % (now % 1_000_000)]


def shutdown(client, argv):
    """SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]

    Flushes the append-only file, saves a snapshot when save points are set (or
    SAVE is given, never with NOSAVE), closes every client and exits 0.
    """
    save = None
    for arg in argv[1:]:
        word = arg.lower()
        if word == b"save" and save is None:
            save = True
        elif word == b"nosave" and save is None:
            save = False
        elif word in (b"now", b"force"):
            pass
        elif word == b"abort":
            raise CommandError("ERR No shutdown in progress.")
        else:
            raise SyntaxErr()
    client.server.request_shutdown(save)
    client.close_after_reply()
    return NO_REPLY  # the connection closes without a reply, as in Redis


def command(client, argv):
    """COMMAND [COUNT | DOCS [name ...] | INFO [name ...] | LIST | GETKEYS command [arg ...]]

    Describes the command table (redis-cli asks COMMAND DOCS for its hints). O(commands).
    """
    COMMANDS = client.server.command_table  # commands.table.COMMANDS (which imports this module)
    sub = argv[1].lower() if len(argv) > 1 else b""
    if not sub:
        return [docs.command_info(name, cmd) for name, cmd in COMMANDS.items()]
    if sub == b"count" and len(argv) == 2:
        return len(COMMANDS)
    if sub == b"list":
        return [name for name in COMMANDS]
    if sub == b"info":
        names = [a.lower() for a in argv[2:]] or list(COMMANDS)
        return [docs.command_info(n, COMMANDS[n]) if n in COMMANDS else None for n in names]
    if sub == b"docs":
        names = [a.lower() for a in argv[2:]] or list(COMMANDS)
        return {n: docs.command_docs(n, COMMANDS[n]) for n in names if n in COMMANDS}
    if sub == b"getkeys" and len(argv) >= 3:
        cmd = COMMANDS.get(argv[2].lower())
        if cmd is None:
            raise CommandError("ERR Invalid command specified")
        first, last, step = cmd.keys
        args = argv[2:]
        if not first:
            raise CommandError("ERR The command has no key arguments")
        last = len(args) + last if last < 0 else last
        return args[first : last + 1 : step]
    raise CommandError(
        f"ERR unknown subcommand or wrong number of arguments for '{text(argv[1])}'. Try COMMAND HELP."
    )


def slowlog(client, argv):
    """SLOWLOG GET [count] | SLOWLOG LEN | SLOWLOG RESET | SLOWLOG HELP

    Commands slower than slowlog-log-slower-than microseconds, newest first:
    [id, unix time, microseconds, [args], client address, client name]. O(count).
    """
    sub = argv[1].lower()
    log = client.server.slowlog
    if sub == b"get" and len(argv) <= 3:
        count = 10
        if len(argv) == 3:
            count = to_int(argv[2])
            if count < -1:
                raise CommandError("ERR count should be greater than or equal to -1")
        entries = list(log.entries)
        return entries if count == -1 else entries[:count]
    if sub == b"len" and len(argv) == 2:
        return len(log.entries)
    if sub == b"reset" and len(argv) == 2:
        log.reset()
        return OK
    if sub == b"help" and len(argv) == 2:
        return ["SLOWLOG GET [<count>]", "SLOWLOG LEN", "SLOWLOG RESET"]
    raise CommandError(
        f"ERR unknown subcommand or wrong number of arguments for '{text(argv[1])}'. Try SLOWLOG HELP."
    )


def latency(client, argv):
    """LATENCY LATEST | LATENCY HISTORY event | LATENCY RESET [event ...] | LATENCY HELP

    Events at or above latency-monitor-threshold ms: command, fast-command,
    aof-fsync-always. LATEST: [event, unix time, latest ms, max ms]. O(events).
    """
    sub = argv[1].lower()
    monitor = client.server.latency
    if sub == b"latest" and len(argv) == 2:
        return monitor.latest()
    if sub == b"history" and len(argv) == 3:
        return monitor.history(text(argv[2]))
    if sub == b"reset":
        return monitor.reset([text(a) for a in argv[2:]])
    if sub == b"help" and len(argv) == 2:
        return ["LATENCY LATEST", "LATENCY HISTORY <event>", "LATENCY RESET [<event> ...]"]
    raise CommandError(
        f"ERR unknown subcommand or wrong number of arguments for '{text(argv[1])}'. Try LATENCY HELP."
    )
