"""Users, passwords and permissions: enough of Redis's ACL for an app user that may
touch only its own streams.

A user is described by Redis's rule words::

    user app on >s3cret ~app:* +@all -@admin -@dangerous

- ``on``/``off``: enabled or not;
- ``>password`` adds a password, ``<password`` removes one, ``nopass`` allows any,
  ``resetpass`` forgets them all (passwords are kept as SHA-256 digests);
- ``~pattern`` allows the keys matching a glob, ``allkeys`` (``~*``) all of them,
  ``resetkeys`` none;
- ``+@category``/``-@category``, ``+command``/``-command``, ``+container|sub``
  (one subcommand: ``-config +config|get``), ``allcommands`` (``+@all``),
  ``nocommands`` (``-@all``).  A command's categories are those of its entry in
  the command table, as COMMAND INFO and ACL CAT show them (Redis's categories:
  read, write, admin, dangerous, fast, slow, stream, keyspace, connection,
  blocking, ...); an unknown category or command is refused, as in Redis.
- ``&pattern``, ``allchannels`` (``&*``), ``resetchannels``: accepted for
  redis.conf compatibility and shown by ACL LIST, not enforced yet (restricting
  the subjects DGET/MLAST may return is left to do).

The ``default`` user is the one clients are before AUTH; ``requirepass`` sets its
password (without one it is ``nopass``, so clients need no AUTH).
"""

from __future__ import annotations

import hashlib
import hmac

from tstream.commands import flags as F
from tstream.commands.args import KEYWORD_KEYS, keyword_keys
from tstream.commands.errors import CommandError, NoAuth, WrongPass
from tstream.commands.table import find as find_command
from tstream.engine.glob import compile_glob


class NoPerm(CommandError):
    pass


class User:
    def __init__(self, name: str) -> None:
        self.name = name
        self.enabled = False
        self.nopass = False
        self.passwords: set[str] = set()
        self.key_patterns: list[bytes] = []
        self.all_keys = False
        self.subject_patterns: list[bytes] = []
        self.all_subjects = True
        self.categories: dict[str, bool] = {}  # category -> allowed, in rule order
        self.commands: dict[str, bool] = {}
        self.rules: list[str] = []
        self._matchers: list = []

    # --- rules ---------------------------------------------------------------------

    def apply(self, words: list[str]) -> None:
        for word in words:
            self._apply_word(word)
        self._matchers = [compile_glob(p) for p in self.key_patterns]

    def _apply_word(self, word: str) -> None:  # noqa: C901 (over the limit when it came in)
        low = word.lower()
        if low == "on":
            self.enabled = True
        elif low == "off":
            self.enabled = False
        elif low == "nopass":
            self.nopass = True
            self.passwords.clear()
        elif low == "resetpass":
            self.nopass = False
            self.passwords.clear()
        elif word.startswith(">"):
            self.passwords.add(_digest(word[1:].encode()))
            self.nopass = False
        elif word.startswith("<"):
            self.passwords.discard(_digest(word[1:].encode()))
        elif low in ("allkeys", "~*"):
            self.all_keys = True
            self.key_patterns = []
        elif low == "resetkeys":
            self.all_keys = False
            self.key_patterns = []
        elif word.startswith("~"):
            self.key_patterns.append(word[1:].encode())
        elif low in ("allchannels", "&*"):
            self.all_subjects = True
            self.subject_patterns = []
        elif low == "resetchannels":
            self.all_subjects = False
            self.subject_patterns = []
        elif word.startswith("&"):
            self.all_subjects = False
            self.subject_patterns.append(word[1:].encode())
        elif low in ("allcommands", "+@all"):
            self.categories = {"all": True}
            self.commands = {}
        elif low in ("nocommands", "-@all"):
            self.categories = {"all": False}
            self.commands = {}
        elif word[:2] in ("+@", "-@"):
            if low[2:] not in F.CATEGORIES:
                raise ValueError(f"Error in ACL SETUSER modifier '{word}': Unknown command or category name in ACL")
            self.categories[low[2:]] = word[0] == "+"
        elif word[:1] in ("+", "-") and len(word) > 1:
            if find_command(low[1:].encode()) is None:
                raise ValueError(f"Error in ACL SETUSER modifier '{word}': Unknown command or category name in ACL")
            self.commands[low[1:]] = word[0] == "+"
        elif low == "reset":
            self.__init__(self.name)
            return
        else:
            raise ValueError(f"Error in ACL SETUSER modifier '{word}': Syntax error")
        self.rules.append(word)

    # --- checks --------------------------------------------------------------------

    @property
    def restricted(self) -> bool:
        return not self.all_keys or self.categories != {"all": True} or bool(self.commands)

    def check_password(self, password: bytes) -> bool:
        if not self.enabled:
            return False
        if self.nopass:
            return True
        digest = _digest(password)
        return any(hmac.compare_digest(digest, known) for known in self.passwords)

    def may_run(self, name: str, command) -> bool:
        """Whether the user may run ``command`` (``name`` is ``config|get`` for a
        subcommand): a rule naming the subcommand, else one naming its container,
        else the last category rule that covers it."""
        explicit = self.commands.get(name)
        if explicit is None and "|" in name:
            explicit = self.commands.get(name.partition("|")[0])
        if explicit is not None:
            return explicit
        allowed = False
        categories = command.categories
        for category, grant in self.categories.items():
            if category == "all" or category in categories:
                allowed = grant
        return allowed

    def may_access(self, key: bytes) -> bool:
        return self.all_keys or any(m.match(key) for m in self._matchers)

    def describe(self) -> str:
        flags = ["on" if self.enabled else "off"]
        if self.nopass:
            flags.append("nopass")
        flags += [f"#{digest}" for digest in sorted(self.passwords)]
        flags.append("~*" if self.all_keys else " ".join(f"~{p.decode()}" for p in self.key_patterns) or "resetkeys")
        flags.append("&*" if self.all_subjects else " ".join(f"&{p.decode()}" for p in self.subject_patterns))
        grants = [("+@" if ok else "-@") + c for c, ok in self.categories.items()]
        grants += [("+" if ok else "-") + c for c, ok in self.commands.items()]
        flags.append(" ".join(grants) or "-@all")
        return f"user {self.name} " + " ".join(f for f in flags if f)


