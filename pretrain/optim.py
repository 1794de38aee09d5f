"""Optimisers (AdamW, fused on CUDA; LAMB), the learning-rate scheduler and the divergence rule."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

import torch
import torch.distributed as dist

from pretrain.schedules import SCHEDULES
from schemas.commands import CommandError

NO_DECAY = ("bias", "LayerNorm.weight", "LayerNorm.bias", "layer_norm", "norm.weight", "norm.bias")


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: with weight decay, and without it or LAMB's trust ratio (biases, LayerNorm)."""
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
    """LAMB (You et al., 2019): bias-corrected Adam moments times a per-tensor trust ratio
    ``‖w‖ / ‖update‖``, foreach ops. Like torch's fused optimizers it takes ``found_inf`` and
    ``grad_scale`` (0-d tensors): a step with ``found_inf`` set changes nothing."""

    def __init__(self, params: Iterable, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self._step_supports_amp_scaling = True  # GradScaler hands over found_inf and grad_scale

    @torch.no_grad()
    def step(self, closure=None):
        """One LAMB update of every group (``trust_ratio: False`` groups: plain Adam, no decay)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grad_scale, found_inf = getattr(self, "grad_scale", None), getattr(self, "found_inf", None)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._update_group(group, params, grad_scale, found_inf)
        return loss

    def _update_group(self, group: dict, params: list[torch.Tensor], grad_scale, found_inf) -> None:
        beta1, beta2 = group["betas"]
        adapt = group.get("trust_ratio", True)
        grads = [p.grad.float() for p in params]  # fp32 gradients: the tensors themselves
        if grad_scale is not None:
            torch._foreach_mul_(grads, grad_scale.double().reciprocal().float())
        keep = None if found_inf is None else found_inf == 0
        if keep is not None:  # skipped: zero gradients and moments decayed by 1, so nothing moves
            _zero_unless(grads, keep)
            beta1_now, beta2_now = torch.where(keep, beta1, 1.0), torch.where(keep, beta2, 1.0)
        for param in params:
            state = self.state[param]
            if not state:
                state["exp_avg"] = torch.zeros_like(param, dtype=torch.float32)
                state["exp_avg_sq"] = torch.zeros_like(param, dtype=torch.float32)
        device = params[0].device
        if "step" not in group:
            group["step"] = torch.zeros((), dtype=torch.float64, device=device)
        elif group["step"].device != device:  # loaded from a checkpoint, on the host
            group["step"] = group["step"].to(device, torch.float64)
        step = group["step"]
        # the bias corrections of the count this update is made at (float64: a Python float's precision)
        count = step + 1
        correction1, correction2 = (1 - beta1**count).float(), (1 - beta2**count).float()
        step.add_(1 if keep is None else keep.double())
        states = [self.state[p] for p in params]
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        torch._foreach_mul_(exp_avgs, beta1 if keep is None else beta1_now)
        torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2 if keep is None else beta2_now)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        m_hat = torch._foreach_div(exp_avgs, correction1)
        denom = torch._foreach_div(exp_avg_sqs, correction2)
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
            if keep is not None:
                trust = trust * keep
            torch._foreach_mul_(updates, list(trust.unbind()))
        elif keep is not None:
            torch._foreach_mul_(updates, keep.float())
        if all(p.dtype == torch.float32 for p in params):
            torch._foreach_add_(params, updates, alpha=-group["lr"])
        else:
            for param, update in zip(params, updates, strict=True):
                param.add_(update.to(param.dtype), alpha=-group["lr"])


_INTEGER_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _zero_unless(tensors: list[torch.Tensor], keep: torch.Tensor) -> None:
    """Set every element of ``tensors`` to zero where the 0-d bool ``keep`` is False, leave them
    bitwise as they are where it is True: their bit patterns are multiplied by 0 or 1 as integers,
    where, unlike in floating point, ``0 * NaN`` and ``0 * inf`` are 0."""
    by_type: dict[torch.dtype, list[torch.Tensor]] = {}
    for tensor in tensors:
        integer = _INTEGER_OF_SIZE[tensor.element_size()]
        by_type.setdefault(integer, []).append(tensor.view(integer))
    for integer, views in by_type.items():
        torch._foreach_mul_(views, keep.to(integer))


def step_unless(optimizer: torch.optim.Optimizer, found_inf: torch.Tensor) -> None:
    """``optimizer.step()`` unless ``found_inf`` (0-d, nonzero to skip): decided on the device by
    optimizers that take the flag (``_step_supports_amp_scaling``), on the host by the others."""
    if getattr(optimizer, "_step_supports_amp_scaling", False):
        optimizer.grad_scale, optimizer.found_inf = None, found_inf
        try:
            optimizer.step()
        finally:
            del optimizer.grad_scale, optimizer.found_inf
    elif not found_inf.item():
        optimizer.step()


MAX_FP16_SKIPS = 16
"""Consecutive fp16 steps with overflowing gradients that mean divergence (the scale fell 65,536-fold)."""


class Diverged(CommandError):
    """Training diverged: the loss or the gradients are no longer finite numbers (exit 1)."""


class Health:
    """The divergence rule of pre-training and fine-tuning, watched on the device without a host sync:
    the first step whose loss or gradients are not finite (fp16: the last of :data:`MAX_FP16_SKIPS`
    such steps in a row, as the grad scaler skips single overflowing steps by design). :meth:`check`
    reads it: ``pretrain`` at metrics records and before checkpoints, ``finetune`` after each step."""

    def __init__(self, device: torch.device, precision: str) -> None:
        self.fp16, self.precision = precision == "fp16", precision
        self.first_bad = torch.zeros((), dtype=torch.float64, device=device)
        self.streak = torch.zeros((), dtype=torch.float32, device=device)

    def update(self, step: int, loss: torch.Tensor, skipped: torch.Tensor) -> None:
        """Watch step ``step``: its ``loss`` (any sum that holds it) and ``skipped`` (0-d, 1: not finite)."""
        bad = ~torch.isfinite(loss)
        if self.fp16:
            self.streak = (self.streak + 1) * skipped
            bad = bad | (self.streak >= MAX_FP16_SKIPS)
        else:
            bad = bad | (skipped > 0)
        self.first_bad = torch.where((self.first_bad == 0) & bad, step, self.first_bad)

    def check(self, lr: float, hint: str = "") -> None:
        """Raise :class:`Diverged` naming the first bad step and its likely cause; ``hint`` ends the line."""
        first = self.first_bad
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            first = torch.where(first == 0, math.inf, first)  # the earliest bad step of any rank
            dist.all_reduce(first, op=dist.ReduceOp.MIN)
            first = torch.where(first.isinf(), 0.0, first)
        step = int(first.item())
        if step:
            cause = f"the learning rate (--lr {lr:g}) is likely too high for this model and batch"
            if self.fp16:
                cause += ", or fp16's range too narrow (try --precision bf16)"
            raise Diverged(
                f"training diverged at step {step}: the loss or the gradients are not finite (NaN or "
                f"infinity); {cause}{'; ' + hint if hint else ''}"
            )


FUSED_DEVICES = ("cuda",)  # AdamW's fused kernel; foreach ops elsewhere


def build_optimizer(
    name: str, model: torch.nn.Module, lr: float, weight_decay: float, betas=(0.9, 0.999), eps=1e-6
) -> torch.optim.Optimizer:
    """``adamw`` (fused on :data:`FUSED_DEVICES`) or ``lamb`` over :func:`parameter_groups`."""
    groups = parameter_groups(model, weight_decay)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps)
    device = next(model.parameters()).device.type
    fused = {"fused": True} if device in FUSED_DEVICES else {"foreach": True}
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **fused)


def build_scheduler(
    optimizer, lr: float, warmup_steps: int, max_steps: int, power=1.0, start_step=0, schedule="transformers"
):
    """The ``schedule`` with peak ``lr`` at ``start_step``: the rate an uninterrupted run would have."""
    multiplier = SCHEDULES[schedule]
    for group in optimizer.param_groups:
        group["initial_lr"] = lr
    rate = functools.partial(multiplier, warmup_steps=warmup_steps, max_steps=max_steps, power=power)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, rate, last_epoch=start_step - 1)
