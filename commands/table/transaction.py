"""Group ``transactions``, ACL category @transaction: MULTI, EXEC, DISCARD, WATCH,
UNWATCH (commands/transactions.py).  Flags as Redis 7.0's."""

from __future__ import annotations

from .. import transactions as txn
from ..flags import FAST, LOADING, NOSCRIPT, STALE
from .entry import command

GROUP = "transactions"
TXN_FLAGS = NOSCRIPT | LOADING | STALE

COMMANDS = [
    command(
        "multi", txn.multi, arity=1, flags=TXN_FLAGS | FAST, acl="@transaction", group=GROUP,
        syntax="MULTI",
        summary="Starts a transaction: the following commands are queued until EXEC.",
        complexity="O(1).",
    ),
    command(
        "exec", txn.exec_, arity=1, flags=TXN_FLAGS, acl="@transaction", group=GROUP,
        syntax="EXEC",
        summary="Runs the queued commands with nothing in between and replies their replies; "
                "null when a WATCHed key changed, nothing run.",
        complexity="Depends on the queued commands.",
    ),
    command(
        "discard", txn.discard, arity=1, flags=TXN_FLAGS | FAST, acl="@transaction", group=GROUP,
        syntax="DISCARD",
        summary="Drops the queued commands and every WATCH.",
        complexity="O(N), N the queued commands.",
    ),
    command(
        "watch", txn.watch, arity=-2, flags=TXN_FLAGS | FAST, acl="@transaction", group=GROUP,
        syntax="WATCH key [key ...]",
        summary="EXEC does nothing if one of the keys changes before it.",
        complexity="O(1) for every key.",
        keys=(1, -1, 1), key_access="RO",
    ),
    command(
        "unwatch", txn.unwatch, arity=1, flags=TXN_FLAGS | FAST, acl="@transaction", group=GROUP,
        syntax="UNWATCH",
        summary="Forgets every WATCHed key of the connection.",
        complexity="O(1).",
    ),
]
