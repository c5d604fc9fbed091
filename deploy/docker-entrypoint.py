#!/usr/bin/env python3
"""Entrypoint of the tstream Docker image: the password from the environment, then the server.

The image binds 0.0.0.0 so that the host (``-p 127.0.0.1:6380:6380``) and other
containers reach it; their traffic does not come from loopback, so protected mode
refuses it until the ``default`` user has a password. This script supplies it:

    TSTREAM_PASSWORD_FILE=/run/secrets/tstream   the password is the file's content
                                                 (a Docker or Kubernetes secret;
                                                 one trailing newline is dropped)
    TSTREAM_PASSWORD=...                         the password itself (visible in
                                                 ``docker inspect``: prefer the file)

Either one (both is an error) sets ``requirepass``, overriding the config file.

Three ways to call it (the image's ENTRYPOINT is this script, its CMD
``tstream-server --bind 0.0.0.0 --dir /data``):

    tstream-entrypoint tstream-server [config-file] [--name value ...]
        parse the arguments as tstream-server does, add the password, write the
        address the health check must use to TSTREAM_HEALTH_FILE (default
        /tmp/tstream-health.json), then run the server in this process: the
        password never appears on a command line (``ps``, /proc/*/cmdline).
        (the first argument may also be an option, ``--port 7000``, or a ``*.conf``
        file: then ``tstream-server`` is implied, as in Redis's image)
    tstream-entrypoint --healthcheck
        the HEALTHCHECK: connect to the port the server was configured with, AUTH
        with the same password when one is set, PING; exit 0 on +PONG (or on
        -NOAUTH when the password is in a config file this script cannot see).
    tstream-entrypoint anything else
        exec it (``docker run -it tstream sh``).

The health check only needs socket and json: it imports nothing of tstream, so
it costs a few milliseconds every interval.
"""

from __future__ import annotations

import json
import os
import socket
import sys

HEALTH_FILE = "/tmp/tstream-health.json"
LOOPBACK_FOR = {"0.0.0.0": "127.0.0.1", "::": "::1", "*": "127.0.0.1"}


class EntrypointError(Exception):
    """A setting the entrypoint cannot work with; the text says which and why."""


def password_from_environment(env: dict[str, str]) -> str | None:
    """The password TSTREAM_PASSWORD_FILE or TSTREAM_PASSWORD gives, None without either."""
    path, value = env.get("TSTREAM_PASSWORD_FILE"), env.get("TSTREAM_PASSWORD")
    if path and value:
        raise EntrypointError("set TSTREAM_PASSWORD or TSTREAM_PASSWORD_FILE, not both")
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                value = handle.read()
        except OSError as exc:
            raise EntrypointError(f"cannot read TSTREAM_PASSWORD_FILE: {exc}") from None
        # `echo secret > file` and editors end the file with a newline; it is not part of the password.
        value = value[:-2] if value.endswith("\r\n") else value[:-1] if value.endswith("\n") else value
        if not value:
            raise EntrypointError(f"TSTREAM_PASSWORD_FILE {path} is empty: refusing to run without the password")
    if value is not None and not value:
        raise EntrypointError("TSTREAM_PASSWORD is empty: unset it to run without a password")
    return value


def health_address(config) -> tuple[str, int]:
    """Where a client inside the container reaches the plain port: the first bound address."""
    host = config["bind"].split()[0].lstrip("-")
    return LOOPBACK_FOR.get(host, host), config["port"]


def exposed_without_password(config) -> bool:
    """Protected mode will refuse every client from outside the container."""
    loopback = ("127.0.0.1", "::1", "localhost")
    beyond_loopback = any(host.lstrip("-") not in loopback for host in config["bind"].split())
    default_user_line = any(line.split()[:1] == ["default"] for line in config["user"])  # may set its password
    return beyond_loopback and config["protected-mode"] and not config["requirepass"] and not default_user_line


def write_health_file(path: str, host: str, port: int) -> None:
    temporary = f"{path}.{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump({"host": host, "port": port}, handle)
    os.replace(temporary, path)


def run_server(args: list[str], env: dict[str, str]) -> int:
    from tstream.server.config import ConfigError
    from tstream.server.main import main, parse_command_line, run_configured

    if args and args[0] in ("-h", "--help", "-v", "--version"):
        return main(args)
    try:
        password = password_from_environment(env)
        config, config_file = parse_command_line(args)
    except (EntrypointError, ConfigError, OSError) as exc:
        print(f"tstream-entrypoint: {exc}", file=sys.stderr)
        return 1
    if password is not None:
        config.set("requirepass", password)
    if exposed_without_password(config):
        print("tstream-entrypoint: warning: no password (set TSTREAM_PASSWORD_FILE or TSTREAM_PASSWORD) "
              "and protected mode is on: clients from outside the container, port mappings included, "
              "will be refused with -DENIED", file=sys.stderr)
    write_health_file(env.get("TSTREAM_HEALTH_FILE", HEALTH_FILE), *health_address(config))
    return run_configured(config, config_file)


def resp_command(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(word), word) for word in words)


def healthcheck(env: dict[str, str]) -> int:
    try:
        password = password_from_environment(env)
        with open(env.get("TSTREAM_HEALTH_FILE", HEALTH_FILE), encoding="utf-8") as handle:
            address = json.load(handle)
    except (EntrypointError, OSError, ValueError) as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    request = resp_command(b"PING")
    expected = 1
    if password is not None:
        request = resp_command(b"AUTH", password.encode()) + request
        expected = 2
    try:
        with socket.create_connection((address["host"], address["port"]), timeout=2) as sock:
            sock.sendall(request)
            replies = b""
            while replies.count(b"\r\n") < expected:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                replies += chunk
    except OSError as exc:
        print(f"unhealthy: {address['host']}:{address['port']}: {exc}", file=sys.stderr)
        return 1
    last = replies.split(b"\r\n")[expected - 1] if replies.count(b"\r\n") >= expected else replies
    if password is not None and not replies.startswith(b"+OK"):
        print(f"unhealthy: AUTH refused: {replies.splitlines()[0] if replies else b''!r}", file=sys.stderr)
        return 1
    if last.startswith(b"+PONG") or (password is None and last.startswith(b"-NOAUTH")):
        return 0
    print(f"unhealthy: PING replied {last!r}", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    env = dict(os.environ)
    if argv[:1] == ["--healthcheck"]:
        return healthcheck(env)
    if argv and (argv[0].startswith("-") or argv[0].endswith(".conf")):
        argv = ["tstream-server", *argv]  # `docker run tstream --port 7000`: options for the server
    if argv[:1] == ["tstream-server"]:
        os.environ.pop("TSTREAM_PASSWORD", None)  # read once; nothing the server starts inherits it
        return run_server(argv[1:], env)
    if not argv:
        print("usage: tstream-entrypoint tstream-server [args ...] | --healthcheck | command ...", file=sys.stderr)
        return 2
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
