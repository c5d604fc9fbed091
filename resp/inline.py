"""Inline commands: a plain line of space-separated words (what telnet and
``redis-cli`` pipes send), split as Redis splits them."""

from __future__ import annotations

from .errors import ProtocolError

# Redis refuses inline lines longer than this (PROTO_INLINE_MAX_SIZE).
INLINE_MAX_SIZE = 64 * 1024


def split_inline(line: bytes) -> list[bytes]:  # noqa: C901 (over the limit when it came in)
    """Split an inline command line into words, honouring quotes as redis-cli does.

    Double quotes allow escapes (\\n, \\t, \\xHH, \\", \\\\); single quotes only \\'.
    """
    if b'"' not in line and b"'" not in line:
        return line.split()
    words: list[bytes] = []
    i, n = 0, len(line)
    while i < n:
        while i < n and line[i] in b" \t":
            i += 1
        if i >= n:
            break
        word = bytearray()
        quote = 0
        while i < n:
            c = line[i]
            if quote and c == quote:  # the closing quote ends the word
                quote = 0
                _expect_separator(line, i + 1)
                i += 1
                break
            if quote == 0x22 and c == 0x5C and i + 1 < n:  # backslash escape inside "..."
                i += 1
                esc = line[i]
                if esc == 0x78 and i + 2 < n and _is_hex(line[i + 1 : i + 3]):  # \xHH
                    word.append(int(line[i + 1 : i + 3], 16))
                    i += 2
                else:
                    word.append(_ESCAPES.get(esc, esc))
            elif quote == 0x27 and c == 0x5C and i + 1 < n and line[i + 1] == 0x27:  # \' inside '...'
                i += 1
                word.append(0x27)
            elif not quote and c in b" \t":
                break
            elif not quote and c in (0x22, 0x27) and not word:
                quote = c
            else:
                word.append(c)
            i += 1
        if quote:
            raise ProtocolError("unbalanced quotes in request")
        words.append(bytes(word))
    return words


_ESCAPES = {0x6E: 0x0A, 0x72: 0x0D, 0x74: 0x09, 0x62: 0x08, 0x61: 0x07}


def _is_hex(two: bytes) -> bool:
    return len(two) == 2 and all(c in b"0123456789abcdefABCDEF" for c in two)


def _expect_separator(line: bytes, i: int) -> None:
    # A closing quote must be followed by a space or the end of the line.
    if i < len(line) and line[i] not in b" \t":
        raise ProtocolError("unbalanced quotes in request")
