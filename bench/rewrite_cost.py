#!/usr/bin/env python3
"""What a snapshot (the base of an AOF rewrite) of one MSGID-fed key costs, profiled.

An in-process server (server.embed.ServerThread), ``--messages`` pipelined
``TWRITE k t <100 bytes> MSGID id-N`` (every id in the duplicate window), then
``Persistence.save`` (capture + framing + write, what a rewrite's SnapshotJob does
in slices) run on the loop under cProfile with the garbage collector off (as
SnapshotJob runs), ``--repeat`` times; prints CPU seconds per save and the top
functions of the last one.  ``--no-ids``: plain TWRITE (no message ids).

    .venv/bin/python bench/rewrite_cost.py [--messages 1200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import tempfile
import time

import redis

from tstream.server.embed import ServerThread


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-ids", action="store_true")
    ap.add_argument("--no-profile", action="store_true", help="CPU seconds only (cProfile inflates per-call costs)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rewrite-cost-") as d, ServerThread(port=0, dir=d) as st:
        r = redis.Redis(port=st.port)
        payload = b"x" * 100
        for start in range(0, args.messages, 100_000):
            pipe = r.pipeline(transaction=False)
            for i in range(start, min(start + 100_000, args.messages)):
                extra = () if args.no_ids else ("MSGID", b"id-%d" % i)
                pipe.execute_command("TWRITE", "k", "t", payload, *extra)
            pipe.execute()
        ingest = st.server.keyspace.get(b"k")._ingest
        if ingest is not None:
            print(f"message ids {len(ingest.window)} in {ingest.window.records()} records", flush=True)
        persist = st.server.persistence
        for n in range(args.repeat):
            prof = cProfile.Profile()

            def save(prof: cProfile.Profile = prof) -> float:
                gc.disable()
                try:
                    cpu = time.process_time()
                    if not args.no_profile:
                        prof.enable()
                    persist.save()
                    prof.disable()
                    return time.process_time() - cpu
                finally:
                    gc.enable()
            seconds = st.call(save)
            note = "" if args.no_profile else " (profiled)"
            print(f"save {n + 1}: {seconds:.3f} s CPU{note}", flush=True)
        if args.no_profile:
            return
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
        print(out.getvalue())


if __name__ == "__main__":
    main()
