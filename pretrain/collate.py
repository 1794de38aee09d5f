"""Examples → padded model tensors, with optional dynamic re-masking by :mod:`wordpiece.masking`'s rule."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from wordpiece.masking import MaskingConfig, MaskingVocab, mask_batch
from wordpiece.tokenizer import replacement_ids

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class DynamicMasking:
    """Masked-LM settings for re-masking in the collate; build it with :meth:`from_vocab`."""

    config: MaskingConfig
    vocab: MaskingVocab = field(repr=False)
    by_content: bool = False
    """Key each example's masking by its own tokens (the same masks wherever and whenever it is
    read) instead of by draws from the batch's generator."""

    @classmethod
    def from_vocab(cls, vocab: Sequence[str], config=None, *, by_content=False) -> DynamicMasking:
        """Settings for a vocabulary (tokens in id order), random tokens from ``pipelines examples``' pool."""
        pool = replacement_ids(vocab)
        return cls(config or MaskingConfig(), MaskingVocab.build(list(vocab), pool), by_content)


def validation_masking(params: dict, vocab: Sequence[str]) -> DynamicMasking | None:
    """How validation shards are masked: as written (None) when masked; unmasked shards by their
    manifest's settings, keyed by each example's tokens: the same masks in every evaluation."""
    if params.get("masking", True) is not False:
        return None
    return DynamicMasking.from_vocab(vocab, masking_from_params(params), by_content=True)


def content_keys(input_ids: np.ndarray, real: np.ndarray) -> np.ndarray:
    """A 64-bit key per row from its real tokens (BLAKE2b), for :class:`DynamicMasking` ``by_content``."""
    keys = np.empty(len(input_ids), np.uint64)
    for row, (ids, mask) in enumerate(zip(input_ids, real, strict=True)):
        digest = hashlib.blake2b(ids[mask].tobytes(), digest_size=8, person=b"bert-validate")
        keys[row] = int.from_bytes(digest.digest(), "little")
    return keys


def masking_from_params(params: dict, **overrides) -> MaskingConfig:
    """The masking settings in the shards' manifest, with the non-``None`` ``overrides`` applied."""
    recorded = params.get("masking_settings")
    recorded = recorded if isinstance(recorded, dict) else {}
    known = {f.name for f in fields(MaskingConfig)}
    settings = {k: v for k, v in recorded.items() if k in known}
    settings.update({k: v for k, v in overrides.items() if v is not None})
    return MaskingConfig(**settings)


def _lists(column: pa.ChunkedArray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A list column as (slot mask [size, max_len], flat values)."""
    array = column.combine_chunks()
    counts = pc.list_value_length(array).to_numpy(zero_copy_only=False).astype(np.int64)
    width = int(counts.max()) if size else 0
    slots = np.arange(width)[None, :] < counts[:, None]
    return slots, array.flatten().to_numpy(zero_copy_only=False).astype(np.int64)


def _remask(
    input_ids: np.ndarray, real: np.ndarray, lengths: np.ndarray, masking: DynamicMasking, rng
) -> tuple:
    """Mask ``input_ids`` afresh (in place); (slots, positions, ids) padded to a row's most predictions."""
    size = len(lengths)
    if masking.by_content:
        keys = content_keys(input_ids, real)
    else:
        keys = rng.integers(0, np.iinfo(np.int64).max, size=size, dtype=np.int64).astype(np.uint64)
    starts = np.cumsum(lengths) - lengths
    masked = mask_batch(input_ids[real], starts, lengths, keys, masking.config, masking.vocab)
    input_ids[real] = masked.input_ids
    most = int(masked.num_predictions.max()) if size else 0
    slots = np.arange(most)[None, :] < masked.num_predictions[:, None]
    positions = np.zeros(slots.shape, np.int64)
    ids = np.zeros(slots.shape, np.int64)
    positions[slots] = masked.positions
    ids[slots] = masked.labels
    return slots, positions, ids


def collate(
    table: pa.Table, masking: DynamicMasking | None = None, rng: np.random.Generator | None = None
) -> Batch:
    """Pad a table of examples into the model's tensors (weight 0 on padding slots, labels -100 where not
    masked); re-mask when ``masking`` is given (with ``rng`` unless ``by_content``)."""
    size = len(table)
    lengths = table.column("num_tokens").to_numpy().astype(np.int64)
    width = max(8, -(-int(lengths.max()) // 8) * 8) if size else 8
    cols = np.arange(width)[None, :]
    real = cols < lengths[:, None]
    input_ids = np.zeros((size, width), np.int64)
    input_ids[real] = table.column("input_ids").combine_chunks().flatten().to_numpy().astype(np.int64)
    type_ids = real & (cols >= table.column("num_tokens_a").to_numpy().astype(np.int64)[:, None])
    slots, flat_positions = _lists(table.column("masked_lm_positions"), size)
    _, flat_ids = _lists(table.column("masked_lm_ids"), size)
    mlm_pos = np.zeros(slots.shape, np.int64)
    mlm_ids = np.zeros(slots.shape, np.int64)
    mlm_pos[slots] = flat_positions
    mlm_ids[slots] = flat_ids
    if masking is not None:
        if rng is None and not masking.by_content:
            raise ValueError("dynamic masking needs a seeded generator (rng)")
        input_ids[np.nonzero(slots)[0], mlm_pos[slots]] = mlm_ids[slots]  # undo the written masks
        slots, mlm_pos, mlm_ids = _remask(input_ids, real, lengths, masking, rng)
    labels = np.full((size, width), -100, np.int64)
    labels[np.nonzero(slots)[0], mlm_pos[slots]] = mlm_ids[slots]
    return {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(real.astype(np.int64)),
        "token_type_ids": torch.from_numpy(type_ids.astype(np.int64)),
        "masked_lm_positions": torch.from_numpy(mlm_pos),
        "masked_lm_ids": torch.from_numpy(mlm_ids),
        "masked_lm_weights": torch.from_numpy(slots.astype(np.float32)),
        "labels": torch.from_numpy(labels),
        "next_sentence_labels": torch.from_numpy(
            table.column("next_sentence_labels").to_numpy().astype(np.int64)
        ),
    }
