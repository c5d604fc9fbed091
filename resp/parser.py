"""Request parser: bytes in, complete commands out, no I/O (in the style of h11).

    parser = RequestParser()
    parser.feed(data)
    while (command := parser.next_command()) is not None:
        handle(command)             # a list of bytes: [name, arg1, ...]

or, to take every complete command at once (what the server does, so that it
can see a pipeline's commands together)::

    for command in parser.pull():
        handle(command)

Clients send commands as RESP multibulk arrays (``*2\\r\\n$4\\r\\nPING...``), which
``hiredis.Reader`` decodes in C.  Redis also accepts *inline* commands, a plain line
of space-separated words (what telnet and ``redis-cli`` pipes send); those are
split here.  The choice between the two is made on the first byte of each command,
which is only known when hiredis holds no partial command: an inline command that
follows a multibulk one inside the same read is therefore refused with a protocol
error, a limitation no real client hits.
"""

from __future__ import annotations

import hiredis

from .errors import ProtocolError

# Redis refuses inline lines longer than this (PROTO_INLINE_MAX_SIZE).
INLINE_MAX_SIZE = 64 * 1024


class RequestParser:
    __slots__ = ("_reader", "_inline", "_partial", "_error")

    def __init__(self) -> None:
        self._reader = hiredis.Reader()
        self._inline = bytearray()  # bytes of inline commands not yet split
        # True while hiredis holds bytes of a command it has not returned yet. hiredis
        # cannot tell (it may have consumed a command's header), so this tracks it:
        # it becomes False only when hiredis returns a command and has nothing left.
        self._partial = False
        self._error: ProtocolError | None = None  # met by pull() after some commands

    def feed(self, data: bytes) -> None:
        """Add bytes received from the client."""
        if self._partial:
            self._reader.feed(data)
        elif self._inline or data[:1] != b"*":
            self._inline += data
        elif data:
            self._partial = True
            self._reader.feed(data)

    def next_command(self) -> list | None:
        """The next complete command as a list of bytes, or None if more data is needed.

        Raises ProtocolError on input that is not a command; the connection must then
        be closed, since the stream position is lost.
        """
        reader = self._reader
        while self._partial:
            try:
                command = reader.gets()
            except hiredis.ProtocolError as exc:
                raise ProtocolError(str(exc).replace("reply type byte", "command type byte")) from None
            if command is False:
                return None
            self._partial = reader.has_data()
            if command is None or command == []:
                continue  # Redis ignores "*-1" and "*0"
            if command.__class__ is not list:
                raise ProtocolError(f"expected '*', got '{_kind(command)}'")
            for arg in command:
                if arg.__class__ is not bytes:
                    raise ProtocolError(f"expected '$', got '{_kind(arg)}'")
            return command
        if self._inline:
            return self._next_inline()
        return None

    def pull(self) -> list[list]:
        """Every complete command received so far, in order; [] if more data is needed.

        A protocol error raises ProtocolError, but only once the commands before
        it have been returned (by this call; the error comes with the next).
        """
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if not self._partial and not self._inline:
            return []
        commands: list[list] = []
        append = commands.append
        try:
            if self._partial:
                # The multibulk loop of next_command, inlined (the server's hot path).
                # Whether hiredis holds bytes of a command must be asked after each
                # command: once it has consumed a header, has_data() says False.
                reader = self._reader
                gets, has_data = reader.gets, reader.has_data
                try:
                    while self._partial and (command := gets()) is not False:
                        self._partial = has_data()
                        if command.__class__ is list and command:
                            for arg in command:
                                if arg.__class__ is not bytes:
                                    raise ProtocolError(f"expected '$', got '{_kind(arg)}'")
                            append(command)
                        elif command is not None and command != []:  # Redis ignores "*-1" and "*0"
                            raise ProtocolError(f"expected '*', got '{_kind(command)}'")
                except hiredis.ProtocolError as exc:
                    raise ProtocolError(str(exc).replace("reply type byte", "command type byte")) from None
            if self._inline:
                while (command := self.next_command()) is not None:
                    append(command)
        except ProtocolError as exc:
            if not commands:
                raise
            self._error = exc
        return commands

    def _next_inline(self) -> list | None:
        buf = self._inline
        while buf:
            if buf[0] == 0x2A:  # b"*": the rest is multibulk again
                data = bytes(buf)
                buf.clear()
                self._partial = True
                self._reader.feed(data)
                return self.next_command()
            end = buf.find(b"\n")
            if end < 0:
                if len(buf) > INLINE_MAX_SIZE:
                    raise ProtocolError("too big inline request")
                return None
            line = bytes(buf[:end]).rstrip(b"\r")
            del buf[: end + 1]
            words = split_inline(line)
            if words:  # empty lines are ignored, as Redis does
                return words
        return None

    def has_input(self) -> bool:
        """Whether bytes wait to be returned as commands (or an error to be raised):
        if not, pull() returns []."""
        return self._partial or bool(self._inline) or self._error is not None

    def pending_bytes(self) -> int:
        """Bytes received but not yet returned as commands (for query buffer limits)."""
        return len(self._inline) + (self._reader.len() if self._partial else 0)


def _kind(value) -> str:
    """The RESP type byte hiredis decoded ``value`` from, for error messages."""
    return {int: ":", bytes: "$", str: "+", list: "*", type(None): "$-1"}.get(type(value), "?")


def split_inline(line: bytes) -> list[bytes]:
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
