"""Batch layouts for the trainer (``pretrain --batching``; docs/pretrain.md): padded, length-bucketed
or packed, without changing which examples a step sees."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

Batch = dict[str, torch.Tensor]

SEQUENCE_KEYS = ("input_ids", "attention_mask", "token_type_ids", "labels")
"""``[batch, width]`` tensors of a padded batch."""
PREDICTION_KEYS = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
"""``[batch, most predictions]`` tensors (weight 0 on padding slots)."""
_PAD_VALUE = {"labels": -100}


def _width(lengths: torch.Tensor) -> int:
    """The padded width for these lengths: the longest, rounded up to a multiple of 8."""
    return max(8, -(-int(lengths.max()) // 8) * 8) if lengths.numel() else 8


def trim(batch: Batch) -> Batch:
    """``batch`` cut to its longest example (rounded up to 8) and its most predictions."""
    width = _width(batch["attention_mask"].sum(1))
    most = int((batch["masked_lm_weights"] > 0).sum(1).max()) if len(batch["masked_lm_weights"]) else 0
    out = dict(batch)
    for key in SEQUENCE_KEYS:
        if key in out:
            out[key] = out[key][:, :width]
    for key in PREDICTION_KEYS:
        if key in out:
            out[key] = out[key][:, :most]
    return out


def _concatenate(batches: list[Batch]) -> Batch:
    """The examples of ``batches`` in one padded batch (padded to the widest of them)."""
    out = {}
    for key in batches[0]:
        parts = [b[key] for b in batches]
        if parts[0].dim() == 2:
            wide = max(p.size(1) for p in parts)
            value = _PAD_VALUE.get(key, 0)
            parts = [torch.nn.functional.pad(p, (0, wide - p.size(1)), value=value) for p in parts]
        out[key] = torch.cat(parts)
    return out


def bucket(batches: list[Batch], rng: np.random.Generator) -> list[Batch]:
    """The examples of ``batches`` regrouped by length into as many batches, in an order from ``rng``."""
    sizes = [len(b["input_ids"]) for b in batches]
    pool = _concatenate(batches)
    lengths = pool["attention_mask"].sum(1).numpy()
    order = np.lexsort((rng.random(len(lengths)), lengths))
    bounds = np.cumsum([0, *sizes])
    groups = [torch.from_numpy(order[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
    return [trim({k: v[groups[i]] for k, v in pool.items()}) for i in rng.permutation(len(groups))]


STATIC_SIZES = 32  # a packed batch's token count: a multiple of 1/32 of its capacity


def static_layout(num_examples: int, max_seqlen: int) -> tuple[int, int]:
    """(token step, padding segments) of the static packed layout of batches of ``num_examples``
    examples up to ``max_seqlen`` tokens: the tail that rounds the tokens up to a multiple of the
    step is cut into the fewest segments of 1 to ``max_seqlen`` tokens that always hold it."""
    if num_examples < 1 or max_seqlen < 2:
        raise ValueError(
            f"a packed layout needs examples >= 1 and max_seqlen >= 2, got {num_examples}, {max_seqlen}"
        )
    step = -(-num_examples * max_seqlen // STATIC_SIZES)
    step = -(-step // 8) * 8
    return step, max(1, -(-(step - 1) // (max_seqlen - 1)))


def pack(batch: Batch, max_seq_length: int | None = None) -> Batch:
    """A padded batch as its real tokens end to end (``[total_tokens]``, ``cu_seqlens`` offsets, the first
    ``num_examples`` segments real), padded to one of a few static sizes for ``torch.compile``."""
    real = batch["attention_mask"].bool()
    lengths = real.sum(1)
    examples = len(lengths)
    seqlen = max(max_seq_length or 0, real.size(1), 2)
    step, num_tail = static_layout(examples, seqlen)
    total = int(lengths.sum())
    tail = -(-(total + num_tail) // step) * step - total
    tail_lengths = [tail // num_tail + (i < tail % num_tail) for i in range(num_tail)]
    out = {k: v for k, v in batch.items() if k not in SEQUENCE_KEYS}
    for key in ("input_ids", "token_type_ids", "labels"):
        if key in batch:
            flat = batch[key][real]
            out[key] = torch.cat([flat, flat.new_full((tail,), _PAD_VALUE.get(key, 0))])
    all_lengths = torch.cat([lengths, torch.tensor(tail_lengths, dtype=lengths.dtype)])
    out["cu_seqlens"] = torch.cat([all_lengths.new_zeros(1), all_lengths.cumsum(0)]).to(torch.int32)
    out["max_seqlen"] = torch.tensor(seqlen)
    out["num_examples"] = torch.tensor(examples)
    return out


def is_packed(batch: Batch) -> bool:
    """Whether ``batch`` is in the packed layout (see :func:`pack`)."""
    return "cu_seqlens" in batch


def _example_lengths(batch: Batch) -> torch.Tensor:
    """A packed batch's example lengths (its padding segments left out)."""
    return batch["cu_seqlens"][: int(batch["num_examples"]) + 1].diff()


