"""The tag table of a stream: tags interned as small integer ids.

Entries store a tag id (u32) instead of the tag::

    _tag_list  : [None, b"orders", b"users", None, b"kv.1"]   id -> tag (None: free id)
    _tag_index : the list itself while it has few ids, then    tag -> id
                 a dict {b"orders": 1, b"users": 2, b"kv.1": 4}
    _refs      : array('I') [0, 3, 1, 0, 2]    sealed nodes using each id (None: all 0)
    _free_ids  : [3]                           ids to reuse (None: none yet)

Id 0 is reserved so that ids are truthy.  ``_tag_refs[id]`` counts the
*sealed* nodes whose entries use the tag: a node's distinct ids are computed
once, when it is sealed, and kept in its ``tag_set``.  A tag is alive while a
sealed node references it or the active node stores it; when nodes are
dropped the counts fall and every tag left unused is freed and its id reused
(the active node's ids are computed then, once per drop), so a long-running
stream writing unique tags does not leak.

Small tables are cheap: a stream of one tag shares its table, the tuple
``(None, tag)``, with every stream of the keyspace using that one tag (kept by
``BlockCache.intern``; :meth:`TagTable._own_tag_list` copies it into a list of
the stream's own before any change); a stream of a few tags has no dict (``list.index`` finds a tag among up to
``SMALL_TAGS`` ids as fast as a dict lookup), no reference counts until a
node is sealed and no free list until an id is freed.  Both kinds answer
``_tag_index.index(tag)``: ``list.index`` raises ValueError on a miss,
:class:`TagDict` returns None.  The append hot path calls
``index(tag, True)``: the list then starts its scan after the reserved id 0
(whose None costs a slow comparison), the dict returns True on a miss (never
an id: ids are ints).

:class:`TagTable` is a base class of :class:`engine.stream.Stream` (slots, no
extra object per stream); the snapshot carries ``_tag_list`` and
``_tag_refs`` (see ``Stream.export_state``).
"""

from __future__ import annotations

import sys
from array import array
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .blocks import BlockCache
    from .node import ActiveNode

__all__ = ["SMALL_TAGS", "TagDict", "TagTable"]

SMALL_TAGS = 8  # ids looked up by scanning the list; past this a dict is built


class TagDict(dict):
    """tag -> id of a big table; ``index(tag, default=None)``: the id or
    ``default`` (the lookup protocol ``list.index`` shares, without raising)."""

    __slots__ = ()
    index = dict.get


