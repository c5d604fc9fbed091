"""Group ``generic`` (Redis's name for the commands on any key), ACL category
@keyspace: DEL, EXISTS, TYPE, KEYS, SCAN (commands/keys.py)."""

from __future__ import annotations

from .. import keys, tools
from ..flags import FAST, READONLY, WRITE
from .entry import ALL_KEYS, ONE_KEY, command
from .help import help_command

GROUP = "generic"

COMMANDS = [
    command(
        "del", keys.del_, arity=-2, flags=WRITE, acl="@keyspace", keys=ALL_KEYS, key_access="RM delete",
        group=GROUP,
        syntax="DEL key [key ...]",
        summary="Removes the streams, with their consumer groups; replies how many existed.",
        complexity="O(keys).",
    ),
    command(
        "exists", keys.exists, arity=-2, flags=READONLY | FAST, acl="@keyspace", keys=ALL_KEYS, group=GROUP,
        syntax="EXISTS key [key ...]",
        summary="How many of the keys exist (a key named twice counts twice).",
        complexity="O(keys).",
    ),
    command(
        "type", keys.type_, arity=2, flags=READONLY | FAST, acl="@keyspace", keys=ONE_KEY, group=GROUP,
        syntax="TYPE key",
        summary="The type of the key: tstream for a stream, none for a missing key.",
        complexity="O(1).",
    ),
    command(
        # Redis also puts KEYS in @dangerous; tstream does not, because KEYS only
        # shows a restricted ACL user the keys it may access (README, security).
        "keys", keys.keys, arity=2, flags=READONLY, acl="@keyspace", group=GROUP,
        syntax="KEYS pattern",
        summary="Every key matching the glob-style pattern.",
        complexity="O(keys).",
    ),
    command(
        "scan", keys.scan, arity=-2, flags=READONLY, acl="@keyspace", group=GROUP,
        syntax="SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]",
        summary="Iterates over the keys: every key present for the whole scan is returned at least "
                "once; cursor 0 starts and ends it.",
        complexity="O(count) per call.",
    ),
    command(
        "object", None, arity=-2, group=GROUP,
        syntax="OBJECT ENCODING|REFCOUNT|IDLETIME|FREQ|HELP ...",
        summary="A container for object introspection commands.",
        complexity="Depends on subcommand.",
        subcommands=[
            command(
                "object|encoding", tools.object_encoding, arity=3, flags=READONLY, acl="@keyspace",
                keys=(2, 2, 1), group=GROUP,
                syntax="OBJECT ENCODING key",
                summary="The key's encoding: macronodes.",
                complexity="O(1).",
            ),
            command(
                "object|refcount", tools.object_refcount, arity=3, flags=READONLY, acl="@keyspace",
                keys=(2, 2, 1), group=GROUP,
                syntax="OBJECT REFCOUNT key",
                summary="The key's reference count: 1.",
                complexity="O(1).",
            ),
            command(
                "object|idletime", tools.object_idletime, arity=3, flags=READONLY, acl="@keyspace",
                keys=(2, 2, 1), group=GROUP,
                syntax="OBJECT IDLETIME key",
                summary="Seconds since the key was last written.",
                complexity="O(1).",
            ),
            command(
                "object|freq", tools.object_freq, arity=3, flags=READONLY, acl="@keyspace",
                keys=(2, 2, 1), group=GROUP,
                syntax="OBJECT FREQ key",
                summary="The key's access frequency (only under an LFU policy: Redis's error otherwise).",
                complexity="O(1).",
            ),
            help_command("object", GROUP, acl="@keyspace"),
        ],
    ),
]
