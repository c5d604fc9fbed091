"""Group ``server``: COMMAND, CONFIG, INFO, SLOWLOG, LATENCY, ACL, TIME, SHUTDOWN
(commands/admin.py, commands/security.py), SAVE, BGSAVE, LASTSAVE, BGREWRITEAOF
(commands/saving.py), DBSIZE, FLUSHALL, FLUSHDB (commands/keys.py)."""

from __future__ import annotations

from .. import admin, keys, replication, saving, security, tools
from ..flags import ADMIN, FAST, LOADING, NOSCRIPT, READONLY, STALE, WRITE
from .entry import command
from .help import help_command

GROUP = "server"
ADMIN_SUB = ADMIN | NOSCRIPT | LOADING | STALE  # Redis's flags of most admin subcommands

COMMANDS = [
    command(
        "command", admin.command_all, arity=-1, flags=LOADING | STALE, acl="@connection", group=GROUP,
        syntax="COMMAND",
        summary="Describes every command (COMMAND INFO of all of them).",
        complexity="O(commands).",
        subcommands=[
            command(
                "command|count", admin.command_count, arity=2, flags=LOADING | STALE, acl="@connection",
                group=GROUP,
                syntax="COMMAND COUNT",
                summary="The number of commands (subcommands not counted).",
                complexity="O(1).",
            ),
            command(
                "command|list", admin.command_list, arity=-2, flags=LOADING | STALE, acl="@connection",
                group=GROUP,
                syntax=["COMMAND LIST",
                        "COMMAND LIST FILTERBY MODULE module-name",
                        "COMMAND LIST FILTERBY ACLCAT category",
                        "COMMAND LIST FILTERBY PATTERN pattern"],
                summary="The name of every command and subcommand, or of those in an ACL category "
                        "or matching a glob-style pattern.",
                complexity="O(commands).",
            ),
            command(
                "command|info", admin.command_info, arity=-2, flags=LOADING | STALE, acl="@connection",
                group=GROUP,
                syntax="COMMAND INFO [command-name [command-name ...]]",
                summary="Describes the commands named (all of them when none is): name, arity, flags, "
                        "key positions, ACL categories, key specs, subcommands.",
                complexity="O(commands named).",
            ),
            command(
                "command|docs", admin.command_docs, arity=-2, flags=LOADING | STALE, acl="@connection",
                group=GROUP,
                syntax="COMMAND DOCS [command-name [command-name ...]]",
                summary="Documents the commands named (all of them when none is): summary, since, group, "
                        "complexity and the arguments of every form.",
                complexity="O(commands named).",
            ),
            command(
                "command|getkeys", admin.command_getkeys, arity=-4, flags=LOADING | STALE, acl="@connection",
                group=GROUP,
                syntax="COMMAND GETKEYS command [arg [arg ...]]",
                summary="The key arguments of a full command.",
                complexity="O(arguments).",
            ),
            help_command("command", GROUP, acl="@connection"),
        ],
    ),
    command(
        "config", None, arity=-2, group=GROUP,
        syntax="CONFIG subcommand [argument ...]",
        summary="A container for server configuration commands.",
        complexity="Depends on subcommand.",
        subcommands=[
            command(
                "config|get", admin.config_get, arity=-3, flags=ADMIN_SUB, group=GROUP,
                syntax="CONFIG GET parameter [parameter ...]",
                summary="The configuration parameters matching the glob-style patterns, with their values.",
                complexity="O(parameters).",
            ),
            command(
                "config|set", admin.config_set, arity=-4, flags=ADMIN_SUB, group=GROUP,
                syntax="CONFIG SET parameter value [parameter value ...]",
                summary="Checks every pair, then applies them all (a bad pair changes nothing).",
                complexity="O(pairs).",
            ),
            command(
                "config|rewrite", admin.config_rewrite, arity=2, flags=ADMIN_SUB, group=GROUP,
                syntax="CONFIG REWRITE",
                summary="Writes the current configuration into the config file the server started "
                        "with, keeping its comments and the order of its lines.",
                complexity="O(options + lines of the file).",
            ),
            command(
                "config|resetstat", admin.config_resetstat, arity=2, flags=ADMIN_SUB, group=GROUP,
                syntax="CONFIG RESETSTAT",
                summary="Resets the statistics INFO shows (commandstats, errors, slow log, ...).",
                complexity="O(commands).",
            ),
            help_command("config", GROUP),
        ],
    ),
    command(
        "info", admin.info_, arity=-1, flags=LOADING | STALE, acl="@dangerous", group=GROUP,
        syntax="INFO [section [section ...]]",
        summary="The server's state in Redis's field:value text format.",
        complexity="O(1), some sections O(clients + keys).",
    ),
    command(
        "slowlog", None, arity=-2, group=GROUP,
        syntax="SLOWLOG subcommand [argument ...]",
        summary="A container for slow log commands.",
        complexity="Depends on subcommand.",
        subcommands=[
            command(
                "slowlog|get", admin.slowlog_get, arity=-2, flags=ADMIN | LOADING | STALE, group=GROUP,
                syntax="SLOWLOG GET [count]",
                summary="The newest count (10; -1: all) commands slower than slowlog-log-slower-than "
                        "microseconds: [id, unix time, microseconds, [args], client address, client name].",
                complexity="O(count).",
            ),
            command(
                "slowlog|len", admin.slowlog_len, arity=2, flags=ADMIN | LOADING | STALE, group=GROUP,
                syntax="SLOWLOG LEN",
                summary="The number of entries in the slow log.",
                complexity="O(1).",
            ),
            command(
                "slowlog|reset", admin.slowlog_reset, arity=2, flags=ADMIN | LOADING | STALE, group=GROUP,
                syntax="SLOWLOG RESET",
                summary="Empties the slow log.",
                complexity="O(entries).",
            ),
            help_command("slowlog", GROUP),
        ],
    ),
    command(
        "latency", None, arity=-2, group=GROUP,
        syntax="LATENCY subcommand [argument ...]",
        summary="A container for latency monitor commands.",
        complexity="Depends on subcommand.",
        subcommands=[
            command(
                "latency|latest", admin.latency_latest, arity=2, flags=ADMIN_SUB, group=GROUP,
                syntax="LATENCY LATEST",
                summary="The latest latency spike of every event (command, fast-command, aof-fsync-always): "
                        "[event, unix time, latest ms, max ms].",
                complexity="O(events).",
            ),
            command(
                "latency|history", admin.latency_history, arity=3, flags=ADMIN_SUB, group=GROUP,
                syntax="LATENCY HISTORY event",
                summary="The event's latency spikes as [unix time, ms].",
                complexity="O(spikes).",
            ),
            command(
                "latency|reset", admin.latency_reset, arity=-2, flags=ADMIN_SUB, group=GROUP,
                syntax="LATENCY RESET [event [event ...]]",
                summary="Forgets the spikes of the events (of every event when none is named); "
                        "replies how many events were reset.",
                complexity="O(events).",
            ),
            command(
                "latency|doctor", tools.latency_doctor, arity=2, flags=ADMIN_SUB, group=GROUP,
                syntax="LATENCY DOCTOR",
                summary="A human-readable report of the latency events recorded.",
                complexity="O(events).",
            ),
            help_command("latency", GROUP),
        ],
    ),
    command(
        "monitor", tools.monitor, arity=1, flags=ADMIN_SUB, group=GROUP,
        syntax="MONITOR",
        summary="Streams every command the server runs to this client, as Redis shows them.",
        complexity="O(1).",
    ),
    command(
        "role", tools.role, arity=1, flags=NOSCRIPT | LOADING | STALE | FAST, acl="@admin @dangerous",
        group=GROUP,
        syntax="ROLE",
        summary="The replication role of this server: master with its offset and replicas, or slave with "
                "its primary, link state and offset.",
        complexity="O(1).",
    ),
    command(
        "replicaof", replication.replicaof, arity=3, flags=ADMIN | NOSCRIPT | STALE, group=GROUP,
        syntax=["REPLICAOF host port", "REPLICAOF NO ONE"],
        summary="Makes this server a replica of another tstream server (full or partial resync), or, with NO "
                "ONE, a primary that keeps its data.",
        complexity="O(1); the resync runs in the background.",
    ),
    command(
        "slaveof", replication.replicaof, arity=3, flags=ADMIN | NOSCRIPT | STALE, group=GROUP,
        syntax=["SLAVEOF host port", "SLAVEOF NO ONE"],
        summary="The old name of REPLICAOF.",
        complexity="O(1); the resync runs in the background.",
    ),
    command(
        "psync", replication.psync, arity=-3, flags=ADMIN | NOSCRIPT, group=GROUP,
        syntax="PSYNC replicationid offset",
        summary="A replica asks for the replication stream from offset: +CONTINUE from the backlog, or "
                "+FULLRESYNC, a snapshot and the stream.",
        complexity="O(1); a full resync captures a snapshot in the background.",
    ),
    command(
        "replconf", replication.replconf, arity=-1, flags=ADMIN | NOSCRIPT | LOADING | STALE, group=GROUP,
        syntax="REPLCONF option value [option value ...]",
        summary="What a replica tells its primary: listening-port, capa, ACK offset, GETACK.",
        complexity="O(1).",
    ),
    command(
        "wait", replication.wait, arity=3, flags=NOSCRIPT, acl="@connection", group=GROUP,
        syntax="WAIT numreplicas timeout",
        summary="Blocks until numreplicas replicas acknowledged every write made so far, or timeout ms "
                "(0: forever); replies with how many did.",
        complexity="O(replicas).",
    ),
    command(
        "memory", None, arity=-2, group=GROUP,
        syntax="MEMORY USAGE|DOCTOR|HELP ...",
        summary="A container for memory diagnostics commands.",
        complexity="Depends on subcommand.",
        subcommands=[
            command(
                "memory|usage", tools.memory_usage, arity=-3, flags=READONLY, keys=(2, 2, 1), group=GROUP,
                syntax="MEMORY USAGE key [SAMPLES count]",
                summary="The bytes a key takes (its macro nodes, tag table and objects).",
                complexity="O(1).",
            ),
            command(
                "memory|doctor", tools.memory_doctor, arity=2, flags=0, group=GROUP,
                syntax="MEMORY DOCTOR",
                summary="A word on the server's memory.",
                complexity="O(1).",
            ),
            help_command("memory", GROUP),
        ],
    ),
    command(
        "acl", None, arity=-2, group=GROUP,
        syntax="ACL subcommand [argument ...]",
        summary="A container for access list commands: users, passwords and permissions.",
        complexity="Depends on subcommand.",
        subcommands=[
            command(
                "acl|whoami", security.acl_whoami, arity=2, flags=NOSCRIPT | LOADING | STALE, group=GROUP,
                syntax="ACL WHOAMI",
                summary="The name of the connection's user (every user may ask).",
                complexity="O(1).",
            ),
            command(
                "acl|list", security.acl_list, arity=2, flags=ADMIN_SUB, group=GROUP,
                syntax="ACL LIST",
                summary="Every user as its rules, passwords as SHA-256 digests.",
                complexity="O(users).",
            ),
            command(
                "acl|users", security.acl_users, arity=2, flags=ADMIN_SUB, group=GROUP,
                syntax="ACL USERS",
                summary="The name of every user.",
                complexity="O(users).",
            ),
            command(
                "acl|setuser", security.acl_setuser, arity=-3, flags=ADMIN_SUB, group=GROUP,
                syntax="ACL SETUSER username [rule [rule ...]]",
                summary="Creates the user or applies the rules to it (a bad rule changes nothing).",
                complexity="O(rules).",
            ),
            command(
                "acl|deluser", security.acl_deluser, arity=-3, flags=ADMIN_SUB, group=GROUP,
                syntax="ACL DELUSER username [username ...]",
                summary="Removes the users and closes their connections; replies how many existed.",
                complexity="O(users + clients).",
            ),
            command(
                "acl|cat", security.acl_cat, arity=-2, flags=NOSCRIPT | LOADING | STALE, group=GROUP,
                syntax="ACL CAT [category]",
                summary="The ACL categories, or the commands in one category.",
                complexity="O(commands).",
            ),
            help_command("acl", GROUP),
        ],
    ),
    command(
        "time", admin.time_, arity=1, flags=FAST | LOADING | STALE, group=GROUP,
        syntax="TIME",
        summary="The server's clock as [unix seconds, microseconds].",
        complexity="O(1).",
    ),
    command(
        "dbsize", keys.dbsize, arity=1, flags=READONLY | FAST, acl="@keyspace", group=GROUP,
        syntax="DBSIZE",
        summary="The number of keys.",
        complexity="O(1).",
    ),
    command(
        "flushall", keys.flushall, arity=-1, flags=WRITE, acl="@keyspace @dangerous", group=GROUP,
        syntax="FLUSHALL [ASYNC|SYNC]",
        summary="Removes every key.",
        complexity="O(keys).",
    ),
    command(
        "flushdb", keys.flushall, arity=-1, flags=WRITE, acl="@keyspace @dangerous", group=GROUP,
        syntax="FLUSHDB [ASYNC|SYNC]",
        summary="Removes every key (database 0 is the only one).",
        complexity="O(keys).",
    ),
    command(
        "save", saving.save, arity=1, flags=ADMIN | NOSCRIPT, group=GROUP,
        syntax="SAVE",
        summary="Writes a snapshot now; every client waits until it is on disk.",
        complexity="O(size).",
    ),
    command(
        "bgsave", saving.bgsave, arity=-1, flags=ADMIN | NOSCRIPT, group=GROUP,
        syntax="BGSAVE [SCHEDULE]",
        summary="Writes a snapshot from a worker thread while clients go on being served.",
        complexity="O(nodes) on the event loop to capture, the writing in the background.",
    ),
    command(
        "lastsave", saving.lastsave, arity=1, flags=FAST | LOADING | STALE, acl="@admin @dangerous",
        group=GROUP,
        syntax="LASTSAVE",
        summary="Unix time of the last successful snapshot.",
        complexity="O(1).",
    ),
    command(
        "bgrewriteaof", saving.bgrewriteaof, arity=1, flags=ADMIN | NOSCRIPT, group=GROUP,
        syntax="BGREWRITEAOF",
        summary="Compacts the append-only file: a new base snapshot written in the background, "
                "the incremental files since it kept. Needs appendonly yes.",
        complexity="O(size), in the background.",
    ),
    command(
        "shutdown", admin.shutdown, arity=-1, flags=ADMIN | NOSCRIPT | LOADING | STALE, group=GROUP,
        syntax="SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]",
        summary="Flushes the append-only file, saves a snapshot when save points are set (or SAVE "
                "is given, never with NOSAVE), closes every client and exits 0.",
        complexity="O(size) when saving.",
    ),
]
