"""The learning-rate schedules ``--lr-schedule`` names, each the multiplier of the peak rate at a
step; pure Python, so the settings check a name before torch loads. A new schedule is a function
and its entry in :data:`SCHEDULES`; :func:`pretrain.optim.build_scheduler` applies it."""

from __future__ import annotations

from collections.abc import Callable


def warmup_decay(step: int, warmup_steps: int, max_steps: int, power: float = 1.0) -> float:
    """The learning-rate multiplier at ``step``: linear warm-up, then ``(1 - progress) ** power``."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    remaining = max_steps - step
    span = max(1, max_steps - warmup_steps)
    return max(0.0, remaining / span) ** power if remaining > 0 else 0.0


def reference_decay(step: int, warmup_steps: int, max_steps: int, power: float = 1.0) -> float:
    """The multiplier of google-research/bert ``optimization.create_optimizer``: polynomial decay
    to 0 at ``max_steps`` counted from step 0, and ``step / warmup`` while ``step < warmup``."""
    if warmup_steps > 0 and step < warmup_steps:
        return step / warmup_steps
    done = min(step, max_steps) / max(1, max_steps)
    return (1.0 - done) ** power


SCHEDULES: dict[str, Callable[..., float]] = {"transformers": warmup_decay, "reference": reference_decay}
