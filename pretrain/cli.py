"""``pretrain``: train BERT (MLM + NSP) from example shards; ``pretrain export``: to transformers' format."""

from __future__ import annotations

import contextlib
import logging
import os
import sys

import click

from pretrain.config import BATCHING_MODES, COMPILE_MODES, LR_SCHEDULES, OBJECTIVES, OPTIMIZERS, PRECISIONS
from pretrain.model import PRESETS
from schemas.commands import OneLineGroup, OutputError, UsageError
from schemas.outputs import OutputFolder
from schemas.paths import check_apart

_EPILOG = """\b
Examples:
  pretrain --shards gs://b/shards/seq128 --config base --output gs://b/runs/base \\
      --global-batch-size 256 --max-steps 900000 --schedule-steps 1000000 --lr 1e-4 \\
      --warmup-steps 10000 --precision bf16
  pretrain --shards gs://b/shards/seq512 --resume gs://b/runs/base --max-steps 1000000   # phase 2
  torchrun --nnodes 2 --nproc_per_node 8 -m pretrain --shards ... --output gs://b/runs/base ...
  pretrain export --checkpoint gs://b/runs/base --format hf --output out/hf-base
"""


@click.group(
    cls=OneLineGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=_EPILOG,
)
@click.version_option(package_name="bert-pretraining", message="%(prog)s %(version)s")
@click.option("--shards", help="A `pipelines examples` output (local folder or gs://, s3:// URL).")
@click.option("--output", help="Run folder for checkpoints, metrics.jsonl, TensorBoard and plots.")
@click.option(
    "--config",
    default=None,
    help=f"Model size: {', '.join(PRESETS)} (layers/hidden: tiny 2/128 … base 12/768, large "
    "24/1024) or L/H/A (layers/hidden/heads, e.g. 6/512/8). Default base; taken from the "
    "checkpoint with --resume/--init-from.",
)
@click.option(
    "--no-nsp",
    "nsp",
    flag_value=False,
    default=True,
    help="MLM only: no next-sentence head, parameters or loss (the shards' NSP labels are ignored).",
)
@click.option(
    "--objective",
    type=click.Choice(OBJECTIVES),
    default="mlm",
    show_default=True,
    help="mlm: masked LM; ltr: causal left-to-right LM on the restored tokens (no NSP).",
)
@click.option(
    "--global-batch-size",
    type=int,
    default=256,
    show_default=True,
    help="Examples per optimizer step, all ranks.",
)
@click.option(
    "--micro-batch-size", type=int, help="Examples per rank per forward pass (gradient accumulation)."
)
@click.option("--max-steps", type=int, default=1000, show_default=True)
@click.option(
    "--schedule-steps",
    type=int,
    help="Step at which the learning rate reaches 0 (default --max-steps); phase 1 of BERT: 1000000.",
)
@click.option("--lr", type=float, default=1e-4, show_default=True, help="Peak learning rate.")
@click.option("--warmup-steps", type=int, default=100, show_default=True)
@click.option(
    "--decay-power", type=float, default=1.0, show_default=True, help="1 = linear decay to 0 at --max-steps."
)
@click.option(
    "--lr-schedule",
    type=click.Choice(LR_SCHEDULES),
    default="transformers",
    show_default=True,
    help="transformers: decay after warm-up; reference: google-research/bert's polynomial_decay.",
)
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="adamw", show_default=True)
@click.option("--weight-decay", type=float, default=0.01, show_default=True)
@click.option("--max-grad-norm", type=float, default=1.0, show_default=True, help="0 disables clipping.")
@click.option("--precision", type=click.Choice(PRECISIONS), default="bf16", show_default=True)
@click.option(
    "--seed", type=int, default=12345, show_default=True, help="Seeds weights, data order, dropout."
)
@click.option(
    "--save-steps", type=int, default=1000, show_default=True, help="Checkpoint every N optimizer steps."
)
@click.option("--keep-checkpoints", type=int, default=3, show_default=True)
@click.option("--log-steps", type=int, default=50, show_default=True)
@click.option("--validation-shards", help="Held-out shards (e.g. `pipelines examples --split validation`).")
@click.option(
    "--eval-steps", type=int, default=0, show_default=True, help="Evaluate every N steps (0: at the end)."
)
@click.option("--eval-batches", type=int, default=50, show_default=True, help="Validation batches per rank.")
@click.option("--resume", help="Continue the run in this folder from its newest complete checkpoint.")
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace the earlier run in --output (its checkpoints, metrics, plots); without it a "
    "non-empty --output is refused.",
)
@click.option(
    "--init-from", help="Start from weights: an HF-format BERT folder, a checkpoint or a run folder."
)
@click.option("--vocab", help="vocab.txt / tokenizer.json; default: the one the shards were made with.")
@click.option("--max-seq-length", type=int, help="Refuse shards made with another length.")
@click.option("--dynamic-masking", is_flag=True, help="Re-mask every batch (new masks each epoch).")
@click.option("--masked-lm-prob", type=float, help="Dynamic masking: default the shards' setting.")
@click.option("--max-predictions-per-seq", type=int, help="Dynamic masking: default the shards' setting.")
@click.option("--whole-word-masking/--no-whole-word-masking", default=None, help="Default: the shards'.")
@click.option("--mask-share", type=float, help="Dynamic masking: share of predictions -> [MASK].")
@click.option("--keep-share", type=float, help="Dynamic masking: share kept unchanged.")
@click.option("--random-share", type=float, help="Dynamic masking: share -> a random token.")
@click.option(
    "--batching",
    type=click.Choice(BATCHING_MODES),
    default="padded",
    show_default=True,
    help="padded: to each batch's longest; bucketed: grouped by length; packed: no padding (varlen).",
)
@click.option("--bucket-window", type=int, default=64, show_default=True, help="Batches regrouped by length.")
@click.option("--num-workers", type=int, default=2, show_default=True, help="DataLoader workers per rank.")
@click.option("--streams", type=int, help="Reader streams per rank (default 8, fewer for small data).")
@click.option("--dropout", type=float, help="Override hidden and attention dropout of a new model.")
@click.option(
    "--compile/--no-compile",
    "compile_",
    default=None,
    help="torch.compile the model and loss. Default: on for CUDA (eager if compiling fails), off on CPU.",
)
@click.option(
    "--compile-mode",
    type=click.Choice(COMPILE_MODES),
    default="default",
    show_default=True,
    help="reduce-overhead: CUDA graphs too, one per batch shape (few with --batching bucketed).",
)
@click.option("--quiet", is_flag=True, help="Warnings and errors only.")
@click.option("--rank-report", hidden=True, help="Folder for per-rank weight/example digests (tests).")
@click.pass_context
def main(ctx, quiet, compile_, overwrite, **options) -> None:
    """Pre-train BERT (MLM + NSP) from example shards on local or bucket paths.

    Streams the shards written by `pipelines examples`, trains with AMP (bf16, or fp16 with loss
    scaling) on one GPU, many (torchrun) or CPU, and writes atomic checkpoints that resume exactly.
    """
    if ctx.invoked_subcommand is not None:
        return
    from pretrain.config import TrainConfig
    from pretrain.train import TrainingError, inherit_settings, train

    rank = int(os.environ.get("RANK", "0"))
    logging.basicConfig(
        level=logging.WARNING if quiet or rank else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if not options["shards"]:
        raise click.UsageError("--shards is required (or a command: pretrain export --help)")
    try:
        cfg = TrainConfig(compile=compile_, **options)
        problems = _problems(cfg)
        if problems:  # the command line is wrong: exit 2, before anything is read or written
            raise click.UsageError("invalid settings: " + "; ".join(problems))
        folder = _open_run_folder(cfg, overwrite) if rank == 0 else None
        with folder or contextlib.nullcontext():
            if cfg.resume:
                given = {
                    name
                    for name in options
                    if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
                }
                cfg = inherit_settings(cfg, given)
            problems = _problems(cfg)
            if problems:  # the flags given with --resume do not fit the run's own settings
                raise click.UsageError("invalid settings: " + "; ".join(problems))
            train(
                cfg,
                before_fit=None if folder is None else lambda: _begin(folder),
                run_id=None if folder is None else folder.run_id,
            )
    except (TrainingError, OutputError) as err:
        raise click.ClickException(str(err)) from None
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _refused(message: str) -> click.ClickException:
    """A combination of paths refused before anything is read: one line, exit 2."""
    error = click.ClickException(message)
    error.exit_code = 2
    return error


def _problems(cfg) -> list[str]:
    """Every problem with the settings, the batch split over this run's ranks included."""
    problems = cfg.problems()
    if not problems:
        try:
            cfg.accumulation(int(os.environ.get("WORLD_SIZE", "1")))
        except ValueError as err:
            problems.append(str(err))
    return problems


def _open_run_folder(cfg, overwrite: bool) -> OutputFolder:
    """Rank 0, before any data or model is read: refuse an --output over an input (exit 2),
    claim the run folder (one writer), and refuse a non-empty one this run does not continue
    unless --overwrite (exit 1, saying whose files are there)."""
    from pretrain import checkpoint as ckpt
    from schemas.paths import location

    output = (cfg.output or cfg.resume or "").rstrip("/")
    if not output:
        raise click.UsageError("--output is required (or --resume RUN, which continues writing into RUN)")
    continuing = bool(cfg.resume) and location(cfg.resume) == location(output)
    try:
        check_apart(
            {"--output": output},
            {"--shards": cfg.shards, "--validation-shards": cfg.validation_shards, "--vocab": cfg.vocab,
             "--init-from": cfg.init_from, "--resume": None if continuing else cfg.resume},
        )  # fmt: skip
    except UsageError as err:
        raise _refused(str(err)) from None
    if continuing:
        if overwrite:
            raise click.UsageError(f"--overwrite would delete the run that --resume {cfg.resume} continues")
        return OutputFolder.open(output, "pretrain", continuing=True, run_id=ckpt.run_id_of(output))
    from pretrain.runtime import exists

    hint = f"--resume {output}" if exists(f"{output}/checkpoints") else None
    return OutputFolder.open(output, "pretrain", overwrite=overwrite, continue_hint=hint)


def _begin(folder: OutputFolder) -> None:
    """Just before step 1, once every check has passed: --overwrite's clean-up (the earlier run's
    own files), and the run folder's record."""
    removed = folder.begin()
    if removed:
        logging.getLogger("pretrain").warning(
            "--overwrite: removed %d file(s) of the earlier run in %s", removed, folder.url
        )


@main.command()
@click.option(
    "--checkpoint", required=True, help="A checkpoint folder, or a run folder (its newest checkpoint)."
)
@click.option("--format", "fmt", type=click.Choice(["hf"]), default="hf", show_default=True)
@click.option(
    "--output", required=True, help="Folder (or URL) for config.json, model.safetensors, vocab.txt."
)
@click.option("--overwrite", is_flag=True, help="Replace an earlier export in --output.")
def export(checkpoint, fmt, output, overwrite) -> None:
    """Write a checkpoint in transformers' format (BertForPreTraining.from_pretrained loads it)."""
    from pretrain import checkpoint as ckpt
    from pretrain.hf import export_hf
    from pretrain.model import BertForPreTraining
    from schemas.files import write_json

    try:
        check_apart({"--output": output}, {"--checkpoint": checkpoint})
    except UsageError as err:
        raise _refused(str(err)) from None
    try:
        with OutputFolder.open(output, "pretrain export", overwrite=overwrite) as folder:
            found = ckpt.resolve(checkpoint)
            check_apart({"--output": output}, {"--checkpoint": found.url})
            model = BertForPreTraining.from_pretrained(found.url)
            state = ckpt.load_state(f"{found.url}/{ckpt.TRAINER_STATE}")
            folder.begin()
            export_hf(model, output, f"{found.url}/vocab.txt", do_lower_case=not state.get("cased", False))
            write_json(
                f"{output.rstrip('/')}/pretraining.json",
                {"checkpoint": found.url, "step": found.step, "tokens_seen": state.get("tokens_seen")},
                indent=1,
            )
    except UsageError as err:  # --checkpoint RUN resolved to a checkpoint that --output holds
        raise _refused(str(err)) from None
    except (OutputError, ckpt.CheckpointError, ValueError, OSError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"exported step {found.step} of {found.url} to {output} ({fmt})")


@main.command()
@click.option("--config", "size", default="base", show_default=True, help="A preset or L/H/A.")
@click.option("--vocab-size", type=click.IntRange(min=1), default=30522, show_default=True)
@click.option("--max-position-embeddings", type=click.IntRange(min=1), default=512, show_default=True)
@click.option("--no-nsp", "nsp", flag_value=False, default=True, help="Without the NSP head.")
def params(size, vocab_size, max_position_embeddings, nsp) -> None:
    """Print the parameter count of a model size (as transformers' BertForPreTraining counts it)."""
    from pretrain.model import BertConfig, parameter_counts

    try:
        config = BertConfig.preset(size, vocab_size, max_position_embeddings=max_position_embeddings, nsp=nsp)
    except ValueError as err:  # the command line is wrong: one line, exit 2
        refused = click.ClickException(f"--config {size}: {err}")
        refused.exit_code = 2
        raise refused from None
    counts = parameter_counts(config)
    shape = f"L={config.num_hidden_layers} H={config.hidden_size} A={config.num_attention_heads}"
    click.echo(f"{size} ({shape}, vocabulary {vocab_size})")
    for name, value in counts.items():
        click.echo(f"  {name:<11}{value:>14,}  ({value / 1e6:.1f}M)")


if __name__ == "__main__":
    main()
