# A run's store into the active node's columns, a run's columns, a node's block bodies (engine/_columns.c):
# what mypy knows of them.
from array import array
from typing import Sequence

def store_run(buf: bytearray, ends: array, tags: array, times: array, datas: Sequence, tids: list | int,
              now_ns: int, run_times: array | None, start: int, room_entries: int, room_bytes: int, /) -> int: ...
def run_columns(rows: list | tuple, first: int, /) -> tuple: ...
def block_bodies(buf: bytearray | bytes | memoryview, ends: array, tags: array, times: array, count: int,
                 per_block: int, /) -> list[bytes]: ...
