"""One pre-training step, ours against transformers' BertForPreTraining, at mini and base size.

    python benchmarks/train_step.py [--shards FOLDER] [--config mini:32 --config base:8] [--steps 5]
    python3 benchmarks/train_step.py --device cuda --shards gpu-data/seq128 --vocab gpu-data/vocab.txt \\
        --config base:256 --steps 20 --warmup 5 --json OUT/train_step_cuda.json      (gpu_check.sh)

The same batches of real seq-128 shards (made here from the enwiki excerpt unless ``--shards``; the
trainer's reader, seed 0, one stream) for every variant, the variants interleaved step by step;
each step zero grads, forward, loss, backward, clipping at 1.0 and AdamW over the same parameter
groups; medians of ``--steps`` after ``--warmup``; tokens/s counts real tokens. Ours is
``pretrain.model`` as ``--batching padded`` feeds it (to the batch's longest, rounded up to 8; MLM
head at the masked slots only). The peers: ``BertForPreTraining`` fed by transformers'
``DataCollatorForLanguageModeling`` (the examples with the written masks undone, masked by the
collator, padded to the longest; logits over the vocabulary at every position), and the same padded
to 128 as google-research/bert's TFRecords. ``--device cuda``: bf16 autocast, fused AdamW, batches
on the GPU before timing, each step between two synchronisations, and ``ours_compiled`` (as
``pretrain`` runs on CUDA: ``torch.compile`` region by region, compiled in the warm-up).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n, x

VOCAB = harness.VOCAB
VOCAB_SIZE, MAX_SEQ = 30522, 128
PEERS = {
    "transformers_collator": "BertForPreTraining fed by DataCollatorForLanguageModeling (padded to the batch's longest)",
    "transformers_pad128": "BertForPreTraining, every row padded to 128 (as the reference's TFRecords)",
}
PAD_TO = {"transformers_collator": None, "transformers_pad128": MAX_SEQ}
"""Peer variant -> the collator's ``pad_to_multiple_of``."""


def unmasked_features(batch: dict) -> list[dict]:
    """The examples of a reader batch as a tokenizer gives them to transformers' collators: the
    original tokens (the written masks undone), unpadded, with ``next_sentence_label``."""
    import torch

    ids = batch["input_ids"].clone()
    chosen = batch["masked_lm_weights"] > 0
    rows = torch.arange(len(ids))[:, None].expand_as(chosen)
    ids[rows[chosen], batch["masked_lm_positions"][chosen]] = batch["masked_lm_ids"][chosen]
    return [
        {
            "input_ids": ids[row, :length].tolist(),
            "token_type_ids": batch["token_type_ids"][row, :length].tolist(),
            "next_sentence_label": int(batch["next_sentence_labels"][row]),
        }
        for row, length in enumerate(batch["attention_mask"].sum(1).tolist())
    ]


def peer_collator(pad_to_multiple_of: int | None, vocab_path: Path = VOCAB):
    """transformers' MLM collator over the released vocabulary (seeded masking)."""
    import transformers

    vocab = {line: i for i, line in enumerate(vocab_path.read_text(encoding="utf-8").splitlines())}
    tokenizer = transformers.BertTokenizerFast(vocab=vocab, do_lower_case=True)
    return transformers.DataCollatorForLanguageModeling(
        tokenizer, mlm_probability=0.15, pad_to_multiple_of=pad_to_multiple_of, seed=0
    )


def parse_config(text: str) -> tuple[str, int]:
    """``NAME:BATCH`` (such as ``base:8``) as (name, batch size)."""
    from pretrain.model import BertConfig

    name, _, batch = text.partition(":")
    if not name or not batch.isdigit() or int(batch) < 1:
        raise argparse.ArgumentTypeError(f"--config {text!r}: give NAME:BATCH, e.g. base:8")
    BertConfig.preset(name, vocab_size=VOCAB_SIZE)  # ValueError for an unknown preset
    return name, int(batch)


