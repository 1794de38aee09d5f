"""Whole files or none: nothing a command writes ever lies under its final name incomplete.

Locally the bytes go to ``.NAME.<12 hex>.tmp`` beside the file, synced, then renamed over ``NAME``
(atomic on POSIX); the temporary file is removed on any failure, so only SIGKILL or a power cut
leaves one. Elsewhere one ``pipe_file`` upload: an object store shows an object only once it is
complete, while ``fs.open(path, "wb")`` would commit a failing ``with`` block's part. Before each
write the :data:`BEFORE_WRITE` hooks run (``schemas.outputs`` journals the file there).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

BEFORE_WRITE: list[Callable[[str], None]] = []  # called with each file's path or URL before it is written
_TEMPORARY = re.compile(r"^\.(.+)\.[0-9a-f]{12}\.tmp$")


class WriteError(OSError):
    """A file could not be written (a full disk, no permission, a lost connection); nothing is left."""

    def __str__(self) -> str:
        return f"{self.filename}: cannot write it ({self.strerror})"


def temporary_name(name: str) -> str:
    """The name a file called ``name`` is written under until it is whole (a hidden file)."""
    return f".{name}.{uuid.uuid4().hex[:12]}.tmp"


def is_temporary_name(name: str) -> bool:
    """Whether a file name is one of :func:`temporary_name`'s: what a process killed while writing leaves."""
    return _TEMPORARY.match(name) is not None


def final_name(name: str) -> str:
    """The name of the file a temporary name (:func:`temporary_name`) was to become; others as they are."""
    match = _TEMPORARY.match(name)
    return name if match is None else match.group(1)


def write_error(err: OSError, path: str) -> WriteError:
    """``err`` as a :class:`WriteError` naming ``path`` (errno and reason kept)."""
    reason = err.strerror or str(err) or type(err).__name__
    return WriteError(err.errno, reason, str(path))


def write_local_file(path: str | os.PathLike, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` (bytes already made) to the local ``path`` through a temporary file."""
    path = os.fspath(path)
    _journal(path)
    folder, name = os.path.split(os.path.abspath(path))
    temp = os.path.join(folder, temporary_name(name))
    try:
        os.makedirs(folder, exist_ok=True)
        with open(temp, "xb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.remove(temp)
        if isinstance(err, OSError) and not isinstance(err, WriteError):
            raise write_error(err, path) from None
        raise


def write_file(path: str, data: bytes | str, fs: fsspec.AbstractFileSystem | None = None) -> None:
    """Write ``data`` whole or not at all to ``path`` (a local path or URL, or in ``fs``)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    name = path  # for messages: the URL as given, or the filesystem's own
    if fs is None:
        fs, path = fsspec.core.url_to_fs(path)
    else:
        name = fs.unstrip_protocol(path)
    if isinstance(fs, LocalFileSystem):
        write_local_file(path, [data])
        return
    _journal(fs.unstrip_protocol(path))
    try:
        fs.pipe_file(path, data)
    except OSError as err:
        raise write_error(err, name) from None


def _journal(url: str) -> None:
    for note in BEFORE_WRITE:
        note(url)


def write_json(
    path: str,
    obj: Any,
    fs: fsspec.AbstractFileSystem | None = None,
    *,
    indent: int | None = 2,
    **options: Any,
) -> None:
    """:func:`write_file` of ``obj`` as JSON (``options`` for ``json.dumps``) and a final newline."""
    write_file(path, json.dumps(obj, indent=indent, **options) + "\n", fs)
