"""The ``features`` format: per-token hidden states, one row per (line, token, layer), as ``finetune
features`` writes them (columns: docs/finetune.md)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from schemas.formats import RecordFormat

FEATURES_VERSION = 1
FEATURES_NAME = "features"


def _check_rows(table: pa.Table) -> list[str]:
    lowest = {"line": (0, "must not be negative"), "token_index": (0, "must not be negative")}
    lowest["word_index"] = (-1, "must be -1 (special token) or a word's index")
    return [
        f"{name} {rule}"
        for name, (low, rule) in lowest.items()
        if pc.any(pc.less(table.column(name), low)).as_py()
    ]


def features_format(hidden_size: int) -> RecordFormat:
    """The features format for an encoder of ``hidden_size`` (the length of every ``vector``)."""
    if hidden_size < 1:
        raise ValueError(f"hidden_size must be positive, got {hidden_size}")
    vector = pa.list_(pa.field("item", pa.float32(), nullable=False), hidden_size)
    return RecordFormat(
        name=FEATURES_NAME,
        version=FEATURES_VERSION,
        fields=(
            pa.field("line", pa.int64(), nullable=False),
            pa.field("token", pa.string(), nullable=False),
            pa.field("token_index", pa.int32(), nullable=False),
            pa.field("word_index", pa.int32(), nullable=False),
            pa.field("layer", pa.int16(), nullable=False),
            pa.field("vector", vector, nullable=False),
        ),
        row_checks=(_check_rows,),
    )
