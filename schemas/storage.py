"""Every file the product reads or writes, local or in a bucket, reached one way: fsspec, with each
cloud's options (emulator, endpoint, probe timeouts) defined here once. Files are written whole or
not at all (:func:`write_bytes`); docs/reliability.md states the guarantees."""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import uuid
from collections.abc import Iterable, Mapping
from typing import IO, Any
from urllib.parse import urlsplit

import fsspec
from fsspec import AbstractFileSystem as FileSystem
from fsspec.implementations.local import LocalFileSystem

from schemas import inputs
from schemas.commands import InputError, WriteError

__all__ = ["FileSystem", "LocalFileSystem", "WriteError"]

CONNECT_S = 5.0
"""The most one connection or request of a probe waits."""
CLOUDS = {"gs": "gs", "gcs": "gs", "s3": "s3", "s3a": "s3"}
_GLOB = re.compile(r"[*?\[]")
_TEMPORARY = re.compile(r"^\.(.+)\.[0-9a-f]{12}\.tmp$")
_SPECIAL = {
    stat.S_ISFIFO: "a FIFO (named pipe)",
    stat.S_ISCHR: "a character device",
    stat.S_ISBLK: "a block device",
    stat.S_ISSOCK: "a socket",
    stat.S_ISDIR: "a folder",
}
_CONFIGURED: dict[str, dict[str, Any]] = {}  # cloud -> fsspec options, from configure()


def configure(cloud: str, options: Mapping[str, Any]) -> None:
    """The fsspec options (endpoint, credentials) every later access to ``cloud`` (``s3``, ``gs``) uses."""
    _CONFIGURED[cloud] = dict(options)


def options(cloud: str) -> dict[str, Any]:
    """The options :func:`configure` set for ``cloud`` (none: the environment's)."""
    return dict(_CONFIGURED.get(cloud, {}))


def cloud_of(url: str) -> str | None:
    """``gs`` or ``s3`` for a bucket URL, None for anything else."""
    protocol, _, rest = str(url).partition("://")
    return CLOUDS.get(protocol.lower()) if rest else None


def filesystem(url: str | os.PathLike) -> tuple[FileSystem, str]:
    """The filesystem of ``url`` and the path in it (no trailing ``/``; the root stays ``/``)."""
    url = os.fspath(url)
    fs, path = fsspec.core.url_to_fs(url, **options(cloud_of(url) or ""))
    return fs, path.rstrip("/") or "/"


def is_local(url: str | os.PathLike) -> bool:
    """Whether ``url`` is on this machine's disk (a path or ``file://``)."""
    return isinstance(filesystem(url)[0], LocalFileSystem)


def join(base: str | os.PathLike, *parts: str) -> str:
    """``base`` and ``parts`` joined with ``/`` (local paths and URLs alike)."""
    return "/".join([os.fspath(base).rstrip("/"), *parts])


def exists(url: str | os.PathLike) -> bool:
    """Whether a file or folder is there."""
    fs, path = filesystem(url)
    return fs.exists(path)


def size(url: str) -> int:
    """The size of a file in bytes."""
    fs, path = filesystem(url)
    return fs.size(path)


def open_binary(url: str | os.PathLike) -> IO[bytes]:
    """A file opened for reading bytes (seekable; no transparent decompression)."""
    fs, path = filesystem(url)
    return fs.open(path, "rb")


def check_file(url: str | os.PathLike) -> None:
    """Refuse ``url`` (an InputError) unless it is a regular file (links followed) or an object in a
    bucket: a FIFO would block a read, a device never end it."""
    fs, path = filesystem(url)
    if not isinstance(fs, LocalFileSystem):
        return  # an object store holds objects only
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{url}: no such file") from None
    except OSError as err:
        raise InputError(f"{url}: cannot read it ({err.strerror or err})") from None
    for test, kind in _SPECIAL.items():
        if test(mode):
            raise InputError(f"{url}: is {kind}, not a regular file; give a file")


def read_bytes(url: str | os.PathLike, limit: int | None = None) -> bytes:
    """A whole file; with ``limit``, an InputError naming it when it holds more than ``limit`` bytes."""
    with open_binary(url) as f:
        return f.read() if limit is None else inputs.read_bytes(f, os.fspath(url), limit)


def glob(pattern: str) -> list[str]:
    """The files a pattern matches (``*``, ``?``, ``[...]``, ``**``), sorted, in the pattern's own form; a
    pattern without wildcards: itself, file or folder, if it exists."""
    fs, path = filesystem(pattern)
    if _GLOB.search(pattern) is None:
        return [pattern] if fs.exists(path) else []
    found = [p for p, info in fs.glob(path, detail=True).items() if info.get("type") != "directory"]
    if isinstance(fs, LocalFileSystem):
        relative = "://" not in pattern and not os.path.isabs(pattern)
        return sorted(os.path.relpath(p) if relative else p for p in found)
    return sorted(fs.unstrip_protocol(p) for p in found)