def step_of(model, device, precision: str, ours: bool, compiled: bool = False) -> Callable[[dict], None]:
    """One training step of ``model`` on a batch of its own inputs (ours: ``inputs`` and
    ``targets``; transformers': the collator's batch, whose forward returns ``.loss``)."""
    import torch

    from pretrain.model import compile_for_training, pretraining_loss
    from pretrain.optim import build_optimizer
    from pretrain.runtime import autocast

    optimizer = build_optimizer("adamw", model, 1e-4, 0.01)
    loss_of = compile_for_training(model) if compiled else pretraining_loss

    def step(batch: dict) -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, precision):
            loss = (
                loss_of(model(**batch["inputs"]), **batch["targets"]).total if ours else model(**batch).loss
            )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def measure(shards: Path, name: str, batch_size: int, args, device, precision: str) -> dict:
    """Step times of every variant on the same ``warmup + steps`` batches of ``shards``."""
    import torch
    import transformers

    from pretrain.batching import model_inputs, num_real_tokens
    from pretrain.data import ExampleShards
    from pretrain.model import BertConfig, BertForPreTraining

    def on_device(batch: dict) -> dict:
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    count = args.warmup + args.steps
    reader = iter(ExampleShards(str(shards), batch_size=batch_size, seed=0, streams=1))
    batches = [b for _, b in zip(range(count), reader, strict=False)]
    if len(batches) < count:
        sys.exit(f"{shards}: fewer than {count} batches of {batch_size}; lower --steps")
    targets = ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")
    ours_in = [
        {"inputs": on_device(model_inputs(b)), "targets": on_device({k: b[k] for k in targets})}
        for b in batches
    ]
    inputs = {"ours": ours_in, "ours_compiled": ours_in}
    for peer, multiple in PAD_TO.items():
        collator = peer_collator(multiple, args.vocab)
        inputs[peer] = [on_device(collator(unmasked_features(b))) for b in batches]
    config = BertConfig.preset(name, vocab_size=VOCAB_SIZE)
    steps = {"ours": step_of(BertForPreTraining(config, seed=0).to(device).train(), device, precision, True)}
    if device.type == "cuda":
        model = BertForPreTraining(config, seed=0).to(device).train()
        steps["ours_compiled"] = step_of(model, device, precision, True, compiled=True)
    theirs = (
        transformers.BertForPreTraining(transformers.BertConfig(**config.to_hf_dict())).to(device).train()
    )
    steps |= {peer: step_of(theirs, device, precision, False) for peer in PAD_TO}
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    variants = {k: lambda i, k=k, step=step: step(inputs[k][i]) for k, step in steps.items()}
    times = harness.interleave(variants, args.steps, args.warmup, sync)
    measured = range(args.warmup, count)
    real = statistics.mean(num_real_tokens(batches[i]) for i in measured)
    run = {
        "config": name,
        "layers_hidden_heads": [config.num_hidden_layers, config.hidden_size, config.num_attention_heads],
        "config_fields": config.to_dict(),
        "batch_size": batch_size,
        "mean_real_tokens_per_batch": real,
        "widths": {
            k: [int(inputs[k][i].get("inputs", inputs[k][i])["input_ids"].size(1)) for i in measured]
            for k in steps
        },
        "steps": args.steps,
        "warmup": args.warmup,
        "transformers_attention": theirs.config._attn_implementation,
    }
    if device.type == "cuda":
        run["peak_memory_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
    v = run["variants"] = harness.step_medians(times, real)
    for peer in PAD_TO:
        for ours, prefix in (("ours", ""), ("ours_compiled", "compiled_")):
            if ours in steps:
                run[f"{prefix}speedup_vs_{peer}"] = v[peer]["median_step_s"] / v[ours]["median_step_s"]
                run[f"{prefix}cpu_speedup_vs_{peer}"] = (
                    v[peer]["median_step_cpu_s"] / v[ours]["median_step_cpu_s"]
                )
    return run


def main() -> None:
    parser = harness.parser(__doc__, "train_step")
    parser.add_argument("--shards", help="a `pipelines examples` output at seq 128 (default: made here)")
    parser.add_argument(
        "--config",
        type=parse_config,
        action="append",
        metavar="NAME:BATCH",
        help="repeatable (default mini:32, base:8)",
    )
    parser.add_argument("--steps", type=int, default=5, help="measured steps per variant")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured steps per variant")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--precision", choices=("fp32", "bf16", "fp16"), help="default: bf16 on CUDA, fp32 on CPU"
    )
    parser.add_argument("--vocab", type=Path, default=VOCAB, help="the shards' vocab.txt (the collator's)")
    args = parser.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    device = torch.device(args.device)
    precision = args.precision or ("bf16" if args.device == "cuda" else "fp32")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # as the trainer sets it
    with tempfile.TemporaryDirectory() as tmp:
        shards = Path(args.shards) if args.shards else harness.make_shards(Path(tmp), [MAX_SEQ])[0]
        runs = [
            measure(shards, name, batch, args, device, precision)
            for name, batch in args.config or [("mini", 32), ("base", 8)]
        ]
    result = {
        "shards": args.shards
        or f"made from {harness.WIKI_DUMP.parent} (enwiki excerpt), seq {MAX_SEQ}, dupe 2",
        "max_seq_length": MAX_SEQ,
        "threads": args.threads,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "precision": precision,
        "runs": runs,
    }
    harness.write(args.json, result, "torch", "transformers", rows=rows)


def rows(r: dict) -> list[Row]:
    found, device = [], "CPU" if r["device"] == "cpu" else r["device"]
    for run in r["runs"]:
        layers, hidden, heads = run["layers_hidden_heads"]
        what = (
            f"pre-training step, config {run['config']} ({layers}/{hidden}/{heads}), batch {run['batch_size']}, "
            f"real enwiki shards at seq {r['max_seq_length']} ({n(run['mean_real_tokens_per_batch'])} real "
            f"tokens/batch), {r['precision']} {device}, {r['threads']} threads; ours `--batching padded`"
        )
        ours = f"{n(run['variants']['ours']['tokens_per_s'])} tokens/s"
        for peer, label in PEERS.items():
            peer_figure = f"{label}: {n(run['variants'][peer]['tokens_per_s'])} tokens/s"
            ratio = f"{x(run[f'speedup_vs_{peer}'])} ({run[f'cpu_speedup_vs_{peer}']:.2f}x per CPU-s)"
            found.append((what, ours, peer_figure, ratio))
    return found


if __name__ == "__main__":
    main()
