"""The fine-tuning loop: :func:`fit` trains all of a task model on its features, :func:`predict`
runs it over features in batches; the task model's ``forward`` returns a
:class:`~finetune.heads.TaskOutput`."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from finetune.config import FitConfig
from finetune.inputs import check_examples
from finetune.sequences import pad_batch
from pretrain.optim import Health, build_scheduler, parameter_groups
from pretrain.progress import Progress
from pretrain.runtime import autocast, resolve_device, resolve_precision

logger = logging.getLogger(__name__)

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")  # what predict passes to a model


def epoch_order(num_features: int, seed: int, epoch: int) -> list[int]:
    """The shuffled order of epoch ``epoch``: a function of (seed, epoch) only."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_features, generator=generator).tolist()


@dataclass
class TrainResult:
    """What :func:`fit` reports: steps taken, the loss per epoch, throughput."""

    steps: int
    epoch_losses: list[float]
    train_s: float
    examples_per_s: float
    precision: str
    device: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def fit(
    model: nn.Module,
    features: Sequence[dict[str, Any]],
    config: FitConfig,
    *,
    collate_fn: Callable[[Sequence[dict[str, Any]]], dict[str, torch.Tensor]] = pad_batch,
) -> TrainResult:
    """Fine-tune all of ``model`` on ``features`` for ``config.epochs`` epochs, AMP on GPU, the order from
    :func:`epoch_order` and dropout from ``config.seed`` (the caller's global RNG is left alone). Each
    step: forward, loss, backward, unscale, clip at ``max_grad_norm`` (0: none), the AdamW update, the
    divergence rule (:class:`~pretrain.optim.Health`, read at once), the schedule (linear warm-up,
    then decay to zero)."""
    check_examples(features, "the training data")
    device = resolve_device(config.device)
    precision = resolve_precision(config.precision, device)
    model.to(device)
    max_steps = max(1, math.ceil(math.ceil(len(features) / config.batch_size) * config.epochs))
    groups = parameter_groups(model, config.weight_decay)  # no decay on biases and LayerNorm
    optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.999), eps=1e-6)
    scheduler = build_scheduler(optimizer, config.lr, int(max_steps * config.warmup_proportion), max_steps)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    health = Health(device, precision)
    devices = [device.index or 0] if device.type == "cuda" else []
    result = TrainResult(0, [], 0.0, 0.0, precision, str(device))
    start, seen = time.perf_counter(), 0
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(config.seed)
        bar = Progress(max_steps, desc="fine-tune", enabled=config.progress)
        epoch = 0
        while result.steps < max_steps:
            model.train()
            order = epoch_order(len(features), config.seed, epoch)
            total, count = 0.0, 0
            for first in range(0, len(order), config.batch_size)[: max_steps - result.steps]:
                batch = collate_fn([features[i] for i in order[first : first + config.batch_size]])
                batch = _to_device(batch, device)
                with autocast(device, precision):
                    loss = model(**batch).loss
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm or math.inf)
                scaler.step(optimizer)  # skipped when the fp16 gradients overflow
                scaler.update()
                result.steps += 1
                health.update(result.steps, loss.detach(), (~torch.isfinite(norm)).float())
                health.check(config.lr, "no model was saved")
                scheduler.step()
                seen += len(batch["input_ids"])
                total, count = total + float(loss.detach()), count + 1
                bar.update(1)
                bar.set_postfix(loss=f"{total / count:.4f}", epoch=epoch + 1)
            result.epoch_losses.append(total / max(count, 1))
            logger.info("epoch %d: mean loss %.4f over %d steps", epoch + 1, result.epoch_losses[-1], count)
            epoch += 1
        bar.close()
    result.train_s = time.perf_counter() - start
    result.examples_per_s = seen / result.train_s if result.train_s > 0 else 0.0
    return result


@torch.no_grad()
def predict(
    model: nn.Module,
    features: Sequence[dict[str, Any]],
    config: FitConfig,
    *,
    collate_fn: Callable[[Sequence[dict[str, Any]]], dict[str, torch.Tensor]] = pad_batch,
    inputs: Sequence[str] = MODEL_INPUTS,
) -> list[Any]:
    """Run ``model`` in eval mode over ``features`` in length-sorted batches of
    ``config.eval_batch_size``; return one output per feature, in order: its row of
    ``TaskOutput.logits`` as a float32 CPU tensor (a tuple of rows for tuple logits), still padded
    to its batch's longest sequence. Only ``inputs`` reach the model."""
    device = resolve_device(config.device)
    precision = resolve_precision(config.precision, device)
    model.to(device)
    model.eval()
    order = sorted(range(len(features)), key=lambda i: _sequence_length(features[i]))
    outputs: list[Any] = [None] * len(features)
    batches = range(0, len(order), config.eval_batch_size)
    bar = Progress(len(batches), desc="predict", unit="batch", enabled=config.progress)
    for first in batches:
        chosen = order[first : first + config.eval_batch_size]
        batch = collate_fn([features[i] for i in chosen])
        with autocast(device, precision):
            logits = model(**_to_device({k: v for k, v in batch.items() if k in inputs}, device)).logits
        if isinstance(logits, tuple):
            rows = list(zip(*(t.float().cpu() for t in logits), strict=True))
        else:
            rows = list(logits.float().cpu())
        for index, row in zip(chosen, rows, strict=True):
            outputs[index] = row
        bar.update(1)
    bar.close()
    return outputs


def _sequence_length(feature: dict[str, Any]) -> int:
    ids = feature["input_ids"]
    return max(len(c) for c in ids) if ids and isinstance(ids[0], (list, tuple)) else len(ids)


def predict_classes(model: nn.Module, features: Sequence[dict[str, Any]], config: FitConfig) -> torch.Tensor:
    """:func:`predict`'s rows stacked (fixed-size logits: classification, choices, regression)."""
    outputs = predict(model, features, config)
    return torch.stack(outputs) if outputs else torch.empty(0)
