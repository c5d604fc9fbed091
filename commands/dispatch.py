"""Run commands: look each up, check its arity and auth, call its handler.

This is the one boundary where CommandError (and any bug) becomes a RESP error
reply, so a bad command never breaks the connection or the server.  It is also
where the write path acts: after the handler returns (or raises, having
changed something first), ``server.writes.commit()`` logs the effects the
handler described, counts its changes and wakes blocked readers (see
commands/writes.py).

Pipelined runs: a command whose table entry has a ``run`` handler (TWRITE, TREAD) and
that arrives several times in a row in one read, each time with as many words
(its entry's ``run_words``; by default its simplest form, exactly |arity|
words), on one key or several, is executed as one run:
one call appends all the entries (those of one key at once) and produces all
the replies.  Clients see the same replies and the same data as with one call
per command (the entries of a run share one timestamp, as those of one
``TWRITE ... ENTRIES`` do).  INFO
commandstats counts every command of the run; the slow log sees the run as
its first command with the whole run's time.
"""

from __future__ import annotations

import logging
import os
from time import perf_counter

from tstream.resp import NO_REPLY, NULL_ARRAY, QUEUED, Raw, encode, encode_bulk, encode_error, encode_integer
from tstream.resp.parser import run_end

from .connection import MUTED, reply_wanted
from .errors import CommandError, UnknownCommand, UnknownSubcommand, WrongArity
from .flags import DENYOOM, FAST, READONLY, WRITE
from .ingest import batch_run, scan_run
from .stats import CommandStats
from .table import COMMANDS
from .tools import feed_monitors
from .transactions import EXEC_REFUSED, NO_MULTI, NOT_QUEUED, Queued, end_transaction

log = logging.getLogger("tstream.commands")


def build_dispatch() -> tuple[dict, dict]:
    """A server's own dispatch table and its per-command statistics.

    The table is COMMANDS in the shape the hot path wants: name -> (canonical
    name, handler, fewest words, most words, is fast, the Command, its
    CommandStats, its run handler or None, its subcommands or None), under the
    lower- and the upper-case spelling (clients send one or the other; other
    spellings go through .lower()).  A container command's subcommands are a
    table of the same shape, by subcommand word (``get`` -> the ``config|get``
    entry), so the dispatcher resolves ``CONFIG GET`` with one more lookup and
    commands without subcommands pay nothing.  The statistics are also returned
    as canonical name (``config|get`` for a subcommand) -> CommandStats, for INFO
    commandstats.  Each server builds its own, so embedded servers in one
    process keep separate counts.
    """
    table, stats = {}, {}

    def entry_of(cmd, subcommands):
        stats[cmd.name] = CommandStats()
        return (cmd.name, cmd.handler, abs(cmd.arity), cmd.arity if cmd.arity > 0 else 1 << 62,
                bool(cmd.flags & FAST), cmd, stats[cmd.name], cmd.run, subcommands)

    for name, cmd in COMMANDS.items():
        subcommands = None
        if cmd.subcommands:
            subcommands = {}
            for word, sub in cmd.by_name.items():
                subcommands[word] = subcommands[word.upper()] = entry_of(sub, None)
        table[name] = table[name.upper()] = entry_of(cmd, subcommands)
    return table, stats


