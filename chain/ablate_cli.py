"""``python -m chain ablate``: run the paper's ablation grid and write ``W/ablations/report.md``."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from chain.ablate import PRESETS, AblationConfig, grid, stages
from chain.ablate_report import build_report
from chain.checks import SettingsError, refuse
from chain.run import ChainError, check_apart, exit_code, run_chain
from schemas.commands import OneLineCommand, UsageError


@click.command(
    cls=OneLineCommand, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(package_name="bert-pretraining", message="%(prog)s %(version)s")
@click.option(
    "--workdir", default="out/ablate", show_default=True, help="Folder or bucket URL for every output."
)
@click.option(
    "--preset",
    type=click.Choice(list(PRESETS)),
    default="quick",
    show_default=True,
    help="quick: tiny models, a few hundred steps (2-core CPU); paper: the paper's settings (a GPU "
    "cluster; see --dry-run); smoke: two 20-step runs, to check the machinery.",
)
@click.option("--wiki-dump", help="A pages-articles dump (.xml.bz2) to build the corpus from (the demo's).")
@click.option(
    "--books",
    help="A folder of plain-text books (*.txt) merged into the corpus, as `make demo` does "
    "(../shared/data/books/gutenberg); without it the corpus is the dump's alone.",
)
@click.option("--corpus", help="A completed `pipelines corpus` output to use instead of --wiki-dump.")
@click.option("--glue-dir", help="A GLUE task folder to fine-tune on; default: the demo's derived task.")
@click.option("--glue-task", help="The task of --glue-dir (cola, sst2, mrpc, ...; default mrpc).")
@click.option("--ner-dir", help="A CoNLL-2003 folder (train.txt, valid.txt) for Tables 7 and 8.")
@click.option("--seed", type=int, default=12345, show_default=True, help="First seed (seed, seed+1, ...).")
@click.option("--beam-option", "beam", multiple=True, help="Passed to every pipeline.")
@click.option("--dry-run", is_flag=True, help="Print every stage's command and run nothing.")
def main(
    workdir, preset, wiki_dump, books, corpus, glue_dir, glue_task, ner_dir, seed, beam, dry_run
) -> None:
    """Pre-train and fine-tune the grid of the paper's Tables 5-8 and Figure 5, then write
    WORKDIR/ablations/report.md and report.html.

    Reruns skip every finished run (the demo chain's rules, state in WORKDIR/chain.json). Every
    flag, then every input, is checked before the first stage, with --dry-run too (exit 2 or 1,
    one line a problem).
    """
    try:
        cfg = AblationConfig(
            workdir=workdir.rstrip("/"), preset=PRESETS[preset], wiki_dump=wiki_dump, books=books, corpus=corpus,
            glue_dir=glue_dir, glue_task=glue_task, ner_dir=ner_dir, seed=seed, runner=tuple(beam),
        )  # fmt: skip
    except SettingsError as err:
        refuse(err.problems, 2)
    if wiki_dump and not books:
        click.echo(
            "(no --books: the corpus is the dump's alone, smaller than make demo's; the quick preset's "
            "numbers in docs/ablations.md are with --books ../shared/data/books/gutenberg)",
            err=True,
        )
    g = grid(cfg)
    plan = stages(cfg, g)
    inputs = {"--wiki-dump": wiki_dump, "--books": books, "--corpus": corpus, "--glue-dir": glue_dir,
              "--ner-dir": ner_dir}  # fmt: skip
    try:
        check_apart(cfg.workdir, plan, inputs)
    except UsageError as err:  # the command line is wrong: exit 2 (--dry-run too), nothing read
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    refuse(cfg.input_problems(), 1)
    if dry_run:
        click.echo(f"preset {preset}: {len(g.runs)} pre-training runs, {len(g.finetunes)} fine-tuning runs")
        for number, stage in enumerate(plan, 1):
            click.echo(f"{number:3d}. {stage.title}")
            if stage.command:
                click.echo("     " + shlex.join([Path(stage.command[0]).name, *stage.command[1:]]))
        return
    try:
        state = run_chain(plan, cfg.workdir, log=click.echo)
    except ChainError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(exit_code(err))
    report = build_report(cfg, g, plan, state)
    click.echo(f"report: {report['html']}  (and report.md, figure5.png, results.json)")
