"""Atomic, resumable training checkpoints on local paths or buckets (fsspec).

Layout of a run folder::

    RUN/checkpoints/step-00001000/
        config.json, model.safetensors   the model, in transformers' layout (``save_pretrained``):
                                         ``BertForPreTraining.from_pretrained`` and export read it
        trainer.pt                       optimizer, scheduler, grad scaler, step, tokens seen,
                                         the reader's position, the run's settings
        rng-rank00000.pt, ...            every rank's RNG states (Python, NumPy, torch CPU, CUDA)
        COMMITTED                        written last, by rank 0, after every rank's files:
                                         JSON with the step and each file's size

A checkpoint counts only once ``COMMITTED`` exists and every file has the size it records (a bucket
has no atomic rename; a local folder gets the same rule). :func:`latest` finds the newest complete
one; :func:`prune` keeps the newest ``keep`` and removes incomplete leftovers older than them.
"""

from __future__ import annotations

import io
import json
import random
import re
from dataclasses import dataclass

import fsspec
import numpy as np
import torch

COMMITTED = "COMMITTED"
TRAINER_STATE = "trainer.pt"
_STEP_DIR = re.compile(r"step-(\d{8,})$")


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete or does not fit this run; the message names it."""


@dataclass(frozen=True)
class Checkpoint:
    url: str
    step: int


def step_url(run: str, step: int) -> str:
    return f"{run.rstrip('/')}/checkpoints/step-{step:08d}"


def rng_file(rank: int) -> str:
    return f"rng-rank{rank:05d}.pt"


def _fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    fs, path = fsspec.core.url_to_fs(url)
    return fs, path.rstrip("/")


def save_torch(obj: object, url: str) -> None:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    fs, path = _fs(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(path, buffer.getvalue())


def load_torch(url: str) -> object:
    fs, path = _fs(url)
    return torch.load(io.BytesIO(fs.cat_file(path)), map_location="cpu", weights_only=False)


def rng_state() -> dict:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def commit(url: str, step: int) -> None:
    """Write ``COMMITTED`` listing every file of the checkpoint folder with its size."""
    fs, path = _fs(url)
    files = {
        entry["name"].rsplit("/", 1)[-1]: int(entry["size"])
        for entry in fs.ls(path, detail=True)
        if entry["type"] == "file" and not entry["name"].endswith(COMMITTED)
    }
    fs.pipe_file(f"{path}/{COMMITTED}", json.dumps({"step": step, "files": files}, indent=1).encode())


def is_complete(url: str) -> bool:
    fs, path = _fs(url)
    try:
        record = json.loads(fs.cat_file(f"{path}/{COMMITTED}"))
    except FileNotFoundError:
        return False
    except ValueError:
        return False
    try:
        return all(fs.size(f"{path}/{name}") == size for name, size in record["files"].items())
    except FileNotFoundError:
        return False


def _step_dirs(run: str) -> list[Checkpoint]:
    fs, path = _fs(run)
    folder = f"{path}/checkpoints"
    if not fs.exists(folder):
        return []
    found = []
    for name in fs.ls(folder, detail=False):
        match = _STEP_DIR.search(name.rstrip("/"))
        if match:
            found.append(Checkpoint(step_url(run, int(match.group(1))), int(match.group(1))))
    return sorted(found, key=lambda c: c.step)


def latest(run: str) -> Checkpoint | None:
    """The newest complete checkpoint of a run folder, or None."""
    for checkpoint in reversed(_step_dirs(run)):
        if is_complete(checkpoint.url):
            return checkpoint
    return None


def resolve(url: str) -> Checkpoint:
    """A checkpoint folder itself, or the newest complete checkpoint of a run folder."""
    url = url.rstrip("/")
    match = _STEP_DIR.search(url)
    if match:
        if not is_complete(url):
            raise CheckpointError(f"{url}: not a complete checkpoint (no {COMMITTED} or a file is missing)")
        return Checkpoint(url, int(match.group(1)))
    found = latest(url)
    if found is None:
        raise CheckpointError(
            f"{url}: no complete checkpoint under {url}/checkpoints (a run folder written by `pretrain`)"
        )
    return found


def prune(run: str, keep: int) -> list[str]:
    """Remove all but the newest ``keep`` complete checkpoints, and incomplete folders older than
    the newest complete one; return what was removed."""
    checkpoints = _step_dirs(run)
    complete = [c for c in checkpoints if is_complete(c.url)]
    if not complete:
        return []
    kept = {c.url for c in complete[-keep:]} if keep > 0 else {complete[-1].url}
    newest = complete[-1].step
    removed = []
    for checkpoint in checkpoints:
        if checkpoint.url in kept or checkpoint.step > newest:
            continue
        fs, path = _fs(checkpoint.url)
        fs.rm(path, recursive=True)
        removed.append(checkpoint.url)
    return removed
