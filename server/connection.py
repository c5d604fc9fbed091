"""One client connection: an asyncio.Protocol that parses, executes and replies.

Everything that arrives in one ``data_received`` is parsed and executed (pipelining),
and all the replies of that read leave in a single ``transport.write``.

Limits, so that a hostile or broken client cannot make the server allocate:

- before AUTH, requests go through the strict parser, which refuses a multibulk
  of more than 10 arguments or a bulk of more than 16384 bytes from its header,
  and more than 1 MB of unparsed input;
- after AUTH, unparsed input beyond ``client-query-buffer-limit`` (or a command
  still incomplete past ``proto-max-bulk-len``) closes the connection;
- replies: once a run of commands has produced ``REPLY_CHUNK`` bytes, the rest
  waits; when the transport's buffer fills up (a client that does not read its
  replies), ``pause_writing`` stops reading and executing that client's requests
  until the buffer drains, and ``client-output-buffer-limit`` closes a client
  whose unsent replies pass the hard limit (or the soft one for too long).
"""

from __future__ import annotations

import asyncio
import logging
import time

from tstream.commands.dispatch import execute_at
from tstream.resp import ProtocolError, RequestParser, StrictRequestParser, encode_error

log = logging.getLogger("tstream.connection")

REPLY_CHUNK = 1 << 20  # reply bytes one run of commands may produce before yielding
UNAUTHENTICATED_QUERY_LIMIT = 1 << 20
LOOPBACK = ("127.", "::1", "::ffff:127.")


