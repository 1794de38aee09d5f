"""Atomic, resumable training checkpoints on local paths or buckets (fsspec).

Layout of a run folder::

    RUN/checkpoints/step-00001000/
        config.json, model.safetensors   the model, in transformers' layout (``save_pretrained``):
                                         ``BertForPreTraining.from_pretrained`` and export read it
        trainer.json, trainer.safetensors
                                         optimizer, scheduler, grad scaler, step, tokens seen,
                                         the reader's position, the run's settings, casing,
                                         vocabulary hash: tensors in safetensors, the rest JSON
        rng-rank00000.json/.safetensors  every rank's RNG states (Python, NumPy, torch CPU, CUDA)
        COMMITTED                        written last, by rank 0, after every rank's files:
                                         JSON with the step and each file's size and SHA-256

Nothing is unpickled: a state is split by :func:`save_state` into its tensors (safetensors) and a
JSON tree that names them. A checkpoint counts only once ``COMMITTED`` exists and every file has the
size it records (a bucket has no atomic rename; a local folder gets the same rule); :func:`resolve`
also checks every file's SHA-256 and names the one that differs. Old pickle-based checkpoints
(``trainer.pt``, ``rng-rank*.pt``) are refused with a one-line error. :func:`latest` finds the newest complete
one; :func:`prune` keeps the newest ``keep`` and removes incomplete leftovers older than them.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass

import fsspec
import numpy as np
import safetensors.torch
import torch

from schemas.files import is_temporary_name, write_file

COMMITTED = "COMMITTED"
TRAINER_STATE = "trainer"  # trainer.json + trainer.safetensors
OLD_FORMAT = ("trainer.pt", "rng-rank00000.pt")
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
    return f"rng-rank{rank:05d}"  # .json + .safetensors


def _fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    fs, path = fsspec.core.url_to_fs(url)
    return fs, path.rstrip("/")


def _encode(obj: object, tensors: dict[str, torch.Tensor]) -> object:
    """A JSON tree for ``obj``; its tensors and arrays go into ``tensors`` under their tree path."""
    if isinstance(obj, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = obj.detach().cpu().contiguous()
        return {"__tensor__": key}
    if isinstance(obj, np.ndarray):
        key = f"t{len(tensors)}"
        tensors[key] = torch.from_numpy(obj.astype(np.int64) if obj.dtype == np.uint32 else obj.copy())
        return {"__ndarray__": key, "dtype": str(obj.dtype)}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, tensors) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v, tensors) for v in obj]
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in obj):
            return {k: _encode(v, tensors) for k, v in obj.items()}
        return {"__items__": [[_encode(k, tensors), _encode(v, tensors)] for k, v in obj.items()]}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot store a {type(obj).__name__} in a checkpoint")


def _decode(tree: object, tensors: dict[str, torch.Tensor]) -> object:
    if isinstance(tree, list):
        return [_decode(v, tensors) for v in tree]
    if not isinstance(tree, dict):
        return tree
    if "__tensor__" in tree:
        return tensors[tree["__tensor__"]]
    if "__ndarray__" in tree:
        return tensors[tree["__ndarray__"]].numpy().astype(tree["dtype"])
    if "__tuple__" in tree:
        return tuple(_decode(v, tensors) for v in tree["__tuple__"])
    if "__items__" in tree:
        return {_decode(k, tensors): _decode(v, tensors) for k, v in tree["__items__"]}
    return {k: _decode(v, tensors) for k, v in tree.items()}


def save_state(obj: object, url: str) -> None:
    """Write ``obj`` (dicts, lists, tuples, numbers, strings, tensors, arrays) as ``URL.json`` (the
    tree) and ``URL.safetensors`` (its tensors); nothing in either is code."""
    tensors: dict[str, torch.Tensor] = {}
    tree = _encode(obj, tensors)
    fs, path = _fs(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    write_file(f"{path}.safetensors", safetensors.torch.save(tensors), fs)
    write_file(f"{path}.json", json.dumps(tree, indent=None), fs)


def load_state(url: str) -> object:
    """Read what :func:`save_state` wrote; a damaged file is a :class:`CheckpointError` naming it."""
    fs, path = _fs(url)
    try:
        tree = json.loads(fs.cat_file(f"{path}.json"))
    except ValueError as err:
        raise CheckpointError(f"{url}.json: not valid JSON ({err}); the checkpoint is damaged") from None
    try:
        tensors = safetensors.torch.load(fs.cat_file(f"{path}.safetensors"))
    except FileNotFoundError:
        raise
    except Exception as err:  # safetensors raises its own error types for a bad header
        raise CheckpointError(f"{url}.safetensors: not a valid safetensors file ({err})") from None
    try:
        state = _decode(tree, tensors)
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{url}.json: does not match {url}.safetensors ({err})") from None
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{url}.json: holds a JSON {type(tree).__name__}, not a state; the checkpoint is damaged"
        )
    return state


def _sha256(fs: fsspec.AbstractFileSystem, path: str) -> str:
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(url: str) -> None:
    """Check every file ``COMMITTED`` lists against its SHA-256; raise naming the first that differs."""
    fs, path = _fs(url)
    for name in OLD_FORMAT:
        if fs.exists(f"{path}/{name}") and not fs.exists(f"{path}/{TRAINER_STATE}.json"):
            raise CheckpointError(
                f"{url}: old pickle-based checkpoint ({name}), not read for safety; convert it with a "
                "trusted older release's `pretrain export` and start a new run with --init-from"
            )
    try:
        record = json.loads(fs.cat_file(f"{path}/{COMMITTED}"))
        files = record["files"]
    except (ValueError, KeyError, TypeError):
        raise CheckpointError(f"{url}/{COMMITTED}: damaged commit record") from None
    for name, entry in files.items():
        want = entry.get("sha256") if isinstance(entry, dict) else None
        if want is None:
            raise CheckpointError(f"{url}/{COMMITTED}: no SHA-256 for {name} (written by an older release)")
        if _sha256(fs, f"{path}/{name}") != want:
            raise CheckpointError(f"{url}/{name}: content differs from its SHA-256 in {COMMITTED}; damaged")


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
    """Write ``COMMITTED`` listing every file of the checkpoint folder with its size and SHA-256."""
    fs, path = _fs(url)
    files = {
        entry["name"].rsplit("/", 1)[-1]: {"size": int(entry["size"]), "sha256": _sha256(fs, entry["name"])}
        for entry in fs.ls(path, detail=True)
        if entry["type"] == "file"
        and not entry["name"].endswith(COMMITTED)
        and not is_temporary_name(entry["name"].rsplit("/", 1)[-1])  # a killed earlier attempt's
    }
    write_file(f"{path}/{COMMITTED}", json.dumps({"step": step, "files": files}, indent=1), fs)


def is_complete(url: str) -> bool:
    fs, path = _fs(url)
    try:
        record = json.loads(fs.cat_file(f"{path}/{COMMITTED}"))
    except FileNotFoundError:
        return False
    except ValueError:
        return False
    try:
        return all(
            fs.size(f"{path}/{name}") == (entry["size"] if isinstance(entry, dict) else entry)
            for name, entry in record["files"].items()
        )
    except (FileNotFoundError, KeyError, TypeError, AttributeError):
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
        verify(url)
        return Checkpoint(url, int(match.group(1)))
    found = latest(url)
    if found is None:
        raise CheckpointError(
            f"{url}: no complete checkpoint under {url}/checkpoints (a run folder written by `pretrain`)"
        )
    verify(found.url)
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
