"""docs/spark.md as a new user meets it: its first job, copied out of the page, runs as written
(in a new process, with its own SparkSession, PYSPARK_PYTHON unset and the venv not on PATH)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .conftest import ROOT


def first_job() -> str:
    text = (ROOT / "docs" / "spark.md").read_text()
    block = re.search(r"`first_job\.py`:\s*```python\n(.*?)```", text, re.S)
    assert block, "docs/spark.md lost its first_job.py"
    return block.group(1)


@pytest.mark.slow  # a JVM of its own: 15-40 s, minutes on a loaded machine
@pytest.mark.timeout(600)
def test_the_first_job_runs_as_written(make_server, tmp_path):
    server = make_server("--save", "")
    script = tmp_path / "first_job.py"
    script.write_text(first_job().replace("6380", str(server.port)))
    venv_bin = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    # A fresh shell: the venv is not activated, so `python3` on PATH is not the venv's.
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                  if os.path.abspath(d) != os.path.abspath(venv_bin))
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "19.0" in out.splitlines()                     # from_json parsed the entries
    assert re.search(r"\|1\s+\|orders\.eu\.created\s*\|1\s*\|9\.5\s*\|", out), out
    r = server.client()
    assert r.execute_command("TREAD", "orders.eu", "-", 10) == [
        [1, b"orders.eu.created", b'{"id": 1, "total": 9.5}'], [2, b"orders.eu.paid", b'{"id": 1, "total": 9.5}']]


def test_every_option_is_in_the_table():
    from tstream.pipeline.common import OPTION_SPECS

    text = (ROOT / "docs" / "spark.md").read_text()
    table = text[text.index("## Options"):text.index("## How it reads and writes")]
    rows = {m.group(1) for m in re.finditer(r"^\| `(\w+)`", table, re.M)}
    rows |= {m.group(1) for m in re.finditer(r"^\| `\w+` \(or `(\w+)`\)", table, re.M)}
    assert rows == set(OPTION_SPECS)
    assert "--py-files" in text and "--archives" in text      # deploying on a cluster
