"""Storage engine of tstream: streams of macro nodes and the keyspace.

No networking, no file I/O, no imports from other project packages.
"""

from .glob import compile_glob, glob_match
from .keyspace import Keyspace
from .stream import (Entry, Node, Stream, StreamConfig, clear_decoded_cache,
                     decoded_cache_bytes, set_decoded_cache_limits)

__all__ = [
    "Entry", "Keyspace", "Node", "Stream", "StreamConfig", "clear_decoded_cache",
    "compile_glob", "decoded_cache_bytes", "glob_match", "set_decoded_cache_limits",
]
