"""Output folders and scratch space of ``pretrain`` and ``finetune`` runs (local or fsspec URLs).

- :func:`open_output` claims a command's output folder before anything is written and refuses
  one that holds files unless the command was told what to do with them (``--resume``,
  ``--overwrite``), saying whose they are (:class:`schemas.outputs.OutputFolder`: one writer per
  output; ``--overwrite`` removes only the files the earlier run of the same command recorded, in
  ``OUTPUT/.output.json``, and only once ``begin`` is called after every other check).
- :func:`check_apart` refuses an output that is, holds or lies inside an input
  (:func:`schemas.paths.check_apart`), even with ``--overwrite``.
- :func:`check_writable` probes a folder; :func:`run_scratch` is the one temporary folder of a
  run, removed when it ends, on success and on failure.

Each command names the files it writes as glob patterns relative to its output folder
(:data:`PRETRAIN_FILES`, :data:`EXPORT_FILES`, ``finetune``'s in ``finetune/cli.py``): what its
record lists until the run ends and records the exact files it left.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence

import fsspec

from schemas.outputs import OutputError, OutputFolder
from schemas.paths import OverlapError, check_apart

PROBE_PREFIX = ".write-probe-"
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

__all__ = [
    "EXPORT_FILES",
    "PRETRAIN_FILES",
    "OutputError",
    "OutputFolder",
    "OverlapError",
    "check_apart",
    "check_writable",
    "open_output",
    "run_scratch",
]


def open_output(
    url: str,
    command: str,
    patterns: Sequence[str],
    *,
    overwrite: bool = False,
    continuing: bool = False,
    continue_hint: str | None = None,
    option: str = "--output",
    run_id: str | None = None,
) -> OutputFolder:
    """Claim ``url`` for ``command`` (see :meth:`schemas.outputs.OutputFolder.open`); raises
    :class:`OutputError` (exit 1) naming another writer, or saying what the folder holds."""
    fs, root = fsspec.core.url_to_fs(url)
    return OutputFolder.open(
        url,
        fs,
        root,
        command,
        patterns,
        overwrite=overwrite,
        continuing=continuing,
        continue_hint=continue_hint,
        option=option,
        run_id=run_id,
    )


def check_writable(url: str, what: str) -> None:
    """Create and remove a probe file in ``url`` (a local folder or fsspec URL) and remove the
    folders that this made, too; :class:`OutputError` starting with ``what`` when it fails."""
    fs, root = fsspec.core.url_to_fs(url)
    root = root.rstrip("/") or "/"
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


@contextlib.contextmanager
def run_scratch(prefix: str) -> Iterator[str]:
    """One temporary local folder for a run (``TMPDIR/PREFIX...``), removed when the block ends,
    on success and on failure."""
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
