"""The packed (unpadded, flash varlen) model path against the padded one, on the GPU.

    python benchmarks/varlen_check.py [--config base] [--precision bf16] [--steps 20] [--compile]

1. Which kernel packed attention chose here (``pretrain/attention.py``: ``flash`` after its
   self-check passed, or ``padded``) for the model's head shape and the precision.
2. Agreement at full size: one batch of 256 at 128 tokens, dropout 0, padded and packed: the MLM +
   NSP loss of each and the gradients' largest relative difference and cosine similarity.
3. Speed of forward + backward (no optimizer step) on batches shaped like the enwiki shards (89%
   of examples at full length, the rest uniform below it): seq 128 × 256 and seq 512 × 64, padded
   and packed (static shapes, ``pretrain.batching.pack`` with the sequence length), eager and,
   with ``--compile``, ``torch.compile``d; real tokens/s over ``--steps`` steps after warm-up.

It isolates the model from the trainer (reader, optimizer, logging: ``gpu_check.sh`` measures
those end to end). Without CUDA it runs the same on the CPU (the ``tiny`` model, fp32, batches of
8): known to run end to end; the figures mean nothing there. Writes ``results/varlen_check.json``
(``--json`` elsewhere).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from pretrain import attention
from pretrain.batching import model_inputs, num_real_tokens, pack
from pretrain.model import BertConfig, BertForPreTraining, compile_for_training, pretraining_loss
from pretrain.runtime import autocast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness

VOCAB = 30522


def to_device(inputs: dict, device: torch.device) -> dict:
    """``inputs`` with every tensor moved to ``device`` (other values as they are)."""
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()
    }


def shard_like_batch(examples: int, length: int, predictions: int, seed: int) -> dict[str, torch.Tensor]:
    """A padded batch like the enwiki shards': 89% of examples at full length, the rest shorter."""
    g = torch.Generator().manual_seed(seed)
    short = torch.randint(16, length, (examples,), generator=g)
    lengths = torch.where(torch.rand(examples, generator=g) < 0.89, length, short)
    width = -(-int(lengths.max()) // 8) * 8
    real = torch.arange(width)[None, :] < lengths[:, None]
    positions = (torch.rand(examples, predictions, generator=g) * (lengths[:, None] - 2)).long() + 1
    return {
        "input_ids": torch.randint(1000, VOCAB, (examples, width), generator=g) * real,
        "attention_mask": real.long(),
        "token_type_ids": (torch.arange(width)[None, :] >= lengths[:, None] // 2).long() * real,
        "masked_lm_positions": positions,
        "masked_lm_ids": torch.randint(1000, VOCAB, (examples, predictions), generator=g),
        "masked_lm_weights": torch.ones(examples, predictions),
        "next_sentence_labels": torch.randint(0, 2, (examples,), generator=g),
    }


def step(model, batch: dict, device: torch.device, precision: str) -> torch.Tensor:
    """Forward and backward of one batch; the loss (not read back)."""
    targets = to_device(
        {k: batch[k] for k in ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")}, device
    )
    with autocast(device, precision):
        out = model(**to_device(model_inputs(batch), device))
        loss = pretraining_loss(
            out, targets["masked_lm_ids"], targets["masked_lm_weights"], targets["next_sentence_labels"]
        ).total
    loss.backward()
    return loss.detach()


def agreement(config: BertConfig, device: torch.device, precision: str, examples: int) -> dict:
    """Loss and gradients of one batch, padded and packed, dropout 0."""
    model = BertForPreTraining(
        BertConfig(**{**config.to_dict(), "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}),
        seed=0,
    ).to(device)
    batch = shard_like_batch(examples, 128, 20, seed=1)
    result, grads = {}, {}
    for name, laid_out in (("padded", batch), ("packed", pack(batch, 128))):
        model.zero_grad(set_to_none=True)
        result[f"{name}_loss"] = float(step(model, laid_out, device, precision))
        grads[name] = torch.cat([p.grad.double().flatten() for p in model.parameters() if p.grad is not None])
    difference = (grads["packed"] - grads["padded"]).abs().max() / grads["padded"].abs().max()
    result["grad_max_relative_difference"] = float(difference)
    result["grad_cosine"] = float(torch.nn.functional.cosine_similarity(grads["packed"], grads["padded"], 0))
    return result


def speed(config, device, precision: str, args, length: int, examples: int) -> dict:
    """Real tokens/s of forward + backward, padded and packed, over ``args.steps`` batches."""
    model = BertForPreTraining(config, seed=0).to(device).train()
    batches = [shard_like_batch(examples, length, max(1, length * 20 // 128), seed=s) for s in range(4)]
    layouts = {"padded": batches, "packed": [pack(b, length) for b in batches]}
    out = {}
    for mode in ("eager", "compiled") if args.compile else ("eager",):
        if mode == "compiled":
            compile_for_training(model)  # in place, as the trainer does
        for name, laid_out in layouts.items():
            for i in range(args.warmup):
                step(model, laid_out[i % 4], device, precision)
                model.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            for i in range(args.steps):
                step(model, laid_out[i % 4], device, precision)
                model.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            elapsed = time.perf_counter() - start
            tokens = sum(num_real_tokens(laid_out[i % 4]) for i in range(args.steps))
            out[f"{name}_{mode}_tokens_per_s"] = tokens / elapsed
        out[f"packed_vs_padded_{mode}"] = (
            out[f"packed_{mode}_tokens_per_s"] / out[f"padded_{mode}_tokens_per_s"]
        )
    return out


def main() -> int:
    parser = harness.parser(__doc__, "varlen_check")
    parser.add_argument("--config", help="model size (default: base on CUDA, tiny on CPU)")
    parser.add_argument("--precision", default="bf16", choices=("bf16", "fp16", "fp32"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="also torch.compile (minutes per shape)")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    precision = args.precision if cuda else "fp32"
    config = BertConfig.preset(args.config or ("base" if cuda else "tiny"), vocab_size=VOCAB)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    heads, head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    result = {
        "device": torch.cuda.get_device_name(device) if cuda else "CPU (no CUDA: the figures mean nothing)",
        "torch": torch.__version__,
        "precision": precision,
        "config": args.config or ("base" if cuda else "tiny"),
        "packed_kernel": attention.choose_kernel(device, dtype, heads, head_dim),
        "agreement_seq128": agreement(config, device, precision, 256 if cuda else 8),
    }
    for length, examples in ((128, 256), (512, 64)) if cuda else ((128, 8), (512, 2)):
        result[f"speed_seq{length}_batch{examples}"] = speed(
            config, device, precision, args, length, examples
        )
    print(json.dumps(result, indent=2))
    harness.write(args.json, result, "torch")
    agree = result["agreement_seq128"]["grad_cosine"] > 0.999
    fast = result["packed_kernel"] == "flash" or not cuda
    return 0 if agree and fast else 1


if __name__ == "__main__":
    sys.exit(main())
