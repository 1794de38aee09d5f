"""Which scaled-dot-product-attention kernel each batch layout gets (part of ``gpu_check.sh``).

    python benchmarks/sdpa_check.py [--config base] [--precision bf16] [--require-fast]

For three batches of the same examples — padded with padding (a boolean mask), padded without
padding (no mask: what ``bucketed`` gives for full-length groups) and packed — one forward and
backward pass of ``BertForPreTraining`` is run with SDPA restricted to one backend at a time
(``torch.nn.attention.sdpa_kernel``), fastest first: flash, memory-efficient, cuDNN, math. The
first backend that runs is the one the layout gets. The packed layout does not go through SDPA
when its self-checked flash varlen kernel runs (``pretrain/attention.py``): it reports
``flash-varlen`` then, else the SDPA backend its padded fallback gets. ``--require-fast`` exits 1
when, on CUDA, the mask-free layout gets neither flash nor memory-efficient attention or the
packed one does not get ``flash-varlen``. Without CUDA it runs the same on the CPU (fp32, the
``tiny`` model unless ``--config`` is given) and reports what the CPU has; nothing is required
there.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from pretrain import attention
from pretrain.batching import model_inputs, pack
from pretrain.model import BertConfig, BertForPreTraining, pretraining_loss
from pretrain.runtime import autocast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness

BACKENDS = (
    ("flash", SDPBackend.FLASH_ATTENTION),
    ("efficient", SDPBackend.EFFICIENT_ATTENTION),
    ("cudnn", SDPBackend.CUDNN_ATTENTION),
    ("math", SDPBackend.MATH),
)


def to_device(inputs: dict, device: torch.device) -> dict:
    """``inputs`` with every tensor moved to ``device`` (other values as they are)."""
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()
    }


def batches(batch: int, length: int, vocab: int, device: torch.device) -> dict[str, dict]:
    """The same random examples as three layouts."""
    g = torch.Generator().manual_seed(0)
    full = torch.full((batch,), length)
    short = full.clone()
    short[::2] = length // 2  # half the rows padded
    out = {}
    for name, lengths in (("masked", short), ("mask_free", full), ("packed", short)):
        real = torch.arange(length)[None, :] < lengths[:, None]
        positions = torch.stack([torch.randperm(length // 2 - 2, generator=g)[:8] + 1 for _ in range(batch)])
        b = {
            "input_ids": torch.randint(1000, vocab, (batch, length), generator=g) * real,
            "attention_mask": real.long(),
            "token_type_ids": (torch.arange(length)[None, :] >= lengths[:, None] // 2).long() * real,
            "masked_lm_positions": positions,
            "masked_lm_ids": torch.randint(1000, vocab, (batch, 8), generator=g),
            "masked_lm_weights": torch.ones(batch, 8),
            "next_sentence_labels": torch.randint(0, 2, (batch,), generator=g),
        }
        out[name] = pack(b) if name == "packed" else b
    return out


def kernel_for(model, batch: dict, device: torch.device, precision: str) -> str:
    """The first backend of :data:`BACKENDS` that runs a forward + backward pass of ``batch``."""
    inputs = to_device(model_inputs(batch), device)
    targets = to_device(batch, device)
    for name, backend in BACKENDS:
        try:
            with sdpa_kernel([backend]), autocast(device, precision), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = model(**inputs)
                loss = pretraining_loss(
                    out,
                    targets["masked_lm_ids"],
                    targets["masked_lm_weights"],
                    targets["next_sentence_labels"],
                )
            loss.total.backward()
            model.zero_grad(set_to_none=True)
            return name
        except RuntimeError:
            model.zero_grad(set_to_none=True)
    return "none"


def main() -> int:
    parser = harness.parser(__doc__, None)
    parser.add_argument("--config", help="model size (default: base on CUDA, tiny on CPU)")
    parser.add_argument("--precision", default="bf16", choices=("bf16", "fp16", "fp32"))
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--require-fast", action="store_true")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    precision = args.precision if cuda else "fp32"
    config = BertConfig.preset(args.config or ("base" if cuda else "tiny"), vocab_size=30522)
    model = BertForPreTraining(config, seed=0).to(device).train()
    found = {
        name: kernel_for(model, b, device, precision)
        for name, b in batches(args.batch, args.length, 30522, device).items()
    }
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    head_dim = config.hidden_size // config.num_attention_heads
    where_run = next(model.parameters()).device
    if attention.choose_kernel(where_run, dtype, config.num_attention_heads, head_dim) == "flash":
        found["packed"] = "flash-varlen"
    where = torch.cuda.get_device_name(device) if cuda else "CPU (no CUDA: nothing required)"
    print(f"SDPA kernels on {where}, {precision}, config {args.config or ('base' if cuda else 'tiny')}:")
    for name, kernel in found.items():
        print(f"  {name:10s} {kernel}")
    slow = [n for n in ("mask_free",) if found[n] not in ("flash", "efficient")]
    slow += [] if found["packed"] == "flash-varlen" else ["packed"]
    if cuda and args.require_fast and slow:
        print(f"FAIL: {', '.join(slow)} did not get its fast kernel (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
