"""Storage engine of tstream: streams of macro nodes, their JetStream subject
indexes (subjects.py) and the keyspace.

Modules: stream.py (the log), node.py (a macro node), blocks.py (sealed
blocks and the decoded-block cache), codec.py (node blob formats), tags.py
(the tag table), invariants.py (what the tests assert), subjects.py, groups.py,
glob.py, keyspace.py.

No networking, no file I/O, no imports from other project packages.
"""

from .blocks import BlockCache
from .codec import BLOB_PREFIX
from .glob import compile_glob, glob_match
from .keyspace import Keyspace
from .node import ActiveNode, Node, SealedNode
from .stream import Entry, Stream, StreamConfig
from .subjects import InvalidSubject, SubjectFilter, SubjectIndex, index_of, parse_filter

__all__ = [
    "ActiveNode", "BLOB_PREFIX", "BlockCache", "Entry", "Keyspace", "Node", "SealedNode",
    "Stream", "StreamConfig",
    "compile_glob", "glob_match",
    "InvalidSubject", "SubjectFilter", "SubjectIndex", "index_of", "parse_filter",
]
