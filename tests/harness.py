"""An in-process harness: the real server, no sockets, a virtual clock.

Drives a real ``tstream.server.app.Server`` (its dispatch table, blocking
registry, end-of-turn machinery, group reads, optionally its append-only file
on a temp dir) through fake transports, fast enough to push tens of thousands
of commands per second through the real dispatch::

    with Harness(node_entries=4) as h:
        c = h.client()                       # a ClientConnection on a FakeTransport
        c.call("TWRITE", "k", "t", "v")      # -> 1 (replies decoded by hiredis)
        c.pipeline([["TREAD", "k", 1, 10]])  # -> [[[1, b"t", b"v"]]]
        h.check()                            # every _check() of every stream/group/index
        h.replay.assert_matches()            # effect log replayed == live keyspace

    ClientConnection (asyncio.Protocol, server/connection.py)
         ^ connection_made / data_received / connection_lost, called directly
         | FakeTransport: write() appends to the client's hiredis Reader
    VirtualLoop (asyncio loop whose time() is the Clock) runs the end-of-turn
         callbacks (server/turns.py) until nothing is ready: deterministic turns.

Why it lives in tests/ and not in the package: it patches the server modules'
clocks (below) and reaches private state (``loop._ready``, ``_check``); an app
embedding tstream should test through ``tstream.server.embed`` and a real client.

The clock.  The server reads the wall clock itself (``time_ns()`` in the
command handlers, ``time.time()`` in the blocking registry and housekeeping);
there is no injectable clock yet.  While a harness with ``virtual_clock=True``
is open, those module-level names are patched (``_CLOCK_TARGETS``) to a
``Clock`` that only moves in ``advance()``, and the loop's ``time()`` follows
it, so entry times, RETRY/expire deadlines, ``max_age_ms`` and BLOCK timeouts
are all deterministic.  The patch is process-wide for the harness's lifetime:
open one harness at a time (tests run sequentially).

The effect recorder.  ``attach_recorder`` is the one place that knows where
the server emits its effect records (today ``server.aof.log(record)``, with
``server.writes.add_sink`` once the write path has sinks); ``Replay`` applies
the recorded records with the AOF loader's own ``persistence.effects.apply``
to a fresh Keyspace and compares it with the live one.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import os
import time as _time
from dataclasses import asdict

import hiredis

from tstream.engine import Keyspace
from tstream.persistence import effects, framing
from tstream.server.app import Server
from tstream.server.connection import ClientConnection
from tstream.server.embed import make_config

ReplyError = hiredis.ReplyError

__all__ = ["Clock", "EffectRecorder", "FakeClient", "FakeTransport", "Harness", "Replay", "ReplyError",
           "attach_recorder", "encode_command", "keyspace_state"]


# --- the clock ------------------------------------------------------------------------


class Clock:
    """A wall clock and a monotonic clock that move only when told to."""

    def __init__(self, start_ns: int = 1_750_000_000 * 10**9) -> None:
        self.ns = start_ns  # wall clock, ns since the epoch
        self.mono_ns = 10**12  # monotonic clock, ns

    def advance(self, ms: float) -> None:
        step = int(ms * 1_000_000)
        self.ns += step
        self.mono_ns += step

    # what the patched modules call
    def time_ns(self) -> int:
        return self.ns

    def time(self) -> float:
        return self.ns / 1e9

    def monotonic(self) -> float:
        return self.mono_ns / 1e9

    def monotonic_ns(self) -> int:
        return self.mono_ns


class _TimeModule:
    """Stands in for the ``time`` module of a patched server module: the clock's
    readings, everything else from the real module."""

    def __init__(self, clock: Clock) -> None:
        self.time = clock.time
        self.time_ns = clock.time_ns
        self.monotonic = clock.monotonic
        self.monotonic_ns = clock.monotonic_ns

    def __getattr__(self, name):
        return getattr(_time, name)


# (module, global name, what replaces it): "module" for a whole ``import time``,
# or the clock method a ``from time import x`` name becomes.  Targets missing
# from the code (a refactor moved them) are skipped; the essential one is checked.
_CLOCK_TARGETS = [
    ("tstream.commands.streams", "time_ns", "time_ns"),
    ("tstream.commands.jetstream", "time_ns", "time_ns"),
    ("tstream.commands.jetstream", "monotonic", "monotonic"),
    ("tstream.commands.writes", "time_ns", "time_ns"),
    ("tstream.server.blocking", "time", "module"),
    ("tstream.server.app", "time", "module"),
    ("tstream.engine.batches", "time", "module"),
    ("tstream.engine.keyspace", "time_ns", "time_ns"),  # when an empty stream's key is due (max_age_ms)
    # The housekeeping's eviction budget (evict_aged: ~2 ms of real time, the rest at the next
    # pass): on the virtual clock it never runs out, so a loaded machine cannot leave aged
    # keys to a later pass that the model does not know about.
    ("tstream.engine.keyspace", "perf_counter_ns", "monotonic_ns"),
]


def _patch_clock(clock: Clock) -> list:
    """Point the server's clock readings at ``clock``; returns what to restore."""
    undo = []
    shim = _TimeModule(clock)
    for module_name, name, what in _CLOCK_TARGETS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if not hasattr(module, name):
            continue
        undo.append((module, name, getattr(module, name)))
        setattr(module, name, shim if what == "module" else getattr(clock, what))
    if not any(m.__name__ == "tstream.commands.streams" for m, _, _ in undo):
        raise RuntimeError("the harness can't find the stream commands' clock (tstream.commands.streams.time_ns)")
    return undo


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is the harness's clock: timers (BLOCK
    timeouts, group retry timers) fire only when the clock is advanced."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    def time(self) -> float:
        return self.clock.monotonic()


