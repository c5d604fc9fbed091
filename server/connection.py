"""One client connection: an asyncio.Protocol that parses, executes and replies.

Everything that arrives in one ``data_received`` is parsed and executed (pipelining),
and all the replies of that read leave in a single ``transport.write``.

Limits, so that a hostile or broken client cannot make the server allocate:

- before AUTH, requests go through the strict parser, which refuses a multibulk
  of more than 10 arguments or a bulk of more than 16384 bytes from its header,
  and more than 1 MB of unparsed input;
- after AUTH, unparsed input beyond ``client-query-buffer-limit`` (or a command
  still incomplete past ``proto-max-bulk-len``) closes the connection;
- fairness: one connection executes commands for at most ``TURN_BUDGET_NS``
  (1 ms) or ``REPLY_CHUNK`` bytes of replies per loop turn, in windows of at
  most ``WINDOW`` commands (which also bounds a pipelined run of TWRITEs); the
  rest of its parsed input stays queued, reading from it pauses, and it resumes
  in a later loop turn (server.turns.TurnEnd.defer, round robin), after the other
  ready connections had theirs.  Once the turn's work (all connections,
  server.turns) passes ``TURN_TOTAL_NS`` (0.5 ms), a connection running a pipelined
  read stops at its next look at the clock and one starting one waits for the
  next turn the same way, so that many pipelining clients share a short turn
  (16 busy publishers get about TURN_TOTAL_NS / 16 each) and an unpipelined
  client's command, which still runs at once, waits for one short turn at most.  Replies keep their order and still leave at the end of each turn
  (server.turns), after the turn's AOF records;
- replies: when the transport's buffer fills up (a client that does not read its
  replies), ``pause_writing`` stops reading and executing that client's requests
  until the buffer drains, and ``client-output-buffer-limit`` closes a client
  whose unsent replies pass the hard limit (or the soft one for too long).
"""

from __future__ import annotations

import asyncio
import logging
import time
from time import perf_counter_ns

from tstream.commands.connection import reply_wanted
from tstream.commands.dispatch import execute, execute_at, execute_scan
from tstream.commands.gates import rebase
from tstream.commands.tools import forget_monitor
from tstream.commands.transactions import unwatch_all
from tstream.resp import ProtocolError, RequestParser, StrictRequestParser, encode_error

from .turns import TURN_TOTAL_NS

log = logging.getLogger("tstream.connection")

REPLY_CHUNK = 1 << 20  # reply bytes one run of commands may produce before yielding
TURN_BUDGET_NS = 1_000_000  # time one connection may execute commands in one loop turn
CLOCK_EVERY = 16  # commands between two looks at the clock (the turn budget's granularity)
WINDOW = 256  # commands handed to the dispatcher at once (a run of TWRITEs is at most this long)
UNAUTHENTICATED_QUERY_LIMIT = 1 << 20
LOOPBACK = ("127.", "::1", "::ffff:127.")


