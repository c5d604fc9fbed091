"""Server configuration: the option table, config files and ``--name value`` arguments.

Names and value formats follow Redis (``512mb``, ``yes``/``no``), so a redis.conf
habit carries over.  An option marked ``runtime`` may be changed with CONFIG SET.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable


class ConfigError(ValueError):
    """A configuration name or value is not acceptable; the text says why."""


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}


def parse_memory(text: str) -> int:
    """Redis memory notation: 512mb, 1gb, 100k, 42."""
    match = re.fullmatch(r"(\d+)([a-z]*)", text.strip().lower())
    if not match or match.group(2) not in _UNITS:
        raise ConfigError(f"argument must be a memory value: {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_int(text: str, minimum: int = 0) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise ConfigError(f"argument couldn't be parsed into an integer: {text!r}") from None
    if value < minimum:
        raise ConfigError(f"argument must be >= {minimum}: {text!r}")
    return value


def parse_databases(text: str) -> int:
    """Only 1: with more, a client given ``redis://host/1`` would be told at connect
    time that SELECT 1 fails; refusing the file at load says it where it is set."""
    value = parse_int(text, 1)
    if value != 1:
        raise ConfigError(f"databases must be 1: tstream has one database (0), not {value}")
    return value


def parse_policy(text: str) -> str:
    """Only ``noeviction``: dropping a log's entries to make room would lose data a
    consumer has not read (streams trim themselves with max_len / max_age_ms)."""
    if text.strip().lower() != "noeviction":
        raise ConfigError("only noeviction is supported: tstream never evicts data to make room")
    return "noeviction"


def parse_type_name(text: str) -> str:
    """``tstream`` or ``stream``: the name TYPE and SCAN's TYPE filter use."""
    name = text.strip().lower()
    if name not in ("tstream", "stream"):
        raise ConfigError("stream-type-name must be tstream or stream")
    return name


def parse_bool(text: str) -> bool:
    word = text.strip().lower()
    if word in ("yes", "true", "1"):
        return True
    if word in ("no", "false", "0"):
        return False
    raise ConfigError(f"argument must be 'yes' or 'no': {text!r}")


def parse_save(text: str) -> list[tuple[int, int]]:
    """Save points: pairs of "seconds changes"; an empty string disables them."""
    words = text.split()
    if len(words) % 2:
        raise ConfigError(f"save takes pairs of seconds and changes: {text!r}")
    return [(parse_int(s, 1), parse_int(c, 0)) for s, c in zip(words[::2], words[1::2])]


class OutputLimits(tuple):
    """``(hard, soft, seconds)`` of normal clients, with ``pubsub``: those of
    clients subscribed to channels (Redis's default ``pubsub 32mb 8mb 60``), and
    ``replica``: those of the stream a primary holds for a replica (``256mb 64mb 60``)."""

    pubsub: tuple[int, int, int]
    replica: tuple[int, int, int]

    def __new__(cls, normal: tuple[int, int, int], pubsub: tuple[int, int, int],
                replica: tuple[int, int, int] = (256 << 20, 64 << 20, 60)) -> "OutputLimits":
        limits = super().__new__(cls, normal)
        limits.pubsub = pubsub
        limits.replica = replica  # (what a primary holds for a replica: server.replication)
        return limits


def parse_output_limit(text: str) -> OutputLimits:
    """Redis's ``client-output-buffer-limit``: ``<class> <hard> <soft> <seconds>``
    groups; classes normal, replica (alias slave: the stream a primary holds for
    a replica, server.replication) and pubsub."""
    words = text.split()
    if not words or len(words) % 4:
        raise ConfigError(f"expected <class> <hard> <soft> <seconds> groups: {text!r}")
    normal, pubsub, replica = (0, 0, 0), (32 << 20, 8 << 20, 60), (256 << 20, 64 << 20, 60)
    for i in range(0, len(words), 4):
        kind = words[i].lower()
        if kind not in ("normal", "replica", "slave", "pubsub"):
            raise ConfigError(f"unknown client class {words[i]!r}")
        values = (parse_memory(words[i + 1]), parse_memory(words[i + 2]), parse_int(words[i + 3]))
        if kind == "normal":
            normal = values
        elif kind == "pubsub":
            pubsub = values
        else:
            replica = values
    return OutputLimits(normal, pubsub, replica)


