"""The end of the loop turn (server.turns) and the turn budget across connections
(server.connection): through the real server."""

from __future__ import annotations

import json
import time

from tstream.server.turns import PROBE_ENV


def test_turn_probe_records_turns_and_the_probe_clients_waits(make_server, tmp_path, monkeypatch):
    """TSTREAM_TURN_PROBE=<file>: every second, one JSON line of per-turn timings and
    the waits of the client named turn-probe (what bench/fast_ingest.py reads)."""
    path = tmp_path / "probe.jsonl"
    monkeypatch.setenv(PROBE_ENV, str(path))
    proc = make_server("--appendonly", "yes", "--appendfsync", "always")
    c = proc.client()
    c.execute_command("TWRITE", "k", "t", "x")
    c.client_setname("turn-probe")
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        assert c.execute_command("TREAD", "k", 1, 10)
        time.sleep(0.05)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    turns = [t for line in lines for t in line["turns"]]
    waits = [w for line in lines for w in line["probe"]]
    assert turns and waits
    for scheduled_at, start, commit_ns, end, held, conns, *_, cpu, _ in turns:
        assert scheduled_at <= start <= end and held >= conns >= 0 and commit_ns >= 0 and cpu > 0
    assert all(executed <= released for executed, released in waits)

