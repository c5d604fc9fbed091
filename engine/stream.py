"""The RCP 11 stream: an append-only log of ``(offset, tag, data, time)`` entries.

Layout
======

A stream is a Python list of *macro nodes* (engine/node.py).  Every node
covers a fixed, aligned range of ``N = node_entries`` offsets (offsets start
at 1), unless sealed by bytes (below)::

    offsets    1 ......... N | N+1 ....... 2N | 2N+1 ...... 3N | 3N+1 ..(next_offset)..
    node idx        k=0      |      k=1       |      k=2       |      k=3 (active)
                  (evicted,  |                |                |
                   dropped)  |                |                |
    Stream._nodes = [ Node(k=1, sealed),  Node(k=2, sealed),  Node(k=3, active) ]
    _first_node_index = 1          ^ first (may point inside a node)

The sealed nodes are compressed in blocks (engine/blocks.py), the tags are
interned per stream (engine/tags.py), a snapshot stores each node as a blob
(engine/codec.py), and engine/invariants.py asserts the whole structure.

Nodes sealed by bytes
---------------------
A node is also sealed when the next entry would take its payloads past
``node_max_bytes`` (server option node-max-bytes, 1 MiB by default; 0: no
limit), so that no seal compresses more than that (a single bigger entry gets
a node of its own).  Such a *short* node ends before its aligned range; the
next node starts right after it, in the same range, and ends at the range's
end (or is short too)::

    offsets    1 ........................ N | N+1 ......... 2N |
    Stream._nodes = [ Node(1..40, short), Node(41..N) ] [ Node(k=1) ]

O(1) seek
---------
While every aligned range holds one node, the node of an offset is pure
arithmetic::

    nodes[(offset - 1) // N - _first_node_index]

and the entry's position inside it is ``offset - node.start``.  The guess is
checked (``node.start <= offset < node.cap_end``); where short nodes share
ranges it misses and a bisection over the nodes' starts finds the node,
O(log nodes) (:meth:`Stream._node_index`).  No skiplist is needed (RCP 11
proposed one): eviction only ever removes whole nodes from the front (``del
nodes[:k]``, then ``_first_node_index`` is the range of the new first node),
which keeps the arithmetic valid.  Evicting ``k`` nodes costs O(k) plus one memmove of the
remaining node pointers; reading ``count`` entries costs O(count) plus at most
one decompression per sealed block touched.

Eviction is exact for readers, memory is returned a node at a time: ``first``
moves to exactly the right offset (entries below it read as missing), and a
node is released once all of its offsets are below ``first``.

Missing entries
---------------
An entry is missing when it is evicted (offset < ``first``) or deleted
(``delete(offset)``; per-node bitmap of deleted positions).  ``first`` never
rests on a deleted entry: deleting the first held entry moves ``first`` up,
exactly as JetStream moves ``first_seq``.  ``length`` counts held entries.

Time
----
Each entry stores ``time_ns`` (ns since the epoch).  Times are forced
non-decreasing per stream (``max(now_ns, last_time)``), so time-based eviction
binary-searches (node ``last_time``, then over the node's blocks, then bisect
inside one block).

Out of memory
-------------
An append stores its entry whole or not at all when a MemoryError strikes
(the node's tables are cut back, a tag interned for it is forgotten);
``append_many`` likewise, as long as it sealed no node (once it did, what
went into sealed nodes stays and the error is raised).  Sealing builds the
sealed node aside and swaps it in only when complete: a MemoryError leaves
the active node whole and active.  After a failed seal of a full node its
entries stay and the seal is *owed*: the byte bound turns negative (see
``Stream._owe_seal``), so the next append, on the byte test it makes anyway,
seals the node first.

Snapshots
---------
:meth:`Stream.export_state` / :meth:`Stream.from_state` carry the tag table,
its reference counts, the node blobs (engine/codec.py), the deleted bitmaps,
offsets and config as plain ``bytes``/``int``/``list`` values.

Thread safety: none.  The engine is meant to be driven by one thread (the
event loop).
"""

from __future__ import annotations

import os
import sys
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import asdict, astuple, dataclass
from itertools import accumulate, groupby, islice
from operator import attrgetter, itemgetter
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Sequence

from .blocks import BlockCache
from .codec import BLOB_PREFIX, _le_array, _le_bytes
from .ingest import Ingest
from .node import ActiveNode, Node, SealedNode, _popcount_range
from .subjects import enforce_subject_limit  # JetStream per-subject limit (max_msgs_per_subject)
from .tags import TagTable
from .xids import MAX_ID, XState, before_drop, id_of, note_append

# A run's store into the active node's columns in C (engine/_columns.c), unless it
# was not built or is turned off (TSTREAM_PURE_PYTHON=1, as for the C parser):
# then Stream._append_chunks, in Python.  ``run_columns`` (the columns of a
# pipelined run's argvs, for commands/streams.py): None without it (then zip).
_store_run: Callable[..., int] | None = None
run_columns: Callable[[list, int], tuple] | None = None
if os.environ.get("TSTREAM_PURE_PYTHON", "") in ("", "0"):
    try:
        from ._columns import run_columns as _c_run_columns
        from ._columns import store_run as _c_store_run
    except ImportError:  # (not built)
        pass
    else:
        _store_run, run_columns = _c_store_run, _c_run_columns

__all__ = ["BLOB_PREFIX", "DEFAULT_CONFIG", "NODE_MAX_BYTES", "Entry", "Node", "Stream", "StreamConfig"]

NODE_MAX_BYTES = 1 << 20  # default payload bytes of a node before it is sealed (node-max-bytes)
_NO_BYTE_LIMIT = 1 << 62  # node_max_bytes 0: a bound no node reaches
_node_start = attrgetter("start")
_NO_GROUPS: Mapping = MappingProxyType({})  # read-only: the groups of a stream that has none
_LAST_SEQ = MAX_ID[1] - 1  # note_append's bound for one more id in the same millisecond


@dataclass(slots=True)
class StreamConfig:
    """Per-stream limits and switches (see SPEC section 3, TCONFIG).  Slots:
    one small object per stream (a key of one entry pays for it too)."""

    max_len: int = 0               # 0 = no limit; like BACKLOG on every write
    max_age_ms: int = 0            # 0 = no limit; older entries are evicted
    max_msgs_per_subject: int = 0  # 0 = no limit; else the oldest entries of a subject beyond N are deleted
    allow_direct: bool = True
    allow_atomic: bool = True
    allow_batched: bool = True         # fast-ingest batches (BATCH ... FAST)
    duplicate_window_ms: int = 120000  # message ids (MSGID) are remembered this long; 0: not at all


class _DefaultConfig(StreamConfig):
    """The defaults, one read-only object shared by every stream never
    configured (:attr:`Stream.settings`): most keys never get a config of
    their own, and a key of one entry should not pay for one."""

    __slots__ = ()

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError("the shared default stream config is read-only: set Stream.config's fields")

    def __eq__(self, other) -> bool:  # equal to any StreamConfig of the same values
        if not isinstance(other, StreamConfig):
            return NotImplemented
        return astuple(self) == astuple(other)

    __hash__ = None  # type: ignore[assignment]  # as StreamConfig's


def _default_config() -> StreamConfig:
    default = _DefaultConfig.__new__(_DefaultConfig)
    for name, value in asdict(StreamConfig()).items():
        object.__setattr__(default, name, value)
    return default


DEFAULT_CONFIG = _default_config()  # read-only (see _DefaultConfig)


class Entry(NamedTuple):
    offset: int
    tag: bytes
    data: bytes
    time_ns: int


