"""Atomic, resumable training checkpoints on local paths or buckets (fsspec); the layout is in
docs/pretrain.md. Nothing is unpickled: a state's tensors go to safetensors and the rest to a JSON
tree that names them. A checkpoint counts once ``COMMITTED`` exists and every file has its size;
:func:`resolve` (resume, export, fine-tuning) also verifies every SHA-256 and its identity.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import safetensors.torch
import torch

from pretrain.hf import non_finite, read_header
from schemas import storage
from schemas.commands import InputError
from schemas.inputs import field, loads, read_bytes
from schemas.outputs import new_run_id, read_record
from schemas.storage import is_temporary_name

COMMITTED = "COMMITTED"
TRAINER_STATE = "trainer"  # trainer.json + trainer.safetensors
MAX_JSON_BYTES = 256 << 20
_STEP_DIR = re.compile(r"step-(\d{8,})$")
_STAMP_KEY = "__stamp__"


@dataclass(frozen=True)
class Checkpoint:
    url: str
    step: int


@dataclass(frozen=True)
class Stamp:
    """What every file of a checkpoint records about the run that wrote it."""

    run_id: str
    step: int

    def metadata(self) -> dict[str, str]:  # safetensors metadata: strings only
        return {"run_id": self.run_id, "step": str(self.step)}


def step_name(step: int) -> str:
    """The folder of the checkpoint of ``step``, relative to its run folder."""
    return f"checkpoints/step-{step:08d}"


def step_url(run: str, step: int) -> str:
    return f"{run.rstrip('/')}/{step_name(step)}"


def rng_file(rank: int) -> str:
    return f"rng-rank{rank:05d}"  # .json + .safetensors


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
        return tensors[tree["__ndarray__"]].numpy().astype(np.dtype(tree["dtype"]).str)
    if "__tuple__" in tree:
        return tuple(_decode(v, tensors) for v in tree["__tuple__"])
    if "__items__" in tree:
        return {_decode(k, tensors): _decode(v, tensors) for k, v in tree["__items__"]}
    return {k: _decode(v, tensors) for k, v in tree.items()}


def shared_run_id(world_size: int, run_id: str | None) -> str:
    """The run id every rank stamps its files with: rank 0's ``run_id`` (None: a new one)."""
    run_id = run_id or new_run_id()
    if world_size > 1:
        import torch.distributed as dist

        box = [run_id]
        dist.broadcast_object_list(box, src=0)  # between this run's own processes
        run_id = str(box[0])
    return run_id


def save_state(obj: object, out: storage.Folder, name: str, stamp: Stamp | None = None) -> None:
    """Write ``obj`` into ``out`` as ``NAME.json`` (the tree) and ``NAME.safetensors`` (its tensors),
    ``stamp`` in both."""
    tensors: dict[str, torch.Tensor] = {}
    tree = _encode(obj, tensors)
    metadata = None
    if stamp is not None:
        tree = {_STAMP_KEY: {"run_id": stamp.run_id, "step": stamp.step}, **tree}
        metadata = stamp.metadata()
    out.write(f"{name}.safetensors", safetensors.torch.save(tensors, metadata=metadata))
    out.write(f"{name}.json", json.dumps(tree, indent=None))


def _read_json(fs: storage.FileSystem, path: str, where: str) -> dict:
    """A JSON object file of a checkpoint, bounded and strict, or :class:`InputError`."""
    try:
        with fs.open(path, "rb") as f:
            tree = loads(read_bytes(f, where, MAX_JSON_BYTES), where)
    except FileNotFoundError:
        raise InputError(f"{where}: missing; the checkpoint is incomplete") from None
    if not isinstance(tree, dict):
        raise InputError(
            f"{where}: holds a JSON {type(tree).__name__}, not an object; the checkpoint is damaged"
        )
    return tree


def trainer_json(url: str) -> dict:
    """The ``trainer.json`` of the checkpoint ``url`` (what resume and export read of it)."""
    fs, path = storage.filesystem(url)
    return _read_json(fs, f"{path}/{TRAINER_STATE}.json", f"{url}/{TRAINER_STATE}.json")