def parse_replicaof(text: str) -> str:
    """``replicaof``: "<host> <port>", or "" / "no one" for a primary."""
    words = text.split()
    if not words or [w.lower() for w in words] == ["no", "one"]:
        return ""
    if len(words) != 2:
        raise ConfigError("expected <host> <port>")
    return f"{words[0]} {parse_int(words[1], 1)}"


def parse_users(text: str) -> list[str]:
    """``user`` lines accumulate: each value is one user's rules."""
    return [text] if text.strip() else []


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        word = text.strip().lower()
        if word not in choices:
            raise ConfigError(f"argument must be one of {', '.join(choices)}: {text!r}")
        return word

    return parse


def _text(text: str) -> str:
    return text


@dataclass(frozen=True)
class Option:
    default: str
    parse: Callable[[str], Any]
    runtime: bool  # may be changed with CONFIG SET
    help: str


def _show_bool(value: bool) -> str:
    return "yes" if value else "no"


OPTIONS: dict[str, Option] = {
    "port": Option("6380", lambda t: parse_int(t, 0), False, "TCP port to listen on (0: any free port)"),
    "bind": Option("127.0.0.1", _text, False, "addresses to listen on, space separated"),
    "dir": Option(".", _text, False, "directory of the snapshot and the append-only files"),
    "dbfilename": Option("dump.tsr", _text, True, "snapshot file name, inside dir"),
    "save": Option("3600 1 300 100 60 10000", parse_save, True, "snapshot save points: seconds changes ... (\"\": none)"),
    "stop-writes-on-bgsave-error": Option("yes", parse_bool, True, "refuse writes (MISCONF) while the last background save failed and save points are set"),
    "appendonly": Option("no", parse_bool, True, "keep an append-only file"),
    "appendfsync": Option("everysec", _choice("always", "everysec", "no"), True, "when the append-only file is fsynced: always, everysec or no"),
    "aof-fsync-in-thread": Option("no", parse_bool, True, "with appendfsync always: fsync in a thread while the loop answers reads of keys with no unsynced change (shorter waits for readers beside busy writers; fewer writes/s from many small unpipelined writers)"),
    "appenddirname": Option("appendonlydir", _text, False, "directory of the append-only files, inside dir"),
    "aof-load-truncated": Option("yes", parse_bool, True, "start after cutting off a torn last AOF record"),
    "auto-aof-rewrite-percentage": Option("100", lambda t: parse_int(t, 0), True, "rewrite the AOF when it grew this much over its base (0: never)"),
    "auto-aof-rewrite-min-size": Option("64mb", parse_memory, True, "no automatic rewrite below this AOF size"),
    "requirepass": Option("", _text, True, "password of the default user (empty: none)"),
    "user": Option("", parse_users, False, "an ACL user: name and rules, e.g. app on >pw ~app:* +@all (repeatable)"),
    "protected-mode": Option("yes", parse_bool, True, "without a password, accept only loopback clients"),
    "tls-port": Option("0", lambda t: parse_int(t, 0), False, "TLS port to listen on (0: none)"),
    "tls-cert-file": Option("", _text, False, "server certificate (PEM)"),
    "tls-key-file": Option("", _text, False, "server private key (PEM)"),
    "tls-ca-cert-file": Option("", _text, False, "CA certificates to verify client certificates with"),
    "tls-auth-clients": Option("yes", _choice("yes", "no", "optional"), False, "with a CA file: yes requires client certificates, optional checks them if sent, no ignores them"),
    "client-output-buffer-limit": Option("normal 0 0 0 replica 256mb 64mb 60 pubsub 32mb 8mb 60", parse_output_limit, True, "<class> <hard> <soft> <seconds> for classes normal, replica (the stream held for a replica) and pubsub (subscribed clients): close clients whose unsent replies pass these"),
    "maxclients": Option("10000", lambda t: parse_int(t, 1), True, "most clients connected at once"),
    "timeout": Option("0", lambda t: parse_int(t, 0), True, "close clients idle this many seconds (0: never)"),
    "proto-max-bulk-len": Option("512mb", parse_memory, True, "largest bulk string a client may send"),
    "client-query-buffer-limit": Option("1gb", parse_memory, True, "largest unparsed input kept per client"),
    "node-entries": Option("1000", lambda t: parse_int(t, 1), True, "entries per macro node of new streams"),
    "node-max-bytes": Option("1mb", parse_memory, True, "payload bytes of a macro node before it is sealed (0: no limit; a bigger single entry gets a node of its own), for streams created or loaded from now on"),
    "group-max-pending": Option("10000", lambda t: parse_int(t, 1), True, "pending entries per group before reads hand out only retries"),
    "batch-timeout-ms": Option("10000", lambda t: parse_int(t, 1), True, "an atomic batch idle this long is abandoned"),
    "slowlog-log-slower-than": Option("10000", lambda t: parse_int(t, -1), True, "log commands slower than this many microseconds (-1: never)"),
    "slowlog-max-len": Option("128", lambda t: parse_int(t, 0), True, "slow log entries kept"),
    "latency-monitor-threshold": Option("0", lambda t: parse_int(t, 0), True, "record latency events of at least this many ms (0: off)"),
    "loglevel": Option("notice", _choice("debug", "verbose", "notice", "warning", "nothing"), True, "log verbosity: debug, verbose, notice, warning or nothing"),
    "logfile": Option("", _text, False, "log file (empty: stderr)"),
    "maxmemory": Option("0", parse_memory, True, "memory limit: over it (the process's RSS), writes that add data reply -OOM (0: no limit)"),
    "maxmemory-policy": Option("noeviction", parse_policy, True, "only noeviction: tstream never drops data to make room"),
    "databases": Option("1", parse_databases, False, "only 1: tstream has one database, 0 (SELECT 0)"),
    "replicaof": Option("", parse_replicaof, False, "<host> <port> of the primary to replicate (empty: this server is a primary); REPLICAOF changes it"),
    "masterauth": Option("", _text, True, "password to AUTH with at the primary"),
    "masteruser": Option("", _text, True, "ACL user to AUTH as at the primary (with masterauth)"),
    "replica-read-only": Option("yes", parse_bool, True, "a replica refuses writes (-READONLY)"),
    "replica-priority": Option("100", lambda t: parse_int(t, 0), True, "Sentinel promotes the replica with the lowest priority first (0: never)"),
    "repl-backlog-size": Option("1mb", lambda t: max(parse_memory(t), 16384), True, "bytes of the replication stream kept for partial resyncs"),
    "repl-ping-replica-period": Option("10", lambda t: parse_int(t, 1), True, "seconds between the primary's PINGs in the replication stream"),
    "repl-diskless-sync": Option("no", parse_bool, True, "yes: a full resync's snapshot is made in memory and sent from there, never written to the primary's disk"),
    "repl-timeout": Option("60", lambda t: parse_int(t, 1), True, "seconds without data (replica) or ACK (primary) before a replication link is dropped"),
    "min-replicas-to-write": Option("0", lambda t: parse_int(t, 0), True, "refuse writes (-NOREPLICAS) with fewer good replicas than this (0: off)"),
    "min-replicas-max-lag": Option("10", lambda t: parse_int(t, 0), True, "a replica is good while its last ACK is at most this many seconds old"),
    "stream-type-name": Option("tstream", parse_type_name, True,
                               "what TYPE replies for a key: tstream, or stream (as Redis names a stream, for "
                               "tools that check it)"),
}


