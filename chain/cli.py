"""``chain``: the whole job on real text, resumable, with a report; ``chain ablate``: the paper's
ablations. Flags are checked (exit 2), then inputs (exit 1), before the first stage; errors are
raised (:mod:`schemas.commands` prints them)."""

from __future__ import annotations

import contextlib

import click

from chain.ablate import PRESETS, AblationConfig, Grid, expected_seconds, grid, installed_reference, stages
from chain.ablate_report import build_report
from chain.plan import ChainConfig, plan
from chain.report import build
from chain.run import check_apart, claim, run_chain, shown
from schemas.buckets import probe
from schemas.commands import InputError, OneLineGroup, UsageError, config_default, config_option

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
WORKDIR = dict(help="Folder or bucket URL for every output.")
BEAM = ("runner", "--beam-option", "runner")
BEAM_HELP = dict(multiple=True, show_default=False, help="For every pipeline.")


def _refuse(problems: list[str], error: type[Exception]) -> None:
    if problems:
        raise error("; ".join(problems))


@click.group(
    cls=OneLineGroup,
    invoke_without_command=True,
    context_settings=CONTEXT,
    epilog="Stages, reruns and errors: docs/chain.md",
)
@click.version_option(package_name="bert-pretraining", message="%(prog)s %(version)s")
@config_option(ChainConfig, "workdir", **WORKDIR)
@config_option(ChainConfig, "wiki_dump", show_default=False, help="A pages-articles dump (.xml.bz2).")
@config_option(ChainConfig, "books", help="A folder of plain-text books (*.txt); none: no books stage.")
@config_option(ChainConfig, "documents", help="JSON Lines, Parquet or a datasets folder to read.")
@config_option(
    ChainConfig,
    "documents_options",
    "--documents-option",
    "documents_options",
    multiple=True,
    show_default=False,
    help="A flag of `pipelines documents` (--documents-option=--title-field=title); repeatable.",
)
@config_option(ChainConfig, "glue_dir", help="A GLUE task folder; default: a task derived from the corpus.")
@config_option(ChainConfig, "glue_task", help="The task of --glue-dir (default mrpc).")
@config_option(ChainConfig, "vocab_size", type=int)
@config_option(ChainConfig, "model", help="pretrain --config.")
@config_option(ChainConfig, "pretrain_steps", type=int)
@config_option(ChainConfig, "precision", help="bf16 or fp16 on a GPU.")
@config_option(ChainConfig, "finetune_epochs", type=float)
@config_option(ChainConfig, "seed", type=int)
@config_option(ChainConfig, *BEAM, **BEAM_HELP)
@click.pass_context
def main(ctx: click.Context, **opts) -> None:
    """Run every stage (corpus, vocabulary, shards, pre-training, export, fine-tuning) and write
    WORKDIR/report/report.md and .html; a rerun skips what is complete. `chain ablate --help`: the
    paper's ablations."""
    if ctx.invoked_subcommand:
        given = [p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name).name != "DEFAULT"]
        _refuse([f"{flag} is chain's, not chain {ctx.invoked_subcommand}'s" for flag in given], UsageError)
        return
    cfg = ChainConfig(**{**opts, "workdir": opts["workdir"].rstrip("/"), "runner": tuple(opts["runner"])})
    _refuse(cfg.problems(), UsageError)
    todo = plan(cfg)
    inputs = {
        "--wiki-dump": cfg.wiki_dump,
        "--books": cfg.books,
        "--documents": cfg.documents,
        "--glue-dir": cfg.glue_dir,
    }
    check_apart(cfg.workdir, todo, inputs)
    probe(writes={"--workdir": cfg.workdir})
    with claim(cfg.workdir, "chain") as workdir:  # before the slower checks: a second chain is told at once
        probe(reads=inputs)
        _refuse(cfg.input_problems(), InputError)
        if not cfg.books:
            click.echo(
                "(no --books: the books stage is skipped; give one with --books DIR or make demo BOOKS=DIR)"
            )
        state = run_chain(todo, workdir, log=click.echo)
        report = build(cfg.outputs(), state, cfg.workdir)
    click.echo(f"\n== done in {sum(s.get('seconds', 0) for s in state.values()):,.0f} s of stage time:")
    for label, key in zip(
        ["documents", "vocabulary", "shards", "run", "transformers export", "fine-tuning"],
        ["corpus", "vocab", "shards", "run", "export", "finetune"],
        strict=True,
    ):
        click.echo(f"   {label:20s} {cfg.outputs()[key]}")
    click.echo(f"   {'report':20s} {report['html']}  (and report.md)")


