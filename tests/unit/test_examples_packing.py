"""Packed sentences without NSP (``pipelines examples --format packed``), on documents made in code."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pipelines.examples.finish import ExampleVocab, examples_table
from pipelines.examples.packing import pack_documents, pack_group
from pipelines.examples.pipeline import ExamplesConfig
from schemas.examples import examples_format
from tests.unit.test_examples_pairs import tokenized_document
from wordpiece.masking import MaskingConfig

SEP = 3
# A vocabulary: [PAD] [UNK] [CLS] [SEP] [MASK], then ordinary tokens.
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(6000)]


def _documents(num_documents: int, seed: int = 0, long_every: int = 0):
    """Documents of 1-12 sentences of 1-30 distinct, increasing ids (a sentence of 150 ids every
    ``long_every`` sentences), so every token's origin can be traced."""
    rng = random.Random(seed)
    documents, next_id = [], 10
    count = 0
    for d in range(num_documents):
        sentences = []
        for _ in range(rng.randint(1, 12)):
            count += 1
            n = 150 if long_every and count % long_every == 0 else rng.randint(1, 30)
            sentences.append(list(range(next_id, next_id + n)))
            next_id += n
        documents.append(tokenized_document(f"doc{d:03d}", sentences))
    return documents


def _segments(tokens: np.ndarray) -> list[list[int]]:
    """An example's content split at its document separators."""
    parts, current = [], []
    for token in tokens.tolist():
        if token == SEP:
            parts.append(current)
            current = []
        else:
            current.append(token)
    return [*parts, current]


@pytest.mark.parametrize("max_seq_length", [16, 64, 128])
def test_every_token_appears_once_in_order_and_examples_fit(max_seq_length):
    documents = _documents(60, seed=max_seq_length, long_every=17)
    packed = pack_documents(documents, max_seq_length, SEP)
    content = [t for p in packed for t in p.tokens.tolist() if t != SEP]
    assert content == [t for d in documents for t in d.tokens.tolist()]  # once each, in order
    assert all(1 <= len(p.tokens) <= max_seq_length - 2 for p in packed)
    # A new example starts only when the next sentence (or its separator) would not fit.
    starts = {int(d.tokens[o]) for d in documents for o in d.offsets[:-1].tolist()}
    room = max_seq_length - 2
    for example, following in zip(packed, packed[1:], strict=False):
        first = int(following.tokens[0])
        if first in starts:  # the next example starts with a whole sentence
            sentence = next(s for d in documents for s in _sentences(d) if s[0] == first)
            joins = following.doc_id != _doc_of(documents, int(example.tokens[-1]))
            assert len(example.tokens) + min(len(sentence), room) + joins > room


def _sentences(document):
    offsets = document.offsets.tolist()
    return [document.tokens[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def _doc_of(documents, token: int) -> str:
    return next(d.doc_id for d in documents if token in set(d.tokens.tolist()))


def test_separators_stand_exactly_at_document_boundaries():
    documents = _documents(40, seed=3)
    packed = pack_documents(documents, 128, SEP)
    for example in packed:
        segments = _segments(example.tokens)
        assert all(segments)  # never two separators in a row, never at an end
        origins = [_doc_of(documents, s[0]) for s in segments]
        assert origins[0] == example.doc_id and len(set(origins)) == len(origins) == example.num_documents
        for segment, origin in zip(segments, origins, strict=True):
            assert {_doc_of(documents, t) for t in segment} == {origin}  # one document per segment
    assert sum(p.num_documents - 1 for p in packed) > 10  # examples do cross document boundaries


def test_whole_sentences_are_kept_and_only_overlong_ones_are_cut():
    documents = _documents(30, seed=5, long_every=7)
    packed = pack_documents(documents, 64, SEP)
    pieces = [s for p in packed for s in _segments(p.tokens)]
    for d in documents:
        for sentence in _sentences(d):
            if len(sentence) <= 62:  # a sentence that fits is inside one example, whole
                assert any(_contains(piece, sentence) for piece in pieces)
    long_ones = sum(len(s) > 62 for d in documents for s in _sentences(d))
    assert long_ones and sum(p.num_split_sentences for p in packed) == long_ones


def _contains(haystack: list[int], needle: list[int]) -> bool:
    first = needle[0]
    return (
        first in haystack and haystack[haystack.index(first) : haystack.index(first) + len(needle)] == needle
    )


def test_a_too_short_length_is_refused():
    with pytest.raises(ValueError, match="max-seq-length"):
        pack_documents(_documents(2), 2, SEP)


def _packed(group, documents, vocab, seed=7):
    """``pack_group`` as ``pipelines examples --format packed --max-seq-length 64`` calls it, with
    each batch's examples as rows."""
    packed = pack_group(
        group,
        documents,
        seed=seed,
        dupe_factor=3,
        max_seq_length=64,
        masking=MaskingConfig(max_predictions_per_seq=10),
        vocab=vocab,
    )
    for columns, tally in packed:
        yield examples_table(columns, examples_format(len(TOKENS))).to_pylist(), tally


def test_rows_are_masked_by_the_rule_and_restore_to_the_input():
    vocab = ExampleVocab.build(TOKENS, random_token_from_whole_vocab=False)
    documents = _documents(50, seed=11)
    per_pass: dict[int, list[int]] = {}
    num_rows = 0
    for rows, tally in _packed(0, documents, vocab):
        for row in rows:
            num_rows += 1
            ids = np.asarray(row["input_ids"], dtype=np.int64).copy()
            positions = np.asarray(row["masked_lm_positions"], dtype=np.int64)
            assert ids[0] == vocab.cls_id and ids[-1] == vocab.sep_id and len(ids) <= 64
            assert row["num_tokens_a"] == row["num_tokens"] == len(ids) and row["next_sentence_labels"] == 0
            assert len(positions) == min(10, max(1, round(len(ids) * 0.15)))  # the reference's count
            assert np.all(np.diff(positions) > 0) and positions.min() > 0 and positions.max() < len(ids) - 1
            original = ids.copy()
            original[positions] = row["masked_lm_ids"]
            assert vocab.sep_id not in set(row["masked_lm_ids"]) and vocab.cls_id not in original[1:]
            per_pass.setdefault(row["dupe_index"], []).extend(
                t for t in original[1:-1].tolist() if t != vocab.sep_id
            )
        assert tally["examples"] == len(rows)
    everything = sorted(t for d in documents for t in d.tokens.tolist())
    assert sorted(per_pass) == [0, 1, 2]
    for tokens in per_pass.values():
        assert sorted(tokens) == everything  # every token once per dupe pass
    assert per_pass[0] != per_pass[1]  # each pass packs the documents in another order
    assert num_rows > 3 * 20


def test_packing_does_not_depend_on_the_order_documents_arrive_in():
    vocab = ExampleVocab.build(TOKENS, random_token_from_whole_vocab=False)
    documents = _documents(30, seed=2)
    shuffled = list(documents)
    random.Random(1).shuffle(shuffled)

    def rows(docs, seed=7):
        return [row for batch, _ in _packed(5, docs, vocab, seed) for row in batch]

    assert rows(documents) == rows(shuffled)
    assert rows(documents) != rows(documents, seed=8)


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="--format takes pairs, packed"):
        ExamplesConfig(corpus="c", vocab="v", output="o", format="roberta")
