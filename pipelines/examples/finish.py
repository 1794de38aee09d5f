"""Finishing examples as whole arrays: truncate, lay out ``[CLS] A [SEP] B [SEP]``, mask, and make
Arrow tables; each pair's randomness comes from its key, so batching changes nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from pipelines.examples.pairs import truncate_pairs
from pipelines.stats import bucket_label
from schemas import RecordFormat
from wordpiece.chunk_cache import ragged_arange, ragged_gather
from wordpiece.masking import MaskingConfig, MaskingVocab, mask_batch
from wordpiece.tokenizer import replacement_ids

PAIR_COLUMN = "_pair"
"""The pair index, kept beside the schema's columns until the shard is sorted."""


@dataclass(frozen=True)
class ExampleVocab:
    """The ids and tables that finishing examples needs, built once per worker."""

    cls_id: int
    sep_id: int
    unk_id: int
    masking: MaskingVocab

    @classmethod
    def build(cls, tokens: Sequence[str], random_token_from_whole_vocab: bool) -> ExampleVocab:
        """Tables for the vocabulary ``tokens`` (in id order)."""
        return cls(
            cls_id=tokens.index("[CLS]"),
            sep_id=tokens.index("[SEP]"),
            unk_id=tokens.index("[UNK]"),
            masking=MaskingVocab.build(tokens, replacement_ids(tokens, random_token_from_whole_vocab)),
        )


class PairBatch(NamedTuple):
    """Pairs before truncation: A is ``pool[a_start:a_start + a_length]``, B likewise."""

    pool: np.ndarray
    a_start: np.ndarray
    a_length: np.ndarray
    b_start: np.ndarray
    b_length: np.ndarray
    keys: np.ndarray
    """uint64 per pair: seeds truncation and masking."""
    random_next: np.ndarray
    """bool per pair: ``next_sentence_labels``."""
    doc_ids: np.ndarray
    """object array of str: the document A came from."""
    dupe_index: np.ndarray
    pair_index: np.ndarray

    def take(self, rows: np.ndarray | slice) -> PairBatch:
        """The pairs at ``rows`` (the pool is shared)."""
        return PairBatch(self.pool, *(column[rows] for column in self[1:]))


class ExampleColumns(NamedTuple):
    """Finished examples as flat arrays; example ``i`` has ``num_tokens[i]`` of ``input_ids``."""

    input_ids: np.ndarray
    num_tokens: np.ndarray
    positions: np.ndarray
    labels: np.ndarray
    num_predictions: np.ndarray
    num_tokens_a: np.ndarray
    next_sentence_labels: np.ndarray
    doc_ids: np.ndarray
    dupe_index: np.ndarray
    pair_index: np.ndarray

    def __len__(self) -> int:  # the number of examples, not of fields
        return len(self.num_tokens)


def mask_and_count(
    ids: np.ndarray,
    lengths: np.ndarray,
    keys: np.ndarray,
    masking: MaskingConfig | None,
    vocab: ExampleVocab,
    tally: Counter,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mask the sequences laid back to back in ``ids`` (unless ``masking`` is None) and add their
    tokens, lengths and masks to ``tally``; ``(input_ids, positions, labels, num_predictions)``."""
    tally.update(tokens=int(lengths.sum()), unk_tokens=int(np.count_nonzero(ids == vocab.unk_id)))
    values, counts = np.unique(lengths, return_counts=True)
    for value, count in zip(values.tolist(), counts.tolist(), strict=True):
        tally[f"hist/{bucket_label(value)}"] += count
    if masking is None:
        return ids, ids[:0], ids[:0], np.zeros(len(lengths), np.int64)
    masked = mask_batch(ids, np.cumsum(lengths) - lengths, lengths, keys, masking, vocab.masking)
    tally.update(
        predictions=len(masked.positions),
        masked_to_mask=int(masked.num_to_mask.sum()),
        masked_unchanged=int(masked.num_unchanged.sum()),
    )
    return masked.input_ids, masked.positions, masked.labels, masked.num_predictions


def finish_pairs(
    batch: PairBatch, max_num_tokens: int, masking: MaskingConfig | None, vocab: ExampleVocab
) -> tuple[ExampleColumns, Counter]:
    """Truncate, lay out and (unless ``masking`` is None) mask a batch of pairs; the examples and tally."""
    a_front, a_back, b_front, b_back = truncate_pairs(
        batch.a_length, batch.b_length, batch.keys, max_num_tokens
    )
    a_kept = batch.a_length - a_front - a_back
    b_kept = batch.b_length - b_front - b_back
    lengths = a_kept + b_kept + 3
    starts = np.cumsum(lengths) - lengths
    ids = np.empty(int(lengths.sum()), dtype=np.int32)
    ids[starts] = vocab.cls_id
    ids[starts + 1 + a_kept] = vocab.sep_id
    ids[starts + lengths - 1] = vocab.sep_id
    ids[np.repeat(starts + 1, a_kept) + ragged_arange(a_kept)] = ragged_gather(
        batch.pool, batch.a_start + a_front, a_kept
    )
    ids[np.repeat(starts + 2 + a_kept, b_kept) + ragged_arange(b_kept)] = ragged_gather(
        batch.pool, batch.b_start + b_front, b_kept
    )
    tally = Counter(
        examples=len(batch.keys),
        random_next=int(np.count_nonzero(batch.random_next)),
        truncated=int(np.count_nonzero(a_front + a_back + b_front + b_back)),
    )
    output, positions, labels, num_predictions = mask_and_count(
        ids, lengths, batch.keys, masking, vocab, tally
    )
    columns = ExampleColumns(
        input_ids=output,
        num_tokens=lengths,
        positions=positions,
        labels=labels,
        num_predictions=num_predictions,
        num_tokens_a=a_kept + 2,
        next_sentence_labels=batch.random_next.astype(np.int8),
        doc_ids=batch.doc_ids,
        dupe_index=batch.dupe_index,
        pair_index=batch.pair_index,
    )
    return columns, tally


def _list_array(values: np.ndarray, lengths: np.ndarray, list_type: pa.ListType) -> pa.ListArray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    # A safe cast: an id that does not fit the schema's type is an error, never wrapped.
    items = pa.array(values).cast(list_type.value_type)
    return pa.ListArray.from_arrays(pa.array(offsets), items, type=list_type)


def examples_table(columns: ExampleColumns, fmt: RecordFormat) -> pa.Table:
    """The examples as a table of ``fmt``'s schema plus the pair index (:data:`PAIR_COLUMN`)."""
    schema = fmt.schema
    arrays = {
        "input_ids": _list_array(columns.input_ids, columns.num_tokens, schema.field("input_ids").type),
        "masked_lm_positions": _list_array(
            columns.positions, columns.num_predictions, schema.field("masked_lm_positions").type
        ),
        "masked_lm_ids": _list_array(
            columns.labels, columns.num_predictions, schema.field("masked_lm_ids").type
        ),
    }
    for name in ("next_sentence_labels", "num_tokens_a", "num_tokens", "doc_id", "dupe_index"):
        values = getattr(columns, "doc_ids" if name == "doc_id" else name)
        arrays[name] = pa.array(values, type=schema.field(name).type)
    table = pa.table(arrays, schema=schema)
    return table.append_column(PAIR_COLUMN, pa.array(columns.pair_index, type=pa.int32()))