def execute(client, argv: list) -> bytes | None:  # noqa: C901 (one straight path: the hottest code)
    """The encoded reply to ``argv`` for ``client``; None when nothing is to be sent.

    Every command but a pipelined run (``execute_at``) goes through here, once:
    a per-connection mode that must divert commands (MULTI queues them) does it
    in ``_before_running``, behind the one test of the rare cases.
    """
    server = client.server
    table = server.dispatch
    try:
        entry = table[argv[0]]  # (a subscript, not .get(): no method call on the hot path)
    except KeyError:
        entry = table.get(argv[0].lower())
    if entry is None:
        server.stats.errors += 1
        if client.multi is not None:
            client.multi_failed = True
        return encode_error(UnknownCommand(argv[0], argv[1:]).message)
    name, handler, fewest, most, fast, command, stats, run, subcommands = entry
    nargs = len(argv)
    if not fewest <= nargs <= most:
        return _refuse(client, name, stats, WrongArity(name.decode("utf-8", "replace")).message)
    if subcommands is not None and nargs > 1:  # a container: CONFIG GET runs the config|get entry
        entry = subcommands.get(argv[1]) or subcommands.get(argv[1].lower())
        if entry is None:
            server.stats.errors += 1
            if client.multi is not None:
                client.multi_failed = True
            return encode_error(UnknownSubcommand(name, argv[1]).message)
        name, handler, fewest, most, fast, command, stats, run, subcommands = entry
        if not fewest <= nargs <= most:
            return _refuse(client, name, stats, WrongArity(name.decode("utf-8", "replace")).message)
    rare = client.gate is not None or server.refusing or client.multi is not None
    if rare:
        refused = _before_running(client, name, argv, command, stats)  # ACL, OOM, MISCONF, MULTI
        if refused is not None:
            return refused
        if client.subscriptions is not None:  # its own PUBLISH may reach it: in this reply, in order
            client.pushed = []
    started = perf_counter()
    try:
        reply = handler(client, argv)
        if reply.__class__ is int:  # the common TWRITE/TACK reply, without a trip through encode()
            out = integer_reply(reply)  # (encode_integer's, in C: no format string parsed)
        elif reply.__class__ is bytes:  # XADD's id, DGET's payload: a bulk string in both protocols
            out = encode_bulk(reply)
        elif reply is NO_REPLY:
            out = None
        elif reply.__class__ is Queued:  # EXEC: its commands run now, one by one
            out = run_queued(client, reply)
        else:
            out = encode(reply, client.protocol)
    except CommandError as exc:
        stats.failed += 1
        server.stats.errors += 1
        out = encode_error(exc.message)
    except Exception:
        log.exception("command %r failed", argv[:3])
        stats.failed += 1
        server.stats.errors += 1
        out = encode_error("ERR internal error while running the command (see the server log)")
    writes = server.writes
    if writes.pending:  # the one after-write step: effects logged, changes counted, readers woken
        writes.commit()
        if writes.lost:  # its change could not be logged: not acknowledged (Writes.record_lost)
            writes.lost = False
            out = encode_error(NOT_RECORDED)
    elapsed = perf_counter() - started
    stats.calls += 1
    stats.seconds += elapsed
    if elapsed >= server.slow_threshold:
        server.observe_slow(argv, round(elapsed * 1e9), client, fast)
    if rare and (client.reply_mode or client.pushed is not None or server.monitors):
        return _after_running(client, name, argv, command, out)  # CLIENT REPLY, own messages, MONITOR
    return out