class ClientConnection(asyncio.Protocol):
    # One per client: slots keep it small and its attribute reads fast, and make
    # a misspelt attribute an error instead of a new one.
    __slots__ = ("server", "parser", "transport", "id", "name", "lib_name", "lib_ver", "protocol", "user",
                 "gate", "addr", "laddr", "fd", "created", "last_interaction", "last_argv", "commands",
                 "net_in", "net_out", "closing", "blocked", "_queue", "_queue_at", "_parsed", "_parsed_at",
                 "_resume_scheduled", "_backlog_paused", "_unmeasured", "_holding", "bulk_held", "_write_paused",
                 "_soft_limit_since", "_soft_limit_timer", "multi", "multi_failed", "in_exec", "watching",
                 "dirty_cas", "subscriptions", "reply_mode", "pushed", "replica", "replica_port",
                 "__weakref__")

    def __init__(self, server) -> None:
        self.server = server
        self.parser = RequestParser(max_bulk=server.config["proto-max-bulk-len"])
        self.transport: asyncio.Transport | None = None
        self.id = 0
        self.name = b""
        self.lib_name = b""
        self.lib_ver = b""
        self.protocol = 2
        self.user = None  # the ACL user, None until authenticated
        self.gate = None  # the dispatcher's per-command check (see server.acl)
        self.set_user(server.acl.initial_user())
        self.addr = ""
        self.laddr = ""
        self.fd = -1
        self.created = time.time()
        self.last_interaction = self.created
        self.last_argv = None  # the last command executed (see last_command)
        self._queue: list = []  # the window of parsed commands being executed
        self._queue_at = 0
        self._parsed: list = []  # commands pulled from the parser beyond the current window
        self._parsed_at = 0
        self._resume_scheduled = False  # in the turn's backlog: _resume_commands is due (TurnEnd.defer)
        self._backlog_paused = False  # reading paused: parsed commands wait for later turns
        self._unmeasured = 0  # bytes received since the unparsed input was last measured
        self._holding = False  # replies of this connection wait for the end of the turn
        self.bulk_held = False  # ... and some are a pipelined read's: they leave after the others' (server.turns)
        self.net_in = 0
        self.net_out = 0
        self.commands = 0
        self.closing = False
        self.blocked = None  # the Waiter of a TREAD BLOCK in progress
        self._write_paused = False
        self._soft_limit_since = 0.0  # time.monotonic() when the unsent replies passed the soft limit
        self._soft_limit_timer: asyncio.TimerHandle | None = None
        # Transactions (commands.transactions): the queued commands while in MULTI
        # (None outside), a refusal while queuing, EXEC running, the WATCHed keys,
        # and whether one of them changed since WATCH.
        self.multi: list | None = None
        self.multi_failed = False
        self.in_exec = False
        self.watching: set | None = None
        self.dirty_cas = False
        self.subscriptions = None  # channels and patterns subscribed (commands.pubsub), None when none
        self.reply_mode = 0  # CLIENT REPLY: 0 on, else off or skipping (commands.connection)
        # While this subscriber runs a command: the pub/sub frames it sent itself,
        # which go before that command's reply (commands.dispatch._after_running).
        self.pushed: list | None = None
        # Replication (server.replication): the Replica this connection feeds after its
        # PSYNC (exempt from the output limits, as Redis's replica class), and the port
        # its REPLCONF listening-port announced.
        self.replica = None
        self.replica_port = 0

    # --- asyncio.Protocol -----------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        server = self.server
        if len(server.clients) >= server.config["maxclients"]:
            server.stats.rejected += 1
            transport.write(encode_error("ERR max number of clients reached"))
            transport.close()
            self.closing = True
            return
        self.addr = _address(transport.get_extra_info("peername"))
        self.laddr = _address(transport.get_extra_info("sockname"))
        if server.protected_mode_denies(self.addr):
            server.stats.rejected += 1
            transport.write(encode_error(PROTECTED_MODE_MESSAGE))
            transport.close()
            self.closing = True
            return
        self.id = server.new_client_id()
        server.clients[self.id] = self
        server.stats.connections += 1
        sock = transport.get_extra_info("socket")
        self.fd = sock.fileno() if sock is not None else -1
        # The output limits are checked when the transport's buffer passes its
        # high-water mark: a limit set below the default mark lowers it.
        hard, soft, _ = server.config["client-output-buffer-limit"]
        smallest = min(x for x in (hard, soft, 1 << 62) if x)
        try:
            if smallest < transport.get_write_buffer_limits()[1]:
                transport.set_write_buffer_limits(high=smallest)
        except (AttributeError, NotImplementedError):
            pass

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        server = self.server
        # The housekeeping pass's clock, not time.time() per read: idle time is shown in
        # whole seconds (CLIENT LIST) and the idle timeout is checked at that pass's pace.
        self.last_interaction = server.clock
        stats = server.stats
        size = len(data)
        stats.net_input += size
        self.net_in += size
        if self.blocked is None and not self._write_paused and not self._resume_scheduled:
            # The unpipelined client's read, one whole command with nothing queued
            # before it: parsed, executed and answered at once (the hottest path).
            # (Nothing is queued when the client is neither blocked nor paused nor
            # waiting for its next turn, see _run_many.  A read over 64 KiB takes the
            # usual path, so that the query buffer limit sees it as before.)
            last = self.last_argv
            # (a gate -- not authenticated, an ACL user with limits, a connection mode --
            # checks each command: no scan; the strict parser of an unauthenticated
            # client is never asked)
            if last is not None and len(last) == 9 and self.gate is None and self._read_fast_ingest(data, last):
                return  # (a publisher's read of BATCH ... FAST messages, run from its bytes)
            argv = self.parser.read_first(data) if size <= 65536 else None
            if argv.__class__ is list:
                # _run_one(argv), inlined: a call less on the server's hottest path.
                reply = execute(self, argv)
                self.last_argv = argv
                stats.commands += 1
                self.commands += 1
                if reply is not None:
                    size = len(reply)
                    stats.net_output += size
                    self.net_out += size
                    if self._holding or server.hold_replies and not (server.sync_early and self._settled(argv)):
                        self._hold(reply, self.closing)
                        return
                    self.transport.write(reply)
                    if self._write_paused:  # the transport's buffer passed its high-water mark
                        self._check_output_limit()
                if self.closing:
                    self.transport.close()
                return
            if argv is not None:  # (commands,): a pipelined read, parsed already (redis-benchmark -P 16)
                self._run_parsed(argv[0])
                return
            self._read_commands(data, size)
            return
        self.parser.feed(data)
        self._unmeasured += size
        if self._unmeasured > 65536:
            self._limit_query()

    def _read_fast_ingest(self, data: bytes, template: list) -> bool:
        """A fast-ingest publisher's read (issue #16), when its last command was a
        plain 9-word ``BATCH key id seq subject data FAST flow gap`` (``template``)
        and nothing waits before this read: its leading commands that are that
        message again with the batch's next batch-seqs (at most WINDOW) run as one
        pipelined run straight from the read's bytes, with no argv list per command
        (commands/dispatch.py ``execute_scan``: the run path's checks, its
        bookkeeping, BATCH's run handler's store); the rest of the read then goes
        the usual way, as if it had arrived alone.  False, with nothing done, when
        that does not apply (the read then goes the usual way whole)."""
        parser = self.parser
        if (self._queue_at < len(self._queue) or self._parsed or self._backlog_paused
                or parser.holds_input() or self.server.turn_end.over(TURN_TOTAL_NS)):
            return False
        scanned = execute_scan(self, template, data, WINDOW, parser.max_bulk)  # (read_first's limit)
        if scanned is None:
            return False
        out, count, consumed = scanned
        self._send([out], count)
        size = len(data) - consumed
        if size and not self.closing:
            data = data[consumed:]
            if self.blocked is None and not self._write_paused and not self._resume_scheduled:
                argv = parser.read_first(data) if size <= 65536 else None
                if argv.__class__ is list:
                    self._run_one(argv)
                elif argv is not None:
                    self._run_parsed(argv[0])
                else:
                    self._read_commands(data, size)
            else:
                parser.feed(data)
                self._measured(size)
        return True

    def _read_commands(self, data: bytes, size: int) -> None:
        """Parse and execute a read that is not one whole command, with nothing
        queued before it: a pipelining client's read of whole commands
        (redis-benchmark -P 16) is parsed at once, with none of pull()'s framing.
        Once the turn's total is spent, the read is only buffered and waits for a
        later turn (parsing sixteen publishers' reads is work too: done here, it
        would make the turn, and an interactive client's wait, longer)."""
        if self.server.turn_end.over(TURN_TOTAL_NS):
            self.parser.feed(data)
            if self._measured(size):
                self._run_many()  # (finds the turn over: defers the connection)
            return
        queue = self.parser.read_many(data) if size <= 65536 else None  # (else fed to the parser)
        if queue is None:
            if size > 65536:
                self.parser.feed(data)
            if self._measured(size):
                self._run_commands()
        else:
            self._run_parsed(queue)

    def _run_parsed(self, queue: list) -> None:
        """Execute the commands of a read parsed whole (``_read_commands``, or
        ``read_first`` in data_received), with nothing queued before them.  Once
        the turn's total is spent they only wait for a later turn (``_run_many``
        defers them)."""
        if len(queue) <= CLOCK_EVERY and not self.server.turn_end.over(TURN_TOTAL_NS):
            self._run_few(queue)
        else:
            if len(queue) > WINDOW:
                self._parsed, self._parsed_at = queue, 0
                queue = self._next_window()
            self._queue, self._queue_at = queue, 0
            self._run_many()

    def _measured(self, size: int) -> bool:
        """Count ``size`` more bytes fed to the parser, measuring the unparsed input
        every 64 KiB (``_limit_query``); False when that closed the client."""
        self._unmeasured += size
        if self._unmeasured > 65536:
            self._limit_query()
            return not self.closing
        return True

    def _limit_query(self) -> None:
        """The unparsed input is measured every 64 KiB received: it can pass a
        limit by that much at most, and small requests never pay for it."""
        self._unmeasured = 0
        pending = self.parser.pending_bytes()
        if pending > 65536 and pending > self._query_limit():
            log.warning("closing client %s: %d bytes of unparsed input are over the limit",
                        self.addr, pending)
            self.transport.write(encode_error("ERR Protocol error: query buffer limit reached"))
            self.kill()

    def _query_limit(self) -> int:
        if self.user is None:
            return UNAUTHENTICATED_QUERY_LIMIT
        config = self.server.config
        return min(config["client-query-buffer-limit"], config["proto-max-bulk-len"] + 65536)

    def _next_window(self) -> list:
        """The next commands to execute: at most WINDOW of those already pulled
        from the parser, else what the parser has complete (raises ProtocolError)."""
        parsed, at = self._parsed, self._parsed_at
        if at >= len(parsed):
            parsed = self.parser.pull()
            if len(parsed) <= WINDOW:
                self._parsed, self._parsed_at = [], 0
                return parsed
            at = 0
        end = at + WINDOW
        if end >= len(parsed):
            self._parsed, self._parsed_at = [], 0
        else:
            self._parsed, self._parsed_at = parsed, end
        return parsed[at:end] if at or end < len(parsed) else parsed

    def _has_backlog(self) -> bool:
        """Parsed commands (or complete input) wait to be executed."""
        return (self._queue_at < len(self._queue) or self._parsed_at < len(self._parsed)
                or self.parser.has_input())

    def _run_commands(self) -> None:
        """Execute the complete commands received (``_run_many``), with a short cut
        for the unpipelined client: one complete command and nothing left over."""
        if self._queue_at >= len(self._queue) and not self._parsed and not self._backlog_paused:
            try:
                queue = self.parser.pull()
            except ProtocolError as exc:
                self._queue, self._queue_at = [], 0
                self._protocol_error(exc)
                return
            if len(queue) <= CLOCK_EVERY and self.parser.drained:  # all of it received, and short
                if len(queue) == 1:
                    self._run_one(queue[0])
                elif queue:
                    self._run_few(queue)
                return
            if len(queue) > WINDOW:
                self._parsed, self._parsed_at = queue, 0
                queue = self._next_window()
            self._queue, self._queue_at = queue, 0
        self._run_many()

    def _run_one(self, argv: list) -> None:
        """The one command just received (the unpipelined client's path): execute it
        and write its reply, with none of the pipelining bookkeeping.  (The reply's
        write is spelled out here as in ``_run_many``, not shared through a call:
        this is the server's hottest path; data_received has it inlined too.)"""
        server = self.server
        reply = execute(self, argv)
        self.last_argv = argv
        server.stats.commands += 1
        self.commands += 1
        if reply is not None:
            server.stats.net_output += len(reply)
            self.net_out += len(reply)
            if self._holding or server.hold_replies and not (server.sync_early and self._settled(argv)):
                self._hold(reply, self.closing)
                return
            self.transport.write(reply)
            if self._write_paused:  # the transport's buffer passed its high-water mark
                self._check_output_limit()
        if self.closing:
            self.transport.close()

    def _run_few(self, queue: list) -> None:
        """A pipelined read of at most CLOCK_EVERY commands with nothing after them
        (redis-benchmark -P 16): executed without the turn budget's bookkeeping,
        which cannot stop such a read (the budget is looked at every CLOCK_EVERY
        commands, and only matters when more is waiting).  A command that blocks
        the client, or closes it, stops the read as in ``_run_many``."""
        count = len(queue)
        reply, at = execute_at(self, queue, 0)
        if at == count and reply is not None and not self.closing and self.blocked is None:
            # The whole read was one run (redis-benchmark -P 16): its one reply.
            self.last_argv = queue[-1]
            self._queue, self._queue_at = queue, at
            self._send([reply], at)
            return
        replies = [] if reply is None else [reply]
        while at < count and not self.closing and self.blocked is None:
            reply, at = execute_at(self, queue, at)
            if reply is not None:
                replies.append(reply)
        self.last_argv = queue[at - 1]
        if self.closing:
            self._queue, self._queue_at = [], 0
            self._parsed, self._parsed_at = [], 0
        else:
            self._queue, self._queue_at = queue, at  # what a blocked client runs once served
        self._send(replies, at)

    def _protocol_error(self, exc: ProtocolError) -> None:
        """Reply the protocol error (after the replies held, if any) and close."""
        self.closing = True
        self._parsed, self._parsed_at = [], 0
        reply = encode_error(f"ERR Protocol error: {exc}")
        if self.server.hold_replies or self._holding:
            self._hold(reply, True)
            return
        self.transport.write(reply)
        self.transport.close()

    def _run_many(self) -> None:  # noqa: C901 (over the limit when it came in)
        """Execute the complete commands received, then write their replies at once.

        Stops early when a command blocks the client: the commands after it wait,
        in order, until it is served (as in Redis).  Stops too when this turn's
        budget (TURN_BUDGET_NS, REPLY_CHUNK) is spent: the rest runs on the next
        loop turn, and reading from the client pauses until its backlog is done.
        """
        replies = []
        produced = 0
        queue, at = self._queue, self._queue_at
        executed = 0
        # The turn's budget runs from the first window of more than CLOCK_EVERY
        # commands; the clock is read every CLOCK_EVERY commands after that, so a
        # read of a few commands (the unpipelined client) never reads it.
        started = 0
        clock_in = CLOCK_EVERY
        # The loop turn's work (all connections) is over its budget: the next turn runs these
        # commands, so that one turn never holds the others' replies for long (16 pipelining
        # publishers at 1 ms each would make it 16 ms).
        turn_end = self.server.turn_end
        out_of_turn = turn_end.over(TURN_TOTAL_NS) and self._has_backlog()
        while not out_of_turn:
            if at >= len(queue):
                if queue:
                    self.last_argv = queue[-1]
                try:
                    if not self._parsed:  # nothing pulled beyond the last window
                        queue = self.parser.pull()  # the usual case, inlined
                        if len(queue) > WINDOW:
                            self._parsed, self._parsed_at = queue, 0
                            queue = self._next_window()
                    else:
                        queue = self._next_window()
                except ProtocolError as exc:
                    replies.append(encode_error(f"ERR Protocol error: {exc}"))
                    self.closing = True
                    queue = []
                at = 0
                if not queue:
                    break
                if not started and len(queue) > CLOCK_EVERY:
                    started = perf_counter_ns()
            before = at
            reply, at = execute_at(self, queue, at)
            executed += at - before
            if reply is not None:
                replies.append(reply)
                produced += len(reply)
            if self.closing or self.blocked is not None:
                break
            clock_in -= at - before
            if clock_in <= 0 or produced > REPLY_CHUNK:
                clock_in = CLOCK_EVERY
                now = perf_counter_ns()
                if not started:
                    started = now
                if produced > REPLY_CHUNK or now - started > TURN_BUDGET_NS or turn_end.over(TURN_TOTAL_NS):
                    # Let the other connections (and the replies) go first.
                    out_of_turn = at < len(queue) or self._parsed_at < len(self._parsed) or self.parser.has_input()
                    break
        if at:
            self.last_argv = queue[at - 1]
        if self.closing:
            queue, at = [], 0
            self._parsed, self._parsed_at = [], 0
        self._queue, self._queue_at = queue, at
        if out_of_turn:
            self._resume_scheduled = True
            turn_end.defer(self)
            if not self._backlog_paused:
                self._backlog_paused = True
                self._sync_reading()
        elif self._backlog_paused and not self._resume_scheduled:
            self._backlog_paused = False
            self._sync_reading()
        self._send(replies, executed)

    def _send(self, replies: list, executed: int) -> None:
        """Count the ``executed`` commands of a read and send their ``replies`` (at
        once, or held to the end of the turn), then close if asked to."""
        server = self.server
        if executed:
            server.stats.commands += executed
            self.commands += executed
        if replies:
            out = b"".join(replies) if len(replies) > 1 else replies[0]
            server.stats.net_output += len(out)
            self.net_out += len(out)
            # Replies wait for the end of the loop turn when the turn's effects must
            # reach the AOF first, and for pipelined reads: then the turn's replies
            # leave in one burst after every ready client was read, as Redis writes
            # before it sleeps, which wakes a client that holds many connections
            # (redis-benchmark) once per burst instead of once per reply: 1.4x the
            # throughput at -P 16 on 2 cores, half the system time per request.  A
            # lone reply goes at once: holding it costs more than it saves.
            if server.hold_replies or executed > 1 or self._holding:
                if executed > 1:
                    self.bulk_held = True
                self._hold(out, self.closing)
                return
            self.transport.write(out)
            if self._write_paused:  # the transport's buffer passed its high-water mark
                self._check_output_limit()
        if self.closing:
            self.transport.close()

    def _sync_reading(self) -> None:
        """Read from the client unless its replies are not being read or its
        parsed commands wait for later turns."""
        if self.closing or self.transport is None:
            return
        if self._write_paused or self._backlog_paused:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    @property
    def last_command(self) -> bytes:
        """The last command executed, as CLIENT LIST's cmd= shows it (client|list)."""
        last = self.last_argv
        if last is None:
            return b"NULL"
        name = last[0].lower()
        return name + b"|" + last[1].lower() if name in _CONTAINERS and len(last) > 1 else name

    def _resume_commands(self) -> None:
        self._resume_scheduled = False
        if not self.closing and self.blocked is None and not self._write_paused:
            self._run_commands()

    def _check_output_limit(self) -> None:
        """Called after writes while the transport is over its high-water mark
        (pause_writing; connection_made lowers that mark to the smallest limit
        set), when the buffer drains (resume_writing), and by the soft limit's
        timer: a client whose unsent replies pass the hard limit, or stay over the
        soft one for more than its seconds (as Redis counts them), is closed."""
        if self.closing or self.transport is None or self.replica is not None:
            return
        size = self.transport.get_write_buffer_size()
        limits = self.server.config["client-output-buffer-limit"]
        hard, soft, seconds = limits.pubsub if self.subscriptions is not None else limits
        if soft and size > soft:
            now = time.monotonic()
            if not self._soft_limit_since:
                self._soft_limit_since = now
            elif now - self._soft_limit_since > seconds:
                self._close_for_output(size)
                return
            if self._soft_limit_timer is None:
                # Nothing else may happen on this connection (it stopped reading, so
                # we stopped reading its requests): look again once the time is up.
                self._soft_limit_timer = asyncio.get_running_loop().call_at(
                    self._soft_limit_since + seconds + 0.01, self._soft_limit_due)
        else:
            self._soft_limit_since = 0.0
        if hard and size > hard:
            self._close_for_output(size)

    def _soft_limit_due(self) -> None:
        self._soft_limit_timer = None
        if self._soft_limit_since:
            self._check_output_limit()

    def _close_for_output(self, size: int) -> None:
        log.warning("closing client %s: %d bytes of unsent replies are over client-output-buffer-limit",
                    self.addr, size)
        self.kill()

    def set_user(self, user) -> None:
        """Log in as ``user`` (None: not authenticated); picks the parser that fits."""
        self.user = user
        rebase(self, self.server.acl.gate_for(user))  # (modes such as CLIENT REPLY OFF stay)
        if user is None:
            self.parser = StrictRequestParser(max_multibulk=10, max_bulk=16384)
        elif isinstance(self.parser, StrictRequestParser):
            leftover = self.parser.take_buffer()
            self.parser = RequestParser(max_bulk=self.server.config["proto-max-bulk-len"])
            if leftover:
                self.parser.feed(leftover)

    def _settled(self, argv: list) -> bool:
        """Whether the reply to the lone command ``argv`` may leave now although the
        AOF is on (``server.sync_early``: ``appendfsync always``): a read that can
        reveal no change waiting for an fsync (server.persist.Persistence.settled)."""
        return self.server.persistence.settled(self, argv)

    def _hold(self, data: bytes, close: bool) -> None:
        """Keep replies until the end of the loop turn; later ones then wait too, in order."""
        self._holding = True
        self.server.turn_end.hold(self, data, close)

    def write_now(self, data: bytes, close: bool) -> None:
        """Send replies held until the end of the loop turn (see server.turns)."""
        self._holding = False
        if self.transport.is_closing():
            return
        self.transport.write(data)
        if self._write_paused:  # the transport's buffer passed its high-water mark
            self._check_output_limit()
        if close:
            self.transport.close()

    def push(self, data: bytes) -> None:
        """A pub/sub message for this subscriber (commands.pubsub), or a MONITOR
        line: out through the normal reply path, after any reply held or sent
        before it, so that the output buffer limits see it.  One the connection
        sends itself while running a command goes into that command's output
        (``pushed``), after the replies before it.  (Messages are sent under
        CLIENT REPLY OFF too, as Redis 7.0 does.)"""
        if self.closing or self.transport is None:
            return
        if self.pushed is not None:
            self.pushed.append(data)
            return
        self.server.stats.net_output += len(data)
        self.net_out += len(data)
        if self.server.hold_replies or self._holding:
            self._hold(data, False)
            return
        self.transport.write(data)
        if self._write_paused:  # the transport's buffer passed its high-water mark
            self._check_output_limit()

    def unblock(self, reply: bytes) -> None:
        """The blocked command is answered: send its reply and go on with the rest."""
        self.blocked = None
        if self.closing:
            return
        if self.reply_mode:  # CLIENT REPLY OFF, or SKIP before the command that blocked
            reply = reply_wanted(self, reply) or b""
        self.server.stats.net_output += len(reply)
        self.net_out += len(reply)
        if self.server.hold_replies or self._holding:
            self._hold(reply, False)
        else:
            self.transport.write(reply)
        # (_has_backlog(), inlined: this runs once per woken reader)
        if ((self._queue_at < len(self._queue) or self._parsed_at < len(self._parsed) or self.parser.has_input())
                and not self._resume_scheduled and not self._write_paused):
            self._run_commands()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._soft_limit_timer is not None:
            self._soft_limit_timer.cancel()
        self.server.blocking.forget(self)
        self.server.clients.pop(self.id, None)
        if self.watching:
            unwatch_all(self)
        if self.subscriptions is not None:
            self.server.pubsub.forget(self)
        if self.server.monitors:
            forget_monitor(self.server, self)
        if self.replica is not None:
            self.server.replication.forget(self)

    def pause_writing(self) -> None:
        # The client is not reading its replies: stop reading its requests too.
        self._write_paused = True
        self._sync_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._soft_limit_since:
            self._check_output_limit()  # below the soft limit again: its clock restarts
        self._sync_reading()
        if not self.closing and self.blocked is None and not self._resume_scheduled:
            self._run_commands()  # what arrived before the pause

    # --- what handlers call ---------------------------------------------------------

    def close_after_reply(self) -> None:
        self.closing = True

    def kill(self) -> None:
        """Close the connection now (CLIENT KILL, SHUTDOWN, idle timeout)."""
        self.closing = True
        self.server.blocking.forget(self)
        if self.subscriptions is not None:
            self.server.pubsub.forget(self)
        if self.server.monitors:
            forget_monitor(self.server, self)
        if self.replica is not None:
            self.server.replication.forget(self)
        if self.transport is not None:
            self.transport.close()
        self.server.clients.pop(self.id, None)

    def is_blocked(self) -> bool:
        return self.blocked is not None

    def _flags(self) -> str:
        """CLIENT LIST's flags, in Redis's order: O monitor or S replica, P
        subscriber, x in MULTI (or running its EXEC), b blocked, d a WATCHed key
        changed, c closing after the reply."""
        flags = (("O" if self in self.server.monitors else "S" if self.replica is not None else "")
                 + ("P" if self.subscriptions is not None else "")
                 + ("x" if self.multi is not None or self.in_exec else "") + ("b" if self.is_blocked() else "")
                 + ("d" if self.dirty_cas else "") + ("c" if self.closing else ""))
        return flags or "N"

    def describe(self) -> str:
        """One CLIENT LIST line, with Redis 7's fields (honest zeros for what tstream lacks)."""
        now = time.time()
        qbuf = self.parser.pending_bytes()
        omem = self.transport.get_write_buffer_size() if self.transport else 0
        subs = self.subscriptions
        flags = self._flags()
        multi = len(self.multi) if self.multi is not None else int(self.in_exec) if self.in_exec else -1
        events = ("" if self._write_paused else "r") + ("w" if omem else "")
        return (
            f"id={self.id} addr={self.addr} laddr={self.laddr} fd={self.fd} "
            f"name={self.name.decode(errors='replace')} age={int(now - self.created)} "
            f"idle={int(now - self.last_interaction)} flags={flags} "
            f"db=0 sub={len(subs.channels) if subs else 0} psub={len(subs.patterns) if subs else 0} ssub=0 "
            f"multi={multi} qbuf={qbuf} qbuf-free=0 "
            f"argv-mem=0 multi-mem=0 rbs={qbuf} rbp={qbuf} obl=0 oll=0 omem={omem} tot-mem={qbuf + omem} "
            f"events={events} cmd={self.last_command.decode(errors='replace')} "
            f"user={self.user.name if self.user is not None else 'default'} redir=-1 "
            f"resp={self.protocol} lib-name={self.lib_name.decode(errors='replace')} "
            f"lib-ver={self.lib_ver.decode(errors='replace')} "
            f"tot-net-in={self.net_in} tot-net-out={self.net_out} tot-cmds={self.commands}"
        )


# Commands whose first argument is a subcommand, shown as "client|list" in CLIENT LIST.
_CONTAINERS = {b"client", b"config", b"acl", b"command", b"slowlog", b"latency"}


PROTECTED_MODE_MESSAGE = (
    "DENIED tstream is running in protected mode because protected mode is enabled and no "
    "password is set for the default user. In this mode connections are only accepted from the "
    "loopback interface. Set a password (requirepass), or bind only to loopback, or disable "
    "protected mode (protected-mode no) if you really want clients from other hosts to connect "
    "without authentication.")


def is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    return host.startswith(LOOPBACK) or host == "localhost"


def _address(info) -> str:
    if not info:
        return ""
    if isinstance(info, tuple):
        host, port = info[0], info[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(info)
