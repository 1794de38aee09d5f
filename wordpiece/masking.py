"""Masked-LM selection, the reference's ``create_masked_lm_predictions``, for a batch of sequences:
the one rule of ``pipelines examples`` and ``pretrain --dynamic-masking``. Every choice is a hash
of the sequence's 64-bit key and a counter, the same in any batch and on any worker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of uint64 that scatters every input bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX_1
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX_2
    return x ^ (x >> np.uint64(31))


def hashed_bits(keys: np.ndarray, counters: np.ndarray, stream: int) -> np.ndarray:
    """64 random bits for each (key, counter) of a ``stream``: the same whatever the batch."""
    salt = (np.uint64(stream) << np.uint64(40)) | counters.astype(np.uint64)
    return _mix64(keys.astype(np.uint64) + _mix64(salt + _GOLDEN))


def hashed_uniforms(keys: np.ndarray, counters: np.ndarray, stream: int) -> np.ndarray:
    """Uniform floats in [0, 1) from :func:`hashed_bits` (53 bits each)."""
    return (hashed_bits(keys, counters, stream) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


NEVER_MASKED = frozenset({"[CLS]", "[SEP]"})
"""What the reference's ``create_masked_lm_predictions`` skips: only [CLS] and [SEP]."""

# Streams of ``hashed_uniforms``: one per kind of decision.
STREAM_CHOOSE = 11
STREAM_MASK = 12
STREAM_RANDOM_ID = 14
STREAM_WORD_ORDER = 15


@dataclass(frozen=True)
class MaskingConfig:
    """How positions are chosen and replaced (the reference's defaults)."""

    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    whole_word_masking: bool = False
    mask_share: float = 0.8
    """Of the chosen positions, the share that becomes [MASK]."""
    keep_share: float = 0.1
    """The share that keeps its token."""
    random_share: float = 0.1
    """The share that becomes a random token (80/10/10 by default, as the paper)."""

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 < self.masked_lm_prob < 1.0:
            problems.append(f"--masked-lm-prob must be in (0, 1), got {self.masked_lm_prob}")
        if self.max_predictions_per_seq < 1:
            problems.append(
                f"--max-predictions-per-seq must be at least 1, got {self.max_predictions_per_seq}"
            )
        shares = (self.mask_share, self.keep_share, self.random_share)
        for name, value in zip(("mask", "keep", "random"), shares, strict=True):
            if not 0.0 <= value <= 1.0:
                problems.append(f"--{name}-share must be in [0, 1], got {value}")
        if abs(sum(shares) - 1.0) > 1e-9:
            problems.append(
                "--mask-share, --keep-share and --random-share must sum to 1, got "
                f"{self.mask_share} + {self.keep_share} + {self.random_share} = {sum(shares):g}"
            )
        if problems:
            raise ValueError("invalid settings: " + "; ".join(problems))


@dataclass(frozen=True)
class MaskingVocab:
    """What masking needs to know about the vocabulary, as arrays indexed by id."""

    mask_id: int
    special: np.ndarray
    """True for ids that are never masked ([CLS], [SEP], ...)."""
    continuation: np.ndarray
    """True for ``##`` pieces (they join the word before them under whole-word masking)."""
    random_ids: np.ndarray
    """The pool the 10% random replacements are drawn from."""

    @classmethod
    def build(
        cls,
        tokens: Sequence[str],
        random_ids: Sequence[int],
        never_masked: frozenset[str] = NEVER_MASKED,
    ) -> MaskingVocab:
        """Tables for the vocabulary ``tokens`` (in id order); ``random_ids``: the random replacements."""
        if not len(random_ids):
            raise ValueError("the pool of random replacement tokens is empty")
        return cls(
            mask_id=tokens.index("[MASK]"),
            special=np.array([t in never_masked for t in tokens], dtype=bool),
            continuation=np.array([t.startswith("##") for t in tokens], dtype=bool),
            random_ids=np.asarray(random_ids, dtype=np.int64),
        )


@dataclass(frozen=True)
class MaskedBatch:
    """A batch of masked sequences (flat, as the input) and what the model must predict."""

    input_ids: np.ndarray
    positions: np.ndarray
    """Predicted positions, relative to their sequence, grouped by sequence, ascending in each."""
    labels: np.ndarray
    """The original ids at ``positions``."""
    num_predictions: np.ndarray
    """How many of ``positions`` belong to each sequence."""
    num_to_mask: np.ndarray
    """Per sequence, how many predictions became [MASK]."""
    num_unchanged: np.ndarray
    """Per sequence, how many predictions kept their token."""


def _num_to_predict(lengths: np.ndarray, config: MaskingConfig) -> np.ndarray:
    # np.rint rounds half to even, as the reference's Python 3 round().
    wanted = np.rint(lengths * config.masked_lm_prob).astype(np.int64)
    return np.minimum(config.max_predictions_per_seq, np.maximum(1, wanted))


