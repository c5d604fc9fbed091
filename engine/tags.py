"""The tag table of a stream: tags interned as small integer ids.

Entries store a tag id (u32) instead of the tag::

    _tag_list : [None, b"orders", b"users", None, b"kv.1"]   id -> tag (None: free id)
    _tag_id   : {b"orders": 1, b"users": 2, b"kv.1": 4}      tag -> id
    _tag_refs : array('I') [0, 3, 1, 0, 2]                  sealed nodes using each id
    _free_ids : [3]                                          ids to reuse

Id 0 is reserved so that ids are truthy.  ``_tag_refs[id]`` counts the
*sealed* nodes whose entries use the tag: a node's distinct ids are computed
once, when it is sealed, and kept in its ``tag_set``.  A tag is alive while a
sealed node references it or the active node stores it; when nodes are
dropped the counts fall and every tag left unused is freed and its id reused
(the active node's ids are computed then, once per drop), so a long-running
stream writing unique tags does not leak.

:class:`TagTable` is a base class of :class:`engine.stream.Stream` (slots, no
extra object per stream); the snapshot carries ``_tag_list`` and
``_tag_refs`` (see ``Stream.export_state``).
"""

from __future__ import annotations

import sys
from array import array

__all__ = ["TagTable"]


class TagTable:
    """Interned tags of a stream (see the module docstring)."""

    __slots__ = ("_tag_id", "_tag_list", "_tag_refs", "_free_ids", "_tag_mem", "_active")

    def __init__(self) -> None:
        self._tag_id: dict[bytes, int] = {}
        self._tag_list: list = [None]     # id 0 reserved: ids are truthy
        self._tag_refs = array("I", (0,))  # sealed nodes using each tag id
        self._free_ids: list[int] = []
        self._tag_mem = 0                  # getsizeof of the interned tags
        self._active = None                # the stream's active node (engine/node.py)


    def _intern(self, tag: bytes) -> int:
        """Slow path of a tag lookup: give a new tag an id.  Its reference
        count stays 0 until a node holding it is sealed; until then the
        active node keeps it alive (see :meth:`_free_unused`)."""
        if type(tag) is not bytes:
            raise TypeError("tag must be bytes")
        if self._free_ids:
            tid = self._free_ids.pop()
            self._tag_list[tid] = tag
        else:
            tid = len(self._tag_list)
            self._tag_list.append(tag)
            self._tag_refs.append(0)
        self._tag_id[tag] = tid
        self._tag_mem += sys.getsizeof(tag)
        return tid

    def _free_unused(self, candidates) -> None:
        """Free the candidate tag ids no sealed node and not the active node
        uses any more."""
        refs = self._tag_refs
        tag_list = self._tag_list
        in_active = None
        for tid in candidates:
            if refs[tid] or tag_list[tid] is None:
                continue
            if in_active is None:
                in_active = set(self._active.tags) if self._active is not None else ()
            if tid in in_active:
                continue
            tag = tag_list[tid]
            del self._tag_id[tag]
            tag_list[tid] = None
            self._free_ids.append(tid)
            self._tag_mem -= sys.getsizeof(tag)

    def tag_count(self) -> int:
        """Distinct tags used by the nodes held. O(1)."""
        return len(self._tag_id)

