"""`finetune ner` on sentences longer than --max-seq-length, on real CoNLL-2003 sentences: no
word past the first window is left tagged `O` unread. Every word of a long sentence is
read in overlapping windows and tagged from the window where it has the most context, and the
run says how many sentences needed more than one window.

The equality tests use a model whose output at a token depends on that token alone (attention
outputs and position embeddings zeroed; for the feature-based head, a BiLSTM that forgets at once
and has no recurrent weights): then the windows must give exactly what one window over the whole
sentence gives, which holds only if every word is read at the right position of the right window.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from finetune.cli import main as finetune_main
from finetune.config import FitConfig
from finetune.conll import read_conll
from finetune.encoder import load_encoder
from finetune.heads import Classifier, FeatureTagger
from finetune.ner import label_set, tag_windows
from finetune.ner_features import tag_feature_based
from finetune.ner_windows import sentence_features
from pretrain.hf import export_hf
from pretrain.model import BertConfig, BertForPreTraining
from schemas import storage
from tests.conftest import SHARED_DATA, require

CONLL = SHARED_DATA / "ner" / "conll2003"
VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"
SHORT = 16  # 14 sub-tokens a window: a third of the sentences below are longer
CONFIG = FitConfig(epochs=1, lr=1e-3, batch_size=16, seed=3, device="cpu", precision="fp32", progress=False)


@pytest.fixture(scope="module")
def context_free(tmp_path_factory) -> Path:
    """An HF folder of a 2-layer BERT (bert-base-uncased's vocabulary, 512 positions) whose
    hidden state at a token is a function of that token's id alone."""
    config = BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    model = BertForPreTraining(config, seed=7).eval()
    with torch.no_grad():
        model.bert.embeddings.position_embeddings.weight.zero_()
        for layer in model.bert.encoder.layer:
            layer.attention.output.dense.weight.zero_()
            layer.attention.output.dense.bias.zero_()
    folder = tmp_path_factory.mktemp("context-free") / "model"
    export_hf(model, storage.Folder(folder), require(VOCAB), do_lower_case=True)
    return folder


@pytest.fixture(scope="module")
def sentences():
    return read_conll(str(require(CONLL / "valid.txt")))[:200]


def _whole(sentences, encoder, labels) -> int:
    """The shortest --max-seq-length that reads every sentence in one window (model allows 512)."""
    spans = sentence_features(sentences, encoder, labels, 512, spans=True).features
    longest = max(f["sentence_end"] - f["sentence_start"] for f in spans)
    assert longest + 2 <= encoder.max_positions
    return longest + 2


def _sharpened(head: torch.nn.Linear) -> None:
    """Logits ten times apart: an argmax that float rounding between batch shapes cannot flip."""
    with torch.no_grad():
        head.weight.mul_(100.0)


def test_every_word_of_a_long_sentence_is_tagged_as_one_long_window_tags_it(context_free, sentences):
    encoder = load_encoder(str(context_free))
    labels = label_set(sentences)
    model = Classifier(encoder.model, len(labels), per="token", seed=1).eval()
    _sharpened(model.classifier)
    windows = sentence_features(sentences, encoder, labels, SHORT)
    whole = sentence_features(sentences, encoder, labels, _whole(sentences, encoder, labels))
    assert whole.num_long == 0 and 40 <= windows.num_long < len(sentences)
    tags = tag_windows(model, windows, labels, CONFIG)
    assert [len(t) for t in tags] == [len(s.words) for s in sentences]  # every word tagged
    assert tags == tag_windows(model, whole, labels, CONFIG)
    assert len({t for sentence in tags for t in sentence}) >= 3  # not one tag for everything
    # Words past the first window are tagged by the model, not filled with O.
    long = [
        i for i, s in enumerate(sentences) if len(sentence_features([s], encoder, labels, SHORT).features) > 1
    ]
    assert any(t != "O" for i in long for t in tags[i][len(tags[i]) // 2 :])


def _forgetful(tagger: FeatureTagger) -> None:
    """The BiLSTM reads each position alone: no recurrent weights, the forget gate shut."""
    lstm = tagger.bilstm.lstm
    with torch.no_grad():
        for name, tensor in lstm.named_parameters():
            if name.startswith("weight_hh"):
                tensor.zero_()
            elif name.startswith("bias_ih"):
                tensor[lstm.hidden_size : 2 * lstm.hidden_size] = -1e4  # sigmoid(-1e4) == 0.0
    _sharpened(tagger.classifier)


@pytest.mark.parametrize("cached", [False, True])
def test_the_feature_based_tagger_reads_every_word_too(context_free, sentences, tmp_path, cached):
    sentences = sentences[:80]  # the BiLSTM is slow on the CPU
    encoder = load_encoder(str(context_free))
    labels = label_set(sentences)
    tagger = FeatureTagger(encoder.model, len(labels), "sum-all", lstm_units=8, seed=2).eval()
    _forgetful(tagger)
    folder = storage.Folder(tmp_path / "cache") if cached else None

    def tag(max_seq_length: int) -> list[list[str]]:
        windows = sentence_features(sentences, encoder, labels, max_seq_length, spans=True)
        tags, how = tag_feature_based(
            tagger, windows, labels, CONFIG, folder=folder, split=f"valid{max_seq_length}", source="test"
        )
        assert how == ("written" if cached else "live")
        return tags

    tags = tag(SHORT)
    assert sentence_features(sentences, encoder, labels, SHORT).num_long >= 20
    assert [len(t) for t in tags] == [len(s.words) for s in sentences]
    assert tags == tag(_whole(sentences, encoder, labels))
    assert len({t for sentence in tags for t in sentence}) >= 3


def test_the_command_tags_every_word_and_counts_the_long_sentences(context_free, tmp_path, caplog):
    out = tmp_path / "ner"
    args = [
        "ner",
        "--data-dir",
        str(require(CONLL)),
        "--checkpoint",
        str(context_free),
        "--output",
        str(out),
        "--max-seq-length",
        str(SHORT),
        "--max-train-examples",
        "32",
        "--max-eval-examples",
        "200",
        "--epochs",
        "1",
        "--batch-size",
        "16",
        "--device",
        "cpu",
    ]
    with caplog.at_level(logging.INFO, logger="finetune.ner"):
        result = CliRunner().invoke(finetune_main, args)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout[result.stdout.index("{") :])
    metrics = json.loads((out / "metrics.json").read_text())
    valid = metrics["windows"]["valid"]
    assert valid["sentences"] == 200 and 40 <= valid["longer_than_one_window"] < 200
    assert valid["windows"] > 200 and metrics["doc_stride"] == (SHORT - 2) // 2
    assert printed["longer_than_one_window"] == {
        "train": metrics["windows"]["train"]["longer_than_one_window"],
        "valid": valid["longer_than_one_window"],
    }
    count = f"{valid['longer_than_one_window']} of 200 valid sentences were longer than one window"
    assert count in caplog.text
    gold = read_conll(str(CONLL / "valid.txt"))[:200]
    blocks = [b.splitlines() for b in (out / "valid_predictions.txt").read_text().split("\n\n") if b.strip()]
    assert [len(b) for b in blocks] == [len(s.words) for s in gold]  # every word has a prediction
    assert all(len(line.split()) == 3 for b in blocks for line in b)


def test_a_doc_stride_below_one_is_refused_before_anything_is_read(tmp_path):
    args = ["ner", "--data-dir", str(tmp_path / "missing"), "--checkpoint", str(tmp_path / "missing")]
    result = CliRunner().invoke(finetune_main, [*args, "--output", str(tmp_path / "o"), "--doc-stride", "0"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert [line for line in result.output.splitlines() if "rror" in line] == [
        "error: --doc-stride must be at least 1, got 0"
    ]
    assert not (tmp_path / "o").exists()
