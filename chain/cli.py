"""``python -m chain``: the whole job on real text, resumable, ending with a report."""

from __future__ import annotations

import sys

import click

from chain.checks import refuse
from chain.plan import ChainConfig, outputs, plan
from chain.report import build
from chain.run import ChainError, check_apart, exit_code, run_chain
from schemas.commands import OneLineCommand, UsageError


@click.command(
    cls=OneLineCommand, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(package_name="bert-pretraining", message="%(prog)s %(version)s")
@click.option(
    "--workdir", default="out/demo", show_default=True, help="Folder or bucket URL for every output."
)
@click.option("--wiki-dump", required=True, help="A pages-articles dump (.xml.bz2), local or a bucket URL.")
@click.option("--books", help="A folder of plain-text books (*.txt); without it the books stage is skipped.")
@click.option(
    "--glue-dir", help="A GLUE task folder to fine-tune on; default: a task derived from the corpus."
)
@click.option("--glue-task", help="The task of --glue-dir (cola, sst2, mrpc, ...; default mrpc).")
@click.option("--vocab-size", type=int, default=8000, show_default=True)
@click.option("--model", default="tiny", show_default=True, help="pretrain --config.")
@click.option("--pretrain-steps", type=int, default=300, show_default=True)
@click.option("--precision", default="fp32", show_default=True, help="bf16 or fp16 on a GPU.")
@click.option("--finetune-epochs", type=float, default=3.0, show_default=True)
@click.option("--seed", type=int, default=12345, show_default=True)
@click.option(
    "--beam-option",
    "beam",
    multiple=True,
    help="Passed to every pipeline (e.g. --beam-option=--runner=FnApiRunner).",
)
def main(workdir, wiki_dump, books, glue_dir, glue_task, vocab_size, model, pretrain_steps, precision,
         finetune_epochs, seed, beam) -> None:  # fmt: skip
    """Run every stage — corpus, vocabulary, shards, pre-training, evaluation, export, fine-tuning —
    and write WORKDIR/report/report.md and report.html.

    A rerun skips the stages whose output is complete and whose settings did not change, redoes
    the others and everything after them, and continues an interrupted pre-training run. Every
    flag, then every input, is checked before the first stage (exit 2 or 1, one line a problem).
    """
    cfg = ChainConfig(
        workdir=workdir.rstrip("/"), wiki_dump=wiki_dump, books=books, glue_dir=glue_dir, glue_task=glue_task,
        vocab_size=vocab_size, model=model, pretrain_steps=pretrain_steps, precision=precision,
        finetune_epochs=finetune_epochs, seed=seed, runner=tuple(beam),
    )  # fmt: skip
    refuse(cfg.problems(), 2)
    stages = plan(cfg)
    try:
        check_apart(cfg.workdir, stages, {"--wiki-dump": wiki_dump, "--books": books, "--glue-dir": glue_dir})
    except UsageError as err:  # the command line is wrong: exit 2, nothing read or written
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    refuse(cfg.input_problems(), 1)
    if not books:
        click.echo(
            "(no --books folder: the books stage is skipped; give one with --books DIR or make demo BOOKS=DIR)"
        )
    try:
        state = run_chain(stages, cfg.workdir, log=lambda line: click.echo(line, err=False))
    except ChainError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(exit_code(err))
    where = outputs(cfg)
    report = build(where, state, cfg.workdir)
    total = sum(s.get("seconds", 0) for s in state.values() if isinstance(s, dict))
    click.echo(f"\n== done in {total:,.0f} s of stage time. Where everything is:")
    for label, key in (
        ("documents", "corpus"), ("vocabulary", "vocab"), ("shards", "shards"), ("pre-training run", "run"),
        ("transformers export", "export"), ("fine-tuning", "finetune"),
    ):  # fmt: skip
        click.echo(f"   {label:20s} {where[key]}")
    click.echo(f"   {'report':20s} {report['html']}  (and report.md)")


if __name__ == "__main__":
    main()
