"""Next-sentence pairs, as the reference's ``create_instances_from_document`` makes them, planned a
document at a time (``plan_cuts``) from a generator seeded by (seed, document, pass); each pair
gets a 64-bit key whose hashes (``hashed_bits``) decide truncation and masking later, whatever
batch the pair is finished in."""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from wordpiece.masking import hashed_bits

_POPCOUNT_8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)

# Streams of ``hashed_bits``: one per kind of decision about a pair.
STREAM_TRUNCATE_A = 1
STREAM_TRUNCATE_B = 2


def seeded_generator(seed: int, *identity: object) -> np.random.Generator:
    """A generator seeded from the run's seed and the identity of what it decides."""
    key = "\x1f".join(str(part) for part in (seed, *identity))
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "big")))


@dataclass(frozen=True)
class PairConfig:
    """Lengths and probabilities of the reference generator."""

    max_seq_length: int = 128
    short_seq_prob: float = 0.1
    random_next_prob: float = 0.5

    def __post_init__(self) -> None:
        problems = []
        if self.max_seq_length < 5:
            problems.append(f"--max-seq-length must be at least 5, got {self.max_seq_length}")
        if self.max_seq_length > 32767:
            problems.append(f"--max-seq-length must fit int16 positions, got {self.max_seq_length}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            problems.append(f"--short-seq-prob must be in [0, 1], got {self.short_seq_prob}")
        if not 0.0 <= self.random_next_prob <= 1.0:
            problems.append(
                f"random_next_prob must be in [0, 1] (there is no flag for it), got {self.random_next_prob}"
            )
        if problems:
            raise ValueError("invalid settings: " + "; ".join(problems))

    @property
    def max_num_tokens(self) -> int:
        """Room for A and B: the sequence less [CLS] and two [SEP]."""
        return self.max_seq_length - 3


class TokenizedDocument(NamedTuple):
    """A document's token ids, flat, with sentence ``i`` at ``tokens[offsets[i]:offsets[i + 1]]``."""

    doc_id: str
    tokens: np.ndarray
    offsets: np.ndarray

    @property
    def num_sentences(self) -> int:
        """How many (non-empty) sentences the document has."""
        return len(self.offsets) - 1


class PairCuts(NamedTuple):
    """One document pass's pairs as arrays (one entry per pair); offsets are into the document's tokens."""

    a_start: np.ndarray
    a_end: np.ndarray
    b_end: np.ndarray
    """End of the actual B (B starts at ``a_end``); equal to ``a_end`` when B must be random."""
    random_b_length: np.ndarray
    """Tokens wanted from another document (label 1); 0 for an actual continuation."""
    keys: np.ndarray
    """64 random bits per pair (uint64) that seed every later decision about it."""
    document_draws: np.ndarray
    """Uniform in [0, 1): which other document B comes from (random next only)."""
    sentence_draws: np.ndarray
    """Uniform in [0, 1): the sentence of that document B starts at (random next only)."""


def plan_cuts(document: TokenizedDocument, config: PairConfig, rng: np.random.Generator) -> PairCuts:
    """Cut one document into A/B pairs, the reference's way (docs/examples.md), as arrays."""
    offsets = document.offsets.tolist()
    num_sentences = len(offsets) - 1
    # Every chunk takes at least one sentence for good, so there are at most num_sentences
    # chunks, each with two draws (split point, random next), plus two for the target.
    draws = rng.random(2 * num_sentences + 2).tolist()
    target = config.max_num_tokens
    if draws[0] < config.short_seq_prob:
        target = 2 + int(draws[1] * (config.max_num_tokens - 1))
    cuts: list[int] = []  # (first sentence, A's end, B's end) as token offsets, flat
    draw = 2
    start = 0
    while start < num_sentences:
        # The chunk ends at the first sentence that brings it to the target, or the last one.
        end = min(bisect.bisect_left(offsets, offsets[start] + target, start + 1), num_sentences)
        size = end - start
        a_end = start + 1 + int(draws[draw] * (size - 1)) if size >= 2 else start + 1
        if size == 1 or draws[draw + 1] < config.random_next_prob:
            cuts += (offsets[start], offsets[a_end], offsets[a_end])
            start = a_end  # the chunk's unused sentences are put back
        else:
            cuts += (offsets[start], offsets[a_end], offsets[end])
            start = end
        draw += 2
    table = np.array(cuts, dtype=np.int64).reshape(-1, 3)
    keys = rng.integers(0, 1 << 64, size=len(table), dtype=np.uint64, endpoint=False)
    other = rng.random((len(table), 2))
    a_start, a_end, b_end = table[:, 0], table[:, 1], table[:, 2]
    random_b_length = np.where(b_end == a_end, np.maximum(1, target - (a_end - a_start)), 0)
    return PairCuts(a_start, a_end, b_end, random_b_length, keys, other[:, 0], other[:, 1])


def _coin_heads(keys: np.ndarray, num_coins: np.ndarray, stream: int) -> np.ndarray:
    """Heads among ``num_coins[i]`` fair coins of pair ``i`` (64 coins per hashed word)."""
    words = (num_coins + 63) // 64
    owner = np.repeat(np.arange(len(keys)), words)
    word = np.arange(len(owner)) - np.repeat(np.cumsum(words) - words, words)
    bits = hashed_bits(keys[owner], word, stream)
    remaining = num_coins[owner] - 64 * word
    partial = remaining < 64
    bits[partial] &= (np.uint64(1) << remaining[partial].astype(np.uint64)) - np.uint64(1)
    heads = _POPCOUNT_8[bits.view(np.uint8)].reshape(-1, 8).sum(axis=1)
    return np.bincount(owner, weights=heads, minlength=len(keys)).astype(np.int64)


def truncate_pairs(
    len_a: np.ndarray, len_b: np.ndarray, keys: np.ndarray, max_num_tokens: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where each pair's A and B are cut, ``(a_front, a_back, b_front, b_back)``: the reference trims
    the longer side (B on a tie) one token at a time, front or back by a fair coin; the counts per side
    follow from the lengths, and the front cuts are the heads among as many coins of the pair's key."""
    excess = np.maximum(len_a + len_b - max_num_tokens, 0)
    gap = np.abs(len_a - len_b)
    first = np.minimum(excess, gap)  # cuts that bring the longer side down to the shorter
    rest = excess - first  # then alternate, B first
    cut_a = np.where(len_a > len_b, first, 0) + rest // 2
    cut_b = np.where(len_a > len_b, 0, first) + rest - rest // 2
    front_a = _coin_heads(keys, cut_a, STREAM_TRUNCATE_A)
    front_b = _coin_heads(keys, cut_b, STREAM_TRUNCATE_B)
    return front_a, cut_a - front_a, front_b, cut_b - front_b
