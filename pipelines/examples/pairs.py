"""Next-sentence pairs, as the reference generator's ``create_instances_from_document`` makes them.

The reference picks the random B from a corpus held in memory. Here a document is planned
on its own (``plan_pairs``): each pair whose B must come from another document carries a
request for ``random_b_length`` tokens, which the pipeline fulfils elsewhere with
``take_random_b``; ``finish_pair`` then truncates and assembles the pair. Every random choice
comes from a generator made by ``seeded_rng`` from data identity (seed, document, dupe pass,
pair), so the output never depends on a worker or on the order work arrives in.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass


def seeded_rng(seed: int, *identity: object) -> random.Random:
    """A generator seeded from the run's seed and the identity of what it decides."""
    key = "\x1f".join(str(part) for part in (seed, *identity))
    return random.Random(int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big"))


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
            problems.append(f"--random-next-prob must be in [0, 1], got {self.random_next_prob}")
        if problems:
            raise ValueError("invalid configuration: " + "; ".join(problems))

    @property
    def max_num_tokens(self) -> int:
        """Room for A and B: the sequence less [CLS] and two [SEP]."""
        return self.max_seq_length - 3


@dataclass(frozen=True)
class PairPlan:
    """One pair before truncation: A, and either its actual continuation B or a request."""

    doc_id: str
    dupe_index: int
    pair_index: int
    tokens_a: tuple[int, ...]
    tokens_b: tuple[int, ...]
    """The actual next sentences (label 0); empty when B must be a random span."""
    random_b_length: int
    """Tokens wanted from another document (label 1); 0 for an actual continuation."""

    @property
    def is_random_next(self) -> bool:
        """Whether B comes from another document (``next_sentence_labels`` = 1)."""
        return self.random_b_length > 0


def plan_pairs(
    doc_id: str, sentences: Sequence[Sequence[int]], dupe_index: int, config: PairConfig, rng: random.Random
) -> list[PairPlan]:
    """Cut one document (sentences of token ids) into A/B pairs, the reference's way.

    Sentences accumulate into a chunk until the target length (``max_seq_length - 3``, or with
    probability ``short_seq_prob`` a random shorter one, drawn once per document and pass); the
    chunk splits at a random sentence into A and B; with probability ``random_next_prob``, and
    always when the chunk is one sentence, B will be a random span of another document and the
    chunk's unused sentences are put back.
    """
    target = config.max_num_tokens
    if rng.random() < config.short_seq_prob:
        target = rng.randint(2, config.max_num_tokens)
    plans: list[PairPlan] = []
    chunk: list[Sequence[int]] = []
    length = 0
    i = 0
    while i < len(sentences):
        chunk.append(sentences[i])
        length += len(sentences[i])
        if i == len(sentences) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = tuple(t for s in chunk[:a_end] for t in s)
            if len(chunk) == 1 or rng.random() < config.random_next_prob:
                tokens_b: tuple[int, ...] = ()
                random_b_length = max(1, target - len(tokens_a))
                i -= len(chunk) - a_end
            else:
                tokens_b = tuple(t for s in chunk[a_end:] for t in s)
                random_b_length = 0
            plans.append(PairPlan(doc_id, dupe_index, len(plans), tokens_a, tokens_b, random_b_length))
            chunk, length = [], 0
        i += 1
    return plans


def take_random_b(sentences: Sequence[Sequence[int]], length: int, rng: random.Random) -> list[int]:
    """From a random sentence of another document, whole sentences until ``length`` tokens."""
    tokens: list[int] = []
    for sentence in sentences[rng.randrange(len(sentences)) :]:
        tokens.extend(sentence)
        if len(tokens) >= length:
            break
    return tokens


def truncate_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random) -> bool:
    """Trim the longer side, from the front or the back at random, until the pair fits.

    Works in place; returns whether anything was cut.
    """
    truncated = False
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()
        truncated = True
    return truncated


def assemble(
    tokens_a: Sequence[int], tokens_b: Sequence[int], cls_id: int, sep_id: int
) -> tuple[list[int], int]:
    """``[CLS] A [SEP] B [SEP]`` and the length of its first segment (``[CLS] A [SEP]``)."""
    return [cls_id, *tokens_a, sep_id, *tokens_b, sep_id], len(tokens_a) + 2
