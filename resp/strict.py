"""A request parser in plain Python that checks every header before buffering what it announces.

``RequestParser`` (hiredis) is the fast path for commands that arrive whole in
one read; this parser takes every command that does not (see resp/parser.py),
and all the input of unauthenticated clients (Redis's limits: multibulk of at
most 10, bulk of at most 16384 bytes).  It follows Redis's ``processMultibulkBuffer``:

- ``*N``: N must be an integer as Redis writes them (no sign but ``-``, no
  leading zero, no space) and at most 2^31-1 (``invalid multibulk length``);
  N <= 0 is an empty command, ignored; arguments are collected one at a time as
  they arrive, nothing is reserved for N (Redis reserves at most 1024);
- ``$len``: the same integer rules, 0 <= len <= ``max_bulk``
  (proto-max-bulk-len; ``invalid bulk length``), refused from the header, before
  its bytes arrive; any other type byte is ``expected '$', got 'X'``;
- the two bytes after a bulk are skipped unchecked, as Redis does;
- a header line not ended within 64 kB is ``too big mbulk/bulk count string``;
- a line that does not start with ``*`` is an inline command (empty lines are
  ignored: ``redis-cli --pipe`` sends one).

Parsing is incremental: a command that arrives over many reads is never parsed
again from its start.  ``pending_bytes`` counts the unparsed input plus what the
arguments collected so far cost in memory (a bytes object per argument: many tiny
arguments cost several times their wire size), for ``client-query-buffer-limit``.

The tests also use it as the reference decoding the hiredis path is compared with.
Interface: ``feed(data)``, then ``next_command()`` until it returns None, or
``pull()``, which here returns one command at a time (so that when AUTH
succeeds, what follows it is parsed by the parser that then takes over).
"""

from __future__ import annotations

import re

from .errors import ProtocolError
from .inline import INLINE_MAX_SIZE, split_inline

INT_MAX = (1 << 31) - 1
ARGUMENT_OVERHEAD = 41  # a bytes object's header and its list slot, on CPython 64-bit
# An integer as Redis's string2ll accepts it: no "+", no space, no leading zero.
_REDIS_INT = re.compile(rb"-?[1-9][0-9]{0,18}|0")
_COMPACT_AT = 1 << 16


def _redis_int(text: bytes) -> int | None:
    if _REDIS_INT.fullmatch(text) is None:
        return None
    value = int(text)
    return value if -(1 << 63) <= value < (1 << 63) else None


