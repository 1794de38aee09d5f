"""The ``rejects`` format: records a pipeline could not use, with the reason (columns: docs/corpus.md)."""

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
