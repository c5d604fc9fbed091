#!/usr/bin/env python3
"""Instructions per record of applying logged writes, counted by valgrind's
callgrind (a figure the machine's load does not move; see bench/instructions.py):

- ``aof``: an offline replay of TWRITE records, as a restart from the AOF does
  (``persistence.aof.load`` of one incr file of APPEND records of one entry,
  ``TWRITE bench t <100 bytes>`` each: frame check, msgpack, apply);
- ``replica``: a replica's apply of the same records as they arrive from its
  primary (``Replication._apply`` of the replication stream, ``--chunk``
  records per read, each read one frame as the primary packs a send (a
  BUNDLE), on an in-process server: apply, log to the sinks, count; the
  packing, the primary's work, counted apart and taken off);
- ``aof_batches``: the records bench/persistence.py's AOF part logs (per key in
  turn: a ``TWRITE key ENTRIES`` of 100 entries, then a pipelined run of 20
  TWRITEs, one record of 20), per *entry*;
- ``primary`` / ``primary_replica``: the primary's side, per write: an
  unpipelined ``TWRITE bench t <100 bytes>`` fed through
  ``ClientConnection.data_received`` (bench/hotpath.py's fake transport), its
  loop turn ended when something scheduled its end (as the event loop does: an
  unpipelined TWRITE without AOF schedules none; before 2026-11-27 06:00 the
  script ended every write's turn), on the server's event loop (uvloop when
  installed; asyncio's before 2026-11-27 06:20, whose Python timers the feed's
  one timer per send paid for), on a lone primary / on a primary with one online replica
  (a connection on a fake transport; the stream sent to it every 16 writes,
  about what ``SEND_DELAY`` batches at 20,000 writes/s): the cost of feeding
  a replica is the difference.

- ``aof_mixed``: ``aof_batches`` with bench/persistence.py's data (tags drawn
  from 1000, payloads half English-like text with a counter, half random
  bytes: what zstd sees in that benchmark), per *entry*.
- ``aof_bundled``: ``aof_mixed``'s records framed as the server writes that
  benchmark's AOF: a loop turn's records in one BUNDLE frame (8 records,
  four keys' 100 + 20 entries; the server's file holds bundles of 2 to 10),
  per *entry*.

Each shape runs ``--small`` and ``--large`` records in two processes under
callgrind; the difference of the totals over the difference of the counts is
the cost of one record (start-up and warm-up cancel out; for the ``aof*``
shapes, making the records and writing the file, counted in two more
processes that do not load it, are taken off: before 2026-11-27 they were
counted too).

The ``aof*`` shapes count the loading thread only (the load's critical path:
since persistence/sealer.py an AOF load compresses the nodes it seals in a
second thread, on a second core); ``SHAPE@all`` (``aof_mixed@all``) counts
every thread of the process (the load's whole CPU work but the CRC checks
of persistence/crcahead.py's helper process, which is not counted: forced on
for these small files, as it is on for a file of 16 MB or more).

    .venv/bin/python bench/replay.py [--base-tree DIR] [--shapes aof,replica,aof_batches]

``--base-tree DIR``: also count another source tree (a ``git archive`` of
another commit unpacked in DIR), imported as ``tstream`` by this venv's
interpreter (its packages are the tree's folders), and print this/base.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import callgrind

HERE = Path(__file__).resolve().parent
SHAPES = ("aof", "replica", "aof_batches", "aof_mixed", "aof_mixed@all", "aof_bundled", "aof_bundled@all", "primary",
          "primary_replica")
BUNDLE_RECORDS = 8  # records per BUNDLE frame of the aof_bundled shape
T0 = 1_700_000_000_000_000_000
PAYLOAD = bytes(range(100))


def use_tree(tree: str) -> None:
    """Import ``tstream`` from the source tree ``tree`` instead of the installed one."""
    sys.meta_path[:] = [finder for finder in sys.meta_path if "editable" not in repr(finder).lower()]
    module = types.ModuleType("tstream")
    module.__path__ = [tree]
    sys.modules["tstream"] = module


def twrite_records(count: int, key: bytes = b"bench") -> list:
    from tstream.persistence import effects
    return [[effects.APPEND, key, offset, T0 + 1000 * offset, b"t", PAYLOAD] for offset in range(1, count + 1)]


def batch_records(entries: int) -> tuple[list, int]:
    """bench/persistence.py's AOF records, for at least ``entries`` entries."""
    def parts(done: int) -> list:
        return [[x for i in range(size) for x in (b"tag%05d" % ((start + i) % 1000), PAYLOAD)]
                for start, size in ((done, 100), (done + 100, 20))]
    return _records_in_turn(entries, parts)


