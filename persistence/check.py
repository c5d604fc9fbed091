"""``tstream-check PATH [--fix] [--yes]``: verify a snapshot file or an AOF directory.

Prints where the files are good up to.  A snapshot (and an AOF's base file) is
checked more deeply than a server start checks it: every node is decompressed and
its header compared with its blocks.  ``--fix`` truncates a torn tail (the
incomplete last record a crash mid-write leaves) after asking, or at once with
``--yes``; it never touches anything else.  Exit status: 0 when everything is
good (or was fixed), 1 when damage remains, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys

from tstream.engine import Keyspace

from . import aof, effects, snapshot
from .framing import HEADER, CorruptFile, PersistenceError, TornTail, iter_frames, unpack


def check_snapshot(path: str) -> tuple[bool, str]:
    try:
        streams = snapshot.load_file(path, check=True)  # every node decompressed and checked
    except PersistenceError as exc:
        return False, f"BAD  {exc}"
    entries = sum(stream.length for stream in streams.values())
    return True, f"OK   {path}: {len(streams)} keys, {entries} entries, {os.path.getsize(path)} bytes, checksum and every node good"


def check_aof(directory: str, fix: bool, confirm) -> tuple[bool, list[str]]:
    lines = []
    try:
        entries = aof.read_manifest(directory)
    except PersistenceError as exc:
        return False, [f"BAD  {exc}"]
    keyspace = Keyspace()
    ok = True
    for i, entry in enumerate(entries):
        path = os.path.join(directory, entry.name)
        if not os.path.exists(path):
            lines.append(f"BAD  {path}: named in the manifest but missing")
            return False, lines
        if entry.kind == "b":
            good, line = check_snapshot(path)
            lines.append(line)
            if not good:
                return False, lines
            for key, stream in snapshot.load_file(path).items():
                keyspace.put(key, stream)
            continue
        data = snapshot.read_file(path)
        records = 0
        good_up_to = 0
        try:
            for offset, payload in iter_frames(data, 0, path):
                record = unpack(payload)
                effects.apply(keyspace, record)
                records += len(record) - 1 if record[0] == effects.BUNDLE else 1
                good_up_to = offset + HEADER.size + len(payload)
            lines.append(f"OK   {path}: {records} records, good up to {good_up_to} of {len(data)} bytes")
        except TornTail as torn:
            last = i == len(entries) - 1
            lines.append(f"{'TORN' if last else 'BAD '} {path}: {records} records good up to offset "
                         f"{torn.offset}; {len(data) - torn.offset} bytes of an incomplete last record follow")
            if not last:
                return False, lines
            if fix and confirm(f"Truncate {path} to {torn.offset} bytes?"):
                with open(path, "r+b") as handle:
                    handle.truncate(torn.offset)
                    os.fsync(handle.fileno())
                lines.append(f"FIXED {path}: truncated to {torn.offset} bytes")
            else:
                ok = False
        except (CorruptFile, effects.ReplayError, ValueError) as exc:
            lines.append(f"BAD  {path}: {records} records good up to offset {good_up_to}; {exc}")
            return False, lines
    return ok, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tstream-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="a snapshot file (dump.tsr) or an AOF directory (appendonlydir)")
    parser.add_argument("--fix", action="store_true", help="truncate a torn last record of the AOF")
    parser.add_argument("--yes", action="store_true", help="do not ask before fixing")
    args = parser.parse_args(argv)

    def confirm(question: str) -> bool:
        if args.yes:
            return True
        if not sys.stdin.isatty():
            print(f"{question} (not asked: stdin is not a terminal; use --yes)")
            return False
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")

    if os.path.isdir(args.path):
        ok, lines = check_aof(args.path, args.fix, confirm)
        for line in lines:
            print(line)
    elif os.path.exists(args.path):
        ok, line = check_snapshot(args.path)
        print(line)
    else:
        print(f"tstream-check: {args.path}: no such file or directory", file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
