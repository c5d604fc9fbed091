"""XINFO STREAM, GROUPS and CONSUMERS: what the Redis Streams commands show of
a stream and its consumer groups (commands/xstreams.py, commands/xgroups.py).
Replies as Redis 7.0's; ``radix-tree-keys``/``radix-tree-nodes`` count
tstream's macro nodes."""

from __future__ import annotations

from time import time_ns

from tstream.engine import xgroups, xids

from .args import as_int64, to_int
from .errors import CommandError, SyntaxErr
from .xstreams import entry_replies, format_id, held_rows, held_rows_reversed


def _now_ms() -> int:
    return time_ns() // 1_000_000


def xinfo_stream(client, argv):
    """XINFO STREAM key [FULL [COUNT count]]

    The stream's length, ids and first/last entries (FULL: its entries and
    groups). O(1); FULL O(count)."""
    full, count = False, 10
    i = 3
    if i < len(argv):
        if argv[i].lower() != b"full":
            raise CommandError("ERR unknown subcommand or wrong number of arguments for 'STREAM'. "
                               "Try XINFO HELP.")
        full = True
        i += 1
        if i < len(argv):
            if argv[i].lower() != b"count" or i + 2 != len(argv):
                raise SyntaxErr()
            count = to_int(argv[i + 1])
            if count < 0:
                count = 10
    stream = client.server.streams.get(argv[2])
    if stream is None:
        raise CommandError("ERR no such key")
    first_rows = held_rows(stream, stream.first, stream.next_offset, 1)
    last_rows = held_rows_reversed(stream, stream.first, stream.next_offset, 1)
    x = stream._x
    info = {
        b"length": stream.length,
        b"radix-tree-keys": stream.nodes,
        b"radix-tree-nodes": stream.nodes,
        b"last-generated-id": format_id(xids.top_id(stream)),
        b"max-deleted-entry-id": format_id(x.max_deleted if x is not None else (0, 0)),
        b"entries-added": xids.entries_added(stream),
        b"recorded-first-entry-id": entry_replies(stream, first_rows)[0][0] if first_rows else b"0-0",
    }
    if not full:
        info[b"groups"] = len(stream.groups)
        info[b"first-entry"] = entry_replies(stream, first_rows)[0] if first_rows else None
        info[b"last-entry"] = entry_replies(stream, last_rows)[0] if last_rows else None
        return info
    rows = held_rows(stream, stream.first, stream.next_offset, count or stream.length)
    info[b"entries"] = entry_replies(stream, rows)
    info[b"groups"] = full_groups(stream, count)
    return info


def _entries_read_reply(x):
    return None if x.entries_read == xgroups.INVALID else x.entries_read


def xinfo_groups(client, argv):
    """XINFO GROUPS key

    Every consumer group of the stream. O(groups + P)."""
    stream = client.server.streams.get(argv[2])
    if stream is None:
        raise CommandError("ERR no such key")
    out = []
    for name in sorted(stream.groups):
        group = stream.groups[name]
        x = xgroups.state(stream, group)
        out.append({b"name": name, b"consumers": len(x.consumers), b"pending": group.pending_count,
                    b"last-delivered-id": format_id(x.last_id), b"entries-read": _entries_read_reply(x),
                    b"lag": xgroups.lag(stream, group)})
    return out


def xinfo_consumers(client, argv):
    """XINFO CONSUMERS key group

    Every consumer of the group. O(consumers + P)."""
    stream = client.server.streams.get(argv[2])
    if stream is None:
        raise CommandError("ERR no such key")
    group = stream.groups.get(argv[3])
    if group is None:
        raise CommandError(f"NOGROUP No such consumer group '{argv[3].decode(errors='replace')}' for key name "
                           f"'{argv[2].decode(errors='replace')}'")
    x = xgroups.state(stream, group)
    now = _now_ms()
    per: dict[bytes, int] = {}
    for p in xgroups.owned(group):
        per[p.owner] = per.get(p.owner, 0) + 1
    return [{b"name": name, b"pending": per.get(name, 0), b"idle": max(now - x.consumers[name].seen_ms, 0)}
            for name in sorted(x.consumers)]


def full_groups(stream, count: int) -> list:
    """The ``groups`` part of XINFO STREAM FULL. O(groups + P)."""
    out = []
    for name in sorted(stream.groups):
        group = stream.groups[name]
        x = xgroups.state(stream, group)
        mine = xgroups.owned(group)
        shown = mine[:count] if count else mine
        consumers = []
        for cname in sorted(x.consumers):
            theirs = [p for p in mine if p.owner == cname]
            consumers.append({
                b"name": cname, b"seen-time": x.consumers[cname].seen_ms, b"pel-count": len(theirs),
                b"pending": [[format_id(xgroups.pending_id(stream, p)), p.delivered_ms, as_int64(p.deliveries)]
                             for p in (theirs[:count] if count else theirs)],
            })
        out.append({
            b"name": name, b"last-delivered-id": format_id(x.last_id), b"entries-read": _entries_read_reply(x),
            b"lag": xgroups.lag(stream, group), b"pel-count": len(mine),
            b"pending": [[format_id(xgroups.pending_id(stream, p)), p.owner, p.delivered_ms, as_int64(p.deliveries)]
                         for p in shown],
            b"consumers": consumers,
        })
    return out
