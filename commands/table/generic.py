"""Group ``generic`` (Redis's name for the commands on any key), ACL category
@keyspace: DEL, EXISTS, TYPE, KEYS, SCAN (commands/keys.py)."""

from __future__ import annotations

from .. import keys
from ..flags import FAST, READONLY, WRITE
from .entry import ALL_KEYS, ONE_KEY, command

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
]