class Stream(TagTable):
    """An RCP 11 stream.  See the module docstring for the layout.

    Public attributes: ``config`` (and its read-only view ``settings``), ``node_entries``, ``first`` (first offset
    held; ``== next_offset`` when nothing is held), ``next_offset``,
    ``last_time`` (time of the newest write, ns), ``groups`` (the command
    layer's consumer groups, read-only: see :meth:`add_group`), ``limit_pending`` (set by the Keyspace holding the
    stream, see engine/keyspace.py); properties ``last``, ``length``, ``nodes``.
    ``first`` never points at a deleted entry while anything is held.
    """

    # Slot order is memory order: what append reads comes first, right after
    # the tag table's _tag_index and _active (engine/tags.py), so that an
    # append to a stream not in the CPU cache touches one or two lines of it.
    __slots__ = (
        "_config",  # StreamConfig of its own, or None: the shared defaults (see settings)
        "next_offset", "last_time",
        "_node_bytes",  # node_max_bytes, or a bound never reached when 0 (one test when appending);
                        # its complement (< 0) while a seal is owed (see _owe_seal)
        "_subjects",  # JetStream subject index (engine/subjects.py), None until first needed
        "first", "node_entries", "_groups",
        "_nodes", "_first_node_index",
        "_deleted_held", "_sealed_mem", "_age_floor", "_fast_seal",
        "_cache",  # the decoded-block cache (engine/blocks.py) of the keyspace
        "key_slot",  # its SCAN chunk in the Keyspace holding it (engine/keyspace.py), or None
        "limit_pending",  # its keyspace's set of subject indexes with deletions to log, or None
        "_x",  # the stored part of its Redis ids (engine/xids.py), None until needed
        "_ingest",  # fast-ingest batches and message ids (engine/ingest.py), None until needed
    )

    def __init__(self, node_entries: int = 1000, cache: BlockCache | None = None,
                 node_max_bytes: int = NODE_MAX_BYTES) -> None:
        if node_entries < 1:
            raise ValueError("node_entries must be >= 1")
        self._config: StreamConfig | None = None  # the defaults until configured
        # Decoded-block cache and zstd contexts: the keyspace's, shared by its
        # streams (engine/blocks.py); a standalone stream makes its own.
        self._cache = BlockCache() if cache is None else cache
        self._groups: dict | None = None  # consumer group name -> engine.groups.Group, once one exists
        self.node_entries = int(node_entries)
        self._node_bytes = 0               # no seal owed (set by node_max_bytes next)
        self.node_max_bytes = node_max_bytes
        self.first = 1
        self.next_offset = 1
        self.last_time = 0
        # ActiveNode | SealedNode: typed Any because the hot paths tell them
        # apart by the class attribute ``sealed`` (cheaper than isinstance),
        # which mypy does not narrow on.
        self._nodes: list[Any] = []
        self._first_node_index = 0
        TagTable.__init__(self)            # also _active: the active node or None
        self._deleted_held = 0             # deleted offsets in [first, next_offset)
        self._sealed_mem = 0               # sum of sealed nodes' .mem
        self._age_floor = -(1 << 63)       # every held entry has time >= this
        self._fast_seal = False            # last node did not compress
        self._subjects = None              # JetStream subject index: built on first need
        self._x: XState | None = None      # Redis ids: derived from the times until needed
        self._ingest: Ingest | None = None  # fast batches and message ids (engine/ingest.py)
        self.limit_pending: set | None = None  # set by the Keyspace holding the stream
        self.key_slot: list | None = None

    # -- simple properties ---------------------------------------------------
    @property
    def config(self) -> StreamConfig:
        """The stream's limits and switches, to read or change in place (the
        stream gets a config object of its own on first access). O(1)."""
        config = self._config
        if config is None:
            config = self._config = StreamConfig()
        return config

    @config.setter
    def config(self, config: StreamConfig) -> None:
        self._config = config

    @property
    def settings(self) -> StreamConfig:
        """:attr:`config` for reading only: the shared read-only defaults
        (:data:`DEFAULT_CONFIG`) while the stream has no config of its own,
        so readers allocate nothing.  O(1)."""
        config = self._config
        return DEFAULT_CONFIG if config is None else config

    @property
    def groups(self) -> Mapping:
        """Consumer group name -> Group (engine/groups.py): the command layer
        keeps its groups here; the engine never reads them and does not
        snapshot them.  Read-only (an empty shared mapping until a group is
        added: most keys never get one); add with :meth:`add_group`, remove
        with ``del stream.groups[name]`` once one exists. O(1)."""
        groups = self._groups
        return _NO_GROUPS if groups is None else groups

    def add_group(self, name: bytes, group) -> None:
        """Add (or replace) the consumer group ``name``. O(1)."""
        if self._groups is None:
            self._groups = {}
        self._groups[name] = group

    @property
    def node_max_bytes(self) -> int:
        """Payload bytes a node may hold before it is sealed (0: no limit);
        a single bigger entry gets a node of its own.  Applies to the nodes
        written from now on. O(1)."""
        limit = self._node_bytes
        if limit < 0:  # a seal is owed
            limit = ~limit
        return 0 if limit == _NO_BYTE_LIMIT else limit

    @node_max_bytes.setter
    def node_max_bytes(self, value: int) -> None:
        value = int(value)
        if value < 0:
            raise ValueError("node_max_bytes must be >= 0")
        limit = value or _NO_BYTE_LIMIT
        self._node_bytes = ~limit if self._node_bytes < 0 else limit

    @property
    def last(self) -> int:
        """Last offset written (``next_offset - 1``; 0 for a new stream). O(1)."""
        return self.next_offset - 1

    @property
    def length(self) -> int:
        """Entries held: offsets ``first..last`` minus deleted ones. O(1)."""
        return self.next_offset - self.first - self._deleted_held

    @property
    def nodes(self) -> int:
        """Number of macro nodes currently allocated. O(1)."""
        return len(self._nodes)

    def node_list(self) -> list[Node]:
        """The macro nodes, oldest first (read-only use, e.g. snapshots). O(1)."""
        return self._nodes

    @property
    def tag_list(self) -> Sequence:
        """The tags by id, as :meth:`read_tables`' tag ids index them (a list
        or tuple, read-only use; the slots of ids no longer used hold None). O(1)."""
        return self._tag_list

    def capture_nodes(self) -> tuple[list, dict, tuple | None]:
        """A picture of the nodes for a snapshot, cheap enough for any stream size:
        ``(sealed, deleted, active)`` -- the sealed nodes themselves (immutable;
        the caller pins the block cache, ``BlockCache.pins``, until it has
        written them, so that dropping one keeps its data), copies of their
        deleted bitmaps by index in ``sealed``, and the active node serialised
        now (``capture_parts``) or None.  O(nodes) in C, plus O(active node)
        and O(sealed nodes with deletions)."""
        nodes = self._nodes
        active = self._active
        sealed = nodes[:-1] if active is not None and nodes and nodes[-1] is active else nodes[:]
        deleted = {i: bytes(node.deleted) for i, node in enumerate(sealed) if node.deleted is not None}
        parts = None
        if active is not None:
            parts = (None if active.deleted is None else bytes(active.deleted), active.capture_parts())
        return sealed, deleted, parts

    def memory_bytes(self) -> int:
        """Estimate of the memory this stream holds: sealed blobs, the active
        node's buffers (with over-allocation), deleted bitmaps, node objects,
        the tag table and the stream object.  Decoded copies in the
        decoded-block cache are not counted (see :class:`BlockCache`).  O(1)."""
        mem = (sys.getsizeof(self) + sys.getsizeof(self._nodes)
               + (0 if self._config is None else sys.getsizeof(self._config))
               + self._sealed_mem + self._tag_table_mem())
        if self._active is not None:
            mem += self._active.active_mem()
        return mem

    def stored_nodes(self, offset: int, max_nodes: int, max_bytes: int) -> tuple[list, dict[int, bytes], int]:
        """The nodes holding offsets ``offset`` and after, as stored: a list of
        ``(header, body, deleted bitmap or None)`` (a node's :meth:`Node.blob`
        split, its body the sealed node's stored object itself: no copy, no
        decompression; the active node's raw body serialised now), at most
        ``max_nodes`` of them and, after the first, no more once their bodies
        pass ``max_bytes``; with ``{tag id: tag}`` of every tag they use, and
        the offset after the last node's entries (where to go on).
        Offsets below ``first`` are the caller's to skip (a node is whole).
        O(nodes returned x (blocks + distinct tags)), plus O(active node)."""
        parts: list = []
        names: dict[int, bytes] = {}
        nodes = self._nodes
        end = max(offset, self.first)
        if not nodes or end >= self.next_offset:
            return parts, names, end
        k = self._node_index(end)
        taken = 0
        tag_list = self._tag_list
        while k < len(nodes) and len(parts) < max_nodes and (not parts or taken < max_bytes):
            node = nodes[k]
            header, body = node.blob_parts()
            parts.append((header, body, None if node.deleted is None else bytes(node.deleted)))
            taken += len(body)
            for tid in (node.tag_set if node.sealed else node.tag_ids()):
                names[tid] = tag_list[tid]
            end = min(node.start + node.count, self.next_offset)
            k += 1
        return parts, names, end

    # -- seeking -----------------------------------------------------------------
    def _node_index(self, offset: int) -> int:
        """Index in ``_nodes`` of the node holding ``offset`` (``first <=
        offset < next_offset``, or ``offset`` in the active node's range).
        O(1) by arithmetic while every aligned range holds one node; O(log
        nodes) where nodes sealed by bytes share ranges."""
        nodes = self._nodes
        k = (offset - 1) // self.node_entries - self._first_node_index
        if k < len(nodes):
            node = nodes[k]
            if node.start <= offset < node.cap_end:
                return k
        return bisect_right(nodes, offset, key=_node_start) - 1

    # -- writing -----------------------------------------------------------------
    def _open_node(self, data=None, tid: int = 0, time_ns: int = 0) -> ActiveNode:
        """A new active node at ``next_offset``, empty or (``data`` given)
        holding that first entry in tables of exact size. O(1)."""
        n = self.node_entries
        off = self.next_offset
        index = (off - 1) // n
        cap_end = (index + 1) * n + 1
        if not index:  # most keys have one node: their ends are one shared int
            cap_end = self._cache.intern(cap_end)
        if data is None:
            node = ActiveNode(index * n + 1, off, cap_end)
        else:
            node = ActiveNode.with_entry(index * n + 1, off, cap_end, data, tid, time_ns)
        if self._nodes:
            self._nodes.append(node)
        else:  # a list of exact size (a key of one node keeps it)
            self._first_node_index = index
            self._nodes = [node]
        self._active = node
        return node

    def _seal_active(self, short: bool = False) -> None:
        """Seal the active node, which becomes a SealedNode in the list:
        full, or ``short`` (the next entry would take it past
        ``node_max_bytes``: it ends at ``next_offset``).  A MemoryError
        changes nothing: the node stays active and whole. O(node)."""
        node = self._active
        assert node is not None
        refs = self._ref_counts()
        sealer = self._cache.sealer
        if sealer is not None:
            # A load's background sealer (persistence/sealer.py): the
            # compression goes to its thread and the node is completed later,
            # in seal order (seal_done), with the level of the seals before
            # it (this one's _fast_seal may not know them yet: the sealer
            # compresses again where it guessed wrong).  Not for a stream
            # with limits: they read the sealed nodes.
            cfg = self._config
            if cfg is None or not (cfg.max_len or cfg.max_age_ms or cfg.max_msgs_per_subject):
                job = node.seal_begin(self._fast_seal, short)
                self._active = None
                self._nodes[-1] = job[0]
                if self._node_bytes < 0:  # the owed seal is done
                    self._node_bytes = ~self._node_bytes
                for tid in job[1]:
                    refs[tid] += 1
                sealer.submit(self, node, job)
                return
            sealer.settle_all()
        sealed, ids = node.seal(self._cache, self._fast_seal, short=short)
        self._active = None
        self._nodes[-1] = sealed
        if self._node_bytes < 0:  # the owed seal is done
            self._node_bytes = ~self._node_bytes
        self.seal_done(sealed)
        for tid in ids:
            refs[tid] += 1

    def seal_done(self, sealed: SealedNode) -> None:
        """A node's seal is complete (now, or later when a background sealer
        compressed it: see _seal_active). O(1)."""
        # Payloads that barely compress: seal the next node with the fast
        # level (the tables alone usually save ~10%, so "kept compressed" is
        # not the signal); a node that compresses well switches back.
        self._fast_seal = len(sealed.data) > 0.8 * sealed.raw_len
        self._sealed_mem += sealed.mem

    def _owe_seal(self) -> None:
        """Sealing the full active node failed (MemoryError) after its last
        entry was stored: the entries stay, the seal is owed.  The byte
        bound turns negative (its complement), so the next append's byte
        test, made anyway, sends it to the slow path, which seals first: no
        extra test per append. O(1)."""
        if self._node_bytes >= 0:
            self._node_bytes = ~self._node_bytes

    def _undo_append(self, node: ActiveNode | None, tid: int) -> None:
        """A MemoryError midway through storing one entry in ``node``: take
        its part back (``node``'s tables cut back to the ``next_offset -
        node.start`` entries it held; a compact node has nothing to cut) and
        forget ``tid`` if only this entry used it.  Shrinking allocates
        nothing. O(entries of the node) for the tag check."""
        if node is not None and self._active is node:
            node.cut_back(self.next_offset - node.start)
        self._free_unused((tid,))

    @staticmethod
    def _widen_ends(node: ActiveNode, value: int) -> None:
        """A node's buffer outgrew 4 GiB: switch its offset table to 64 bit."""
        ends = node.ends
        assert ends is not None
        node.ends = ends = array("Q", ends)
        ends.append(value)

    def append(self, tag: bytes, data: bytes, now_ns: int) -> int:  # noqa: C901 (over the limit when it came in)
        """Append one entry; returns its offset.  O(1) amortised (sealing a
        node is O(node) once per ``node_entries`` appends or
        ``node_max_bytes`` bytes), plus the
        limits' evictions when ``config`` sets any.  ``tag`` must be bytes,
        ``data`` any bytes-like."""
        try:
            # See engine/tags.py: a small table's list (scanned from id 1),
            # or a TagDict (True, the default, on a miss).
            tid = self._tag_index.index(tag, True)
        except ValueError:
            tid = True
        if tid is True:
            memoryview(data).release()  # reject bad data before interning
            tid = self._intern(tag)
        if now_ns < self.last_time:
            now_ns = self.last_time  # keep times non-decreasing
        # Any: a compact node's tables are None (its payload bytes) until expand().
        node: Any = self._active
        # All or nothing under MemoryError: until next_offset moves, a
        # failure takes the entry's part back (_undo_append).  (try costs
        # nothing while nothing is raised.)
        try:
            if node is None:
                node = self._open_node(data, tid, now_ns)  # rejects bad data before any change
            else:
                if node.ends is None:  # a compact node of one entry: give it its tables
                    node.expand()  # all or nothing
                buf = node.buf
                buf += data
                end = len(buf)
                if end > self._node_bytes and node.count:
                    # The entry would take the node past node_max_bytes (or
                    # the node is full and its seal owed: see _owe_seal):
                    # seal the node without it and start the next one with it.
                    del buf[end - memoryview(data).nbytes:]
                    self._seal_active(short=self.next_offset != node.cap_end)
                    node = self._open_node(data, tid, now_ns)
                else:
                    try:
                        node.ends.append(end)
                    except OverflowError:
                        self._widen_ends(node, end)
                    node.tags.append(tid)
                    node.times.append(now_ns)
        except MemoryError:
            self._undo_append(node, tid)
            raise
        self.last_time = now_ns
        offset = self.next_offset
        self.next_offset = after = offset + 1
        if after == node.cap_end:
            try:
                self._seal_active()
            except MemoryError:  # the entry is stored; the next append seals first
                self._owe_seal()
        x = self._x
        if x is not None:  # --- Redis ids (engine/xids.py): once it has stored ones ---
            # note_append(self, offset, 1, now_ns)'s two derived cases, inlined (every
            # XADD key * f v takes one): the clock ahead of every id (t-0), or one more
            # in the millisecond of the last id.  Anything else (a forced id, the
            # clock behind, a sequence about to overflow) takes the call.
            top = x.top
            t = now_ns // 1_000_000
            if x.forced is not None:
                note_append(self, offset, 1, now_ns)
            elif t > top[0]:
                x.last = x.top = (t, 0)
            elif t == top[0] and top is x.last and top[1] < _LAST_SEQ:
                x.last = x.top = (t, top[1] + 1)
            else:
                note_append(self, offset, 1, now_ns)
        # --- JetStream subject index hook (engine/subjects.py): once built only ---
        if self._subjects is not None:
            self._subjects.appended(tag, offset)
        cfg = self._config  # None: the defaults, no limits
        if cfg is not None and (cfg.max_len or cfg.max_age_ms or cfg.max_msgs_per_subject):
            self.enforce_limits(now_ns)
        return offset

    def append_many(self, flat: list, now_ns: int, start: int = 0) -> int:
        """Append the pairs ``flat[start:] = [tag, data, tag, data, ...]``, all
        with the same time; returns the first offset (``next_offset`` if there
        is no pair).  All or nothing: bad input (odd length, a tag that is not
        bytes, data that is not bytes-like) raises before anything is stored.
        O(pairs), with per-node bulk operations; limits are enforced once,
        after the whole batch."""
        if (len(flat) - start) & 1:
            raise ValueError("append_many needs tag/data pairs")
        return self.append_columns(flat[start::2], flat[start + 1::2], now_ns)

    def append_columns(self, tags: Sequence, datas: Sequence, now_ns: int, times: Sequence[int] | None = None) -> int:
        """:meth:`append_many` of the pairs ``zip(tags, datas)`` (two sequences of
        the same length), for callers that hold the columns already.
        ``times`` (as many as pairs; ``now_ns`` is then ignored): each entry's
        own time, as a run of logged appends replayed in one call carries them
        (persistence/effects.py); times never go backwards, as for single
        appends: an entry's time is ``max(its time, the time before it)``, so
        the run stores what appending its entries one by one would.
        The columns are stored by engine/_columns.c (:meth:`_store_columns`),
        or by :meth:`_append_chunks` without it: the same nodes, byte for byte.
        O(pairs)."""
        npairs = len(tags)
        if len(datas) != npairs:
            raise ValueError("append_columns needs as many tags as entries")
        first_offset = self.next_offset
        if npairs <= 0:
            return first_offset
        if _store_run is None:
            self._append_columns_python(tags, datas, now_ns, times)
            return first_offset
        if times is not None:  # checked before any change (a bad time: TypeError, OverflowError)
            times, now_ns = self._run_times(times, npairs)
        first = tags[0]
        tag_list = self._tag_list
        if len(tag_list) > 1 and tag_list[1] == first and tags.count(first) == npairs:
            tids: list | int = 1  # one tag, the stream's first (a pipelined run): no lookup
        else:
            tids = self._column_tids(tags, npairs, True)
        last_time = self.last_time
        if now_ns > last_time:
            self.last_time = now_ns
        else:
            now_ns = last_time
        first_node = node = self._active
        try:
            if node is not None and node.ends is not None:
                # The common run (a pipelined read) fits in the active node and
                # leaves it open: stored here, without _store_columns's frame and
                # loop, which takes over for the rest, a seal, or 64-bit ends (-1).
                stored = _store_run(node.buf, node.ends, node.tags, node.times,  # type: ignore[misc] # (not None)
                                    datas, tids, now_ns, times, 0, node.cap_end - first_offset,
                                    self._node_bytes - len(node.buf))
                if stored == npairs:
                    self.next_offset = offset = first_offset + stored
                    if offset == node.cap_end:  # full: sealed by _store_columns
                        self._store_columns(datas, tids, now_ns, times, stored)
                else:  # a seal within the run, or none fits (0: seal first; -1: 64-bit ends first)
                    stored = stored if stored > 0 else 0
                    self.next_offset = first_offset + stored
                    self._store_columns(datas, tids, now_ns, times, stored)
            else:
                self._store_columns(datas, tids, now_ns, times)
        except Exception:  # MemoryError, or a bad payload (TypeError), checked before any change
            self._undo_append_columns(first_node, first_offset, last_time, tags, tids, times)
            raise
        if self._x is not None or self._subjects is not None or self._config is not None:
            self._after_columns(tags, first_offset, npairs, now_ns, times)  # (none of them for most streams)
        return first_offset

    def _append_columns_python(self, tags: Sequence, datas: Sequence, now_ns: int,
                               times: Sequence[int] | None) -> None:
        """:meth:`append_columns` without engine/_columns.c: the payloads
        joined (which checks them all before any change), the columns
        stored by :meth:`_append_chunks`."""
        npairs = len(tags)
        first_offset = self.next_offset
        joined = b"".join(datas)  # validates every payload before any change
        if sum(map(len, datas)) != len(joined):
            # A payload whose len() is not its byte count (a memoryview of wider
            # items): the chunks are cut by len(), so such payloads go as bytes.
            datas = [bytes(data) for data in datas]
        if times is not None:  # checked before any change too (a bad time: TypeError, OverflowError)
            times, now_ns = self._run_times(times, npairs)
        tids = self._column_tids(tags, npairs)
        last_time = self.last_time
        if now_ns > last_time:
            self.last_time = now_ns
        else:
            now_ns = last_time
        first_node = self._active
        try:
            self._append_chunks(datas, tids, joined, now_ns, times)  # type: ignore[arg-type] # (a list)
        except MemoryError:
            self._undo_append_columns(first_node, first_offset, last_time, tags, tids, times)
            raise
        self._after_columns(tags, first_offset, npairs, now_ns, times)

    def _after_columns(self, tags: Sequence, first_offset: int, npairs: int, now_ns: int,
                       times: array | None) -> None:
        """What follows a run's store (:meth:`append_columns`): Redis ids,
        the subject index, the limits."""
        if self._x is not None:  # --- Redis ids (engine/xids.py): once it has stored ones ---
            if times is None:  # (a pipelined XADD run: one call less)
                note_append(self, first_offset, npairs, now_ns)
            else:
                self._note_times(first_offset, npairs, now_ns, times)
        # --- JetStream subject index hook (engine/subjects.py): once built only ---
        if self._subjects is not None:
            self._subjects.appended_many(tags, first_offset)
        cfg = self._config  # None: the defaults, no limits
        if cfg is not None and (cfg.max_len or cfg.max_age_ms or cfg.max_msgs_per_subject):
            self.enforce_limits(now_ns)

    def _column_tids(self, tags: Sequence, npairs: int, one: bool = False) -> list | int:
        """The tag ids of ``tags`` (:meth:`append_columns`), new tags
        interned; all or nothing (TypeError, MemoryError: new tags
        forgotten).  ``one``: a run of one tag gives its id alone (the C
        store repeats it). O(pairs)."""
        tids: list
        try:
            first = tags[0]
            # one tag for all (a pipelined run): one lookup (the last one
            # tested first: a batch of mixed tags skips counting them)
            if tags[-1] == first and tags.count(first) == npairs:
                tid = self._tag_lookup(first) or self._intern(first)
                if one:
                    return tid
                tids = [tid] * npairs
            else:
                try:
                    tids = list(map(self._tag_index.index, tags))
                except ValueError:  # a small table's list.index missed
                    tids = [None]
            if not all(tids):  # id 0 is reserved, so a falsy id is a miss (None):
                # intern, looking each tag up again (a new tag may repeat in the batch)
                lookup = self._tag_lookup
                tids = [lookup(tag) or self._intern(tag) for tag in tags]
        except (TypeError, MemoryError):
            self._free_unused(self._live_tag_ids())  # forget new tags
            raise
        return tids

    def _run_times(self, times: Sequence[int], npairs: int) -> tuple[array, int]:
        """The times of a run (:meth:`append_columns`), never going backwards
        from ``last_time`` on (a running maximum, in C), and the last.  Raises
        before any change (ValueError, TypeError, OverflowError). O(pairs)."""
        if len(times) != npairs:
            raise ValueError("append_columns needs as many times as entries")
        run = array("q", accumulate(times, max, initial=self.last_time))
        del run[0]  # (the stream's last time, the running maximum's start)
        return run, run[-1]

    def _note_times(self, offset: int, count: int, now_ns: int, times: array | None) -> None:
        """Redis ids (engine/xids.py) of ``count`` entries appended from
        ``offset`` on, all at ``now_ns`` or each at its own time (``times``):
        then one note_append per run of equal times, as the appends one by
        one made. O(1), or O(distinct times)."""
        if times is None:
            note_append(self, offset, count, now_ns)
            return
        for time_ns, same in groupby(times):
            count = sum(1 for _ in same)
            note_append(self, offset, count, time_ns)
            offset += count

    def _store_columns(self, datas: Sequence, tids: list | int, now_ns: int, times: array | None,
                       i: int = 0) -> None:
        """The storing part of :meth:`append_columns` with the C store
        (engine/_columns.c ``store_run``): each node takes what fits of the
        run (its free offsets; its bytes up to ``node_max_bytes``, one entry
        at least in an empty node), in one call; the node is then sealed
        when full, or short when the bytes stopped the run.  The first call
        checks every payload before any change.  ``next_offset`` moves once
        a node's share is stored whole.  A seal that fails (MemoryError)
        with pairs left to store raises; the one after the last share is
        only owed.  The same nodes as :meth:`_append_chunks`.  ``i``: the
        first pair not stored yet (append_columns stores a run's first share
        in the active node itself)."""
        npairs = len(datas)
        while True:
            node: Any = self._active
            if node is None:
                node = self._open_node()
            elif node.ends is None:  # a compact node of one entry: give it its tables
                node.expand()
            stored = _store_run(node.buf, node.ends, node.tags, node.times,  # type: ignore[misc] # (not None)
                                datas, tids, now_ns, times, i, node.cap_end - self.next_offset,
                                self._node_bytes - len(node.buf))
            if stored < 0:  # the buffer outgrows 4 GiB: 64-bit ends, then again
                node.ends = array("Q", node.ends)
                continue
            i += stored
            self.next_offset = offset = self.next_offset + stored
            if offset == node.cap_end:
                if i < npairs:
                    self._seal_active()  # more to store: the next node needs this one sealed
                    continue
                try:
                    self._seal_active()
                except MemoryError:  # every pair is stored; the next append seals first
                    self._owe_seal()
                return
            if i == npairs:
                return
            self._seal_active(short=True)  # the next entry would take the node past node_max_bytes

    def _append_chunks(self, datas: Sequence, tids: list, joined: bytes, now_ns: int,
                       times: array | None = None) -> None:
        """The storing part of :meth:`append_columns` in Python (without
        engine/_columns.c): each node's share of the pairs, one chunk per
        node, from ``joined`` (the payloads end to end), all at ``now_ns``
        or (``times``) each at its own time.  ``next_offset`` moves once a
        chunk is stored whole.  A seal that fails (MemoryError) with pairs
        left to store raises; the one after the last chunk is only owed."""
        with memoryview(joined) as jview:
            self._append_chunks_of(datas, tids, jview, now_ns, times)

    def _append_chunks_of(self, datas: Sequence, tids: list, jview: memoryview, now_ns: int,
                          times: array | None) -> None:
        """:meth:`_append_chunks` over a view of the joined payloads."""
        npairs = len(datas)
        i = 0          # index of the next pair
        jpos = 0       # its payload's position in ``joined``
        while i < npairs:
            node: Any = self._active  # its tables exist once expand() ran (see append)
            if node is None:
                node = self._open_node()
            k = min(npairs - i, node.cap_end - self.next_offset)  # 0: a full node, its seal owed
            whole = k == npairs  # the usual case: no slicing
            buf = node.buf
            lens = list(map(len, datas if whole else datas[i:i + k]))
            chunk_len = sum(lens)
            cut = False  # the chunk stops at node_max_bytes: seal after it
            if len(buf) + chunk_len > self._node_bytes:
                fit = bisect_right(list(accumulate(lens)), self._node_bytes - len(buf))
                if not fit:
                    if node.count:
                        self._seal_active(short=self.next_offset != node.cap_end)
                        continue
                    fit = 1  # one entry bigger than the limit: a node of its own
                if fit < k:
                    k, whole, cut = fit, False, True
                    del lens[k:]
                    chunk_len = sum(lens)
            node.expand()
            buf = node.buf  # a compact node's payload was bytes: now its bytearray
            ends = node.ends
            if ends.typecode == "I" and len(buf) + chunk_len > 0xFFFFFFFF:
                node.ends = ends = array("Q", ends)  # the buffer outgrows 4 GiB
            lens[0] += len(buf)  # the running sum then gives the end positions
            ends.extend(accumulate(lens))
            buf += jview[jpos:jpos + chunk_len]
            node.tags.fromlist(tids if whole else tids[i:i + k])
            node.times.extend(array("q", (now_ns,)) * k if times is None else times[i:i + k])
            jpos += chunk_len
            i += k
            self.next_offset += k
            if self.next_offset == node.cap_end:
                if i < npairs:
                    self._seal_active()  # more to store: the next node needs this one sealed
                else:
                    try:
                        self._seal_active()
                    except MemoryError:  # every pair is stored; the next append seals first
                        self._owe_seal()
            elif cut:
                self._seal_active(short=True)

    def _undo_append_columns(self, first_node: ActiveNode | None, first_offset: int,
                             last_time: int, tags: Sequence, tids: list | int, times: array | None = None) -> None:
        """A MemoryError midway through :meth:`append_columns`.  While the
        node active before the batch (``first_node``) is still active,
        nothing of the batch is kept: all or nothing.  Once this batch
        sealed a node it keeps what went into sealed nodes (and a chunk
        stored whole in a node whose seal failed, owed then); only the
        active node's unfinished chunk is taken back.  New tags left unused
        are forgotten.  Shrinking allocates nothing.  O(node) for the tag
        check."""
        node = self._active
        if node is not None:
            if node is first_node:
                self.next_offset = first_offset
            held = self.next_offset - node.start
            node.cut_back(held)
            if not held:  # opened by this batch, left empty: not kept
                self._nodes.pop()
                self._active = None
            if self.next_offset == node.cap_end:
                self._owe_seal()
        stored = self.next_offset - first_offset
        if stored:
            # --- JetStream subject index hook (engine/subjects.py): once built only ---
            if self._subjects is not None:
                self._subjects.appended_many(tags[:stored], first_offset)
            if times is not None:  # the last stored entry's time
                self.last_time = times[stored - 1]
        else:
            self.last_time = last_time
        self._free_unused(set(tids) if type(tids) is list else (tids,))

    # -- reading -------------------------------------------------------------------
    def read(self, offset: int, count: int) -> list:  # noqa: C901 (over the limit when it came in)
        """Up to ``count`` elements for offsets ``offset, offset+1, ...``:
        ``[offset, tag, data]`` for a held entry, ``None`` for a missing one
        (evicted or deleted).  Stops early at the end of the log.  ``offset``
        must be >= 1 (callers resolve ``-``/``$``).  O(count) plus at most one
        decompression per sealed block touched."""
        if count == 1 and self.first <= offset < self.next_offset:
            # One held offset (TREAD key o 1, pipelined by the thousand): no range loop.
            node = self._nodes[self._node_index(offset)]
            p = offset - node.start
            bits = node.deleted
            if bits is not None and bits[p >> 3] >> (p & 7) & 1:
                return [None]
            if node.sealed:  # (Node.tables_at, inlined)
                be = node.block_entries
                b = p // be
                blk = node.blocks[b]
                if blk is None:
                    blk = self._cache.decode_block(node, b)
                elif blk.lru:
                    self._cache.lru.move_to_end(blk)
                i = p - b * be
                ends = blk.ends
                return [[offset, self._tag_list[blk.tags[i]], blk.buf[ends[i]:ends[i + 1]]]]
            buf, ends, tags, _, i = node.tables_at(p)
            return [[offset, self._tag_list[tags[i]], bytes(buf[ends[i]:ends[i + 1]])]]
        if offset < 1:
            raise ValueError("offset must be >= 1")
        if count < 0:
            raise ValueError("count must be >= 0")
        end = offset + count
        if end > self.next_offset:
            end = self.next_offset
        if offset >= end:
            return []
        first = self.first
        if offset < first:
            if end <= first:
                return [None] * (end - offset)
            out: list = [None] * (first - offset)
            offset = first
        else:
            out = []
        append = out.append
        nodes = self._nodes
        k = self._node_index(offset)
        tag_list = self._tag_list
        while offset < end:
            node = nodes[k]
            nstart = node.start
            stop = node.cap_end
            if node.sealed:
                # Only the block holding ``offset`` (Node.tables_at, inlined).
                be = node.block_entries
                b = (offset - nstart) // be
                blk = node.blocks[b]
                if blk is None:
                    blk = self._cache.decode_block(node, b)
                elif blk.lru:
                    self._cache.lru.move_to_end(blk)
                buf = blk.buf
                ends = blk.ends
                tags = blk.tags
                bstart = nstart + b * be  # offset of the block's first entry
                if bstart + be < stop:
                    stop = bstart + be
                sealed = True
            else:
                ends = node.ends
                if ends is None:  # a compact node of one entry
                    buf, ends, tags, _ = node.decoded()
                else:
                    buf = node.buf
                    tags = node.tags
                bstart = nstart
                sealed = False
            if stop > end:
                stop = end
            i = offset - bstart
            j = stop - bstart
            bits = node.deleted
            if bits is None and j - i <= 8:
                # A few entries (a consumer keeping up): indexing costs less
                # than slicing the tables.
                for o in range(offset, stop):
                    data = buf[ends[i]:ends[i + 1]]
                    append([o, tag_list[tags[i]], data if sealed else bytes(data)])
                    i += 1
            elif bits is None:
                # Slice the tables once; zip + comprehension beats per-entry
                # indexing by ~25-40% from ~10 entries on.
                e = ends[i:j + 1].tolist()
                rows = zip(range(offset, stop), tags[i:j].tolist(), e, islice(e, 1, None))
                if sealed:
                    out += [[o, tag_list[t], buf[a:z]] for o, t, a, z in rows]
                else:
                    # The active buffer is a bytearray: copy slices out as
                    # bytes through a view, released before any append can
                    # resize the buffer.
                    with memoryview(buf) as mv:
                        out += [[o, tag_list[t], mv[a:z].tobytes()] for o, t, a, z in rows]
            else:
                shift = bstart - nstart  # node position = table index + shift
                for i in range(i, j):  # noqa: B020 (i runs on from where it was)
                    p = i + shift
                    if bits[p >> 3] >> (p & 7) & 1:
                        append(None)
                    else:
                        data = buf[ends[i]:ends[i + 1]]
                        append([bstart + i, tag_list[tags[i]], data if sealed else bytes(data)])
            offset = stop
            if stop == node.cap_end:
                k += 1  # nodes are consecutive: the next one holds ``stop``
        return out

    def read_held(self, offset: int, count: int) -> tuple[list, int]:
        """Up to ``count`` held entries from ``offset`` on, missing ones
        skipped, as ``[offset, tag, data]``; and where a next call should go
        on: after the last entry returned when ``count`` were found, else
        ``next_offset`` (the log's end, trailing missing offsets included), or
        ``offset`` itself when it is beyond the end (a group created there
        stays there).
        ``offset`` must be >= 1.  O(count + missing offsets skipped), plus at
        most one decompression per sealed block touched."""
        node: Any = self._active  # (Any: a compact node's tables are None, tested here)
        if (node is not None and node.start <= offset and self.first <= offset and node.deleted is None
                and node.ends is not None and count > 0):
            # Entries of the active node, none deleted (a consumer group keeping up with
            # its writers: a few new entries a read): every offset up to the end is held,
            # so they are read straight from its tables -- what read() would give, without
            # its seek and range set-up, nor this loop's test for missing ones.
            stop = offset + count
            if stop > self.next_offset:
                stop = self.next_offset
            if offset >= stop:
                return [], offset
            buf, ends, tags, tag_list = node.buf, node.ends, node.tags, self._tag_list
            i = offset - node.start
            out: list = []
            append = out.append
            for o in range(offset, stop):
                append([o, tag_list[tags[i]], bytes(buf[ends[i]:ends[i + 1]])])
                i += 1
            return out, stop  # (count found: after the last; else the end, next_offset)
        out = []
        while offset < self.next_offset:
            rows = self.read(offset, count - len(out))
            offset += len(rows)
            if None in rows:
                rows = [row for row in rows if row is not None]
            out += rows
            if len(out) == count:
                return out, out[-1][0] + 1
        return out, max(offset, self.next_offset)

    def read_columns(self, offset: int, count: int) -> tuple[list, list, list, list]:
        """Up to ``count`` held entries from ``offset`` on, missing ones
        skipped, as four columns ``(offsets, tags, datas, times)`` (what
        :meth:`iter_from` yields, without an object per entry: the pages of
        DGET and the like are encoded from the columns).  O(count + missing
        offsets skipped), plus at most one decompression per sealed block
        touched."""
        offsets: list = []
        tags_out: list = []
        datas: list = []
        times_out: list = []
        if count <= 0:
            return offsets, tags_out, datas, times_out
        if offset < self.first:
            offset = self.first
        nodes = self._nodes
        tag_list = self._tag_list
        while offset < self.next_offset:
            need = count - len(offsets)
            if need <= 0:
                break
            node = nodes[self._node_index(offset)]
            p = offset - node.start
            buf, ends, tags, times, i = node.tables_at(p, self._cache)
            # to the end of these tables (a block, or the active node's), at most ``need`` entries
            j = min(len(ends) - 1, i + need, i + self.next_offset - offset)
            stop = offset + j - i
            bits = node.deleted
            sealed = node.sealed
            if bits is None:
                # no call per entry: the tags by one itemgetter, the payloads by
                # slices in a comprehension (ten entries: 4.2k and 14.0k
                # instructions, against 7.6k and 20.3k for maps of bound
                # ``__getitem__``s, which go through a method wrapper each)
                e = ends[i:j + 1].tolist()
                offsets += range(offset, stop)
                tag_ids = tags[i:j].tolist()
                if len(tag_ids) > 1:
                    tags_out += itemgetter(*tag_ids)(tag_list)
                else:
                    tags_out += [tag_list[t] for t in tag_ids]
                times_out += times[i:j].tolist()
                if sealed:
                    datas += [buf[a:b] for a, b in zip(e, islice(e, 1, None))]
                else:  # the active node's bytearray: bytes copies
                    datas += [bytes(buf[a:b]) for a, b in zip(e, islice(e, 1, None))]
            else:
                for k in range(i, j):
                    q = p + k - i
                    if bits[q >> 3] >> (q & 7) & 1:
                        continue
                    offsets.append(offset + k - i)
                    tags_out.append(tag_list[tags[k]])
                    datas.append(bytes(buf[ends[k]:ends[k + 1]]))
                    times_out.append(times[k])
            offset = stop
        return offsets, tags_out, datas, times_out

    def read_tables(self, offset: int, count: int) -> list | None:
        """Up to ``count`` held entries from ``offset`` on as the decoded
        tables that hold them: a list of ``(buf, ends, tags, times, i, j,
        first)``, entries ``i`` .. ``j - 1`` of each (entry ``k``'s payload
        ``buf[ends[k]:ends[k + 1]]``, tag id ``tags[k]`` (a subject of
        :attr:`tag_list`), time ``times[k]``, offset ``first + k - i``), in
        order and consecutive; or None when a node of the range has deleted
        entries (then :meth:`read_columns` skips them).  What
        resp.encode_table_page writes a page from, without a Python object
        per entry.  The tables are the cache's or the active node's own:
        read them before anything changes the stream.  O(blocks touched),
        plus at most one decompression per sealed block touched."""
        tables: list = []
        if offset < self.first:
            offset = self.first
        stop = offset + count if count > 0 else offset
        if stop > self.next_offset:
            stop = self.next_offset
        nodes = self._nodes
        cache = self._cache
        while offset < stop:
            node = nodes[self._node_index(offset)]
            if node.deleted is not None:
                return None
            buf, ends, tags, times, i = node.tables_at(offset - node.start, cache)
            j = min(len(ends) - 1, i + stop - offset)  # to the end of these tables, at most to ``stop``
            tables.append((buf, ends, tags, times, i, j, offset))
            offset += j - i
        return tables

    def read_pieces(self, offset: int, count: int, render) -> list | tuple[list, list, list, list]:
        """The rendered pieces of the entries ``offset`` .. ``offset + count
        - 1`` (clamped to those held), one per entry, as a list; or, when any
        of them has none kept, ``read_columns(offset, count)`` (a tuple).

        A sealed block (of a node without deleted entries, in the decoded
        cache) renders its pieces once readers have asked this method for
        more entries of it than it holds (a *second* read, so that a reader
        that reads each block once, a tail reader, never pays for rendering)
        and a read finds every block of its range read again or rendered: a
        read served by the columns renders nothing.  ``render(offsets, tags, datas, times)`` (the block's
        columns, as :meth:`read_columns` gives them) returns one bytes object
        per entry; the block keeps them, counted in the decoded-block cache's
        bound, and drops them with itself (evicted, or its node dropped).
        Every caller of one keyspace must pass the same rendering (the pieces
        are kept per block, not per renderer).  Every block of the range is
        counted even when another one sends the read to the columns; a block
        not decoded is left to the columns' read (no decompression twice) and
        counted once it is.  O(count) when served (a list slice per block),
        plus the rendering of the blocks due; else O(blocks) plus
        :meth:`read_columns`."""
        start = offset
        if offset < self.first:
            offset = self.first
        stop = offset + count
        if stop > self.next_offset:
            stop = self.next_offset
        nodes = self._nodes
        cache = self._cache
        pieces: list | None = [] if offset < stop else None
        undecoded: list = []  # (node, block, entries read) of blocks the columns' read decodes
        while offset < stop:
            node = nodes[self._node_index(offset)]
            if not node.sealed or node.deleted is not None or not node.compressed:
                # the active node, deleted entries, a raw-stored node's permanent block
                pieces = None
                offset = node.cap_end
                continue
            p = offset - node.start
            be = node.block_entries
            b = p // be
            i = p - b * be
            held = min(be, node.cap_end - node.start - b * be)  # the block's entries
            j = min(held, i + stop - offset)
            offset += j - i
            blk = node.blocks[b]
            if blk is None:
                undecoded.append((node, b, j - i))
                pieces = None
                continue
            cache.touch(blk)
            if blk.pieces is None:
                blk.served += j - i
                if blk.served <= held:  # not read again yet
                    pieces = None
            if pieces is not None:
                pieces.append((blk, i, j, node.start + b * be, held))
        if pieces is not None:
            # every block is read again: render those that keep nothing yet (a
            # page that the columns serve renders nothing, so that a read of
            # blocks of which only some are read again pays for one way only)
            return self._pieces_of(pieces, render)
        cols = self.read_columns(start, count)
        for node, b, n in undecoded:
            blk = node.blocks[b]
            if blk is not None and blk.lru:
                blk.served += n
        return cols

    def _pieces_of(self, parts: list, render) -> list:
        """The pieces of ``parts`` (``(block, i, j, first offset, entries)``:
        entries ``i`` .. ``j - 1`` of each block), rendering the blocks that
        keep none yet. O(entries), plus O(block) per rendering."""
        out: list = []
        for blk, i, j, first, held in parts:
            out += (blk.pieces or self._render(blk, first, held, render))[i:j]
        return out

    def _render(self, blk, first: int, held: int, render) -> list:
        """The pieces of the decoded block ``blk`` (``held`` entries, the
        first at offset ``first``), rendered now and kept with it. O(block)."""
        e = blk.ends.tolist()
        buf = blk.buf
        tag_list = self._tag_list
        # (comprehensions, not starmap: once per block, and main's read_columns no longer imports it)
        pieces = render(range(first, first + held), [tag_list[t] for t in blk.tags[:held].tolist()],
                        [buf[a:b] for a, b in zip(e, islice(e, 1, None))], blk.times[:held].tolist())
        if blk.lru:  # (not when the rendering of another block of the read evicted it)
            self._cache.keep_pieces(blk, pieces)
        return pieces

    def entries_at(self, wanted: Sequence[int]) -> tuple[list, list, list, list]:
        """The held entries among the offsets ``wanted`` (ascending), as the
        columns of :meth:`read_columns`.  O(len(wanted)), plus at most one
        decompression per sealed block touched."""
        offsets: list = []
        tags_out: list = []
        datas: list = []
        times_out: list = []
        tag_list = self._tag_list
        cache = self._cache
        first, nxt = self.first, self.next_offset
        node_index = self._node_index
        nodes = self._nodes
        node = None
        for offset in wanted:
            if offset < first or offset >= nxt:
                continue
            if node is None or not node.start <= offset < node.cap_end:
                node = nodes[node_index(offset)]
            p = offset - node.start
            bits = node.deleted
            if bits is not None and bits[p >> 3] >> (p & 7) & 1:
                continue
            if node.sealed:  # (Node.tables_at, inlined)
                be = node.block_entries
                b = p // be
                blk = node.blocks[b]
                if blk is None:
                    blk = cache.decode_block(node, b)
                elif blk.lru:
                    cache.lru.move_to_end(blk)
                buf, ends, tags, times, i = blk.buf, blk.ends, blk.tags, blk.times, p - b * be
            else:
                buf, ends, tags, times, i = node.tables_at(p, cache)
            offsets.append(offset)
            tags_out.append(tag_list[tags[i]])
            datas.append(bytes(buf[ends[i]:ends[i + 1]]))
            times_out.append(times[i])
        return offsets, tags_out, datas, times_out

    def read_each(self, offsets: Sequence[int]) -> tuple[list, list]:  # noqa: C901 (one loop, its cases inlined)
        """What ``read(offset, 1)`` holds for each of ``offsets`` (each >= 1, in
        any order; a pipelined run of one-entry reads), as two columns ``(tags,
        datas)``: an entry's tag and payload, or None and None for an offset that
        holds none (missing: evicted or deleted; or at or past ``next_offset``,
        which callers tell apart).  The block (or active node's tables) of the
        last entry read is kept in hand, so that reads that stay in it cost an
        index and a slice each.  O(len(offsets)), plus at most one
        decompression per sealed block touched."""
        first, nxt = self.first, self.next_offset
        tags_out: list = []
        datas_out: list = []
        put_tag = tags_out.append
        put_data = datas_out.append
        tag_list = self._tag_list
        cache = self._cache
        nodes = self._nodes
        node_index = self._node_index
        # In hand: a sealed block's entries lo..hi-1 (none deleted, none evicted,
        # its payloads bytes; entry o at index o - base of its tables), and an
        # active node's alo..ahi-1 (index o - abase; a bytearray: copied).
        lo = hi = base = alo = ahi = abase = 0
        buf = abuf = b""
        ends = tags = aends = atags = ()
        # and the node of the last offset looked up: nlo..nhi-1, its deletions, blocks (sealed)
        node: Any = None
        nlo = nhi = be = 0
        bits = blocks = None
        for offset in offsets:
            if lo <= offset < hi:
                i = offset - base
                put_tag(tag_list[tags[i]])
                put_data(buf[ends[i]:ends[i + 1]])
                continue
            if alo <= offset < ahi:
                i = offset - abase
                put_tag(tag_list[atags[i]])
                put_data(bytes(abuf[aends[i]:aends[i + 1]]))
                continue
            if offset < first or offset >= nxt:
                put_tag(None)
                put_data(None)
                continue
            if not nlo <= offset < nhi:  # another node: its fields in hand too
                node = nodes[node_index(offset)]
                nlo, nhi = node.start, node.cap_end
                bits = node.deleted
                blocks = node.blocks if node.sealed else None
                be = node.block_entries if blocks is not None else 0
            p = offset - nlo
            if bits is not None and bits[p >> 3] >> (p & 7) & 1:
                put_tag(None)
                put_data(None)
                continue
            if blocks is not None:  # (Node.tables_at, inlined)
                b = p // be
                blk = blocks[b]
                if blk is None:
                    blk = cache.decode_block(node, b)
                elif blk.lru:
                    cache.lru.move_to_end(blk)
                i = p - b * be
                buf, ends, tags = blk.buf, blk.ends, blk.tags
                put_tag(tag_list[tags[i]])
                put_data(buf[ends[i]:ends[i + 1]])
                if bits is None:  # kept in hand (touched in the cache once, here)
                    lo = base = offset - i
                    hi = base + len(tags)
                    if lo < first:
                        lo = first
                    if hi > nxt:
                        hi = nxt
                else:
                    hi = 0
            else:
                nbuf, nends, ntags, _ = node.decoded()
                put_tag(tag_list[ntags[p]])
                put_data(bytes(nbuf[nends[p]:nends[p + 1]]))
                if bits is None:
                    abuf, aends, atags = nbuf, nends, ntags
                    alo = abase = nlo
                    ahi = abase + len(ntags)
                    if alo < first:
                        alo = first
                    if ahi > nxt:
                        ahi = nxt
        return tags_out, datas_out

    def _locate(self, offset: int):
        """(node, position) of a held offset, else None. O(1)."""
        if offset < self.first or offset >= self.next_offset:
            return None
        node = self._nodes[self._node_index(offset)]
        p = offset - node.start
        bits = node.deleted
        if bits is not None and bits[p >> 3] >> (p & 7) & 1:
            return None
        return node, p

    def get(self, offset: int) -> Entry | None:
        """The entry at ``offset``, or None if missing or not written. O(1)
        (plus one block decompression on a cold sealed block)."""
        loc = self._locate(offset)
        if loc is None:
            return None
        node, p = loc
        buf, ends, tags, times, i = node.tables_at(p, self._cache)
        return Entry(offset, self._tag_list[tags[i]], bytes(buf[ends[i]:ends[i + 1]]), times[i])

    def time_of(self, offset: int) -> int | None:
        """Write time (ns) of a held entry, else None. O(1)."""
        loc = self._locate(offset)
        if loc is None:
            return None
        node, p = loc
        return node.time_at(p, self._cache)

    def is_held(self, offset: int) -> bool:
        """True if ``offset`` holds an entry (neither evicted nor deleted). O(1)."""
        return self._locate(offset) is not None

    def iter_from(self, offset: int) -> Iterator[Entry]:
        """Held entries with offset >= ``offset``, ascending, missing ones
        skipped.  Lazy: O(1) per entry yielded plus one decompression per
        sealed block.  Writes, evictions and deletions made while the
        iterator is suspended are honoured as it reaches them."""
        while True:
            if offset < self.first:
                offset = self.first
            if offset >= self.next_offset:
                return
            node = self._nodes[self._node_index(offset)]
            p = offset - node.start
            buf, ends, tags, times, i = node.tables_at(p, self._cache)
            tag_list = self._tag_list
            # Up to the end of these tables (a block, or the active node's
            # tables as they grow: a widened offset table stops growing and
            # is fetched again).  A dropped node gets cap_end 0, which ends
            # this loop.
            while (i + 1 < len(ends) and offset < node.cap_end and offset < self.next_offset
                   and offset >= self.first):
                bits = node.deleted
                if bits is None or not bits[p >> 3] >> (p & 7) & 1:
                    yield Entry(offset, tag_list[tags[i]], bytes(buf[ends[i]:ends[i + 1]]),
                                times[i])
                offset += 1
                p += 1
                i += 1

    def offset_at_time(self, t_ns: int) -> int:
        """First held offset whose time is >= ``t_ns`` (``next_offset`` if
        none; may be a deleted entry's offset).  O(log nodes + log N) plus at
        most O(log blocks) block decompressions."""
        nodes = self._nodes
        if not nodes or self.first >= self.next_offset:
            return self.next_offset
        lo, hi = 0, len(nodes)
        while lo < hi:  # first node whose newest time is >= t_ns
            mid = (lo + hi) // 2
            node = nodes[mid]
            last_time = node.last_time
            if last_time < t_ns:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(nodes):
            return self.next_offset
        node = nodes[lo]
        p0 = max(self.first - node.start, 0)
        if not node.sealed:
            return node.start + bisect_left(node.decoded()[3], t_ns, p0, node.count)
        be = node.block_entries
        b, hi = p0 // be, len(node.blocks) - 1
        lo = b
        while lo < hi:  # first block whose newest time is >= t_ns (the last one is)
            mid = (lo + hi) // 2
            times = node._block(mid, self._cache).times
            if times[len(times) - 1] < t_ns:
                lo = mid + 1
            else:
                hi = mid
        times = node._block(lo, self._cache).times
        i0 = p0 - lo * be if lo == b else 0
        return node.start + lo * be + bisect_left(times, t_ns, i0, len(times))

    # -- deletion (missing entries in the middle) ---------------------------
    def delete(self, offset: int) -> bool:
        """Make a held entry missing; True if it was held.  O(1) (moving
        ``first`` past deleted entries is amortised O(1))."""
        loc = self._locate(offset)
        if loc is None:
            return False
        node, p = loc
        # --- JetStream subject index hook (engine/subjects.py): once built only ---
        if self._subjects is not None:
            self._subjects.deleted(offset)
        bits = node.deleted
        if bits is None:
            bits = node.deleted = bytearray((node.cap_end - node.start + 7) // 8)
            if node.sealed:
                grown = sys.getsizeof(bits)
                node.mem += grown
                self._sealed_mem += grown
        bits[p >> 3] |= 1 << (p & 7)
        node.ndel += 1
        self._deleted_held += 1
        if offset == self.first:
            self._skip_deleted()
            self._drop_evicted_nodes()
        return True

    # -- eviction ---------------------------------------------------------------
    def _deleted_between(self, a: int, b: int) -> int:
        """Deleted offsets in [a, b), a >= first. O(nodes in range)."""
        if not self._deleted_held:
            return 0
        nodes = self._nodes
        total = 0
        off = a
        k = self._node_index(a)
        while off < b:
            node = nodes[k]
            stop = node.cap_end if node.cap_end < b else b
            if node.ndel:
                total += _popcount_range(node.deleted, off - node.start, stop - node.start)
            off = stop
            k += 1
        return total

    def _skip_deleted(self) -> None:
        """Move ``first`` over deleted entries (they become evicted)."""
        if not self._deleted_held:
            return
        nodes = self._nodes
        first = self.first
        nxt = self.next_offset
        while first < nxt:
            node = nodes[self._node_index(first)]
            bits = node.deleted
            if bits is None:
                break
            p = first - node.start
            if not bits[p >> 3] >> (p & 7) & 1:
                break
            first += 1
            self._deleted_held -= 1
        self.first = first

    def _drop_node(self, node: Node) -> list[int]:
        """Release one node; returns the tag ids it may have left unused."""
        if isinstance(node, SealedNode):
            self._sealed_mem -= node.mem
            refs = self._ref_counts()
            ids = []
            for tid in node.tag_set:
                n = refs[tid] - 1
                refs[tid] = n
                if not n:
                    ids.append(tid)
            self._cache.forget(node)
            if not self._cache.pins:
                # Break references to large buffers even if someone still holds the node
                # (unless a snapshot capture holds it: it writes the node as it was).
                node.data = b""
                node.blocks = []
                node.whole = None
        else:
            assert isinstance(node, ActiveNode)
            ids = list(node.tag_ids())  # refs 0: only the active node used them
            self._active = None
            if self._node_bytes < 0:  # its owed seal goes with it
                self._node_bytes = ~self._node_bytes
            node.buf = bytearray()
            node.ends = node.tags = node.times = None
        if not self._cache.pins:
            node.cap_end = 0  # tells suspended iterators that it is gone (they check first too)
        return ids

    def _drop_evicted_nodes(self) -> None:
        """Release every node whose offsets are all below ``first``."""
        nodes = self._nodes
        first = self.first
        k = 0
        while k < len(nodes) and nodes[k].sealed and nodes[k].cap_end <= first:
            k += 1
        if k < len(nodes) and not nodes[k].sealed and first >= self.next_offset:
            k += 1  # everything evicted: the active node goes too
        if k:
            # --- Redis ids (engine/xids.py): the last id dropped becomes stored ---
            before_drop(self, min(nodes[k - 1].cap_end, self.next_offset) - 1)
            # --- JetStream subject index hook (engine/subjects.py): once built only ---
            if self._subjects is not None:
                self._subjects.dropped(nodes[:k])
            released: list[int] = []
            for node in nodes[:k]:
                released += self._drop_node(node)
            del nodes[:k]
            if nodes:
                self._first_node_index = (nodes[0].base - 1) // self.node_entries
            if released:
                self._free_unused(released)

    def _evict_to(self, new_first: int) -> int:
        """Make ``new_first`` the first offset held (no-op if not above
        ``first``); returns held entries evicted."""
        first = self.first
        if new_first > self.next_offset:
            new_first = self.next_offset
        if new_first <= first:
            return 0
        deleted = self._deleted_between(first, new_first)
        self._deleted_held -= deleted
        self.first = new_first
        self._skip_deleted()
        self._drop_evicted_nodes()
        return new_first - first - deleted

    def evict_through(self, offset: int) -> int:
        """Evict every entry with offset <= ``offset`` (clamped to ``last``);
        returns the entries evicted that were held.  O(nodes released)."""
        return self._evict_to(offset + 1)

    def evict_keep(self, n: int) -> int:
        """Keep only the ``n`` newest offsets (``first = max(first,
        next_offset - n)``); returns entries evicted.  O(nodes released)."""
        if n < 0:
            raise ValueError("n must be >= 0")
        return self._evict_to(self.next_offset - n)

    def evict_older_than(self, cutoff_ns: int) -> int:
        """Evict every entry whose time is < ``cutoff_ns``; returns entries
        evicted.  O(1) when nothing is old enough (remembered floor), else
        O(log nodes + log N + nodes released)."""
        if cutoff_ns <= self._age_floor:
            return 0
        target = self.offset_at_time(cutoff_ns)
        evicted = self._evict_to(target)
        if self.first < self.next_offset:
            node = self._nodes[self._node_index(self.first)]
            self._age_floor = node.time_at(self.first - node.start, self._cache)
        else:
            # Nothing held: later entries get times >= last_time (not >= the
            # cutoff, which may be ahead of the clock writers pass in).
            self._age_floor = self.last_time
        return evicted

    def enforce_limits(self, now_ns: int) -> int:
        """Apply ``config.max_len``, ``config.max_age_ms`` then
        ``config.max_msgs_per_subject``; returns entries evicted or deleted.
        Called by append/append_many.  O(1) when nothing is due."""
        cfg = self.settings
        evicted = 0
        if cfg.max_len > 0:
            evicted += self._evict_to(self.next_offset - cfg.max_len)
        if cfg.max_age_ms > 0:
            evicted += self.evict_older_than(now_ns - cfg.max_age_ms * 1_000_000)
        if cfg.max_msgs_per_subject > 0:
            # --- JetStream per-subject limit (engine/subjects.py): builds the
            # subject index on first need; appends keep the limit after that. ---
            evicted += enforce_subject_limit(self)
        return evicted

    def clear_cache(self) -> None:
        """Drop this stream's blocks from its decoded-block cache (call when
        the stream is deleted, so that its decoded blocks do not linger).
        O(min(cache size, nodes + blocks))."""
        cache = self._cache
        nodes = self._nodes
        if len(cache) < len(nodes):
            mine = set(map(id, nodes))
            for blk in list(cache.lru):
                if blk.lru and id(blk.node) in mine:  # not dropped with an earlier block
                    cache.forget(blk.node)
        else:
            for node in nodes:
                if node.sealed and node.compressed:
                    cache.forget(node)

    def use_cache(self, cache: BlockCache) -> None:
        """Make ``cache`` this stream's decoded-block cache (a stream joining
        a keyspace), leaving the old one without this stream's blocks.
        O(nodes + blocks)."""
        if cache is not self._cache:
            self.clear_cache()
            self._cache = cache

    # -- snapshots --------------------------------------------------------------
    def export_state(self) -> dict:
        """Everything needed to rebuild the stream, as plain values:
        ``node_entries``, ``config`` (dict), ``first``, ``next_offset``,
        ``last_time``, ``tags`` (list indexed by tag id, None for free ids,
        index 0 unused), ``tag_refs`` (the reference count of every tag id:
        sealed nodes using it, u32 little-endian bytes) and ``nodes``: a
        list of ``(blob, deleted)`` pairs where ``deleted`` is the node's
        bitmap as bytes or None.  O(size)."""
        return {
            "node_entries": self.node_entries,
            "config": asdict(self.settings),
            "first": self.first,
            "next_offset": self.next_offset,
            "last_time": self.last_time,
            "tags": list(self._tag_list),
            "tag_refs": _le_bytes(self._tag_refs),
            "nodes": [(node.blob(), None if node.deleted is None else bytes(node.deleted))
                      for node in self._nodes],
            **({} if self._x is None else {"x": self._x.export()}),
            **({} if not self._ingest else {"ingest": self._ingest.export()}),
        }

    @classmethod
    def from_state(cls, state: dict, check: bool = True, cache: BlockCache | None = None,
                   node_max_bytes: int = NODE_MAX_BYTES) -> "Stream":
        """Rebuild a stream from :meth:`export_state`; raises ValueError on
        inconsistent input.  An item of ``nodes`` may also hold a
        :class:`Node` already rebuilt (e.g. by :meth:`Node.from_parts`)
        instead of a blob.  ``tag_refs`` is optional (snapshots of earlier
        versions lack it).

        ``check=True``: blobs are rebuilt with every block decompressed and
        checked, and the tag reference counts are recounted from the nodes'
        tag sets (and compared with ``tag_refs`` when given): O(size).
        ``check=False``, for input whose integrity is known (a verified
        checksum): version-3 blobs are not decompressed and ``tag_refs`` is
        taken as given, with cheap consistency checks only (its length, zero
        for free ids, its sum against the nodes' tag-set sizes, each tag
        set's smallest and largest id): O(nodes + blocks + tags)."""
        s = cls(state["node_entries"], cache, node_max_bytes)
        config = StreamConfig(**state["config"])
        if config != StreamConfig():  # else the shared defaults: no object per stream
            s._config = config
        s.first = state["first"]
        s.next_offset = state["next_offset"]
        s.last_time = state["last_time"]
        tags = s._load_tag_table(state["tags"])
        given: array | None = None
        saved = state.get("tag_refs")
        if saved is not None:
            given = _le_array("I", saved) if isinstance(saved, (bytes, bytearray, memoryview)) \
                else array("I", saved)
            if len(given) != len(tags):
                raise ValueError("tag reference counts do not match the tag table")
        recount = check or given is None
        s._tag_refs = array("I", bytes(4 * len(tags))) if recount or given is None else given
        ids_total = s._load_nodes(state["nodes"], check, recount)
        if given is not None:
            refs = s._tag_refs
            if recount:
                if refs != given:
                    raise ValueError("tag reference counts do not match the nodes")
            elif refs[0] or sum(refs) != ids_total or any(refs[t] for t in s._free_ids or ()):
                raise ValueError("tag reference counts do not match the nodes")
        s._check_loaded_offsets()
        if s._refs is not None and not any(s._refs):
            s._refs = None  # no sealed node: the counts are created on first need
        s._load_ids(state.get("x"))
        if state.get("ingest"):
            s._ingest = Ingest.load(b"", state["ingest"])
        s._deleted_held = sum(
            _popcount_range(node.deleted, max(s.first, node.start) - node.start, node.count)
            for node in s._nodes if node.ndel)
        s._skip_deleted()
        s._drop_evicted_nodes()
        s._free_unused([t for t in range(1, len(tags)) if tags[t] is not None])
        return s

    def _load_ids(self, saved) -> None:
        """Install the saved stored ids (engine/xids.py); a stream saved before
        they existed, whose first node does not start at 1, gets an anchor
        before it (its ids are then derived from its times). O(anchors)."""
        if saved is not None:
            self._x = XState.load(saved)
        elif self._nodes and 1 < self._nodes[0].start < self.next_offset:
            x = self._x = XState()
            x.offs, x.ids = [self._nodes[0].start - 1], [(0, 0)]
            x.last = x.top = id_of(self, self.next_offset - 1)

    def _load_tag_table(self, tags) -> list:
        """Install a saved tag table (list indexed by id, None for free ids). O(tags)."""
        tags = list(tags)
        if not tags or tags[0] is not None:
            raise ValueError("tag table must start with None")
        live = [tag for tag in tags[1:] if tag is not None]
        if any(type(tag) is not bytes for tag in live) or len(set(live)) != len(live):
            raise ValueError("bad tag table")
        self._set_tag_list(tags)
        self._tag_mem = sum(map(sys.getsizeof, live))
        return tags

    def _load_nodes(self, items, check: bool, recount: bool) -> int:  # noqa: C901 (over the limit when it came in)
        """Install the saved ``(blob or Node, deleted)`` items, checking their
        geometry, tag ids and times; ``recount``: count the tag references
        into ``_tag_refs``.  Returns the sum of the sealed nodes' tag-set
        sizes (to check given counts against).  O(nodes + blocks + tags), or
        O(size) with ``check``."""
        n = self.node_entries
        ids_total = 0
        prev_time = -(1 << 63)
        for i, (item, deleted) in enumerate(items):
            node: Any = item if isinstance(item, Node) else Node.from_blob(item, n, check, self._cache)
            if i == 0:
                self._first_node_index = (node.base - 1) // n
            elif node.start != self._nodes[-1].cap_end:
                raise ValueError("node blobs are not consecutive")
            if node.cap_end > node.base + n or (node.cap_end != node.base + n and not node.short):
                raise ValueError("node does not fit the node size")
            if node.sealed:
                ids_total += self._load_tag_set(node.tag_set, recount)
                times = (node.first_time, node.last_time)
            else:
                if i != len(items) - 1:
                    raise ValueError("only the last node may be partial")
                self._check_tag_ids(node.tag_ids())
                self._active = node
                if node.start + node.count == node.cap_end:
                    self._owe_seal()  # a full active node given as an object: the next append seals it
                times = (node.decoded()[3][0], node.last_time)
            if times[0] < prev_time:
                raise ValueError("node times go backwards")
            prev_time = times[1]
            if deleted is not None:
                if len(deleted) != (node.cap_end - node.start + 7) // 8:
                    raise ValueError("deleted bitmap has the wrong size")
                node.deleted = bytearray(deleted)
                node.ndel = _popcount_range(node.deleted, 0, node.cap_end - node.start)
                if node.sealed:
                    node.mem = node._sealed_mem()
            if node.sealed:
                self._sealed_mem += node.mem
            self._nodes.append(node)
        if prev_time > self.last_time:
            raise ValueError("last_time is older than the newest entry")
        return ids_total

    def _check_tag_ids(self, ids) -> None:
        tags = self._tag_list
        for tid in ids:
            if tid >= len(tags) or tags[tid] is None:
                raise ValueError("node uses an unknown tag id")

    def _load_tag_set(self, ids, recount: bool) -> int:
        """A loaded sealed node's tag set: counted (``recount``) or bounds
        checked (sorted ids: the ends bound them all).  Returns its size."""
        if recount:
            self._check_tag_ids(ids)
            refs = self._tag_refs
            for tid in ids:
                refs[tid] += 1
        elif not ids or ids[0] < 1:
            raise ValueError("node uses an unknown tag id")
        else:
            self._check_tag_ids((ids[0], ids[-1]))
        return len(ids)

    def _check_loaded_offsets(self) -> None:
        nodes = self._nodes
        if nodes:
            last = nodes[-1]
            end = last.cap_end if last.sealed else last.start + last.count
            if end != self.next_offset or not nodes[0].start <= self.first <= self.next_offset:
                raise ValueError("offsets do not match the nodes")
        elif self.first != self.next_offset or self.first < 1:
            raise ValueError("offsets do not match the nodes")

    def _check(self) -> None:
        """Assert every structural invariant (tests call it after each op);
        see engine/invariants.py.  O(size)."""
        from .invariants import check_stream
        check_stream(self)
        if self._x is not None:
            self._x._check(self)

    def __repr__(self) -> str:
        return (f"<Stream first={self.first} next={self.next_offset} "
                f"length={self.length} nodes={self.nodes}>")
