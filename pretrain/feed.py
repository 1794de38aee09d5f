"""Micro batches moved to the device one ahead of the step (pinned, non-blocking, on a side stream on
CUDA); what the trainer counts is read from the host copy, so the step never syncs for it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from pretrain.batching import Batch, batch_shape, model_inputs, num_real_tokens

TARGET_KEYS = ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")  # the loss's other arguments


@dataclass
class MicroBatch:
    """One micro batch as the step uses it."""

    inputs: dict[str, Any]  # the model's keyword arguments, on the device
    targets: dict[str, torch.Tensor]  # TARGET_KEYS, on the device
    host: Batch  # the batch as it came
    num_tokens: int  # real (non-padding) tokens
    shape: tuple[int, int]  # (examples, the width attention computes at)
    num_masked: float  # the sum of masked_lm_weights: what the MLM loss averages over
    num_pairs: int  # sentence pairs the NSP loss averages over
    position: Any  # what the source paired with the batch (the reader's position after it)

    def device_tensors(self) -> list[torch.Tensor]:
        """The tensors this batch holds on the device."""
        values = [*self.inputs.values(), *self.targets.values()]
        return [v for v in values if isinstance(v, torch.Tensor)]


class DeviceFeed:
    """An iterator of :class:`MicroBatch` over ``source``, an iterator of ``(host batch, position)``."""

    def __init__(self, source: Iterator[tuple[Batch, Any]], device: torch.device) -> None:
        self.source, self.device = source, device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._ahead: MicroBatch | None = None

    def __iter__(self) -> DeviceFeed:
        return self

    def __next__(self) -> MicroBatch:
        if self.stream is None:
            return self._prepare(next(self.source))
        current = self._ahead if self._ahead is not None else self._prepare(next(self.source))
        compute = torch.cuda.current_stream(self.device)
        compute.wait_stream(self.stream)
        for tensor in current.device_tensors():
            tensor.record_stream(compute)
        try:
            self._ahead = self._prepare(next(self.source))
        except StopIteration:
            self._ahead = None  # the source ended: the next call raises StopIteration
        return current

    def close(self) -> None:
        """Close the source (a generator's ``finally`` blocks run now)."""
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def _prepare(self, item: tuple[Batch, Any]) -> MicroBatch:
        """The host facts of a batch, and its tensors on their way to the device."""
        batch, position = item
        inputs, targets = model_inputs(batch), {k: batch[k] for k in TARGET_KEYS}
        context = torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()
        with context:
            inputs = {k: self._copy(v) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
            targets = {k: self._copy(v) for k, v in targets.items()}
        return MicroBatch(
            inputs=inputs,
            targets=targets,
            host=batch,
            num_tokens=num_real_tokens(batch),
            shape=batch_shape(batch),
            num_masked=float(batch["masked_lm_weights"].sum()),
            num_pairs=batch["next_sentence_labels"].numel(),
            position=position,
        )

    def _copy(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` on the device: a non-blocking copy from pinned memory on CUDA, itself on CPU."""
        if self.stream is None:
            return tensor
        if not tensor.is_pinned() or not tensor.is_contiguous():
            tensor = tensor.contiguous().pin_memory()
        return tensor.to(self.device, non_blocking=True)
