"""``tstream-server --help``: every option of the table, with the default the server uses."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from tstream.server.config import OPTIONS, Config

from .conftest import ROOT


def help_text(flag: str = "--help") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tstream.server", flag], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def option_rows(text: str) -> dict[str, tuple[str, bool, str]]:
    """``--name default [*] meaning`` rows of the help: name -> (default, runtime, meaning)."""
    rows = {}
    for line in text.splitlines():
        match = re.fullmatch(r'  --(\S+)\s+("[^"]*"|\S+)\s+(\*| ) (.+)', line)
        if match:
            rows[match.group(1)] = (shlex.split(match.group(2))[0] if match.group(2) != '""' else "",
                                    match.group(3) == "*", match.group(4))
    return rows


def test_help_lists_every_option_with_its_default_and_exits_0():
    done = help_text()
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: tstream-server [config-file] [--name value ...]")
    rows = option_rows(done.stdout)
    assert list(rows) == list(OPTIONS)
    for name, option in OPTIONS.items():
        default, runtime, meaning = rows[name]
        assert default == option.default, name
        assert runtime == option.runtime, name
        assert meaning == option.help, name


def test_short_flag_prints_the_same_help():
    assert help_text("-h").stdout == help_text("--help").stdout


def test_the_defaults_shown_are_the_values_the_server_starts_with():
    """Passing every default the help shows back as ``--name value`` changes nothing."""
    rows = option_rows(help_text().stdout)
    config = Config()
    args = []
    for name, (default, _, _) in rows.items():
        if name == "user":  # repeatable: an empty line adds no user
            continue
        args += [f"--{name}", default] if default else [f"--{name}"]
    config.load_args(args)
    assert config.values == Config().values


def test_the_configuration_page_lists_every_option():
    """docs/configuration.md's table is generated from config.OPTIONS and up to date."""
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_configuration.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    page = (ROOT / "docs" / "configuration.md").read_text()
    for name, option in OPTIONS.items():
        assert f"| `{name}` | `{option.default or chr(34) * 2}` |" in page, name
