"""``pretrain``: train BERT (MLM + NSP) from example shards; ``pretrain export``: to transformers' format.
Flags a first run rarely needs are hidden from ``--help``; torch loads once the command line is checked."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from functools import partial

import click

from pretrain.config import (
    BATCHING_MODES,
    COMPILE_MODES,
    LR_SCHEDULES,
    OBJECTIVES,
    OPTIMIZERS,
    PRECISIONS,
    PretrainConfig,
)
from schemas import storage
from schemas.buckets import probe
from schemas.commands import CommandError, OneLineGroup, UsageError, config_option
from schemas.outputs import OutputFolder
from schemas.paths import check_apart

option = partial(config_option, PretrainConfig)
expert = partial(config_option, PretrainConfig, hidden=True)

_EPILOG = """\b
Examples:
  pretrain --shards gs://b/seq128 --output gs://b/runs/base --max-steps 900000
  pretrain export --checkpoint gs://b/runs/base --output out/hf-base

\b
All flags (ablations, masking, optimizer, compiling): docs/pretrain.md
"""


@click.group(
    cls=OneLineGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=_EPILOG,
)
@click.version_option(package_name="bert-pretraining", message="%(prog)s %(version)s")
@click.option("--shards", help="A `pipelines examples` output folder or URL.")
@option("output", help="Run folder (checkpoints, metrics).")
@option("resume", help="Continue the run in this folder.")
@option("init_from", help="Start from weights (HF folder, checkpoint).")
@click.option("--overwrite", is_flag=True, help="Replace the earlier run in --output.")
@option("config", help="tiny…large or L/H/A (base).")
@option("global_batch_size", type=int, help="Examples per step.")
@option("micro_batch_size", type=int, help="Per rank and forward pass.")
@option("max_steps", type=int)
@option("schedule_steps", type=int, help="Where the lr reaches 0 (--max-steps).")
@option("lr", type=float, help="Peak learning rate.")
@option("warmup_steps", type=int)
@option("precision", type=click.Choice(PRECISIONS))
@option("seed", type=int)
@option("save_steps", type=int, help="Checkpoint every N steps.")
@option("log_steps", type=int)
@option("validation_shards", help="Held-out shards to evaluate on.")
@option("eval_steps", type=int, help="0: only at the end.")
@option("batching", type=click.Choice(BATCHING_MODES))
@option("num_workers", type=int, help="DataLoader workers per rank.")
@click.option("--quiet", is_flag=True, help="Warnings and errors only.")
@expert("nsp", "--no-nsp", "nsp", flag_value=False)
@expert("objective", type=click.Choice(OBJECTIVES))
@expert("decay_power", type=float)
@expert("lr_schedule", type=click.Choice(LR_SCHEDULES))
@expert("optimizer", type=click.Choice(OPTIMIZERS))
@expert("weight_decay", type=float)
@expert("max_grad_norm", type=float)
@expert("keep_checkpoints", type=int)
@expert("eval_batches", type=int)
@expert("vocab")
@expert("max_seq_length", type=int)
@expert("dynamic_masking", is_flag=True)
@expert("masked_lm_prob", type=float)
@expert("max_predictions_per_seq", type=int)
@expert("whole_word_masking", "--whole-word-masking/--no-whole-word-masking")
@expert("mask_share", type=float)
@expert("keep_share", type=float)
@expert("random_share", type=float)
@expert("bucket_window", type=int)
@expert("streams", type=int)
@expert("dropout", type=float)
@expert("compile", "--compile/--no-compile")
@expert("compile_mode", type=click.Choice(COMPILE_MODES))
@click.pass_context
def main(ctx, quiet, overwrite, **options) -> None:
    """Pre-train BERT (MLM + NSP) from example shards on GPUs or the CPU."""
    try:
        os.getcwd()
    except OSError:
        raise CommandError(
            "the current folder no longer exists: cd to a folder that does, and run again"
        ) from None
    if ctx.invoked_subcommand is not None:
        return
    if not options["shards"]:
        raise UsageError("--shards is required (or a command: pretrain export --help)")
    rank = int(os.environ.get("RANK", "0"))
    logging.basicConfig(
        level=logging.WARNING if quiet or rank else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("gcsfs").setLevel(logging.WARNING)  # its import says at INFO which filesystem it is
    cfg = PretrainConfig(**options)
    cfg.accumulation(int(os.environ.get("WORLD_SIZE", "1")))  # settings refused: exit 2, nothing read
    from pretrain.train import inherit_settings, train

    try:
        with _open_run_folder(cfg, overwrite) if rank == 0 else contextlib.nullcontext() as folder:
            if cfg.resume:
                source = ctx.get_parameter_source
                given = {name for name in options if source(name) is not click.core.ParameterSource.DEFAULT}
                cfg = inherit_settings(cfg, given)
                cfg.accumulation(int(os.environ.get("WORLD_SIZE", "1")))  # with the run's own settings
            train(
                cfg,
                before_fit=None if folder is None else partial(_begin, folder),
                run_id=None if folder is None else folder.run_id,
                out=folder,
            )
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _open_run_folder(cfg: PretrainConfig, overwrite: bool) -> OutputFolder:
    """Rank 0, before any data or model is read: refuse an --output over an input (exit 2), then claim
    the run folder, refusing one this run does not continue unless --overwrite."""
    from pretrain import checkpoint as ckpt
    from schemas.paths import location

    output = (cfg.output or cfg.resume).rstrip("/")
    continuing = bool(cfg.resume) and location(cfg.resume) == location(output)
    inputs = {"--shards": cfg.shards, "--validation-shards": cfg.validation_shards, "--vocab": cfg.vocab}
    inputs |= {"--init-from": cfg.init_from, "--resume": None if continuing else cfg.resume}
    check_apart({"--output": output}, inputs)
    probe(reads=inputs, writes={"--output": output})  # buckets reachable, in bounded time
    if continuing:
        if overwrite:
            raise UsageError(f"--overwrite would delete the run that --resume {cfg.resume} continues")
        return OutputFolder.open(output, "pretrain", continuing=True, run_id=ckpt.run_id_of(output))
    hint = f"--resume {output}" if storage.exists(f"{output}/checkpoints") else None
    return OutputFolder.open(output, "pretrain", overwrite=overwrite, continue_hint=hint)


def _begin(folder: OutputFolder) -> None:
    """Just before step 1: --overwrite's clean-up and the run folder's record."""
    removed = folder.begin()
    if removed:
        logging.getLogger("pretrain").warning(
            "--overwrite: removed %d file(s) of the earlier run in %s", removed, folder.url
        )


@main.command(epilog="Details: docs/pretrain.md")
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
    from pretrain.startup import input_errors
    from schemas.inputs import field

    check_apart({"--output": output}, {"--checkpoint": checkpoint})
    probe(reads={"--checkpoint": checkpoint}, writes={"--output": output})
    with OutputFolder.open(output, "pretrain export", overwrite=overwrite) as folder:
        found = ckpt.resolve(checkpoint)
        check_apart({"--output": output}, {"--checkpoint": found.url})
        with input_errors(f"--checkpoint {checkpoint}: "):
            model = BertForPreTraining.from_pretrained(found.url)
        state, where = ckpt.trainer_json(found.url), f"{found.url}/{ckpt.TRAINER_STATE}.json"
        cased = field(state, "cased", bool, where, default=False)
        tokens_seen = field(state, "tokens_seen", int, where, default=None)
        folder.begin()
        with input_errors():
            export_hf(model, folder, f"{found.url}/vocab.txt", do_lower_case=not cased)
        record = {"checkpoint": found.url, "step": found.step, "tokens_seen": tokens_seen}
        folder.write_json("pretraining.json", record, indent=1)
    click.echo(f"exported step {found.step} of {found.url} to {output} ({fmt})")


@main.command(epilog="Details: docs/pretrain.md")
@click.option("--config", "size", default="base", show_default=True, help="A preset or L/H/A.")
@click.option("--vocab-size", type=click.IntRange(min=1), default=30522, show_default=True)
@click.option("--max-position-embeddings", type=click.IntRange(min=1), default=512, show_default=True)
@click.option("--no-nsp", "nsp", flag_value=False, default=True, help="Without the NSP head.")
def params(size, vocab_size, max_position_embeddings, nsp) -> None:
    """Print the parameter count of a model size (as transformers' BertForPreTraining counts it)."""
    from pretrain.model import BertConfig, parameter_counts

    try:
        config = BertConfig.preset(size, vocab_size, max_position_embeddings=max_position_embeddings, nsp=nsp)
    except ValueError as err:
        raise UsageError(f"--config {size}: {err}") from None
    shape = f"L={config.num_hidden_layers} H={config.hidden_size} A={config.num_attention_heads}"
    click.echo(f"{size} ({shape}, vocabulary {vocab_size})")
    for name, value in parameter_counts(config).items():
        click.echo(f"  {name:<11}{value:>14,}  ({value / 1e6:.1f}M)")


if __name__ == "__main__":
    main()
