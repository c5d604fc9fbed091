"""Run a tstream server inside another Python program.

Two forms, both built on the code ``tstream-server`` itself runs
(``tstream.server.main.open_server`` then ``tstream.server.main.serve``), so loading, the
append-only file, the final flush and snapshot behave exactly as in the process:

- in an asyncio program, an async context manager on the running loop::

      async with tstream_server(port=0, dir=tmp, save="") as srv:
          r = redis.asyncio.Redis(port=srv.port)

- in a synchronous program or a test suite, a background thread running its own
  event loop (uvloop when installed)::

      with ServerThread(port=0, dir=tmp) as srv:
          r = redis.Redis(port=srv.port)

Options are the server's configuration options (``tstream-server --help``,
docs/configuration.md), given as keyword arguments with ``_`` for ``-``
(``group_max_pending=100``); values may be strings as in a config file, ints,
bools (``appendonly=True``), for ``save`` a list of ``(seconds, changes)``, for a
repeatable option (``user``) a list of lines.
``port=0`` binds any free port; ``srv.port`` tells which.  No signal handler is
installed and no logging handler is set: the host program owns both (the server
logs to the ``tstream`` logger).

Stopping flushes the append-only file and writes the final snapshot when save
points are set, as SIGTERM does (``stop(save=False)`` skips it, ``save=True``
forces it).  A client's ``SHUTDOWN`` stops an embedded server too: the context
body goes on, ``srv.running`` turns false and ``await srv.wait_closed()`` returns.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from .app import Server
from .config import Config
from .main import new_event_loop, open_server, serve

__all__ = ["EmbeddedServer", "ServerThread", "tstream_server", "make_config"]


def _option_text(name: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if name == "save" and isinstance(value, (list, tuple)):
        return " ".join(f"{seconds} {changes}" for seconds, changes in value)
    return str(value)


def make_config(config: Config | None = None, config_file: str | None = None, **options: Any) -> Config:
    """A Config from defaults, an optional config file, then keyword options.

    Raises ``server.config.ConfigError`` (a ValueError) for an unknown option or a
    bad value, and OSError when the config file can't be read.
    """
    if config is None:
        config = Config()
    if config_file is not None:
        config.load_file(config_file)
    for name, value in options.items():
        name = name.replace("_", "-")
        if isinstance(value, (list, tuple)) and name != "save":
            for item in value:  # a repeatable option (user=[...]): one line each
                config.set(name, _option_text(name, item))
        else:
            config.set(name, _option_text(name, value))
    return config


class EmbeddedServer:
    """A tstream server on the running event loop; ``tstream_server(...)`` makes one."""

    def __init__(self, config: Config | None = None, *, config_file: str | None = None,
                 **options: Any) -> None:
        self.config = make_config(config, config_file, **options)
        self.server = Server(self.config, config_file)
        self._task: asyncio.Task | None = None

    # --- where it listens -------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port bound (the real one when ``port=0`` was asked)."""
        return self.server.port

    @property
    def host(self) -> str:
        """The first address of ``bind`` (where a local client should connect)."""
        return self.config["bind"].split()[0].lstrip("-")

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"redis://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    # --- lifecycle --------------------------------------------------------------------

    async def start(self) -> "EmbeddedServer":
        """Load the data, bind and start serving; returns once clients can connect.

        Raises PersistenceError (bad data files, nothing changed) or OSError (an
        address can't be bound).
        """
        if self._task is not None:
            raise RuntimeError("this server was already started")
        listeners = await open_server(self.server)
        self._task = asyncio.create_task(serve(self.server, listeners), name=f"tstream:{self.port}")
        # One turn of the loop: serve() is now waiting for its shutdown request.
        await asyncio.sleep(0)
        return self

    async def stop(self, save: bool | None = None) -> None:
        """Stop serving: close the listeners and every client, flush the append-only
        file, write the final snapshot when save points are set (``save`` True/False
        forces or skips it).  Does nothing more when already stopped."""
        if self._task is None:
            return
        if not self._task.done():
            self.server.request_shutdown(save)
        await asyncio.shield(self._task)

    async def wait_closed(self) -> None:
        """Return when the server has stopped (``stop`` or a client's SHUTDOWN)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def __aenter__(self) -> "EmbeddedServer":
        return await self.start()

    async def __aexit__(self, *exc_info) -> None:
        await self.stop()


def tstream_server(config: Config | None = None, *, config_file: str | None = None,
                   **options: Any) -> EmbeddedServer:
    """``async with tstream_server(port=0, dir=...) as srv:`` serves on the running loop."""
    return EmbeddedServer(config, config_file=config_file, **options)


class ServerThread:
    """A tstream server in a background thread with its own event loop.

    ``start()`` returns once clients can connect (or raises what stopped the
    server from starting); ``stop()`` shuts it down like SIGTERM and joins the
    thread.  Also a context manager.  ``server`` is the live ``Server``: touch it
    only from the server's loop (``call(fn, *args)`` runs ``fn`` there).
    """

    def __init__(self, config: Config | None = None, *, config_file: str | None = None,
                 use_uvloop: bool = True, **options: Any) -> None:
        self.embedded = EmbeddedServer(config, config_file=config_file, **options)
        self._use_uvloop = use_uvloop
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._save: bool | None = None

    @property
    def server(self) -> Server:
        return self.embedded.server

    @property
    def config(self) -> Config:
        return self.embedded.config

    @property
    def port(self) -> int:
        return self.embedded.port

    @property
    def host(self) -> str:
        return self.embedded.host

    @property
    def url(self) -> str:
        return self.embedded.url

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.embedded.running

    def start(self, timeout: float = 30.0) -> "ServerThread":
        if self._thread is not None:
            raise RuntimeError("this server thread was already started")
        self._thread = threading.Thread(target=self._run, name="tstream-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"tstream server did not start within {timeout} s")
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self

    def stop(self, save: bool | None = None, timeout: float = 30.0) -> None:
        """Shut down (final flush/save as SIGTERM; ``save`` forces or skips the
        snapshot) and join the thread."""
        thread = self._thread
        if thread is None:
            return
        if thread.is_alive():
            self._save = save
            try:
                self._loop.call_soon_threadsafe(self._stop_event.set)
            except RuntimeError:  # the loop already closed: it stopped by itself (SHUTDOWN)
                pass
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError(f"tstream server thread did not stop within {timeout} s")
        if self._error is not None and self._ready.is_set():
            error, self._error = self._error, None
            raise error

    def call(self, fn, *args, timeout: float = 30.0):
        """Run ``fn(*args)`` on the server's loop and return its result."""
        async def invoke():
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(invoke(), self._loop).result(timeout)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # --- the thread -------------------------------------------------------------------

    def _run(self) -> None:
        factory = new_event_loop if self._use_uvloop else asyncio.new_event_loop
        try:
            with asyncio.Runner(loop_factory=factory) as runner:
                runner.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported by start()/stop()
            if self._error is None:
                self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        try:
            await self.embedded.start()
        except BaseException as exc:
            self._error = exc
            return
        finally:
            self._ready.set()
        stop_requested = asyncio.create_task(self._stop_event.wait())
        closed = asyncio.create_task(self.embedded.wait_closed())
        await asyncio.wait({stop_requested, closed}, return_when=asyncio.FIRST_COMPLETED)
        stop_requested.cancel()
        await self.embedded.stop(self._save)
