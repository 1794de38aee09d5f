"""The settings of one fine-tuning run (:class:`FitConfig`), every task's base, checked all at once."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from pretrain.config import PRECISIONS as PRETRAIN_PRECISIONS
from pretrain.config import non_negative_finite, positive_finite
from pretrain.runtime import device_problems
from schemas.commands import UsageError, seed_problems

PRECISIONS = ("auto", *PRETRAIN_PRECISIONS)
MIN_SEQ_LENGTH = 8
MAX_LR = 1.0  # fine-tuning uses 1e-5 .. 1e-3; AdamW diverges long before 1
MAX_EPOCHS = 1000
MAX_COUNT = 2**31 - 1  # the largest batch size, sequence length or example count a flag takes


def runtime_problems(precision: str, device: str) -> list[str]:
    """What is wrong with ``--precision`` (one of :data:`PRECISIONS`) and ``--device``."""
    found = device_problems(device)
    if precision not in PRECISIONS:
        found.insert(0, f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return found


@dataclass(frozen=True)
class FitConfig:
    """The settings of one fine-tuning run; :meth:`problems` lists what is wrong, all at once.

    ``precision``: ``auto`` is bf16 on a GPU that supports it, else fp16 (with a gradient scaler)
    on GPU, and fp32 on CPU. ``device``: ``auto`` is ``cuda`` when available. ``cased``: None takes
    the casing the checkpoint records. ``max_*_examples``: the first N rows (quick runs).
    """

    epochs: float = 3.0
    lr: float = 2e-5
    batch_size: int = 32
    seed: int = 42
    warmup_proportion: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    eval_batch_size: int = 64
    precision: str = "auto"
    device: str = "auto"
    max_seq_length: int = 128
    max_train_examples: int | None = None
    max_eval_examples: int | None = None
    cased: bool | None = None
    progress: bool | None = None  # None: a bar on a terminal, else a line every 30 s; False: none
    eval_flag: ClassVar[str] = "--max-eval-examples"

    def problems(self) -> list[str]:
        """Every problem with the settings (one line each, naming the flag); empty when valid."""
        found: list[str] = []
        for flag, value, top in (("--epochs", self.epochs, MAX_EPOCHS), ("--lr", self.lr, MAX_LR)):
            if math.isfinite(value) and value > top:
                found.append(f"{flag} must be at most {top:g}, got {value:g}")
            else:
                positive_finite(flag, value, found)
        for flag, value, low in (
            ("--batch-size", self.batch_size, 1),
            ("the evaluation batch size", self.eval_batch_size, 1),
            ("--max-seq-length", self.max_seq_length, MIN_SEQ_LENGTH),
            ("--max-train-examples", self.max_train_examples, 1),
            (self.eval_flag, self.max_eval_examples, 1),
        ):
            if value is not None and not low <= value <= MAX_COUNT:
                found.append(f"{flag} must be between {low} and {MAX_COUNT:,}, got {value}")
        found += seed_problems(self.seed)
        if not 0 <= self.warmup_proportion < 1:
            found.append(f"--warmup-proportion must be in [0, 1), got {self.warmup_proportion}")
        if not 0 <= self.weight_decay <= 1:
            found.append(f"--weight-decay must be in [0, 1], got {self.weight_decay}")
        non_negative_finite("max_grad_norm", self.max_grad_norm, found)
        return found + runtime_problems(self.precision, self.device)

    def checked(self) -> FitConfig:
        """The config itself, or :class:`UsageError` listing its :meth:`problems` (exit 2)."""
        problems = self.problems()
        if problems:
            raise UsageError("; ".join(problems))
        return self

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict."""
        return asdict(self)