@main.command(context_settings=CONTEXT, epilog="Presets, tables and measured times: docs/ablations.md")
@config_option(AblationConfig, "workdir", **WORKDIR)
@click.option(
    "--preset",
    type=click.Choice(list(PRESETS)),
    default=config_default(AblationConfig, "preset").name,
    show_default=True,
    help="quick: a 2-core CPU; gpu: one H200, ~1 hour; paper: a cluster; smoke: the machinery.",
)
@click.option("--wiki-dump", help="A pages-articles dump (.xml.bz2) to build the corpus from.")
@click.option("--books", help="Plain-text books (*.txt) merged into the corpus, as make demo does.")
@click.option("--corpus", help="A completed `pipelines corpus` output instead of --wiki-dump.")
@click.option("--glue-dir", help="A GLUE task folder; default: the demo's derived task.")
@click.option("--glue-task", help="The task of --glue-dir (default mrpc).")
@click.option("--ner-dir", help="A CoNLL-2003 folder (train.txt, valid.txt) for Tables 7 and 8.")
@click.option("--reference", help="A pre-trained BERT for Table 7 [default: all-MiniLM-L6-v2 if installed].")
@click.option("--no-reference", is_flag=True, help="Leave Table 7's reference column out.")
@config_option(AblationConfig, "seed", type=int, help="The first seed (seed, seed+1, ...).")
@config_option(AblationConfig, *BEAM, **BEAM_HELP)
@click.option("--dry-run", is_flag=True, help="Print every stage's command and expected time; run nothing.")
def ablate(preset: str, reference: str | None, no_reference: bool, dry_run: bool, **opts) -> None:
    """Pre-train and fine-tune the grid of the paper's Tables 5-8 and Figure 5, then write
    WORKDIR/ablations/report.md and .html. Reruns skip every finished run."""
    reference = None if no_reference else reference or installed_reference()
    cfg = AblationConfig(
        **{**opts, "workdir": opts["workdir"].rstrip("/"), "runner": tuple(opts["runner"])},
        preset=PRESETS[preset],
        reference=reference,
    )
    _refuse(cfg.problems() + ([] if dry_run else gpu_problems(cfg)), UsageError)
    g = grid(cfg)
    todo = stages(cfg, g)
    names = ("wiki_dump", "books", "corpus", "glue_dir", "ner_dir", "reference")
    inputs = {f"--{k.replace('_', '-')}": getattr(cfg, k) for k in names}
    check_apart(cfg.workdir, todo, inputs)
    probe(writes={"--workdir": cfg.workdir})
    with contextlib.nullcontext() if dry_run else claim(cfg.workdir, "chain ablate") as workdir:  # as chain's
        probe(reads=inputs)
        _refuse(cfg.input_problems(), InputError)
        if dry_run:
            return print_plan(cfg, g, todo)
        if cfg.wiki_dump and not cfg.books:
            click.echo("(no --books: the corpus is the dump's alone, smaller than make demo's)", err=True)
        report = run_study(cfg, g, todo, log=click.echo, workdir=workdir)
    click.echo(f"report: {report['html']}  (and report.md, figure5.png, results.json)")


def gpu_problems(cfg: AblationConfig) -> list[str]:
    """A GPU preset on a machine without a CUDA device."""
    if not cfg.preset.gpu:
        return []
    import torch

    return (
        []
        if torch.cuda.is_available()
        else [f"--preset {cfg.preset.name} needs a CUDA GPU and none is here; see its plan with --dry-run"]
    )


def run_study(cfg: AblationConfig, g: Grid, todo: list, log=print, workdir=None) -> dict[str, str]:
    """Every stage of the study in ``workdir``, else in its workdir claimed here, then the report."""
    with contextlib.nullcontext(workdir) if workdir else claim(cfg.workdir, "chain ablate") as folder:
        state = run_chain(todo, folder, log=log)
        return build_report(cfg, g, todo, state)


def print_plan(cfg: AblationConfig, g: Grid, todo: list) -> None:
    """Every stage's command; for a GPU preset each training stage's expected time and the total."""
    p = cfg.preset
    expected = expected_seconds(cfg, g) if p.gpu else {}
    click.echo(
        f"preset {p.name}: {len(g.runs)} pre-training runs, {len(g.finetunes)} fine-tuning runs, {len(todo)} stages"
    )
    for number, stage in enumerate(todo, 1):
        time = f"  (expected {expected[stage.name] / 60:.1f} min)" if stage.name in expected else ""
        click.echo(f"{number:3d}. {stage.title}{time}")
        if stage.command:
            click.echo(f"     {shown(stage.command)}")
    if expected:
        total = sum(expected.values()) / 60
        click.echo(
            f"expected: {total:,.0f} min on one H200 for pre-training and fine-tuning, plus the data stages on its "
            "CPUs (BERT-base's 415,689 tokens/s there scaled by each model's FLOPs per token, and 15 s per stage)"
        )
