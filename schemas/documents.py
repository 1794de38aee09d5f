"""The ``documents`` format: cleaned documents, one list item per sentence.

Written by ``pipelines wikipedia``, ``pipelines books`` and ``pipelines corpus``; read by
``pipelines corpus``, ``wordpiece train`` and ``pipelines examples``.

| column        | type           | meaning                                                          |
|---------------|----------------|------------------------------------------------------------------|
| doc_id        | string         | 32 hex chars: SHA-256 prefix of the sentences (content-derived)   |
| source        | string         | ``wikipedia`` or ``books`` (or another producer's name)           |
| origin        | string         | the input file the document came from                            |
| title         | string, null   | page title or book title where known                             |
| page_id       | int64, null    | Wikipedia page id                                                |
| revision_id   | int64, null    | Wikipedia revision id                                            |
| sentences     | list<string>   | the document's sentences in order (document boundary = row)      |
| num_sentences | int32          | ``len(sentences)``                                               |
| num_words     | int64          | whitespace-separated words over all sentences                    |
| num_chars     | int64          | characters over all sentences                                    |
"""

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
