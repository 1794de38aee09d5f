"""Attention inside each example of a packed batch: flash's variable-length kernel on CUDA, padded
SDPA everywhere else, and the one-time self-check that decides between them.

A packed batch keeps its activations as ``[total_tokens, ...]``: example (segment) ``i`` is tokens
``offsets[i]:offsets[i + 1]`` (:class:`Packed`). Two kernels compute attention within segments:

- ``flash``: ``torch.ops.aten._flash_attention_forward`` with ``cum_seq_q = cum_seq_k = offsets``,
  the variable-length FlashAttention-2 kernel PyTorch ships (SDPA runs it for nested tensors; here
  it is called on the flat tensors, so nothing is built per layer). It takes dropout (BERT's
  attention dropout, 0.1; ``torch.nn.attention.varlen.varlen_attn``, the public wrapper of the same
  kernel, fixes it at 0), and it needs no wrapper of ours: PyTorch's own derivative
  (``_flash_attention_backward``, replaying the forward's dropout mask from the ``rng_state`` the
  forward returns), its meta kernels and its Inductor fallback let ``torch.compile`` trace forward
  and backward whole; ``max_seqlen`` is a Python int, so nothing syncs with the host. The call uses
  only the positional arguments and the ``scale`` keyword, whose schema is the same in torch 2.11
  and 2.13 (``aten/src/ATen/native/native_functions.yaml``; the backward's ``rng_state, unused``
  are the forward's). The kernel needs CUDA (Ampere or newer), bf16/fp16 and a head size that is
  a multiple of 8 up to 256.
- ``padded``: scatter the tokens into a ``[segments, max_seqlen]`` block, SDPA with a key mask,
  gather back. The same function, on any device and dtype; the kernel on the CPU.

The first time packed attention runs on a CUDA device with a given dtype and head shape,
:func:`self_check` compares the flash kernel with padded attention on a tiny packed input (a
one-token segment, a full one, tail segments like :func:`pretrain.batching.pack` adds), without
and with dropout: outputs and all three gradients, the dropout rate, and that the backward replays
the forward's mask. If anything differs or raises, packed attention uses the padded kernel there
and says so in one warning line; a wrong kernel call cannot train on garbage silently. The check
draws its inputs from its own generator and restores the global RNG state, so a run's randomness
(and its bitwise resume) does not depend on it. Under ``torch.compile`` the check runs while the
graph is traced and its verdict enters the graph as a constant (no graph break).
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import torch
import torch.nn.functional as F

log = logging.getLogger("pretrain.attention")

FLASH_DEVICE_TYPES: frozenset[str] = frozenset({"cuda"})
"""Device types where packed attention tries the flash kernel (the tests add ``cpu``, with a
reference kernel registered for the aten op there)."""

kernel_choices: dict[tuple[str, torch.dtype, int, int], str] = {}
"""The kernel chosen per (device, dtype, heads, head size): ``flash`` or ``padded``."""


class Packed(NamedTuple):
    """The layout of a packed batch: segment ``i`` is tokens ``offsets[i]:offsets[i + 1]`` of the
    flat ``[total_tokens, ...]`` activations (``offsets`` int32, as the flash kernel takes them);
    ``max_seqlen`` bounds every segment's length (a Python int, so that nothing here needs a host
    sync); ``rows`` and ``columns`` are each token's segment and position in it. Build it with
    :meth:`build`."""

    offsets: torch.Tensor
    max_seqlen: int
    rows: torch.Tensor
    columns: torch.Tensor

    @classmethod
    def build(cls, offsets: torch.Tensor, max_seqlen: int, total_tokens: int) -> Packed:
        """The layout of ``total_tokens`` tokens cut at ``offsets`` (``[segments + 1]``, from 0 to
        ``total_tokens``)."""
        offsets = offsets.to(torch.int32)
        flat = torch.arange(total_tokens, device=offsets.device, dtype=torch.int32)
        rows = torch.bucketize(flat, offsets[1:], out_int32=True, right=True)
        return cls(offsets, int(max_seqlen), rows, flat - offsets[rows])

    @property
    def num_segments(self) -> int:
        """Segments in the layout (examples and any padding segments)."""
        return self.offsets.numel() - 1


def packed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: Packed,
    dropout_p: float = 0.0,
    *,
    kernel: str | None = None,
) -> torch.Tensor:
    """Attention within each segment of flat ``[total_tokens, heads, head_dim]`` q/k/v (the last
    dimension contiguous); ``[total_tokens, heads, head_dim]`` out. ``kernel``: ``flash``,
    ``padded``, or None for :func:`choose_kernel`'s choice."""
    kernel = kernel or choose_kernel(q.device, q.dtype, q.size(1), q.size(2))
    if kernel == "flash":
        return flash_varlen_attention(q, k, v, layout.offsets, layout.max_seqlen, dropout_p)
    return padded_attention(q, k, v, layout, dropout_p)


