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
                                         JSON with the step, the run id and each file's size
                                         and SHA-256

Nothing is unpickled: a state is split by :func:`save_state` into its tensors (safetensors) and a
JSON tree that names them. A checkpoint counts only once ``COMMITTED`` exists and every file has the
size it records (a bucket has no atomic rename; a local folder gets the same rule); :func:`resolve`
also checks every file's SHA-256 and names the one that differs. Old pickle-based checkpoints
(``trainer.pt``, ``rng-rank*.pt``) are refused with a one-line error. :func:`latest` finds the newest complete
one; :func:`prune` keeps the newest ``keep`` and removes incomplete leftovers older than them.

Run id. Every file that can hold it records the run that wrote it and the step (:class:`Stamp`):
``COMMITTED``, the trainer state and each rank's RNG state (their JSON and safetensors metadata),
``model.safetensors``' metadata. :func:`resolve` (resume, export, fine-tuning) refuses a checkpoint
whose files name different runs or steps (two writers mixed in one folder), whose folder name is
not the step it records (a renamed folder, or a link to another step), that links to a folder
outside its run's ``checkpoints/``, or whose run is not the run folder's (its ``.output.json``
record; a checkpoint copied in from another run). Checkpoints of older releases record no run id
in any file and are read as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from dataclasses import dataclass

import fsspec
import numpy as np
import safetensors.torch
import torch
from fsspec.implementations.local import LocalFileSystem

from schemas.commands import OutputError
from schemas.files import is_temporary_name, write_file
from schemas.outputs import new_run_id, read_record

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


@dataclass(frozen=True)
class Stamp:
    """What every file of a checkpoint records about the run that wrote it."""

    run_id: str
    step: int

    def metadata(self) -> dict[str, str]:
        """As safetensors metadata (strings only)."""
        return {"run_id": self.run_id, "step": str(self.step)}


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


def shared_run_id(world_size: int, run_id: str | None) -> str:
    """The run id every rank stamps its files with: rank 0's ``run_id`` (a new one when it has
    none), sent to the other ranks of a torchrun group."""
    run_id = run_id or new_run_id()
    if world_size > 1:
        import torch.distributed as dist

        box = [run_id]
        dist.broadcast_object_list(box, src=0)  # between this run's own processes
        run_id = str(box[0])
    return run_id


_STAMP_KEY = "__stamp__"


