"""One pre-training step (forward + backward + AdamW), ours against transformers' BertForPreTraining.

    python benchmarks/train_step.py [--config mini] [--steps 7] [--warmup 2] [--threads 2]

Same config (vocab 30522), same fp32 CPU, same batches (32 rows; lengths drawn like the reference
generator's output with max_seq_length 128: 90% of pairs fill the sequence, 10% get a random
shorter target, as ``short_seq_prob=0.1``; ``min(20, round(0.15 * length))`` masked positions per
row, at most 20), measured in the same run with the steps of the variants interleaved:

- ours: batch padded to its longest row rounded up to 8, MLM head only at the 20 prediction
  slots (sparse), attention through SDPA with a boolean padding mask, ``pretraining_loss``;
- transformers as the reference feeds it: every row padded to 128, MLM logits over the full
  vocabulary at every position, ``labels`` -100 except at the masked positions;
- transformers with the same batch-max padding as ours (separates the padding effect from the
  sparse head). transformers 5 uses SDPA attention as well.

tokens/s counts real (non-padding) tokens, the same for every variant. Median of ``--steps`` steps
after ``--warmup``. Results go to ``benchmarks/results/train_step.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

from pretrain.model import BertConfig, BertForPreTraining, pretraining_loss

RESULTS = Path(__file__).resolve().parent / "results" / "train_step.json"
VOCAB_SIZE, BATCH, MAX_SEQ, MAX_PRED = 30522, 32, 128, 20


def draw_batch(g: torch.Generator) -> dict[str, torch.Tensor]:
    """A batch padded to 128 with the fields ``pipelines examples`` writes."""
    short = torch.rand(BATCH, generator=g) < 0.1
    lengths = torch.where(short, torch.randint(8, MAX_SEQ + 1, (BATCH,), generator=g), MAX_SEQ)
    cols = torch.arange(MAX_SEQ)[None, :]
    real = cols < lengths[:, None]
    input_ids = torch.randint(1000, VOCAB_SIZE, (BATCH, MAX_SEQ), generator=g) * real
    split = lengths // 2
    token_type_ids = ((cols >= split[:, None]) & real).long()
    positions = torch.zeros(BATCH, MAX_PRED, dtype=torch.long)
    weights = torch.zeros(BATCH, MAX_PRED)
    for row, length in enumerate(lengths.tolist()):
        count = min(MAX_PRED, max(1, round(0.15 * length)))
        chosen = torch.randperm(length - 2, generator=g)[:count].sort().values + 1
        positions[row, :count] = chosen
        weights[row, :count] = 1.0
    ids = torch.randint(1000, VOCAB_SIZE, (BATCH, MAX_PRED), generator=g)
    labels = torch.full((BATCH, MAX_SEQ), -100)
    rows = torch.arange(BATCH)[:, None].expand(-1, MAX_PRED)
    labels[rows[weights > 0], positions[weights > 0]] = ids[weights > 0]
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": real.long(),
        "masked_lm_positions": positions,
        "masked_lm_ids": ids,
        "masked_lm_weights": weights,
        "labels": labels,
        "next_sentence_labels": torch.randint(0, 2, (BATCH,), generator=g),
    }


def to_batch_max(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The same batch padded only to its longest row, rounded up to a multiple of 8 (the reader's)."""
    width = -(-int(batch["attention_mask"].sum(1).max()) // 8) * 8
    cut = ("input_ids", "token_type_ids", "attention_mask", "labels")
    return {k: v[:, :width] if k in cut else v for k, v in batch.items()}


def ours_step(model: BertForPreTraining, optimizer: torch.optim.Optimizer) -> Callable:
    def step(batch: dict[str, torch.Tensor]) -> None:
        b = to_batch_max(batch)
        optimizer.zero_grad(set_to_none=True)
        out = model(b["input_ids"], b["token_type_ids"], b["attention_mask"], b["masked_lm_positions"])
        loss = pretraining_loss(out, b["masked_lm_ids"], b["masked_lm_weights"], b["next_sentence_labels"])
        loss.total.backward()
        optimizer.step()

    return step


def theirs_step(model, optimizer: torch.optim.Optimizer, batch_max: bool) -> Callable:
    def step(batch: dict[str, torch.Tensor]) -> None:
        b = to_batch_max(batch) if batch_max else batch
        optimizer.zero_grad(set_to_none=True)
        out = model(
            input_ids=b["input_ids"],
            token_type_ids=b["token_type_ids"],
            attention_mask=b["attention_mask"],
            labels=b["labels"],
            next_sentence_label=b["next_sentence_labels"],
        )
        out.loss.backward()
        optimizer.step()

    return step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="mini", help="preset name (tiny, mini, small, medium, base)")
    parser.add_argument("--steps", type=int, default=7, help="measured steps per variant")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured steps per variant")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    config = BertConfig.preset(args.config, vocab_size=VOCAB_SIZE)
    ours = BertForPreTraining(config, seed=0).train()
    theirs_full = transformers.BertForPreTraining(transformers.BertConfig(**config.to_hf_dict())).train()
    theirs_max = transformers.BertForPreTraining(transformers.BertConfig(**config.to_hf_dict())).train()
    variants = {
        "ours": ours_step(ours, torch.optim.AdamW(ours.parameters(), lr=1e-4)),
        "transformers_pad128": theirs_step(
            theirs_full, torch.optim.AdamW(theirs_full.parameters(), lr=1e-4), False
        ),
        "transformers_batch_max": theirs_step(
            theirs_max, torch.optim.AdamW(theirs_max.parameters(), lr=1e-4), True
        ),
    }
    g = torch.Generator().manual_seed(1234)
    batches = [draw_batch(g) for _ in range(args.warmup + args.steps)]
    times: dict[str, list[float]] = {name: [] for name in variants}
    for index, batch in enumerate(batches):
        for name, step in variants.items():  # interleaved, so machine noise hits all alike
            start = time.perf_counter()
            step(batch)
            if index >= args.warmup:
                times[name].append(time.perf_counter() - start)

    measured = batches[args.warmup :]
    real_tokens = statistics.mean(int(b["attention_mask"].sum()) for b in measured)
    widths = [int(to_batch_max(b)["input_ids"].size(1)) for b in measured]
    result = {
        "config": args.config,
        "config_fields": config.to_dict(),
        "batch_size": BATCH,
        "max_seq_length": MAX_SEQ,
        "max_predictions_per_seq": MAX_PRED,
        "mean_real_tokens_per_batch": real_tokens,
        "batch_max_widths": widths,
        "threads": args.threads,
        "steps": args.steps,
        "warmup": args.warmup,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "transformers_attention": theirs_full.config._attn_implementation,
        "machine": platform.processor() or platform.machine(),
        "variants": {},
    }
    for name, runs in times.items():
        median = statistics.median(runs)
        result["variants"][name] = {
            "median_step_s": median,
            "tokens_per_s": real_tokens / median,
            "step_s": runs,
        }
    ours_s = result["variants"]["ours"]["median_step_s"]
    result["speedup_vs_transformers_pad128"] = (
        result["variants"]["transformers_pad128"]["median_step_s"] / ours_s
    )
    result["speedup_vs_transformers_batch_max"] = (
        result["variants"]["transformers_batch_max"]["median_step_s"] / ours_s
    )

    print(
        f"config {args.config} ({config.num_hidden_layers}/{config.hidden_size}), vocab {VOCAB_SIZE}, "
        f"batch {BATCH}, {real_tokens:.0f} real tokens/batch, batch-max widths {sorted(set(widths))}, "
        f"{args.threads} threads, median of {args.steps}"
    )
    for name, v in result["variants"].items():
        print(f"  {name:24s} {v['median_step_s']:7.3f} s/step  {v['tokens_per_s']:8.0f} tokens/s")
    print(f"  ours / transformers (padded to 128):      {result['speedup_vs_transformers_pad128']:.2f}x")
    print(f"  ours / transformers (batch-max padding):  {result['speedup_vs_transformers_batch_max']:.2f}x")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
