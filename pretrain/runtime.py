"""What ``pretrain/`` and ``finetune/`` share at run time: the device and precision a run uses,
autocast, and existence checks and output folders on local paths or fsspec URLs."""

from __future__ import annotations

import contextlib

import fsspec
import torch


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