def _choose_subsets(
    keys: np.ndarray, num_candidates: np.ndarray, num_wanted: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A uniformly random subset of ``num_wanted[i]`` of ``range(num_candidates[i])`` per sequence
    (Floyd's algorithm, a step for all sequences at once): ``(owner, index)``, ascending per owner."""
    take = np.minimum(num_wanted, num_candidates)
    steps = int(take.max(initial=0))
    picks = np.full((len(keys), max(steps, 1)), -1, dtype=np.int64)
    for step in range(steps):
        active = np.flatnonzero(step < take)
        bound = num_candidates[active] - take[active] + step  # draw from range(bound + 1)
        drawn = (
            hashed_uniforms(keys[active], np.full(len(active), step), STREAM_CHOOSE) * (bound + 1)
        ).astype(np.int64)
        seen = (picks[active, :step] == drawn[:, None]).any(axis=1)
        picks[active, step] = np.where(seen, bound, drawn)
    # Each sequence's picks in ascending order (unused slots last), so that the chosen positions
    # come out grouped by sequence and ascending in each, with no sort over the whole batch.
    picks[picks < 0] = np.iinfo(np.int64).max
    picks.sort(axis=1)
    owner, column = np.nonzero(picks != np.iinfo(np.int64).max)
    return owner, picks[owner, column]


def _choose_whole_words(
    keys: np.ndarray,
    candidates: np.ndarray,
    cand_owner: np.ndarray,
    group_start: np.ndarray,
    num_wanted: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Whole-word selection: visit each sequence's words in a random order, taking a word whole
    when it still fits, until enough positions are chosen (the reference's loop)."""
    group_owner = cand_owner[group_start]
    group_first = np.flatnonzero(group_start)
    num_groups = len(group_first)
    group_size = np.diff(np.append(group_first, len(candidates)))
    # Each word's draw is counted from its sequence's first word: the same in any batch.
    counters = np.arange(num_groups) - np.searchsorted(group_owner, group_owner)
    order_key = hashed_uniforms(keys[group_owner], counters, STREAM_WORD_ORDER)
    order = np.lexsort((order_key, group_owner))
    owners, indexes = [], []
    group_owner_l, size_l, first_l = group_owner.tolist(), group_size.tolist(), group_first.tolist()
    wanted_l = num_wanted.tolist()
    taken: dict[int, int] = {}
    for g in order.tolist():
        seq = group_owner_l[g]
        have = taken.get(seq, 0)
        if have + size_l[g] > wanted_l[seq]:  # a word is taken whole or not at all
            continue
        taken[seq] = have + size_l[g]
        owners.extend([seq] * size_l[g])
        indexes.extend(range(first_l[g], first_l[g] + size_l[g]))
    return np.asarray(owners, dtype=np.int64), np.asarray(indexes, dtype=np.int64)


def mask_batch(
    ids: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    keys: np.ndarray,
    config: MaskingConfig,
    vocab: MaskingVocab,
) -> MaskedBatch:
    """Mask every sequence ``ids[starts[i]:starts[i] + lengths[i]]`` of a flat batch: of its
    positions other than ``vocab.special``, ``masked_lm_prob`` of its length (rounded, at least one, at
    most ``max_predictions_per_seq``) are chosen at random (whole words with whole-word masking) and
    replaced: ``mask_share`` [MASK], ``keep_share`` unchanged, the rest a random ``vocab.random_ids``."""
    num_sequences = len(starts)
    candidate = ~vocab.special[ids]
    candidates = np.flatnonzero(candidate)  # flat positions
    # The sequences are back to back: count each one's never-masked tokens (a few) by where
    # they fall, rather than labelling every token with its sequence.
    special_positions = np.flatnonzero(~candidate)
    special_owner = np.searchsorted(starts, special_positions, side="right") - 1
    num_candidates = lengths - np.bincount(special_owner, minlength=num_sequences)
    cand_first = np.cumsum(num_candidates) - num_candidates
    num_wanted = _num_to_predict(lengths, config)
    if config.whole_word_masking:
        owner_of_token = np.repeat(np.arange(num_sequences), lengths)
        cand_owner = owner_of_token[candidates]
        previous = candidates - 1
        joins = (
            vocab.continuation[ids[candidates]]
            & (previous >= 0)
            & candidate[np.maximum(previous, 0)]
            & (owner_of_token[np.maximum(previous, 0)] == cand_owner)
        )
        owner, flat_index = _choose_whole_words(keys, candidates, cand_owner, ~joins, num_wanted)
        chosen = candidates[flat_index]
        # Grouped by sequence, ascending positions in each.
        order = np.lexsort((chosen, owner))
        owner, chosen = owner[order], chosen[order]
    else:
        # Already grouped by sequence, ascending in each: candidates are ascending.
        owner, index = _choose_subsets(keys, num_candidates, num_wanted)
        chosen = candidates[cand_first[owner] + index]
    counters = chosen - starts[owner]  # the position, so each draw belongs to one position
    draw = hashed_uniforms(keys[owner], counters, STREAM_MASK)
    to_mask = draw < config.mask_share
    replace = draw >= config.mask_share + config.keep_share
    pool = vocab.random_ids
    random_index = (hashed_uniforms(keys[owner], counters, STREAM_RANDOM_ID) * len(pool)).astype(np.int64)
    labels = ids[chosen]
    output = ids.copy()
    output[chosen[to_mask]] = vocab.mask_id
    output[chosen[replace]] = pool[random_index[replace]]
    return MaskedBatch(
        input_ids=output,
        positions=counters,
        labels=labels,
        num_predictions=np.bincount(owner, minlength=num_sequences),
        num_to_mask=np.bincount(owner[to_mask], minlength=num_sequences),
        num_unchanged=np.bincount(owner[output[chosen] == labels], minlength=num_sequences),
    )
