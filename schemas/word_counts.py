"""The ``word_counts`` format: how often each pre-tokenised word occurs in a corpus split.

Written by the counting pipeline of ``wordpiece train`` (``DIR/word_counts/``), read back to
learn the vocabulary and to measure it, so the text is never re-read.

| column | type   | meaning                                                    |
|--------|--------|------------------------------------------------------------|
| word   | string | a word after BERT normalisation and pre-tokenisation       |
| count  | int64  | occurrences in the split                                   |
"""

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
