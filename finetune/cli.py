"""``finetune``: fine-tune a pre-trained BERT on GLUE, SQuAD, SWAG and NER; score SQuAD predictions;
build the results table; write hidden states out. Each command parses and validates its flags and
calls one library function (:func:`finetune.glue.run_glue`, :func:`finetune.swag.run_swag`,
:func:`finetune.ner.run_ner`, :func:`finetune.squad.run_squad`, :func:`finetune.squad.evaluate_file`,
:func:`finetune.report.write_report`, :func:`finetune.extract.extract_features`)."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import click

from finetune.common import PRECISIONS, FinetuneError, SettingsError, TrainConfig
from finetune.hidden import FEATURE_CHOICES
from pretrain.runtime import MAX_SEED
from schemas.commands import OneLineGroup, OutputError, UsageError
from schemas.outputs import OutputFolder
from schemas.paths import check_apart

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
CHECKPOINT_HELP = (
    "A `pretrain` run folder (its newest complete checkpoint), a checkpoint folder "
    "RUN/checkpoints/step-N, or an HF-format BERT folder (config.json, model.safetensors, vocab.txt)."
)


MIN_SEQ_LENGTH = 8
"""The shortest ``--max-seq-length`` of a training command (``finetune.common.check_max_seq_length``)."""
MAX_SEEDS = 100
"""The most runs per setting ``--seeds`` takes (the paper: 5)."""
OVERWRITE_HELP = "Replace an earlier run's files in --output; without it a non-empty --output is refused."


def _refused(message: str) -> click.ClickException:
    """A combination of paths refused before anything is read: one line, exit 2."""
    error = click.ClickException(message)
    error.exit_code = 2
    return error


def _check_apart(output: str | None, inputs: dict[str, str | None], flag: str = "--output") -> None:
    """--output (or ``flag``) is none of the inputs, holds none and lies inside none (exit 2), even
    with --overwrite: ``finetune glue --data-dir D --output D`` never touches D."""
    try:
        check_apart({flag: output}, inputs)
    except UsageError as err:
        raise _refused(str(err)) from None


def _into_output(
    command: str,
    output: str,
    overwrite: bool,
    inputs: dict[str, str | None],
    function: Callable,
    *args,
    cache: str | None = None,
    **kwargs,
) -> Any:
    """Run a training command's library ``function`` into its claimed --output: checked against
    the ``inputs`` (exit 2), claimed before anything is read (one writer; a non-empty folder
    refused unless --overwrite, saying whose files are there: exit 1), released at the end. The
    function's ``before_training`` hook removes the earlier run's own files (never others) once
    the data, checkpoint and settings checks have passed, so that a run refused by any of them
    leaves the earlier output as it was, and records this run's. ``cache`` (``--feature-cache``)
    is claimed too, as a folder runs add to."""
    _check_apart(output, inputs)
    with contextlib.ExitStack() as stack:
        try:
            folders = [
                stack.enter_context(OutputFolder.open(output, f"finetune {command}", overwrite=overwrite))
            ]
            if cache:
                claimed = OutputFolder.open(
                    cache, "finetune ner --feature-cache", continuing=True, option="--feature-cache"
                )
                folders.append(stack.enter_context(claimed))
        except OutputError as err:
            raise click.ClickException(str(err)) from None
        return _call(function, *args, before_training=lambda: [f.begin() for f in folders], **kwargs)


def _setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a library function; its user errors become one-line click errors."""
    _setup_logging()
    try:
        return function(*args, **kwargs)
    except SettingsError as err:  # refused before anything was read: exit 2
        raise click.UsageError(str(err)) from None
    except (FinetuneError, ValueError) as err:
        raise click.ClickException(str(err)) from None


