"""One entry of the command table: the ``Command`` record and ``command()``, the
keyword builder the group modules write their literal entries with (see the
package docstring for what each field means)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..flags import WRITE, categories_of

ONE_KEY = (1, 1, 1)
ALL_KEYS = (1, -1, 1)
NO_KEYS = (0, 0, 0)
SINCE = "0.1.0"  # tstream's first version: every command is in it


@dataclass(frozen=True, eq=False)
class Command:
    name: bytes                   # lower case; b"config|get" for a subcommand
    handler: Callable | None      # None: a container that needs a subcommand
    arity: int
    flags: int
    group: str                    # COMMAND DOCS group: stream, generic, connection, server
    syntax: tuple[str, ...]       # every form, e.g. ("TCONFIG key GET", "TCONFIG key SET ...")
    summary: str
    complexity: str
    acl: tuple[str, ...] = ()     # explicit ACL categories ("@stream"); the implied ones are added
    keys: tuple[int, int, int] = NO_KEYS
    key_access: str = ""          # key spec flags (COMMAND INFO): "RO access", "RW update", "RM delete"
    since: str = SINCE
    run: Callable | None = None
    run_words: tuple[int, ...] = ()  # the word counts of the forms ``run`` takes (default: |arity|)
    subcommands: tuple[Command, ...] = ()
    categories: tuple[str, ...] = field(init=False)  # every ACL category, without "@"
    by_name: dict[bytes, Command] = field(init=False, repr=False)  # subcommand word -> entry

    def __post_init__(self) -> None:
        object.__setattr__(self, "categories", categories_of(self.flags, self.acl))
        by_name = {}
        for sub in self.subcommands:
            container, _, word = sub.name.partition(b"|")
            if container != self.name or not word:
                raise ValueError(f"subcommand {sub.name!r} is not named {self.name!r}|<sub>")
            by_name[word] = sub
        object.__setattr__(self, "by_name", by_name)

    @property
    def text_name(self) -> str:
        return self.name.decode()

    @property
    def container(self) -> bytes | None:
        """The container's name for a subcommand, else None."""
        return self.name.partition(b"|")[0] if b"|" in self.name else None


def command(name: str, handler, *, arity: int, syntax, summary: str, complexity: str, group: str,
            flags: int = 0, acl: str = "", keys=NO_KEYS, key_access: str = "", run=None, subcommands=(),
            since: str = SINCE, run_words: tuple[int, ...] = ()) -> Command:
    """One table entry, written with keywords for readability.  ``syntax`` is one
    form or a list of forms; ``acl`` is space-separated categories; ``key_access``
    defaults to what the flags say (``RW update`` for a write, else ``RO access``).
    Summary and complexity are shown without a final period, as Redis's are."""
    if keys[0] and not key_access:
        key_access = "RW update" if flags & WRITE else "RO access"
    return Command(
        name=name.encode(), handler=handler, arity=arity, flags=flags, group=group,
        syntax=(syntax,) if isinstance(syntax, str) else tuple(syntax), summary=summary.rstrip("."),
        complexity=complexity.rstrip("."), acl=tuple(acl.split()), keys=keys, key_access=key_access,
        since=since, run=run, run_words=tuple(run_words) or ((abs(arity),) if run else ()),
        subcommands=tuple(subcommands),
    )
