"""The trainer's settings: one typed, validated record, saved in every checkpoint."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pretrain.batching import BATCHING_MODES
from pretrain.model import parse_model_size
from pretrain.runtime import PRECISIONS, non_negative_finite, positive_finite, seed_in_range

OPTIMIZERS = ("adamw", "lamb")
MASKING_OVERRIDES = (
    "masked_lm_prob",
    "max_predictions_per_seq",
    "whole_word_masking",
    "mask_share",
    "keep_share",
    "random_share",
)
LR_SCHEDULES = ("transformers", "reference")
OBJECTIVES = ("mlm", "ltr")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""``torch.compile`` modes; ``reduce-overhead`` adds CUDA graphs (one per batch shape)."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything ``pretrain`` needs to know; :meth:`problems` lists what is wrong, all at once."""

    shards: str
    output: str
    config: str | None = None
    """A model size (``tiny`` … ``large``, or ``L/H/A``), used when not starting from --init-from
    or --resume."""
    nsp: bool = True
    """Train the next-sentence head and loss; False (``--no-nsp``): MLM only, NSP labels ignored."""
    objective: str = "mlm"
    """``mlm`` (masked LM) or ``ltr`` (causal left-to-right LM on the restored tokens, no NSP)."""
    global_batch_size: int = 256
    micro_batch_size: int | None = None
    """Examples per rank per forward pass; None: global / world size (no accumulation)."""
    max_steps: int = 1000
    lr: float = 1e-4
    warmup_steps: int = 100
    schedule_steps: int | None = None
    """Steps of the learning-rate schedule (decay reaches 0 there); default --max-steps. Phase 1
    of BERT's recipe: --max-steps 900000 --schedule-steps 1000000."""
    decay_power: float = 1.0
    lr_schedule: str = "transformers"
    """``transformers``: decay from the end of warm-up; ``reference``: google-research/bert's
    ``polynomial_decay`` from step 0 with the warm-up overriding it (see pretrain/optim.py)."""
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
    """Evaluate on --validation-shards every N steps (0: at the end only)."""
    eval_batches: int = 50
    validation_shards: str | None = None
    resume: str | None = None
    init_from: str | None = None
    vocab: str | None = None
    """The vocabulary (vocab.txt or tokenizer.json); by default the one the shards were made with."""
    dynamic_masking: bool = False
    masked_lm_prob: float | None = None
    """Dynamic masking settings: ``None`` takes the one the shards were written with."""
    max_predictions_per_seq: int | None = None
    whole_word_masking: bool | None = None
    mask_share: float | None = None
    keep_share: float | None = None
    random_share: float | None = None
    batching: str = "padded"
    """How batches are laid out (``pretrain/batching.py``): padded, bucketed or packed."""
    bucket_window: int = 64
    """Consecutive batches whose examples ``bucketed`` regroups by length."""
    num_workers: int = 2
    streams: int | None = None
    compile: bool | None = None
    """``torch.compile`` the model and loss; None: on for CUDA, off elsewhere."""
    compile_mode: str = "default"
    dropout: float | None = None
    max_seq_length: int | None = None
    """If given, must equal the shards' max_seq_length (a guard for phase-2 command lines)."""
    rank_report: str | None = None
    """A local folder where every rank writes a digest of its weights and examples (for tests)."""

    def problems(self) -> list[str]:
        """Every problem with the settings (one line each, naming the flag); empty when valid."""
        found = []
        if self.config is not None:
            try:
                parse_model_size(self.config)
            except ValueError as err:
                found.append(f"--config: {err}")
        if self.objective not in OBJECTIVES:
            found.append(f"--objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.precision not in PRECISIONS:
            found.append(f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            found.append(f"--lr-schedule must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}")
        if self.optimizer not in OPTIMIZERS:
            found.append(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        for name in ("global_batch_size", "max_steps", "save_steps", "log_steps", "eval_batches"):
            if getattr(self, name) < 1:
                found.append(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            found.append(f"--micro-batch-size must be at least 1, got {self.micro_batch_size}")
        if self.max_seq_length is not None and self.max_seq_length < 1:
            found.append(f"--max-seq-length must be at least 1, got {self.max_seq_length}")
        seed_in_range("--seed", self.seed, found)
        for name in ("warmup_steps", "eval_steps", "num_workers", "keep_checkpoints"):
            if getattr(self, name) < 0:
                found.append(f"--{name.replace('_', '-')} must not be negative, got {getattr(self, name)}")
        if self.schedule_steps is not None and self.schedule_steps < self.max_steps:
            found.append(
                f"--schedule-steps {self.schedule_steps} must be at least --max-steps {self.max_steps}"
            )
        found += self._number_problems()
        if self.resume and self.init_from:
            found.append(
                "--resume continues a run (weights, optimizer, data position); --init-from starts "
                "a new run from weights: give one of them"
            )
        if not self.dynamic_masking:
            for name in MASKING_OVERRIDES:
                if getattr(self, name) is not None:
                    found.append(f"--{name.replace('_', '-')} applies to --dynamic-masking only: add it")
        if self.batching not in BATCHING_MODES:
            found.append(f"--batching must be one of {', '.join(BATCHING_MODES)}, got {self.batching!r}")
        if self.bucket_window < 1:
            found.append(f"--bucket-window must be at least 1, got {self.bucket_window}")
        if self.batching == "packed" and self.objective == "ltr":
            found.append(
                "--objective ltr needs padded or bucketed batches (causal attention), not --batching packed"
            )
        if self.compile_mode not in COMPILE_MODES:
            found.append(
                f"--compile-mode must be one of {', '.join(COMPILE_MODES)}, got {self.compile_mode!r}"
            )
        elif self.compile is False and self.compile_mode != "default":
            found.append(f"--compile-mode {self.compile_mode} applies when compiling: drop --no-compile")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            found.append(f"--dropout must be in [0, 1), got {self.dropout}")
        return found

    def _number_problems(self) -> list[str]:
        """Floating-point settings out of range (NaN and infinity included)."""
        found = []
        positive_finite("--lr", self.lr, found)
        for name in ("weight_decay", "max_grad_norm", "decay_power"):
            non_negative_finite(f"--{name.replace('_', '-')}", getattr(self, name), found)
        for name in ("adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                found.append(f"{name} must be in [0, 1), got {getattr(self, name)}")
        positive_finite("adam_eps", self.adam_eps, found)
        if self.masked_lm_prob is not None and not 0.0 < self.masked_lm_prob < 1.0:
            found.append(f"--masked-lm-prob must be in (0, 1), got {self.masked_lm_prob}")
        for name in ("mask_share", "keep_share", "random_share"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                found.append(f"--{name.replace('_', '-')} must be in [0, 1], got {value}")
        if self.max_predictions_per_seq is not None and not 1 <= self.max_predictions_per_seq <= 32767:
            found.append(
                f"--max-predictions-per-seq must be between 1 and 32767 (int16 positions), "
                f"got {self.max_predictions_per_seq}"
            )
        if self.streams is not None and self.streams < 1:
            found.append(f"--streams must be at least 1, got {self.streams}")
        return found

    def masking_overrides(self) -> dict[str, Any]:
        """The dynamic-masking settings given on the command line (``None``: from the shards)."""
        return {name: getattr(self, name) for name in MASKING_OVERRIDES}

    @property
    def uses_nsp(self) -> bool:
        """Whether the model has (and trains) the NSP head: not with --no-nsp nor --objective ltr."""
        return self.nsp and self.objective == "mlm"

    def accumulation(self, world_size: int) -> tuple[int, int]:
        """(micro batch size, accumulation steps) for ``world_size`` ranks, or ValueError."""
        per_rank, rest = divmod(self.global_batch_size, world_size)
        if rest:
            raise ValueError(
                f"--global-batch-size {self.global_batch_size} is not divisible by the {world_size} ranks"
            )
        micro = self.micro_batch_size or per_rank
        steps, rest = divmod(per_rank, micro)
        if rest or steps == 0:
            raise ValueError(
                f"--micro-batch-size {micro} must divide the per-rank batch {per_rank} "
                f"(--global-batch-size {self.global_batch_size} over {world_size} ranks)"
            )
        return micro, steps

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