def flash_varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    offsets: torch.Tensor,
    max_seqlen: int,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """FlashAttention-2's variable-length kernel over segments cut at ``offsets`` (int32, on the
    device); differentiable, with dropout; see the module docstring."""
    return torch.ops.aten._flash_attention_forward(
        q, k, v, offsets, offsets, max_seqlen, max_seqlen, dropout_p, False, False,
        scale=q.size(-1) ** -0.5,
    )[0]  # fmt: skip


def padded_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: Packed, dropout_p: float = 0.0
) -> torch.Tensor:
    """The same function as :func:`flash_varlen_attention` on any device: the tokens scattered
    into ``[segments, heads, max_seqlen, head_dim]``, masked SDPA, gathered back."""
    y = F.scaled_dot_product_attention(
        *(_block(t, layout) for t in (q, k, v)), attn_mask=_key_mask(layout)[:, None, None, :],
        dropout_p=dropout_p,
    )  # fmt: skip
    return y.transpose(1, 2)[layout.rows, layout.columns]


def _block(t: torch.Tensor, layout: Packed) -> torch.Tensor:
    """``[total_tokens, heads, dim]`` scattered into ``[segments, heads, max_seqlen, dim]`` (zeros
    past each segment's end)."""
    out = t.new_zeros(layout.num_segments, layout.max_seqlen, *t.shape[1:])
    return out.index_put((layout.rows, layout.columns), t).transpose(1, 2)


def _key_mask(layout: Packed) -> torch.Tensor:
    """``[segments, max_seqlen]``: True at the positions a segment has."""
    lengths = layout.offsets[1:] - layout.offsets[:-1]
    return torch.arange(layout.max_seqlen, device=lengths.device)[None, :] < lengths[:, None]


# --- the kernel choice and its self-check ----------------------------------------------------------


def choose_kernel(device: torch.device, dtype: torch.dtype, heads: int, head_dim: int) -> str:
    """``flash`` where the flash kernel may run and passed :func:`self_check` for this device,
    dtype and head shape (checked once per process), else ``padded``. Under ``torch.compile`` it
    runs at trace time and its answer is a constant of the graph."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = (str(device), dtype, heads, head_dim)
    if key in kernel_choices:
        return kernel_choices[key]
    if device.type not in FLASH_DEVICE_TYPES:
        kernel_choices[key] = "padded"
    else:
        problem = self_check(device, dtype, heads, head_dim)
        kernel_choices[key] = "flash" if problem is None else "padded"
        if problem is not None:
            log.warning(
                "packed attention on %s (%s, %d heads of %d): the flash varlen kernel %s; using "
                "padded SDPA per layer instead (the same function, slower)",
                device, str(dtype).removeprefix("torch."), heads, head_dim, problem,
            )  # fmt: skip
    return kernel_choices[key]


# What ``torch.compiler.assume_constant_result(choose_kernel)`` does (torch 2.11 and 2.13), without
# importing torch._dynamo (2 s) when the package is imported: Dynamo calls it while tracing and puts
# its result in the graph as a constant (tested in tests/unit/test_pretrain_attention.py).
choose_kernel._dynamo_marked_constant = True


def self_check(device: torch.device, dtype: torch.dtype, heads: int, head_dim: int) -> str | None:
    """None when the flash kernel agrees with padded attention on a tiny packed input of this
    shape (no dropout: output and gradients; dropout 0.5: the rate, output and gradients with the
    mask it drew), else what went wrong, as words that follow "the flash varlen kernel"."""
    if dtype not in (torch.float16, torch.bfloat16) and device.type == "cuda":
        return f"takes bfloat16 or float16, not {str(dtype).removeprefix('torch.')}"
    if head_dim % 8 or head_dim > 256:
        return f"takes head sizes that are multiples of 8 up to 256, not {head_dim}"
    forked = []  # the CPU generator is always restored; a CUDA device's too
    if device.type == "cuda":
        forked = [device.index if device.index is not None else torch.cuda.current_device()]
    try:
        with (
            torch.random.fork_rng(devices=forked),
            torch.enable_grad(),
            torch.autocast(device.type, enabled=False),
        ):
            return _compare_without_dropout(device, dtype, heads, head_dim) or _compare_with_dropout(
                device, dtype, heads, head_dim
            )
    except (RuntimeError, NotImplementedError, ValueError, TypeError, IndexError) as err:
        first_line = (str(err).strip().splitlines() or [""])[0][:200]
        return f"raised {type(err).__name__}: {first_line}"


def _check_inputs(device: torch.device, dtype: torch.dtype, heads: int, head_dim: int, one_hot_values: bool):
    """Packed q, k, v (views of one ``[tokens, 3, heads, head_dim]`` tensor, as the model's fused
    projection gives them), the layout and an upstream gradient, from a fixed seed."""
    longest = min(16, head_dim)
    lengths = [5, 1, longest, longest // 2 + 1, 3]
    offsets = torch.tensor([0, *lengths], dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)
    total = sum(lengths)
    g = torch.Generator().manual_seed(1234)
    qkv = torch.randn(total, 3, heads, head_dim, generator=g)
    layout = Packed.build(offsets, longest, total)
    if one_hot_values:  # value of key j = e_(position of j): the output then shows the weights
        qkv[:, 2] = F.one_hot(layout.columns.cpu().long(), head_dim).float()[:, None, :]
    grad = torch.randn(total, heads, head_dim, generator=g).to(device, dtype)
    return qkv.to(device, dtype).requires_grad_(), layout, grad


def _relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest absolute difference over the largest expected magnitude."""
    got, expected = got.detach().float(), expected.detach()
    return float((got - expected).abs().max() / expected.abs().max().clamp_min(1e-3))


