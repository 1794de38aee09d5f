"""Next-sentence pairs with the reference generator's semantics, planned one document at a time."""

from __future__ import annotations

import itertools
import random
from typing import NamedTuple

import numpy as np
import pytest

from pipelines.examples.pairs import (
    PairConfig,
    TokenizedDocument,
    plan_cuts,
    seeded_generator,
    truncate_pairs,
)
from wordpiece.masking import hashed_uniforms


def tokenized_document(doc_id: str, sentences: list[list[int]]) -> TokenizedDocument:
    """A :class:`TokenizedDocument` from sentences of ids (empty sentences are left out)."""
    lengths = [len(s) for s in sentences if s]
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.fromiter(itertools.chain.from_iterable(sentences), dtype=np.int32, count=int(offsets[-1]))
    return TokenizedDocument(doc_id, tokens, offsets)


class _Plan(NamedTuple):
    pair_index: int
    tokens_a: np.ndarray
    tokens_b: np.ndarray
    random_b_length: int
    key: int

    @property
    def is_random_next(self) -> bool:
        return self.random_b_length > 0


def plan_pairs(document, config, rng) -> list[_Plan]:
    """``plan_cuts`` as one plan per pair, with A and B as views of the document's tokens."""
    cuts = plan_cuts(document, config, rng)
    rows = zip(*(c.tolist() for c in cuts[:5]), strict=True)
    t = document.tokens
    return [_Plan(i, t[a0:a1], t[a1:b1], n, key) for i, (a0, a1, b1, n, key) in enumerate(rows)]


def _document(num_sentences: int, first_id: int = 1000, doc_id: str = "d"):
    """Sentences of 5 to 24 distinct, increasing ids, so order and provenance can be checked."""
    rng = random.Random(num_sentences)
    sentences, next_id = [], first_id
    for _ in range(num_sentences):
        n = rng.randint(5, 24)
        sentences.append(list(range(next_id, next_id + n)))
        next_id += n
    return tokenized_document(doc_id, sentences)


def _plans_as_lists(plans):
    return [(p.pair_index, p.tokens_a.tolist(), p.tokens_b.tolist(), p.random_b_length, p.key) for p in plans]


def test_tokenized_document_leaves_out_empty_sentences():
    document = tokenized_document("d", [[1, 2], [], [3]])
    assert document.tokens.tolist() == [1, 2, 3] and document.offsets.tolist() == [0, 2, 3]
    assert document.num_sentences == 2


def test_actual_continuations_are_the_next_sentences_in_order():
    doc = _document(60)
    flat = doc.tokens.tolist()
    plans = plan_pairs(doc, PairConfig(max_seq_length=64), seeded_generator(1, "d", 0))
    continuations = [p for p in plans if not p.is_random_next]
    assert continuations and any(p.is_random_next for p in plans)
    for plan in continuations:
        pair = plan.tokens_a.tolist() + plan.tokens_b.tolist()
        start = flat.index(pair[0])
        assert flat[start : start + len(pair)] == pair  # A then B, contiguous, in document order
    assert [p.pair_index for p in plans] == list(range(len(plans)))


def test_chunks_reach_the_target_and_split_at_sentence_boundaries():
    doc = _document(80)
    ends = set(doc.offsets.tolist())
    config = PairConfig(max_seq_length=64, short_seq_prob=0.0)
    for seed in range(5):
        for plan in plan_pairs(doc, config, seeded_generator(seed, "d", 0)):
            first = doc.tokens.tolist().index(int(plan.tokens_a[0]))
            assert first in ends and first + len(plan.tokens_a) in ends
            if not plan.is_random_next:
                # Sentences were added until the chunk reached max_seq_length - 3 (or the end).
                end = first + len(plan.tokens_a) + len(plan.tokens_b)
                assert end in ends
                assert end - first >= config.max_num_tokens or end == len(doc.tokens)


def test_random_next_puts_unused_sentences_back():
    doc = _document(40)
    plans = plan_pairs(
        doc, PairConfig(max_seq_length=64, random_next_prob=1.0, short_seq_prob=0.0), seeded_generator(3)
    )
    assert all(p.is_random_next and not len(p.tokens_b) for p in plans)
    # Every sentence starts some A exactly once or continues one: nothing is skipped.
    firsts = [int(p.tokens_a[0]) for p in plans]
    assert firsts == sorted(firsts) and firsts[0] == int(doc.tokens[0])
    covered = {t for p in plans for t in p.tokens_a.tolist()}
    assert covered == set(doc.tokens.tolist())
    assert all(p.random_b_length == max(1, 61 - len(p.tokens_a)) for p in plans)