def _training_options(epochs: float, lr: float, batch_size: int) -> Callable:
    """The flags every training command shares, with the task's defaults."""

    def decorate(command: Callable) -> Callable:
        options = [
            click.option("--checkpoint", required=True, help=CHECKPOINT_HELP),
            click.option("--output", required=True, help="Folder for metrics.json and predictions."),
            click.option("--overwrite", is_flag=True, help=OVERWRITE_HELP),
            click.option("--epochs", type=float, default=epochs, show_default=True),
            click.option(
                "--lr", type=float, default=lr, show_default=True, help="Peak learning rate (AdamW)."
            ),
            click.option("--batch-size", type=int, default=batch_size, show_default=True),
            click.option(
                "--seed", type=int, default=42, show_default=True, help="Seeds the head, data order, dropout."
            ),
            click.option(
                "--max-seq-length", type=click.IntRange(min=MIN_SEQ_LENGTH), default=128, show_default=True
            ),
            click.option("--warmup-proportion", type=float, default=0.1, show_default=True),
            click.option("--weight-decay", type=float, default=0.01, show_default=True),
            click.option(
                "--precision",
                type=click.Choice(PRECISIONS),
                default="auto",
                show_default=True,
                help="auto: bf16 (fp16 where unsupported) on GPU, fp32 on CPU.",
            ),
            click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, ..."),
            click.option(
                "--max-train-examples",
                type=click.IntRange(min=1),
                help="Train on the first N training examples (quick runs).",
            ),
            click.option(
                "--max-eval-examples",
                type=click.IntRange(min=1),
                help="Evaluate on the first N dev examples (quick runs).",
            ),
            click.option(
                "--cased/--uncased",
                default=None,
                help="Tokeniser casing; default: as the checkpoint records (trainer.json or tokenizer_config.json).",
            ),
        ]
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _config(opts: dict[str, Any]) -> TrainConfig:
    try:
        return TrainConfig(
            epochs=opts["epochs"],
            lr=opts["lr"],
            batch_size=opts["batch_size"],
            seed=opts["seed"],
            warmup_proportion=opts["warmup_proportion"],
            weight_decay=opts["weight_decay"],
            precision=opts["precision"],
            device=opts["device"],
        )
    except FinetuneError as err:
        raise click.UsageError(str(err)) from None


@click.group(cls=OneLineGroup, context_settings=CONTEXT)
@click.version_option(package_name="bert-pretraining", message="%(prog)s %(version)s")
def main() -> None:
    """Fine-tune a pre-trained BERT on GLUE, SQuAD and SWAG (BERT paper, Section 4).

    Every training command takes --checkpoint (our `pretrain` output or any HF-format BERT folder)
    and writes metrics.json and predictions into --output.
    """


_GLUE_EPILOG = """\b
Examples:
  finetune glue --task mrpc --data-dir glue_data/MRPC --checkpoint out/runs/base --output out/ft/mrpc
  finetune glue --task mnli --data-dir glue_data/MNLI --checkpoint out/hf-base --output out/ft/mnli \\
      --diagnostic glue_data/diagnostic/diagnostic.tsv
  finetune glue --task rte --data-dir glue_data/RTE --checkpoint out/runs/base --output out/ft/rte \\
      --grid --seeds 5            # the paper's 18 settings x 5 seeds, selected on dev
  finetune glue --task cola --data-dir glue_data/CoLA --checkpoint out/hf-base --output /tmp/cola \\
      --max-train-examples 500 --max-eval-examples 200 --epochs 1   # a quick check
  finetune glue --task mrpc --data-dir glue_data/MRPC --checkpoint out/runs/ltr --output out/ft/mrpc-bilstm \
      --bilstm                    # Table 5's "+ BiLSTM" (on the LTR & No NSP run)
  finetune glue --task mrpc --data-dir glue_data/MRPC --checkpoint out/ft/mrpc/model --output out/ft/mrpc-eval \
      --predict-only              # evaluate and predict with a saved fine-tuned model
"""


