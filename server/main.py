"""``tstream-server [config-file] [--name value ...]``: run the server in this process.

``--help`` prints every option of the table in ``config.OPTIONS`` with its default,
so the help can never disagree with what the server accepts.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import ssl
import sys

from tstream.persistence.framing import PersistenceError

from .app import Server
from .collector import CollectorPolicy
from .config import OPTIONS, Config, ConfigError
from .connection import ClientConnection

log = logging.getLogger("tstream.server")

_LEVELS = {"debug": logging.DEBUG, "verbose": logging.INFO, "notice": logging.INFO,
           "warning": logging.WARNING, "nothing": logging.CRITICAL + 1}


def parse_command_line(argv: list[str]) -> tuple[Config, str | None]:
    config = Config()
    config_file = None
    if argv and not argv[0].startswith("--"):
        config_file = os.path.abspath(argv[0])  # (CONFIG REWRITE writes it, whatever the cwd then)
        config.load_file(config_file)
        argv = argv[1:]
    config.load_args(argv)
    return config, config_file


def usage() -> str:
    """The ``--help`` text: how to call the server, then one line per option."""
    def shown(default: str) -> str:
        return f'"{default}"' if not default or " " in default else default

    rows = [(f"--{name}", shown(option.default), "*" if option.runtime else " ", option.help)
            for name, option in OPTIONS.items()]
    name_width = max(len(row[0]) for row in rows)
    default_width = max(len(row[1]) for row in rows)
    lines = [
        "Usage: tstream-server [config-file] [--name value ...]",
        "       tstream-server -v | --version",
        "       tstream-server -h | --help",
        "",
        "A Redis-protocol server for append-only logs (RCP 11), JetStream direct get and",
        "atomic batches. The config file holds the same options as 'name value' lines",
        "(# comments, as in redis.conf); --name value on the command line overrides it.",
        "Memory sizes take Redis units (512mb, 1gb). Options marked * can be changed",
        "at runtime with CONFIG SET.",
        "",
        f"  {'option':<{name_width}}  {'default':<{default_width}}    meaning",
    ]
    lines += [f"  {name:<{name_width}}  {default:<{default_width}}  {runtime} {meaning}"
              for name, default, runtime, meaning in rows]
    lines += ["", "Example: tstream-server /etc/tstream/tstream.conf --port 6390 --appendonly yes"]
    return "\n".join(lines)


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
    if server.config["tls-port"]:
        context = tls_context(server.config)
        for host in server.config["bind"].split():
            listeners.append(await loop.create_server(
                lambda: ClientConnection(server), host.lstrip("-"), server.config["tls-port"],
                ssl=context, reuse_address=True, backlog=511))
    return listeners


def tls_context(config) -> ssl.SSLContext:
    """The server side of TLS: certificate, key, and client certificates when a CA is set."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config["tls-cert-file"], config["tls-key-file"])
    if config["tls-ca-cert-file"]:
        context.load_verify_locations(config["tls-ca-cert-file"])
        context.verify_mode = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL,
                               "no": ssl.CERT_NONE}[config["tls-auth-clients"]]
    return context


async def open_server(server: Server) -> list[asyncio.AbstractServer]:
    """Everything before serving: load the data, attach persistence, bind.

    Shared by the process (``run``) and the embedding (``server.embed``).  Raises
    PersistenceError when the data can't be loaded (no file was changed) and
    OSError when an address can't be bound.
    """
    server.persistence.load()
    server.persistence.attach()
    try:
        listeners = await start(server)
    except BaseException:
        server.persistence.shutdown(False)  # stop the fsync thread, close the AOF
        raise
    log.info("tstream ready to accept connections on port %d (%s)", server.port, server.event_loop_name)
    return listeners


async def serve(server: Server, listeners: list[asyncio.AbstractServer]) -> bool | None:
    """Serve until SHUTDOWN or ``server.request_shutdown``, then the final flush/save."""
    save = await server.serve(listeners)
    await asyncio.sleep(0)  # let the killed clients' transports close
    log.info("tstream is now ready to exit, bye bye...")
    return save


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


async def run(server: Server) -> int:
    try:
        listeners = await open_server(server)
    except PersistenceError as exc:
        log.error("Fatal error loading the data: %s", exc)
        log.error("Refusing to start; no file was changed. Check the files with tstream-check.")
        return 1
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, server.request_shutdown, None)
    # What exists now (modules, the loaded data) lives as long as the process: keep it
    # out of the cyclic collector's full passes, which would otherwise walk it all,
    # and so does what bulk loads add later (server/collector.py).
    # Requests allocate lists that die at once (no cycles): collect the young
    # generation every 10,000 allocations rather than 700.
    server.collector = CollectorPolicy()
    server.collector.install(len(server.keyspace))
    gc.set_threshold(10_000, *gc.get_threshold()[1:])
    await serve(server, listeners)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-v", "--version"):
        from tstream.commands.connection import VERSION
        print(f"tstream-server v={VERSION}")
        return 0
    if args and args[0] in ("-h", "--help"):
        print(usage())
        return 0
    try:
        config, config_file = parse_command_line(args)
    except (ConfigError, OSError) as exc:
        print(f"tstream-server: bad configuration: {exc}", file=sys.stderr)
        return 1
    return run_configured(config, config_file)


def run_configured(config: Config, config_file: str | None) -> int:
    """Run a server with this configuration until it stops; the exit code.

    ``main`` after the command line is parsed; the Docker entrypoint calls it after
    adding the password it read from the environment or a secret file.
    """
    setup_logging(config)
    try:
        server = Server(config, config_file)
    except ValueError as exc:
        print(f"tstream-server: bad configuration: {exc}", file=sys.stderr)
        return 1
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(run(server))
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