def show(name: str, value: Any) -> str:
    """A value as CONFIG GET shows it."""
    if isinstance(value, bool):
        return _show_bool(value)
    if name == "save":
        return " ".join(f"{s} {c}" for s, c in value)
    if name == "client-output-buffer-limit":
        return "normal %d %d %d slave %d %d %d pubsub %d %d %d" % (*value, *value.replica, *value.pubsub)
    if name == "user":
        return "\n".join(value)
    return str(value)


class Config:
    """The server's current configuration; attribute names use underscores."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        for name, option in OPTIONS.items():
            self.values[name] = option.parse(option.default)

    def copy_for_update(self) -> "Config":
        """A copy to apply several changes to, then install whole (all or nothing)."""
        copy = Config.__new__(Config)
        copy.values = dict(self.values)
        return copy

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def show(self, name: str) -> str:
        """The value of option ``name`` as CONFIG GET shows it."""
        return show(name, self.values[name])

    def set(self, name: str, text: str, *, at_runtime: bool = False) -> None:
        name = name.lower()
        option = OPTIONS.get(name)
        if option is None:
            raise ConfigError(f"Unknown option or number of arguments for CONFIG SET - '{name}'")
        if at_runtime and not option.runtime:
            raise ConfigError(f"can't set immutable config '{name}'")
        try:
            value = option.parse(text)
            if name == "user":  # repeatable: every line adds a user
                value = self.values.get("user", []) + value
            self.values[name] = value
        except ConfigError as exc:
            raise ConfigError(f"Invalid argument '{text}' for CONFIG SET '{name}' - {exc}") from None

    def load_file(self, path: str) -> None:
        """Read ``name value ...`` lines; blank lines and # comments are ignored."""
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                try:
                    words = shlex.split(line)
                except ValueError as exc:
                    raise ConfigError(f"{path}:{number}: {exc}") from None
                try:
                    self.set(words[0], " ".join(words[1:]))
                except ConfigError as exc:
                    raise ConfigError(f"{path}:{number}: {exc}") from None

    def rewrite(self, path: str) -> None:
        """CONFIG REWRITE: write the current values into the config file ``path``,
        as Redis does: comments, blank lines and the order of the lines are kept,
        each option's first line gets its current value (its other lines go),
        options changed from their defaults and not in the file are added at the
        end.  Written to a temporary file, fsynced, renamed over ``path``.
        Raises OSError."""
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
        out: list[str] = []
        written: set[str] = set()
        for line in lines:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                out.append(line)
                continue
            name = stripped.split(None, 1)[0].lower()
            if name not in OPTIONS:
                out.append(line)
            elif name not in written:
                written.add(name)
                out += self._lines_of(name)
        added = [name for name in OPTIONS if name not in written
                 and self.show(name) != show(name, OPTIONS[name].parse(OPTIONS[name].default))]
        if added:
            out.append("# Generated by CONFIG REWRITE")
            for name in added:
                out += self._lines_of(name)
        temp = f"{path}.rewrite-{os.getpid()}"
        try:
            with open(temp, "w", encoding="utf-8") as handle:
                handle.write("\n".join(out) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    def _lines_of(self, name: str) -> list[str]:
        """The config file lines that set option ``name`` to its current value."""
        if name == "user":
            return [f"user {rules}" for rules in self.values["user"]]
        return [f"{name} {shlex.quote(self.show(name))}"]

    def load_args(self, args: list[str]) -> None:
        """``--name value [value ...]`` pairs from the command line."""
        i = 0
        while i < len(args):
            if not args[i].startswith("--"):
                raise ConfigError(f"expected --option, got {args[i]!r}")
            name = args[i][2:]
            i += 1
            words = []
            while i < len(args) and not args[i].startswith("--"):
                words.append(args[i])
                i += 1
            self.set(name, " ".join(words))
