"""Pre-training tokens/s with padded, length-bucketed and packed batches (``pretrain --batching``).

    python benchmarks/batching.py [--shards FOLDER ...] [--config mini] [--window 16] [--threads 2]

Input: real ``pipelines examples`` shards. By default the script makes them from the enwiki excerpt
in ``../shared/data/wiki`` (``pipelines wikipedia`` → ``corpus`` → ``examples`` with the released
bert-base-uncased vocabulary, dupe factor 2, train split) at sequence lengths 128 (batch 32) and
512 (batch 8), so both batches hold up to 4,096 tokens; ``--shards`` gives other folders (batch
``4096 / max_seq_length``).

For each folder: the first ``--window`` batches the trainer's reader yields (seed 0, one rank,
static masks) are laid out three ways, each one full pass over the same examples:

- peer, ``padded``: every batch padded to its longest example rounded up to 8 — what
  transformers' ``DataCollatorForLanguageModeling`` (``pad_to_multiple_of=8``) gives;
- ``bucketed``: the window's examples sorted by length into batches, each trimmed (a batch with no
  padding runs attention without a mask);
- ``packed``: each batch as its real tokens end to end, rounded up to a static size (varlen
  layout; on CPU, attention scatters into a padded block, so only the dense layers skip the
  padding; its padding share is the static size's padding segments).

One training step each (forward + backward + AdamW, fp32 CPU, ``torch`` threads as given), the
three layouts interleaved batch by batch so machine noise hits all alike, after ``--warmup``
unmeasured steps. tokens/s counts real (non-padding) tokens: the same examples in every layout, so
the ratio is the speed-up. The machine is shared, so the CPU seconds of the process are recorded
too (tokens per CPU-second, steadier under load than wall time). The padding share is the padded positions over the positions the dense
layers compute. Results go to ``benchmarks/results/batching.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from pretrain.batching import BatchLayout, bucket, model_inputs, num_real_tokens
from pretrain.data import ExampleShards
from pretrain.model import BertConfig, BertForPreTraining, pretraining_loss

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results" / "batching.json"
DATA = ROOT.parent / "shared" / "data"
DUMP = DATA / "wiki" / "gensim_enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
VOCAB = DATA / "vocab" / "bert-base-uncased_vocab.txt"
TOKENS_PER_BATCH = 4096
MODES = ("padded", "bucketed", "packed")


def make_shards(folder: Path, lengths: list[int]) -> list[Path]:
    """Real shards from the enwiki excerpt at each of ``lengths`` (about a minute each)."""
    bin_dir = Path(sys.executable).parent
    fast = ["--runner", "FnApiRunner"]

    def run(*args: str) -> None:
        subprocess.run([str(bin_dir / "pipelines"), *args, *fast], check=True, stdout=subprocess.DEVNULL)

    run("wikipedia", "--input", str(DUMP), "--output", str(folder / "wiki"), "--num-shards", "4")
    run("corpus", "--input", str(folder / "wiki"), "--output", str(folder / "corpus"), "--num-shards", "2")
    outputs = []
    for length in lengths:
        out = folder / f"seq{length}"
        run(
            "examples", "--corpus", str(folder / "corpus"), "--vocab", str(VOCAB), "--output", str(out),
            "--split", "train", "--max-seq-length", str(length), "--dupe-factor", "2", "--num-shards", "4", "--num-buckets", "8",
        )  # fmt: skip
        outputs.append(out)
    return outputs


def layouts(shards: Path, window: int) -> tuple[int, int, dict[str, list[dict]]]:
    """(max_seq_length, batch size, the first ``window`` reader batches in each layout)."""
    probe = ExampleShards(str(shards), batch_size=1, shuffle=False)
    max_len = int((probe.params.get("pairs") or {}).get("max_seq_length") or probe.params["max_seq_length"])
    batch_size = TOKENS_PER_BATCH // max_len
    reader = ExampleShards(str(shards), batch_size=batch_size, seed=0, streams=1)
    source = []
    for batch in reader:
        source.append(batch)
        if len(source) == window:
            break
    out = {
        "padded": source,
        "bucketed": bucket(source, np.random.default_rng([0, 0, 0, 0, 2])),
        "packed": [BatchLayout("packed", max_seq_length=max_len).single(b) for b in source],
    }
    return max_len, batch_size, out


def computed_positions(batch: dict) -> int:
    """Positions the dense layers compute for a batch (all of them for a padded one)."""
    return int(batch["input_ids"].numel())


def train_step(model: BertForPreTraining, optimizer: torch.optim.Optimizer, batch: dict) -> None:
    optimizer.zero_grad(set_to_none=True)
    out = model(**model_inputs(batch))
    loss = pretraining_loss(
        out, batch["masked_lm_ids"], batch["masked_lm_weights"], batch["next_sentence_labels"]
    )
    loss.total.backward()
    optimizer.step()


def measure(shards: Path, config_name: str, window: int, warmup: int) -> dict:
    """Tokens/s of each layout on the first ``window`` batches of ``shards``."""
    max_len, batch_size, batches = layouts(shards, window)
    config = BertConfig.preset(config_name, vocab_size=30522)
    models = {m: BertForPreTraining(config, seed=0).train() for m in MODES}
    optimizers = {m: torch.optim.AdamW(models[m].parameters(), lr=1e-4) for m in MODES}
    for index in range(warmup):
        for mode in MODES:
            train_step(models[mode], optimizers[mode], batches[mode][index % window])
    seconds, cpu_seconds = dict.fromkeys(MODES, 0.0), dict.fromkeys(MODES, 0.0)
    for index in range(window):
        for mode in MODES:  # interleaved
            start, cpu_start = time.perf_counter(), time.process_time()
            train_step(models[mode], optimizers[mode], batches[mode][index])
            seconds[mode] += time.perf_counter() - start
            cpu_seconds[mode] += time.process_time() - cpu_start
    real = sum(num_real_tokens(b) for b in batches["padded"])
    result = {
        "shards": str(shards),
        "max_seq_length": max_len,
        "batch_size": batch_size,
        "batches": window,
        "real_tokens": real,
        "modes": {},
    }
    for mode in MODES:
        computed = sum(computed_positions(b) for b in batches[mode])
        result["modes"][mode] = {
            "seconds": round(seconds[mode], 3),
            "cpu_seconds": round(cpu_seconds[mode], 3),
            "tokens_per_s": real / seconds[mode],
            "tokens_per_cpu_s": real / cpu_seconds[mode],
            "padding_share": 1 - real / computed,
            "mask_free_batches": sum(
                1 for b in batches[mode] if "cu_seqlens" in b or model_inputs(b)["attention_mask"] is None
            ),
        }
    padded = result["modes"]["padded"]["tokens_per_s"]
    for mode in ("bucketed", "packed"):
        result[f"{mode}_speedup_vs_padded"] = result["modes"][mode]["tokens_per_s"] / padded
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", nargs="*", help="`pipelines examples` outputs (default: made here)")
    parser.add_argument("--lengths", type=int, nargs="*", default=[128, 512], help="when making shards")
    parser.add_argument("--config", default="mini")
    parser.add_argument("--window", type=int, default=16, help="batches measured (one bucketing window)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        if args.shards:
            folders = [Path(s) for s in args.shards]
        elif DUMP.exists() and VOCAB.exists():
            folders = make_shards(Path(tmp), args.lengths)
        else:
            print(f"no shards given and no {DUMP} to make them from", file=sys.stderr)
            return 1
        runs = [measure(f, args.config, args.window, args.warmup) for f in folders]
    result = {
        "config": args.config,
        "threads": args.threads,
        "window": args.window,
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "runs": runs,
    }
    for run in runs:
        print(
            f"seq {run['max_seq_length']}, batch {run['batch_size']}, {run['batches']} batches, "
            f"{run['real_tokens']:,} real tokens, config {args.config}, {args.threads} threads:"
        )
        for mode, r in run["modes"].items():
            ratio = r["tokens_per_s"] / run["modes"]["padded"]["tokens_per_s"]
            print(
                f"  {mode:9s} {r['tokens_per_s']:8,.0f} tokens/s  {ratio:4.2f}x  "
                f"{r['tokens_per_cpu_s']:8,.0f} tokens/CPU-s  padding {r['padding_share']:6.1%}  "
                f"mask-free batches {r['mask_free_batches']}/{run['batches']}"
            )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
