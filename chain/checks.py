"""What ``python -m chain`` and ``python -m chain ablate`` check before their first stage.

Two kinds, in this order, as every tool of the project does: the command line first (a value or
a combination of values the settings refuse; exit 2, no path looked at yet), then the inputs (a
path that is not there, a folder without the files a stage will read, a corpus that is not
``COMPLETED``; exit 1). Each kind is reported whole, one ``error:`` line per problem, so that
one fix-and-rerun clears them all, and a study of hours never fails at its fifth stage over a
task name or a folder its first stage could have been refused for.

The checks use the stages' own rules where there are some (``pretrain``'s model sizes and
precisions, ``finetune glue``'s task table, the corpus manifest's ``COMPLETED`` marker), so the
chain refuses exactly what its stages would.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import click

from chain.run import filesystem
from schemas import COMPLETED_FILE, DOCUMENTS, MANIFEST_FILE, verify_completed
from schemas.commands import CommandError, InputError

SEED_MAX = 2**31 - 1
"""The largest ``--seed``: every stage seeds ``seed + k`` (k < a few) into generators that take
32-bit or 64-bit seeds."""
DERIVED_TASK = "mrpc"
"""The layout of the task the chain derives from the corpus when no ``--glue-dir`` is given."""
NER_FILES = ("train.txt", "valid.txt")
"""What ``finetune ner --data-dir`` reads (``test.txt`` is optional)."""


class SettingsError(ValueError):
    """The command line is wrong: ``problems`` lists every refused value or combination."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


def refuse(problems: Sequence[str], code: int) -> None:
    """Print each problem as one ``error:`` line on standard error and exit with ``code``
    (2: the command line, 1: an input); return when there are none."""
    if not problems:
        return
    for problem in problems:
        click.echo(f"error: {problem}", err=True)
    sys.exit(code)


# --- the command line ------------------------------------------------------------------------------


def seed_problems(seed: int, count: int = 1) -> list[str]:
    """``--seed`` out of range (the stages seed ``seed`` .. ``seed + count - 1``)."""
    top = SEED_MAX - (count - 1)
    return [] if 0 <= seed <= top else [f"--seed must be between 0 and {top:,}, got {seed}"]


def beam_problems(options: Sequence[str]) -> list[str]:
    """Each ``--beam-option`` must be one Beam flag (``--name`` or ``--name=value``)."""
    return [
        f"--beam-option {option!r} is not a Beam flag: give it as --beam-option=--name=value"
        for option in options
        if not option.startswith("--") or len(option) < 3
    ]


def glue_problems(glue_dir: str | None, glue_task: str | None) -> list[str]:
    """``--glue-task`` must name a GLUE task, and only with the ``--glue-dir`` it describes."""
    if glue_task is None:
        return []
    if not glue_dir:
        return [
            f"--glue-task {glue_task} needs --glue-dir (its folder); without --glue-dir the chain "
            f"fine-tunes on the task it derives from the corpus ({DERIVED_TASK.upper()} layout)"
        ]
    from finetune.glue import get_task

    try:
        get_task(glue_task)
    except CommandError as err:
        return [f"--glue-task: {err}"]
    return []