# --- the fake network -------------------------------------------------------------------


def encode_command(argv) -> bytes:
    """One RESP multibulk request; str and int arguments are encoded as Redis clients do."""
    parts = [b"*%d\r\n" % len(argv)]
    for arg in argv:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, int):
            arg = b"%d" % arg
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


class FakeTransport(asyncio.Transport):
    """The asyncio.Transport methods ClientConnection uses; writes go to ``received``."""

    def __init__(self, client: "FakeClient", port: int) -> None:
        super().__init__()
        self.client = client
        self.port = port
        self.closing = False
        self.reading = True
        self.written = 0

    def write(self, data) -> None:
        if not self.client.lost:
            data = bytes(data)
            self.written += len(data)
            self.client.reader.feed(data)

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.write(chunk)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        """The server closes: as a real transport, connection_lost follows on the loop."""
        if not self.closing:
            self.closing = True
            self.client.harness.loop.call_soon(self.client._lost)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0  # the fake peer reads everything at once

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", self.port), "sockname": ("127.0.0.1", 6380),
                "socket": None}.get(name, default)


class FakeClient:
    """One client connection: sends requests, decodes the replies (RESP2 or RESP3).

    ``call`` and ``pipeline`` return decoded replies; an error reply is a
    ``ReplyError`` value (not raised), so tests can compare it like any reply.
    """

    def __init__(self, harness: "Harness", protocol: int) -> None:
        self.harness = harness
        self.reader = hiredis.Reader()
        self.lost = False
        self.transport = FakeTransport(self, 40000 + len(harness.clients))
        self.connection = ClientConnection(harness.server)
        harness.run(self._connect())
        if protocol == 3:
            hello = self.call("HELLO", 3)
            assert isinstance(hello, dict) and hello.get(b"proto") == 3, hello

    async def _connect(self) -> None:
        self.connection.connection_made(self.transport)

    def _lost(self) -> None:
        if not self.lost:
            self.lost = True
            self.connection.connection_lost(None)

    @property
    def closed(self) -> bool:
        return self.lost

    @property
    def blocked(self) -> bool:
        return self.connection.blocked is not None

    def send(self, *argvs) -> None:
        """Send requests (argv lists) in one read, run the loop turn, don't wait for replies."""
        self.send_bytes(b"".join(encode_command(argv) for argv in argvs))

    def send_bytes(self, data: bytes) -> None:
        """Raw bytes, as one ``data_received``; then the loop runs until nothing is ready."""
        assert not self.lost, "this client's connection is closed"
        self.harness.run(self._receive(data))

    async def _receive(self, data: bytes) -> None:
        self.connection.data_received(data)
        await self.harness.settle()

    def replies(self) -> list:
        """Every reply decoded so far, and not returned before."""
        out = []
        while (reply := self.reader.gets()) is not False:
            out.append(reply)
        return out

    def pipeline(self, argvs, *, wait_ms: float = 600_000) -> list:
        """Send all the requests in one read and return their replies, in order.

        A request that blocks (TREAD BLOCK) holds the ones after it, as in Redis:
        the clock is moved to the next timer, up to ``wait_ms`` virtual ms, until
        every request got its reply.  With the real clock, nothing is waited for.
        """
        argvs = list(argvs)
        self.send(*argvs)
        out = self.replies()
        waited = 0.0
        while len(out) < len(argvs) and not self.lost and self.harness.virtual_clock:
            step = self.harness.next_timer_ms()
            if step is None or waited + step > wait_ms:
                break
            self.harness.advance(step)
            waited += step
            out += self.replies()
        if len(out) != len(argvs):
            raise AssertionError(f"{len(out)} replies to {len(argvs)} requests "
                                 f"(blocked: {self.blocked}, closed: {self.lost})")
        return out

    def call(self, *argv):
        """One request, its decoded reply (a ReplyError value for an error reply)."""
        return self.pipeline([argv])[0]

    def close(self) -> None:
        """The client goes away (the peer closes the socket)."""
        if not self.lost:
            self.transport.closing = True
            self.harness.run(self._close())

    async def _close(self) -> None:
        self._lost()
        await self.harness.settle()


