"""The ``word_counts`` format: how often each pre-tokenised word occurs in a corpus split, written by
``wordpiece train``'s counting job and read back to learn and measure the vocabulary (docs/wordpiece.md)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from schemas.formats import RecordFormat


def _check_rows(table: pa.Table) -> list[str]:
    if len(table) and pc.any(pc.less_equal(table.column("count"), 0)).as_py():
        return ["a count is not positive"]
    return []


WORD_COUNTS = RecordFormat(
    name="word_counts",
    version=1,
    fields=(
        pa.field("word", pa.string(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
    ),
    row_checks=(_check_rows,),
)