def mixed_records(entries: int) -> tuple[list, int]:
    """:func:`batch_records` with bench/persistence.py's data (its EntryMaker's
    mix, seeded)."""
    import random

    sentence = b"The quick brown fox jumps over the lazy dog while the log keeps on growing. "
    tags = [b"tag%05d" % t for t in range(1000)]
    rng = random.Random(12)

    def parts(done: int) -> list:
        drawn = rng.choices(tags, k=120)
        kinds = rng.getrandbits(120)
        noise = rng.randbytes(100 * 120)
        pairs = []
        for i in range(120):
            if (kinds >> i) & 1:
                pairs += [drawn[i], (b"entry %08d: " % (done + i) + sentence * 2)[:100]]
            else:
                pairs += [drawn[i], noise[i * 100:(i + 1) * 100]]
        return [pairs[:200], pairs[200:]]
    return _records_in_turn(entries, parts)


def _records_in_turn(entries: int, parts_of) -> tuple[list, int]:
    """APPEND records on 4 keys in turn, a chunk each (its records those of
    ``parts_of(entries done)``: lists of tag, data pairs; one time per chunk),
    until at least ``entries`` entries; the records and their entries."""
    from tstream.persistence import effects
    records = []
    nexts = dict.fromkeys((b"bench:aof:%d" % i for i in range(4)), 1)
    keys = list(nexts)
    done = chunk = 0
    while done < entries:
        key = keys[chunk % len(keys)]
        for part in parts_of(done):
            records.append([effects.APPEND, key, nexts[key], T0 + 1000 * chunk, *part])
            nexts[key] += len(part) // 2
            done += len(part) // 2
        chunk += 1
    return records, done


def write_aof(directory: str, records: list, keys, bundle: int = 1) -> None:
    """An AOF of ``records``, a frame each, or ``bundle`` to a BUNDLE frame."""
    from tstream.persistence import aof, effects
    from tstream.persistence.framing import pack
    with open(os.path.join(directory, aof.incr_name(1)), "wb") as handle:
        handle.write(b"".join(pack([effects.CREATE, key, 1000]) for key in keys))
        if bundle > 1:
            handle.write(b"".join(pack([effects.BUNDLE, *records[i:i + bundle]])
                                  for i in range(0, len(records), bundle)))
        else:
            handle.write(b"".join(map(pack, records)))
    aof.write_manifest(directory, [aof.ManifestEntry(aof.incr_name(1), 1, "i")])


def workload(shape: str, count: int, chunk: int, load: bool = True) -> None:
    """Apply ``count`` records (entries for aof_batches) of ``shape``, in this
    process (``load`` False: an ``aof*`` shape's AOF written, not loaded)."""
    if shape in ("aof", "aof_batches", "aof_mixed", "aof_bundled"):
        from tstream.persistence import aof
        if shape == "aof":
            records, keys = twrite_records(count), [b"bench"]
        else:
            records, _ = (batch_records if shape == "aof_batches" else mixed_records)(count)
            keys = sorted({record[1] for record in records})
        directory = tempfile.mkdtemp(prefix="bench-replay-")
        try:
            write_aof(directory, records, keys, BUNDLE_RECORDS if shape == "aof_bundled" else 1)
            del records
            if load:
                try:  # (since 2026-11-27 19:30 a big file's CRCs are checked in a helper process, not
                    # counted here: callgrind does not follow it; this file is small, so forced)
                    from tstream.persistence import crcahead
                    crcahead.MIN_BYTES = 0
                except ImportError:  # (a tree before it)
                    pass
                loaded = aof.load(directory)
                assert loaded.keyspace.get(keys[0]).next_offset > 1
        finally:
            shutil.rmtree(directory)
        return
    sys.path.insert(0, str(HERE))
    import hotpath

    if shape.startswith("primary"):
        with asyncio.Runner(loop_factory=event_loop()) as runner:  # (the server's loop: its timers)
            runner.run(primary(hotpath, count, shape == "primary_replica"))
        return

    from tstream.persistence import effects
    from tstream.persistence.framing import pack

    async def main() -> None:
        bench = hotpath.Bench()
        server = bench.server
        server.keyspace.get_or_create(b"bench", 1000)
        records = twrite_records(count)
        # As the primary sends them: each send's records in one frame (a BUNDLE
        # since 2026-11-27 10:00; a tree without it gets a frame per record).
        bundled = getattr(effects, "bundled", None)
        if bundled is not None:
            reads = [pack(bundled(records[i:i + chunk])) for i in range(0, count, chunk)]
        else:
            reads = [b"".join(map(pack, records[i:i + chunk])) for i in range(0, count, chunk)]
        del records
        if not load:
            return
        apply = server.replication._apply
        for data in reads:
            assert apply(data) == len(data)
        assert server.keyspace.get(b"bench").next_offset == count + 1
        assert effects.APPEND == 1

    asyncio.run(main())


