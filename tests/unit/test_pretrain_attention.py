"""Packed attention (``pretrain/attention.py``): the flash varlen path run on the CPU through a
reference kernel registered for the aten ops (its trace under ``torch.compile``, with the whole
model: tests/unit/test_pretrain_batching.py), the padded kernel, and the rule between them."""

from __future__ import annotations

import pytest
import torch

from pretrain import attention
from pretrain.attention import Packed, choose_kernel, flash_varlen_attention
from tests.unit import flash_reference as ref

CPU = torch.device("cpu")


def packed_inputs(lengths: list[int], heads: int = 2, head_dim: int = 8, seed: int = 0):
    """q, k, v as views of one fused ``[tokens, 3, heads, head_dim]`` leaf, and the layout."""
    offsets = torch.tensor([0, *lengths]).cumsum(0).to(torch.int32)
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(sum(lengths), 3, heads, head_dim, generator=g, requires_grad=True)
    return qkv, Packed.build(offsets, max(lengths), sum(lengths))


def test_layout_rows_and_columns():
    layout = Packed.build(torch.tensor([0, 5, 6, 13]), 7, 13)
    assert layout.offsets.dtype == torch.int32 and layout.num_segments == 3
    assert layout.rows.tolist() == [0] * 5 + [1] + [2] * 7
    assert layout.columns.tolist() == [0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 5, 6]


def test_flash_path_equals_padded_attention_forward_and_backward():
    qkv, layout = packed_inputs([5, 1, 7, 3])
    grad = torch.randn(16, 2, 8, generator=torch.Generator().manual_seed(1))
    padded = attention.padded_attention(*qkv.unbind(1), layout)
    (d_padded,) = torch.autograd.grad(padded, qkv, grad)
    with ref.cpu_flash_kernels():
        flash = flash_varlen_attention(*qkv.unbind(1), layout.offsets, layout.max_seqlen)
        (d_flash,) = torch.autograd.grad(flash, qkv, grad)  # through PyTorch's own derivative
    torch.testing.assert_close(flash, padded, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(d_flash, d_padded, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(padded[5], qkv[5, 2])  # a one-token segment attends only to itself


def test_flash_dropout_is_replayed_by_the_backward():
    """With dropout, out = A v for the dropped weights A, so <grad, out> = <dv, v> exactly when the
    backward uses the forward's mask; a mask drawn anew breaks it."""
    qkv, layout = packed_inputs([9, 4, 12])
    grad = torch.randn(25, 2, 8, generator=torch.Generator().manual_seed(2))
    for backward, same in ((ref.flash_backward, True), (ref.redraws_dropout, False)):
        with ref.cpu_flash_kernels(ref.flash_forward, backward):
            torch.manual_seed(0)
            out = flash_varlen_attention(*qkv.unbind(1), layout.offsets, layout.max_seqlen, 0.5)
            (dqkv,) = torch.autograd.grad(out, qkv, grad)
        lhs, rhs = float((grad * out.detach()).sum()), float((dqkv[:, 2] * qkv[:, 2].detach()).sum())
        assert (abs(lhs - rhs) < 1e-4) == same, (lhs, rhs)
    no_dropout = attention.padded_attention(*qkv.unbind(1), layout)
    assert (out - no_dropout).abs().mean() > 0.1 * no_dropout.abs().mean()


def test_the_cpu_takes_the_padded_kernel(monkeypatch):
    monkeypatch.setattr(attention, "kernel_choices", {})
    assert choose_kernel(CPU, torch.float32, 2, 8) == "padded"
    assert attention.kernel_choices == {"cpu": "padded"}


@pytest.mark.parametrize(
    ("dtype", "head_dim", "capability", "kernel"),
    [
        (torch.bfloat16, 64, (9, 0), "flash"),
        (torch.float16, 128, (8, 0), "flash"),
        (torch.float32, 64, (9, 0), "padded"),  # the kernel takes half precision only
        (torch.bfloat16, 12, (9, 0), "padded"),  # head sizes: multiples of 8 up to 256
        (torch.bfloat16, 512, (9, 0), "padded"),
        (torch.float16, 64, (7, 5), "padded"),  # before Ampere
    ],
)
def test_the_rule_on_cuda_devices(monkeypatch, dtype, head_dim, capability, kernel):
    monkeypatch.setattr(attention, "kernel_choices", {})
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert choose_kernel(torch.device("cuda", 0), dtype, 4, head_dim) == kernel
    assert attention.kernel_choices == {"cuda:0": kernel}