@main.command(context_settings=CONTEXT, epilog=_GLUE_EPILOG)
@click.option(
    "--task",
    required=True,
    type=click.Choice(
        ["cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli"], case_sensitive=False
    ),
)
@click.option(
    "--data-dir", required=True, help="The task's folder of the GLUE download (train.tsv, dev.tsv, test.tsv)."
)
@_training_options(epochs=3.0, lr=2e-5, batch_size=32)
@click.option(
    "--grid",
    is_flag=True,
    help="The paper's grid: batch {16, 32} x lr {5e-5, 3e-5, 2e-5} x epochs {2, 3, 4}.",
)
@click.option(
    "--seeds",
    type=click.IntRange(1, MAX_SEEDS),
    default=1,
    show_default=True,
    help="Runs per setting (seed, seed+1, ...): mean ± sd.",
)
@click.option("--diagnostic", help="MNLI only: GLUE's diagnostic.tsv, predicted into AX.tsv.")
@click.option(
    "--test-predictions/--no-test-predictions",
    default=True,
    show_default=True,
    help="Predict the test files present in --data-dir (GLUE server layout).",
)
@click.option(
    "--bilstm",
    is_flag=True,
    help="Add a randomly initialised BiLSTM between the encoder and the classifier, which then reads "
    "the BiLSTM's final states instead of the pooled [CLS] (the paper's Table 5 row '+ BiLSTM').",
)
@click.option(
    "--predict-only",
    is_flag=True,
    help="Train nothing: evaluate on dev and predict the test files with the classifier saved in "
    "--checkpoint (the model/ folder of an earlier run).",
)
@click.option(
    "--save-model/--no-save-model",
    default=True,
    show_default=True,
    help="Save the selected run's model in OUTPUT/model/ (safetensors + config.json; a --checkpoint).",
)
def glue(
    task: str,
    data_dir: str,
    grid: bool,
    seeds: int,
    diagnostic: str | None,
    test_predictions: bool,
    bilstm: bool,
    predict_only: bool,
    save_model: bool,
    **opts: Any,
) -> None:
    """Fine-tune on one GLUE task; write metrics.json, dev predictions, the GLUE server's
    submission files (CoLA.tsv, MNLI-m.tsv, MNLI-mm.tsv, ...) for the test files present, and the
    selected model in OUTPUT/model/ (as --checkpoint it restores the classifier too)."""
    from finetune.glue import run_glue

    config = _config(opts)
    if config.seed + seeds - 1 > MAX_SEED:
        raise click.UsageError(
            f"--seed {config.seed} with --seeds {seeds} goes past the largest seed, {MAX_SEED}"
        )
    inputs = {"--data-dir": data_dir, "--checkpoint": opts["checkpoint"], "--diagnostic": diagnostic}
    result = _into_output(
        "glue",
        opts["output"],
        opts["overwrite"],
        inputs,
        run_glue,
        task,
        data_dir,
        opts["checkpoint"],
        opts["output"],
        config,
        max_seq_length=opts["max_seq_length"],
        grid=grid,
        num_seeds=seeds,
        max_train_examples=opts["max_train_examples"],
        max_eval_examples=opts["max_eval_examples"],
        diagnostic_file=diagnostic,
        cased=opts["cased"],
        predict_test=test_predictions,
        bilstm=bilstm,
        train=not predict_only,
        save=save_model,
    )
    click.echo(
        json.dumps({"task": result["task"], "dev": result["dev"], "dev_sd": result["dev_sd"]}, indent=2)
    )


_SWAG_EPILOG = """\b
Examples:
  finetune swag --data-dir swagaf/data --checkpoint out/runs/base --output out/ft/swag
  finetune swag --train-file train.csv --dev-file val.csv --checkpoint out/hf-base --output /tmp/swag \\
      --max-train-examples 2000 --epochs 1
"""


@main.command(context_settings=CONTEXT, epilog=_SWAG_EPILOG)
@click.option("--data-dir", help="swagaf's data/ folder (train.csv, val.csv, test.csv).")
@click.option("--train-file", help="Instead of DATA_DIR/train.csv.")
@click.option("--dev-file", help="Instead of DATA_DIR/val.csv.")
@click.option("--test-file", help="Instead of DATA_DIR/test.csv (predicted into test_predictions.csv).")
@_training_options(epochs=3.0, lr=2e-5, batch_size=16)
def swag(
    data_dir: str | None, train_file: str | None, dev_file: str | None, test_file: str | None, **opts: Any
) -> None:
    """Fine-tune on SWAG (four-way multiple choice); write metrics.json with dev accuracy."""
    from finetune.swag import run_swag

    config = _config(opts)
    inputs = {"--data-dir": data_dir, "--train-file": train_file, "--dev-file": dev_file,
              "--test-file": test_file, "--checkpoint": opts["checkpoint"]}  # fmt: skip
    result = _into_output(
        "swag",
        opts["output"],
        opts["overwrite"],
        inputs,
        run_swag,
        data_dir,
        opts["checkpoint"],
        opts["output"],
        config,
        max_seq_length=opts["max_seq_length"],
        train_file=train_file,
        dev_file=dev_file,
        test_file=test_file,
        max_train_examples=opts["max_train_examples"],
        max_eval_examples=opts["max_eval_examples"],
        cased=opts["cased"],
    )
    click.echo(json.dumps({"task": "swag", "dev": result["dev"]}, indent=2))


