"""The commands Redis's own tools send: MONITOR, ROLE, MEMORY USAGE|DOCTOR,
OBJECT ENCODING|REFCOUNT|IDLETIME|FREQ, LATENCY DOCTOR (redis-cli --memkeys,
--hotkeys, --latency-history, Sentinel and monitoring agents use them).

MONITOR: every command run by a client is shown to the monitoring clients as
Redis shows it, ``+<unix time.micros> [0 <addr>] "cmd" "arg" ...``.  While no
client monitors, this costs the dispatcher nothing: a monitor makes
``server.refusing`` true, which sends commands through the rare path
(commands/dispatch.py ``_after_running``) where :func:`feed_monitors` runs once
the command ran (so a monitoring client's own line follows its reply, and the
commands of an EXEC come before the EXEC).
"""

from __future__ import annotations

import time

from tstream.resp import NO_REPLY, OK, Status, Verbatim, encode

from .args import to_int
from .errors import CommandError, SyntaxErr
from .flags import ADMIN


def _redacted(argv: list) -> set:
    """The positions of the words Redis hides from monitors: AUTH's password (and
    user), HELLO's AUTH user and password once its version is accepted."""
    name = argv[0].lower()
    if name == b"auth":
        return set(range(1, len(argv))) if len(argv) <= 3 else set()
    if name != b"hello" or len(argv) < 2 or argv[1] not in (b"2", b"3"):
        return set()
    hidden = set()
    i = 2
    while i < len(argv):
        more = len(argv) - 1 - i
        option = argv[i].lower()
        if option == b"auth" and more >= 2:
            hidden |= {i + 1, i + 2}
            i += 3
        elif option == b"setname" and more:
            i += 2
        else:
            break
    return hidden


def _quoted(arg: bytes) -> str:
    """Redis's sdscatrepr: a quoted string with C escapes."""
    out = ['"']
    for byte in arg:
        char = chr(byte)
        if char in '\\"':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif char == "\a":
            out.append("\\a")
        elif char == "\b":
            out.append("\\b")
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append("\\x%02x" % byte)
    out.append('"')
    return "".join(out)


def monitor_line(client, argv: list, now: float) -> str:
    """One MONITOR line (without the ``+``), Redis's format."""
    hidden = _redacted(argv) if argv else set()
    shown = ['"(redacted)"' if i in hidden else _quoted(w) for i, w in enumerate(argv)]
    seconds = int(now)
    return f"{seconds}.{int((now - seconds) * 1_000_000):06d} [0 {client.addr}] " + " ".join(shown)


def feed_monitors(client, argv: list, command) -> bytes | None:
    """Show ``argv``, which ``client`` just ran, to every monitoring client (admin
    commands are not shown, as in Redis).  The line for ``client`` itself, when it
    monitors, is returned instead: it goes after the reply the dispatcher holds."""
    monitors = client.server.monitors
    if not monitors or command.flags & ADMIN:
        return None
    line = monitor_line(client, argv, time.time())
    mine = None
    for monitor in list(monitors):
        frame = encode(Status(line), monitor.protocol)
        if monitor is client:
            mine = frame
        elif not monitor.reply_mode:  # (a line is a reply to Redis: CLIENT REPLY OFF|SKIP drops it)
            monitor.push(frame)
    return mine


def monitor(client, argv):
    """MONITOR

    Streams every command the server runs to this client (no reply when it
    already does; refused inside MULTI, as Redis does). O(1)."""
    if client.in_exec:
        raise CommandError("ERR MONITOR isn't allowed for DENY BLOCKING client")
    server = client.server
    if client in server.monitors:
        return NO_REPLY
    server.monitors.append(client)
    server.update_refusing()
    return OK


def forget_monitor(server, client) -> None:
    """A monitoring client left."""
    if client in server.monitors:
        server.monitors.remove(client)
        server.update_refusing()


def role(client, argv):
    """ROLE

    This server's replication role, as Redis shows it (server/replication.py). O(replicas)."""
    return client.server.replication.role()


def memory_usage(client, argv):
    """MEMORY USAGE key [SAMPLES count]

    The bytes the key takes (its macro nodes, tag table and objects), or null. O(1)."""
    if len(argv) not in (3, 5):
        raise SyntaxErr()
    if len(argv) == 5:
        if argv[3].lower() != b"samples":
            raise SyntaxErr()
        to_int(argv[4])
    stream = client.server.streams.get(argv[2])
    return None if stream is None else stream.memory_bytes()


def memory_doctor(client, argv):
    """MEMORY DOCTOR

    A word on the server's memory. O(1)."""
    return Verbatim("Hi Sam, I can't find any memory issue in your instance. I can only account for what "
                    "occurs on this base.")


def _object_key(client, argv):
    return client.server.streams.get(argv[2])


def object_encoding(client, argv):
    """OBJECT ENCODING key

    ``macronodes`` for a stream, null for a missing key. O(1)."""
    return None if _object_key(client, argv) is None else b"macronodes"


def object_refcount(client, argv):
    """OBJECT REFCOUNT key

    1 for a stream (keys are not shared), null for a missing key. O(1)."""
    return None if _object_key(client, argv) is None else 1


def object_idletime(client, argv):
    """OBJECT IDLETIME key

    Seconds since the key was last written (tstream does not track reads), null
    for a missing key. O(1)."""
    stream = _object_key(client, argv)
    if stream is None:
        return None
    return max(0, int(time.time() - stream.last_time / 1e9)) if stream.last_time else 0


def object_freq(client, argv):
    """OBJECT FREQ key

    Redis's error: access frequencies are kept only under an LFU maxmemory
    policy, and tstream's is noeviction. O(1)."""
    if _object_key(client, argv) is None:
        return None
    raise CommandError("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note "
                       "that when switching between policies at runtime LRU and LFU data will take some time to "
                       "adjust.")


def latency_doctor(client, argv):
    """LATENCY DOCTOR

    A report of the latency events recorded. O(events)."""
    latency = client.server.latency
    events = {name: history for name, history in latency.events.items() if history}
    if not events:
        return Verbatim("Dave, no latency spike was observed during the lifetime of this Redis instance, not in "
                        "the slightest bit. I honestly think you ought to sleep tonight.")
    lines = ["Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, "
             "do you Dave?", ""]
    for i, (name, history) in enumerate(sorted(events.items()), 1):
        samples = [ms for _, ms in history]
        lines.append(f"{i}. {name}: {len(samples)} latency spikes (average {sum(samples) // len(samples)}ms, "
                     f"mean deviation 0ms, period {_period(history)} sec). Worst all time event "
                     f"{latency.maxima.get(name, 0)}ms.")
    lines += ["", "I have a few advices for you:", "",
              "- Check the slow log (SLOWLOG GET) for the commands that took long; tstream's own report of "
              "a long loop turn is the 'event-loop' event."]
    return Verbatim("\n".join(lines) + "\n")


def _period(history) -> int:
    if len(history) < 2:
        return 0
    return (history[-1][0] - history[0][0]) // (len(history) - 1)
