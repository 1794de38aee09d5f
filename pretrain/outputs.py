"""Output folders and scratch space of ``pretrain`` and ``finetune`` runs (local or fsspec URLs).

- :func:`check_output` runs before any expensive work: a folder that already holds files is
  refused unless the command was told what to do with it (``--resume``, ``--overwrite``); with
  ``--overwrite`` files the command does not write itself are refused rather than deleted; and the
  folder must be writable (a probe file is created and removed). Nothing changes on disk when it
  refuses.
- :func:`clear_output` then removes the earlier run's own files (``--overwrite``), markers first,
  so that an interrupted clean-up never leaves a folder that looks complete.
- :func:`run_scratch` is the one temporary folder of a run: everything temporary (the plot buffer,
  the TensorBoard mirror of a bucket output) lives in it, and it is removed when the run ends, on
  success and on failure.

Each command names the files it writes as glob patterns relative to its output folder
(:data:`PRETRAIN_FILES`, :data:`EXPORT_FILES`, ``finetune``'s in ``finetune/cli.py``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import fsspec

from schemas.files import is_temporary_name

PROBE_PREFIX = ".write-probe-"
MARKERS = ("COMMITTED", "COMPLETED", "metrics.json")
"""Files that say an output (or a checkpoint) is complete: removed before anything else."""

PRETRAIN_FILES = (
    "checkpoints/*",
    "metrics.jsonl",
    "metrics.jsonl.tmp",
    "tensorboard/*",
    "plots/*",
    ".write-test-*",
)
EXPORT_FILES = (
    "config.json",
    "model.safetensors",
    "vocab.txt",
    "tokenizer_config.json",
    "pretraining.json",
)


class OutputError(ValueError):
    """An output folder that a command may not (or cannot) write into; the message says why.
    The CLIs exit 1 (an output in the way), the project's exit-code rule."""


@dataclass(frozen=True)
class OutputState:
    """What :func:`check_output` found: the files of an earlier run to remove with ``--overwrite``."""

    url: str
    stale: tuple[str, ...]
    """Full paths (in the folder's filesystem) of files an earlier run of this command wrote."""


def _fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    fs, root = fsspec.core.url_to_fs(url)
    return fs, root.rstrip("/") or "/"


def _relative(root: str, path: str) -> str:
    return path[len(root) :].lstrip("/")


def _is_ours(relative: str, patterns: Sequence[str]) -> bool:
    if relative.startswith(PROBE_PREFIX) or is_temporary_name(relative.rsplit("/", 1)[-1]):
        return True  # a probe, or a file a killed run was writing (schemas.files)
    return any(fnmatch.fnmatch(relative, p) for p in patterns)


def check_output(
    url: str,
    ours: Sequence[str],
    *,
    overwrite: bool,
    option: str = "--output",
    continue_hint: str | None = None,
) -> OutputState:
    """Check that ``url`` may and can receive a run's files; raise :class:`OutputError` if not.

    ``ours``: glob patterns (relative to ``url``; ``*`` crosses ``/``) of the files the command
    writes. A folder holding any file is refused unless ``overwrite``; with it, a file that matches
    no pattern is refused (it is not deleted). ``continue_hint`` (e.g. ``--resume RUN``) is named in
    the refusal. Changes nothing except a probe file, created and removed.
    """
    fs, root = _fs(url)
    try:
        if fs.isfile(root):
            raise OutputError(f"{option} {url}: is a file, not a folder; choose a folder")
        present = sorted(fs.find(root)) if fs.isdir(root) else []
    except OSError as err:
        raise OutputError(f"{option} {url}: cannot read it ({type(err).__name__}: {err})") from None
    present = [p for p in present if not _relative(root, p).startswith(PROBE_PREFIX)]
    if present and not overwrite:
        hint = f"continue it with {continue_hint}, or " if continue_hint else ""
        raise OutputError(
            f"{option} {url}: already holds {len(present)} file(s) of an earlier run "
            f"({_relative(root, present[0])}, ...); {hint}pass --overwrite to replace them, or choose "
            "an empty folder"
        )
    foreign = [p for p in present if not _is_ours(_relative(root, p), ours)]
    if foreign:
        raise OutputError(
            f"{option} {url}: holds files this command does not write ({_relative(root, foreign[0])}, "
            f"{len(foreign)} in all); --overwrite only replaces a run's own files: choose an empty folder"
        )
    check_writable(url, f"{option} {url}")
    return OutputState(url, tuple(present))


def check_writable(url: str, what: str) -> None:
    """Create and remove a probe file in ``url`` (a local folder or fsspec URL) and remove the
    folders that this made, too; :class:`OutputError` starting with ``what`` when it fails."""
    fs, root = _fs(url)
    made = []  # the folders makedirs will create, deepest first
    folder = root
    while folder not in ("", "/") and not fs.exists(folder):
        made.append(folder)
        folder = folder.rsplit("/", 1)[0]
    probe = f"{root}/{PROBE_PREFIX}{uuid.uuid4().hex}"
    try:
        fs.makedirs(root, exist_ok=True)
        fs.pipe_file(probe, b"")
        fs.rm(probe)
    except Exception as err:  # Any filesystem error means the same thing to the user.
        raise OutputError(f"{what}: cannot write there ({type(err).__name__}: {err})") from None
    finally:
        for path in made:
            with contextlib.suppress(Exception):
                if fs.isdir(path) and not fs.ls(path):
                    fs.rmdir(path)


def clear_output(state: OutputState) -> int:
    """Remove the earlier run's files that :func:`check_output` found (markers first, then the
    rest, then the folders left empty); return how many files were removed."""
    if not state.stale:
        return 0
    fs, root = _fs(state.url)
    ordered = sorted(state.stale, key=lambda p: p.rsplit("/", 1)[-1] not in MARKERS)
    for path in ordered:
        with contextlib.suppress(FileNotFoundError):
            fs.rm(path)
    folders = set()
    for path in state.stale:
        while (path := path.rsplit("/", 1)[0]) != root and path.startswith(root + "/"):
            folders.add(path)
    for folder in sorted(folders, key=len, reverse=True):  # the deepest first
        with contextlib.suppress(OSError):
            if fs.isdir(folder) and not fs.ls(folder):
                fs.rmdir(folder)
    return len(ordered)


@contextlib.contextmanager
def run_scratch(prefix: str) -> Iterator[str]:
    """One temporary local folder for a run (``TMPDIR/PREFIX...``), removed when the block ends,
    on success and on failure."""
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
