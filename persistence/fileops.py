"""The file operations persistence performs, behind one object (a seam).

Every step that can fail on a real disk (open, write, fsync, truncate,
rename, directory fsync, unlink, the manifest update) goes through a
``FileOps`` held by the AOF (``persistence.aof.AppendOnlyFile``) and by the
server's ``Persistence``.  The default object calls the operating system; a
test gives the server another one that fails a chosen step once (see
tests/test_faults.py), to check that no failure loses an acknowledged write.
Nothing here is module-level state: each server holds its own object.
"""

from __future__ import annotations

import os


class FileOps:
    """Thin wrappers of the ``os`` calls; ``step`` names say what is being done."""

    def open(self, path: str, flags: int, mode: int = 0o644, step: str = "open") -> int:
        return os.open(path, flags, mode)

    def write(self, fd: int, data: memoryview | bytes, step: str = "write") -> int:
        return os.write(fd, data)

    def fsync(self, fd: int, step: str = "fsync") -> None:
        os.fsync(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)

    def rename(self, source: str, target: str, step: str = "rename") -> None:
        os.replace(source, target)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def fsync_directory(self, directory: str) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            self.fsync(fd, "fsync-dir")
        finally:
            os.close(fd)

    def write_file(self, path: str, data: bytes, step: str) -> None:
        """Write ``data`` as the new content of ``path`` atomically and durably:
        a temp file, written and fsynced, renamed over ``path``, then the
        directory fsynced.  On failure the temp file is removed and ``path``
        is as it was (or, if only the directory fsync failed, already
        replaced: the caller treats that as a failure too)."""
        temp = path + ".tmp"
        fd = self.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, step=step)
        try:
            view = memoryview(data)
            while view:
                view = view[self.write(fd, view, step=step):]
            self.fsync(fd, step=step)
        except BaseException:
            os.close(fd)
            _remove_quietly(temp)
            raise
        os.close(fd)
        try:
            self.rename(temp, path, step=step)
        except BaseException:
            _remove_quietly(temp)
            raise
        self.fsync_directory(os.path.dirname(path) or ".")


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
