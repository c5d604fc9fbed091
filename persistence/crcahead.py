"""Checking an incr file's CRCs in a helper process, ahead of the load.

CRC-32 of the records is about 8% of an AOF load's loading thread (zlib,
~4 instructions a byte).  A thread cannot take it off: ``zlib.crc32`` lets
the GIL go on every frame and takes it back only when the loading thread
lets it go (up to the 5 ms switch interval later), so it would verify one
frame per switch.  A process has no GIL to share: :class:`CrcAhead` starts a
fresh interpreter (no fork: the loading process may have threads) that maps
the same file, walks its frames as ``framing.iter_frames`` does and, as it
goes, writes to a pipe how far every frame is verified (the end of the last
frame of an unbroken run of good frames from the start, 8 bytes
little-endian, about every ``STEP`` bytes and at its end).  It stops at the
first frame it cannot verify (a checksum mismatch, a damaged header, a torn
tail), having published the end of the frame before it.

The loading thread skips the CRC of a frame that ends at or below the
verified offset and checks every other frame itself, as before: a bad record
is found and reported by the loading thread, at its own offset, whether or
not the helper got there first; the helper only ever says "good up to here".
If the helper cannot start or dies, nothing is verified ahead and the load
checks every frame itself.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys

__all__ = ["CrcAhead", "MIN_BYTES", "STEP"]

MIN_BYTES = 16 << 20  # smaller incr files are checked by the loading thread alone
STEP = 1 << 20  # the helper publishes its progress about this often

_ENTRY = struct.Struct("<Q")

# The helper's program (python -I -S -c): stdlib only, no tstream import.
# argv: path, step.  Frames as persistence.framing: "TR", length, crc,
# length ^ 0xFFFFFFFF (little-endian u32s), then the payload.
_HELPER = r"""
import mmap, os, struct, sys, zlib
path, step = sys.argv[1], int(sys.argv[2])
out = sys.stdout.fileno()
head = struct.Struct("<2sIII").unpack_from
pack = struct.Struct("<Q").pack
crc32 = zlib.crc32
def publish(v):
    os.write(out, pack(v))
with open(path, "rb") as f:
    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
view = memoryview(data)
size = len(view)
pos = told = 0
try:
    while pos + 14 <= size:
        magic, length, crc, inverted = head(view, pos)
        end = pos + 14 + length
        if magic != b"TR" or length ^ inverted != 0xFFFFFFFF or length > 1 << 31 or end > size:
            break
        if crc32(view[pos + 14:end]) != crc:
            break
        pos = end
        if pos - told >= step:
            publish(pos)
            told = pos
    if pos != told:
        publish(pos)
except BrokenPipeError:
    pass
"""


class CrcAhead:
    """A helper process verifying the frames of the file at ``path`` (see the
    module docstring).  ``verified()``: how far, without waiting.  Close it
    (``close``) before the file is changed (a torn tail truncated)."""

    __slots__ = ("proc", "fd", "done")

    def __init__(self, path: str, step: int = STEP) -> None:
        self.done = 0
        self.proc: subprocess.Popen | None = None
        self.fd = -1
        try:
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _HELPER, path, str(step)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, close_fds=True)
        except (OSError, ValueError):  # no interpreter to start: nothing checked ahead
            return
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)

    def verified(self) -> int:
        """The offset up to which every frame is verified (0: none yet)."""
        if self.fd < 0:
            return self.done
        try:
            got = os.read(self.fd, 64 << 10)  # (8-byte writes are atomic in a pipe: whole entries)
        except BlockingIOError:
            return self.done
        except OSError:
            got = b""
        if got:
            self.done = _ENTRY.unpack_from(got, len(got) - 8)[0]
        else:  # the helper ended and everything it wrote is read
            self._stop()
        return self.done

    def _stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        self.fd = -1
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def close(self) -> None:
        """Stop the helper (whatever it is doing) and reap it."""
        self._stop()
