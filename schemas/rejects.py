"""The ``rejects`` format: records a pipeline could not use, with the reason, kept aside.

| column    | type         | meaning                                                              |
|-----------|--------------|----------------------------------------------------------------------|
| source    | string       | the pipeline stage's source name (``wikipedia``, ``books``)          |
| origin    | string       | the input file                                                       |
| record_id | string       | the page id, book file name, or ``file`` for a whole-file error      |
| title     | string, null | title where known                                                    |
| reason    | string       | a snake_case code, also a key of ``stats.json``'s ``rejected``       |
| detail    | string       | one human sentence saying what went wrong                            |
| excerpt   | string, null | the first characters of the raw record, to inspect it                |
"""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa

from schemas.formats import RecordFormat


class Rejection(NamedTuple):
    """Why a record or an input file cannot be used: a snake_case ``reason`` (a ``rejects`` row's, or
    a file error's) and a ``detail`` sentence."""

    reason: str
    detail: str


EXCERPT_CHARS = 1000
"""How much of a rejected record's raw text is kept in ``excerpt``."""

REJECTS = RecordFormat(
    name="rejects",
    version=1,
    fields=(
        pa.field("source", pa.string(), nullable=False),
        pa.field("origin", pa.string(), nullable=False),
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("excerpt", pa.string()),
    ),
)
