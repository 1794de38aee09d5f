"""Attention inside each example of a packed batch: flash's variable-length kernel on CUDA, padded
SDPA everywhere else.

A packed batch keeps its activations as ``[total_tokens, ...]``: example (segment) ``i`` is tokens
``offsets[i]:offsets[i + 1]`` (:class:`Packed`). Two kernels compute attention within segments:

- ``flash``: ``torch.ops.aten._flash_attention_forward`` with ``cum_seq_q = cum_seq_k = offsets``,
  the variable-length FlashAttention-2 kernel PyTorch ships, called on the flat tensors. It takes
  BERT's attention dropout (``torch.nn.attention.varlen.varlen_attn`` fixes it at 0); PyTorch's own
  derivative replays the forward's dropout mask, and its meta kernels let ``torch.compile`` trace
  forward and backward whole; ``max_seqlen`` is a Python int, so nothing syncs with the host. The
  call uses the positional arguments and the ``scale`` keyword, the same schema in torch 2.11 and
  2.13.
- ``padded``: scatter the tokens into a ``[segments, max_seqlen]`` block, SDPA with a key mask,
  gather back: the same function on any device and dtype.

The rule (:func:`choose_kernel`, decided once per device at start-up): ``flash`` on a CUDA device of
compute capability 8.0 or newer (Ampere on), for bfloat16 or float16 and head sizes that are
multiples of 8 up to 256 (the kernel's own limits); ``padded`` everywhere else, the CPU included.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

FLASH_DEVICE_TYPES = frozenset({"cuda"})  # the tests add "cpu", with a reference kernel for the op
kernel_choices: dict[str, str] = {}  # device ("cuda:0", "cpu") -> "flash" or "padded"


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
    q, k, v, layout: Packed, dropout_p: float = 0.0, *, kernel: str | None = None
) -> torch.Tensor:
    """Attention within each segment of flat ``[total_tokens, heads, head_dim]`` q/k/v (the last
    dimension contiguous); ``[total_tokens, heads, head_dim]`` out. ``kernel``: ``flash``,
    ``padded``, or None for the device's (:func:`choose_kernel`)."""
    kernel = kernel or kernel_choices.get(str(q.device))
    kernel = kernel or choose_kernel(q.device, q.dtype, q.size(1), q.size(2))
    if kernel == "flash":
        return flash_varlen_attention(q, k, v, layout.offsets, layout.max_seqlen, dropout_p)
    return padded_attention(q, k, v, layout, dropout_p)


def flash_varlen_attention(
    q, k, v, offsets: torch.Tensor, max_seqlen: int, dropout_p: float = 0.0
) -> torch.Tensor:
    """FlashAttention-2's variable-length kernel over segments cut at ``offsets`` (int32, on the
    device); differentiable, with dropout; see the module docstring."""
    lengths = (offsets, offsets, max_seqlen, max_seqlen)  # queries', keys'
    return torch.ops.aten._flash_attention_forward(
        q, k, v, *lengths, dropout_p, False, False, scale=q.size(-1) ** -0.5
    )[0]


def padded_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: Packed, dropout_p: float = 0.0
) -> torch.Tensor:
    """The same function as :func:`flash_varlen_attention` on any device: the tokens scattered
    into ``[segments, heads, max_seqlen, head_dim]``, masked SDPA, gathered back."""
    y = F.scaled_dot_product_attention(
        *(_block(t, layout) for t in (q, k, v)),
        attn_mask=_key_mask(layout)[:, None, None, :],
        dropout_p=dropout_p,
    )
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


def choose_kernel(device: torch.device, dtype: torch.dtype, heads: int, head_dim: int) -> str:
    """The kernel of packed attention on ``device`` by the rule of the module docstring, kept in
    :data:`kernel_choices` for the device: the trainer decides at start-up, before compiling, so
    a compiled graph reads the choice as a constant."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    flash = device.type in FLASH_DEVICE_TYPES and head_dim % 8 == 0 and head_dim <= 256
    if flash and device.type == "cuda":
        ampere = torch.cuda.get_device_capability(device) >= (8, 0)
        flash = ampere and dtype in (torch.float16, torch.bfloat16)
    kernel_choices[str(device)] = "flash" if flash else "padded"
    return kernel_choices[str(device)]
