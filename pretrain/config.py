"""The trainer's settings: the source of every flag's default, checked all at once and saved in
every checkpoint. Imports no torch, so the command line is checked before torch loads."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from pretrain.schedules import SCHEDULES
from schemas.commands import UsageError, seed_problems

PRESETS: dict[str, tuple[int, int]] = {
    # name: (num_hidden_layers, hidden_size); heads = hidden / 64, intermediate = 4 * hidden.
    "tiny": (2, 128),
    "mini": (4, 256),
    "small": (4, 512),
    "medium": (8, 512),
    "base": (12, 768),
    "large": (24, 1024),
}
PRECISIONS = ("fp32", "bf16", "fp16")
OPTIMIZERS = ("adamw", "lamb")
LR_SCHEDULES = tuple(SCHEDULES)
OBJECTIVES = ("mlm", "ltr")
BATCHING_MODES = ("padded", "bucketed", "packed")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
MASKING_OVERRIDES = (
    "masked_lm_prob",
    "max_predictions_per_seq",
    "whole_word_masking",
    "mask_share",
    "keep_share",
    "random_share",
)


def parse_model_size(name: str) -> tuple[int, int, int]:
    """(layers, hidden, heads) of a preset name or an ``L/H/A`` string such as ``12/768/12``."""
    if name in PRESETS:
        layers, hidden = PRESETS[name]
        return layers, hidden, hidden // 64
    parts = name.split("/")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(
            f"unknown config preset {name!r}: give one of {', '.join(PRESETS)} or L/H/A "
            "(layers/hidden/heads, positive integers, e.g. 12/768/12)"
        )
    layers, hidden, heads = map(int, parts)
    if hidden % heads:
        raise ValueError(f"model size {name!r}: hidden {hidden} is not a multiple of heads {heads}")
    return layers, hidden, heads


def positive_finite(flag: str, value: float, problems: list[str]) -> None:
    """Append a problem unless ``value`` is a finite number above zero (NaN and infinity fail)."""
    if not (math.isfinite(value) and value > 0):
        problems.append(f"{flag} must be positive and finite, got {value}")


def non_negative_finite(flag: str, value: float, problems: list[str]) -> None:
    """Append a problem unless ``value`` is a finite number at or above zero."""
    if not (math.isfinite(value) and value >= 0):
        problems.append(f"{flag} must not be negative (and finite), got {value}")


# The ranges a setting may take: (lowest, highest, lowest allowed, highest allowed). A learning
# rate above 1 or a weight decay above 1 diverges any BERT; the rest are definitions.
COUNTS = ("global_batch_size", "micro_batch_size", "max_steps", "schedule_steps", "save_steps", "log_steps")
COUNTS += ("eval_batches", "max_seq_length", "bucket_window", "streams")
SHARES = ("weight_decay", "mask_share", "keep_share", "random_share")
RANGES: dict[str, tuple[float, float, bool, bool]] = {
    **dict.fromkeys(COUNTS, (1, math.inf, True, False)),
    **dict.fromkeys(
        ("warmup_steps", "eval_steps", "keep_checkpoints", "max_grad_norm"), (0, math.inf, True, False)
    ),
    **dict.fromkeys(SHARES, (0.0, 1.0, True, True)),
    **dict.fromkeys(("adam_beta1", "adam_beta2", "dropout"), (0.0, 1.0, True, False)),
    "lr": (0.0, 1.0, False, True),
    "adam_eps": (0.0, 1.0, False, True),
    "masked_lm_prob": (0.0, 1.0, False, False),
    "decay_power": (0.0, 10.0, True, True),
    "max_predictions_per_seq": (1, 32767, True, True),
    "num_workers": (0, 64, True, True),
}
CHOICES = {
    "objective": OBJECTIVES,
    "precision": PRECISIONS,
    "lr_schedule": LR_SCHEDULES,
    "optimizer": OPTIMIZERS,
    "batching": BATCHING_MODES,
    "compile_mode": COMPILE_MODES,
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def range_problem(name: str, value: float) -> str | None:
    """What is wrong with ``value`` for the setting ``name`` (:data:`RANGES`), or None."""
    low, high, low_in, high_in = RANGES[name]
    above = value >= low if low_in else value > low
    below = value <= high if high_in else value < high
    if math.isfinite(value) and above and below:
        return None
    if math.isinf(high):
        bound = f"at least {low:g}" if low_in else f"above {low:g}"
    elif low_in and high_in:
        bound = f"between {low:g} and {high:g}"
    else:
        bound = f"in {'[' if low_in else '('}{low:g}, {high:g}{']' if high_in else ')'}"
    return f"{_flag(name)} must be {bound}, got {value}"


@dataclass(frozen=True)
class PretrainConfig:
    """Everything ``pretrain`` needs to know; :meth:`problems` lists what is wrong, all at once."""

    shards: str
    output: str | None = None
    config: str | None = None
    """A model size (``tiny`` … ``large``, or ``L/H/A``) for a new model; default base."""
    nsp: bool = True
    """Train the next-sentence head and loss; False (``--no-nsp``): MLM only."""
    objective: str = "mlm"
    global_batch_size: int = 256
    micro_batch_size: int | None = None
    """Examples per rank per forward pass; None: global / world size (no accumulation)."""
    max_steps: int = 1000
    lr: float = 1e-4
    warmup_steps: int = 100
    schedule_steps: int | None = None
    """Steps of the learning-rate schedule (decay reaches 0 there); default --max-steps."""
    decay_power: float = 1.0
    lr_schedule: str = "transformers"
    optimizer: str = "adamw"
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6
    max_grad_norm: float = 1.0
    precision: str = "bf16"
    seed: int = 12345
    save_steps: int = 1000
    keep_checkpoints: int = 3
    log_steps: int = 50
    eval_steps: int = 0
    eval_batches: int = 50
    validation_shards: str | None = None
    resume: str | None = None
    init_from: str | None = None
    vocab: str | None = None
    dynamic_masking: bool = False
    masked_lm_prob: float | None = None
    """Dynamic masking settings: ``None`` takes the one the shards were written with."""
    max_predictions_per_seq: int | None = None
    whole_word_masking: bool | None = None
    mask_share: float | None = None
    keep_share: float | None = None
    random_share: float | None = None
    batching: str = "padded"
    bucket_window: int = 64
    num_workers: int = 2
    streams: int | None = None
    compile: bool | None = None
    """``torch.compile`` the model and loss; None: on for CUDA, off elsewhere."""
    compile_mode: str = "default"
    dropout: float | None = None
    max_seq_length: int | None = None
    """If given, must equal the shards' max_seq_length (a guard for phase-2 command lines)."""

    def problems(self) -> list[str]:
        """Every problem with the settings (one line each, naming the flag); empty when valid."""
        found = []
        if self.config is not None:
            try:
                parse_model_size(self.config)
            except ValueError as err:
                found.append(f"--config: {err}")
        for name, choices in CHOICES.items():
            if getattr(self, name) not in choices:
                found.append(
                    f"{_flag(name)} must be one of {', '.join(choices)}, got {getattr(self, name)!r}"
                )
        for name in RANGES:
            value = getattr(self, name)
            if value is not None and (problem := range_problem(name, value)):
                found.append(problem)
        found += seed_problems(self.seed)
        if self.schedule_steps is not None and self.schedule_steps < self.max_steps:
            found.append(
                f"--schedule-steps {self.schedule_steps} must be at least --max-steps {self.max_steps}"
            )
        shares = [getattr(self, f"{s}_share") for s in ("mask", "keep", "random")]
        given = [s for s in shares if s is not None]
        in_range = all(0 <= s <= 1 for s in given)  # out of range: said above
        if in_range and (sum(given) > 1 + 1e-9 or (len(given) == 3 and abs(sum(given) - 1) > 1e-9)):
            found.append(f"--mask-share, --keep-share and --random-share must sum to 1, got {given}")
        if self.resume and self.init_from:
            found.append("--resume continues a run, --init-from starts a new one from weights: give one")
        if not self.dynamic_masking:
            found += [
                f"{_flag(n)} applies to --dynamic-masking only: add it"
                for n in MASKING_OVERRIDES
                if getattr(self, n) is not None
            ]
        if self.batching == "packed" and self.objective == "ltr":
            found.append(
                "--objective ltr needs padded or bucketed batches (causal attention), not --batching packed"
            )
        if self.compile is False and self.compile_mode != "default":
            found.append(f"--compile-mode {self.compile_mode} applies when compiling: drop --no-compile")
        return found

    def masking_overrides(self) -> dict[str, Any]:
        """The dynamic-masking settings given on the command line (``None``: from the shards)."""
        return {name: getattr(self, name) for name in MASKING_OVERRIDES}

    @property
    def uses_nsp(self) -> bool:
        """Whether the model has (and trains) the NSP head: not with --no-nsp nor --objective ltr."""
        return self.nsp and self.objective == "mlm"

    def accumulation(self, world_size: int) -> tuple[int, int]:
        """(micro batch size, accumulation steps) for ``world_size`` ranks, or :class:`UsageError`."""
        problems = self.problems()
        per_rank, rest = divmod(self.global_batch_size, world_size)
        micro = self.micro_batch_size or per_rank
        if rest:
            problems.append(
                f"--global-batch-size {self.global_batch_size} is not divisible by the {world_size} ranks"
            )
        elif not problems and (per_rank % micro or per_rank < micro):
            problems.append(
                f"--micro-batch-size {micro} must divide the per-rank batch {per_rank} "
                f"(--global-batch-size {self.global_batch_size} over {world_size} ranks)"
            )
        if not (self.output or self.resume):
            problems.append("--output is required (or --resume RUN, which continues writing into RUN)")
        if problems:
            raise UsageError("invalid settings: " + "; ".join(problems))
        return micro, per_rank // micro

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