_NER_EPILOG = """\b
Examples:
  finetune ner --data-dir conll2003 --checkpoint out/runs/base --output out/ft/ner --cased
  finetune ner --data-dir conll2003 --checkpoint out/runs/base --output out/ft/ner-concat \\
      --features concat-last-4 --cache-features      # feature-based (Table 7): frozen encoder + BiLSTM
  for f in embeddings last sum-all; do               # Table 7's rows sharing one encoder pass
    finetune ner --data-dir conll2003 --checkpoint out/runs/base --output out/ft/ner-$f \\
        --features $f --feature-cache out/ner-activations; done
"""
FEATURE_LR = 1e-3  # the default --lr of the feature-based mode: the BiLSTM starts from scratch


@main.command(context_settings=CONTEXT, epilog=_NER_EPILOG)
@click.option(
    "--data-dir", required=True, help="CoNLL-2003 folder: train.txt, valid.txt, test.txt (optional)."
)
@_training_options(epochs=3.0, lr=5e-5, batch_size=32)
@click.option(
    "--features",
    type=click.Choice(FEATURE_CHOICES),
    help="Feature-based mode (the paper's Table 7): freeze the encoder and feed these layers to a "
    f"two-layer BiLSTM (units = the encoder's hidden size) and a classifier; --lr defaults to {FEATURE_LR:g}.",
)
@click.option(
    "--doc-stride",
    type=int,
    help="A sentence longer than --max-seq-length is read in overlapping windows this many "
    "sub-tokens apart, every word tagged from the window where it has the most context "
    "(default: half a window).",
)
@click.option(
    "--cache-features",
    is_flag=True,
    help="With --features: run the frozen encoder over train.txt once and keep its activations in "
    "memory (sentence tokens x layers x hidden x 4 bytes) instead of once per epoch.",
)
@click.option(
    "--feature-cache",
    metavar="DIR",
    help="With --features: also keep every layer's activations of train/valid/test in DIR "
    "(safetensors, named by a hash of the weights and inputs) and reuse them in later runs with any "
    "--features choice, so Table 7's six rows cost one encoder pass. Implies --cache-features.",
)
def ner(
    data_dir: str,
    features: str | None,
    doc_stride: int | None,
    cache_features: bool,
    feature_cache: str | None,
    **opts: Any,
) -> None:
    """Fine-tune for named-entity recognition (CoNLL-2003 layout, IOB1 or IOB2), or with --features
    train a BiLSTM tagger on the frozen encoder's activations; write metrics.json (entity-level
    precision/recall/F1 per type, as conlleval) and CoNLL-format predictions."""
    from finetune.ner import run_ner

    if (cache_features or feature_cache) and features is None:
        raise click.UsageError(
            "--cache-features and --feature-cache need --features (the fine-tuned mode trains the encoder)"
        )
    if doc_stride is not None and doc_stride < 1:
        raise click.UsageError(f"--doc-stride must be at least 1, got {doc_stride}")
    source = click.get_current_context().get_parameter_source("lr")
    if features is not None and source == click.core.ParameterSource.DEFAULT:
        opts["lr"] = FEATURE_LR
    config = _config(opts)
    inputs = {"--data-dir": data_dir, "--checkpoint": opts["checkpoint"]}
    _check_apart(feature_cache, inputs, "--feature-cache")
    result = _into_output(
        "ner",
        opts["output"],
        opts["overwrite"],
        {**inputs, "--feature-cache": feature_cache},
        run_ner,
        data_dir,
        opts["checkpoint"],
        opts["output"],
        config,
        max_seq_length=opts["max_seq_length"],
        doc_stride=doc_stride,
        max_train_examples=opts["max_train_examples"],
        max_eval_examples=opts["max_eval_examples"],
        cased=opts["cased"],
        features=features,
        cache_features=cache_features,
        feature_cache=feature_cache,
        cache=feature_cache,
    )
    longer = {split: counts["longer_than_one_window"] for split, counts in result["windows"].items()}
    click.echo(
        json.dumps(
            {"task": "ner", "mode": result["mode"], "dev": result["dev"], "longer_than_one_window": longer},
            indent=2,
        )
    )