def save_state(obj: object, url: str, stamp: Stamp | None = None) -> None:
    """Write ``obj`` (dicts, lists, tuples, numbers, strings, tensors, arrays) as ``URL.json`` (the
    tree) and ``URL.safetensors`` (its tensors); nothing in either is code. ``stamp`` goes into
    both (the JSON's ``__stamp__``, the safetensors metadata)."""
    tensors: dict[str, torch.Tensor] = {}
    tree = _encode(obj, tensors)
    metadata = None
    if stamp is not None:
        if not isinstance(tree, dict) or "__items__" in tree:
            raise TypeError("a stamped state must be a dict with string keys")
        tree = {_STAMP_KEY: {"run_id": stamp.run_id, "step": stamp.step}, **tree}
        metadata = stamp.metadata()
    fs, path = _fs(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    write_file(f"{path}.safetensors", safetensors.torch.save(tensors, metadata=metadata), fs)
    write_file(f"{path}.json", json.dumps(tree, indent=None), fs)


def save_model(model: torch.nn.Module, url: str, stamp: Stamp) -> None:
    """The model in transformers' layout (``config.json``, ``model.safetensors``), the safetensors
    metadata carrying ``stamp``."""
    from pretrain import hf

    hf.save_hf(model, url, metadata=stamp.metadata())


def load_state(url: str) -> object:
    """Read what :func:`save_state` wrote; a damaged file is a :class:`CheckpointError` naming it."""
    fs, path = _fs(url)
    try:
        tree = json.loads(fs.cat_file(f"{path}.json"))
    except ValueError as err:
        raise CheckpointError(f"{url}.json: not valid JSON ({err}); the checkpoint is damaged") from None
    if isinstance(tree, dict):
        tree.pop(_STAMP_KEY, None)
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
    check_identity(url, record)


# -- which run and step a checkpoint is -------------------------------------------------------------

_MAX_HEADER_BYTES = 100 << 20


def _header_stamp(fs: fsspec.AbstractFileSystem, path: str, url: str) -> tuple[str | None, int | None]:
    """The run id and step in a safetensors file's metadata (its header alone is read)."""
    with fs.open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        if not 0 < size <= _MAX_HEADER_BYTES:
            raise CheckpointError(f"{url}: not a valid safetensors header (length {size}); damaged")
        try:
            header = json.loads(f.read(size))
        except ValueError:
            raise CheckpointError(f"{url}: not a valid safetensors header; damaged") from None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    step = meta.get("step")
    return meta.get("run_id"), int(step) if isinstance(step, str) and step.isdigit() else None


def _json_stamp(fs: fsspec.AbstractFileSystem, path: str) -> tuple[str | None, int | None]:
    """The run id and step a state's JSON records (its ``__stamp__``)."""
    try:
        tree = json.loads(fs.cat_file(path))
    except ValueError:
        return None, None  # a damaged state is named when it is loaded
    stamp = tree.get(_STAMP_KEY) if isinstance(tree, dict) else None
    if not isinstance(stamp, dict):
        return None, None
    return stamp.get("run_id"), stamp.get("step")


def _file_stamps(fs: fsspec.AbstractFileSystem, path: str, url: str, names) -> dict:
    """File name -> (run id, step) for every file of the checkpoint that records them."""
    stamps = {}
    for name in sorted(names):
        if name.endswith(".safetensors"):
            stamps[name] = _header_stamp(fs, f"{path}/{name}", f"{url}/{name}")
        elif name.endswith(".json") and (name.startswith(TRAINER_STATE) or name.startswith("rng-rank")):
            stamps[name] = _json_stamp(fs, f"{path}/{name}")
    return stamps


def check_identity(url: str, record: dict) -> None:
    """Refuse, in one line naming the file, a checkpoint (whose ``COMMITTED`` is ``record``)
    whose folder name is not the step it records, that links outside its run's checkpoints
    folder, whose files record another run or step than ``COMMITTED``, or whose run is not the
    run folder's (its ``.output.json``)."""
    fs, path = _fs(url)
    step, run_id = record.get("step"), record.get("run_id")
    if not isinstance(step, int) or not isinstance(run_id, (str, type(None))):
        raise CheckpointError(f"{url}/{COMMITTED}: damaged commit record (step or run_id)")
    _check_place(fs, path, url, step)
    stamps = _file_stamps(fs, path, url, record["files"])
    if run_id is None and all(stamp == (None, None) for stamp in stamps.values()):
        return  # an older release's checkpoint: no run id anywhere
    for name, stamp in stamps.items():
        if stamp != (run_id, step):
            raise CheckpointError(
                f"{url}/{name}: written by run {stamp[0]} at step {stamp[1]}, but {COMMITTED} records run "
                f"{run_id} at step {step}: the checkpoint mixes two runs' files; use another checkpoint"
            )
    _check_run_folder(url, run_id)


def _check_place(fs: fsspec.AbstractFileSystem, path: str, url: str, step: int) -> None:
    """The folder is named for the step its files record, and is no link out of its run."""
    match = _STEP_DIR.search(path)
    if match and int(match.group(1)) != step:
        raise CheckpointError(
            f"{url}: named for step {int(match.group(1))} but its files record step {step}: the folder "
            f"was renamed or links to another step; rename it back to step-{step:08d} or remove it"
        )
    if isinstance(fs, LocalFileSystem):
        real = os.path.realpath(path)
        if os.path.dirname(real) != os.path.realpath(os.path.dirname(path)):
            raise CheckpointError(
                f"{url}: links to {real}, outside this run's checkpoints folder; use that checkpoint "
                "from its own run folder"
            )


def _check_run_folder(url: str, run_id: str | None) -> None:
    """A checkpoint under RUN/checkpoints/ belongs to RUN's run (when RUN records one)."""
    head, _, name = url.rstrip("/").rpartition("/")
    run, _, folder = head.rpartition("/")
    if folder != "checkpoints" or not _STEP_DIR.search(name) or not run:
        return
    fs, root = _fs(run)
    try:
        owner = read_record(fs, root, run)
    except OutputError as err:
        raise CheckpointError(str(err)) from None
    if owner is not None and owner.command == "pretrain" and owner.run_id != run_id:
        raise CheckpointError(
            f"{url}: a checkpoint of run {run_id}, but {run} is run {owner.run_id} (its .output.json): "
            "copied or linked in from another run; use it from its own run folder, or remove it"
        )


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


def commit(url: str, step: int, run_id: str | None = None) -> None:
    """Write ``COMMITTED`` listing every file of the checkpoint folder with its size and SHA-256,
    and the step and run id (when given) the files record."""
    fs, path = _fs(url)
    files = {
        entry["name"].rsplit("/", 1)[-1]: {"size": int(entry["size"]), "sha256": _sha256(fs, entry["name"])}
        for entry in fs.ls(path, detail=True)
        if entry["type"] == "file"
        and not entry["name"].endswith(COMMITTED)
        and not is_temporary_name(entry["name"].rsplit("/", 1)[-1])  # a killed earlier attempt's
    }
    record = {"step": step, **({"run_id": run_id} if run_id is not None else {}), "files": files}
    write_file(f"{path}/{COMMITTED}", json.dumps(record, indent=1), fs)


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


def run_id_of(run: str) -> str | None:
    """The run id the newest complete checkpoint of ``run`` records (None: none, or an older
    release's): what a run folder without a record continues with."""
    found = latest(run)
    if found is None:
        return None
    fs, path = _fs(found.url)
    try:
        run_id = json.loads(fs.cat_file(f"{path}/{COMMITTED}")).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
    return run_id if isinstance(run_id, str) else None


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
        if isinstance(fs, LocalFileSystem) and os.path.islink(path):
            os.unlink(path)  # a linked folder: the files it points at are not this run's to delete
        else:
            fs.rm(path, recursive=True)
        removed.append(checkpoint.url)
    return removed
