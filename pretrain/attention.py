"""Attention inside each segment of a packed batch, by the kernel :func:`choose_kernel` picks once per
device (docs/pretrain.md): ``flash`` (PyTorch's variable-length FlashAttention-2, with dropout and no
host sync) or ``padded`` (scatter into a padded block, SDPA with a key mask, gather back)."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

FLASH_DEVICE_TYPES = frozenset({"cuda"})  # the tests add "cpu", with a reference kernel for the op
kernel_choices: dict[str, str] = {}  # device ("cuda:0", "cpu") -> "flash" or "padded"


class Packed(NamedTuple):
    """The layout of a packed batch: segment ``i`` is tokens ``offsets[i]:offsets[i + 1]`` (int32)
    of the flat ``[total_tokens, ...]`` activations, none longer than ``max_seqlen``; ``rows`` and
    ``columns`` are each token's segment and position in it."""

    offsets: torch.Tensor
    max_seqlen: int
    rows: torch.Tensor
    columns: torch.Tensor

    @classmethod
    def build(cls, offsets: torch.Tensor, max_seqlen: int, total_tokens: int) -> Packed:
        """The layout of ``total_tokens`` tokens cut at ``offsets`` (``[segments + 1]``)."""
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
    """Attention within each segment of flat ``[total_tokens, heads, head_dim]`` q/k/v, by ``kernel``
    (``flash``, ``padded``, or None for the device's: :func:`choose_kernel`)."""
    kernel = kernel or kernel_choices.get(str(q.device))
    kernel = kernel or choose_kernel(q.device, q.dtype, q.size(1), q.size(2))
    if kernel == "flash":
        return flash_varlen_attention(q, k, v, layout.offsets, layout.max_seqlen, dropout_p)
    return padded_attention(q, k, v, layout, dropout_p)


def flash_varlen_attention(
    q, k, v, offsets: torch.Tensor, max_seqlen: int, dropout_p: float = 0.0
) -> torch.Tensor:
    """FlashAttention-2's variable-length kernel over segments cut at ``offsets`` (int32)."""
    lengths = (offsets, offsets, max_seqlen, max_seqlen)  # queries', keys'
    return torch.ops.aten._flash_attention_forward(
        q, k, v, *lengths, dropout_p, False, False, scale=q.size(-1) ** -0.5
    )[0]


def padded_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: Packed, dropout_p: float = 0.0
) -> torch.Tensor:
    """The same function as :func:`flash_varlen_attention` on any device, with masked SDPA."""
    y = F.scaled_dot_product_attention(
        *(_block(t, layout) for t in (q, k, v)),
        attn_mask=_key_mask(layout)[:, None, None, :],
        dropout_p=dropout_p,
    )
    return y.transpose(1, 2)[layout.rows, layout.columns]


def _block(t: torch.Tensor, layout: Packed) -> torch.Tensor:
    """``[total_tokens, heads, dim]`` scattered into ``[segments, heads, max_seqlen, dim]``."""
    out = t.new_zeros(layout.num_segments, layout.max_seqlen, *t.shape[1:])
    return out.index_put((layout.rows, layout.columns), t).transpose(1, 2)


def _key_mask(layout: Packed) -> torch.Tensor:
    """``[segments, max_seqlen]``: True at the positions a segment has."""
    lengths = layout.offsets[1:] - layout.offsets[:-1]
    return torch.arange(layout.max_seqlen, device=lengths.device)[None, :] < lengths[:, None]


def choose_kernel(device: torch.device, dtype: torch.dtype, heads: int, head_dim: int) -> str:
    """The kernel of packed attention on ``device``, kept in :data:`kernel_choices`: the trainer
    decides at start-up, before compiling, so a compiled graph reads the choice as a constant."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    flash = device.type in FLASH_DEVICE_TYPES and head_dim % 8 == 0 and head_dim <= 256
    if flash and device.type == "cuda":
        ampere = torch.cuda.get_device_capability(device) >= (8, 0)
        flash = ampere and dtype in (torch.float16, torch.bfloat16)
    kernel_choices[str(device)] = "flash" if flash else "padded"
    return kernel_choices[str(device)]
