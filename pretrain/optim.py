"""Optimisers and learning-rate schedules for pre-training.

- :func:`parameter_groups`: weight decay on weights only; biases and LayerNorm parameters (and
  embeddings' LayerNorm) get none, as in the reference (``exclude_from_weight_decay``).
- :class:`Lamb`: LAMB (You et al., 2019, "Large Batch Optimization for Deep Learning"), the
  optimiser of BERT's large-batch recipes; bias-corrected Adam moments, a per-tensor trust ratio
  ``‖w‖ / ‖update‖`` (1 where either norm is zero). Biases and LayerNorm parameters (the group
  :func:`parameter_groups` marks ``trust_ratio: False``) get neither weight decay nor the trust
  ratio, as ``exclude_from_layer_adaptation`` defaults to ``exclude_from_weight_decay`` in the
  reference LAMB. The step runs on whole groups with ``torch._foreach_*`` ops, not a Python loop.
- AdamW: ``torch.optim.AdamW`` (decoupled weight decay; the reference's ``AdamWeightDecay`` has no
  bias correction, which only matters in the first few hundred steps of warm-up).
- Two schedules (``--lr-schedule``):

  - ``transformers`` (:func:`warmup_decay`, the default): linear warm-up to the peak over
    ``warmup_steps`` (``(step + 1) / warmup``), then ``(1 - progress) ** power`` from the end of
    warm-up to zero at ``max_steps`` — transformers' ``get_polynomial_decay_schedule_with_warmup``.
  - ``reference`` (:func:`reference_decay`): google-research/bert ``optimization.py``:
    ``tf.train.polynomial_decay(lr, step, max_steps, end_learning_rate=0, power)`` counted from step
    0 (so decay already runs during warm-up), replaced while ``step < warmup`` by the linear
    warm-up ``lr * step / warmup`` (0 at step 0, as in the reference).
"""

from __future__ import annotations

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
        {"params": decay, "weight_decay": weight_decay, "trust_ratio": True},
        {"params": no_decay, "weight_decay": 0.0, "trust_ratio": False},
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
        """One LAMB update of every group (``trust_ratio: False`` groups: plain Adam, no decay)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._update_group(group, params)
        return loss

    def _update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        adapt = group.get("trust_ratio", True)
        grads = [p.grad.float() for p in params]
        for param in params:
            state = self.state[param]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(param, dtype=torch.float32)
                state["exp_avg_sq"] = torch.zeros_like(param, dtype=torch.float32)
            state["step"] += 1
        states = [self.state[p] for p in params]
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        m_hat = torch._foreach_div(exp_avgs, [1 - beta1 ** s["step"] for s in states])
        denom = torch._foreach_div(exp_avg_sqs, [1 - beta2 ** s["step"] for s in states])
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, group["eps"])
        updates = torch._foreach_div(m_hat, denom)
        weights = [p.float() for p in params]
        decay = group["weight_decay"] if adapt else 0.0
        if decay:
            torch._foreach_add_(updates, weights, alpha=decay)
        if adapt:
            w_norm = torch.stack(torch._foreach_norm(weights))
            u_norm = torch.stack(torch._foreach_norm(updates))
            trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
            torch._foreach_mul_(updates, list(trust.unbind()))
        if all(p.dtype == torch.float32 for p in params):
            torch._foreach_add_(params, updates, alpha=-group["lr"])
        else:
            for param, update in zip(params, updates, strict=True):
                param.add_(update.to(param.dtype), alpha=-group["lr"])


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


def reference_decay(step: int, warmup_steps: int, max_steps: int, power: float = 1.0) -> float:
    """The multiplier of google-research/bert ``optimization.create_optimizer``: polynomial decay
    to 0 at ``max_steps`` counted from step 0, and ``step / warmup`` while ``step < warmup``."""
    if warmup_steps > 0 and step < warmup_steps:
        return step / warmup_steps
    done = min(step, max_steps) / max(1, max_steps)
    return (1.0 - done) ** power


SCHEDULES = {"transformers": warmup_decay, "reference": reference_decay}


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    lr: float,
    warmup_steps: int,
    max_steps: int,
    power: float = 1.0,
    start_step: int = 0,
    schedule: str = "transformers",
) -> torch.optim.lr_scheduler.LambdaLR:
    """The ``schedule`` (a key of :data:`SCHEDULES`) with peak ``lr``, positioned at ``start_step``
    (a resumed run gets the rate an uninterrupted one would have, under the schedule given now)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}: choose {' or '.join(SCHEDULES)}")
    multiplier = SCHEDULES[schedule]
    for group in optimizer.param_groups:
        group["initial_lr"] = lr
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: multiplier(step, warmup_steps, max_steps, power),
        last_epoch=start_step - 1,
    )