def model_problems(model: str, precision: str) -> list[str]:
    """``--model`` must be a ``pretrain --config`` size and ``--precision`` one of pretrain's."""
    from pretrain.model import parse_model_size
    from pretrain.runtime import PRECISIONS

    found = []
    try:
        parse_model_size(model)
    except ValueError as err:
        found.append(f"--model: {err}")
    if precision not in PRECISIONS:
        found.append(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return found


def at_least(flag: str, value: float, minimum: float) -> list[str]:
    """``flag`` below ``minimum`` (or not a finite number)."""
    if math.isfinite(value) and value >= minimum:
        return []
    return [f"{flag} must be at least {minimum:,}, got {value}"]


def positive(flag: str, value: float) -> list[str]:
    """``flag`` not a positive finite number."""
    return [] if math.isfinite(value) and value > 0 else [f"{flag} must be positive, got {value}"]


# --- the inputs ------------------------------------------------------------------------------------


def _is_file(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.isfile(path)


def _is_dir(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.isdir(path)


def files_problems(flag: str, pattern: str) -> list[str]:
    """``pattern`` (a file, or a glob as the pipelines take it) must name at least one file."""
    fs, path = filesystem(pattern)
    if any(c in path for c in "*?["):
        if not [p for p in fs.glob(path) if fs.isfile(p)]:
            return [f"{flag} {pattern}: no file matches it"]
        return []
    if fs.isdir(path):
        return [f"{flag} {pattern}: a folder; give the dump file (.xml.bz2)"]
    return [] if fs.isfile(path) else [f"{flag} {pattern}: no such file"]


def books_problems(folder: str) -> list[str]:
    """``--books`` must be a folder holding ``*.txt`` books (what the books stage reads)."""
    if not _is_dir(folder):
        return [f"--books {folder}: no such folder"]
    fs, path = filesystem(folder)
    if not fs.glob(f"{path}/*.txt"):
        return [f"--books {folder}: no *.txt files in it (the books stage reads {folder.rstrip('/')}/*.txt)"]
    return []


def glue_dir_problems(glue_dir: str, glue_task: str | None) -> list[str]:
    """``--glue-dir`` must hold the task's ``train.tsv`` and dev files (``finetune glue`` reads them)."""
    from finetune.glue import get_task

    task = get_task(glue_task or DERIVED_TASK)
    if not _is_dir(glue_dir):
        return [f"--glue-dir {glue_dir}: no such folder"]
    root = glue_dir.rstrip("/")
    missing = [f"{stem}.tsv" for stem in ("train", *task.dev) if not _is_file(f"{root}/{stem}.tsv")]
    if missing:
        return [
            f"--glue-dir {glue_dir}: no {' or '.join(missing)} ({task.name}'s layout of the GLUE download)"
        ]
    return []


def ner_dir_problems(ner_dir: str) -> list[str]:
    """``--ner-dir`` must hold CoNLL-2003's ``train.txt`` and ``valid.txt``."""
    if not _is_dir(ner_dir):
        return [f"--ner-dir {ner_dir}: no such folder"]
    root = ner_dir.rstrip("/")
    missing = [name for name in NER_FILES if not _is_file(f"{root}/{name}")]
    if missing:
        return [f"--ner-dir {ner_dir}: no {' or '.join(missing)} (the CoNLL-2003 layout)"]
    return []


def corpus_problems(corpus: str, splits: Sequence[str]) -> list[str]:
    """``--corpus`` must be a ``COMPLETED`` ``pipelines corpus`` output (its marker matching its
    manifest) with documents in each of ``splits``."""
    fs, root = filesystem(corpus)
    marker_path, manifest_path = f"{root}/{COMPLETED_FILE}", f"{root}/{MANIFEST_FILE}"
    try:
        marker = fs.cat_file(marker_path).decode("utf-8") if fs.exists(marker_path) else None
        if marker is None and not fs.isdir(root):
            return [f"--corpus {corpus}: no such folder"]
        text = fs.cat_file(manifest_path).decode("utf-8") if marker is not None else ""
        manifest = verify_completed(text, marker, corpus, DOCUMENTS.name)
    except InputError as err:
        return [f"--corpus {err}"]
    except (OSError, UnicodeDecodeError) as err:
        return [f"--corpus {corpus}: cannot read its manifest ({type(err).__name__}: {err})"]
    empty = [split for split in splits if manifest.num_rows(split) == 0]
    if empty:
        return [
            f"--corpus {corpus}: no documents in its {' and '.join(empty)} split(s), which the study "
            "reads; rebuild it with `pipelines corpus --validation-fraction 0.05 --test-fraction 0.05`"
        ]
    return []
