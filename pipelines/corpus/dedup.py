"""Exact and near-duplicate detection, pure functions. Exact duplicates share a ``doc_id``. Near
duplicates: MinHash signatures of lower-cased word shingles and LSH buckets of their bands; in a
bucket a document is dropped when one with a smaller ``doc_id`` is estimated at least
``threshold`` similar (order-free; a chain A~B~C drops B and C).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

MINHASH_SEED = 1
MAX_BUCKET_COMPARISONS = 100
"""In a very large bucket each document is compared with at most this many smaller ids."""


def _word_hashes(words: list[str]) -> np.ndarray:
    """A 32-bit hash per word, computed once per distinct word."""
    distinct: dict[str, int] = {}
    for word in words:
        if word not in distinct:
            distinct[word] = int.from_bytes(
                hashlib.blake2b(word.encode("utf-8"), digest_size=4).digest(), "little"
            )
    return np.fromiter((distinct[w] for w in words), dtype=np.uint64, count=len(words))


def shingle_hashes(sentences: Sequence[str], shingle_words: int) -> np.ndarray:
    """Distinct 32-bit hashes of the document's lower-cased word n-grams (the whole text when
    shorter), each a polynomial in its words' hashes, computed for all shingles at once."""
    words = " ".join(sentences).lower().split()
    hashes = _word_hashes(words)
    if len(words) <= shingle_words:
        return np.unique(
            np.array([int(np.sum(hashes * _SHINGLE_MULTIPLIERS[: len(words)]) & _MASK_32)], dtype=np.uint64)
        )
    count = len(words) - shingle_words + 1
    combined = np.zeros(count, dtype=np.uint64)
    for k in range(shingle_words):
        combined = (combined + hashes[k : k + count] * _SHINGLE_MULTIPLIERS[k]) & _MASK_32
    return np.unique(combined)


_MERSENNE_PRIME = np.uint64((1 << 61) - 1)
_MASK_32 = np.uint64(0xFFFFFFFF)
_CHUNK_SHINGLES = 4096
_SHINGLE_MULTIPLIERS = (
    np.random.default_rng(MINHASH_SEED + 1).integers(1, 1 << 32, size=64, dtype=np.uint64) | 1
)


@lru_cache(maxsize=4)
def _permutations(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded coefficients of the universal hashes ``(a·h + b) mod (2⁶¹ − 1)``."""
    rng = np.random.default_rng(MINHASH_SEED)
    a = rng.integers(1, 1 << 32, size=num_perm, dtype=np.uint64)
    b = rng.integers(0, 1 << 32, size=num_perm, dtype=np.uint64)
    return a, b


def minhash_signature(sentences: Sequence[str], shingle_words: int, num_perm: int) -> np.ndarray:
    """A ``num_perm``-long uint32 MinHash signature of the document's shingles (seeded, stable;
    32-bit shingle hashes and coefficients keep ``a·h + b`` exact in uint64)."""
    a, b = _permutations(num_perm)
    hashes = shingle_hashes(sentences, shingle_words)
    signature = np.full(num_perm, np.iinfo(np.uint64).max, dtype=np.uint64)
    for start in range(0, len(hashes), _CHUNK_SHINGLES):
        chunk = hashes[start : start + _CHUNK_SHINGLES, None]
        signature = np.minimum(signature, ((chunk * a + b) % _MERSENNE_PRIME).min(axis=0))
    return (signature & _MASK_32).astype(np.uint32)


def band_keys(signature: np.ndarray, bands: int, rows: int) -> list[str]:
    """One LSH bucket key per band: the band number and a hash of its rows."""
    return [
        f"{band}:{hashlib.blake2b(signature[band * rows : (band + 1) * rows].tobytes(), digest_size=12).hexdigest()}"
        for band in range(bands)
    ]


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """The share of signature positions where two MinHash signatures agree."""
    return float(np.mean(a == b))
