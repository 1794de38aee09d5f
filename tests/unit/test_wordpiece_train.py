"""Learning a vocabulary from word counts: layout, alphabet, determinism, agreement with tokenizers' trainer."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from tests.conftest import GUTENBERG, SHARED_DATA, require
from wordpiece.tokenizer import pre_tokenize
from wordpiece.train import VocabConfig, alphabet_of, cutoff_of, learn_pieces, vocab_layout


def test_layout_matches_the_released_vocabulary():
    head = vocab_layout([], 994)
    assert head.index("[UNK]") == 100 and head.index("[MASK]") == 103 and head.index("[unused99]") == 104
    assert len(head) == 999
    released = (
        require(SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt").read_text(encoding="utf-8").split("\n")
    )
    assert head == released[:999]


def test_layout_without_unused_slots_and_duplicate_pieces():
    assert vocab_layout(["a", "##b", "[UNK]", "ab"], 0) == [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "a",
        "##b",
        "ab",
    ]
    assert vocab_layout(["x"], 2)[:7] == [
        "[PAD]",
        "[unused0]",
        "[unused1]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
    ]


def test_alphabet_is_chosen_by_frequency_then_code_point():
    alphabet = alphabet_of([("ab", 3), ("ba", 3), ("c", 6), ("dz", 1)], limit=3)
    assert alphabet.kept == ("a", "b", "c")  # c:6, a:6, b:6 beat d:1, z:1
    assert alphabet.continuing == ("a", "b") and alphabet.num_distinct == 5


def test_max_words_keeps_the_most_frequent_ties_first_in_word_order():
    counts = [("a", 5), ("b", 2), ("c", 9), ("d", 2), ("e", 2), ("f", 1)]
    cutoff = cutoff_of(counts, 4)
    assert list(cutoff.kept(counts)) == [("a", 5), ("b", 2), ("c", 9), ("d", 2)]
    assert (cutoff.distinct, cutoff.learned, cutoff.occurrences, cutoff.occurrences_left_out) == (6, 4, 21, 3)
    everything = cutoff_of(counts, 6)
    assert list(everything.kept(counts)) == counts and everything.occurrences_left_out == 0
    assert list(cutoff_of(counts, 2).kept(counts)) == [("a", 5), ("c", 9)]


def test_config_lists_every_problem():
    with pytest.raises(ValueError) as err:
        VocabConfig(
            corpus="",
            output="",
            vocab_size=100,
            num_unused=200,
            min_frequency=0,
            splits=("dev",),
            max_words=0,
        )
    for flag in ("--corpus", "--output", "--vocab-size 100", "--min-frequency", "--split", "--max-words"):
        assert flag in str(err.value)
    assert (
        "--vocab-size 100 leaves no room for word pieces after 5 special tokens and 200 [unused] slots: "
        in (str(err.value))
    )  # the reserve rule chain checks with too (wordpiece.tokenizer.reserve_problem)


def _book_counts() -> list[tuple[str, int]]:
    counts: Counter = Counter()
    text = sorted(require(GUTENBERG).glob("*.txt"))[3].read_text(encoding="utf-8-sig", errors="replace")
    for line in text.splitlines():
        counts.update(pre_tokenize(line, cased=False))
    return sorted(counts.items())


_LEARN_IN_A_NEW_PROCESS = """
import json, sys
from wordpiece.train import VocabConfig, alphabet_of, learn_pieces
counts = [tuple(x) for x in json.load(sys.stdin)]
config = VocabConfig(corpus="c", output="o", vocab_size=3000, num_unused=0, limit_alphabet=70)
alphabet = alphabet_of(counts, config.limit_alphabet)
print(json.dumps(learn_pieces(counts, alphabet, config, 2995)))
"""


def test_learning_is_identical_across_processes():
    counts = json.dumps(_book_counts())
    runs = [
        subprocess.run(
            [sys.executable, "-c", _LEARN_IN_A_NEW_PROCESS],
            input=counts,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for _ in range(3)
    ]
    assert runs[0] == runs[1] == runs[2]
    pieces = json.loads(runs[0])
    assert len(pieces) == 2995 and len(set(pieces)) == 2995


def test_agrees_with_tokenizers_own_trainer_on_the_text():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    counts = _book_counts()
    config = VocabConfig(corpus="c", output="o", vocab_size=2005, num_unused=0, limit_alphabet=10_000)
    ours = learn_pieces(counts, alphabet_of(counts, config.limit_alphabet), config, 2000)
    peer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    peer.normalizer = normalizers.BertNormalizer(lowercase=True)
    peer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    text = (
        sorted(require(GUTENBERG).glob("*.txt"))[3]
        .read_text(encoding="utf-8-sig", errors="replace")
        .splitlines()
    )
    peer.train_from_iterator(
        text,
        trainers.WordPieceTrainer(
            vocab_size=2000, min_frequency=2, continuing_subword_prefix="##", show_progress=False
        ),
    )
    theirs = set(peer.get_vocab())
    # The same counts and merges; only ties at the last merges can differ (theirs are broken at random).
    assert len(set(ours) & theirs) / len(set(ours) | theirs) > 0.99