def _tolerance(dtype: torch.dtype) -> float:
    return max(8 * torch.finfo(dtype).eps, 1e-4)


def _compare(names: list[str], got: list[torch.Tensor], expected: list[torch.Tensor], dtype) -> str | None:
    for name, a, b in zip(names, got, expected, strict=True):
        if not torch.isfinite(a).all():
            return f"gave non-finite values in {name}"
        error = _relative_error(a, b)
        if error > _tolerance(dtype):
            return (
                f"differs from padded attention in {name} by {error:.3g} (tolerance {_tolerance(dtype):.2g})"
            )
    return None


def _compare_without_dropout(device, dtype, heads: int, head_dim: int) -> str | None:
    qkv, layout, grad = _check_inputs(device, dtype, heads, head_dim, one_hot_values=False)
    out = flash_varlen_attention(*qkv.unbind(1), layout.offsets, layout.max_seqlen, 0.0)
    (dqkv,) = torch.autograd.grad(out, qkv, grad)
    reference = qkv.detach().float().requires_grad_()
    expected = padded_attention(*reference.unbind(1), layout, 0.0)
    (dexpected,) = torch.autograd.grad(expected, reference, grad.float())
    names = ["the output", "dq", "dk", "dv"]
    return _compare(names, [out, *dqkv.unbind(1)], [expected, *dexpected.unbind(1)], dtype)


def _compare_with_dropout(device, dtype, heads: int, head_dim: int, p: float = 0.5) -> str | None:
    qkv, layout, grad = _check_inputs(device, dtype, heads, head_dim, one_hot_values=True)
    out = flash_varlen_attention(*qkv.unbind(1), layout.offsets, layout.max_seqlen, p)
    (dqkv,) = torch.autograd.grad(out, qkv, grad)
    # With one-hot values, out[token, head, c] is the token's weight on key c of its segment:
    # zero where dropout dropped it. That mask must be the one the backward replays.
    kept = _block(out.detach(), layout)[..., : layout.max_seqlen] != 0  # [segments, heads, queries, keys]
    valid = _key_mask(layout)
    pairs = valid[:, None, :, None] & valid[:, None, None, :]
    rate = 1 - float((kept & pairs).sum() / (pairs.sum() * heads))
    if abs(rate - p) > 0.1:
        return f"dropped {rate:.2f} of the attention weights at dropout {p}"
    reference = qkv.detach().float().requires_grad_()
    expected = _masked_attention(*reference.unbind(1), layout, kept, p)
    (dexpected,) = torch.autograd.grad(expected, reference, grad.float())
    names = ["the output with dropout", "dq with dropout", "dk with dropout", "dv with dropout"]
    return _compare(names, [out, *dqkv.unbind(1)], [expected, *dexpected.unbind(1)], dtype)


def _masked_attention(q, k, v, layout: Packed, kept: torch.Tensor, p: float) -> torch.Tensor:
    """Attention with a given dropout mask ``kept`` (``[segments, heads, queries, keys]``), in the
    dtype of q/k/v: the reference for the dropout check."""
    qb, kb, vb = (_block(t, layout) for t in (q, k, v))
    scores = qb @ kb.transpose(-1, -2) * q.size(-1) ** -0.5
    scores = scores.masked_fill(~_key_mask(layout)[:, None, None, :], float("-inf"))
    weights = scores.softmax(-1) * kept / (1 - p)
    return (weights @ vb).transpose(1, 2)[layout.rows, layout.columns]
