"""``tstream-server [config-file] [--name value ...]``: run the server in this process."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from persistence.framing import PersistenceError

from .app import Server
from .config import Config, ConfigError
from .connection import ClientConnection

log = logging.getLogger("tstream.server")

_LEVELS = {"debug": logging.DEBUG, "verbose": logging.INFO, "notice": logging.INFO,
           "warning": logging.WARNING, "nothing": logging.CRITICAL + 1}


def parse_command_line(argv: list[str]) -> tuple[Config, str | None]:
    config = Config()
    config_file = None
    if argv and not argv[0].startswith("--"):
        config_file = argv[0]
        config.load_file(config_file)
        argv = argv[1:]
    config.load_args(argv)
    return config, config_file


def setup_logging(config: Config) -> None:
    handler = logging.FileHandler(config["logfile"]) if config["logfile"] else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(process)d:M %(asctime)s %(levelname)s %(message)s",
                                           "%d %b %Y %H:%M:%S"))
    root = logging.getLogger("tstream")
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS[config["loglevel"]])


async def start(server: Server) -> list[asyncio.AbstractServer]:
    """Bind every address of ``bind`` and start accepting clients."""
    loop = asyncio.get_running_loop()
    server.event_loop_name = type(loop).__module__.split(".")[0]
    listeners = []
    for host in server.config["bind"].split():
        listeners.append(await loop.create_server(
            lambda: ClientConnection(server), host.lstrip("-"), server.config["port"],
            reuse_address=True, backlog=511))
    server.port = listeners[0].sockets[0].getsockname()[1]
    return listeners


async def run(server: Server) -> int:
    try:
        server.persistence.load()
    except PersistenceError as exc:
        log.error("Fatal error loading the data: %s", exc)
        log.error("Refusing to start; no file was changed. Check the files with tstream-check.")
        return 1
    server.persistence.attach()
    listeners = await start(server)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, server.request_shutdown, None)
    log.info("tstream ready to accept connections on port %d (%s)", server.port, server.event_loop_name)
    await server.serve(listeners)
    log.info("tstream is now ready to exit, bye bye...")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-v", "--version"):
        from commands.connection import VERSION
        print(f"tstream-server v={VERSION}")
        return 0
    if args and args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    try:
        config, config_file = parse_command_line(args)
    except (ConfigError, OSError) as exc:
        print(f"tstream-server: bad configuration: {exc}", file=sys.stderr)
        return 1
    setup_logging(config)
    try:
        import uvloop
    except ImportError:
        uvloop = None
    server = Server(config, config_file)
    try:
        if uvloop is not None:
            return uvloop.run(run(server))
        return asyncio.run(run(server))
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
