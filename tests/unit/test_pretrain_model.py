"""The BERT model, its config, loss helper and HF conversion, on tiny random configs (CPU, fast)."""

from __future__ import annotations

import json

import pytest
import safetensors.torch
import torch
import torch.nn.functional as F

from pretrain import hf
from pretrain.config import PRESETS
from pretrain.model import (
    BertConfig,
    BertForPreTraining,
    compile_for_training,
    pretraining_loss,
    training_flops_per_token,
)
from schemas import storage
from schemas.commands import InputError

VOCAB = 100  # padded to 128 inside the model


def tiny_config(**overrides) -> BertConfig:
    fields = {
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    }
    return BertConfig(**{**fields, **overrides})


def random_batch(batch: int = 3, length: int = 16, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([length, length - 5, length - 9][:batch])
    real = torch.arange(length)[None, :] < lengths[:, None]
    input_ids = torch.randint(1, VOCAB, (batch, length), generator=g) * real
    token_type_ids = (torch.arange(length)[None, :] >= (lengths[:, None] // 2)).long() * real
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": real.long(),
        "masked_lm_positions": torch.tensor([[1, 2, 5, 0], [3, 4, 0, 0], [1, 0, 0, 0]][:batch]),
        "masked_lm_ids": torch.randint(0, VOCAB, (batch, 4), generator=g),
        "masked_lm_weights": torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]][:batch]),
        "next_sentence_labels": torch.tensor([0, 1, 0][:batch]),
    }


