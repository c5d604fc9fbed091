"""Redis glob-style pattern matching (KEYS, SCAN MATCH).

Semantics follow Redis ``stringmatchlen()`` (src/util.c) byte for byte, case
sensitive:

    *        any sequence of bytes, including the empty one
    ?        exactly one byte
    [abc]    one byte of the set;  [^abc] one byte not in the set
    [a-z]    a range (the ends are swapped when reversed, as Redis does)
    \\x       the byte x literally (outside and inside brackets)

Redis quirks reproduced on purpose, because clients compare against Redis:

* ``[]`` is an empty set (never matches) and ``[^]`` matches any byte: a ``]``
  right after ``[`` or ``[^`` closes the set, it is not a member.
* An unterminated set (``[abc`` at the end of the pattern) is the set so far.
* A range is recognised whenever a byte is followed by ``-`` and one more byte,
  even if that byte is ``]`` (``[a-]`` is the range ``a``..``]``, and the set
  then continues).
* A trailing lone ``\\`` matches a literal backslash.
* The empty string matches only the empty pattern (``stringmatchlen`` never
  enters its loop), so ``**`` does not match ``b""``.  KEYS and SCAN treat the
  pattern ``*`` as "everything" before matching, empty key included; so does
  :func:`glob_match`.

Rather than interpreting the pattern for every key, a pattern is compiled once
into an anchored ``re`` bytes regex (cached), which runs in C.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["compile_glob", "glob_match"]

_ANY = re.compile(rb"(?s).*")


def _byte_class(members: set[int], negate: bool) -> bytes:
    """Regex for one byte in (or, if ``negate``, not in) ``members``."""
    if not members:
        # [] never matches, [^] matches any byte.
        return b"." if negate else b"(?!)"
    parts = []
    for b in sorted(members):
        # Escape every member: the class then means exactly these bytes.
        parts.append(re.escape(bytes((b,))))
    return b"[" + (b"^" if negate else b"") + b"".join(parts) + b"]"


# A bounded memo of a pure function (compiled patterns are immutable): it holds
# no server's data, so embedded servers may share it (like re's own cache).
@lru_cache(maxsize=512)
def compile_glob(pattern: bytes) -> "re.Pattern[bytes]":  # noqa: C901 (over the limit when it came in)
    """Compile a Redis glob pattern to an equivalent regex (use ``fullmatch``).

    Cost: O(len(pattern)) once per distinct pattern (LRU cache of 512).
    """
    out: list[bytes] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == 0x2A:  # '*'
            while i + 1 < n and pattern[i + 1] == 0x2A:
                i += 1  # consecutive stars are one star
            out.append(b".*")
        elif c == 0x3F:  # '?'
            out.append(b".")
        elif c == 0x5B:  # '['
            i += 1
            negate = i < n and pattern[i] == 0x5E  # '^'
            if negate:
                i += 1
            members: set[int] = set()
            while True:
                if i < n and pattern[i] == 0x5C and n - i >= 2:  # '\' escape
                    i += 1
                    members.add(pattern[i])
                elif i < n and pattern[i] == 0x5D:  # ']' closes the set
                    break
                elif i >= n:
                    # Unterminated: the set is what we have; Redis steps back
                    # so that the outer loop ends exactly at the pattern end.
                    i -= 1
                    break
                elif n - i >= 3 and pattern[i + 1] == 0x2D:  # 'a-z' range
                    lo, hi = pattern[i], pattern[i + 2]
                    if lo > hi:
                        lo, hi = hi, lo
                    members.update(range(lo, hi + 1))
                    i += 2
                else:
                    members.add(pattern[i])
                i += 1
            out.append(_byte_class(members, negate))
        elif c == 0x5C and n - i >= 2:  # '\' escapes the next byte
            i += 1
            out.append(re.escape(pattern[i:i + 1]))
        else:
            out.append(re.escape(pattern[i:i + 1]))
        i += 1
    if not out:
        return re.compile(b"")
    # (?=.): a non-empty pattern never matches the empty string in Redis.
    return re.compile(b"(?s)(?=.)" + b"".join(out))


def glob_match(pattern: bytes, string: bytes) -> bool:
    """True if ``string`` matches the Redis glob ``pattern``.

    Cost: O(len(string)) typical (regex), pattern compiled once.
    """
    if pattern == b"*":
        return True
    return compile_glob(pattern).fullmatch(string) is not None
