"""The errors a command can reply with.

Handlers raise these; the dispatcher is the one boundary that turns them into RESP
error replies.  ``message`` is the whole reply text after the ``-``, starting with
the error code, exactly as the client sees it.
"""

from __future__ import annotations


class CommandError(Exception):
    """A command failed; nothing was changed."""

    default = "ERR"

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default
        super().__init__(self.message)


class SyntaxErr(CommandError):
    default = "ERR syntax error"


class NotAnInteger(CommandError):
    default = "ERR value is not an integer or out of range"


class UnknownCommand(CommandError):
    def __init__(self, name: bytes, args: list) -> None:
        # Redis's text: each argument quoted and followed by a space, while the
        # list is under 128 characters (the last one cut to what is left of them).
        shown = ""
        for arg in args:
            if len(shown) >= 128:
                break
            shown += f"'{_printable(arg)[:128 - len(shown)]}' "
        super().__init__(
            f"ERR unknown command '{_printable(name)}', with args beginning with: {shown}"
        )


class WrongArity(CommandError):
    def __init__(self, name: str) -> None:
        super().__init__(f"ERR wrong number of arguments for '{name}' command")


class NoAuth(CommandError):
    default = "NOAUTH Authentication required."


class WrongPass(CommandError):
    default = "WRONGPASS invalid username-password pair or user is disabled."


def _printable(value: bytes) -> str:
    # Redis shows at most 128 bytes of each argument, with control bytes escaped.
    text = value[:128].decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


class UnknownSubcommand(CommandError):
    """A container command given a subcommand it does not have (Redis's text)."""

    def __init__(self, container: bytes, sub: bytes) -> None:
        super().__init__(
            f"ERR unknown subcommand '{_printable(sub)}'. Try {container.decode().upper()} HELP."
        )


class SubcommandSyntax(CommandError):
    """A subcommand given arguments its arity cannot rule out (Redis's text)."""

    def __init__(self, argv: list) -> None:
        super().__init__(
            f"ERR unknown subcommand or wrong number of arguments for '{_printable(argv[1])}'. "
            f"Try {_printable(argv[0]).upper()} HELP."
        )


def out_of_memory(stored: int, asked: int, offset: int) -> CommandError:
    """The error of an append that ran out of memory (MemoryError) midway: it says
    what was stored (entries that went into sealed nodes stay, and are logged)."""
    if not stored:
        return CommandError("ERR out of memory: nothing was stored")
    return CommandError(f"ERR out of memory after storing {stored} of {asked} entries "
                        f"(offsets {offset}-{offset + stored - 1})")
