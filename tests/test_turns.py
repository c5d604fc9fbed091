"""The end of the loop turn (server.turns) and the turn budget across connections
(server.connection): through the real server."""

from __future__ import annotations

import json
import time

from tstream.server.turns import PROBE_ENV

from .harness import encode_command


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
    # each wait: [executed, released, the loop thread's CPU and run-queue wait when it executed]
    assert all(executed <= released and cpu > 0 and run_queue >= 0 for executed, released, cpu, run_queue in waits)
    cpus = [t[-2] for t in sorted(turns, key=lambda t: t[3])]
    assert cpus == sorted(cpus)  # cumulative thread CPU (thread_time_ns, the probe's dumps left out)



def test_a_second_connection_is_served_between_a_pipeliners_turns(server):
    """One connection sends 200,000 TWRITEs at once; once its first replies came back
    (its first turn ran), another connection's TINFO is answered while the
    pipeliner's backlog is still being worked through: it sees some of its writes,
    not all of them (turns, not time: the pipeliner's work spans hundreds of turns)."""
    import socket
    import threading

    import hiredis

    n = 200_000
    payload = b"".join(encode_command(("TWRITE", "turns:p", "t", i)) for i in range(n))
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=120)
    replies: list = []
    first = threading.Event()

    def read() -> None:
        reader = hiredis.Reader()
        while len(replies) < n:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            reader.feed(chunk)
            while (reply := reader.gets()) is not False:
                replies.append(reply)
            first.set()

    sender = threading.Thread(target=sock.sendall, args=(payload,))
    receiver = threading.Thread(target=read)
    receiver.start()
    sender.start()
    try:
        assert first.wait(60)
        c = server.client()
        info = c.execute_command("TINFO", "turns:p")
        length = dict(zip(info[::2], info[1::2]))[b"length"] if isinstance(info, list) else info[b"length"]
        sender.join(120)
        receiver.join(120)
    finally:
        sock.close()
    assert 0 < length < n
    assert replies == list(range(1, n + 1))
