"""File access for the pipelines through Beam's filesystems (local paths, gs://, s3://, ...).

Everything here runs both at pipeline construction (on the launching machine) and inside
workers, so paths are always URLs understood by ``apache_beam.io.filesystems.FileSystems``.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Sequence

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from schemas import COMPLETED_FILE, DOCUMENTS, MANIFEST_FILE, Manifest, ManifestError, verify_completed
from schemas.files import WriteError, is_temporary_name
from wordpiece.count import read_bytes
from wordpiece.count import write_bytes as beam_write_bytes

SPLITS = ("train", "validation", "test")
"""Split folder names of a corpus output."""

_KNOWN_OUTPUT_FILES = (MANIFEST_FILE, "stats.json", "length_histogram.png", "index.json", COMPLETED_FILE)
_KNOWN_OUTPUT_DIRS = ("all", "rejects", "examples", *SPLITS)
TEMP_DIR = ".temp"
"""Temporary files of a run (``pipelines examples``), removed when it ends; a killed run's stay."""


class InputError(ValueError):
    """An input is missing, empty or unusable; the message names it and says what to do."""


class OutputError(ValueError):
    """An output cannot be written (exists and is complete, or is not writable)."""


def use_beam_options(beam_args: Sequence[str]) -> None:
    """Give the launching machine's own file operations (output checks, input globs, manifests)
    Beam's filesystem options from the command line: ``--s3_endpoint_url``, ``--s3_region_name``
    and the other ``S3Options`` (without them boto3 reads ``AWS_ENDPOINT_URL`` and the usual AWS
    credentials). Beam applies them itself only once a pipeline is built; its S3 filesystem refuses
    to work without them."""
    FileSystems.set_options(PipelineOptions(list(beam_args)))


def join(base: str, *parts: str) -> str:
    """Join path parts the way the base's filesystem does (``/`` for local and buckets)."""
    return FileSystems.join(base.rstrip("/"), *parts)


def exists(path: str) -> bool:
    """Whether a file exists."""
    return FileSystems.exists(path)


def open_binary(path: str):
    """Open a file for binary reading without Beam's transparent decompression."""
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def write_bytes(path: str, data: bytes | Sequence[bytes]) -> None:
    """Write a whole file, or nothing under its name (``data``: the bytes, or pieces of them already
    made), through the Beam side's one writer, ``wordpiece.count.write_bytes``; a failure (a full
    disk) is an :class:`OutputError` naming the file."""
    try:
        beam_write_bytes(path, data)
    except WriteError as err:
        raise OutputError(str(err)) from None


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
        files.update(matched)
    return sorted(files)


def file_size(path: str) -> int:
    """Size of one file in bytes."""
    return FileSystems.match([path])[0].metadata_list[0].size_in_bytes


def is_completed(output: str) -> bool:
    """Whether ``output`` holds a finished stage output (the ``COMPLETED`` marker)."""
    return exists(join(output, COMPLETED_FILE))


def prepare_output(output: str, overwrite: bool) -> None:
    """Make ``output`` ready to receive a stage's files, before the pipeline starts.

    Refuses a folder that holds anything unless ``overwrite`` (changing nothing); with it,
    removes the files a previous (finished or interrupted) run of a stage left there, and refuses
    files no stage writes rather than delete them; checks the folder is writable.
    """
    present = [m.path for m in FileSystems.match([join(output, "**")])[0].metadata_list]
    if present and not overwrite:
        what = (
            "a completed output" if is_completed(output) else f"{len(present)} file(s) (an unfinished run?)"
        )
        raise OutputError(f"--output {output}: already holds {what}; pass --overwrite to replace it")
    foreign = [path for path in present if not _is_stage_file(output, path)]
    if foreign:
        raise OutputError(
            f"--output {output}: holds files no stage wrote ({foreign[0]}, {len(foreign)} in all); "
            "choose an empty folder, --overwrite only replaces a stage's own files"
        )
    stale = [join(output, name) for name in _KNOWN_OUTPUT_FILES if exists(join(output, name))]
    stale.extend(path for path in present if is_temporary_name(_relative(output, path)))  # a killed write's
    for folder, pattern in [(f, "*") for f in _KNOWN_OUTPUT_DIRS] + [(TEMP_DIR, "**")]:
        stale.extend(m.path for m in FileSystems.match([join(output, folder, pattern)])[0].metadata_list)
    # The marker goes first, so an interrupted clean-up never leaves a "completed" husk.
    stale.sort(key=lambda path: not path.endswith(COMPLETED_FILE))
    if stale:
        FileSystems.delete(stale)
    probe = join(output, f".write-probe-{uuid.uuid4().hex}")
    try:
        write_bytes(probe, b"probe")  # not empty: Beam's S3 writer cannot upload an empty object
        FileSystems.delete([probe])
    except Exception as err:  # Any filesystem error means the same thing to the user.
        raise OutputError(f"--output {output}: cannot write there ({type(err).__name__}: {err})") from None


def _relative(output: str, path: str) -> str:
    return path[len(output.rstrip("/")) :].lstrip("/")


def _is_stage_file(output: str, path: str) -> bool:
    """Whether ``path`` (inside ``output``) is a file some stage writes there (or was writing when
    it was killed: a temporary name)."""
    relative = _relative(output, path)
    head, _, rest = relative.partition("/")
    if rest:
        return head in _KNOWN_OUTPUT_DIRS or head == TEMP_DIR
    return head in _KNOWN_OUTPUT_FILES or head.startswith(".write-probe-") or is_temporary_name(head)


def manifest_sha256(folder: str) -> str:
    """The SHA-256 of a completed output's manifest, as its ``COMPLETED`` marker records it.

    A downstream manifest records it beside the upstream folder's path, so the exact
    upstream output a stage read is named by content, not only by place.
    """
    return read_bytes(join(folder, COMPLETED_FILE)).decode("utf-8").strip()


def load_manifest(folder: str, expected_format: str) -> Manifest:
    """Read a completed stage output's manifest, refusing an incomplete or foreign one."""
    marker_path = join(folder, COMPLETED_FILE)
    manifest_path = join(folder, MANIFEST_FILE)
    marker = read_bytes(marker_path).decode("utf-8") if exists(marker_path) else None
    try:
        text = read_bytes(manifest_path).decode("utf-8") if marker is not None else ""
        return verify_completed(text, marker, folder, expected_format)
    except ManifestError as err:
        raise InputError(str(err)) from None
    except OSError as err:
        raise InputError(f"{manifest_path}: cannot read the manifest ({err})") from None


def read_document_table(shard: tuple[str, str], columns: list[str] | None = None):
    """One documents shard ``(path, sha256)`` as an Arrow table, refused if its checksum differs
    from the manifest."""
    path, expected_sha256 = shard
    data = read_bytes(path)
    if sha256_hex(data) != expected_sha256:
        raise InputError(f"{path}: checksum differs from its manifest; the input was modified or damaged")
    table = DOCUMENTS.read_ipc(data, source=path)
    return table.select(columns) if columns else table


def read_document_shard(shard: tuple[str, str], columns: list[str] | None = None) -> list[dict]:
    """Rows of one documents shard ``(path, sha256)``, refused if its checksum differs from the manifest."""
    return read_document_table(shard, columns).to_pylist()