def load_state(url: str, missing_ok: bool = False) -> dict | None:
    """Read what :func:`save_state` wrote (None when missing and ``missing_ok``), checked and finite."""
    fs, path = storage.filesystem(url)
    if missing_ok and not fs.exists(f"{path}.json"):
        return None
    tree = _read_json(fs, f"{path}.json", f"{url}.json")
    tree.pop(_STAMP_KEY, None)
    try:
        tensors = safetensors.torch.load(fs.cat_file(f"{path}.safetensors"))
    except FileNotFoundError:
        raise InputError(f"{url}.safetensors: missing; the checkpoint is incomplete") from None
    except Exception as err:  # safetensors raises its own error types for a bad header
        raise InputError(f"{url}.safetensors: not a valid safetensors file ({err})") from None
    try:
        state = _decode(tree, tensors)
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(
            f"{url}.json: does not match {url}.safetensors ({type(err).__name__}: {err})"
        ) from None
    bad = non_finite(state)
    if bad is not None:
        raise InputError(
            f"{url}.safetensors: {bad} holds NaN or infinity (the run diverged): use an earlier checkpoint"
        )
    return state


def _sha256(fs: storage.FileSystem, path: str) -> str:
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _commit_record(fs: storage.FileSystem, path: str, url: str) -> dict:
    """``COMMITTED``, every field checked: the step, the run id, each file's size and SHA-256."""
    where = f"{url}/{COMMITTED}"
    record = _read_json(fs, f"{path}/{COMMITTED}", where)
    field(record, "step", int, where)
    field(record, "run_id", (str, type(None)), where, default=None)
    for name, entry in field(record, "files", dict, where).items():
        if "/" in name or "\\" in name or name in ("", ".", ".."):
            raise InputError(f"{where}: lists {name!r}, not a file name in the folder; damaged")
        field(entry, "size", int, f"{where} ({name})")
        field(entry, "sha256", str, f"{where} ({name})")
    return record


def is_complete(url: str) -> bool:
    """Whether ``COMMITTED`` exists, is whole, and every file it lists has its recorded size."""
    fs, path = storage.filesystem(url)
    try:
        record = _commit_record(fs, path, url)
        return all(fs.size(f"{path}/{name}") == entry["size"] for name, entry in record["files"].items())
    except (InputError, FileNotFoundError):
        return False


def verify(url: str) -> None:
    """Check every file ``COMMITTED`` lists against its SHA-256, then the checkpoint's identity."""
    fs, path = storage.filesystem(url)
    record = _commit_record(fs, path, url)
    for name, entry in record["files"].items():
        if _sha256(fs, f"{path}/{name}") != entry["sha256"]:
            raise InputError(f"{url}/{name}: content differs from its SHA-256 in {COMMITTED}; damaged")
    check_identity(url, record)


def _stamp_of(fs: storage.FileSystem, path: str, url: str, name: str) -> tuple[Any, Any]:
    """The (run id, step) a checkpoint file records (safetensors metadata, or a JSON's ``__stamp__``)."""
    if name.endswith(".safetensors"):
        try:
            header, _ = read_header(fs, f"{path}/{name}", f"{url}/{name}")
        except ValueError as err:
            raise InputError(str(err)) from None
        meta = header.get("__metadata__") if isinstance(header.get("__metadata__"), dict) else {}
        step = meta.get("step")
        return meta.get("run_id"), int(step) if isinstance(step, str) and step.isdigit() else None
    stamp = _read_json(fs, f"{path}/{name}", f"{url}/{name}").get(_STAMP_KEY)
    return (stamp.get("run_id"), stamp.get("step")) if isinstance(stamp, dict) else (None, None)


def check_identity(url: str, record: dict) -> None:
    """Refuse, in one line naming the file, a checkpoint (whose ``COMMITTED`` is ``record``)
    whose folder name is not its step, that links out of its run's checkpoints folder, whose files
    record another run or step than ``COMMITTED``, or whose run is not the run folder's."""
    fs, path = storage.filesystem(url)
    step, run_id = record["step"], record.get("run_id")
    match = _STEP_DIR.search(path)
    if match and int(match.group(1)) != step:
        raise InputError(
            f"{url}: named for step {int(match.group(1))} but its files record step {step}: the folder "
            f"was renamed or links to another step; rename it back to step-{step:08d} or remove it"
        )
    real = os.path.realpath(path)
    if isinstance(fs, storage.LocalFileSystem) and os.path.dirname(real) != os.path.realpath(
        os.path.dirname(path)
    ):
        raise InputError(
            f"{url}: links to {real}, outside this run's checkpoints folder; use that checkpoint from its own run folder"
        )
    for name in sorted(record["files"]):
        state = name.endswith(".json") and name.startswith((TRAINER_STATE, "rng-rank"))
        if not (name.endswith(".safetensors") or state):
            continue
        stamp = _stamp_of(fs, path, url, name)
        if stamp != (run_id, step) and (run_id is not None or stamp != (None, None)):
            raise InputError(
                f"{url}/{name}: written by run {stamp[0]} at step {stamp[1]}, but {COMMITTED} records run "
                f"{run_id} at step {step}: the checkpoint mixes two runs' files; use another checkpoint"
            )
    head, _, name = url.rstrip("/").rpartition("/")
    run, _, folder = head.rpartition("/")
    if folder == "checkpoints" and _STEP_DIR.search(name) and run and run_id is not None:
        run_fs, root = storage.filesystem(run)
        owner = read_record(run_fs, root, run)
        if owner is not None and owner.command == "pretrain" and owner.run_id != run_id:
            raise InputError(
                f"{url}: a checkpoint of run {run_id}, but {run} is run {owner.run_id} (its .output.json): "
                "copied or linked in from another run; use it from its own run folder, or remove it"
            )


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict, where: str = "the RNG state") -> None:
    """Restore :func:`rng_state`'s states; a damaged one is :class:`InputError` naming ``where``."""
    try:
        random.setstate(state["python"])
        np.random.set_state(state["numpy"])
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise InputError(f"{where}: damaged ({type(err).__name__}: {err})") from None


