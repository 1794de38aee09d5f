"""``finetune``: fine-tune a pre-trained BERT on GLUE, SQuAD, SWAG and NER, score SQuAD predictions,
build the results table, write hidden states out. Each command checks its flags, claims its output
and calls one library function; errors are raised (:mod:`schemas.commands` prints them)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import click

from finetune.config import PRECISIONS, FitConfig
from finetune.extract import ExtractSettings, extract_features
from finetune.glue import GlueConfig, run_glue
from finetune.glue_tasks import TASKS
from finetune.hidden import FEATURE_CHOICES
from finetune.ner import FEATURE_LR, NerConfig, run_ner
from finetune.squad import SquadConfig, run_squad
from finetune.swag import SwagConfig, run_swag
from schemas.buckets import probe
from schemas.commands import OneLineGroup, config_option
from schemas.outputs import OutputFolder
from schemas.paths import check_apart

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
DOCS = "Examples and every flag: docs/finetune.md"


def checked_config(config: type[FitConfig], opts: dict[str, Any]) -> Any:
    """The ``config`` of the command's flags (taken out of ``opts``), its problems refused (exit 2)."""
    names = {f.name for f in dataclasses.fields(config)}
    return config(**{k: opts.pop(k) for k in list(opts) if k in names}).checked()


def _into_output(
    command: str, output: str, overwrite: bool, inputs: dict, run: Callable, cache: str | None = None
) -> Any:
    """``run(out, before_training=...)`` a training command into --output, checked against the
    ``inputs`` (exit 2) and claimed (``out``) before anything is read; its ``before_training``
    removes an earlier run's files (--overwrite) once every other check passed. ``cache``
    (``--feature-cache``) is checked against the inputs and claimed too, as a folder runs add to,
    and given to ``run`` as ``cache``."""
    check_apart({"--output": output}, inputs)
    if cache:
        check_apart({"--feature-cache": cache}, {k: v for k, v in inputs.items() if k != "--feature-cache"})
    probe(reads=inputs, writes={"--output": output, "--feature-cache": cache})
    with contextlib.ExitStack() as stack:
        folders = [stack.enter_context(OutputFolder.open(output, f"finetune {command}", overwrite=overwrite))]
        if cache:
            claimed = OutputFolder.open(
                cache, "finetune ner --feature-cache", continuing=True, option="--feature-cache"
            )
            folders.append(stack.enter_context(claimed))
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
        )
        logging.getLogger("gcsfs").setLevel(logging.WARNING)  # its import says at INFO which filesystem it is
        extra = {"cache": folders[1]} if cache else {}
        return run(folders[0], before_training=lambda: [f.begin() for f in folders], **extra)


def fit_options(config: type[FitConfig]) -> Callable:
    """The flags every training command shares, their defaults taken from ``config``."""
    evals = (config.eval_flag, "max_eval_examples")
    options = [
        click.option("--checkpoint", required=True, help="pretrain run or HF BERT folder."),
        click.option("--output", required=True, help="Output folder."),
        click.option("--overwrite", is_flag=True, help="Replace an earlier run there."),
        config_option(config, "epochs", type=float),
        config_option(config, "lr", type=float),
        config_option(config, "batch_size", type=int),
        config_option(config, "seed", type=int),
        config_option(config, "max_seq_length", type=int),
        config_option(config, "warmup_proportion", type=float),
        config_option(config, "weight_decay", type=float),
        config_option(config, "precision", type=click.Choice(PRECISIONS), help="auto: bf16/fp16 on GPU."),
        config_option(config, "device", help="auto, cpu, cuda, cuda:N"),
        config_option(config, "max_train_examples", type=int, help="Train on the first N."),
        config_option(config, "max_eval_examples", *evals, type=int, help="Score the first N."),
        config_option(config, "cased", "--cased/--uncased", show_default=False, help="As the checkpoint."),
    ]

    def decorate(command: Callable) -> Callable:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


@click.group(cls=OneLineGroup, context_settings=CONTEXT, epilog=DOCS)
@click.version_option(package_name="bert-pretraining", message="%(prog)s %(version)s")
def main() -> None:
    """Fine-tune a pre-trained BERT (BERT paper, Sections 4 and 5.3): every training command takes
    --checkpoint (a `pretrain` run or any HF-format BERT folder) and writes metrics.json and
    predictions into --output."""


