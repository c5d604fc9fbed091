"""Argument parsing shared by the handlers: strict integers and keyword options."""

from __future__ import annotations

import re

from .errors import CommandError, NotAnInteger

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def as_int64(n: int) -> int:
    """An unsigned 64-bit counter as Redis replies it (a long long): from 2**63
    on, negative (``XCLAIM ... RETRYCOUNT 9223372036854775807`` then one more
    delivery), instead of an integer reply no client can read."""
    return n - (1 << 64) if n > INT64_MAX else n

# Redis's string2ll: an optional minus, no leading zeros, no spaces, no plus sign.
_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]{0,18})\Z")


def to_int(arg: bytes) -> int:
    """The argument as a 64-bit signed integer, or ``-ERR value is not an integer``."""
    if arg.isdigit() and (arg[0] != 48 or len(arg) == 1) and len(arg) < 19:
        return int(arg)  # the common case, without the regular expression
    if _INTEGER.match(arg) is None:
        raise NotAnInteger()
    value = int(arg)
    if not INT64_MIN <= value <= INT64_MAX:
        raise NotAnInteger()
    return value


def to_nonnegative(arg: bytes, what: str) -> int:
    value = to_int(arg)
    if value < 0:
        raise CommandError(f"ERR {what} must be positive or zero")
    return value


def to_positive(arg: bytes, what: str) -> int:
    value = to_int(arg)
    if value <= 0:
        raise CommandError(f"ERR {what} must be positive")
    return value


def to_positive_list(args: list, what: str) -> list[int]:
    """Every argument as an integer >= 1 (to_positive on each, with its errors);
    a run of plain numbers is checked by a few C calls instead of one by one."""
    if args and b"".join(args).isdigit() and min(args)[:1] not in (b"0", b"") and max(map(len, args)) < 19:
        return list(map(int, args))  # digits only, none empty, no leading zero: all >= 1
    return [to_positive(arg, what) for arg in args]


def to_bool(arg: bytes, name: str) -> bool:
    """yes/no as Redis's config booleans (also true/false, 1/0)."""
    word = arg.lower()
    if word in (b"yes", b"true", b"1"):
        return True
    if word in (b"no", b"false", b"0"):
        return False
    raise CommandError(f"ERR invalid value for '{name}': argument must be 'yes' or 'no'")


def text(arg: bytes) -> str:
    return arg.decode("utf-8", "replace")


# Commands whose keys follow a STREAMS keyword (Redis's "keyword" key spec, which
# the (first, last, step) triple cannot say): the index the keyword is searched from.
KEYWORD_KEYS = {b"xread": 1, b"xreadgroup": 4}


def keyword_keys(name: bytes, argv: list) -> list | None:
    """The keys of XREAD/XREADGROUP as Redis's key spec finds them: the first half
    of the words after the first STREAMS at or past its index (none without one;
    an odd word out is not a key).  None for the other commands."""
    search_from = KEYWORD_KEYS.get(name)
    if search_from is None:
        return None
    for i in range(search_from, len(argv)):
        if argv[i].lower() == b"streams":
            rest = argv[i + 1:]
            return rest[: len(rest) // 2]
    return []
