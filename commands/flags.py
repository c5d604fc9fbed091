"""Command flags, as in Redis's command table (shown by COMMAND INFO)."""

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
CONNECTION = 1 << 10  # a connection command (no data touched)

_NAMES = {
    WRITE: "write", READONLY: "readonly", ADMIN: "admin", NOAUTH: "no_auth", FAST: "fast",
    BLOCKING: "blocking", DENYOOM: "denyoom", LOADING: "loading", STALE: "stale", NOSCRIPT: "noscript",
}


def names(flags: int) -> list[str]:
    return [name for bit, name in _NAMES.items() if flags & bit]


def categories(flags: int, command: bytes) -> list[str]:
    """ACL categories, as Redis derives them from the flags."""
    found = []
    if flags & WRITE:
        found.append("@write")
    if flags & READONLY:
        found.append("@read")
    if flags & ADMIN:
        found += ["@admin", "@dangerous"]
    if flags & FAST:
        found.append("@fast")
    else:
        found.append("@slow")
    if flags & BLOCKING:
        found.append("@blocking")
    if flags & CONNECTION:
        found.append("@connection")
    elif flags & (WRITE | READONLY):
        found.append("@stream" if command.startswith(b"t") else "@keyspace")
    return found
