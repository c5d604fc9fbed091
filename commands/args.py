"""Argument parsing shared by the handlers: strict integers and keyword options."""

from __future__ import annotations

import re

from .errors import CommandError, NotAnInteger

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# Redis's string2ll: an optional minus, no leading zeros, no spaces, no plus sign.
_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]{0,18})\Z")


def to_int(arg: bytes) -> int:
    """The argument as a 64-bit signed integer, or ``-ERR value is not an integer``."""
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
