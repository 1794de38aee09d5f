"""A disk that fills up mid-write, for the fault tests: every local file the project writes goes
through ``schemas.storage.write_bytes``, which opens its temporary file with the module's
``open``; :func:`fill_disk_after` replaces that ``open`` so that a file whose final name matches
raises ``OSError(ENOSPC)`` once ``limit_bytes`` of it are written (the bytes before that really
land on the disk, as on a full disk). :class:`FullMemoryFileSystem` is the same on a bucket: a
``memory://``-like filesystem whose uploads fail after ``limit_bytes``."""

from __future__ import annotations

import builtins
import errno
import fnmatch
import os

import fsspec
from fsspec.implementations.memory import MemoryFileSystem

import schemas.storage


class _FillingFile:
    """A real binary file that raises ENOSPC once ``limit_bytes`` have gone into it."""

    def __init__(self, file, limit_bytes: int) -> None:
        self._file, self._left = file, limit_bytes

    def write(self, data) -> int:
        data = memoryview(data).cast("B")
        if len(data) > self._left:
            self._file.write(data[: self._left])
            self._file.flush()
            self._left = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._left -= len(data)
        return self._file.write(data)

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()


def fill_disk_after(monkeypatch, pattern: str, limit_bytes: int = 100) -> list[str]:
    """From now on, writing a local file whose final name matches the glob ``pattern`` fails with
    ENOSPC after ``limit_bytes``; returns the list of the final paths that failed so far."""
    failed: list[str] = []

    def fake_open(path, mode="r", *args, **kwargs):
        file = builtins.open(path, mode, *args, **kwargs)
        name = os.path.basename(path)  # the temporary name is ".FINAL.<hex>.tmp"
        final = name[1:].rsplit(".", 2)[0] if schemas.storage.is_temporary_name(name) else name
        if "w" in mode or "x" in mode:
            if fnmatch.fnmatch(final, pattern):
                failed.append(os.path.join(os.path.dirname(path), final))
                return _FillingFile(file, limit_bytes)
        return file

    monkeypatch.setattr(schemas.storage, "open", fake_open, raising=False)
    return failed


class FullMemoryFileSystem(MemoryFileSystem):
    """``fullmem://``: fsspec's in-memory filesystem whose ``pipe_file`` fails with ENOSPC for data
    over ``limit_bytes`` (as a bucket upload that breaks off); the store is its own."""

    protocol = "fullmem"
    store: dict = {}  # noqa: RUF012 (fsspec's own pattern: one store per class)
    pseudo_dirs = [""]  # noqa: RUF012
    limit_bytes = 100

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(path.removeprefix("fullmem://"))

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        if len(value) > self.limit_bytes:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().pipe_file(path, value, mode=mode, **kwargs)


fsspec.register_implementation("fullmem", FullMemoryFileSystem, clobber=True)
