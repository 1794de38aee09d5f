"""What ``pretrain/`` and ``finetune/`` share at run time: the device and precision a run uses, and
autocast."""

from __future__ import annotations

import contextlib

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
