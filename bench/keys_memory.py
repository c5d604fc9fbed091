#!/usr/bin/env python3
"""Memory per key, in-process: N keys of one entry each, through the Keyspace API.

Creates ``--keys`` streams (keys ``key:0000001``.., tag ``tag``, a 20-byte payload) with
``Keyspace.get_or_create(key).append(...)`` and reports the growth of the process's RSS
per key, and (``--tracemalloc N``, slower) the bytes Python allocated per key for N keys.
``--append N`` also times N appends of small entries to one stream (the hot path), best
of ``--runs``.

``--root DIR`` imports the engine from ``DIR/engine`` instead of this checkout (e.g. an
older commit unpacked with ``git archive <rev> engine | tar -x -C DIR``); ``--compare DIR``
times the appends of both engines in turns, in one process (a fairer comparison on a
busy machine).

    .venv/bin/python bench/keys_memory.py [--keys 1000000] [--tracemalloc 100000] [--append 1000000]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
PAYLOAD = b"v" * 12 + b"%08d"


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fill(keyspace, keys: int, now: int) -> None:
    get_or_create = keyspace.get_or_create
    for i in range(keys):
        get_or_create(b"key:%07d" % i).append(b"tag", PAYLOAD % i, now)


def per_key_rss(Keyspace, keys: int) -> float:
    gc.collect()
    before = rss_bytes()
    keyspace = Keyspace()
    fill(keyspace, keys, time.time_ns())
    gc.collect()
    grown = rss_bytes() - before
    assert len(keyspace) == keys
    return grown / keys


def per_key_traced(Keyspace, keys: int) -> float:
    gc.collect()
    tracemalloc.start()
    keyspace = Keyspace()
    base = tracemalloc.get_traced_memory()[0]
    fill(keyspace, keys, time.time_ns())
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert len(keyspace) == keys
    return used / keys


def append_seconds(Stream, entries: int, runs: int, fresh_tags: bool = False) -> float:
    """Best time of ``entries`` appends of 16-byte entries to one stream.  ``fresh_tags``:
    each append gets its own (equal) tag object, unhashed, as a server's parsed
    commands do; else one tag object throughout."""
    best = float("inf")
    tags = ([bytes(bytearray(b"tag")) for _ in range(entries)] if fresh_tags
            else [b"tag"] * entries)
    for _ in range(runs):
        stream = Stream(1000)
        append = stream.append
        now = time.time_ns()
        gc.collect()
        start = time.perf_counter()
        for tag in tags:
            append(tag, b"0123456789abcdef", now)
        best = min(best, time.perf_counter() - start)
    return best


def load_engine(root: str, name: str):
    """The engine package under ``root`` imported as ``name`` (it has only relative imports)."""
    path = os.path.join(root, "engine")
    spec = importlib.util.spec_from_file_location(name, os.path.join(path, "__init__.py"),
                                                  submodule_search_locations=[path])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="N")
    parser.add_argument("--append", type=int, default=0, metavar="N")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--root", default=os.path.dirname(HERE))
    parser.add_argument("--compare", metavar="DIR")
    args = parser.parse_args()
    sys.path.insert(0, args.root)
    from engine import Keyspace, Stream  # the engine has no imports from other packages

    print(f"engine from {os.path.join(args.root, 'engine')}  python {sys.version.split()[0]}")
    if args.keys:
        print(f"{args.keys:,} keys x 1 entry: {per_key_rss(Keyspace, args.keys):,.0f} B/key of RSS")
    if args.tracemalloc:
        print(f"{args.tracemalloc:,} keys x 1 entry: {per_key_traced(Keyspace, args.tracemalloc):,.0f} "
              "B/key allocated (tracemalloc)")
    if args.append and args.compare:
        other = load_engine(args.compare, "engine_compared").Stream
        for fresh in (False, True):
            best = {"this": float("inf"), "compared": float("inf")}
            for _ in range(args.runs):
                best["this"] = min(best["this"], append_seconds(Stream, args.append, 1, fresh))
                best["compared"] = min(best["compared"], append_seconds(other, args.append, 1, fresh))
            for name, seconds in best.items():
                print(f"{name:>8}: {args.append:,} appends of 16-byte entries, "
                      f"{'a fresh tag object each' if fresh else 'one tag object'}: "
                      f"{seconds / args.append * 1e9:,.0f} ns/append (best of {args.runs}, in turns)")
    elif args.append:
        seconds = append_seconds(Stream, args.append, args.runs)
        print(f"{args.append:,} appends of 16-byte entries to one stream: {seconds:.3f} s "
              f"({seconds / args.append * 1e9:,.0f} ns/append, best of {args.runs})")


if __name__ == "__main__":
    main()
