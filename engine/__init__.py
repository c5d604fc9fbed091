"""Storage engine of tstream: streams of macro nodes, their JetStream subject
indexes (subjects.py) and the keyspace.

No networking, no file I/O, no imports from other project packages.
"""

from .glob import compile_glob, glob_match
from .keyspace import Keyspace
from .stream import (Entry, Node, Stream, StreamConfig, clear_decoded_cache,
                     decoded_cache_bytes, set_decoded_cache_limits)
from .subjects import InvalidSubject, SubjectFilter, SubjectIndex, index_of, parse_filter

__all__ = [
    "Entry", "Keyspace", "Node", "Stream", "StreamConfig", "clear_decoded_cache",
    "compile_glob", "decoded_cache_bytes", "glob_match", "set_decoded_cache_limits",
    "InvalidSubject", "SubjectFilter", "SubjectIndex", "index_of", "parse_filter",
]
