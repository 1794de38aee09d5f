"""Train/validation/test by a hash of the document id and a salt: adding data never moves a
document, and exact duplicates land in the same split."""

from __future__ import annotations

import hashlib


def split_point(doc_id: str, salt: str) -> float:
    """A uniform number in [0, 1) derived from the document id."""
    digest = hashlib.sha256(f"{salt}\x00{doc_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def assign_split(doc_id: str, validation_fraction: float, test_fraction: float, salt: str) -> str:
    """``validation`` below the validation fraction, then ``test``, the rest ``train``."""
    point = split_point(doc_id, salt)
    if point < validation_fraction:
        return "validation"
    if point < validation_fraction + test_fraction:
        return "test"
    return "train"
