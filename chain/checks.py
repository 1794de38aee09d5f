"""What ``chain`` and ``chain ablate`` check before their first stage, with the stages' own rules:
the command line first (each function returns its problems; the CLIs raise them together as one
UsageError, exit 2, no path looked at yet), then the inputs (together as one InputError, exit 1).
Imports no torch: the rules come from the stages' torch-free tables and configs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

from finetune.glue_tasks import get_task, read_task
from pretrain.config import PretrainConfig
from schemas import DOCUMENTS, storage
from schemas.commands import CommandError
from schemas.manifest import load_completed

DERIVED_TASK = "mrpc"  # the layout of the task the chain derives from the corpus


def beam_problems(options: Sequence[str]) -> list[str]:
    """Each ``--beam-option`` one Beam flag that Beam's own parser takes with its value, checked the
    way every `pipelines` command checks what it hands on to Beam: by ``pipelines.beam_options``,
    run as a program because the chain never imports Beam."""
    found = [
        f"--beam-option {option!r} is not a Beam flag: give it as --beam-option=--name=value"
        for option in options
        if not option.startswith("--") or len(option) < 3
    ]
    if options and not found:
        command = [sys.executable, "-m", "pipelines.beam_options", *options]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            lines = done.stdout.splitlines() or (done.stderr.strip().splitlines() or ["no message"])[-1:]
            found += [f"--beam-option {line}" for line in lines]
    return found


def glue_problems(glue_dir: str | None, glue_task: str | None) -> list[str]:
    """``--glue-task`` a GLUE task, and only with the ``--glue-dir`` it describes."""
    if glue_task is None:
        return []
    if not glue_dir:
        return [
            f"--glue-task {glue_task} needs --glue-dir (its folder); without --glue-dir the chain "
            f"fine-tunes on the task it derives from the corpus ({DERIVED_TASK.upper()} layout)"
        ]
    try:
        get_task(glue_task)
    except CommandError as err:
        return [f"--glue-task: {err}"]
    return []


def model_problems(flag: str, model: str, precision: str) -> list[str]:
    """``model`` a ``pretrain --config`` size and ``precision`` one of pretrain's, by pretrain's own check."""
    found = PretrainConfig(shards="", config=model, precision=precision).problems()
    return [problem.replace("--config:", f"{flag}:", 1) for problem in found]


def files_problems(flag: str, pattern: str) -> list[str]:
    """``pattern`` (a file, or a glob as the pipelines take it) names at least one file."""
    fs, path = storage.filesystem(pattern)
    if any(c in path for c in "*?["):
        return [] if any(fs.isfile(p) for p in fs.glob(path)) else [f"{flag} {pattern}: no file matches it"]
    if fs.isdir(path):
        return [f"{flag} {pattern}: a folder; give the dump file (.xml.bz2)"]
    return [] if fs.isfile(path) else [f"{flag} {pattern}: no such file"]


def folder_problems(flag: str, folder: str, names: Sequence[str], layout: str) -> list[str]:
    """``folder`` exists and holds each of ``names`` (a glob among them: at least one match)."""
    fs, root = storage.filesystem(folder)
    if not fs.isdir(root):
        return [f"{flag} {folder}: no such folder"]
    missing = [n for n in names if not (fs.glob(f"{root}/{n}") if "*" in n else fs.isfile(f"{root}/{n}"))]
    return [f"{flag} {folder}: no {' or '.join(missing)} ({layout})"] if missing else []


def documents_problems(
    documents: str, options: Sequence[str], output: str, runner: Sequence[str]
) -> list[str]:
    """``pipelines documents`` run dry (``--dry_run=True``: nothing is written) on ``--documents``
    with ``--documents-option``: the files, flags, fields and layout checked as the stage checks them
    (in its own process: the chain never imports Beam)."""
    command = [sys.executable, "-m", "pipelines", "documents", "--input", documents, "--output", output]
    done = subprocess.run([*command, *options, *runner, "--dry_run=True"], capture_output=True, text=True)
    if done.returncode == 0:
        return []
    lines = done.stderr.strip().splitlines() or ["no message"]
    line = next((x for x in reversed(lines) if x.startswith("error:")), lines[-1])
    return [f"--documents {documents}: {line.removeprefix('error: ').removeprefix('Error: ')}"]


def glue_dir_problems(glue_dir: str, glue_task: str | None) -> list[str]:
    """``--glue-dir`` holds the task's files, which the fine-tuning stage's own reader takes."""
    task = get_task(glue_task or DERIVED_TASK)
    names = [f"{stem}.tsv" for stem in ("train", *task.dev)]
    found = folder_problems("--glue-dir", glue_dir, names, f"{task.name}'s layout of the GLUE download")
    try:
        found or read_task(task, glue_dir, with_test=False)
    except CommandError as err:
        found.append(f"--glue-dir {glue_dir} (--glue-task {task.name}): {err}")
    return found


def corpus_problems(corpus: str, splits: Sequence[str]) -> list[str]:
    """``--corpus`` a ``COMPLETED`` ``pipelines corpus`` output with documents in each of ``splits``."""
    if not storage.exists(corpus):
        return [f"--corpus {corpus}: no such folder"]
    try:
        manifest = load_completed(corpus, DOCUMENTS.name)
    except CommandError as err:
        return [f"--corpus {err}"]
    empty = [split for split in splits if manifest.num_rows(split) == 0]
    if empty:
        return [
            f"--corpus {corpus}: no documents in its {' and '.join(empty)} split(s), which the study reads; "
            "rebuild it with `pipelines corpus --validation-fraction 0.05 --test-fraction 0.05`"
        ]
    return []
