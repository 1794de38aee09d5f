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


def device_problems(name: str) -> list[str]:
    """``--device`` one torch can use on this machine (``auto``, ``cpu``, ``cuda``, ``cuda:N`` of its GPUs)."""
    try:
        device = torch.device("cpu" if name == "auto" else name)
    except RuntimeError:
        return [f"--device must be auto, cpu, cuda or cuda:N, got {name!r}"]
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        return [
            f"--device {name}: torch {torch.__version__} sees {torch.cuda.device_count()} CUDA GPU(s) here; "
            "use --device cpu or auto"
        ]
    return []


def resolve_precision(precision: str, device: torch.device) -> str:
    """The precision actually used: as given (bf16 and fp16 autocast on a CPU too); ``auto`` fp32 on
    a CPU, on a GPU bf16 where supported, else fp16."""
    if precision != "auto":
        return precision
    if device.type != "cuda":
        return "fp32"
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """Mixed precision for ``bf16`` / ``fp16`` on ``device``; nothing for ``fp32``."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)
