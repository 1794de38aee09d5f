"""Scratch space and writability of ``pretrain`` and ``finetune`` runs (local or fsspec URLs).

Output folders are claimed and journaled by :class:`schemas.outputs.OutputFolder`.
:func:`check_writable` probes a folder; :func:`run_scratch` is the one temporary folder of a run,
removed when it ends, on success and on failure.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections.abc import Iterator

import fsspec

from schemas.commands import OutputError
from schemas.files import write_file

PROBE_PREFIX = ".write-probe-"


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
        write_file(probe, b"", fs)  # journaled: a probe left by a killed run is the run's own
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