def num_real_tokens(batch: Batch) -> int:
    """Non-padding tokens of a batch in any layout (from host tensors: no device sync)."""
    if is_packed(batch):
        return int(batch["cu_seqlens"][int(batch["num_examples"])])
    return int(batch["attention_mask"].sum())


def batch_shape(batch: Batch) -> tuple[int, int]:
    """(examples, width the attention computes at) of a batch in any layout, from host tensors."""
    if is_packed(batch):
        lengths = _example_lengths(batch)
        return len(lengths), int(lengths.max()) if len(lengths) else 0
    return tuple(batch["input_ids"].shape)


def model_inputs(batch: Batch) -> dict:
    """The keyword arguments of ``BertForPreTraining.forward`` for a host batch; ``attention_mask`` is
    None when no example is padded, so attention runs without a mask."""
    inputs = {
        "input_ids": batch["input_ids"],
        "token_type_ids": batch["token_type_ids"],
        "masked_lm_positions": batch.get("masked_lm_positions"),
    }
    if is_packed(batch):
        packed = {"cu_seqlens": batch["cu_seqlens"], "max_seqlen": int(batch["max_seqlen"])}
        return inputs | packed | {"num_examples": int(batch["num_examples"])}
    mask = batch["attention_mask"]
    return inputs | {"attention_mask": None if bool(mask.all()) else mask}


@dataclass(frozen=True)
class BatchLayout:
    """How the trainer lays out a rank's batches; ``bucketed`` regroups each ``window`` of batches in
    an order drawn from ``(seed, epoch, rank, window)``, so a resume reads its window again."""

    mode: str = "padded"
    window: int = 64  # batches whose examples ``bucketed`` regroups together
    seed: int = 0
    rank: int = 0
    max_seq_length: int | None = None  # packed batches' static max_seqlen (None: each batch's width)

    def single(self, batch: Batch) -> Batch:
        """One batch in this layout, without regrouping (evaluation)."""
        if self.mode == "packed":
            return pack(batch, self.max_seq_length)
        return trim(batch) if self.mode == "bucketed" else batch

    def epoch_batches(
        self, read: Callable[[int], Iterable[Batch]], start: int, epoch: int
    ) -> Iterator[Batch]:
        """This rank's batches of ``epoch`` from batch ``start`` on; ``read(first)`` must yield
        the reader's batches of the epoch from batch ``first`` (a resume point) to the end."""
        if self.mode != "bucketed":
            yield from (self.single(b) for b in read(start))
            return
        first = start // self.window * self.window
        source, window, skip = iter(read(first)), first // self.window, start - first
        while chunk := list(itertools.islice(source, self.window)):
            rng = np.random.default_rng([self.seed, epoch, self.rank, window, 2])
            yield from bucket(chunk, rng)[skip:]
            window, skip = window + 1, 0