# --- effects: recording and replaying ----------------------------------------------------


class EffectRecorder:
    """Every effect record the server emits, as the append-only file stores it
    (msgpack-encoded when logged, so later changes to shared objects can't leak in)."""

    def __init__(self) -> None:
        self.packed: list[bytes] = []

    def log(self, record: list) -> None:
        self.packed.append(framing.pack(record))

    def __len__(self) -> int:
        return len(self.packed)

    def record(self, i: int) -> list:
        return framing.unpack(memoryview(self.packed[i])[framing.HEADER.size:])

    @property
    def records(self) -> list:
        return [self.record(i) for i in range(len(self.packed))]


class _Tee:
    """Today's ``server.aof`` slot holds one logger: the recorder and the real AOF both get each record."""

    def __init__(self, *loggers) -> None:
        self.loggers = loggers

    def log(self, record: list) -> None:
        for logger in self.loggers:
            logger.log(record)

    def __getattr__(self, name):
        return getattr(self.loggers[-1], name)


def attach_recorder(server, recorder: EffectRecorder) -> None:
    """Make ``server`` send every effect record to ``recorder`` too.

    The single seam: with a write path that has effect sinks
    (``server.writes.add_sink``) the recorder is one more sink; before it,
    handlers call ``server.aof.log(record)`` when ``server.aof`` is set, so the
    recorder takes that slot (teed with the real AOF when one is open).  Note
    (today's code): CONFIG SET re-attaches persistence and drops the recorder.
    """
    writes = getattr(server, "writes", None)
    if writes is not None and hasattr(writes, "add_sink"):
        writes.add_sink(recorder)
        return
    server.aof = recorder if server.aof is None else _Tee(recorder, server.aof)


def _live_pending(group, stream, now_ms: int) -> list:
    """A group's pending entries that still matter: held and not expired.  Reads
    drop expired and missing pending entries lazily and log nothing for it, so
    the raw lists of a live group and of its replay may differ by those."""
    state = group.export_state()["pending"]
    return sorted(p for p in state if p[3] > now_ms and stream.is_held(p[0]))


def _effective_next(group, stream) -> int:
    """Where the group's next read starts: a read that finds only missing
    entries moves ``next`` over them without logging it, equivalently."""
    offset = max(group.next, stream.first)
    while offset < stream.next_offset and not stream.is_held(offset):
        offset += 1
    return offset


def stream_state(stream, now_ms: int) -> dict:
    """Everything replaying must rebuild, as plain values."""
    return {
        "node_entries": stream.node_entries,
        "first": stream.first,
        "next_offset": stream.next_offset,
        "last_time": stream.last_time,
        "length": stream.length,
        "config": asdict(stream.config),
        "entries": [tuple(e) for e in stream.iter_from(stream.first)],
        "groups": {name: (_effective_next(g, stream), _live_pending(g, stream, now_ms))
                   for name, g in sorted(stream.groups.items())},
    }


def keyspace_state(keyspace, now_ms: int) -> dict:
    return {key: stream_state(stream, now_ms) for key, stream in sorted(keyspace.items())}


def keyspace_digest(keyspace, now_ms: int = 0) -> str:
    """A short digest of a keyspace's state (to see that an error changed nothing)."""
    return hashlib.sha1(repr(keyspace_state(keyspace, now_ms)).encode()).hexdigest()


class Replay:
    """A fresh Keyspace rebuilt from the recorded effects with ``effects.apply``
    (the AOF loader's replay), brought up to date incrementally."""

    def __init__(self, harness: "Harness") -> None:
        self.harness = harness
        self.keyspace = Keyspace()
        self.applied = 0

    def catch_up(self) -> Keyspace:
        recorder = self.harness.recorder
        while self.applied < len(recorder):
            effects.apply(self.keyspace, recorder.record(self.applied))
            self.applied += 1
        return self.keyspace

    def assert_matches(self) -> None:
        """The replayed keyspace equals the live one (entries, offsets, times,
        config, groups' positions and pending state)."""
        self.catch_up()
        now_ms = self.harness.clock.time_ns() // 1_000_000 if self.harness.virtual_clock else _time.time_ns() // 1_000_000
        live = keyspace_state(self.harness.server.keyspace, now_ms)
        replayed = keyspace_state(self.keyspace, now_ms)
        if live != replayed:
            raise AssertionError("replaying the effect log does not rebuild the live keyspace:\n"
                                 + _first_difference(live, replayed))