def remove(urls: Iterable[str]) -> None:
    """Delete files (one missing is no error)."""
    for url in urls:
        fs, path = filesystem(url)
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(path)


def remove_tree(url: str) -> int:
    """Delete a folder and every file under it; how many files were deleted."""
    fs, path = filesystem(url)
    if not fs.exists(path):
        return 0
    found = [f for f in fs.find(path) if f != path]
    fs.rm(path, recursive=True)
    return len(found)


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


def write_bytes(url: str | os.PathLike, data: bytes | str | Iterable[bytes], *, sync: bool = True) -> None:
    """``data`` (bytes, text as UTF-8, or pieces of bytes) whole or nothing under ``url`` (see the
    module's docstring); a failure is a :class:`WriteError`. ``sync=False``: a temporary file that a
    crash may lose, not flushed to the disk before it is named."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    url = os.fspath(url)
    fs, path = filesystem(url)
    if isinstance(fs, LocalFileSystem):
        _write_local(path, chunks, sync)
        return
    try:
        fs.pipe_file(path, chunks[0] if isinstance(chunks, list) and len(chunks) == 1 else b"".join(chunks))
    except OSError as err:
        raise write_error(err, url) from None


def _write_local(path: str, chunks: Iterable[bytes], sync: bool) -> None:
    folder, name = os.path.split(os.path.abspath(path))
    temp = os.path.join(folder, temporary_name(name))
    try:
        os.makedirs(folder, exist_ok=True)
        with open(temp, "xb") as f:
            for chunk in chunks:
                f.write(chunk)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.remove(temp)
        if isinstance(err, OSError) and not isinstance(err, WriteError):
            raise write_error(err, path) from None
        raise


class Folder:
    """A folder (a path or URL) that files are written into whole, named relative to it, without a
    journal: for workers and ranks writing into an output its owner journaled (``OutputFolder``), and
    for library calls writing into a folder of their caller's choosing."""

    def __init__(self, url: str | os.PathLike) -> None:
        self.url = os.fspath(url).rstrip("/") or "/"

    def path(self, relative: str) -> str:
        """The path or URL of the file ``relative``."""
        return join(self.url, relative)

    def sub(self, relative: str) -> Folder:
        """The folder ``relative`` inside this one, written into the same way."""
        return Folder(self.path(relative))

    def journal(self, *relatives: str) -> None:
        """Record files before they are written: a folder nobody claimed keeps no record."""

    def write(self, relative: str, data: bytes | str | Iterable[bytes]) -> None:
        """:meth:`journal` the file, then write it whole or not at all."""
        self.journal(relative)
        write_bytes(self.path(relative), data)

    def write_json(self, relative: str, obj: Any, *, indent: int | None = 2, **options: Any) -> None:
        """:meth:`write` ``obj`` as JSON (``options`` for ``json.dumps``) and a final newline."""
        self.write(relative, json.dumps(obj, indent=indent, **options) + "\n")


def endpoint_address(cloud: str) -> tuple[str, int]:
    """``(host, port)`` of the cloud's storage service this process talks to."""
    if cloud == "gs":
        url = os.environ.get("STORAGE_EMULATOR_HOST") or "https://storage.googleapis.com"
    else:
        names = (os.environ.get(v) for v in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"))
        configured = options("s3").get("client_kwargs", {}).get("endpoint_url")
        url = configured or next(filter(None, names), "s3.amazonaws.com")
    parts = urlsplit(url if "://" in url else f"https://{url}")
    return parts.hostname or "", parts.port or (80 if parts.scheme == "http" else 443)


def bounded_filesystem(cloud: str) -> FileSystem | None:
    """A new (uncached) filesystem of ``cloud`` with a timeout of :data:`CONNECT_S` on every request
    and no retries; None when no credentials for it are found."""
    configured = options(cloud)
    if cloud == "gs":
        import gcsfs

        token: Any = "anon" if os.environ.get("STORAGE_EMULATOR_HOST") else None
        if token is None:
            import google.auth
            from google.auth.exceptions import DefaultCredentialsError

            try:
                token, _ = google.auth.default(
                    scopes=["https://www.googleapis.com/auth/devstorage.read_write"]
                )
            except DefaultCredentialsError:
                return None
        return gcsfs.GCSFileSystem(token=token, skip_instance_cache=True, **configured)
    import botocore.session
    import s3fs

    if not (
        configured.get("anon") or configured.get("key") or botocore.session.get_session().get_credentials()
    ):
        return None
    config = {"connect_timeout": CONNECT_S, "read_timeout": CONNECT_S, "retries": {"max_attempts": 1}}
    rest = {k: v for k, v in configured.items() if k != "config_kwargs"}
    fs = s3fs.S3FileSystem(
        skip_instance_cache=True, config_kwargs={**config, **configured.get("config_kwargs", {})}, **rest
    )
    fs.retries = 1
    return fs