def test_one_sentence_documents_always_take_a_random_next():
    doc = tokenized_document("d", [[1, 2, 3]])
    plans = plan_pairs(doc, PairConfig(random_next_prob=0.0), seeded_generator(0))
    assert len(plans) == 1 and plans[0].is_random_next and plans[0].tokens_a.tolist() == [1, 2, 3]


def test_random_next_share_and_short_targets_follow_the_probabilities():
    # A chunk of two or more sentences is random next with probability 0.5; one-sentence chunks
    # (rare with sentences of 5-24 tokens) always are. 200 passes, ~12,000 pairs: s.e. 0.005.
    doc = _document(400)
    plans = [
        p
        for seed in range(200)
        for p in plan_pairs(doc, PairConfig(short_seq_prob=0.0), seeded_generator(seed))
    ]
    share = sum(p.is_random_next for p in plans) / len(plans)
    assert 0.49 <= share < 0.53
    # short_seq_prob=1: every pass draws a shorter target, so pairs are shorter on average.
    short = [
        p
        for seed in range(200)
        for p in plan_pairs(doc, PairConfig(short_seq_prob=1.0), seeded_generator(seed))
    ]
    assert len(short) > 1.5 * len(plans)


def test_plans_are_a_function_of_identity():
    doc = _document(30)
    config = PairConfig()
    first = _plans_as_lists(plan_pairs(doc, config, seeded_generator(5, "d", 2)))
    assert first == _plans_as_lists(plan_pairs(doc, config, seeded_generator(5, "d", 2)))
    assert first != _plans_as_lists(plan_pairs(doc, config, seeded_generator(5, "d", 3)))


def _truncate_by_reference(len_a: int, len_b: int, max_num_tokens: int) -> tuple[int, int]:
    """Tokens cut from A and from B by the reference's one-at-a-time loop."""
    cut_a = cut_b = 0
    while (len_a - cut_a) + (len_b - cut_b) > max_num_tokens:
        if len_a - cut_a > len_b - cut_b:
            cut_a += 1
        else:
            cut_b += 1
    return cut_a, cut_b


def test_truncation_cuts_the_longer_side_as_the_reference_loop():
    rng = random.Random(0)
    cases = [(100, 30), (30, 100), (61, 61), (70, 70), (1, 200), (5, 5), (300, 2), (64, 63)]
    cases += [(rng.randint(1, 300), rng.randint(1, 300)) for _ in range(300)]
    len_a = np.array([a for a, _ in cases])
    len_b = np.array([b for _, b in cases])
    keys = np.arange(len(cases), dtype=np.uint64) * np.uint64(7919)
    a_front, a_back, b_front, b_back = truncate_pairs(len_a, len_b, keys, 61)
    for k, (a, b) in enumerate(cases):
        cut_a, cut_b = _truncate_by_reference(a, b, 61)
        assert (a_front[k] + a_back[k], b_front[k] + b_back[k]) == (cut_a, cut_b), (a, b)
        assert min(a_front[k], a_back[k], b_front[k], b_back[k]) >= 0
    assert ((len_a - a_front - a_back) + (len_b - b_front - b_back) <= 61).all()
    assert not truncate_pairs(np.array([1]), np.array([2]), np.array([1], np.uint64), 10)[0].any()


def test_truncation_cuts_front_or_back_by_fair_coins():
    # 2,000 pairs with 50 cuts from A each: the front share of 100,000 coins is 0.5 +- 0.0016 (s.e.).
    n = 2000
    a_front, a_back, _, _ = truncate_pairs(np.full(n, 100), np.full(n, 10), np.arange(n, dtype=np.uint64), 60)
    assert (a_front + a_back == 50).all()
    assert abs(a_front.sum() / (50 * n) - 0.5) < 0.008
    assert a_front.std() > 2  # a binomial spread, not a fixed split


def test_hashed_uniforms_are_uniform_and_depend_on_key_counter_and_stream():
    keys = np.repeat(np.arange(1000, dtype=np.uint64), 100)
    counters = np.tile(np.arange(100), 1000)
    u = hashed_uniforms(keys, counters, 1)
    assert 0.0 <= u.min() and u.max() < 1.0
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 9500  # 10,000 expected per bin
    assert (hashed_uniforms(keys[:5], counters[:5], 1) == u[:5]).all()  # batch-independent
    assert not (hashed_uniforms(keys, counters, 2) == u).any()


def test_config_lists_problems():
    assert PairConfig(max_seq_length=128).max_num_tokens == 125
    with pytest.raises(ValueError, match="--max-seq-length.*--short-seq-prob"):
        PairConfig(max_seq_length=3, short_seq_prob=2.0)
