"""Group ``stream``, ACL category @stream: the Redis Streams commands
(commands/xstreams.py, commands/xgroups.py, commands/xinfo.py).  Arity, flags
and ACL categories as Redis 7.0's."""

from __future__ import annotations

from .. import xgroups, xinfo, xstreams
from ..flags import BLOCKING, DENYOOM, FAST, READONLY, WRITE
from .entry import command
from .help import help_command

GROUP = "stream"

# Redis 7.0's XINFO HELP and XGROUP HELP, word for word (tstream runs the same syntax).
XINFO_HELP = (
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
)
XGROUP_HELP = (
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
)

COMMANDS = [
    command(
        "xadd", xstreams.xadd, arity=-5, flags=WRITE | DENYOOM | FAST, acl="@stream", keys=(1, 1, 1),
        group=GROUP, run=xstreams.xadd_run,
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
                "xinfo|stream", xinfo.xinfo_stream, arity=-3, flags=READONLY, acl="@stream",
                keys=(2, 2, 1), group=GROUP,
                syntax="XINFO STREAM key [FULL [COUNT count]]",
                summary="Returns information about a stream (FULL: its entries and groups too).",
                complexity="O(1); FULL O(count).",
            ),
            command(
                "xinfo|groups", xinfo.xinfo_groups, arity=3, flags=READONLY, acl="@stream", keys=(2, 2, 1),
                group=GROUP,
                syntax="XINFO GROUPS key",
                summary="Returns the consumer groups of a stream.",
                complexity="O(groups + pending entries).",
            ),
            command(
                "xinfo|consumers", xinfo.xinfo_consumers, arity=4, flags=READONLY, acl="@stream",
                keys=(2, 2, 1), group=GROUP,
                syntax="XINFO CONSUMERS key group",
                summary="Returns the consumers of a consumer group.",
                complexity="O(consumers + pending entries).",
            ),
            help_command("xinfo", GROUP, acl="@stream", lines=XINFO_HELP),
        ],
    ),
    command(
        "xgroup", None, arity=-2, flags=0, acl="@stream", group=GROUP,
        syntax="XGROUP CREATE|SETID|DESTROY|CREATECONSUMER|DELCONSUMER|HELP ...",
        summary="A container for consumer groups commands.",
        complexity="Depends on subcommand.",
        subcommands=[
            command(
                "xgroup|create", xgroups.xgroup_create, arity=-5, flags=WRITE | DENYOOM, acl="@stream",
                keys=(2, 2, 1), group=GROUP,
                syntax="XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD entries-read]",
                summary="Creates a consumer group (the same object TREAD ... GROUP uses).",
                complexity="O(1).",
            ),
            command(
                "xgroup|setid", xgroups.xgroup_setid, arity=-5, flags=WRITE, acl="@stream", keys=(2, 2, 1),
                group=GROUP,
                syntax="XGROUP SETID key group id|$ [ENTRIESREAD entries-read]",
                summary="Sets the last delivered id of a consumer group.",
                complexity="O(1).",
            ),
            command(
                "xgroup|destroy", xgroups.xgroup_destroy, arity=4, flags=WRITE, acl="@stream", keys=(2, 2, 1),
                group=GROUP,
                syntax="XGROUP DESTROY key group",
                summary="Destroys a consumer group.",
                complexity="O(pending entries).",
            ),
            command(
                "xgroup|createconsumer", xgroups.xgroup_createconsumer, arity=5, flags=WRITE | DENYOOM,
                acl="@stream", keys=(2, 2, 1), group=GROUP,
                syntax="XGROUP CREATECONSUMER key group consumer",
                summary="Creates a consumer in a consumer group.",
                complexity="O(1).",
            ),
            command(
                "xgroup|delconsumer", xgroups.xgroup_delconsumer, arity=5, flags=WRITE, acl="@stream",
                keys=(2, 2, 1), group=GROUP,
                syntax="XGROUP DELCONSUMER key group consumer",
                summary="Deletes a consumer (and its pending entries) from a consumer group.",
                complexity="O(pending entries).",
            ),
            help_command("xgroup", GROUP, acl="@stream", lines=XGROUP_HELP),
        ],
    ),
    command(
        "xreadgroup", xgroups.xreadgroup, arity=-7, flags=WRITE | BLOCKING, acl="@stream", group=GROUP,
        syntax="XREADGROUP GROUP group consumer [COUNT count] [BLOCK milliseconds] [NOACK] STREAMS key [key ...] "
               "id [id ...]",
        summary="Returns new entries of a stream for a consumer of a group (they become its pending "
                "entries), or its pending entries; BLOCK waits for new ones.",
        complexity="O(M) for M entries returned.",
    ),
    command(
        "xack", xgroups.xack, arity=-4, flags=WRITE | FAST, acl="@stream", keys=(1, 1, 1), group=GROUP,
        syntax="XACK key group id [id ...]",
        summary="Acknowledges pending entries of a consumer group; replies how many were pending.",
        complexity="O(log N) for each id.",
    ),
    command(
        "xpending", xgroups.xpending, arity=-3, flags=READONLY, acl="@stream", keys=(1, 1, 1), group=GROUP,
        syntax="XPENDING key group [[IDLE min-idle-time] start end count [consumer]]",
        summary="The pending entries of a consumer group: a summary, or each with its consumer, idle time "
                "and delivery count.",
        complexity="O(pending entries).",
    ),
    command(
        "xclaim", xgroups.xclaim, arity=-6, flags=WRITE | FAST, acl="@stream", keys=(1, 1, 1), group=GROUP,
        syntax="XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-time-milliseconds] "
               "[RETRYCOUNT count] [FORCE] [JUSTID] [LASTID lastid]",
        summary="Changes the owner of pending entries idle for at least min-idle-time.",
        complexity="O(log N) for each id.",
    ),
    command(
        "xautoclaim", xgroups.xautoclaim, arity=-6, flags=WRITE | FAST, acl="@stream", keys=(1, 1, 1),
        group=GROUP,
        syntax="XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]",
        summary="XCLAIM of the pending entries from start on; replies the next start, the entries and the "
                "ids deleted meanwhile.",
        complexity="O(count).",
    ),
]
