#!/usr/bin/env python3
"""Where a primary's cost of feeding one online replica goes, line by line
(issue #17): bench/replay.py's ``primary_replica`` shape (unpipelined
``TWRITE bench t <100 bytes>`` through ``ClientConnection.data_received`` on a
fake transport, its loop turn ended, the stream sent every 16 writes) run
under line_profiler, with the feed's functions profiled: the after-write path
(``Writes.appended``, ``Writes.commit``), the sink (``Replication.log``,
``flush``, ``feed``, ``send``, ``Backlog.add``) and the packer.

    PYTHONPATH=<a folder with line_profiler> .venv/bin/python bench/feed_profile.py [--writes 50000]

line_profiler's own cost per line inflates every figure (compare lines and
functions with each other, not with bench/replay.py's instruction counts).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writes", type=int, default=50_000)
    args = ap.parse_args()
    from line_profiler import LineProfiler

    sys.path.insert(0, str(HERE))
    import hotpath
    import replay

    from tstream.commands import writes
    from tstream.persistence import framing
    from tstream.server import replication, turns

    profiler = LineProfiler()
    for function in (writes.Writes.appended, writes.Writes.commit, replication.Replication.log,
                     replication.Replication.flush, replication.Replication.feed, replication.Replication.send,
                     replication.Backlog.add, framing.Packer.__call__, turns.TurnEnd.run):
        profiler.add_function(function)
    profiler.enable_by_count()
    asyncio.run(replay.primary(hotpath, args.writes, True))
    profiler.disable_by_count()
    profiler.print_stats(output_unit=1e-6, stripzeros=True)


if __name__ == "__main__":
    main()
