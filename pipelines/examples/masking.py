"""Masked-LM selection, as the reference generator's ``create_masked_lm_predictions`` does it.

Every random choice comes from the generator passed in, which the caller seeds from data
identity (seed, document, dupe pass, instance), so the result never depends on a worker.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class MaskingConfig:
    """How positions are chosen and replaced (the reference's defaults)."""

    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    whole_word_masking: bool = False
    mask_share: float = 0.8
    """Of the chosen positions, this share becomes [MASK]; the rest split evenly into a random
    token and the unchanged token (80/10/10)."""

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 < self.masked_lm_prob < 1.0:
            problems.append(f"--masked-lm-prob must be in (0, 1), got {self.masked_lm_prob}")
        if self.max_predictions_per_seq < 1:
            problems.append(
                f"--max-predictions-per-seq must be at least 1, got {self.max_predictions_per_seq}"
            )
        if not 0.0 <= self.mask_share <= 1.0:
            problems.append(f"mask_share must be in [0, 1], got {self.mask_share}")
        if problems:
            raise ValueError("invalid configuration: " + "; ".join(problems))


@dataclass(frozen=True)
class Masked:
    """A masked sequence and what the model must predict."""

    input_ids: list[int]
    positions: list[int]
    labels: list[int]


def candidate_groups(tokens: Sequence[str], special: frozenset[str], whole_word: bool) -> list[list[int]]:
    """Positions that may be masked, grouped by word when ``whole_word`` (a ``##`` piece joins
    the group before it); special tokens are never candidates."""
    groups: list[list[int]] = []
    for position, token in enumerate(tokens):
        if token in special:
            continue
        if whole_word and groups and token.startswith("##") and groups[-1][-1] == position - 1:
            groups[-1].append(position)
        else:
            groups.append([position])
    return groups


def mask_tokens(
    ids: Sequence[int],
    tokens: Sequence[str],
    *,
    config: MaskingConfig,
    mask_id: int,
    random_ids: Sequence[int],
    special: frozenset[str],
    rng: random.Random,
) -> Masked:
    """Choose up to ``max_predictions_per_seq`` positions (``masked_lm_prob`` of the sequence,
    rounded, at least one) and replace them 80% [MASK], 10% a random id from ``random_ids``,
    10% unchanged.

    ``random_ids`` is the pool of replacement tokens: by default the caller passes the real
    tokens (no special or [unusedN] entries); the reference draws from the whole vocabulary.
    With whole-word masking a word is taken whole or not at all, as in the reference.
    """
    groups = candidate_groups(tokens, special, config.whole_word_masking)
    num_to_predict = min(config.max_predictions_per_seq, max(1, round(len(ids) * config.masked_lm_prob)))
    output = list(ids)
    chosen: list[int] = []
    # Visit the groups in random order, drawing the order lazily (a partial Fisher-Yates shuffle:
    # the same distribution as shuffling them all, as the reference does, without the cost).
    for k in range(len(groups)):
        if len(chosen) >= num_to_predict:
            break
        j = rng.randrange(k, len(groups))
        groups[k], groups[j] = groups[j], groups[k]
        group = groups[k]
        if len(chosen) + len(group) > num_to_predict:
            continue
        for position in group:
            chosen.append(position)
            if rng.random() < config.mask_share:
                output[position] = mask_id
            elif rng.random() < 0.5:
                output[position] = ids[position]
            else:
                output[position] = random_ids[rng.randrange(len(random_ids))]
    chosen.sort()
    return Masked(output, chosen, [ids[p] for p in chosen])
