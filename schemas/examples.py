"""The ``examples`` format (columns: docs/shards.md): token ids uint16 up to 65,536 tokens, uint32
beyond; :func:`example_batch_problem` checks every value the trainer relies on, in every table
written or read."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.formats import RecordFormat

EXAMPLES_VERSION = 1


@dataclass(frozen=True)
class ExampleLimits:
    """What the values of a record batch must fit (None: the column type's range)."""

    vocab_size: int | None = None
    max_seq_length: int | None = None


def id_type(vocab_size: int) -> pa.DataType:
    """The narrowest unsigned integer type for token ids of a vocabulary."""
    if vocab_size < 1:
        raise ValueError(f"a vocabulary has at least one token, got {vocab_size}")
    return pa.uint16() if vocab_size <= 1 << 16 else pa.uint32()


def _check_rows(table: pa.Table) -> list[str]:
    problems = (
        example_batch_problem(batch, ExampleLimits()) for batch in table.combine_chunks().to_batches()
    )
    return [problem for problem in problems if problem][:1]


def examples_format(vocab_size: int) -> RecordFormat:
    """The examples format for a vocabulary of ``vocab_size`` tokens."""
    ids = id_type(vocab_size)
    return RecordFormat(
        name="examples",
        version=EXAMPLES_VERSION,
        fields=(
            pa.field("input_ids", pa.list_(pa.field("item", ids, nullable=False)), nullable=False),
            pa.field(
                "masked_lm_positions", pa.list_(pa.field("item", pa.int16(), nullable=False)), nullable=False
            ),
            pa.field("masked_lm_ids", pa.list_(pa.field("item", ids, nullable=False)), nullable=False),
            pa.field("next_sentence_labels", pa.int8(), nullable=False),
            pa.field("num_tokens_a", pa.int16(), nullable=False),
            pa.field("num_tokens", pa.int16(), nullable=False),
            pa.field("doc_id", pa.string(), nullable=False),
            pa.field("dupe_index", pa.int16(), nullable=False),
        ),
        row_checks=(_check_rows,),
    )


def example_batch_problem(batch: pa.RecordBatch, limits: ExampleLimits) -> str | None:
    """The first problem of a record batch of examples, naming the column and the row, or None."""
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid as err:
        return f"malformed Arrow data ({err})"
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        values = column.flatten() if pa.types.is_list(column.type) else column
        if column.null_count or values.null_count:
            return f"row {_first_null_row(column)}: {name} holds a null"
    num_tokens = _numpy(batch.column("num_tokens"))
    longest = limits.max_seq_length or np.iinfo(np.int16).max
    problem = _first(num_tokens < 1, "num_tokens {} is below 1", num_tokens) or _first(
        num_tokens > longest, f"num_tokens {{}} exceeds the shards' max_seq_length {longest}", num_tokens
    )
    if problem:
        return problem
    lengths = _numpy(pc.list_value_length(batch.column("input_ids")))
    problem = _first(lengths != num_tokens, "input_ids holds {} tokens, num_tokens says otherwise", lengths)
    segment = _numpy(batch.column("num_tokens_a"))
    problem = problem or _first(
        (segment < 0) | (segment > num_tokens), "num_tokens_a {} lies outside 0..num_tokens", segment
    )
    labels = _numpy(batch.column("next_sentence_labels"))
    problem = problem or _first(
        (labels != 0) & (labels != 1), "next_sentence_labels {} is not 0 or 1", labels
    )
    return problem or _ids_problem(batch, lengths, limits) or _positions_problem(batch, num_tokens)


def _ids_problem(batch: pa.RecordBatch, lengths: np.ndarray, limits: ExampleLimits) -> str | None:
    """Token ids at or above the vocabulary size, in input_ids or masked_lm_ids."""
    if limits.vocab_size is None:
        return None
    for name in ("input_ids", "masked_lm_ids"):
        column = batch.column(name)
        values = column.flatten().to_numpy()  # unsigned ids, zero-copy: no cast of the big column
        if values.size and int(values.max()) >= limits.vocab_size:
            first = int(np.argmax(values >= limits.vocab_size))
            counts = lengths if name == "input_ids" else _numpy(pc.list_value_length(column))
            row = int(np.searchsorted(np.cumsum(counts), first, side="right"))
            return (
                f"row {row}: {name} holds token id {int(values[first])}, not below the vocabulary's "
                f"{limits.vocab_size} tokens"
            )
    return None


def _positions_problem(batch: pa.RecordBatch, num_tokens: np.ndarray) -> str | None:
    """masked_lm_positions not strictly ascending inside the row's tokens, or not one per masked_lm_id."""
    positions = batch.column("masked_lm_positions")
    counts = _numpy(pc.list_value_length(positions))
    problem = _first(
        counts != _numpy(pc.list_value_length(batch.column("masked_lm_ids"))),
        "{} masked_lm_positions but another number of masked_lm_ids",
        counts,
    )
    flat = _numpy(positions.flatten())
    if problem or not flat.size:
        return problem
    rows = np.repeat(np.arange(len(counts)), counts)
    outside = (flat < 0) | (flat >= num_tokens[rows])
    if outside.any():
        at = int(np.argmax(outside))
        return (
            f"row {rows[at]}: masked_lm_positions holds {int(flat[at])}, outside the row's "
            f"{int(num_tokens[rows[at]])} tokens"
        )
    backwards = (np.diff(flat) <= 0) & (rows[1:] == rows[:-1])
    if backwards.any():
        return f"row {rows[int(np.argmax(backwards)) + 1]}: masked_lm_positions are not strictly ascending"
    return None


def _first_null_row(column: pa.Array) -> int:
    """The first row that is null or, in a list column, holds a null."""
    if column.null_count:
        return int(np.argmax(_numpy(pc.is_null(column))))
    first = int(np.argmax(_numpy(pc.is_null(column.flatten()))))
    return int(np.searchsorted(np.cumsum(_numpy(pc.list_value_length(column))), first, side="right"))


def _numpy(array: pa.Array) -> np.ndarray:
    """An integer column as int64 (no wrap-around in the comparisons)."""
    return array.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _first(bad: np.ndarray, template: str, values: np.ndarray) -> str | None:
    """``row R: template`` with the first bad row's value, or None when no row is bad."""
    if not bad.any():
        return None
    row = int(np.argmax(bad))
    return f"row {row}: " + template.format(int(values[row]))
