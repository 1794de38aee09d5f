"""The activation cache that feature-based NER runs share (``finetune ner --feature-cache``): one
run writes every layer, a later run with another --features choice reads the same file and gets
exactly the layers it would have computed; other weights or inputs miss; a bad file is refused."""

from __future__ import annotations

import pytest
import torch

from finetune.config import FitConfig
from finetune.heads import FeatureTagger, cache_layers, collate_tokens
from finetune.ner_features import inputs_digest, weights_digest, with_layers
from schemas import storage
from schemas.commands import CommandError
from tests.unit.test_finetune_heads import LAYERS, _features, _with_spans, tiny_encoder

CONFIG = FitConfig(epochs=1, lr=1e-3, batch_size=4, seed=0, device="cpu", precision="fp32", progress=False)


def test_one_written_cache_serves_every_choice(tmp_path):
    features = _with_spans(_features(7))
    encoder = tiny_encoder().bert
    first = FeatureTagger(encoder, 3, "concat-last-4", lstm_units=8)
    written, how = with_layers(first, features, CONFIG, folder=storage.Folder(tmp_path), split="train")
    assert how == "written" and len(list(tmp_path.glob("*.safetensors"))) == 1
    assert not list(tmp_path.glob("*.tmp"))
    for choice in ("sum-all", "embeddings", "concat-last-4"):
        tagger = FeatureTagger(encoder, 3, choice, lstm_units=8)
        read, how = with_layers(tagger, features, CONFIG, folder=storage.Folder(tmp_path), split="train")
        direct = cache_layers(
            tagger,
            features,
            collate_tokens,
            batch_size=CONFIG.eval_batch_size,
            device=torch.device("cpu"),
            precision="fp32",
        )
        assert how == "read", choice
        for got, want in zip(read, direct, strict=True):
            assert got["input_ids"] == want["input_ids"] and got["labels"] == want["labels"]
            assert torch.equal(got["layers"], want["layers"]), choice
    assert len(list(tmp_path.glob("*.safetensors"))) == 1


def test_other_weights_or_inputs_do_not_reuse_the_cache(tmp_path):
    features = _with_spans(_features(5))
    a, b = tiny_encoder(seed=0).bert, tiny_encoder(seed=1).bert
    assert weights_digest(a) == weights_digest(tiny_encoder(seed=0).bert) != weights_digest(b)
    key = inputs_digest(weights_digest(a), "fp32", features)
    moved = [dict(f) for f in features]
    moved[0]["sentence_start"] += 1
    assert key != inputs_digest(weights_digest(a), "fp32", moved)
    assert key != inputs_digest(weights_digest(a), "bf16", features)
    relabelled = [{**f, "labels": [0] * len(f["labels"])} for f in features]
    assert key == inputs_digest(weights_digest(a), "fp32", relabelled)  # labels are not activations
    with_layers(FeatureTagger(a, 3, "last", lstm_units=8), features, CONFIG, folder=storage.Folder(tmp_path))
    _, how = with_layers(
        FeatureTagger(b, 3, "last", lstm_units=8), features, CONFIG, folder=storage.Folder(tmp_path)
    )
    assert how == "written" and len(list(tmp_path.glob("*.safetensors"))) == 2


def test_a_damaged_cache_file_is_refused_by_name(tmp_path):
    features = _with_spans(_features(4))
    tagger = FeatureTagger(tiny_encoder().bert, 3, "last", lstm_units=8)
    with_layers(tagger, features, CONFIG, folder=storage.Folder(tmp_path))
    (path,) = tmp_path.glob("*.safetensors")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CommandError, match=rf"{path.name}: not a readable feature cache .*delete it"):
        with_layers(tagger, features, CONFIG, folder=storage.Folder(tmp_path))
    assert LAYERS + 1 == tagger.bert.config.num_hidden_layers + 1
