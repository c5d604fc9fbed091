"""A request parser in plain Python that checks every header against limits first.

``RequestParser`` (hiredis) is the fast path; this one is for clients that must
not be able to make the server allocate: it reads each ``*N`` and ``$len``
header and refuses a count or length over its limits *before* buffering what it
announces.  The server uses it for unauthenticated clients (Redis's limits:
multibulk of at most 10, bulk of at most 16384 bytes), and the tests use it as
the reference decoding that the hiredis-based parser is compared against.
Same interface: ``feed(data)``, then ``next_command()`` until it returns None,
or ``pull()``, which here returns one command at a time (so that when AUTH
succeeds, what follows it is parsed by the parser that then takes over).
"""

from __future__ import annotations

from .errors import ProtocolError
from .parser import INLINE_MAX_SIZE, split_inline


class StrictRequestParser:
    __slots__ = ("_buf", "max_multibulk", "max_bulk", "max_inline")

    def __init__(self, max_multibulk: int = 1 << 31, max_bulk: int = 512 << 20,
                 max_inline: int = INLINE_MAX_SIZE) -> None:
        self._buf = bytearray()
        self.max_multibulk = max_multibulk
        self.max_bulk = max_bulk
        self.max_inline = max_inline

    def feed(self, data: bytes) -> None:
        self._buf += data

    def pending_bytes(self) -> int:
        return len(self._buf)

    def has_input(self) -> bool:
        """Whether bytes wait to be returned as commands (or refused)."""
        return bool(self._buf)

    def take_buffer(self) -> bytes:
        """The bytes not yet returned as commands (to hand them to another parser)."""
        data = bytes(self._buf)
        self._buf.clear()
        return data

    def pull(self) -> list[list]:
        """The next complete command as a one-element list, or []."""
        command = self.next_command()
        return [] if command is None else [command]

    def next_command(self) -> list | None:
        buf = self._buf
        while buf:
            if buf[0] != 0x2A:  # not "*": an inline command
                end = buf.find(b"\n")
                if end < 0:
                    if len(buf) > self.max_inline:
                        raise ProtocolError("too big inline request")
                    return None
                line = bytes(buf[:end]).rstrip(b"\r")
                del buf[: end + 1]
                words = split_inline(line)
                if words:
                    if len(words) > self.max_multibulk:
                        raise ProtocolError("too many arguments")
                    return words
                continue
            command, used = self._multibulk(buf)
            if command is None:
                return None
            del buf[:used]
            if command:
                return command
        return None

    def _line(self, buf: bytearray, pos: int, what: str) -> tuple[int | None, int]:
        """The integer on the line at ``pos`` (after its type byte) and the next position."""
        end = buf.find(b"\r\n", pos)
        if end < 0:
            if len(buf) - pos > 32:  # no header line is this long
                raise ProtocolError(f"too big {what} count string")
            return None, pos
        text = bytes(buf[pos + 1 : end])
        if not text or not (text.isdigit() or (text[:1] == b"-" and text[1:].isdigit())) or len(text) > 20:
            raise ProtocolError(f"invalid {what} length")
        return int(text), end + 2

    def _multibulk(self, buf: bytearray) -> tuple[list | None, int]:
        count, pos = self._line(buf, 0, "multibulk")
        if count is None:
            return None, 0
        if count > self.max_multibulk:
            raise ProtocolError("invalid multibulk length" if self.max_multibulk > 1024
                                else "unauthenticated multibulk length")
        if count <= 0:
            return [], pos
        args = []
        for _ in range(count):
            if pos >= len(buf):
                return None, 0
            if buf[pos] != 0x24:  # "$"
                raise ProtocolError(f"expected '$', got '{chr(buf[pos])}'")
            length, after = self._line(buf, pos, "bulk")
            if length is None:
                return None, 0
            if length < 0 or length > self.max_bulk:
                raise ProtocolError("invalid bulk length" if self.max_bulk > 16384
                                    else "unauthenticated bulk length")
            end = after + length
            if len(buf) < end + 2:
                return None, 0
            if buf[end : end + 2] != b"\r\n":
                raise ProtocolError("bulk string not followed by CRLF")
            args.append(bytes(buf[after:end]))
            pos = end + 2
        return args, pos
