"""One pre-training step, ours against transformers' BertForPreTraining, at mini and base size.

    python benchmarks/train_step.py [--shards FOLDER] [--config mini:32 --config base:8]
                                    [--steps 5] [--warmup 1] [--threads 2]
    python3 benchmarks/train_step.py --device cuda --shards gpu-data/seq128 --vocab gpu-data/vocab.txt \
        --config base:256 --steps 20 --warmup 5 --json OUT/train_step_cuda.json      (gpu_check.sh)

Input: real ``pipelines examples`` shards at max_seq_length 128 (by default made here from the
enwiki excerpt in ``../shared/data/wiki`` with the released bert-base-uncased vocabulary, as
``batching.py`` makes them: about 20 s; ``--shards`` gives another folder). The trainer's reader
(seed 0, one rank, one stream, static masks) yields the batches; every variant steps over the
same examples in the same batches, the steps of the variants interleaved so machine noise hits
all alike. Each ``--config NAME:BATCH`` is one run: ``mini`` (4/256) at batch 32 and ``base``
(12/768/12, the paper's BERT-base) at batch 8, so that a few base steps fit on two shared cores.

- ``ours``: ``pretrain.model`` as ``pretrain --batching padded`` (the default) runs it: the batch
  as the reader pads it, to its longest example rounded up to 8; MLM head only at the masked
  slots (sparse); SDPA attention (no mask when no row is padded).
- ``transformers_collator`` (the headline peer): ``BertForPreTraining`` fed as transformers'
  own ``DataCollatorForLanguageModeling`` (``mlm_probability=0.15``, its defaults otherwise) feeds
  it: the same examples, unmasked, collated and masked by the collator, padded to the batch's
  longest; MLM logits over the whole vocabulary at every position; SDPA attention.
- ``transformers_pad128``: the same collator with ``pad_to_multiple_of=128``: every row padded to
  128, as google-research/bert's TFRecords feed the model.

Why ``padded`` is ours in the pairing: it is the one of our layouts that keeps the batches as
they are (the same examples, padded by the same rule as the collator: to the longest), so the
ratio is the model's and the head's, not a different grouping of examples. ``bucketed`` regroups
the examples of a window by length (transformers' counterpart is the Trainer's
``group_by_length``); on these shards it changes little (``batching.py``: padding 5.8% -> 5.1%).

Every step: zero grads, forward, loss, backward, gradient clipping at 1.0, AdamW (``pretrain.optim
.build_optimizer``: the same optimizer and parameter groups for every variant, as the two
trainers' defaults). fp32 on CPU. tokens/s counts real (non-padding) tokens, the same for every
variant; the CPU seconds of the process are recorded too. Median of ``--steps`` steps after
``--warmup`` (collation is done before timing, for every variant). Results go to
``benchmarks/results/train_step.json`` (``--json`` elsewhere).

``--device cuda``: the same pairing on the GPU in bf16 autocast (``--precision``), with AdamW as
the trainer builds it there (fused) and clipping; every batch is on the GPU before the timing (the
trainer copies it ahead on a side stream), and each step is timed from a synchronised start to a
synchronised end. A fourth variant, ``ours_compiled``, is ours as ``pretrain`` runs it on CUDA by
default (``torch.compile`` region by region, and the loss); its compilation falls in ``--warmup``.
The peak GPU memory of the whole run is recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers

from pretrain.batching import model_inputs, num_real_tokens
from pretrain.data import ExampleShards
from pretrain.model import BertConfig, BertForPreTraining, pretraining_loss
from pretrain.optim import build_optimizer
from pretrain.runtime import autocast
from pretrain.train import compile_regions

RESULTS = Path(__file__).resolve().parent / "results" / "train_step.json"
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
VOCAB = DATA / "vocab" / "bert-base-uncased_vocab.txt"
VOCAB_SIZE, MAX_SEQ = 30522, 128
PEERS = {"transformers_collator": None, "transformers_pad128": MAX_SEQ}
"""Peer variant -> the collator's ``pad_to_multiple_of``."""


def unmasked_features(batch: dict[str, torch.Tensor]) -> list[dict]:
    """The examples of a reader batch as a tokenizer gives them to transformers' collators: the
    original tokens (the written masks undone), unpadded, with ``next_sentence_label``."""
    ids = batch["input_ids"].clone()
    chosen = batch["masked_lm_weights"] > 0
    rows = torch.arange(len(ids))[:, None].expand_as(chosen)
    ids[rows[chosen], batch["masked_lm_positions"][chosen]] = batch["masked_lm_ids"][chosen]
    lengths = batch["attention_mask"].sum(1).tolist()
    return [
        {
            "input_ids": ids[row, :n].tolist(),
            "token_type_ids": batch["token_type_ids"][row, :n].tolist(),
            "next_sentence_label": int(batch["next_sentence_labels"][row]),
        }
        for row, n in enumerate(lengths)
    ]


