"""The Docker image's entrypoint (deploy/docker-entrypoint.py), run directly: the password
from TSTREAM_PASSWORD / TSTREAM_PASSWORD_FILE, and the health check following the port.

The image itself is not built here (no Docker daemon in CI); everything the entrypoint
decides is exercised with a real server process on a free port and a temp dir.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import redis

from .conftest import ROOT, free_port

ENTRYPOINT = ROOT / "deploy" / "docker-entrypoint.py"


def environment(tmp_path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TSTREAM_")}
    env["TSTREAM_HEALTH_FILE"] = str(tmp_path / "health.json")
    env.update(extra)
    return env


def start(tmp_path, env, *args: str, command: tuple[str, ...] = ("tstream-server",)) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ENTRYPOINT), *command, "--port", str(port),
                             "--dir", str(tmp_path), "--save", "", *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            redis.Redis(port=port, socket_timeout=1).ping()
        except redis.AuthenticationError:  # up, and asking for the password
            return proc, port
        except redis.ConnectionError:
            time.sleep(0.05)
        else:
            return proc, port
    raise AssertionError("server did not start")


def stop(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err.decode()


def healthcheck(env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ENTRYPOINT), "--healthcheck"], env=env,
                          capture_output=True, text=True, timeout=30)


def test_password_file_protects_the_server_and_stays_off_the_command_line(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret with spaces\n")  # as `echo ... > file` leaves it
    env = environment(tmp_path, TSTREAM_PASSWORD_FILE=str(secret))
    proc, port = start(tmp_path, env)
    try:
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).ping()
        assert redis.Redis(port=port, password="s3cret with spaces").ping() is True
        cmdline = open(f"/proc/{proc.pid}/cmdline", "rb").read()
        assert b"s3cret" not in cmdline
        assert healthcheck(env).returncode == 0
        wrong = healthcheck(environment(tmp_path, TSTREAM_PASSWORD="wrong"))
        assert wrong.returncode == 1
        assert "AUTH refused" in wrong.stderr
    finally:
        code, err = stop(proc)
    assert code == 0, err


def test_password_from_the_environment_and_health_check_on_the_configured_port(tmp_path):
    env = environment(tmp_path, TSTREAM_PASSWORD="pw-from-env")
    proc, port = start(tmp_path, env)
    try:
        assert redis.Redis(port=port, password="pw-from-env").ping() is True
        assert f'"port": {port}' in (tmp_path / "health.json").read_text()
        assert healthcheck(env).returncode == 0
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert healthcheck(env).returncode == 1  # nothing listens any more


def test_without_a_password_the_health_check_accepts_pong(tmp_path):
    env = environment(tmp_path)
    proc, port = start(tmp_path, env)
    try:
        assert redis.Redis(port=port).ping() is True
        done = healthcheck(env)
        assert done.returncode == 0, done.stderr
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert "warning" not in err  # loopback only: protected mode refuses nobody that can connect


def test_binding_beyond_loopback_without_a_password_warns(tmp_path):
    env = environment(tmp_path)
    proc, port = start(tmp_path, env, "--bind", "0.0.0.0")
    try:
        assert healthcheck(env).returncode == 0  # 0.0.0.0 is checked through 127.0.0.1
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert "no password" in err and "-DENIED" in err


@pytest.mark.parametrize("extra, message", [
    ({"TSTREAM_PASSWORD": "a", "TSTREAM_PASSWORD_FILE": "/nonexistent"}, "not both"),
    ({"TSTREAM_PASSWORD_FILE": "/nonexistent/secret"}, "cannot read TSTREAM_PASSWORD_FILE"),
    ({"TSTREAM_PASSWORD": ""}, "TSTREAM_PASSWORD is empty"),
])
def test_bad_password_settings_refuse_to_start(tmp_path, extra, message):
    done = subprocess.run([sys.executable, str(ENTRYPOINT), "tstream-server", "--port", str(free_port()),
                           "--dir", str(tmp_path)], env=environment(tmp_path, **extra),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert message in done.stderr
    assert not (tmp_path / "health.json").exists()


def test_an_empty_password_file_refuses_to_start(tmp_path):
    (tmp_path / "secret").write_text("\n")
    done = subprocess.run([sys.executable, str(ENTRYPOINT), "tstream-server", "--port", str(free_port()),
                           "--dir", str(tmp_path)],
                          env=environment(tmp_path, TSTREAM_PASSWORD_FILE=str(tmp_path / "secret")),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "is empty" in done.stderr


def test_options_alone_are_for_the_server(tmp_path):
    """``docker run tstream --port 7000``: the image's command is replaced by options."""
    env = environment(tmp_path, TSTREAM_PASSWORD="pw")
    proc, port = start(tmp_path, env, command=())
    try:
        assert redis.Redis(port=port, password="pw").ping() is True
        assert healthcheck(env).returncode == 0
    finally:
        code, err = stop(proc)
    assert code == 0, err


def test_other_commands_are_executed_as_given(tmp_path):
    done = subprocess.run([sys.executable, str(ENTRYPOINT), "echo", "hello"], env=environment(tmp_path),
                          capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, "hello\n")
