"""Numerical parity of our encoder with transformers' ``BertModel`` on real weights (all-MiniLM-L6-v2)."""

from __future__ import annotations

import pytest
import torch

from pretrain.model import BertForPreTraining
from wordpiece.tokenizer import WordPieceTokenizer

transformers = pytest.importorskip("transformers")

SENTENCES = [
    ("The Academy Awards were first presented in 1929 at the Hollywood Roosevelt Hotel.", None),
    ("Anarchism is a political philosophy.", "It is sceptical of authority and rejects hierarchy."),
    ("Short one.", None),
    (
        "Albedo is the fraction of sunlight that is diffusely reflected by a body.",
        "Snow reflects most of it.",
    ),
]


def encode_batch(folder) -> dict[str, torch.Tensor]:
    """Tokenise with transformers' fast tokenizer (bert-base-uncased vocab), padded to the batch max."""
    tokenizer = transformers.BertTokenizerFast.from_pretrained(str(folder))
    firsts, seconds = [a for a, _ in SENTENCES], [b or "" for _, b in SENTENCES]
    batch = tokenizer(firsts, seconds, padding=True, return_tensors="pt")
    # Cross-check with our own WordPiece tokenizer on the single sentences (no [UNK]s either way).
    ours = WordPieceTokenizer.load(str(folder / "vocab.txt"), cased=False)
    theirs = tokenizer(SENTENCES[0][0], add_special_tokens=False)["input_ids"]
    assert ours.encode(SENTENCES[0][0]) == theirs
    assert tokenizer.unk_token_id not in batch["input_ids"][batch["attention_mask"].bool()]
    return batch


@pytest.mark.slow
def test_encoder_matches_transformers_bert_model(minilm_folder):
    batch = encode_batch(minilm_folder)
    assert (batch["attention_mask"] == 0).any() and (batch["token_type_ids"] == 1).any()
    theirs = transformers.BertModel.from_pretrained(str(minilm_folder)).eval()
    ours = BertForPreTraining.from_pretrained(minilm_folder).eval()
    with torch.no_grad():
        expected = theirs(**batch)
        sequence, pooled = ours.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    real = batch["attention_mask"].bool()  # outputs at padded positions are not defined by either model
    sequence_diff = (sequence - expected.last_hidden_state)[real].abs().max().item()
    pooled_diff = (pooled - expected.pooler_output).abs().max().item()
    assert sequence_diff <= 1e-5, sequence_diff
    assert pooled_diff <= 1e-5, pooled_diff


@pytest.mark.slow
def test_minilm_round_trips_through_our_export(minilm_folder, tmp_path):
    ours = BertForPreTraining.from_pretrained(minilm_folder).eval()
    ours.save_pretrained(tmp_path / "hf")
    theirs, info = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    batch = encode_batch(minilm_folder)
    with torch.no_grad():
        expected = theirs.eval()(**batch)
        got = ours(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    real = batch["attention_mask"].bool()
    assert (got.prediction_logits - expected.prediction_logits)[real].abs().max().item() <= 1e-4
    assert (got.seq_relationship_logits - expected.seq_relationship_logits).abs().max().item() <= 1e-5
