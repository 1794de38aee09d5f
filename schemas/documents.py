"""The ``documents`` format: cleaned documents, one list item per sentence (columns: docs/corpus.md)."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from schemas.formats import RecordFormat

_DOC_ID_RE = re.compile(r"^[0-9a-f]{32}$")


def _check_rows(table: pa.Table) -> list[str]:
    problems = []
    bad_ids = [d for d in table.column("doc_id").to_pylist() if d is not None and not _DOC_ID_RE.match(d)]
    if bad_ids:
        problems.append(
            f"{len(bad_ids)} doc_id values are not 32 lowercase hex chars (first: {bad_ids[0]!r})"
        )
    lengths = pc.list_value_length(table.column("sentences")).fill_null(0)
    if not pc.all(pc.equal(lengths, table.column("num_sentences").cast(pa.int32()))).as_py() and len(table):
        problems.append("num_sentences differs from the length of sentences")
    if len(table) and pc.any(pc.equal(lengths, 0)).as_py():
        problems.append("a document has no sentences")
    return problems


DOCUMENTS = RecordFormat(
    name="documents",
    version=1,
    fields=(
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("origin", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("page_id", pa.int64()),
        pa.field("revision_id", pa.int64()),
        pa.field("sentences", pa.list_(pa.field("item", pa.string(), nullable=False)), nullable=False),
        pa.field("num_sentences", pa.int32(), nullable=False),
        pa.field("num_words", pa.int64(), nullable=False),
        pa.field("num_chars", pa.int64(), nullable=False),
    ),
    row_checks=(_check_rows,),
)