class StrictRequestParser:
    __slots__ = ("_buf", "_pos", "_args", "_left", "_held", "max_multibulk", "max_bulk", "max_inline")

    drained = False  # see RequestParser.drained: never claimed here (callers ask has_input())

    def read_one(self, data: bytes) -> None:
        """See RequestParser.read_one: never taken here (every read is fed)."""
        return None

    def read_first(self, data: bytes) -> None:
        """See RequestParser.read_first: never taken here (every read is fed)."""
        return None

    def holds_input(self) -> bool:
        """See RequestParser.holds_input: always (no read is taken whole here)."""
        return True

    def read_many(self, data: bytes) -> None:
        """See RequestParser.read_many: never taken here (every read is fed)."""
        self.feed(data)
        return None

    def __init__(self, max_multibulk: int = INT_MAX, max_bulk: int = 512 << 20,
                 max_inline: int = INLINE_MAX_SIZE) -> None:
        self._buf = bytearray()
        self._pos = 0  # bytes of _buf already parsed
        self._args: list[bytes] = []  # the arguments of the multibulk being received
        self._left = 0  # arguments it still announces (0: between commands)
        self._held = 0  # memory of _args
        self.max_multibulk = max_multibulk
        self.max_bulk = max_bulk
        self.max_inline = max_inline

    def feed(self, data) -> None:
        self._buf += data

    def pending_bytes(self) -> int:
        """Unparsed input plus the memory of the arguments of the command being received."""
        return len(self._buf) - self._pos + self._held

    def has_input(self) -> bool:
        """Whether bytes wait to be returned as commands (or refused)."""
        return self._pos < len(self._buf) or self._left > 0

    def between_commands(self) -> bool:
        """True when no command is partly received (what is buffered starts a new one)."""
        return self._left == 0

    def take_buffer(self) -> bytes:
        """The bytes not yet parsed (to hand them to another parser): only
        between commands."""
        data = bytes(self._buf[self._pos:])
        self._buf.clear()
        self._pos = 0
        return data

    def pull(self) -> list[list]:
        """The next complete command as a one-element list, or []."""
        command = self.next_command()
        return [] if command is None else [command]

    def next_command(self) -> list | None:  # noqa: C901 (over the limit when it came in)
        """The next complete command, or None if more data is needed; raises
        ProtocolError (Redis's text) on input that is not a command."""
        buf = self._buf
        try:
            while True:
                if self._left == 0:
                    pos = self._pos
                    if pos >= len(buf):
                        return None
                    if buf[pos] != 0x2A:  # not "*": an inline command
                        words = self._inline()
                        if words is None:
                            return None
                        if words:
                            return words
                        continue
                    count = self._header(b"mbulk")
                    if count is None:
                        return None
                    if count > self.max_multibulk or count > INT_MAX:
                        raise ProtocolError("invalid multibulk length" if self.max_multibulk > 1024
                                            else "unauthenticated multibulk length")
                    if count <= 0:
                        continue  # an empty command: ignored
                    self._left = count
                while self._left:
                    pos = self._pos
                    if pos >= len(buf):
                        return None
                    if buf[pos] != 0x24:  # "$"
                        raise ProtocolError(f"expected '$', got '{chr(buf[pos])}'")
                    end = buf.find(b"\r\n", pos)
                    if end < 0:
                        if len(buf) - pos > INLINE_MAX_SIZE:
                            raise ProtocolError("too big bulk count string")
                        return None
                    length = _redis_int(bytes(buf[pos + 1:end]))
                    if length is None or length < 0 or length > self.max_bulk:
                        raise ProtocolError("invalid bulk length" if self.max_bulk > 16384
                                            else "unauthenticated bulk length")
                    start = end + 2
                    if len(buf) < start + length + 2:
                        return None  # the header is read again when more arrives: one line
                    self._args.append(bytes(buf[start:start + length]))
                    self._held += length + ARGUMENT_OVERHEAD
                    self._pos = start + length + 2
                    self._left -= 1
                command, self._args, self._held = self._args, [], 0
                return command
        finally:
            if self._pos >= len(buf):
                buf.clear()
                self._pos = 0
            elif self._pos > _COMPACT_AT:
                del buf[:self._pos]
                self._pos = 0

    def _header(self, what: bytes) -> int | None:
        """The integer of the ``*`` line at the position, consumed; None if incomplete."""
        buf, pos = self._buf, self._pos
        end = buf.find(b"\r\n", pos)
        if end < 0:
            if len(buf) - pos > INLINE_MAX_SIZE:
                raise ProtocolError(f"too big {what.decode()} count string")
            return None
        value = _redis_int(bytes(buf[pos + 1:end]))
        if value is None:
            raise ProtocolError("invalid multibulk length")
        self._pos = end + 2
        return value

    def _inline(self) -> list | None:
        """The inline line at the position, split; [] for an empty line; None if incomplete."""
        buf, pos = self._buf, self._pos
        end = buf.find(b"\n", pos)
        if end < 0:
            if len(buf) - pos > self.max_inline:
                raise ProtocolError("too big inline request")
            return None
        line = bytes(buf[pos:end]).rstrip(b"\r")
        self._pos = end + 1
        words = split_inline(line)
        if len(words) > self.max_multibulk:
            raise ProtocolError("too many arguments")
        return words