def _first_difference(live: dict, replayed: dict) -> str:
    if live.keys() != replayed.keys():
        return f"keys: live {sorted(live)} replayed {sorted(replayed)}"
    for key in live:
        for field, value in live[key].items():
            if replayed[key][field] != value:
                return f"{key!r} {field}: live {value!r}\n  replayed {replayed[key][field]!r}"
    return "?"


# --- the harness --------------------------------------------------------------------------


class Harness:
    """A real Server on a VirtualLoop, clients on fake transports, an effect recorder.

    Options are server config options (``node_entries=4``, ``group_max_pending=8``);
    ``save`` defaults to none.  ``aof_dir``: run the real append-only file there
    (``appendonly yes``, loaded and attached as the server does at startup).
    """

    def __init__(self, *, virtual_clock: bool = True, record: bool = True, aof_dir: str | None = None,
                 **options) -> None:
        options.setdefault("save", "")
        if aof_dir is not None:
            options.update(appendonly=True, dir=aof_dir)
        self.virtual_clock = virtual_clock
        self.clock = Clock()
        self._undo = _patch_clock(self.clock) if virtual_clock else []
        self.loop = VirtualLoop(self.clock) if virtual_clock else asyncio.new_event_loop()
        self.clients: list[FakeClient] = []
        self.aof_on = aof_dir is not None
        try:
            self.server = Server(make_config(**options))
            if self.aof_on:
                self.run(self._open_aof())
        except BaseException:
            self._restore_clock()
            self.loop.close()
            raise
        self.recorder = EffectRecorder()
        if record:
            attach_recorder(self.server, self.recorder)
        self.replay = Replay(self)

    async def _open_aof(self) -> None:
        self.server.persistence.load()
        self.server.persistence.attach()

    def __enter__(self) -> "Harness":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Disconnect the clients, flush and close the AOF, restore the clock."""
        try:
            for client in self.clients:
                client.close()
            if self.aof_on:
                self.run(self._shutdown())
            self.loop.close()
        finally:
            self._restore_clock()

    def _restore_clock(self) -> None:
        for module, name, value in reversed(self._undo):
            setattr(module, name, value)
        self._undo = []

    async def _shutdown(self) -> None:
        self.server.persistence.shutdown(False)

    # --- running the loop -----------------------------------------------------------

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    async def settle(self) -> None:
        """Yield until the loop has nothing ready: the end-of-turn work
        (server.turns: blocked readers served, group reads, AOF commit, held
        replies) and whatever it scheduled has run.  Timers wait for advance()."""
        ready = self.loop._ready  # asyncio's queue of callbacks due now
        for _ in range(100_000):
            await asyncio.sleep(0)
            if not ready:
                return
        raise AssertionError("the event loop never went idle")

    def next_timer_ms(self) -> float | None:
        """Virtual ms until the loop's next live timer, or None."""
        timers = [t for t in self.loop._scheduled if not t.cancelled()]
        if not timers:
            return None
        return max(0.0, (min(t.when() for t in timers) - self.loop.time()) * 1000) + 0.001

    def advance(self, ms: float) -> None:
        """Move the virtual clock by ``ms`` and run the timers that fell due
        (BLOCK timeouts, group retry timers) and the turns they cause."""
        assert self.virtual_clock, "advance() needs virtual_clock=True"
        self.clock.advance(ms)
        self.run(self.settle())

    def housekeeping(self) -> None:
        """One pass of the server's periodic housekeeping (Server._cron: time
        eviction, the per-subject limit's DELETE records, batch timeouts, idle
        clients), without scheduling the next one."""
        self.run(self._housekeeping())

    async def _housekeeping(self) -> None:
        server = self.server
        server._cron()
        handle = getattr(server, "_cron_handle", None)
        if handle is not None:
            handle.cancel()
        await self.settle()

    # --- clients and checks -----------------------------------------------------------

    def client(self, protocol: int = 2) -> FakeClient:
        """A new connection; ``protocol=3`` sends HELLO 3 first."""
        client = FakeClient(self, protocol)
        self.clients.append(client)
        return client

    def check(self) -> None:
        """Every structural invariant: each stream's, group's and subject index's check."""
        for _key, stream in self.server.keyspace.items():
            stream._check()
            for group in stream.groups.values():
                group._check(stream)
            if stream._subjects is not None:
                stream._subjects.check()

    def digest(self) -> str:
        return keyspace_digest(self.server.keyspace)

    def reload_aof(self) -> Keyspace:
        """The keyspace the AOF loader rebuilds from the files on disk now."""
        from tstream.persistence import aof

        assert self.aof_on, "no AOF: Harness(aof_dir=...)"
        self.run(self._commit())
        return aof.load(os.path.join(self.server.config["dir"], self.server.config["appenddirname"])).keyspace

    async def _commit(self) -> None:
        self.server.turn_end.run()
        await self.settle()
