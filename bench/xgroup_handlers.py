#!/usr/bin/env python3
"""Instructions per iteration of the X* consumer loop's two command handlers,
counted by callgrind without the noise of the whole shape (bench/instructions.py's
``xgroup_loop_pairs`` moves by up to 10% between two runs of one tree: the
server's turn end and connection read real clocks, and what they do and
allocate, hence when the cyclic GC runs, depends on timing under callgrind).

Each iteration calls ``commands.xgroups.xreadgroup`` (``XREADGROUP GROUP g c1
COUNT 10 STREAMS g:k >``) then ``xack`` of the ten ids handed out, directly on
bench/hotpath.py's server (no connection, parser, dispatch nor turn end), with
the X* clocks advancing 50 us a call (every run derives the same ids) and the
cyclic GC off, after ``XADD``s of the benchmark's entries (two field-value
pairs, or one with ``--pairs 1``) for every iteration of the larger run.

    .venv/bin/python bench/xgroup_handlers.py [--base OTHER_PYTHON] [--pairs 1|2]

Another tree is counted with its own python (``--base``: a venv with that tree
installed editable); the run itself uses that tree's bench/hotpath.py.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def workload(count: int, fill: int, pairs: int) -> None:
    sys.path.insert(0, str(HERE))
    import hotpath

    import tstream.commands.xgroups as xg
    import tstream.commands.xstreams as xs

    clock = itertools.count(1_764_000_000_000_000_000, 50_000)  # 20 entries a millisecond
    xs.time_ns = xg.time_ns = clock.__next__  # type: ignore[attr-defined]
    gc.disable()
    add = [b"XADD", b"g:k", b"*", b"seq", b"12345", b"payload", b"x" * 100] if pairs == 2 else \
        [b"XADD", b"g:k", b"*", b"field", b"x" * 100]

    async def main() -> None:
        bench = hotpath.Bench()
        client = bench.client
        for _ in range((max(count, fill) + 300) * 10):
            xs.xadd(client, add)
        bench.feed(hotpath.request(b"XGROUP", b"CREATE", b"g:k", b"g", b"0"))
        bench.turn_end()
        read = [b"XREADGROUP", b"GROUP", b"g", b"c1", b"COUNT", b"10", b"STREAMS", b"g:k", b">"]
        group = bench.server.streams.get(b"g:k").groups[b"g"]
        for _ in range(300 + count):
            xg.xreadgroup(client, read)
            xg.xack(client, [b"XACK", b"g:k", b"g", *group.x.by_id])  # (the ten ids just handed out)

    asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="python of another build's venv (counted too)")
    ap.add_argument("--pairs", type=int, choices=(1, 2), default=2)
    ap.add_argument("--small", type=int, default=200)
    ap.add_argument("--large", type=int, default=700)
    ap.add_argument("--run", nargs=3, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        workload(*args.run)
        return
    sys.path.insert(0, str(HERE))
    import callgrind
    builds = {"this": sys.executable} if not args.base else {"base": args.base, "this": sys.executable}
    for name, python in builds.items():
        script = str(HERE / "xgroup_handlers.py")
        if name == "base":  # (the base tree's own copy when it has one, else this one)
            import subprocess
            where = subprocess.run([python, "-c", "import tstream.commands, os; "
                                    "print(os.path.dirname(os.path.dirname(tstream.commands.__file__)))"],
                                   capture_output=True, text=True, cwd="/").stdout.strip()
            if (Path(where) / "bench" / "xgroup_handlers.py").exists():
                script = str(Path(where) / "bench" / "xgroup_handlers.py")
        runs = [callgrind.total([python, script, "--run", str(n), str(args.large), str(args.pairs)], name)
                for n in (args.small, args.large)]
        print(f"{name} ({python}): {(runs[1] - runs[0]) / (args.large - args.small):,.0f} instructions/iteration")


if __name__ == "__main__":
    main()