def commit(out: storage.Folder, step: int, run_id: str | None = None) -> None:
    """Write ``COMMITTED`` into the checkpoint folder ``out``: every file of the checkpoint with its
    size and SHA-256, the step and run id."""
    fs, path = storage.filesystem(out.url)
    files = {
        entry["name"].rsplit("/", 1)[-1]: {"size": int(entry["size"]), "sha256": _sha256(fs, entry["name"])}
        for entry in fs.ls(path, detail=True)
        if entry["type"] == "file"
        and not entry["name"].endswith(COMMITTED)
        and not is_temporary_name(entry["name"].rsplit("/", 1)[-1])  # a killed earlier attempt's
    }
    record = {"step": step, **({"run_id": run_id} if run_id is not None else {}), "files": files}
    out.write(COMMITTED, json.dumps(record, indent=1))


def _step_dirs(run: str) -> list[Checkpoint]:
    fs, path = storage.filesystem(run)
    if not fs.exists(f"{path}/checkpoints"):
        return []
    found = []
    for name in fs.ls(f"{path}/checkpoints", detail=False):
        match = _STEP_DIR.search(name.rstrip("/"))
        if match:
            found.append(Checkpoint(step_url(run, int(match.group(1))), int(match.group(1))))
    return sorted(found, key=lambda c: c.step)


def latest(run: str) -> Checkpoint | None:
    """The newest complete checkpoint of a run folder, or None."""
    return next((c for c in reversed(_step_dirs(run)) if is_complete(c.url)), None)


def run_id_of(run: str) -> str | None:
    """The run id the newest complete checkpoint of ``run`` records (None: none)."""
    found = latest(run)
    if found is None:
        return None
    fs, path = storage.filesystem(found.url)
    return _commit_record(fs, path, found.url).get("run_id")


def weights_folder(url: str | os.PathLike) -> str:
    """The folder of weights ``url`` names: a checkpoint folder (``RUN/checkpoints/step-N``) or a
    ``pretrain`` run folder's newest complete checkpoint, verified (:func:`resolve`); any other
    folder (an HF-format BERT folder) as it is."""
    url = os.fspath(url).rstrip("/")
    if _STEP_DIR.search(url) or storage.exists(f"{url}/checkpoints"):
        return resolve(url).url
    return url


def resolve(url: str) -> Checkpoint:
    """A checkpoint folder itself, or the newest complete checkpoint of a run folder, verified."""
    url = url.rstrip("/")
    match = _STEP_DIR.search(url)
    if match:
        if not is_complete(url):
            raise InputError(f"{url}: not a complete checkpoint (no valid {COMMITTED} or a file is missing)")
        found = Checkpoint(url, int(match.group(1)))
    else:
        found = latest(url)
        if found is None:
            raise InputError(
                f"{url}: no complete checkpoint under {url}/checkpoints (a run folder written by `pretrain`)"
            )
    verify(found.url)
    return found


def prune(run: str, keep: int) -> list[str]:
    """Remove all but the newest ``keep`` complete checkpoints and older incomplete ones; what it removed."""
    checkpoints = _step_dirs(run)
    complete = [c for c in checkpoints if is_complete(c.url)]
    if not complete:
        return []
    kept = {c.url for c in complete[-max(keep, 1) :]}
    removed = []
    for checkpoint in checkpoints:
        if checkpoint.url in kept or checkpoint.step > complete[-1].step:
            continue
        fs, path = storage.filesystem(checkpoint.url)
        if isinstance(fs, storage.LocalFileSystem) and os.path.islink(path):
            os.unlink(path)  # a linked folder: the files it points at are not this run's to delete
        else:
            fs.rm(path, recursive=True)
        removed.append(checkpoint.url)
    return removed