@main.command(context_settings=CONTEXT, epilog=DOCS)
@click.option("--task", required=True, type=click.Choice(list(TASKS), case_sensitive=False))
@click.option("--data-dir", required=True, help="The task's GLUE folder.")
@fit_options(GlueConfig)
@config_option(GlueConfig, "grid", is_flag=True, show_default=False, help="The paper's 18 settings.")
@config_option(
    GlueConfig, "num_seeds", "--seeds", "num_seeds", type=int, help="Runs per setting (mean ± sd)."
)
@click.option("--diagnostic", help="MNLI: diagnostic.tsv -> AX.tsv.")
@config_option(
    GlueConfig, "test_predictions", "--test-predictions/--no-test-predictions", help="Predict test.tsv."
)
@config_option(GlueConfig, "bilstm", is_flag=True, show_default=False, help="Table 5's '+ BiLSTM' head.")
@config_option(
    GlueConfig, "predict_only", is_flag=True, show_default=False, help="Only score --checkpoint's model."
)
@config_option(GlueConfig, "save_model", "--save-model/--no-save-model", help="Save OUTPUT/model/.")
def glue(
    task: str, data_dir: str, diagnostic: str | None, checkpoint: str, output: str, overwrite: bool, **opts
) -> None:
    """Fine-tune on one GLUE task: metrics.json, dev predictions, the GLUE server's files, the model."""
    config = checked_config(GlueConfig, opts)
    inputs = {"--data-dir": data_dir, "--checkpoint": checkpoint, "--diagnostic": diagnostic}
    run = partial(run_glue, task, data_dir, checkpoint, config=config, diagnostic_file=diagnostic)
    result = _into_output("glue", output, overwrite, inputs, run)
    click.echo(json.dumps({k: result[k] for k in ("task", "dev", "dev_sd")}, indent=2))


@main.command(context_settings=CONTEXT, epilog=DOCS)
@click.option("--data-dir", help="swagaf's data/ folder (train.csv, val.csv, test.csv).")
@click.option("--train-file", help="Instead of DATA_DIR/train.csv.")
@click.option("--dev-file", help="Instead of DATA_DIR/val.csv.")
@click.option("--test-file", help="Instead of DATA_DIR/test.csv.")
@fit_options(SwagConfig)
def swag(
    data_dir, train_file, dev_file, test_file, checkpoint: str, output: str, overwrite: bool, **opts
) -> None:
    """Fine-tune on SWAG (four-way multiple choice): metrics.json with dev accuracy, predictions."""
    config = checked_config(SwagConfig, opts)
    inputs = {"--data-dir": data_dir, "--train-file": train_file, "--dev-file": dev_file}
    inputs |= {"--test-file": test_file, "--checkpoint": checkpoint}
    files = {"train_file": train_file, "dev_file": dev_file, "test_file": test_file}
    run = partial(run_swag, data_dir, checkpoint, config=config, **files)
    result = _into_output("swag", output, overwrite, inputs, run)
    click.echo(json.dumps({"task": "swag", "dev": result["dev"]}, indent=2))


@main.command(context_settings=CONTEXT, epilog=DOCS)
@click.option("--data-dir", required=True, help="CoNLL-2003 folder: train.txt, valid.txt, test.txt.")
@fit_options(NerConfig)
@config_option(
    NerConfig,
    "features",
    type=click.Choice(FEATURE_CHOICES),
    help=f"Table 7: frozen encoder (--lr {FEATURE_LR:g}).",
)
@config_option(NerConfig, "doc_stride", type=int, help="Windows of a long sentence (default: half a window).")
@config_option(
    NerConfig, "cache_features", is_flag=True, show_default=False, help="Keep the activations in memory."
)
@config_option(NerConfig, "feature_cache", metavar="DIR", help="...and in DIR, for later runs.")
def ner(data_dir: str, checkpoint: str, output: str, overwrite: bool, **opts: Any) -> None:
    """Fine-tune for NER (CoNLL-2003, IOB1 or IOB2), or with --features train a BiLSTM tagger on the
    frozen encoder: metrics.json (conlleval's figures) and CoNLL-format predictions."""
    if (
        opts["features"] is not None
        and click.get_current_context().get_parameter_source("lr").name == "DEFAULT"
    ):
        opts["lr"] = FEATURE_LR
    config = checked_config(NerConfig, opts)
    inputs = {"--data-dir": data_dir, "--checkpoint": checkpoint, "--feature-cache": config.feature_cache}
    run = partial(run_ner, data_dir, checkpoint, config=config)
    result = _into_output("ner", output, overwrite, inputs, run, cache=config.feature_cache)
    longer = {split: counts["longer_than_one_window"] for split, counts in result["windows"].items()}
    shown = {"task": "ner", "mode": result["mode"], "dev": result["dev"], "longer_than_one_window": longer}
    click.echo(json.dumps(shown, indent=2))


