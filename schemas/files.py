"""Journaled writes: before each write the :data:`BEFORE_WRITE` hooks run (``schemas.outputs``
journals the file there), then ``schemas.storage`` writes it whole or not at all."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from schemas import storage

BEFORE_WRITE: list[Callable[[str], None]] = []  # called with each file's path or URL before it is written


def write_file(path: str, data: bytes | str, fs: storage.FileSystem | None = None) -> None:
    """Write ``data`` whole or not at all to ``path`` (a local path or URL, or in ``fs``)."""
    url = path if fs is None or isinstance(fs, storage.LocalFileSystem) else fs.unstrip_protocol(path)
    _journal(url)
    storage.write_bytes(url, data)


def _journal(url: str) -> None:
    for note in BEFORE_WRITE:
        note(url)


def write_json(
    path: str,
    obj: Any,
    fs: storage.FileSystem | None = None,
    *,
    indent: int | None = 2,
    **options: Any,
) -> None:
    """:func:`write_file` of ``obj`` as JSON (``options`` for ``json.dumps``) and a final newline."""
    write_file(path, json.dumps(obj, indent=indent, **options) + "\n", fs)
