"""A CPU stand-in for FlashAttention's variable-length kernels, so the CUDA path of packed attention
(``pretrain.attention.flash_varlen_attention`` and everything around it) runs and is tested here.

:func:`flash_forward` and :func:`flash_backward` follow the contract of ``aten::_flash_attention_forward``
and ``aten::_flash_attention_backward`` for varlen inputs, computed segment by segment in float32:
the forward returns the output, the log-sum-exp ``[heads, total_tokens]``, ``rng_state`` (the
dropout seed, uint64 ``[2]``) and ``unused``; the backward recomputes the probabilities from the
forward's log-sum-exp and replays the dropout mask from ``rng_state``, as the CUDA kernel does.
:func:`cpu_flash_kernels` registers them (or broken variants) as the ops' CPU kernels for a while;
:func:`flash_on_cpu` also lets packed attention choose the flash path on the CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from pretrain import attention


def _segments(cu_seqlens: torch.Tensor) -> list[tuple[int, int]]:
    bounds = cu_seqlens.tolist()
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _keep(seed: int, segment: int, heads: int, length: int, dropout_p: float) -> torch.Tensor:
    """The dropout mask of one segment ``[heads, queries, keys]``: a function of the seed."""
    g = torch.Generator().manual_seed(seed + segment)
    return torch.rand(heads, length, length, generator=g) >= dropout_p


def flash_forward(
    query,
    key,
    value,
    cum_seq_q,
    cum_seq_k,
    max_q,
    max_k,
    dropout_p,
    is_causal,
    return_debug_mask,
    *,
    scale=None,
    **unused_options,
):
    """``aten::_flash_attention_forward`` for varlen inputs ``[total, heads, dim]``."""
    assert torch.equal(cum_seq_q, cum_seq_k) and cum_seq_q.dtype == torch.int32 and not is_causal
    scale = query.size(-1) ** -0.5 if scale is None else scale
    seed = int(torch.randint(0, 2**62, ())) if dropout_p > 0 else 0
    heads = query.size(1)
    out = torch.zeros(query.shape, dtype=torch.float32)
    lse = torch.zeros(heads, query.size(0))
    for index, (start, end) in enumerate(_segments(cum_seq_q)):
        assert end - start <= max_q, "a segment is longer than max_seqlen"
        q, k, v = (t[start:end].float() for t in (query, key, value))
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale
        lse[:, start:end] = scores.logsumexp(-1)
        weights = scores.softmax(-1)
        if dropout_p > 0:
            weights = weights * _keep(seed, index, heads, end - start, dropout_p) / (1 - dropout_p)
        out[start:end] = torch.einsum("hqk,khd->qhd", weights, v)
    rng_state = torch.tensor([seed, 0], dtype=torch.uint64)
    empty = torch.empty(0, dtype=query.dtype)
    return out.to(query.dtype), lse, rng_state, torch.empty((), dtype=torch.uint64), empty


def flash_backward(
    grad_out,
    query,
    key,
    value,
    out,
    logsumexp,
    cum_seq_q,
    cum_seq_k,
    max_q,
    max_k,
    dropout_p,
    is_causal,
    rng_state,
    unused,
    *,
    scale=None,
    **unused_options,
):
    """``aten::_flash_attention_backward`` for varlen inputs: (dq, dk, dv)."""
    scale = query.size(-1) ** -0.5 if scale is None else scale
    seed, heads = int(rng_state[0]), query.size(1)
    grads = [torch.zeros(t.shape, dtype=torch.float32) for t in (query, key, value)]
    for index, (start, end) in enumerate(_segments(cum_seq_q)):
        q, k, v, o, do = (t[start:end].float() for t in (query, key, value, out, grad_out))
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale
        probs = (scores - logsumexp[:, start:end, None]).exp()  # from the forward's log-sum-exp
        factor = torch.ones_like(probs)
        if dropout_p > 0:
            factor = _keep(seed, index, heads, end - start, dropout_p) / (1 - dropout_p)
        grads[2][start:end] = torch.einsum("hqk,qhd->khd", probs * factor, do)
        d_probs = torch.einsum("qhd,khd->hqk", do, v) * factor
        row_dot = (do * o).sum(-1).transpose(0, 1)[..., None]  # [heads, queries, 1]
        d_scores = probs * (d_probs - row_dot)
        grads[0][start:end] = torch.einsum("hqk,khd->qhd", d_scores, k) * scale
        grads[1][start:end] = torch.einsum("hqk,qhd->khd", d_scores, q) * scale
    return tuple(g.to(t.dtype) for g, t in zip(grads, (query, key, value), strict=True))


def redraws_dropout(grad_out, query, key, value, out, logsumexp, *args, **kwargs):
    """A wrong backward: a new dropout mask instead of the forward's (rng_state ignored)."""
    args = list(args)
    args[6] = torch.tensor([int(args[6][0]) + 1, 0], dtype=torch.uint64)  # rng_state
    return flash_backward(grad_out, query, key, value, out, logsumexp, *args, **kwargs)


@contextlib.contextmanager
def cpu_flash_kernels(
    forward: Callable = flash_forward, backward: Callable = flash_backward
) -> Iterator[None]:
    """``forward`` and ``backward`` as the CPU kernels of the aten flash ops while in the block."""
    library = torch.library.Library("aten", "IMPL")
    try:
        library.impl("_flash_attention_forward", forward, "CPU")
        library.impl("_flash_attention_backward", backward, "CPU")
        yield
    finally:
        library._destroy()


@contextlib.contextmanager
def flash_on_cpu(forward: Callable = flash_forward, backward: Callable = flash_backward) -> Iterator[None]:
    """Packed attention on the CPU takes the flash path (the rule widened to the CPU), with
    ``forward`` and ``backward`` as the kernels; kernel choices start afresh and are restored."""
    saved = attention.FLASH_DEVICE_TYPES, dict(attention.kernel_choices)
    attention.FLASH_DEVICE_TYPES = frozenset({"cuda", "cpu"})
    attention.kernel_choices.clear()
    try:
        with cpu_flash_kernels(forward, backward):
            yield
    finally:
        attention.FLASH_DEVICE_TYPES = saved[0]
        attention.kernel_choices.clear()
        attention.kernel_choices.update(saved[1])
