"""Command flags and ACL categories, as in Redis's command table.

Flags say how a command behaves (COMMAND INFO shows them).  ACL categories say
which ``+@category``/``-@category`` rules cover it.  As in Redis, a table entry
names its explicit categories (``@stream``, ``@keyspace``, ``@connection``,
``@dangerous`` ...) and the categories that follow from its flags are added
once, when the table is built (``categories_of``): write -> @write, readonly ->
@read, admin -> @admin and @dangerous, fast -> @fast (else @slow), blocking ->
@blocking.  Nothing is inferred from a command's name.
"""

from __future__ import annotations

WRITE = 1 << 0       # changes data
READONLY = 1 << 1    # only reads data
ADMIN = 1 << 2       # server administration
NOAUTH = 1 << 3      # allowed before AUTH
FAST = 1 << 4        # O(1) or O(log N)
BLOCKING = 1 << 5    # may block the client
DENYOOM = 1 << 6     # may use more memory
LOADING = 1 << 7     # allowed while loading
STALE = 1 << 8
NOSCRIPT = 1 << 9

_NAMES = {
    WRITE: "write", READONLY: "readonly", DENYOOM: "denyoom", ADMIN: "admin", NOSCRIPT: "noscript",
    BLOCKING: "blocking", LOADING: "loading", STALE: "stale", FAST: "fast", NOAUTH: "no_auth",
}  # in Redis's order

# Redis's ACL categories, in Redis's order (ACL CAT, COMMAND INFO).  tstream keeps
# the ones it has no command in (string, hash, ...) so that rules written for
# Redis, such as ``-@hash``, are accepted; they cover no command.
CATEGORIES = (
    "keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
    "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous",
    "connection", "transaction", "scripting",
)
_ORDER = {name: i for i, name in enumerate(CATEGORIES)}


def names(flags: int) -> list[str]:
    """The flags' names, as COMMAND INFO shows them."""
    return [name for bit, name in _NAMES.items() if flags & bit]


def categories_of(flags: int, explicit: tuple[str, ...]) -> tuple[str, ...]:
    """Every ACL category of a command (without the ``@``): its explicit ones plus
    those its flags imply, in Redis's order."""
    found = {c.lstrip("@") for c in explicit}
    unknown = found - _ORDER.keys()
    if unknown:
        raise ValueError(f"unknown ACL categories {sorted(unknown)}")
    if flags & WRITE:
        found.add("write")
    if flags & READONLY:
        found.add("read")
    if flags & ADMIN:
        found |= {"admin", "dangerous"}
    if flags & FAST:
        found.add("fast")
    if flags & BLOCKING:
        found.add("blocking")
    if "fast" not in found:
        found.add("slow")
    return tuple(sorted(found, key=_ORDER.__getitem__))
