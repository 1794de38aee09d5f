"""Batch layouts (padded, bucketed, packed) and the model's mask-free and packed attention paths."""

from __future__ import annotations

import contextlib
import hashlib

import numpy as np
import pytest
import torch
import torch._dynamo.testing

from pretrain import attention
from pretrain.batching import (
    BatchLayout,
    batch_shape,
    bucket,
    model_inputs,
    num_real_tokens,
    pack,
    static_layout,
    trim,
)
from pretrain.config import PretrainConfig
from pretrain.model import BertForPreTraining, compile_for_training, pretraining_loss
from tests.unit import flash_reference as ref
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


def perturbed_model(**overrides) -> BertForPreTraining:
    """The tiny model with non-trivial values everywhere."""
    m = BertForPreTraining(tiny_config(**overrides), seed=3)
    with torch.no_grad():
        g = torch.Generator().manual_seed(4)
        for p in m.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    return m


def loss_and_grads(model, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = loss_of(model, batch)
    loss.backward()
    grads = {n.removeprefix("_orig_mod."): p.grad.clone() for n, p in model.named_parameters()}
    return loss.detach(), grads


def assert_same_loss_and_grads(a, b) -> None:
    torch.testing.assert_close(a[0], b[0], rtol=1e-5, atol=1e-6)
    assert a[1].keys() == b[1].keys()
    for name in a[1]:
        torch.testing.assert_close(a[1][name], b[1][name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("kernel", ["padded", "flash"])
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train-no-dropout"])
def test_packed_batch_gives_the_padded_losses_and_gradients(kernel, training):
    model = perturbed_model(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).train(training)
    batch = padded_batch([21, 7, 16, 3], seed=1, width=24)
    packed = pack(batch, max_seq_length=32)
    assert static_layout(4, 32) == (8, 1)  # multiples of 8 tokens, one padding segment
    assert packed["input_ids"].shape == (48,)  # 47 real tokens and at least one more
    assert packed["cu_seqlens"].tolist() == [0, 21, 28, 44, 47, 48] and int(packed["max_seqlen"]) == 32
    assert num_real_tokens(packed) == num_real_tokens(batch) == 47
    padded = loss_and_grads(model, batch)
    with ref.flash_on_cpu() if kernel == "flash" else contextlib.nullcontext():
        packed_result = loss_and_grads(model, packed)
        assert set(attention.kernel_choices.values()) == {kernel}
    assert_same_loss_and_grads(packed_result, padded)


def test_packed_model_compiles_into_one_graph_a_region_on_the_flash_path(monkeypatch):
    """The model compiled as the trainer compiles it: one frame per region (no graph break), the
    flash op in the layer's graph, the kernel chosen before compiling (as the trainer does), not a
    call in the graph; padded's losses."""
    zero_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    model = perturbed_model(num_hidden_layers=1, **zero_dropout).train()  # one layer: a quicker trace
    batches = [
        padded_batch(lengths, seed=s, width=32) for s, lengths in enumerate([[21, 7, 16, 3], [9, 28, 3, 5]])
    ]
    packed = [pack(b, max_seq_length=32) for b in batches]
    assert packed[0]["input_ids"].shape == packed[1]["input_ids"].shape  # one static size
    expected = [loss_and_grads(model, b) for b in batches]
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    with ref.flash_on_cpu():
        torch._dynamo.reset()
        attention.choose_kernel(torch.device("cpu"), torch.float32, 2, 32)
        compile_for_training(model, backend=counter)
        for batch, padded in zip(packed, expected, strict=True):
            assert_same_loss_and_grads(loss_and_grads(model, batch), padded)
        assert set(attention.kernel_choices.values()) == {"flash"}
    assert counter.frame_count == 2  # the one layer and the embeddings
    graph = "\n".join(str(g.graph) for g in counter.graphs)
    assert "_flash_attention_forward" in graph and "choose_kernel" not in graph


def test_packed_dropout_follows_the_seed():
    model = perturbed_model().train()  # dropout 0.1 everywhere
    packed = pack(padded_batch([21, 7, 16, 3], seed=1, width=24), max_seq_length=32)
    losses = []
    for seed in (5, 5, 6):
        torch.manual_seed(seed)
        losses.append(float(loss_of(model, packed).detach()))
    assert losses[0] == losses[1] != losses[2]


def test_packed_batches_are_refused_by_a_causal_model():
    causal = BertForPreTraining(tiny_config(causal=True, nsp=False), seed=0)
    with pytest.raises(ValueError, match="causal"):
        causal(**model_inputs(pack(padded_batch([8, 5]))))


# --- layouts ---------------------------------------------------------------------------------------


def test_pack_pads_to_a_static_size_with_segments_that_count_nowhere():
    assert static_layout(256, 128) == (1024, 9) and static_layout(64, 512) == (1024, 3)
    assert static_layout(8, 64) == (16, 1)
    rng = np.random.default_rng(0)
    for seed in range(12):
        lengths = rng.integers(3, 65, 8).tolist()
        batch = padded_batch(lengths, seed=seed)
        packed = pack(batch, max_seq_length=64)
        real, total, cu = sum(lengths), packed["input_ids"].numel(), packed["cu_seqlens"]
        assert total % 16 == 0 and real + 1 <= total < real + 1 + 16
        assert cu.dtype == torch.int32 and cu.tolist()[:9] == np.cumsum([0, *lengths]).tolist()
        assert len(cu) == 8 + 1 + 1 and int(cu[-1]) == total and 1 <= total - real <= 64
        assert packed["input_ids"][real:].eq(0).all() and packed["token_type_ids"][real:].eq(0).all()
        assert packed["labels"][real:].eq(-100).all()
        assert int(packed["max_seqlen"]) == 64 and int(packed["num_examples"]) == 8
        assert num_real_tokens(packed) == real and batch_shape(packed) == (8, max(lengths))
        flat = torch.cat(
            [ids[mask.bool()] for ids, mask in zip(batch["input_ids"], batch["attention_mask"], strict=True)]
        )
        assert torch.equal(packed["input_ids"][:real], flat)
        assert model_inputs(packed)["num_examples"] == 8 and model_inputs(packed)["max_seqlen"] == 64
    wide = pack(padded_batch([70, 3], width=72), max_seq_length=64)  # an example longer than asked
    assert int(wide["max_seqlen"]) == 72


def test_padding_segments_never_exceed_max_seqlen():
    for examples, seqlen in ((3, 8), (5, 9), (16, 16), (64, 512)):
        step, segments = static_layout(examples, seqlen)
        for real in range(examples, examples * seqlen + 1, max(1, examples * seqlen // 97)):
            tail = -(-(real + segments) // step) * step - real
            assert segments <= tail <= segments * seqlen, (examples, seqlen, real)


def test_real_batches_take_few_packed_sizes():
    """Batches of 256 like the seq-128 shards (89% of examples full length) take 2-3 sizes."""
    rng = np.random.default_rng(0)
    sizes = set()
    for _ in range(20):
        lengths = torch.from_numpy(np.where(rng.random(256) < 0.89, 128, rng.integers(10, 128, 256)))
        mask = (torch.arange(128)[None, :] < lengths[:, None]).long()
        batch = {"input_ids": mask, "token_type_ids": mask * 0, "attention_mask": mask}
        sizes.add(pack(batch, max_seq_length=128)["input_ids"].numel())
    assert len(sizes) <= 4, sorted(sizes)


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
    problems = PretrainConfig(shards="s", batching="sorted", bucket_window=0).problems()
    assert any(p.startswith("--batching must be one of") for p in problems)
    assert any(p.startswith("--bucket-window must be at least 1") for p in problems)


# --- the GPU check script --------------------------------------------------------------------------


def test_gpu_check_script_parses_and_passes_only_flags_pretrain_has():
    import re
    import subprocess
    from pathlib import Path

    from pretrain.cli import main as pretrain_main

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    command = text[text.index("-m pretrain ") :].split(")\n")[0]  # the command every run shares
    runs = re.findall(r"^pretrain seq\S+ \d+ \S+ \S+ (.*)$", text, flags=re.M)  # and each run's flags
    given = set(re.findall(r"(--[a-z][a-z0-9-]*)", " ".join([command, *runs])))
    known = {opt for param in pretrain_main.params for opt in [*param.opts, *param.secondary_opts]}
    assert "--batching" in given and given <= known, given - known
