"""Batch layouts (padded, bucketed, packed) and the model's mask-free and packed attention paths."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from pretrain.batching import (
    BatchLayout,
    bucket,
    model_inputs,
    num_real_tokens,
    pack,
    trim,
)
from pretrain.model import BertForPreTraining, Packed, packed_attention, pretraining_loss
from tests.unit.test_pretrain_model import VOCAB, tiny_config


def padded_batch(lengths: list[int], seed: int = 0, width: int | None = None) -> dict[str, torch.Tensor]:
    """A batch as the collate writes it: padded to ``width`` (default: longest rounded up to 8)."""
    g = torch.Generator().manual_seed(seed)
    size = len(lengths)
    width = width or -(-max(lengths) // 8) * 8
    lengths_t = torch.tensor(lengths)
    real = torch.arange(width)[None, :] < lengths_t[:, None]
    input_ids = torch.randint(5, VOCAB, (size, width), generator=g) * real
    token_type_ids = (torch.arange(width)[None, :] >= (lengths_t[:, None] // 2)).long() * real
    most = 4
    positions = torch.zeros(size, most, dtype=torch.long)
    weights = torch.zeros(size, most)
    for row, length in enumerate(lengths):
        count = min(most, max(1, length // 4))
        positions[row, :count] = torch.randperm(length - 2, generator=g)[:count] + 1
        weights[row, :count] = 1.0
    ids = torch.randint(0, VOCAB, (size, most), generator=g)
    labels = torch.full((size, width), -100)
    rows = torch.arange(size)[:, None].expand(-1, most)
    labels[rows[weights > 0], positions[weights > 0]] = ids[weights > 0]
    return {
        "input_ids": input_ids,
        "attention_mask": real.long(),
        "token_type_ids": token_type_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": ids,
        "masked_lm_weights": weights,
        "labels": labels,
        "next_sentence_labels": torch.randint(0, 2, (size,), generator=g),
    }


def example_keys(batch: dict[str, torch.Tensor]) -> list[str]:
    """A digest per example of its tokens, types, predictions and NSP label (layout-independent)."""
    keys = []
    for row in range(len(batch["input_ids"])):
        real = batch["attention_mask"][row].bool()
        slots = batch["masked_lm_weights"][row] > 0
        parts = [
            batch["input_ids"][row][real],
            batch["token_type_ids"][row][real],
            batch["masked_lm_positions"][row][slots],
            batch["masked_lm_ids"][row][slots],
            batch["next_sentence_labels"][row : row + 1],
        ]
        keys.append(hashlib.sha256(b"|".join(p.numpy().tobytes() for p in parts)).hexdigest())
    return keys


@pytest.fixture
def model() -> BertForPreTraining:
    m = BertForPreTraining(tiny_config(), seed=3).eval()
    with torch.no_grad():
        g = torch.Generator().manual_seed(4)
        for p in m.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    return m


def loss_of(model, batch) -> torch.Tensor:
    out = model(**model_inputs(batch))
    return pretraining_loss(
        out, batch["masked_lm_ids"], batch["masked_lm_weights"], batch["next_sentence_labels"]
    ).total


# --- model paths -----------------------------------------------------------------------------------


def test_mask_free_attention_equals_the_masked_path_on_a_batch_without_padding(model):
    batch = padded_batch([16, 16, 16])
    inputs = model_inputs(batch)
    assert inputs["attention_mask"] is None  # no padding: no mask handed to SDPA
    masked = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    free = model(batch["input_ids"], batch["token_type_ids"], None)
    torch.testing.assert_close(free.prediction_logits, masked.prediction_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(free.seq_relationship_logits, masked.seq_relationship_logits)
    assert model_inputs(padded_batch([16, 9]))["attention_mask"] is not None


def test_packed_batch_gives_the_padded_losses_and_gradients(model):
    batch = padded_batch([21, 7, 16, 3], seed=1, width=24)
    packed = pack(batch)
    assert packed["input_ids"].shape == (21 + 7 + 16 + 3,)
    assert packed["cu_seqlens"].tolist() == [0, 21, 28, 44, 47] and int(packed["max_seqlen"]) == 21
    assert num_real_tokens(packed) == num_real_tokens(batch) == 47
    padded_loss = loss_of(model, batch)
    padded_loss.backward()
    padded_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    packed_loss = loss_of(model, packed)
    packed_loss.backward()
    torch.testing.assert_close(packed_loss, padded_loss, rtol=1e-5, atol=1e-6)
    for name, p in model.named_parameters():
        if name in padded_grads:
            torch.testing.assert_close(p.grad, padded_grads[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_packed_attention_jagged_and_scattered_paths_agree():
    g = torch.Generator().manual_seed(0)
    offsets = torch.tensor([0, 5, 6, 13])
    q, k, v = (torch.randn(13, 2, 8, generator=g) for _ in range(3))
    layout = Packed.build(offsets, 7, 13)
    assert layout.rows.tolist() == [0] * 5 + [1] + [2] * 7
    assert layout.columns.tolist() == [0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 5, 6]
    scattered = packed_attention(q, k, v, layout, jagged=False)
    jagged = packed_attention(q, k, v, layout, jagged=True)
    torch.testing.assert_close(jagged, scattered, rtol=1e-5, atol=1e-6)
    # example 1 (one token) attends only to itself
    torch.testing.assert_close(scattered[5], v[5])


def test_packed_batches_are_refused_by_a_causal_model():
    causal = BertForPreTraining(tiny_config(causal=True, nsp=False), seed=0)
    with pytest.raises(ValueError, match="causal"):
        causal(**model_inputs(pack(padded_batch([8, 5]))))


# --- layouts ---------------------------------------------------------------------------------------


def test_trim_cuts_to_the_longest_example_and_the_most_predictions():
    batch = padded_batch([9, 3], width=64)
    batch["masked_lm_positions"] = torch.nn.functional.pad(batch["masked_lm_positions"], (0, 6))
    batch["masked_lm_weights"] = torch.nn.functional.pad(batch["masked_lm_weights"], (0, 6))
    batch["masked_lm_ids"] = torch.nn.functional.pad(batch["masked_lm_ids"], (0, 6))
    out = trim(batch)
    assert out["input_ids"].shape == (2, 16) and out["labels"].shape == (2, 16)
    assert out["masked_lm_weights"].shape == (2, 2)
    assert example_keys(out) == example_keys(batch)


def test_bucketing_keeps_the_examples_and_removes_most_padding():
    rng = np.random.default_rng(0)
    batches = [padded_batch(rng.integers(4, 64, 8).tolist(), seed=s, width=64) for s in range(6)]
    before = sum(b["input_ids"].numel() for b in map(trim, batches))
    out = bucket(batches, np.random.default_rng(1))
    assert [len(b["input_ids"]) for b in out] == [8] * 6
    assert sorted(k for b in out for k in example_keys(b)) == sorted(
        k for b in batches for k in example_keys(b)
    )
    assert all(b["input_ids"].shape[1] % 8 == 0 for b in out)
    after = sum(b["input_ids"].numel() for b in out)
    real = sum(num_real_tokens(b) for b in batches)
    assert after < before and (after - real) / after < 0.25
    again = bucket(batches, np.random.default_rng(1))
    assert [example_keys(b) for b in again] == [example_keys(b) for b in out]
    other = bucket(batches, np.random.default_rng(2))
    assert [example_keys(b) for b in other] != [example_keys(b) for b in out]


@pytest.mark.parametrize("mode", ["padded", "bucketed", "packed"])
def test_a_resumed_epoch_continues_with_exactly_the_same_batches(mode):
    rng = np.random.default_rng(5)
    source = [padded_batch(rng.integers(4, 40, 4).tolist(), seed=s, width=40) for s in range(11)]
    reads = []

    def read(first: int):
        reads.append(first)
        return iter(source[first:])

    layout = BatchLayout(mode, window=4, seed=7, rank=1)
    full = list(layout.epoch_batches(read, 0, epoch=3))
    assert len(full) == len(source)
    for start in (1, 4, 6, 10):
        resumed = list(layout.epoch_batches(read, start, epoch=3))
        assert len(resumed) == len(full) - start
        for a, b in zip(resumed, full[start:], strict=True):
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    if mode == "bucketed":
        assert reads[1:] == [0, 4, 4, 8]  # from the start of the window holding the resume point
        next_epoch = list(layout.epoch_batches(read, 0, epoch=4))
        assert [num_real_tokens(b) for b in next_epoch] != [num_real_tokens(b) for b in full]


def test_layout_settings_are_validated():
    with pytest.raises(ValueError, match="--batching must be one of"):
        BatchLayout("sorted")
    with pytest.raises(ValueError, match="--bucket-window"):
        BatchLayout("bucketed", window=0)


# --- the GPU check script --------------------------------------------------------------------------


def test_gpu_check_script_parses_and_passes_only_flags_pretrain_has():
    import re
    import subprocess
    from pathlib import Path

    from pretrain.cli import main as pretrain_main

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    command = text[text.index("$BIN/pretrain ") :].split("\n    $BIN/python")[0]
    given = set(re.findall(r"(--[a-z][a-z0-9-]*)", command))
    known = {opt for param in pretrain_main.params for opt in param.opts}
    assert "--batching" in given and given <= known, given - known
