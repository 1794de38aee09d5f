"""Pre-training tokens/s with padded, length-bucketed and packed batches (``pretrain --batching``).

    python benchmarks/batching.py [--shards FOLDER ...] [--config mini] [--window 16] [--threads 2]

The first ``--window`` batches of real shards (made here from the enwiki excerpt at seq 128, batch
32, and 512, batch 8, unless ``--shards``) laid out three ways over the same examples: ``padded``
(the peer: each batch to its longest, rounded up to 8, as transformers' collator pads),
``bucketed`` (the window sorted by length into batches, each trimmed; no padding, no mask) and
``packed`` (real tokens end to end, to a static size). One training step each (forward, backward,
AdamW; fp32 CPU), the layouts interleaved batch by batch; tokens/s counts real tokens, the same in
every layout; the padding share is padded positions over the positions the dense layers compute.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n, x

TOKENS_PER_BATCH = 4096
MODES = ("padded", "bucketed", "packed")


def layouts(shards: Path, window: int) -> tuple[int, int, dict[str, list[dict]]]:
    """(max_seq_length, batch size, the first ``window`` reader batches in each layout)."""
    import numpy as np

    from pretrain.batching import BatchLayout, bucket
    from pretrain.data import ExampleShards

    probe = ExampleShards(str(shards), batch_size=1, shuffle=False)
    max_len = int((probe.params.get("pairs") or {}).get("max_seq_length") or probe.params["max_seq_length"])
    batch_size = TOKENS_PER_BATCH // max_len
    reader = iter(ExampleShards(str(shards), batch_size=batch_size, seed=0, streams=1))
    source = [batch for _, batch in zip(range(window), reader, strict=False)]
    return (
        max_len,
        batch_size,
        {
            "padded": source,
            "bucketed": bucket(source, np.random.default_rng([0, 0, 0, 0, 2])),
            "packed": [BatchLayout("packed", max_seq_length=max_len).single(b) for b in source],
        },
    )


def measure(shards: Path, config_name: str, window: int, warmup: int) -> dict:
    """Tokens/s of each layout on the first ``window`` batches of ``shards``."""
    import torch

    from pretrain.batching import model_inputs, num_real_tokens
    from pretrain.model import BertConfig, BertForPreTraining, pretraining_loss

    max_len, batch_size, batches = layouts(shards, window)
    config = BertConfig.preset(config_name, vocab_size=30522)
    models = {m: BertForPreTraining(config, seed=0).train() for m in MODES}
    optimizers = {m: torch.optim.AdamW(models[m].parameters(), lr=1e-4) for m in MODES}

    def step(mode: str, index: int) -> None:
        batch = batches[mode][index % window]
        optimizers[mode].zero_grad(set_to_none=True)
        out = models[mode](**model_inputs(batch))
        targets = (batch["masked_lm_ids"], batch["masked_lm_weights"], batch["next_sentence_labels"])
        pretraining_loss(out, *targets).total.backward()
        optimizers[mode].step()

    for index in range(warmup):
        for mode in MODES:
            step(mode, index)
    times = harness.interleave({m: lambda i, m=m: step(m, i) for m in MODES}, window)
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
        seconds, cpu_seconds = sum(times[mode]["wall_s"]), sum(times[mode]["cpu_s"])
        mask_free = [
            b for b in batches[mode] if "cu_seqlens" in b or model_inputs(b)["attention_mask"] is None
        ]
        result["modes"][mode] = {
            "seconds": round(seconds, 3),
            "cpu_seconds": round(cpu_seconds, 3),
            "tokens_per_s": real / seconds,
            "tokens_per_cpu_s": real / cpu_seconds,
            "padding_share": 1 - real / sum(int(b["input_ids"].numel()) for b in batches[mode]),
            "mask_free_batches": len(mask_free),
        }
    for mode in ("bucketed", "packed"):
        result[f"{mode}_speedup_vs_padded"] = (
            result["modes"][mode]["tokens_per_s"] / result["modes"]["padded"]["tokens_per_s"]
        )
    return result


def main() -> None:
    parser = harness.parser(__doc__, "batching")
    parser.add_argument("--shards", nargs="*", help="`pipelines examples` outputs (default: made here)")
    parser.add_argument("--lengths", type=int, nargs="*", default=[128, 512], help="when making shards")
    parser.add_argument("--config", default="mini")
    parser.add_argument("--window", type=int, default=16, help="batches measured (one bucketing window)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folders = (
            [Path(s) for s in args.shards] if args.shards else harness.make_shards(Path(tmp), args.lengths)
        )
        runs = [measure(f, args.config, args.window, args.warmup) for f in folders]
    result = {"config": args.config, "threads": args.threads, "window": args.window, "runs": runs}
    harness.write(args.json, result, "torch", rows=rows)


def rows(r: dict) -> list[Row]:
    found = []
    for run in r["runs"]:
        modes, padded = run["modes"], run["modes"]["padded"]
        for mode in ("bucketed", "packed"):
            found.append(
                (
                    f"pre-training, ours `--batching {mode}` against ours `padded` (a layout ratio, not a peer); "
                    f"real enwiki shards, seq {run['max_seq_length']}, {run['batches']} batches of "
                    f"{run['batch_size']}, config {r['config']}, fp32 CPU, {r['threads']} threads",
                    f"{n(modes[mode]['tokens_per_s'])} tokens/s, padding {modes[mode]['padding_share']:.1%}",
                    f"ours `--batching padded` (pads as transformers' collator): {n(padded['tokens_per_s'])} tokens/s, "
                    f"padding {padded['padding_share']:.1%}",
                    x(run[f"{mode}_speedup_vs_padded"]),
                )
            )
    return found


def layouts_table(r: dict) -> list[str]:
    """Every layout of every run: tokens/s, tokens/CPU-s, padding share, batches without padding."""
    lines = [
        "| shards | layout | tokens/s | tokens/CPU-s | padding share | batches without padding |",
        "|---|---|---|---|---|---|",
    ]
    for run in r["runs"]:
        padded = run["modes"]["padded"]
        for mode, m in run["modes"].items():
            shards = f"seq {run['max_seq_length']}, batch {run['batch_size']}" if mode == "padded" else ""
            speed, cpu = f"{m['tokens_per_s']:,.0f}", f"{m['tokens_per_cpu_s']:,.0f}"
            if mode != "padded":
                speed += f" ({m['tokens_per_s'] / padded['tokens_per_s']:.2f}x)"
                cpu += f" ({m['tokens_per_cpu_s'] / padded['tokens_per_cpu_s']:.2f}x)"
            layout = "padded (peer)" if mode == "padded" else mode
            lines.append(
                f"| {shards} | {layout} | {speed} | {cpu} | {m['padding_share']:.1%} | {m['mask_free_batches']}/{run['batches']} |"
            )
    return lines


TABLES = {"layouts": layouts_table}


if __name__ == "__main__":
    main()