async def primary(hotpath, count: int, with_replica: bool) -> None:
    """``count`` unpipelined TWRITEs on a primary, with or without an online replica."""
    from tstream.server.connection import ClientConnection
    from tstream.server.replication import Replica

    bench = hotpath.Bench()
    server = bench.server
    replication = server.replication
    send = replication.send
    if with_replica:
        link = ClientConnection(server)
        link.connection_made(hotpath.CountingTransport())
        replica = Replica(link, 6381)
        replica.waiting, replica.state = None, "online"
        replication._ensure_backlog()
        replication.replicas.append(replica)
    feed, turn_end, ends = bench.feed, bench.turn_end, server.turn_end
    data = hotpath.request(b"TWRITE", b"bench", b"t", PAYLOAD)
    for i in range(count + 300):
        feed(data)
        if ends._scheduled:  # (as the event loop: the end of the turn runs when something scheduled it)
            turn_end()
        if not i & 15:
            send()
    send()
    assert server.keyspace.get(b"bench").next_offset == count + 301
    if with_replica:
        assert replica.written == replication.offset > 0


def event_loop():
    """The event loop the server runs on (server/main.py): uvloop's when installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def count_instructions(tree: str | None, shape: str, count: int, chunk: int, load: bool = True) -> int:
    workload_shape, _, which = shape.partition("@")
    argv = [sys.executable, str(Path(__file__).resolve()), "--run", workload_shape, str(count), "--chunk", str(chunk)]
    if tree:
        argv += ["--tree", tree]
    if not load:
        argv.append("--no-load")
    if not shape.startswith("aof") or which == "all":
        return callgrind.total(argv, shape)
    return loading_thread_total(argv, shape)


def loading_thread_total(argv: list[str], label: str) -> int:
    """The instructions callgrind counts in the process's first thread (the
    one that loads), as callgrind.total counts them for all threads."""
    out = tempfile.mkdtemp(prefix="bench-replay-cg-")
    try:
        subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes",
                        f"--callgrind-out-file={out}/cg", *argv],
                       capture_output=True, text=True, check=True, cwd="/",
                       env=dict(os.environ, PYTHONHASHSEED="0"))
        main = os.path.join(out, "cg-01")
        with open(main if os.path.exists(main) else os.path.join(out, "cg")) as handle:
            for line in handle:
                if line.startswith("summary:"):
                    return int(line.split()[1])
        raise SystemExit(f"no callgrind summary for {label}")
    finally:
        shutil.rmtree(out)


_UNLOADED: dict = {}  # (shape without @, count, tree) -> instructions of making its records (and AOF)


def per_record(tree: str | None, shape: str, small: int, large: int, chunk: int) -> float:
    """Instructions per record of ``shape``; for the ``aof*`` shapes, those
    of making the records and writing the AOF (counted without the load, the
    same code for every tree) taken off; for ``replica``, those of packing the
    stream as the tree's primary does (since 2026-11-27 10:00: before, the
    packing was counted in)."""
    cost = count_instructions(tree, shape, large, chunk) - count_instructions(tree, shape, small, chunk)
    if shape.startswith("aof") or shape == "replica":
        base = shape.partition("@")[0]
        maker = tree if shape == "replica" else None
        for count, sign in ((large, 1), (small, -1)):
            if (base, count, maker) not in _UNLOADED:
                _UNLOADED[base, count, maker] = count_instructions(maker, base, count, chunk, load=False)
            cost -= sign * _UNLOADED[base, count, maker]
    return cost / (large - small)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-tree", help="another source tree, counted too (compared shape by shape)")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--large", type=int, default=50_000)
    ap.add_argument("--chunk", type=int, default=32, help="records per read of the replica (replica shape)")
    ap.add_argument("--out", default="-", help="markdown file to write ('-': print only)")
    ap.add_argument("--run", nargs=2, metavar=("SHAPE", "COUNT"), help=argparse.SUPPRESS)
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    ap.add_argument("--no-load", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        if args.tree:
            use_tree(args.tree)
        workload(args.run[0], int(args.run[1]), args.chunk, load=not args.no_load)
        return
    builds: dict[str, str | None] = {"this": None}
    if args.base_tree:
        builds = {"base": os.path.abspath(args.base_tree), "this": None}
    unit = {"aof": "record", "replica": "record", "aof_batches": "entry", "aof_mixed": "entry",
            "aof_mixed@all": "entry, all threads", "aof_bundled": "entry", "aof_bundled@all": "entry, all threads",
            "primary": "write", "primary_replica": "write"}
    callgrind.compare(builds, args.shapes.split(","),
                   lambda tree, shape: per_record(tree, shape, args.small, args.large, args.chunk),
                   "instructions", label=lambda shape: f"{shape} (per {unit[shape]})", out=args.out)


if __name__ == "__main__":
    main()
