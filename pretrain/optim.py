"""Optimisers and learning-rate schedules for pre-training.

- :func:`parameter_groups`: weight decay on weights only; biases and LayerNorm parameters (and
  embeddings' LayerNorm) get none, as in the reference (``exclude_from_weight_decay``).
- :class:`Lamb`: LAMB (You et al., 2019, "Large Batch Optimization for Deep Learning"), the
  optimiser of BERT's large-batch recipes; bias-corrected Adam moments, a per-tensor trust ratio
  ``‖w‖ / ‖update‖`` (1 where either norm is zero).
- AdamW: ``torch.optim.AdamW`` (decoupled weight decay; the reference's ``AdamWeightDecay`` has no
  bias correction, which only matters in the first few hundred steps of warm-up).
- :func:`warmup_decay`: linear warm-up to the peak, then linear (``power=1``) or polynomial decay
  to zero at ``max_steps`` — the reference's ``polynomial_decay`` with ``power=1.0``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

NO_DECAY = ("bias", "LayerNorm.weight", "LayerNorm.bias", "layer_norm", "norm.weight", "norm.bias")


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: with weight decay, and without it (biases, LayerNorm)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if any(key in name for key in NO_DECAY) else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


class Lamb(torch.optim.Optimizer):
    """LAMB: Adam moments with a layer-wise trust ratio (see the module docstring)."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
    ) -> None:
        if lr <= 0 or eps < 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"invalid LAMB settings: lr={lr}, betas={betas}, eps={eps}")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad.float()
                state = self.state[param]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(param, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(param, dtype=torch.float32)
                state["step"] += 1
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                m_hat = exp_avg / (1 - beta1 ** state["step"])
                v_hat = exp_avg_sq / (1 - beta2 ** state["step"])
                update = m_hat / (v_hat.sqrt() + group["eps"])
                weights = param.float()
                if group["weight_decay"]:
                    update.add_(weights, alpha=group["weight_decay"])
                w_norm, u_norm = weights.norm(), update.norm()
                trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                param.add_((update * trust).to(param.dtype), alpha=-group["lr"])
        return loss


def build_optimizer(
    name: str, model: torch.nn.Module, lr: float, weight_decay: float, betas=(0.9, 0.999), eps=1e-6
) -> torch.optim.Optimizer:
    """``adamw`` or ``lamb`` over :func:`parameter_groups`."""
    groups = parameter_groups(model, weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps)
    raise ValueError(f"unknown optimizer {name!r}: choose adamw or lamb")


def warmup_decay(step: int, warmup_steps: int, max_steps: int, power: float = 1.0) -> float:
    """The learning-rate multiplier at ``step``: linear warm-up, then ``(1 - progress) ** power``."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    remaining = max_steps - step
    span = max(1, max_steps - warmup_steps)
    return max(0.0, remaining / span) ** power if remaining > 0 else 0.0


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    lr: float,
    warmup_steps: int,
    max_steps: int,
    power: float = 1.0,
    start_step: int = 0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """The :func:`warmup_decay` schedule with peak ``lr``, positioned at ``start_step`` (a resumed
    run gets the rate an uninterrupted one would have, under the schedule given now)."""
    for group in optimizer.param_groups:
        group["initial_lr"] = lr
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: warmup_decay(step, warmup_steps, max_steps, power),
        last_epoch=start_step - 1,
    )


def is_finite(value: torch.Tensor | float) -> bool:
    return math.isfinite(float(value))
