"""Examples → padded model tensors, with optional dynamic re-masking.

:func:`collate` turns a table of examples (the ``schemas/examples`` columns) into int64 tensors
padded to the batch's longest sequence rounded up to a multiple of 8. With a
:class:`DynamicMasking`, it first restores the original tokens (shards written by ``pipelines
examples`` are masked unless written with ``--no-masking``) and then masks afresh, as RoBERTa
does: a new choice each epoch instead of the ``dupe_factor`` fixed ones. The choice follows the
reference generator's rule — ``min(max_predictions, max(1, round(num_tokens × prob)))`` positions
out of the tokens other than ``[CLS]``/``[SEP]``, 80% ``[MASK]``, 10% a random token, 10%
unchanged — with draws from the generator the caller passes (seeded by batch identity). Whole-word
masking is not offered here; write whole-word masks with ``pipelines examples --whole-word-masking``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class DynamicMasking:
    """Masked-LM settings for re-masking in the collate; build it with :meth:`from_vocab`."""

    mask_id: int
    cls_id: int
    sep_id: int
    replacement_ids: np.ndarray = field(repr=False)
    """Ids the 10% "random token" is drawn from (by default the real tokens only)."""
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    mask_share: float = 0.8

    def __post_init__(self) -> None:
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise ValueError(f"masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}")
        if self.max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq must be >= 1, got {self.max_predictions_per_seq}")
        if len(self.replacement_ids) == 0:
            raise ValueError("replacement_ids is empty")

    @classmethod
    def from_vocab(
        cls,
        vocab: Sequence[str],
        *,
        masked_lm_prob: float = 0.15,
        max_predictions_per_seq: int = 20,
        whole_vocab: bool = False,
    ) -> DynamicMasking:
        """Settings for a vocabulary (tokens in id order, e.g. ``WordPieceTokenizer.vocab``)."""
        from wordpiece.tokenizer import WordPieceTokenizer

        tokenizer = WordPieceTokenizer(vocab, cased=True)
        ids = tokenizer.special_ids()
        return cls(
            mask_id=ids["[MASK]"],
            cls_id=ids["[CLS]"],
            sep_id=ids["[SEP]"],
            replacement_ids=np.asarray(tokenizer.replacement_ids(whole_vocab), np.int64),
            masked_lm_prob=masked_lm_prob,
            max_predictions_per_seq=max_predictions_per_seq,
        )


def _lists(column: pa.ChunkedArray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A list column as (slot mask [size, max_len], flat values)."""
    array = column.combine_chunks()
    counts = pc.list_value_length(array).to_numpy(zero_copy_only=False).astype(np.int64)
    width = int(counts.max()) if size else 0
    slots = np.arange(width)[None, :] < counts[:, None]
    return slots, array.flatten().to_numpy(zero_copy_only=False).astype(np.int64)


def _remask(
    input_ids: np.ndarray,
    real: np.ndarray,
    lengths: np.ndarray,
    masking: DynamicMasking,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Choose and apply new masks to original ``input_ids`` (in place); return (slots, positions, ids)."""
    size, width = input_ids.shape
    eligible = real & (input_ids != masking.cls_id) & (input_ids != masking.sep_id)
    wanted = np.rint(lengths * masking.masked_lm_prob).astype(np.int64)
    counts = np.minimum(np.minimum(masking.max_predictions_per_seq, np.maximum(1, wanted)), eligible.sum(1))
    scores = rng.random((size, width))
    scores[~eligible] = 2.0  # never chosen before an eligible position
    most = int(counts.max()) if size else 0
    # the `most` lowest scores of each row (argpartition), then in score order (a small sort), so
    # that a row's first `count` columns are its `count` lowest: a uniform random choice
    chosen_cols = (
        np.argpartition(scores, most - 1, axis=1)[:, :most] if most else np.zeros((size, 0), np.int64)
    )
    by_score = np.argsort(np.take_along_axis(scores, chosen_cols, axis=1), axis=1)
    chosen_cols = np.take_along_axis(chosen_cols, by_score, axis=1)
    slots = np.arange(chosen_cols.shape[1])[None, :] < counts[:, None]
    positions = np.where(slots, chosen_cols, width)  # sort real choices first, by position
    positions.sort(axis=1)
    positions = np.where(slots, positions, 0)
    rows = np.nonzero(slots)[0]
    cols = positions[slots]
    original = input_ids[rows, cols]
    draw = rng.random(len(rows))
    replaced = original.copy()
    keep_share = (1.0 - masking.mask_share) / 2.0
    replaced[draw < masking.mask_share] = masking.mask_id
    random_slot = draw >= masking.mask_share + keep_share
    replaced[random_slot] = rng.choice(masking.replacement_ids, size=int(random_slot.sum()))
    input_ids[rows, cols] = replaced
    ids = np.zeros(slots.shape, np.int64)
    ids[slots] = original
    return slots, positions, ids


def collate(
    table: pa.Table, masking: DynamicMasking | None = None, rng: np.random.Generator | None = None
) -> Batch:
    """Pad a table of examples into model tensors; re-mask when ``masking`` is given (needs ``rng``).

    Keys: ``input_ids``, ``attention_mask``, ``token_type_ids`` ([batch, width]);
    ``masked_lm_positions``, ``masked_lm_ids``, ``masked_lm_weights`` ([batch, most masks in the
    batch], weight 0 on padding slots); ``labels`` ([batch, width], -100 where not masked, the
    transformers convention); ``next_sentence_labels`` ([batch]; 1 = random next).
    """
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
        if rng is None:
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
