"""Long inputs in time linear in their length. ``finetune ner`` on one sentence of 10,000 words
took over 600 s (window building grew with the cube of the length: 2,000 words 7 s, 4,000 words
55 s); SQuAD's windows grew with the square of a context's length. Both now take seconds."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
import torch

from finetune.squad import SquadConfig, SquadExample, build_features
from tests.conftest import SHARED_DATA, require, save_tiny_bert
from tests.faults.finetune_inputs import invoke

WORDS = "the european union rejected german calls to boycott british lamb".split()
TAGS = ["O", "B-ORG", "I-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O"]


def test_the_windows_of_a_sentence_of_100000_words_take_a_second():
    from finetune.conll import Sentence
    from finetune.ner_windows import sentence_features
    from tests.unit.test_finetune_ner import _Encoder  # a word of n letters is n sub-tokens

    words = tuple(random.Random(2).choice(WORDS) for _ in range(100_000))
    sentence = Sentence(words, ("O",) * len(words), 1, 1)
    start = time.perf_counter()
    windows = sentence_features([sentence], _Encoder(), ["O"], 128)
    seconds = time.perf_counter() - start
    labelled = sum(t != -100 for f in windows.features for t in f["labels"])
    assert windows.num_long == 1 and labelled == len(words) == len(windows.words[0])
    assert seconds < 10, seconds


@pytest.fixture
def one_thread():
    """One thread: two OpenMP threads on a busy 2-core machine are several times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_ner_on_a_sentence_of_10000_words_takes_seconds_and_tags_every_word(tmp_path: Path, one_thread):
    rng = random.Random(0)
    picks = [rng.randrange(len(WORDS)) for _ in range(10_000)]
    sentence = "".join(f"{WORDS[k]} NN O {TAGS[k]}\n" for k in picks)
    (tmp_path / "data").mkdir()
    for name in ("train.txt", "valid.txt"):
        (tmp_path / "data" / name).write_text(f"-DOCSTART- -X- O O\n\n{sentence}\nEU NNP B-NP B-ORG\n")
    bert = save_tiny_bert(tmp_path / "bert")
    args = [
        "ner",
        "--data-dir",
        str(tmp_path / "data"),
        "--checkpoint",
        str(bert),
        "--output",
        str(tmp_path / "out"),
    ]
    code, errors, seconds = invoke(
        [*args, "--epochs", "1", "--max-seq-length", "128", "--batch-size", "64", "--device", "cpu"],
        within_s=120,
    )
    assert code == 0 and not errors, errors
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert (
        metrics["windows"]["valid"]["longer_than_one_window"] == 1
        and metrics["windows"]["valid"]["windows"] > 150
    )
    predicted = (tmp_path / "out" / "valid_predictions.txt").read_text().split("\n\n")[0].splitlines()
    assert len(predicted) == 10_000
    assert seconds < 60, seconds


def test_squad_windows_over_a_context_of_100000_words_take_seconds():
    from wordpiece.tokenizer import WordPieceTokenizer

    tokenizer = WordPieceTokenizer.load(
        str(require(SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt")), cased=False
    )
    context = " ".join(random.Random(1).choice(WORDS) for _ in range(100_000))
    example = SquadExample("q", "who rejected the calls?", context, ("european union",), False, None, None)
    start = time.perf_counter()
    features = build_features([example], tokenizer.tokenizer, SquadConfig())
    seconds = time.perf_counter() - start
    assert sum(sum(f.max_context) for f in features) == 100_000  # each context token owned by one window
    assert seconds < 20, seconds