def _digest(password: bytes) -> str:
    return hashlib.sha256(password).hexdigest()


class AccessControl:
    """The users of a server; the gate every command of a client goes through."""

    def __init__(self) -> None:
        self.users: dict[str, User] = {}
        default = User("default")
        default.apply(["on", "nopass", "~*", "&*", "+@all"])
        self.users["default"] = default

    def set_requirepass(self, password: str) -> None:
        default = self.users["default"]
        default.passwords.clear()
        default.nopass = not password
        if password:
            default.passwords.add(_digest(password.encode()))

    def setuser(self, name: str, words: list[str]) -> None:
        user = self.users.get(name)
        candidate = User(name)
        if user is not None:
            candidate.apply(user.rules)
        candidate.apply(words)  # raises ValueError before anything changes
        self.users[name] = candidate

    def initial_user(self) -> User | None:
        """Who a new connection is: the default user when it needs no password."""
        default = self.users["default"]
        return default if default.enabled and default.nopass else None

    @property
    def has_password(self) -> bool:
        return not self.users["default"].nopass

    def authenticate(self, username: str, password: bytes) -> User:
        user = self.users.get(username)
        if user is None or not user.check_password(password):
            raise WrongPass()
        return user

    def gate_for(self, user: User | None):
        """The dispatcher's per-client check: None when the client may do anything."""
        if user is None:
            return _unauthenticated
        if user.restricted:
            return _restricted_gate(user)
        return None


def _unauthenticated(client, name: bytes, argv: list, command) -> None:
    if not command.flags & F.NOAUTH:
        raise NoAuth()


# Redis 7.0's texts.
NO_KEY_PERMISSION = "NOPERM this user has no permissions to access one of the keys used as arguments"

def _restricted_gate(user: User):
    def gate(client, name: bytes, argv: list, command) -> None:
        text = name.decode("utf-8", "replace")
        if text == "acl|whoami":
            return  # everyone may ask who they are
        if not user.may_run(text, command):
            raise NoPerm(f"NOPERM this user has no permissions to run the '{text}' command")
        first, last, step = command.keys
        if first:
            last = len(argv) + last if last < 0 else last
            for key in argv[first : last + 1 : step]:
                if not user.may_access(key):
                    raise NoPerm(NO_KEY_PERMISSION)
        elif name in KEYWORD_KEYS:  # XREAD, XREADGROUP: the keys after STREAMS
            for key in keyword_keys(name, argv):
                if not user.may_access(key):
                    raise NoPerm(NO_KEY_PERMISSION)

    gate.user = user
    return gate