def same_state(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """Bitwise equality of two models' state dicts (same names, same tensors)."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.fixture
def model() -> BertForPreTraining:
    m = BertForPreTraining(tiny_config(), seed=3).eval()
    with torch.no_grad():  # non-trivial values everywhere (LayerNorm, biases start at 1/0)
        g = torch.Generator().manual_seed(4)
        for p in m.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
        m.bert.embeddings.word_embeddings.weight[VOCAB:].zero_()
        m.cls.predictions.bias[VOCAB:].zero_()
    return m


# --- config ---------------------------------------------------------------------------------------


def test_presets_follow_the_paper_and_the_miniatures():
    expected = {"tiny": (2, 128), "mini": (4, 256), "small": (4, 512), "medium": (8, 512)}
    expected |= {"base": (12, 768), "large": (24, 1024)}
    assert {n: PRESETS[n] for n in expected} == expected
    base = BertConfig.preset("base", vocab_size=30522)
    assert (base.num_attention_heads, base.intermediate_size, base.padded_vocab_size) == (12, 3072, 30528)
    assert BertConfig.preset("large", vocab_size=30522).num_attention_heads == 16
    assert BertConfig.preset("tiny", 8000, hidden_dropout_prob=0.0).hidden_dropout_prob == 0.0
    # bert-base-uncased has 110M parameters (108.9M with the pooler, without the tied decoder)
    assert 109_000_000 < sum(p.numel() for p in BertForPreTraining(base).parameters()) < 111_000_000


def test_config_validation_lists_every_problem():
    with pytest.raises(ValueError) as err:
        BertConfig(vocab_size=0, hidden_size=100, num_attention_heads=3, hidden_dropout_prob=1.5)
    message = str(err.value)
    assert "vocab_size" in message and "hidden_dropout_prob" in message and "multiple" in message
    with pytest.raises(ValueError, match="unknown config preset"):
        BertConfig.preset("huge", vocab_size=10)


def test_config_dict_round_trips():
    config = tiny_config(pad_vocab_to_multiple=8)
    assert BertConfig.from_hf_dict(config.to_hf_dict()) == config
    with pytest.raises(ValueError, match="hidden_act"):
        BertConfig.from_hf_dict({**config.to_hf_dict(), "hidden_act": "relu"})


# --- forward --------------------------------------------------------------------------------------


def test_shapes(model):
    b = random_batch()
    sequence, pooled = model.bert(b["input_ids"], b["token_type_ids"], b["attention_mask"])
    assert sequence.shape == (3, 16, 32) and pooled.shape == (3, 32)
    out = model(b["input_ids"], b["token_type_ids"], b["attention_mask"], b["masked_lm_positions"])
    assert out.prediction_logits.shape == (3, 4, VOCAB)  # real vocabulary, not the padded 128
    assert out.seq_relationship_logits.shape == (3, 2)
    assert model(b["input_ids"]).prediction_logits.shape == (3, 16, VOCAB)


def test_sparse_logits_equal_dense_logits_gathered(model):
    b = random_batch()
    args = (b["input_ids"], b["token_type_ids"], b["attention_mask"])
    sparse = model(*args, masked_lm_positions=b["masked_lm_positions"])
    dense = model(*args)
    gathered = torch.stack([dense.prediction_logits[i, b["masked_lm_positions"][i]] for i in range(3)])
    torch.testing.assert_close(sparse.prediction_logits, gathered, rtol=0, atol=1e-6)
    torch.testing.assert_close(sparse.seq_relationship_logits, dense.seq_relationship_logits)


def test_padding_does_not_change_real_positions(model):
    ids = torch.randint(1, VOCAB, (1, 9), generator=torch.Generator().manual_seed(1))
    types = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1, 1]])
    alone, alone_pooled = model.bert(ids, types)
    padded = torch.cat([ids, torch.randint(1, VOCAB, (1, 7))], dim=1)  # junk, not just [PAD]
    mask = torch.tensor([[1] * 9 + [0] * 7])
    out, pooled = model.bert(padded, torch.cat([types, torch.ones(1, 7, dtype=torch.long)], 1), mask)
    torch.testing.assert_close(out[:, :9], alone, rtol=0, atol=1e-5)
    torch.testing.assert_close(pooled, alone_pooled, rtol=0, atol=1e-5)


def test_one_projection_matmul_equals_the_three_linear_layers(model):
    attention = model.bert.encoder.layer[1].attention.self
    x = torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(2))
    fused = attention.projections(x)  # [3, 5, 3 (q, k, v), heads, head_dim]
    for index, linear in enumerate((attention.query, attention.key, attention.value)):
        torch.testing.assert_close(fused[:, :, index].flatten(-2), linear(x), rtol=1e-6, atol=1e-6)


def test_dropout_only_in_training(model):
    b = random_batch()
    args = (b["input_ids"], b["token_type_ids"], b["attention_mask"], b["masked_lm_positions"])
    assert torch.equal(model(*args).prediction_logits, model(*args).prediction_logits)
    model.train()
    assert not torch.equal(model(*args).prediction_logits, model(*args).prediction_logits)


def test_init_is_bert_init_and_seeded():
    model = BertForPreTraining(BertConfig.preset("mini", vocab_size=1000), seed=7)
    word = model.bert.embeddings.word_embeddings.weight
    assert model.cls.predictions.decoder.weight is word
    assert abs(word[:1000].std().item() - 0.02) < 1e-3 and torch.all(word[1000:] == 0)
    layer = model.bert.encoder.layer[0]
    assert abs(layer.attention.self.query.weight.std().item() - 0.02) < 1e-3
    assert torch.all(layer.attention.self.query.bias == 0)
    assert torch.all(layer.output.LayerNorm.weight == 1) and torch.all(layer.output.LayerNorm.bias == 0)
    again = BertForPreTraining(BertConfig.preset("mini", vocab_size=1000), seed=7)
    assert same_state(model, again)


def test_padded_vocab_rows_get_no_gradient(model):
    model.train()
    b = random_batch()
    out = model(b["input_ids"], b["token_type_ids"], b["attention_mask"], b["masked_lm_positions"])
    loss = pretraining_loss(out, b["masked_lm_ids"], b["masked_lm_weights"], b["next_sentence_labels"])
    loss.total.backward()
    assert torch.all(model.bert.embeddings.word_embeddings.weight.grad[VOCAB:] == 0)
    assert torch.all(model.cls.predictions.bias.grad[VOCAB:] == 0)


# --- loss and cost --------------------------------------------------------------------------------


def test_loss_matches_manual_cross_entropy(model):
    b = random_batch()
    out = model(b["input_ids"], b["token_type_ids"], b["attention_mask"], b["masked_lm_positions"])
    loss = pretraining_loss(out, b["masked_lm_ids"], b["masked_lm_weights"], b["next_sentence_labels"])
    real = b["masked_lm_weights"].bool()
    manual_mlm = F.cross_entropy(out.prediction_logits[real], b["masked_lm_ids"][real])
    manual_nsp = F.cross_entropy(out.seq_relationship_logits, b["next_sentence_labels"])
    torch.testing.assert_close(loss.mlm_loss, manual_mlm, rtol=1e-5, atol=0)
    torch.testing.assert_close(loss.nsp_loss, manual_nsp)
    torch.testing.assert_close(loss.total, manual_mlm + manual_nsp, rtol=1e-5, atol=0)
    predicted = out.prediction_logits.argmax(-1)
    assert loss.mlm_count.item() == 6
    assert loss.mlm_correct.item() == (predicted == b["masked_lm_ids"])[real].sum().item()
    assert loss.nsp_count.item() == 3
    nsp_correct = (out.seq_relationship_logits.argmax(-1) == b["next_sentence_labels"]).sum()
    assert loss.nsp_correct.item() == nsp_correct.item()


def test_flops_per_token_formula():
    config = BertConfig.preset("base", vocab_size=30522)
    h, n = 768, 12 * (4 * 768 * 768 + 2 * 768 * 3072)
    dense_head = 6 * (h * h + h * 30522)
    assert training_flops_per_token(config, 128, 1.0) == 6 * n + 12 * 12 * h * 128 + dense_head
    assert training_flops_per_token(config, 128) < training_flops_per_token(config, 128, 1.0)


def test_compiling_for_training_works_in_place_and_keeps_names_and_outputs(model):
    b = random_batch()
    inputs = (b["input_ids"], b["token_type_ids"], b["attention_mask"], b["masked_lm_positions"])
    targets = (b["masked_lm_ids"], b["masked_lm_weights"], b["next_sentence_labels"])
    names, expected = list(model.state_dict()), model(*inputs)
    compiled_loss = compile_for_training(model, backend="eager")
    out = model(*inputs)  # the same module: DDP and the checkpoints see its parameter names
    assert list(model.state_dict()) == names
    torch.testing.assert_close(out.prediction_logits, expected.prediction_logits)
    torch.testing.assert_close(compiled_loss(out, *targets).total, pretraining_loss(expected, *targets).total)


# --- save / load / HF interop ---------------------------------------------------------------------


def test_save_and_load_round_trip_bitwise(model, tmp_path):
    model.save_pretrained(tmp_path / "ours")
    loaded = BertForPreTraining.from_pretrained(tmp_path / "ours")
    assert loaded.config == model.config
    ours, theirs = model.state_dict(), loaded.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert loaded.cls.predictions.decoder.weight is loaded.bert.embeddings.word_embeddings.weight


def test_save_works_on_fsspec_urls(model):
    model.save_pretrained("memory://bert/ours")
    loaded = BertForPreTraining.from_pretrained("memory://bert/ours")
    assert same_state(model, loaded)


def test_export_trims_vocab_and_drops_tied_decoder(model, tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"tok{i}\n" for i in range(VOCAB)))
    hf.export_hf(model, storage.Folder(tmp_path / "hf"), vocab)
    tensors = safetensors.torch.load_file(tmp_path / "hf" / "model.safetensors")
    assert tensors["bert.embeddings.word_embeddings.weight"].shape == (VOCAB, 32)
    assert tensors["cls.predictions.bias"].shape == (VOCAB,)
    assert "cls.predictions.decoder.weight" not in tensors and "cls.predictions.decoder.bias" not in tensors
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["vocab_size"] == VOCAB and config["architectures"] == ["BertForPreTraining"]
    assert (tmp_path / "hf" / "vocab.txt").read_text() == vocab.read_text()
    vocab.write_text("a\nb\n")
    with pytest.raises(ValueError, match="has 2 tokens"):
        hf.export_hf(model, storage.Folder(tmp_path / "bad"), vocab)


def test_hf_round_trip(model, tmp_path):
    transformers = pytest.importorskip("transformers")
    model.save_pretrained(tmp_path / "hf")
    theirs, info = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    theirs.eval()
    b = random_batch()
    args = {k: b[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    expected = theirs(**args)
    ours = model(**args)
    real = b["attention_mask"].bool()
    torch.testing.assert_close(
        ours.prediction_logits[real], expected.prediction_logits[real], rtol=0, atol=1e-5
    )
    torch.testing.assert_close(
        ours.seq_relationship_logits, expected.seq_relationship_logits, rtol=0, atol=1e-5
    )
    # ... and back: transformers' own save_pretrained, imported into ours, gives the same state
    theirs.save_pretrained(tmp_path / "back")
    back = BertForPreTraining.from_pretrained(tmp_path / "back")
    assert same_state(model, back)


def test_import_encoder_only_without_prefix(model, tmp_path):
    state = {
        k.removeprefix("bert."): v for k, v in hf.to_hf_state_dict(model).items() if k.startswith("bert.")
    }
    state["embeddings.position_ids"] = torch.arange(64)[None]
    (tmp_path / "enc").mkdir()
    safetensors.torch.save_file(state, tmp_path / "enc" / "model.safetensors", {"format": "pt"})
    (tmp_path / "enc" / "config.json").write_text(json.dumps(model.config.to_hf_dict()))
    loaded = BertForPreTraining.from_pretrained(tmp_path / "enc", seed=11).eval()
    b = random_batch()
    ours = model.bert(b["input_ids"], b["token_type_ids"], b["attention_mask"])
    theirs = loaded.bert(b["input_ids"], b["token_type_ids"], b["attention_mask"])
    assert all(torch.equal(x, y) for x, y in zip(ours, theirs, strict=True))
    fresh = loaded.cls.predictions.transform.LayerNorm.weight
    assert torch.all(fresh == 1) and not torch.equal(
        loaded.cls.seq_relationship.weight, model.cls.seq_relationship.weight
    )


def test_import_errors_name_the_problem(model, tmp_path):
    model.save_pretrained(tmp_path / "m")
    with pytest.raises(ValueError, match="config.json not found"):
        BertForPreTraining.from_pretrained(tmp_path / "nowhere")
    state = hf.to_hf_state_dict(model)
    del state["bert.encoder.layer.1.output.dense.weight"]
    state["bert.embeddings.word_embeddings.weight"] = torch.zeros(VOCAB + 1, 32)
    bad = BertForPreTraining(model.config)
    with pytest.raises(ValueError, match=r"missing tensor bert\.encoder\.layer\.1.*shape \(101, 32\)"):
        hf.load_hf_state_dict(bad, state, "x.safetensors")
    state = hf.to_hf_state_dict(model)
    state["cls.predictions.decoder.weight"] = torch.zeros(VOCAB, 32)
    with pytest.raises(ValueError, match="untied"):
        hf.load_hf_state_dict(bad, state, "x.safetensors")


def test_from_pretrained_resolves_a_run_folder_to_its_newest_complete_checkpoint(tmp_path):
    from pretrain import checkpoint as ckpt

    run = str(tmp_path / "run")
    for step, seed in ((10, 1), (20, 2)):
        BertForPreTraining(tiny_config(), seed=seed).save_pretrained(ckpt.step_url(run, step))
        ckpt.commit(storage.Folder(ckpt.step_url(run, step)), step)
    BertForPreTraining(tiny_config(), seed=3).save_pretrained(ckpt.step_url(run, 30))  # not committed
    newest = BertForPreTraining(tiny_config(), seed=2).state_dict()
    loaded = BertForPreTraining.from_pretrained(run).state_dict()
    assert all(torch.equal(loaded[k], newest[k]) for k in newest)
    with pytest.raises(InputError, match="no complete checkpoint"):
        (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
        BertForPreTraining.from_pretrained(str(tmp_path / "empty"))