class ClientConnection(asyncio.Protocol):
    def __init__(self, server) -> None:
        self.server = server
        self.parser = RequestParser()
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
        self._queue: list = []  # commands parsed but not executed yet (behind a blocked one)
        self._queue_at = 0
        self._unmeasured = 0  # bytes received since the unparsed input was last measured
        self._holding = False  # replies of this connection wait for the end of the turn
        self.net_in = 0
        self.net_out = 0
        self.commands = 0
        self.closing = False
        self.blocked = None  # the Waiter of a TREAD BLOCK in progress
        self._write_paused = False
        self._soft_limit_since = 0.0

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

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.last_interaction = time.time()
        self.server.stats.net_input += len(data)
        self.net_in += len(data)
        self.parser.feed(data)
        # The unparsed input is measured every 64 KiB received: it can pass a
        # limit by that much at most, and small requests never pay for it.
        self._unmeasured += len(data)
        if self._unmeasured > 65536:
            self._unmeasured = 0
            pending = self.parser.pending_bytes()
            if pending > 65536 and pending > self._query_limit():
                log.warning("closing client %s: %d bytes of unparsed input are over the limit",
                            self.addr, pending)
                self.transport.write(encode_error("ERR Protocol error: query buffer limit reached"))
                self.kill()
                return
        if self.blocked is None and not self._write_paused:
            self._run_commands()

    def _query_limit(self) -> int:
        if self.user is None:
            return UNAUTHENTICATED_QUERY_LIMIT
        config = self.server.config
        return min(config["client-query-buffer-limit"], config["proto-max-bulk-len"] + 65536)

    def _run_commands(self) -> None:
        """Execute every complete command received, then write all their replies at once.

        Stops early when a command blocks the client: the commands after it wait,
        in order, until it is served (as in Redis).
        """
        server = self.server
        replies = []
        produced = 0
        queue, at = self._queue, self._queue_at
        executed = 0
        while True:
            if at >= len(queue):
                if queue:
                    self.last_argv = queue[-1]
                try:
                    queue = self.parser.pull()
                except ProtocolError as exc:
                    replies.append(encode_error(f"ERR Protocol error: {exc}"))
                    self.closing = True
                    queue = []
                at = 0
                if not queue:
                    break
            before = at
            reply, at = execute_at(self, queue, at)
            executed += at - before
            if reply is not None:
                replies.append(reply)
                produced += len(reply)
            if self.closing or self.blocked is not None:
                break
            if produced > REPLY_CHUNK:
                # Let the replies drain before executing more of this client's commands.
                asyncio.get_running_loop().call_soon(self._resume_commands)
                break
        if at:
            self.last_argv = queue[at - 1]
        if self.closing:
            queue, at = [], 0
        self._queue, self._queue_at = queue, at
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
                self._hold(out, self.closing)
                return
            self.transport.write(out)
            if self._write_paused:  # the transport's buffer passed its high-water mark
                self._check_output_limit()
        if self.closing:
            self.transport.close()

    @property
    def last_command(self) -> bytes:
        """The last command executed, as CLIENT LIST's cmd= shows it (client|list)."""
        last = self.last_argv
        if last is None:
            return b"NULL"
        name = last[0].lower()
        return name + b"|" + last[1].lower() if name in _CONTAINERS and len(last) > 1 else name

    def _resume_commands(self) -> None:
        if not self.closing and self.blocked is None and not self._write_paused:
            self._run_commands()

    def _check_output_limit(self) -> None:
        """Called after writes while the transport is over its high-water mark
        (pause_writing): below that, no limit can be near."""
        size = self.transport.get_write_buffer_size()
        hard, soft, seconds = self.server.config["client-output-buffer-limit"]
        if not hard and not soft:
            return
        now = time.monotonic()
        if soft and size > soft:
            self._soft_limit_since = self._soft_limit_since or now
        else:
            self._soft_limit_since = 0.0
        if (hard and size > hard) or (self._soft_limit_since and now - self._soft_limit_since > seconds):
            log.warning("closing client %s: %d bytes of unsent replies are over client-output-buffer-limit",
                        self.addr, size)
            self.kill()

    def set_user(self, user) -> None:
        """Log in as ``user`` (None: not authenticated); picks the parser that fits."""
        self.user = user
        self.gate = self.server.acl.gate_for(user)
        if user is None:
            self.parser = StrictRequestParser(max_multibulk=10, max_bulk=16384)
        elif isinstance(self.parser, StrictRequestParser):
            leftover = self.parser.take_buffer()
            self.parser = RequestParser()
            if leftover:
                self.parser.feed(leftover)

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

    def unblock(self, reply: bytes) -> None:
        """The blocked command is answered: send its reply and go on with the rest."""
        self.blocked = None
        if self.closing:
            return
        self.server.stats.net_output += len(reply)
        self.net_out += len(reply)
        if self.server.hold_replies or self._holding:
            self._hold(reply, False)
        else:
            self.transport.write(reply)
        if self._queue_at < len(self._queue) or self.parser.has_input():
            self._run_commands()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.blocking.forget(self)
        self.server.clients.pop(self.id, None)

    def pause_writing(self) -> None:
        # The client is not reading its replies: stop reading its requests too.
        self._write_paused = True
        if not self.closing:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if not self.closing:
            self.transport.resume_reading()
            if self.blocked is None:
                self._run_commands()  # what arrived before the pause

    # --- what handlers call ---------------------------------------------------------

    def close_after_reply(self) -> None:
        self.closing = True

    def kill(self) -> None:
        """Close the connection now (CLIENT KILL, SHUTDOWN, idle timeout)."""
        self.closing = True
        self.server.blocking.forget(self)
        if self.transport is not None:
            self.transport.close()
        self.server.clients.pop(self.id, None)

    def is_blocked(self) -> bool:
        return self.blocked is not None

    def describe(self) -> str:
        """One CLIENT LIST line, with Redis 7's fields (honest zeros for what tstream lacks)."""
        now = time.time()
        qbuf = self.parser.pending_bytes()
        omem = self.transport.get_write_buffer_size() if self.transport else 0
        flags = ("b" if self.is_blocked() else "") + ("c" if self.closing else "") or "N"
        events = ("" if self._write_paused else "r") + ("w" if omem else "")
        return (
            f"id={self.id} addr={self.addr} laddr={self.laddr} fd={self.fd} "
            f"name={self.name.decode(errors='replace')} age={int(now - self.created)} "
            f"idle={int(now - self.last_interaction)} flags={flags} "
            f"db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf={qbuf} qbuf-free=0 "
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