def peer_collator(
    pad_to_multiple_of: int | None, vocab_path: Path = VOCAB
) -> transformers.DataCollatorForLanguageModeling:
    """transformers' MLM collator over the released vocabulary (seeded masking)."""
    vocab = {line: i for i, line in enumerate(vocab_path.read_text(encoding="utf-8").splitlines())}
    tokenizer = transformers.BertTokenizerFast(vocab=vocab, do_lower_case=True)
    return transformers.DataCollatorForLanguageModeling(
        tokenizer, mlm_probability=0.15, pad_to_multiple_of=pad_to_multiple_of, seed=0
    )


@dataclass(frozen=True)
class Setting:
    """Where and how the steps run: the device and the precision (autocast)."""

    device: torch.device
    precision: str = "fp32"

    def autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.device, self.precision)

    def synchronize(self) -> None:
        """Wait for the device's queued work (each timed step starts and ends synchronised)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def ours_step(model: BertForPreTraining, setting: Setting, compiled: bool = False) -> Callable[[dict], None]:
    """One training step of ours on a reader batch (``compiled``: as ``pretrain`` on CUDA)."""
    optimizer = build_optimizer("adamw", model, 1e-4, 0.01)
    loss_of = pretraining_loss
    if compiled:
        compile_regions(model, None, None)
        loss_of = torch.compile(pretraining_loss)

    def step(batch: dict) -> None:
        optimizer.zero_grad(set_to_none=True)
        with setting.autocast():
            loss = loss_of(model(**batch["inputs"]), **batch["targets"])
        loss.total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def theirs_step(model: transformers.BertForPreTraining, setting: Setting) -> Callable[[dict], None]:
    """One training step of transformers' model on a collator batch."""
    optimizer = build_optimizer("adamw", model, 1e-4, 0.01)

    def step(batch: dict[str, torch.Tensor]) -> None:
        optimizer.zero_grad(set_to_none=True)
        with setting.autocast():
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def read_batches(shards: Path, batch_size: int, count: int) -> list[dict[str, torch.Tensor]]:
    """The first ``count`` batches the trainer's reader yields (seed 0, one rank, one stream)."""
    reader = ExampleShards(str(shards), batch_size=batch_size, seed=0, streams=1)
    out = []
    for batch in reader:
        out.append(batch)
        if len(out) == count:
            return out
    raise SystemExit(f"{shards}: fewer than {count} batches of {batch_size}; lower --steps")


