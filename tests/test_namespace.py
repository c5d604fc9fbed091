"""tstream installs as one namespace, tstream.*: an app with its own modules
named like tstream's folders (server.py, a client/ package) embeds it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

APP = textwrap.dedent("""
    import server                      # the app's own server.py
    import client                      # the app's own client/ package
    from tstream.server.embed import ServerThread
    import redis
    from tstream.client import TStream

    assert server.WHO == "app-server", server
    assert client.WHO == "app-client", client
    with ServerThread(port=0, dir=".", save="") as running:
        ts = TStream(redis.Redis(port=running.port))
        assert ts.twrite("k", "t", b"v") == 1
        assert [(e.offset, e.tag, e.data) for e in ts.tread("k", 1, 10)] == [(1, b"t", b"v")]
    print("embedded-ok")
""")


def test_an_app_with_its_own_server_and_client_modules_embeds_tstream(tmp_path):
    (tmp_path / "server.py").write_text('WHO = "app-server"\n')
    (tmp_path / "client").mkdir()
    (tmp_path / "client" / "__init__.py").write_text('WHO = "app-client"\n')
    (tmp_path / "app.py").write_text(APP)
    done = subprocess.run([sys.executable, "app.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "embedded-ok"


def test_no_top_level_module_of_tstream_is_installed():
    """Importing tstream's layers never binds the bare names an app may own."""
    code = ("import sys, tstream.server.embed, tstream.client, tstream.persistence.check;"
            "print(sorted(n for n in ('resp','commands','engine','persistence','server','client','pipeline')"
            " if n in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