_FEATURES_EPILOG = """\b
Examples:
  finetune features --checkpoint out/runs/base --input text.txt --output out/feats --layers -1,-2,-3,-4
  finetune features --checkpoint out/hf-base --input gs://b/text.txt --output gs://b/feats --layers 0,-1 \\
      --max-seq-length 512 --batch-size 16 --device cuda
"""


@main.command(context_settings=CONTEXT, epilog=_FEATURES_EPILOG)
@click.option("--checkpoint", required=True, help=CHECKPOINT_HELP)
@click.option("--input", "input_file", required=True, help="UTF-8 text, one text a line (local or a URL).")
@click.option("--output", required=True, help="Folder for features-NNNNN.arrow, manifest.json, COMPLETED.")
@click.option(
    "--layers",
    default="-1,-2,-3,-4",
    show_default=True,
    help="Comma-separated layers: -1 the last, -2 the one below, ..., 0 the embeddings.",
)
@click.option("--max-seq-length", type=int, default=128, show_default=True)
@click.option("--batch-size", type=int, default=32, show_default=True, help="Windows per forward pass.")
@click.option(
    "--stride",
    type=int,
    help="Lines longer than --max-seq-length - 2 pieces are split into windows this many pieces apart "
    "(default: half a window); each piece keeps the vector from its most-context window.",
)
@click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, ...")
@click.option("--cased/--uncased", default=None, help="Tokeniser casing; default: as the checkpoint records.")
@click.option("--overwrite", is_flag=True, help="Replace an earlier `finetune features` run in --output.")
def features(
    checkpoint: str, input_file: str, output: str, cased: bool | None, overwrite: bool, **opts: Any
) -> None:
    """Write each token's hidden states (the layers asked for) of every line of --input as Arrow
    rows (line, token, token_index, word_index, layer, vector) with a manifest and COMPLETED: the
    equivalent of the reference extract_features.py."""
    from finetune.extract import ExtractSettings, extract_features

    try:
        settings = ExtractSettings(**opts)
    except FinetuneError as err:
        raise click.UsageError(str(err)) from None
    _check_apart(output, {"--checkpoint": checkpoint, "--input": input_file})
    stats = _call(
        extract_features, checkpoint, input_file, output, settings, cased=cased, overwrite=overwrite
    )
    click.echo(json.dumps(stats, indent=2))


_SQUAD_EPILOG = """\b
Examples:
  finetune squad --version 1.1 --train-file train-v1.1.json --predict-file dev-v1.1.json \\
      --checkpoint out/runs/base --output out/ft/squad11 --epochs 3 --lr 5e-5 --batch-size 32
  finetune squad --version 2.0 --train-file train-v2.0.json --predict-file dev-v2.0.json \\
      --checkpoint out/hf-base --output out/ft/squad20 --epochs 2 --lr 5e-5 --batch-size 48
  finetune squad --version 1.1 --predict-file dev-v1.1.json --checkpoint out/ft/squad11/model ...  # predict only
"""


