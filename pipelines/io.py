"""File access for the pipelines through Beam's filesystems, on the launching machine and workers alike."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import fsspec
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from schemas import COMPLETED_FILE, DOCUMENTS, MANIFEST_FILE, Manifest, verify_completed
from schemas.commands import InputError, OutputError  # noqa: F401 (io.OutputError)
from schemas.inputs import check_file
from schemas.outputs import OutputFolder
from wordpiece.count import read_bytes, s3_storage_options, write_bytes  # noqa: F401 (io.write_bytes)

SPLITS = ("train", "validation", "test")
"""Split folder names of a corpus output."""

TEMP_DIR = ".temp"
"""Temporary files of a run (``pipelines examples``), removed when it ends; ``--overwrite`` removes
what a killed run left there."""

_S3_STORAGE: dict[str, Any] = {}


def use_beam_options(beam_args: Sequence[str]) -> None:
    """Give the launching machine's own file operations Beam's filesystem options (``S3Options``)."""
    options = PipelineOptions(list(beam_args))
    FileSystems.set_options(options)
    _S3_STORAGE.clear()
    _S3_STORAGE.update(s3_storage_options(options))


def _fs(output: str) -> tuple[Any, str]:
    options = _S3_STORAGE if output.startswith(("s3://", "s3a://")) else {}
    fs, root = fsspec.core.url_to_fs(output, **options)
    return fs, root.rstrip("/") or "/"


def open_output(output: str, command: str, overwrite: bool) -> OutputFolder:
    """Claim ``output`` for the stage ``command`` on the launching machine; remote workers write under it."""
    return OutputFolder.open(output, command, fs=_fs(output)[0], overwrite=overwrite)


def join(base: str, *parts: str) -> str:
    """Join path parts the way the base's filesystem does (``/`` for local and buckets)."""
    return FileSystems.join(base.rstrip("/"), *parts)


def exists(path: str) -> bool:
    """Whether a file exists."""
    return FileSystems.exists(path)


def open_binary(path: str):
    """Open a file for binary reading without Beam's transparent decompression."""
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def expand_inputs(patterns: Iterable[str]) -> list[str]:
    """Expand glob patterns into a sorted, de-duplicated list of files; fail if one matches nothing."""
    files: set[str] = set()
    for pattern in patterns:
        try:
            matched = [m.path for m in FileSystems.match([pattern])[0].metadata_list]
        except Exception as err:  # Beam raises BeamIOError/ValueError/OSError depending on the filesystem.
            raise InputError(f"--input {pattern}: cannot list files ({err})") from None
        matched = [m for m in matched if not m.endswith("/")]
        if not matched:
            raise InputError(f"--input {pattern}: no file matches this path or pattern")
        for path in matched if "://" not in pattern else ():
            check_file(path)  # a FIFO or a device would block or never end
        files.update(matched)
    return sorted(files)


def file_size(path: str) -> int:
    """Size of one file in bytes."""
    return FileSystems.match([path])[0].metadata_list[0].size_in_bytes


def manifest_sha256(folder: str) -> str:
    """The SHA-256 of a completed output's manifest, as its ``COMPLETED`` marker records it."""
    return read_bytes(join(folder, COMPLETED_FILE)).decode("utf-8").strip()


def load_manifest(folder: str, expected_format: str) -> Manifest:
    """Read a completed stage output's manifest, refusing an incomplete or foreign one."""
    marker_path = join(folder, COMPLETED_FILE)
    manifest_path = join(folder, MANIFEST_FILE)
    marker = read_bytes(marker_path).decode("utf-8") if exists(marker_path) else None
    try:
        text = read_bytes(manifest_path).decode("utf-8") if marker is not None else ""
        return verify_completed(text, marker, folder, expected_format)
    except OSError as err:
        raise InputError(f"{manifest_path}: cannot read the manifest ({err})") from None


def read_document_table(shard: tuple[str, str], columns: list[str] | None = None) -> Iterator[pa.Table]:
    """One documents shard ``(path, sha256)`` a record batch at a time (one decoded at once), refused
    if its checksum differs."""
    path, expected_sha256 = shard
    data = read_bytes(path)
    if sha256_hex(data) != expected_sha256:
        raise InputError(f"{path}: checksum differs from its manifest; the input was modified or damaged")
    for table in DOCUMENTS.read_ipc_batches(data, source=path):
        yield table.select(columns) if columns else table


def read_document_shard(shard: tuple[str, str], columns: list[str] | None = None) -> list[dict]:
    """Rows of one documents shard ``(path, sha256)``, refused if its checksum differs from the manifest."""
    return [row for table in read_document_table(shard, columns) for row in table.to_pylist()]