class TagTable:
    """Interned tags of a stream (see the module docstring)."""

    # _tag_index and _active last: next to the slots of Stream that append reads
    __slots__ = ("_tag_list", "_refs", "_free_ids", "_tag_mem", "_tag_index", "_active")

    _cache: BlockCache  # the keyspace's (a slot of Stream): new tags are interned there

    def __init__(self) -> None:
        # id 0 reserved: ids are truthy.  A tuple: a one-tag table shared by
        # the keyspace's streams (copied on write, see _own_tag_list).
        self._tag_list: list | tuple = [None]
        self._tag_index: list | tuple | TagDict = self._tag_list
        self._refs: array | None = None    # sealed nodes using each tag id; None: all 0
        self._free_ids: list[int] | None = None
        self._tag_mem = 0                  # getsizeof of the interned tags
        self._active: ActiveNode | None = None  # the stream's active node (engine/node.py)

    @property
    def _tag_refs(self) -> array:
        """Reference count of every tag id (sealed nodes using it), as an
        array as long as the table (zeros while no node was sealed).  O(1),
        O(tags) when all zero."""
        refs = self._refs
        return array("I", bytes(4 * len(self._tag_list))) if refs is None else refs

    @_tag_refs.setter
    def _tag_refs(self, refs: array) -> None:
        self._refs = refs

    def _ref_counts(self) -> array:
        """The reference counts, created (all zero) on first need. O(1) amortised."""
        refs = self._refs
        if refs is None:
            refs = self._refs = array("I", bytes(4 * len(self._tag_list)))
        return refs

    def _set_tag_list(self, tags: list) -> None:
        """Install ``tags`` (id -> tag, None for free ids) and its index. O(tags)."""
        if len(tags) == 2 and tags[1] is not None:  # one tag: the keyspace's shared table
            self._tag_list = self._tag_index = self._cache.intern((None, tags[1]))
            self._free_ids = None
            return
        self._tag_list = tags
        if len(tags) > SMALL_TAGS + 1:
            self._tag_index = TagDict((tag, tid) for tid, tag in enumerate(tags) if tid and tag is not None)
        else:
            self._tag_index = tags
        free = [t for t in range(len(tags) - 1, 0, -1) if tags[t] is None]
        self._free_ids = free or None

    def _tag_lookup(self, tag) -> int | None:
        """Id of ``tag``, or None. O(1) (a scan of at most SMALL_TAGS ids)."""
        try:
            return self._tag_index.index(tag)
        except ValueError:
            return None

    def _intern(self, tag: bytes) -> int:
        """Slow path of a tag lookup: give a new tag an id.  Its reference
        count stays 0 until a node holding it is sealed; until then the
        active node keeps it alive (see :meth:`_free_unused`)."""
        if type(tag) is not bytes:
            raise TypeError("tag must be bytes")
        tag = self._cache.intern(tag)  # the keyspace's streams share equal tags
        # The new byte count first: the int it makes is the last allocation that may
        # fail (MemoryError) before the table changes, so a failure leaves it as it was.
        tag_mem = self._tag_mem + sys.getsizeof(tag)
        tag_list = self._tag_list
        if self._free_ids:
            tid = self._free_ids.pop()
            self._own_tag_list()[tid] = tag
        elif len(tag_list) == 1:
            # The first tag: the table (None, tag), one tuple shared by the
            # keyspace's streams that use that one tag (copied on write).
            tid = 1
            self._tag_list = self._tag_index = self._cache.intern((None, tag))
            if self._refs is not None:
                self._refs.append(0)
        else:
            tag_list = self._own_tag_list()
            tid = len(tag_list)
            tag_list.append(tag)
            if self._refs is not None:
                self._refs.append(0)
            if tid == SMALL_TAGS + 1:
                self._set_tag_list(tag_list)  # from now on a dict
        if type(self._tag_index) is TagDict:
            self._tag_index[tag] = tid
        self._tag_mem = tag_mem
        return tid

    def _own_tag_list(self) -> list:
        """The table's list, made the stream's own first if it is a shared
        one-tag tuple (see :meth:`_intern`). O(1)."""
        tag_list = self._tag_list
        if isinstance(tag_list, list):
            return tag_list
        own = list(tag_list)
        if self._tag_index is tag_list:
            self._tag_index = own
        self._tag_list = own
        return own

    def _free_unused(self, candidates) -> None:
        """Free the candidate tag ids no sealed node and not the active node
        uses any more."""
        refs = self._refs
        tag_list = self._tag_list
        in_active = None
        for tid in candidates:
            if (refs is not None and refs[tid]) or tag_list[tid] is None:
                continue
            if in_active is None:
                in_active = self._active.tag_ids() if self._active is not None else ()
            if tid in in_active:
                continue
            tag = tag_list[tid]
            tag_mem = self._tag_mem - sys.getsizeof(tag)  # (before any change, as in _intern)
            own = self._own_tag_list()
            index = self._tag_index
            if isinstance(index, TagDict):
                del index[tag]
            own[tid] = None
            tag_list = own
            if self._free_ids is None:
                self._free_ids = []
            self._free_ids.append(tid)
            self._tag_mem = tag_mem

    def _live_tag_ids(self) -> list[int]:
        """Every id in use. O(table)."""
        tag_list = self._tag_list
        return [t for t in range(1, len(tag_list)) if tag_list[t] is not None]

    def tag_count(self) -> int:
        """Distinct tags used by the nodes held. O(1)."""
        return len(self._tag_list) - 1 - len(self._free_ids or ())

    def _tag_table_mem(self) -> int:
        """Bytes of the table's objects and interned tags. O(1)."""
        mem = self._tag_mem + sys.getsizeof(self._tag_list)
        if self._tag_index is not self._tag_list:
            mem += sys.getsizeof(self._tag_index)
        if self._refs is not None:
            mem += sys.getsizeof(self._refs)
        if self._free_ids is not None:
            mem += sys.getsizeof(self._free_ids)
        return mem