@main.command(context_settings=CONTEXT, epilog=_SQUAD_EPILOG)
@click.option("--version", "version", required=True, type=click.Choice(["1.1", "2.0"]))
@click.option("--train-file", help="SQuAD JSON to train on; omit to only predict.")
@click.option("--predict-file", required=True, help="SQuAD JSON to answer and score (dev-v1.1.json, ...).")
@click.option("--checkpoint", required=True, help=CHECKPOINT_HELP)
@click.option(
    "--output", required=True, help="Folder for predictions.json, nbest_predictions.json, metrics.json."
)
@click.option("--overwrite", is_flag=True, help=OVERWRITE_HELP)
@click.option("--epochs", type=float, help="Default: finetune.squad.run_squad's.")
@click.option("--lr", type=float)
@click.option("--batch-size", type=int)
@click.option("--seed", type=int)
@click.option("--max-seq-length", type=int, help="Default 384.")
@click.option("--doc-stride", type=int, help="Default 128.")
@click.option("--max-query-length", type=int, help="Default 64.")
@click.option("--n-best-size", type=int, help="Default 20.")
@click.option("--max-answer-length", type=int, help="Default 30.")
@click.option(
    "--max-train-examples", type=click.IntRange(min=1), help="Train on the first N questions (quick runs)."
)
@click.option(
    "--max-predict-examples", type=click.IntRange(min=1), help="Answer the first N questions (quick runs)."
)
@click.option("--precision", type=click.Choice(PRECISIONS))
@click.option("--device")
@click.option(
    "--bilstm",
    is_flag=True,
    help="Add a randomly initialised BiLSTM between the encoder and the span head (the paper's "
    "LTR & No NSP + BiLSTM row).",
)
def squad(
    version: str,
    train_file: str | None,
    predict_file: str,
    checkpoint: str,
    output: str,
    overwrite: bool,
    **opts: Any,
) -> None:
    """Fine-tune on SQuAD v1.1 or v2.0 and score the predictions with the official metrics (v2.0:
    at null threshold 0 and at the threshold tuned on the predict file)."""
    from finetune.squad import run_squad

    given = {k: v for k, v in opts.items() if v is not None}
    inputs = {"--train-file": train_file, "--predict-file": predict_file, "--checkpoint": checkpoint}
    result = _into_output(
        "squad", output, overwrite, inputs, run_squad, version, train_file, predict_file, checkpoint, output,
        **given,
    )  # fmt: skip
    shown = {k: v for k, v in result.items() if k not in ("train", "predict", "settings")}
    click.echo(json.dumps(shown, indent=2))


@main.group(context_settings=CONTEXT)
def evaluate() -> None:
    """Score prediction files as the official evaluation scripts do."""


@evaluate.command(
    "squad",
    context_settings=CONTEXT,
    epilog="\b\nExamples:\n  finetune evaluate squad --version 1.1 --data-file dev-v1.1.json --predictions predictions.json\n"
    "  finetune evaluate squad --version 2.0 --data-file dev-v2.0.json --predictions predictions.json \\\n"
    "      --null-odds null_odds.json",
)
@click.option("--version", "version", required=True, type=click.Choice(["1.1", "2.0"]))
@click.option("--data-file", required=True, help="The SQuAD JSON with the gold answers.")
@click.option("--predictions", required=True, help="JSON: question id -> answer text ('' for no answer).")
@click.option("--null-odds", help="v2.0: JSON question id -> null odds; adds the best-threshold metrics.")
def evaluate_squad(version: str, data_file: str, predictions: str, null_odds: str | None) -> None:
    """Print EM and F1 (v2.0: with the HasAns/NoAns breakdown) as JSON."""
    from finetune.squad import evaluate_file

    result = _call(evaluate_file, version, data_file, predictions, null_odds)
    if result["unanswered"]:
        click.echo(
            f"warning: {result['unanswered']:,} of {result['total']:,} questions in {data_file} have no "
            f"prediction in {predictions}; each scores 0",
            err=True,
        )
    click.echo(json.dumps(result, indent=2))


@main.command(
    context_settings=CONTEXT,
    epilog="\b\nExample:\n  finetune report out/ft/mrpc out/ft/cola out/ft/swag --output out/ft/results",
)
@click.argument("runs", nargs=-1, required=True)
@click.option("--output", required=True, help="Folder for results.md and results.json.")
@click.option("--label", default="Ours", show_default=True, help="The name of our row.")
@click.option(
    "--overwrite", is_flag=True, help="Replace an earlier report (results.md, results.json) in --output."
)
def report(runs: tuple[str, ...], output: str, label: str, overwrite: bool) -> None:
    """Put runs' metrics.json beside the paper's numbers (Tables 1-4 layout); print the markdown."""
    from finetune.report import to_markdown, write_report

    _check_apart(output, {"RUNS": list(runs)})
    click.echo(to_markdown(_call(write_report, list(runs), output, label, overwrite)))


if __name__ == "__main__":
    main()
