"""Run-time helpers that ``pretrain/`` and ``finetune/`` share: the precisions a run may use, the
device and precision it does use, the autocast context for that precision, and existence
checks, output folders and JSON writing on local paths or fsspec URLs (``gs://``, ``memory://``,
...), and the range checks of the two configs' numeric flags (seeds included)."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import fsspec
import torch

from schemas import files

PRECISIONS = ("fp32", "bf16", "fp16")
"""The training precisions (``finetune`` adds ``auto``: bf16 where the GPU supports it)."""


def resolve_device(name: str) -> torch.device:
    """``auto`` -> ``cuda`` when available, else ``cpu``; any other name as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_precision(precision: str, device: torch.device) -> str:
    """The precision actually used: fp32 on CPU; ``auto`` on GPU is bf16 where supported, else fp16."""
    if device.type != "cuda":
        return "fp32"
    if precision == "auto":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return precision


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """Mixed precision for ``bf16`` / ``fp16`` on ``device``; nothing for ``fp32``."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def exists(url: str) -> bool:
    """Whether a local path or fsspec URL exists."""
    fs, path = fsspec.core.url_to_fs(url)
    return fs.exists(path)


def output_folder(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and path of an output folder (a path or URL), made when missing."""
    fs, root = fsspec.core.url_to_fs(url)
    fs.makedirs(root, exist_ok=True)
    return fs, root


def write_json(url: str, obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON (plus a newline) to a path or URL, whole or not at
    all (``schemas.files``), making the parent folder first."""
    fs, local = fsspec.core.url_to_fs(url)
    fs.makedirs(local.rsplit("/", 1)[0], exist_ok=True)
    files.write_json(local, obj, fs, sort_keys=True)


MAX_SEED = 2**32 - 1
"""The largest ``--seed``: every RNG a seed reaches (torch, NumPy, Python) takes it as it is."""


def seed_in_range(flag: str, value: int, problems: list[str]) -> None:
    """Append ``"<flag> must be between 0 and 4294967295, got <value>"`` unless it is."""
    if not 0 <= value <= MAX_SEED:
        problems.append(f"{flag} must be between 0 and {MAX_SEED}, got {value}")


def positive_finite(flag: str, value: float, problems: list[str]) -> None:
    """Append ``"<flag> must be positive and finite, got <value>"`` to ``problems`` unless ``value``
    is a finite number above zero (NaN and infinity fail)."""
    if not (math.isfinite(value) and value > 0):
        problems.append(f"{flag} must be positive and finite, got {value}")


def non_negative_finite(flag: str, value: float, problems: list[str]) -> None:
    """Append ``"<flag> must not be negative (and finite), got <value>"`` to ``problems`` unless
    ``value`` is a finite number at or above zero (NaN and infinity fail)."""
    if not (math.isfinite(value) and value >= 0):
        problems.append(f"{flag} must not be negative (and finite), got {value}")
