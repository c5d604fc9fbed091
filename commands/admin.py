"""Handlers of the server commands: CONFIG, INFO, TIME, SHUTDOWN, COMMAND, SLOWLOG,
LATENCY.

Each subcommand has its own handler (``config_get`` for CONFIG GET, ...): the
dispatcher picks it from the command table, after checking its arity, so no
handler looks at its own subcommand word.  Syntax, summary and complexity of
every command are in the table (commands/table/), not here.
"""

from __future__ import annotations

import fnmatch
import time

from tstream.resp import NO_REPLY, OK, Verbatim

from . import docs, info
from .args import keyword_keys, text, to_int
from .errors import CommandError, SubcommandSyntax, SyntaxErr


def config_get(client, argv):
    """CONFIG GET parameter [parameter ...]"""
    server = client.server
    found = {}
    for pattern in argv[2:]:
        pattern_text = text(pattern).lower()
        for name in server.config.values:  # every option, in the option table's order
            if fnmatch.fnmatchcase(name, pattern_text):
                found[name] = server.config.show(name)
    return found


def config_set(client, argv):
    """CONFIG SET parameter value [parameter value ...]"""
    if len(argv) % 2:
        raise SyntaxErr()  # as Redis: a name without its value
    server = client.server
    # Check every pair before applying any, so a bad pair changes nothing.
    pending = server.config.copy_for_update()
    try:
        for name, value in zip(argv[2::2], argv[3::2]):
            pending.set(text(name), text(value), at_runtime=True)
    except ValueError as exc:  # the server config's ConfigError
        raise CommandError(f"ERR {exc}") from None
    server.apply_config(pending)
    return OK


def config_rewrite(client, argv):
    """CONFIG REWRITE"""
    path = client.server.config_file
    if path is None:
        raise CommandError("ERR The server is running without a config file")
    try:
        client.server.config.rewrite(path)
    except OSError as exc:
        raise CommandError(f"ERR Rewriting config file: {exc.strerror or exc}") from None
    return OK


def config_resetstat(client, argv):
    """CONFIG RESETSTAT"""
    client.server.reset_stats()
    return OK


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


# --- COMMAND: the command table described (commands.table, commands.docs) ----------


def command_all(client, argv):
    """COMMAND"""
    return [docs.command_info(entry) for entry in client.server.command_table.COMMANDS.values()]


def command_count(client, argv):
    """COMMAND COUNT"""
    return len(client.server.command_table.COMMANDS)


def command_list(client, argv):
    """COMMAND LIST [FILTERBY MODULE module-name|ACLCAT category|PATTERN pattern]"""
    entries = client.server.command_table.every_command()
    if len(argv) == 2:
        return [entry.name for entry in entries]
    if len(argv) != 5 or argv[2].lower() != b"filterby":
        raise SyntaxErr()
    kind, value = argv[3].lower(), argv[4]
    if kind == b"aclcat":
        category = text(value).lower()
        return [entry.name for entry in entries if category in entry.categories]
    if kind == b"pattern":
        pattern = text(value).lower()
        return [entry.name for entry in entries if fnmatch.fnmatchcase(entry.text_name, pattern)]
    if kind == b"module":
        return []  # tstream has no modules
    raise SyntaxErr()


def command_info(client, argv):
    """COMMAND INFO [command-name ...]"""
    if len(argv) == 2:
        return command_all(client, argv)
    return [docs.command_info(entry) if (entry := client.server.command_table.find(name)) else None for name in argv[2:]]


def command_docs(client, argv):
    """COMMAND DOCS [command-name ...]"""
    if len(argv) == 2:
        return {entry.name: docs.command_docs(entry) for entry in client.server.command_table.COMMANDS.values()}
    found = {}
    for name in argv[2:]:
        entry = client.server.command_table.find(name)
        if entry is not None:
            found[entry.name] = docs.command_docs(entry)
    return found


def command_getkeys(client, argv):
    """COMMAND GETKEYS command [arg ...]"""
    args = argv[2:]
    entry = client.server.command_table.find(args[0])
    if entry is not None and entry.subcommands and len(args) > 1:
        entry = entry.by_name.get(args[1].lower())
    if entry is None or b"|" in args[0]:
        raise CommandError("ERR Invalid command specified")
    if (entry.arity > 0 and len(args) != entry.arity) or len(args) < -entry.arity:
        raise CommandError("ERR Invalid number of arguments specified for command")
    first, last, step = entry.keys
    if not first:
        found = keyword_keys(entry.name, args)  # XREAD, XREADGROUP: after STREAMS
        if found is None:
            raise CommandError("ERR The command has no key arguments")
        if not found:
            raise CommandError("ERR Invalid arguments specified for command")
        return found
    last = len(args) + last if last < 0 else last
    return args[first : last + 1 : step]


# --- SLOWLOG and LATENCY (server.observability) ------------------------------------


def slowlog_get(client, argv):
    """SLOWLOG GET [count]"""
    if len(argv) > 3:
        raise SubcommandSyntax(argv)
    count = 10
    if len(argv) == 3:
        count = to_int(argv[2])
        if count < -1:
            raise CommandError("ERR count should be greater than or equal to -1")
    entries = list(client.server.slowlog.entries)
    return entries if count == -1 else entries[:count]


def slowlog_len(client, argv):
    """SLOWLOG LEN"""
    return len(client.server.slowlog.entries)


def slowlog_reset(client, argv):
    """SLOWLOG RESET"""
    client.server.slowlog.reset()
    return OK


def latency_latest(client, argv):
    """LATENCY LATEST"""
    return client.server.latency.latest()


def latency_history(client, argv):
    """LATENCY HISTORY event"""
    return client.server.latency.history(text(argv[2]))


def latency_reset(client, argv):
    """LATENCY RESET [event ...]"""
    return client.server.latency.reset([text(a) for a in argv[2:]])
