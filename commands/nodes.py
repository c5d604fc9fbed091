"""TNODES: a stream's macro nodes as they are stored, for readers that decode
them themselves (the Spark source's tasks).

A TREAD page costs the server a Python object per entry and a RESP element per
entry; TNODES hands out each node's stored bytes (the zstd frames of a sealed
node, no decompression) with the header that describes them, so the server's
work per node is a copy into the reply, and the per-entry work moves to the
reader, where Spark runs it on every core.  The reader rebuilds each node with
the engine's own decoder (``engine.node.Node.from_parts(header, body,
node_entries)``, the one the snapshot loader and the offline snapshot reader
use).

    TNODES key offset [COUNT nodes] [MAXBYTES bytes]

Reply, an array::

    first        the stream's first offset (entries below it were evicted:
                 a node may still hold some; skip them)
    next         the offset after the last node's entries: where to go on
                 (``next`` > the stream's last: the read is done)
    node_entries the stream's node size (what Node.from_parts needs)
    tags         flat [tag id, tag, ...] of every tag the nodes use
    node ...     per node [header, body, deleted bitmap or nil]
"""

from __future__ import annotations

from .args import to_nonnegative, to_positive
from .errors import CommandError, SyntaxErr
from .streams import NO_SUCH_KEY

DEFAULT_COUNT = 16
DEFAULT_MAXBYTES = 8 << 20


def tnodes(client, argv):
    """TNODES key offset [COUNT nodes] [MAXBYTES bytes]

    The nodes holding ``offset`` and the offsets after it, as stored (see the
    module docstring).  O(nodes returned x (blocks + distinct tags)) plus a
    copy of their bytes."""
    offset = 1 if argv[2] == b"-" else to_nonnegative(argv[2], "offset")
    count, max_bytes = DEFAULT_COUNT, DEFAULT_MAXBYTES
    i = 3
    while i < len(argv):
        word = argv[i].lower()
        if i + 1 >= len(argv):
            raise SyntaxErr()
        if word == b"count":
            count = to_positive(argv[i + 1], "COUNT")
        elif word == b"maxbytes":
            max_bytes = to_positive(argv[i + 1], "MAXBYTES")
        else:
            raise SyntaxErr()
        i += 2
    stream = client.server.keyspace.get(argv[1])
    if stream is None:
        raise CommandError(NO_SUCH_KEY)
    parts, names, end = stream.stored_nodes(offset, count, max_bytes)
    tags: list = []
    for tid in sorted(names):
        tags += (tid, names[tid])
    return [stream.first, end, stream.node_entries, tags, *([h, b, d] for h, b, d in parts)]
