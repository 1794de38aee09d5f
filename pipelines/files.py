"""The pipelines' files: the storage layer (``schemas.storage``) with the settings of the Beam job
this process runs, on the launching machine and on every worker alike, and the completed outputs a
stage reads. Beam's ``--s3_*`` options reach the storage layer here and only here: Beam hands each
worker its job's options (``FileSystems.set_options``) before it runs a step, and
:func:`use_beam_options` does the same on the launching machine."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import IO, Any

import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, S3Options

from schemas import COMPLETED_FILE, DOCUMENTS, Manifest, storage
from schemas.commands import InputError
from schemas.manifest import load_completed

SPLITS = ("train", "validation", "test")
"""Split folder names of a corpus output."""

TEMP_DIR = ".temp"
"""Temporary files of a run (``pipelines examples``), removed when it ends; ``--overwrite`` removes
what a killed run left there."""

join = storage.join
READ_BYTES = 8 << 20
"""Bytes read at a time where a file is hashed as it is read."""


def s3_options(options: PipelineOptions) -> dict[str, Any]:
    """fsspec's (s3fs') options for the server and credentials that Beam's ``S3Options`` name."""
    s3 = options.view_as(S3Options)
    client = {
        k: v for k, v in (("endpoint_url", s3.s3_endpoint_url), ("region_name", s3.s3_region_name)) if v
    }
    if s3.s3_verify is not None:
        client["verify"] = s3.s3_verify
    found: dict[str, Any] = {"client_kwargs": client} if client else {}
    for ours, theirs in (
        ("key", "s3_access_key_id"),
        ("secret", "s3_secret_access_key"),
        ("token", "s3_session_token"),
    ):
        if getattr(s3, theirs):
            found[ours] = getattr(s3, theirs)
    if s3.s3_disable_ssl:
        found["use_ssl"] = False
    return found


def use_beam_options(options: PipelineOptions) -> None:
    """Give this (launching) process's file access Beam's ``options`` (``S3Options``)."""
    FileSystems.set_options(options)
    _CONFIGURED_FROM[0] = None  # the same object may hold new values
    _job_settings()


_CONFIGURED_FROM: list[PipelineOptions | None] = [None]
"""The options object the storage layer was last configured from: parsing options is slow (an
``argparse`` parser each time), and every file access asks."""


def _job_settings() -> None:
    """The storage layer given the ``S3Options`` of the Beam job this process runs (its workers'
    options are Beam's to set, the ones Beam's own filesystems read)."""
    options = FileSystems._pipeline_options
    if options is None or options is not _CONFIGURED_FROM[0]:
        storage.configure("s3", s3_options(options) if options is not None else {})
        _CONFIGURED_FROM[0] = options


def exists(url: str) -> bool:
    """Whether a file or folder is there."""
    _job_settings()
    return storage.exists(url)


def open_binary(url: str) -> IO[bytes]:
    """A file opened for reading bytes."""
    _job_settings()
    return storage.open_binary(url)


def read_bytes(url: str) -> bytes:
    """A whole file."""
    _job_settings()
    return storage.read_bytes(url)


def write_bytes(url: str, data: bytes | Iterable[bytes], *, sync: bool = True) -> None:
    """``data`` (bytes or pieces of them) whole or nothing under ``url`` (``storage.write_bytes``)."""
    _job_settings()
    storage.write_bytes(url, data, sync=sync)


def file_size(url: str) -> int:
    """Size of one file in bytes."""
    _job_settings()
    return storage.size(url)


def remove_tree(url: str) -> int:
    """Delete a folder and every file under it; how many files were deleted."""
    _job_settings()
    return storage.remove_tree(url)


def remove(urls: Iterable[str]) -> None:
    """Delete files (one missing is no error)."""
    _job_settings()
    storage.remove(urls)


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def expand_inputs(patterns: Iterable[str]) -> list[str]:
    """Expand glob patterns into a sorted, de-duplicated list of files; fail if one matches nothing."""
    _job_settings()
    files: set[str] = set()
    for pattern in patterns:
        try:
            matched = storage.glob(pattern)
        except Exception as err:  # each filesystem raises its own types
            raise InputError(f"--input {pattern}: cannot list files ({err})") from None
        if not matched:
            raise InputError(f"--input {pattern}: no file matches this path or pattern")
        for path in matched:
            storage.check_file(path)  # a FIFO or a device would block or never end
        files.update(matched)
    return sorted(files)


def manifest_sha256(folder: str) -> str:
    """The SHA-256 of a completed output's manifest, as its ``COMPLETED`` marker records it."""
    return read_bytes(join(folder, COMPLETED_FILE)).decode("utf-8").strip()


def load_manifest(folder: str, expected_format: str) -> Manifest:
    """Read a completed stage output's manifest, refusing an incomplete or foreign one."""
    _job_settings()
    return load_completed(folder, expected_format)


def read_document_table(shard: tuple[str, str], columns: list[str] | None = None) -> Iterator[pa.Table]:
    """One documents shard ``(path, sha256)`` a record batch at a time, refused if its checksum
    differs: the file is hashed as it is read once, then read again a batch at a time, so that what is
    held is a batch, whatever the shard's size."""
    path, expected_sha256 = shard
    digest = hashlib.sha256()
    with open_binary(path) as f:
        while chunk := f.read(READ_BYTES):
            digest.update(chunk)
    if digest.hexdigest() != expected_sha256:
        raise InputError(f"{path}: checksum differs from its manifest; the input was modified or damaged")
    with open_binary(path) as f:
        for table in DOCUMENTS.read_ipc_batches(f, source=path):
            yield table.select(columns) if columns else table


def read_document_shard(shard: tuple[str, str], columns: list[str] | None = None) -> Iterator[dict]:
    """Rows of one documents shard ``(path, sha256)``, a record batch decoded at a time, refused if
    its checksum differs from the manifest."""
    for table in read_document_table(shard, columns):
        yield from table.to_pylist()
