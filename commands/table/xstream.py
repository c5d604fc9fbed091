"""Group ``stream``, ACL category @stream: the Redis Streams data commands
(commands/xstreams.py).  Arity, flags and ACL categories as Redis 7.0's."""

from __future__ import annotations

from .. import xstreams
from ..flags import BLOCKING, DENYOOM, FAST, READONLY, WRITE
from .entry import command
from .help import help_command

GROUP = "stream"

COMMANDS = [
    command(
        "xadd", xstreams.xadd, arity=-5, flags=WRITE | DENYOOM | FAST, acl="@stream", keys=(1, 1, 1),
        group=GROUP,
        syntax="XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value "
               "[field value ...]",
        summary="Appends a new entry to a stream (one pair: a TWRITE of field value); replies its id.",
        complexity="O(1) when adding a new entry, O(N) when trimming where N is the number of "
                   "entries evicted.",
    ),
    command(
        "xrange", xstreams.xrange_, arity=-4, flags=READONLY, acl="@stream", keys=(1, 1, 1), group=GROUP,
        syntax="XRANGE key start end [COUNT count]",
        summary="Returns the entries with ids in a range, oldest first.",
        complexity="O(log N + M) with M the number of entries returned.",
    ),
    command(
        "xrevrange", xstreams.xrevrange, arity=-4, flags=READONLY, acl="@stream", keys=(1, 1, 1), group=GROUP,
        syntax="XREVRANGE key end start [COUNT count]",
        summary="Returns the entries with ids in a range, newest first.",
        complexity="O(log N + M) with M the number of entries returned.",
    ),
    command(
        "xlen", xstreams.xlen, arity=2, flags=READONLY | FAST, acl="@stream", keys=(1, 1, 1), group=GROUP,
        syntax="XLEN key",
        summary="Returns the number of entries in a stream.",
        complexity="O(1).",
    ),
    command(
        "xdel", xstreams.xdel, arity=-3, flags=WRITE | FAST, acl="@stream", keys=(1, 1, 1), group=GROUP,
        syntax="XDEL key id [id ...]",
        summary="Deletes entries by id; replies how many existed.",
        complexity="O(log N) for each id.",
    ),
    command(
        "xtrim", xstreams.xtrim, arity=-4, flags=WRITE, acl="@stream", keys=(1, 1, 1), group=GROUP,
        syntax="XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]",
        summary="Removes the oldest entries (by count, or below an id); with ~ whole macro nodes only.",
        complexity="O(log N + nodes released).",
    ),
    command(
        "xsetid", xstreams.xsetid, arity=-3, flags=WRITE | DENYOOM | FAST, acl="@stream", keys=(1, 1, 1),
        group=GROUP,
        syntax="XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]",
        summary="Sets the last id of a stream (and its entries-added and max-deleted-id).",
        complexity="O(1).",
    ),
    command(
        "xread", xstreams.xread, arity=-4, flags=READONLY | BLOCKING, acl="@stream", group=GROUP,
        syntax="XREAD [COUNT count] [BLOCK milliseconds] STREAMS key [key ...] id [id ...]",
        summary="Returns the entries after the given ids of one or more streams; BLOCK waits for one.",
        complexity="O(log N + M) per stream, M the entries returned.",
    ),
    command(
        "xinfo", None, arity=-2, flags=0, acl="@stream", group=GROUP,
        syntax="XINFO STREAM|GROUPS|CONSUMERS|HELP ...",
        summary="A container for stream introspection commands.",
        complexity="Depends on subcommand.",
        subcommands=[
            command(
                "xinfo|stream", xstreams.xinfo_stream, arity=-3, flags=READONLY, acl="@stream",
                keys=(2, 2, 1), group=GROUP,
                syntax="XINFO STREAM key [FULL [COUNT count]]",
                summary="Returns information about a stream (FULL: its entries and groups too).",
                complexity="O(1); FULL O(count).",
            ),
            help_command("xinfo", GROUP, acl="@stream"),
        ],
    ),
]
