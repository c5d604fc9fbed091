"""Request parser: bytes in, complete commands out, no I/O (in the style of h11).

    parser = RequestParser()
    parser.feed(data)
    while (command := parser.next_command()) is not None:
        handle(command)             # a list of bytes: [name, arg1, ...]

or, to take every complete command at once (what the server does, so that it
can see a pipeline's commands together)::

    for command in parser.pull():
        handle(command)

Two parsers share the work:

- ``hiredis.Reader`` decodes, in C, what arrives as whole commands: a read that
  starts at a command boundary goes to it, and when it ends at a boundary too
  (the usual case: a client writes whole commands), nothing else runs;
- the plain-Python ``StrictRequestParser`` (resp/strict.py) takes over from the
  first byte of a command that a read leaves incomplete, of inline text, and of
  anything hiredis refuses.  It checks each header as it arrives, as Redis does:
  ``$9999999999999`` or ``*4000000000`` are refused at once with Redis's error
  text, ``*100000000`` reserves nothing (hiredis would reserve its whole list),
  RESP3 types are ``expected '$', got '%'``, blank lines between commands are
  skipped (``redis-cli --pipe`` ends with one), and the memory of a half-received
  command's arguments is counted by ``pending_bytes`` (many tiny arguments cost
  several times their wire size).  Once that command is complete, the input goes
  back to hiredis.

Where the incomplete command starts is the wire size of the commands hiredis
returned from the read (C-level maps over their arguments, only when a read ends
inside a command); a read whose commands hiredis could have spelled otherwise
(an ignored ``*0``, ``*-1``) is framed again by the strict parser from its
start instead.  A read holding ``*`` and five digits (a count of 10,000 or
more, or such bytes inside a payload: then it only costs speed) goes to the
strict parser whole, since hiredis reserves a list for the count when it reads
the header.  Known difference: a simple string (``+OK``) in an argument's place
is returned by hiredis like a bulk string and taken as one (Redis refuses it).

In front of all this, when it could be built (setup.py, ``optional``), the C
extension ``resp/_speedups.c`` takes a read that is whole multibulks of bulk
strings, the usual read, in one call: ``read_one``, ``read_many`` and ``pull``
ask it first and fall back to the path above for anything it returns None for
(it handles less than hiredis, never more, so the result is the same either
way).  ``TSTREAM_PURE_PYTHON=1`` in the environment leaves it out (tests, A/B).
"""

from __future__ import annotations

import os
import re
from itertools import chain

import hiredis

from .errors import ProtocolError
from .inline import INLINE_MAX_SIZE, split_inline  # noqa: F401  (re-exported)
from .strict import StrictRequestParser

