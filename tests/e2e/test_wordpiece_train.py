"""`wordpiece train` end to end on the corpus made from the real enwiki excerpt."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer

from tests.e2e.conftest import FAST_RUNNER, run_wordpiece
from wordpiece.tokenizer import WordPieceTokenizer, read_vocab_file

pytestmark = pytest.mark.slow

TRAIN = ("--vocab-size", "4000", "--num-unused", "20", "--num-count-shards", "2")


@pytest.fixture(scope="module")
def vocab_dir(corpus_output, tmp_path_factory):
    out = tmp_path_factory.mktemp("vocab") / "out"
    run_wordpiece("train", "--corpus", str(corpus_output), "--output", str(out), *TRAIN, *FAST_RUNNER)
    return out


def test_writes_a_bert_layout_vocabulary_and_a_loadable_tokenizer(vocab_dir):
    vocab = read_vocab_file(str(vocab_dir / "vocab.txt"))
    assert len(vocab) == 4000
    assert vocab[:2] == ["[PAD]", "[unused0]"] and vocab[21:25] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert not any(any(c.isupper() for c in token) for token in vocab[25:])  # uncased
    from_json = Tokenizer.from_file(str(vocab_dir / "tokenizer.json"))
    ours = WordPieceTokenizer.load(str(vocab_dir / "vocab.txt"), cased=False)
    text = "The Academy Awards were first presented in 1929 at the Hollywood Roosevelt Hotel."
    assert from_json.encode(text, add_special_tokens=False).ids == ours.encode(text)
    assert ours.tokens(text)[:2] == ["the", "academy"]
    from transformers import BertTokenizerFast

    hf = BertTokenizerFast(tokenizer_file=str(vocab_dir / "tokenizer.json"))
    assert hf(text, add_special_tokens=False)["input_ids"] == ours.encode(text)


def test_stats_and_manifest(vocab_dir):
    stats = json.loads((vocab_dir / "stats.json").read_text())
    assert stats["vocab_size"] == 4000 and stats["measured_on"] == "validation"
    assert 1.0 < stats["pieces_per_word"] < 2.0 and stats["unk_piece_rate"] < 0.01
    assert stats["distinct_words"] > 10_000
    assert (vocab_dir / "COMPLETED").exists()


def test_identical_vocabulary_with_two_worker_processes(vocab_dir, corpus_output, tmp_path):
    out = tmp_path / "two"
    run_wordpiece(
        "train",
        "--corpus",
        str(corpus_output),
        "--output",
        str(out),
        *TRAIN,
        "--runner",
        "DirectRunner",
        "--direct_num_workers",
        "2",
        "--direct_running_mode",
        "multi_processing",
    )
    assert (out / "vocab.txt").read_bytes() == (vocab_dir / "vocab.txt").read_bytes()
    assert (out / "tokenizer.json").read_bytes() == (vocab_dir / "tokenizer.json").read_bytes()


def test_bad_inputs_are_one_line_errors(vocab_dir, corpus_output, tmp_path):
    result = run_wordpiece(
        "train", "--corpus", str(tmp_path / "missing"), "--output", str(tmp_path / "o"), expect=1
    )
    assert "not a completed stage output" in result.output
    result = run_wordpiece(
        "train", "--corpus", str(corpus_output), "--output", str(vocab_dir), *TRAIN, expect=1
    )
    assert "of a completed `wordpiece train` run" in result.output and "pass --overwrite" in result.output
    result = run_wordpiece(
        "train",
        "--corpus",
        str(corpus_output),
        "--output",
        str(tmp_path / "small"),
        "--vocab-size",
        "60",
        "--num-unused",
        "0",
        *FAST_RUNNER,
        expect=1,
    )
    assert "is smaller than the alphabet" in result.output