@main.command(context_settings=CONTEXT, epilog=DOCS)
@click.option("--version", "version", required=True, type=click.Choice(["1.1", "2.0"]))
@click.option("--train-file", help="SQuAD JSON to train on; omit to only predict.")
@click.option("--predict-file", required=True, help="SQuAD JSON to answer and score.")
@fit_options(SquadConfig)
@config_option(SquadConfig, "doc_stride", type=int)
@config_option(SquadConfig, "max_query_length", type=int)
@config_option(SquadConfig, "n_best_size", type=int)
@config_option(SquadConfig, "max_answer_length", type=int)
@config_option(SquadConfig, "bilstm", is_flag=True, show_default=False, help="A BiLSTM under the span head.")
def squad(
    version: str, train_file, predict_file: str, checkpoint: str, output: str, overwrite: bool, **opts
) -> None:
    """Fine-tune on SQuAD v1.1 or v2.0 and score the predictions with the official metrics (v2.0:
    at null threshold 0 and at the threshold tuned on the predict file)."""
    config = checked_config(SquadConfig, opts)
    inputs = {"--train-file": train_file, "--predict-file": predict_file, "--checkpoint": checkpoint}
    run = partial(run_squad, version, train_file, predict_file, checkpoint, config=config)
    result = _into_output("squad", output, overwrite, inputs, run)
    click.echo(
        json.dumps({k: v for k, v in result.items() if k not in ("train", "predict", "config")}, indent=2)
    )


@main.command(context_settings=CONTEXT, epilog=DOCS)
@click.option("--checkpoint", required=True, help="pretrain run or HF BERT folder.")
@click.option("--input", "input_file", required=True, help="UTF-8 text, one text a line (local or a URL).")
@click.option("--output", required=True, help="Folder for features-NNNNN.arrow, manifest.json, COMPLETED.")
@config_option(ExtractSettings, "layers", help="-1 the last, ..., 0 the embeddings.")
@config_option(ExtractSettings, "max_seq_length", type=int)
@config_option(ExtractSettings, "batch_size", type=int, help="Windows per forward pass.")
@config_option(ExtractSettings, "stride", type=int, help="Windows of a long line (default: half a window).")
@config_option(ExtractSettings, "precision", type=click.Choice(PRECISIONS))
@config_option(ExtractSettings, "device", help="auto, cpu, cuda, cuda:N")
@click.option("--cased/--uncased", default=None, help="As the checkpoint.")
@click.option("--overwrite", is_flag=True, help="Replace an earlier run there.")
def features(
    checkpoint: str, input_file: str, output: str, cased: bool | None, overwrite: bool, **opts
) -> None:
    """Write each token's hidden states of every line of --input as Arrow rows (the reference
    extract_features.py)."""
    config = ExtractSettings(**opts)
    check_apart({"--output": output}, {"--checkpoint": checkpoint, "--input": input_file})
    probe(reads={"--checkpoint": checkpoint, "--input": input_file}, writes={"--output": output})
    stats = extract_features(checkpoint, input_file, output, config, cased=cased, overwrite=overwrite)
    click.echo(json.dumps(stats, indent=2))


@main.group(context_settings=CONTEXT, epilog=DOCS)
def evaluate() -> None:
    """Score prediction files as the official evaluation scripts do."""


@evaluate.command("squad", context_settings=CONTEXT, epilog=DOCS)
@click.option("--version", "version", required=True, type=click.Choice(["1.1", "2.0"]))
@click.option("--data-file", required=True, help="The SQuAD JSON with the gold answers.")
@click.option("--predictions", required=True, help="JSON: question id -> answer text ('' for no answer).")
@click.option("--null-odds", help="v2.0: JSON question id -> null odds; adds the best-threshold metrics.")
def evaluate_squad(version: str, data_file: str, predictions: str, null_odds: str | None) -> None:
    """Print EM and F1 (v2.0: with the HasAns/NoAns breakdown) as JSON."""
    from finetune.squad import evaluate_file

    result = evaluate_file(version, data_file, predictions, null_odds)
    if repeated := result.get("duplicate_ids"):
        click.echo(
            f"warning: {result['num_duplicate_ids']:,} question(s) in {data_file} repeat an earlier question's id "
            f"({', '.join(map(repr, repeated[:3]))}); predictions are keyed by id, so those are scored by one",
            err=True,
        )
    if result["unanswered"]:
        click.echo(
            f"warning: {result['unanswered']:,} of {result['total']:,} questions in {data_file} have no "
            f"prediction in {predictions}; each scores 0",
            err=True,
        )
    click.echo(json.dumps(result, indent=2))


@main.command(context_settings=CONTEXT, epilog=DOCS)
@click.argument("runs", nargs=-1, required=True)
@click.option("--output", required=True, help="Folder for results.md and results.json.")
@click.option("--label", default="Ours", show_default=True, help="The name of our row.")
@click.option("--overwrite", is_flag=True, help="Replace an earlier report there.")
def report(runs: tuple[str, ...], output: str, label: str, overwrite: bool) -> None:
    """Put runs' metrics.json beside the paper's numbers (Tables 1-4 layout); print the markdown."""
    from finetune.report import to_markdown, write_report

    check_apart({"--output": output}, {"RUNS": list(runs)})
    probe(reads={"RUNS": runs}, writes={"--output": output})
    click.echo(to_markdown(write_report(list(runs), output, label, overwrite)))


if __name__ == "__main__":
    main()