# The C parser (resp/_speedups.c), unless it was not built or is turned off:
# parse_many(data, max_bulk) -> [command, ...] or None, parse_one(data, max_bulk) -> command or None,
# parse_read(data, max_bulk) -> command, or ([command, ...],) for several, or None.
try:
    if os.environ.get("TSTREAM_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("TSTREAM_PURE_PYTHON is set")
    from ._speedups import parse_many, parse_one
except ImportError:
    parse_many = parse_one = None  # type: ignore[assignment]
try:  # (separate: an extension built before parse_read existed still gives the other two)
    if parse_many is None:
        raise ImportError("no C parser")
    from ._speedups import parse_read
except ImportError:
    parse_read = None  # type: ignore[assignment]


def _run_end(commands: list, at: int) -> int:
    """The index after the run of commands that starts at ``at`` (those after it
    with as many words and the same first word): commands/dispatch.py's run
    detection.  resp/_speedups.c's ``run_end`` when built, this otherwise."""
    argv = commands[at]
    if argv.__class__ is not list or not argv:
        return at + 1
    name, words = argv[0], len(argv)
    end = at + 1
    while end < len(commands):
        other = commands[end]
        if other.__class__ is not list or len(other) != words or not (other[0] is name or other[0] == name):
            break
        end += 1
    return end


run_end = _run_end
if parse_read is not None:
    try:
        from ._speedups import run_end  # type: ignore[no-redef,assignment]  # noqa: F401 (re-exported: commands.dispatch)
    except ImportError:  # an extension built before run_end existed
        pass
SPEEDUPS = parse_many is not None  # whether the C parser is in use

# What hiredis must not be given: a multibulk count of 10,000 or more.  hiredis
# reserves, and zeroes, the whole list when it reads the header ("*2147483647"
# would be 16 GB).  (A literal "*" starts the pattern: the scan runs at memchr speed.)
_BIG_COUNT = re.compile(rb"\*[0-9]{5}")
# What may start a header (another command, a nested array): a "*" then a digit.
_HEADER = re.compile(rb"\*[0-9]")

# Bytes around each argument of a canonical multibulk: "$" + digits + "\r\n" ... "\r\n".
_FRAMING = [len(b"%d" % n) + 5 for n in range(10_000)]


def bytes_only(command: list) -> bool:
    """Whether every argument of ``command`` is a bulk string (bytes)."""
    for arg in command:
        if arg.__class__ is not bytes:
            return False
    return True


def wire_size(commands: list) -> int:
    """Bytes of ``commands`` (a list of commands) encoded as canonical RESP
    multibulks; C-level maps over all their arguments at once."""
    arguments = list(chain.from_iterable(commands))
    lengths = list(map(len, arguments))
    try:
        framing = sum(map(_FRAMING.__getitem__, lengths)) + sum(map(_FRAMING.__getitem__, map(len, commands)))
    except IndexError:  # 10,000 arguments or bytes, or more
        framing = sum(len(b"%d" % n) + 5 for n in lengths) + sum(len(b"%d" % len(c)) + 5 for c in commands)
    return framing - 2 * len(commands) + sum(lengths)  # a header "*N\r\n" is 2 bytes shorter


class RequestParser:
    __slots__ = ("_reader", "_slow", "_slow_mode", "_fresh", "_ready", "_error", "drained", "_max_bulk")

    def __init__(self, max_bulk: int = 512 << 20) -> None:
        self._reader = hiredis.Reader()
        self._slow = StrictRequestParser(max_bulk=max_bulk)
        self._max_bulk = max_bulk  # (the C parser's copy of the strict parser's limit)
        self._slow_mode = False  # the strict parser holds the input (see the module docstring)
        self._fresh: list = []  # reads not parsed yet
        self._ready: list = []  # parsed commands not returned yet (next_command)
        self._error: ProtocolError | None = None  # met by pull() after some commands
        # True when the last pull() returned everything received (an unpipelined
        # client's one command, or a whole pipelined read): the caller need not
        # ask has_input().
        self.drained = False

    @property
    def max_bulk(self) -> int:
        return self._slow.max_bulk

    @max_bulk.setter
    def max_bulk(self, value: int) -> None:
        self._slow.max_bulk = value
        self._max_bulk = value

    def holds_input(self) -> bool:
        """Whether bytes or commands of earlier reads wait here (a read is then not
        the start of the client's input: ``read_first``'s test)."""
        return bool(self._fresh or self._slow_mode or self._ready or self._error is not None)

    def feed(self, data: bytes) -> None:
        """Add bytes received from the client."""
        if self._slow_mode:
            self._slow.feed(data)
        elif data:
            self._fresh.append(data)

    def read_one(self, data: bytes) -> list | None:
        """The command when the read ``data`` is exactly one multibulk of bulk
        strings with a small count and nothing from earlier reads waits (the
        unpipelined client's read): parsed at once, never fed.  Else None, with
        nothing consumed: the caller then feeds ``data`` as usual."""
        if self._fresh or self._slow_mode or self._ready or self._error is not None:
            return None
        if parse_one is not None and (command := parse_one(data, self._max_bulk)) is not None:
            return command  # (else: the path below, which handles more)
        return self._read_one_slow(data)

    def read_first(self, data: bytes) -> list | tuple | None:
        """``read_one``, or (when the C parser is in use) the read's commands in a
        1-tuple ``(commands,)`` when it is several whole multibulks of bulk
        strings: a pipelining client's read is then parsed once, not tried as one
        command first and parsed again by ``read_many``.  None, with nothing
        consumed, for anything else (the caller then goes on as after
        ``read_one``)."""
        if self._fresh or self._slow_mode or self._ready or self._error is not None:
            return None
        if parse_read is not None and (parsed := parse_read(data, self._max_bulk)) is not None:
            return parsed
        return self._read_one_slow(data)

    def _read_one_slow(self, data: bytes) -> list | None:
        """``read_one`` for what the C parser does not take (or without it)."""
        if data[0] != 0x2A or data[1:6].isdigit():
            return None  # inline text, or a count hiredis must not see
        star = data.find(b"*", 1)
        if star > 0 and (data[star + 1:star + 2].isdigit()
                         or (data.find(b"*", star + 1) > 0 and _HEADER.search(data, star + 1) is not None)):
            return None  # another header: several commands (or a nested array)
        # (a "*" not followed by a digit is an argument's byte: XADD key * field value)
        reader = self._reader
        reader.feed(data)
        try:
            command = reader.gets()
        except Exception:  # hiredis refused it: _parse gives Redis's error
            command = None
        if command.__class__ is list and command and not reader.has_data():
            if len(command) == 4:  # the hot shapes (TWRITE k t v, TREAD k o n, TACK k g o), unrolled
                name, first, second, third = command
                if (name.__class__ is bytes and first.__class__ is bytes and second.__class__ is bytes
                        and third.__class__ is bytes):
                    return command
            elif len(command) == 5:  # XADD k * f v
                name, first, second, third, fourth = command
                if (name.__class__ is bytes and first.__class__ is bytes and second.__class__ is bytes
                        and third.__class__ is bytes and fourth.__class__ is bytes):
                    return command
            elif bytes_only(command):
                return command
        self._reader = hiredis.Reader()  # incomplete, or not a plain command: frame it again
        return None

    def read_many(self, data: bytes) -> list | None:  # noqa: C901 (the shapes unrolled: the hot path)
        """The commands of the read ``data`` when it is made of whole multibulks of
        bulk strings and nothing from earlier reads waits (a pipelining client's
        read, redis-benchmark -P 16): parsed at once.  Else None, with ``data`` fed
        as ``feed`` would (the caller then pulls as usual).  A read it cannot parse
        whole leaves no state behind: the reader is replaced and ``pull`` frames
        the read again from its start.

        The scan for huge multibulk counts stays, although no partial state is
        kept: hiredis 3 fills the list it reserves for a header, so
        ``*2147483647`` alone costs seconds and gigabytes (measured: 12 s)."""
        if self._fresh or self._slow_mode or self._ready or self._error is not None:
            self.feed(data)
            return None
        if parse_many is not None and (commands := parse_many(data, self._max_bulk)) is not None:
            return commands  # (else: the path below, which handles more)
        if data[0] != 0x2A or _BIG_COUNT.search(data) is not None:
            self._fresh.append(data)
            return None
        reader = self._reader
        reader.feed(data)
        gets, has_data = reader.gets, reader.has_data
        join = b"".join
        commands = []
        append = commands.append
        at_boundary = False
        try:
            while (command := gets()) is not False:
                # Whether hiredis holds bytes of a command must be asked right after it
                # returned one: once it has consumed a header, has_data() says False.
                at_boundary = not has_data()
                size = len(command)
                if size == 4:  # the hot shapes (TWRITE k t v, TREAD k o n, TACK k g o), unrolled
                    name, first, second, third = command
                    if (name.__class__ is bytes and first.__class__ is bytes and second.__class__ is bytes
                            and third.__class__ is bytes and command.__class__ is list):
                        append(command)
                        continue
                elif size == 5:  # XADD k * f v
                    name, first, second, third, fourth = command
                    if (name.__class__ is bytes and first.__class__ is bytes and second.__class__ is bytes
                            and third.__class__ is bytes and fourth.__class__ is bytes
                            and command.__class__ is list):
                        append(command)
                        continue
                elif size == 6:  # TWRITE k t v MSGID id
                    name, first, second, third, fourth, fifth = command
                    if (name.__class__ is bytes and first.__class__ is bytes and second.__class__ is bytes
                            and third.__class__ is bytes and fourth.__class__ is bytes
                            and fifth.__class__ is bytes and command.__class__ is list):
                        append(command)
                        continue
                elif size == 9:  # BATCH k id seq subject data FAST flow gap
                    # Every word bytes, in one C call: the join raises TypeError for anything
                    # else hiredis gives in a list (an int, None, a nested array, an error),
                    # and the except below leaves the read to pull.  (Nine __class__ tests
                    # cost ~900 instructions a command more in Python 3.11, callgrind.)
                    if command.__class__ is list:
                        join(command)
                        append(command)
                        continue
                elif size and command.__class__ is list and bytes_only(command):
                    append(command)
                    continue
                at_boundary = False  # "*0", "*-1", a nested array: framed by pull
                break
        except Exception:  # hiredis refused it: pull gives Redis's error
            at_boundary = False
        if at_boundary:
            return commands
        self._reader = hiredis.Reader()  # incomplete, or not plain commands: frame it again
        self._fresh.append(data)
        return None

    def next_command(self) -> list | None:
        """The next complete command as a list of bytes, or None if more data is needed.

        Raises ProtocolError on input that is not a command; the connection must then
        be closed, since the stream position is lost.
        """
        if not self._ready:
            self._ready = self.pull()
            self._ready.reverse()
        return self._ready.pop() if self._ready else None

    def pull(self) -> list[list]:
        """Every complete command received so far, in order; [] if more data is needed.

        A protocol error raises ProtocolError, but only once the commands before
        it have been returned (by this call; the error comes with the next).
        """
        if self._ready:
            ready, self._ready = self._ready[::-1], []
            return ready
        fresh = self._fresh
        if not self._slow_mode and self._error is None:
            if not fresh:
                return []  # nothing received since the last call: the usual second call of a turn
            if len(fresh) == 1 and fresh[0].find(b"*", 1) < 0:  # one "*": maybe one command
                lone = self._lone_command(fresh[0])
                if lone is not None:
                    self.drained = True
                    return lone
        self.drained = False
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        commands: list[list] = []
        try:
            self._parse(commands)
            self.drained = not self._fresh and not self._slow_mode  # the read ended at a command's end
        except ProtocolError as exc:
            self._fresh = []
            if not commands:
                raise
            self._error = exc
        return commands

    def _lone_command(self, data: bytes) -> list | None:
        """``[command]`` when the read ``data`` is exactly one multibulk of bulk
        strings with a small count (an unpipelined client's read, the most
        common), else None and nothing consumed (_parse takes the read)."""
        if parse_one is not None and (command := parse_one(data, self._max_bulk)) is not None:
            self._fresh = []
            return [command]
        if data[0] != 0x2A or data[1:6].isdigit():  # (the caller saw no other "*")
            return None
        reader = self._reader
        reader.feed(data)
        try:
            command = reader.gets()
        except Exception:  # hiredis refused it: _parse gives Redis's error
            command = None
        if command.__class__ is list and command and not reader.has_data() and bytes_only(command):
            self._fresh = []
            return [command]
        self._reader = hiredis.Reader()  # incomplete, or not a plain command: frame it again
        return None

    def _parse(self, out: list) -> None:  # noqa: C901 (over the limit when it came in)
        while True:
            if self._slow_mode:
                slow = self._slow
                while (command := slow.next_command()) is not None:
                    out.append(command)
                    if slow.between_commands() and slow.has_input() and slow._buf[slow._pos] == 0x2A:
                        break  # a multibulk command starts: back to hiredis
                else:
                    if slow.has_input():
                        return  # inside a command, or an incomplete line: wait for more
                self._fresh = [slow.take_buffer(), *self._fresh] if slow.has_input() else self._fresh
                self._slow_mode = False
            fresh = self._fresh
            if not fresh:
                return
            data = fresh[0] if len(fresh) == 1 else b"".join(fresh)
            self._fresh = []
            if parse_many is not None and (whole := parse_many(data, self._max_bulk)) is not None:
                out += whole  # the read ended at a command boundary (else: the path below)
                return
            if data[0] != 0x2A or (_BIG_COUNT.search(data) is not None if data.find(b"*", 1) > 0
                                   else data[1:6].isdigit()):  # one "*": only the first count to look at
                # Inline text (or a blank line), or what hiredis must not see: the
                # strict parser takes this read (a match inside a payload only costs speed).
                self._to_slow(data)
                continue
            reader = self._reader
            reader.feed(data)
            start = len(out)
            gets, has_data = reader.gets, reader.has_data
            canonical = True
            # Whether hiredis holds bytes of a command must be asked right after it
            # returned one: once it has consumed a header, has_data() says False.
            at_boundary = False
            try:
                while (command := gets()) is not False:
                    at_boundary = not has_data()
                    if command.__class__ is list and len(command) == 4:  # the hot shapes, unrolled
                        name, first, second, third = command
                        if (name.__class__ is bytes and first.__class__ is bytes and second.__class__ is bytes
                                and third.__class__ is bytes):
                            out.append(command)
                            continue
                        raise ValueError  # the strict parser gives Redis's text
                    if command.__class__ is list and command:
                        for arg in command:
                            if arg.__class__ is not bytes:
                                raise ValueError  # the strict parser gives Redis's text
                        out.append(command)
                    else:
                        canonical = False  # "*0", "*-1": ignored, their size unknown
                        if command is not None and command != []:
                            raise ValueError
                if at_boundary:
                    return  # the read ended at a command boundary: the usual case
            except Exception:  # hiredis refused it, or not a list of bulk strings
                pass
            # The read ends inside a command, or hiredis refused one: the strict
            # parser takes over from that command's first byte.
            self._reader = hiredis.Reader()
            used = wire_size(out[start:]) if canonical else -1
            if used < 0 or used > len(data) or (used and data[used - 2:used] != b"\r\n"):
                del out[start:]  # frame the read again, exactly
                used = 0
            self._to_slow(data[used:] if used else data)

    def _to_slow(self, data: bytes) -> None:
        self._slow.feed(data)
        self._slow_mode = True

    def has_input(self) -> bool:
        """Whether bytes wait to be returned as commands (or an error to be raised):
        if not, pull() returns []."""
        return bool(self._fresh) or bool(self._ready) or self._error is not None or (
            self._slow_mode and self._slow.has_input())

    def pending_bytes(self) -> int:
        """Bytes received but not yet returned as commands, plus the memory of a
        half-received command's arguments (for query buffer limits)."""
        return sum(map(len, self._fresh)) + (self._slow.pending_bytes() if self._slow_mode else 0)