def on_device(batch: dict, device: torch.device) -> dict:
    """A batch with its tensors on ``device`` (the host tensors themselves on CPU)."""
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def ours_inputs(batch: dict[str, torch.Tensor], device: torch.device) -> dict:
    """A reader batch as the trainer hands it to the model and the loss (read on the host)."""
    targets = {k: batch[k] for k in ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")}
    return {"inputs": on_device(model_inputs(batch), device), "targets": on_device(targets, device)}


def make_variants(config: BertConfig, setting: Setting) -> tuple[dict[str, Callable], torch.nn.Module]:
    """The step of every variant (ours, on CUDA also ours compiled; transformers' for each peer)
    and transformers' model."""
    device = setting.device
    steps = {"ours": ours_step(BertForPreTraining(config, seed=0).to(device).train(), setting)}
    if device.type == "cuda":
        compiled = BertForPreTraining(config, seed=0).to(device).train()
        steps["ours_compiled"] = ours_step(compiled, setting, compiled=True)
    theirs = (
        transformers.BertForPreTraining(transformers.BertConfig(**config.to_hf_dict())).to(device).train()
    )
    return steps | {name: theirs_step(theirs, setting) for name in PEERS}, theirs


def width(batch: dict) -> int:
    """The padded width of a variant's batch."""
    return int(batch.get("inputs", batch)["input_ids"].size(1))


def measure(
    shards: Path,
    config_name: str,
    batch_size: int,
    steps: int,
    warmup: int,
    setting: Setting,
    vocab: Path = VOCAB,
) -> dict:
    """Step times of every variant on the same ``warmup + steps`` batches of ``shards``."""
    config = BertConfig.preset(config_name, vocab_size=VOCAB_SIZE)
    ours_batches = read_batches(shards, batch_size, warmup + steps)
    inputs = {"ours": [ours_inputs(b, setting.device) for b in ours_batches]}
    inputs["ours_compiled"] = inputs["ours"]
    for name, multiple in PEERS.items():
        collator = peer_collator(multiple, vocab)
        inputs[name] = [on_device(collator(unmasked_features(b)), setting.device) for b in ours_batches]
    steps_of, theirs = make_variants(config, setting)
    wall: dict[str, list[float]] = {name: [] for name in steps_of}
    cpu: dict[str, list[float]] = {name: [] for name in steps_of}
    for index in range(warmup + steps):
        for name, step in steps_of.items():  # interleaved
            setting.synchronize()
            start, cpu_start = time.perf_counter(), time.process_time()
            step(inputs[name][index])
            setting.synchronize()
            if index >= warmup:
                wall[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - cpu_start)
    measured = range(warmup, warmup + steps)
    real = statistics.mean(num_real_tokens(ours_batches[i]) for i in measured)
    run = {
        "config": config_name,
        "layers_hidden_heads": [config.num_hidden_layers, config.hidden_size, config.num_attention_heads],
        "config_fields": config.to_dict(),
        "batch_size": batch_size,
        "mean_real_tokens_per_batch": real,
        "widths": {name: [width(inputs[name][i]) for i in measured] for name in steps_of},
        "steps": steps,
        "warmup": warmup,
        "transformers_attention": theirs.config._attn_implementation,
        "variants": {},
    }
    if setting.device.type == "cuda":
        run["peak_memory_gb"] = torch.cuda.max_memory_allocated(setting.device) / 2**30
    for name in steps_of:
        median, median_cpu = statistics.median(wall[name]), statistics.median(cpu[name])
        run["variants"][name] = {
            "median_step_s": median,
            "tokens_per_s": real / median,
            "median_step_cpu_s": median_cpu,
            "tokens_per_cpu_s": real / median_cpu,
            "step_s": wall[name],
        }
    for name in PEERS:
        for ours in [v for v in ("ours", "ours_compiled") if v in steps_of]:
            prefix = "" if ours == "ours" else "compiled_"
            run[f"{prefix}speedup_vs_{name}"] = (
                run["variants"][name]["median_step_s"] / run["variants"][ours]["median_step_s"]
            )
            run[f"{prefix}cpu_speedup_vs_{name}"] = (
                run["variants"][name]["median_step_cpu_s"] / run["variants"][ours]["median_step_cpu_s"]
            )
    return run


def parse_config(text: str) -> tuple[str, int]:
    """``NAME:BATCH`` (such as ``base:8``) as (name, batch size)."""
    name, _, batch = text.partition(":")
    if not name or not batch.isdigit() or int(batch) < 1:
        raise argparse.ArgumentTypeError(f"--config {text!r}: give NAME:BATCH, e.g. base:8")
    BertConfig.preset(name, vocab_size=VOCAB_SIZE)  # ValueError for an unknown preset
    return name, int(batch)


def report(run: dict, threads: int) -> None:
    """Print one run's figures."""
    layers, hidden, heads = run["layers_hidden_heads"]
    print(
        f"config {run['config']} ({layers}/{hidden}/{heads}), batch {run['batch_size']}, "
        f"{run['mean_real_tokens_per_batch']:.0f} real tokens/batch, {threads} threads, "
        f"median of {run['steps']} after {run['warmup']}; widths {run['widths']}"
    )
    for name, v in run["variants"].items():
        print(
            f"  {name:22s} {v['median_step_s']:7.3f} s/step  {v['tokens_per_s']:8.0f} tokens/s  "
            f"{v['tokens_per_cpu_s']:8.0f} tokens/CPU-s"
        )
    for name in PEERS:
        for prefix in ("", "compiled_"):
            if f"{prefix}speedup_vs_{name}" in run:
                print(
                    f"  ours{' compiled' if prefix else ''} / {name}: {run[f'{prefix}speedup_vs_{name}']:.2f}x "
                    f"(per CPU-second {run[f'{prefix}cpu_speedup_vs_{name}']:.2f}x)"
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    parser.add_argument(
        "--json", type=Path, default=RESULTS, help=f"where the figures go (default {RESULTS})"
    )
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    setting = Setting(
        torch.device(args.device), args.precision or ("bf16" if args.device == "cuda" else "fp32")
    )
    configs = args.config or [("mini", 32), ("base", 8)]
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if setting.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # as the trainer sets it
    with tempfile.TemporaryDirectory() as tmp:
        if args.shards:
            shards = Path(args.shards)
        else:
            from batching import make_shards  # the sibling script; run as `python benchmarks/...`

            shards = make_shards(Path(tmp), [MAX_SEQ])[0]
        runs = []
        for name, batch_size in configs:
            runs.append(measure(shards, name, batch_size, args.steps, args.warmup, setting, args.vocab))
            report(runs[-1], args.threads)
    result = {
        "shards": args.shards or f"made from {DATA / 'wiki'} (enwiki excerpt), seq {MAX_SEQ}, dupe 2",
        "max_seq_length": MAX_SEQ,
        "threads": args.threads,
        "device": torch.cuda.get_device_name(setting.device) if setting.device.type == "cuda" else "cpu",
        "precision": setting.precision,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": platform.processor() or platform.machine(),
        "runs": runs,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
