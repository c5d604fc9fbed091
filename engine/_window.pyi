# The duplicate window's run claim (engine/_window.c): what mypy knows of it.
from collections import deque

def claim_ids(table: dict, ids: tuple, offset: int, runs: deque, stored_ns: int, /) -> bool: ...