# An integer reply, ``encode_integer(value)``: in C (resp/_speedups.c ``integer_reply``,
# a few hundred instructions fewer than the format) unless the extension is off
# (TSTREAM_PURE_PYTHON=1) or not built.
try:
    if os.environ.get("TSTREAM_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("TSTREAM_PURE_PYTHON is set")
    from tstream.resp._speedups import integer_reply
except ImportError:
    integer_reply = encode_integer


def execute_at(client, commands: list, at: int) -> tuple[bytes | None, int]:
    """Execute ``commands[at]``, or the run of commands starting there (see the
    module docstring); returns the encoded reply (None when nothing is to be
    sent) and the index of the next command to execute."""
    argv = commands[at]
    count = len(commands)
    if at + 1 < count:
        following = commands[at + 1]
        # A run needs the next command spelled the same with as many words; the
        # table is asked only then (a run is the pipelined hot path).
        if following[0] == argv[0] and len(following) == len(argv):
            server = client.server
            entry = server.dispatch.get(argv[0])
            if (entry is not None and entry[7] is not None and len(argv) in entry[5].run_words
                    and client.gate is None and not server.refusing and client.multi is None):
                end = run_end(commands, at)  # (one C loop over the commands, resp/_speedups.c)
                # The whole read a run (redis-benchmark -P 16): the list itself, not a copy.
                run = commands if end == count and not at else commands[at:end]
                started = perf_counter()
                try:
                    out = entry[7](client, run)
                except Exception as exc:  # a run fails as a whole, before any change
                    out = _run_failed(client, run, entry[6], exc)
                return run_done(client, out, len(run), entry, started, argv), end
    return execute(client, argv), at + 1


def run_done(client, out: bytes, count: int, entry: tuple, started: float, first) -> bytes:
    """The end of a pipelined run of ``count`` commands (``execute_at``, ``execute_scan``)
    whose handler returned ``out``: the AOF's commit (its changes not logged: none is
    acknowledged), INFO commandstats, the slow log (the run as its ``first``
    command: an argv, or ``(template, batch-seq, data)`` for a scanned read, built
    only then); the replies."""
    server = client.server
    writes = server.writes
    if writes.pending:
        writes.commit()
        if writes.lost:  # the run's changes could not be logged: none is acknowledged
            writes.lost = False
            out = encode_error(NOT_RECORDED) * count
    elapsed = perf_counter() - started
    stats = entry[6]
    stats.calls += count
    stats.seconds += elapsed
    if elapsed >= server.slow_threshold:
        if first.__class__ is tuple:
            template, seq, data = first
            first = [*template[:3], b"%d" % seq, template[4], data, *template[6:]]
        server.observe_slow(first, round(elapsed * 1e9), client, entry[4])
    return out


def execute_scan(client, template: list, data: bytes, max_count: int, max_bulk: int) -> tuple[bytes, int, int] | None:
    """A pipelined read of plain BATCH ... FAST messages executed straight from its
    bytes (server/connection.py ``_read_fast_ingest``): when the run path applies
    to ``template`` (the client's last command) as ``execute_at`` checks it, the
    read's leading commands that are ``template`` again with the batch's next
    batch-seqs run as one run (commands/ingest.py ``scan_run``, at most
    ``max_count``, data of at most ``max_bulk`` bytes): ``(replies, commands
    run, bytes consumed)``; None, with nothing done, when they cannot."""
    server = client.server
    entry = server.dispatch.get(template[0])
    if (entry is None or entry[7] is not batch_run
            or client.gate is not None or server.refusing or client.multi is not None):
        return None
    started = perf_counter()
    scanned = scan_run(client, template, data, max_count, max_bulk)
    if scanned is None:
        return None
    server.stats.fast_scanned += 1
    out, count, consumed, lo, first_data = scanned
    if out.__class__ is not bytes:  # the store raised: a run fails as a whole
        out = _run_failed(client, [template] * count, entry[6], out)
    return run_done(client, out, count, entry, started, (template, lo, first_data)), count, consumed


def run_queued(client, queued: list) -> bytes:
    """EXEC's reply: each queued command run with nothing in between, its reply an
    element; their effects logged as one TXN record (commands.writes)."""
    writes = client.server.writes
    writes.begin_transaction()
    client.in_exec = len(queued) or True  # (CLIENT LIST shows the count, as Redis's multi=)
    replies = []
    try:
        for argv in queued:
            reply = execute(client, argv)
            replies.append(Raw(reply) if reply is not None else NULL_ARRAY)
    finally:
        client.in_exec = False
        writes.end_transaction()
    return encode(replies, client.protocol)


OOM = "OOM command not allowed when used memory > 'maxmemory'."
MONITOR_KEYSPACE = "ERR Replica can't interact with the keyspace"
NOT_RECORDED = "ERR out of memory while recording the change for the append-only file: not acknowledged"


def _before_running(client, name: bytes, argv: list, command, stats: CommandStats) -> bytes | None:
    """The checks a command passes before it runs, in Redis's order, when one of them
    may apply (the dispatcher tests that with one condition): the ACL gate (not
    authenticated yet, or a user with limits), a snapshot capture under way
    (persistence.snapshot.IncrementalCapture: the command's keys are captured
    before they change), OOM over maxmemory, MISCONF while the files can't be
    written, then queuing in MULTI.  The reply when the command
    stops here, else None."""
    server = client.server
    if client.gate is not None:
        try:
            client.gate(client, name, argv, command)
        except CommandError as exc:
            return _refuse(client, name, stats, exc.message)
    capture = server.capture
    if capture is not None:  # a snapshot is being captured: it takes the keys before they change
        first, last, step = command.keys
        if first:
            stop = last + 1 if last >= 0 else len(argv) + last + 1  # -1: to the end
            for key in argv[first:stop:step]:
                capture.before_change(key)
        elif name == b"flushall" or name == b"flushdb":
            capture.before_flush()
    if server.over_maxmemory and not client.in_exec and (
            command.flags & DENYOOM or (name == b"exec" and _queued_denyoom(client))):
        return _refuse(client, name, stats, OOM)
    # MISCONF: Redis refuses PING too.
    denied = server.persistence.denied_writes
    if denied is not None and (command.flags & WRITE or name == b"ping"):
        return _refuse(client, name, stats, denied)
    denied = server.replication.denied_writes  # READONLY replica, NOREPLICAS (server/replication.py)
    if denied is not None and command.flags & WRITE and client.replica is None:
        return _refuse(client, name, stats, denied)
    if server.monitors and (command.flags & (WRITE | READONLY) or name == b"publish") and client in server.monitors:
        return _refuse(client, name, stats, MONITOR_KEYSPACE)  # (Redis: a monitor is a replica)
    if client.multi is not None and name not in NOT_QUEUED:  # kept for EXEC
        return _queue(client, name, argv, stats)
    return None


def _queue(client, name: bytes, argv: list, stats: CommandStats) -> bytes:
    """A command sent in MULTI: queued for EXEC, or refused (which dooms it)."""
    if name in NO_MULTI:  # (PSYNC: its answer and the stream cannot go inside EXEC's reply)
        return _refuse(client, name, stats, "ERR Command not allowed inside a transaction")
    client.multi.append(argv)
    return QUEUED


def _after_running(client, name: bytes, argv: list, command, out: bytes | None) -> bytes | None:
    """What the client is sent after a command that took the rare path, in the order
    Redis writes it to the client's one output buffer: the pub/sub messages the
    command sent to the client itself (its own PUBLISH), then the reply (unless
    CLIENT REPLY OFF|SKIP drops it), then -- the command being shown to the
    monitors once it ran -- its own MONITOR line if it monitors."""
    mode = client.reply_mode
    if mode:  # CLIENT REPLY OFF|SKIP (commands.connection)
        out = reply_wanted(client, out, name)
    pushed = client.pushed
    if pushed is not None:
        client.pushed = None
        if pushed:
            if out is not None:
                pushed.append(out)
            out = b"".join(pushed)
    if client.server.monitors:  # MONITOR shows what ran (commands.tools)
        mine = feed_monitors(client, argv, command)
        if mine is not None and mode not in MUTED:  # (its own line is a reply: dropped as this one's)
            out = mine if out is None else out + mine
    return out


def _queued_denyoom(client) -> bool:
    table = client.server.dispatch
    for argv in client.multi or ():
        entry = table.get(argv[0]) or table.get(argv[0].lower())
        if entry is not None and entry[5].flags & DENYOOM:
            return True
    return False


def _refuse(client, name: bytes, stats: CommandStats, message: str) -> bytes:
    """A command refused before it ran; in MULTI this also dooms the transaction
    (EXECABORT), and a refused EXEC discards it, with Redis's text."""
    stats.rejected += 1
    client.server.stats.errors += 1
    if name == b"exec":
        end_transaction(client)
        message = EXEC_REFUSED + (message[4:] if message.startswith("ERR ") else message)
    elif client.multi is not None:
        client.multi_failed = True
    return encode_error(message)


def _run_failed(client, run: list, stats: CommandStats, exc: Exception) -> bytes:
    """The replies of a pipelined run whose handler raised (``execute_at``): the
    error, once per command (a run fails as a whole, before any change)."""
    stats.failed += len(run)
    client.server.stats.errors += len(run)
    if isinstance(exc, CommandError):
        return encode_error(exc.message) * len(run)
    log.error("run of %d %r commands failed", len(run), run[0][:2], exc_info=exc)
    return encode_error("ERR internal error while running the command (see the server log)") * len(run)
