"""GLUE: the official task folders, the official metrics, and the GLUE server's submission files.

Each task's TSV layout is described by a :class:`GlueTask`. Files are UTF-8 (a leading BOM is
dropped), split on ``\\n`` and then on tabs with no CSV quoting: quote characters are text. Rows are
split on ``\\n`` only (not ``str.splitlines``, which would also split at form feeds and other
Unicode line separators that occur inside sentences). A row without a needed column, or with a
label outside the task's set, is an error naming the file and line.

:func:`run_glue` fine-tunes one task: one run, several seeds (mean ± sd), or the paper's grid
(Appendix A.3: batch size {16, 32}, learning rate {5e-5, 3e-5, 2e-5}, epochs {2, 3, 4}) selected
on the dev set; it writes ``metrics.json``, dev predictions and the test submission file(s).
"""

from __future__ import annotations

import copy
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import fsspec
import torch

from finetune import metrics as M
from finetune.common import (
    Encoder,
    FinetuneError,
    TrainConfig,
    check_casing,
    check_max_seq_length,
    encode_pair,
    fit,
    load_encoder,
    predict,
    stack,
)
from finetune.glue_model import MODEL_FOLDER, build_classifier, head_weights, load_head, save_classifier
from pretrain.runtime import exists, output_folder, write_json
from schemas.files import write_file

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class GlueTask:
    """The layout, labels and metrics of one GLUE task.

    ``columns`` are header names (``text_a``, ``text_b`` or None, ``label``); ``positional`` gives
    the column names of train/dev files that have no header row (CoLA). ``dev`` and ``test`` map
    each split's file stem to its name in metrics (dev) or its submission file (test).
    """

    name: str
    folder: str
    labels: tuple[str, ...] | None  # None: regression (STS-B)
    text_a: str
    text_b: str | None
    label: str
    main_metric: str
    dev: dict[str, str]
    test: dict[str, str]
    test_index: str = "index"
    positional: tuple[str, ...] | None = None

    @property
    def num_labels(self) -> int:
        """Outputs of the head: the number of classes, or 1 for regression."""
        return 1 if self.labels is None else len(self.labels)


BINARY = ("0", "1")
ENTAILMENT = ("entailment", "not_entailment")
TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        GlueTask(
            name="cola",
            folder="CoLA",
            labels=BINARY,
            text_a="sentence",
            text_b=None,
            label="label",
            main_metric="mcc",
            dev={"dev": ""},
            test={"test": "CoLA.tsv"},
            positional=("source", "label", "original_label", "sentence"),
        ),
        GlueTask(
            name="sst2",
            folder="SST-2",
            labels=BINARY,
            text_a="sentence",
            text_b=None,
            label="label",
            main_metric="accuracy",
            dev={"dev": ""},
            test={"test": "SST-2.tsv"},
        ),
        GlueTask(
            name="mrpc",
            folder="MRPC",
            labels=BINARY,
            text_a="#1 String",
            text_b="#2 String",
            label="Quality",
            main_metric="f1",
            dev={"dev": ""},
            test={"test": "MRPC.tsv"},
        ),
        GlueTask(
            name="qqp",
            folder="QQP",
            labels=BINARY,
            text_a="question1",
            text_b="question2",
            label="is_duplicate",
            main_metric="f1",
            dev={"dev": ""},
            test={"test": "QQP.tsv"},
            test_index="id",
        ),
        GlueTask(
            name="stsb",
            folder="STS-B",
            labels=None,
            text_a="sentence1",
            text_b="sentence2",
            label="score",
            main_metric="spearman",
            dev={"dev": ""},
            test={"test": "STS-B.tsv"},
        ),
        GlueTask(
            name="mnli",
            folder="MNLI",
            labels=("contradiction", "entailment", "neutral"),
            text_a="sentence1",
            text_b="sentence2",
            label="gold_label",
            main_metric="matched_accuracy",
            dev={"dev_matched": "matched_", "dev_mismatched": "mismatched_"},
            test={"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"},
        ),
        GlueTask(
            name="qnli",
            folder="QNLI",
            labels=ENTAILMENT,
            text_a="question",
            text_b="sentence",
            label="label",
            main_metric="accuracy",
            dev={"dev": ""},
            test={"test": "QNLI.tsv"},
        ),
        GlueTask(
            name="rte",
            folder="RTE",
            labels=ENTAILMENT,
            text_a="sentence1",
            text_b="sentence2",
            label="label",
            main_metric="accuracy",
            dev={"dev": ""},
            test={"test": "RTE.tsv"},
        ),
        GlueTask(
            name="wnli",
            folder="WNLI",
            labels=BINARY,
            text_a="sentence1",
            text_b="sentence2",
            label="label",
            main_metric="accuracy",
            dev={"dev": ""},
            test={"test": "WNLI.tsv"},
        ),
    )
}
DIAGNOSTIC_SUBMISSION = "AX.tsv"  # the diagnostic set, predicted by the MNLI model
GRID = {"batch_size": (16, 32), "lr": (5e-5, 3e-5, 2e-5), "epochs": (2, 3, 4)}  # paper, Appendix A.3


def get_task(name: str) -> GlueTask:
    """The task called ``name`` (``cola``, ``sst2``, ``mrpc``, ``qqp``, ``stsb``, ``mnli``, ``qnli``,
    ``rte``, ``wnli``; case and ``-`` ignored)."""
    key = name.lower().replace("-", "")
    if key not in TASKS:
        raise FinetuneError(f"unknown GLUE task {name!r}: choose one of {', '.join(TASKS)}")
    return TASKS[key]


# --- reading ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GlueExample:
    """One row: where it came from (``file:line``), its texts, its label (a label string, a float
    score, or None in test files) and its index (the file's index column, else the row number)."""

    guid: str
    text_a: str
    text_b: str | None
    label: str | float | None
    index: str


def read_tsv(path: str) -> list[tuple[int, list[str]]]:
    """Every non-empty row of a TSV file as ``(line number, fields)``; no quoting, BOM dropped."""
    try:
        with fsspec.open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise FinetuneError(f"{path} not found") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise FinetuneError(f"{path}: not UTF-8 (byte {err.start}); GLUE files are UTF-8") from None
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if line.strip():
            rows.append((number, line.split("\t")))
    return rows


def _column_positions(task: GlueTask, header: list[str], wanted: list[str], path: str) -> dict[str, int]:
    positions = {}
    for name in wanted:
        if name not in header:
            raise FinetuneError(
                f"{path}:1: the header has no column {name!r} (columns: {', '.join(header)}); "
                f"is this the {task.folder} file of the official GLUE data?"
            )
        positions[name] = header.index(name)
    return positions


def read_split(task: GlueTask, path: str, *, labelled: bool) -> list[GlueExample]:
    """Read one GLUE file of ``task``: train/dev files (``labelled``) or test files (no labels)."""
    rows = read_tsv(path)
    wanted = [task.text_a] + ([task.text_b] if task.text_b else []) + ([task.label] if labelled else [])
    if task.positional and labelled:
        positions = {name: task.positional.index(name) for name in wanted}
    else:
        if not rows:
            raise FinetuneError(f"{path}: empty file (expected a header row)")
        (_, header), rows = rows[0], rows[1:]
        index_name = task.test_index if not labelled else "index"
        positions = _column_positions(task, header, wanted, path)
        if index_name in header:
            positions["index"] = header.index(index_name)
    examples = []
    for row_number, (line, fields) in enumerate(rows):
        missing = [name for name, at in positions.items() if at >= len(fields)]
        if missing:
            raise FinetuneError(
                f"{path}:{line}: {len(fields)} tab-separated fields, no column {missing[0]!r} "
                f"(field {positions[missing[0]] + 1})"
            )
        label: str | float | None = None
        if labelled:
            label = _parse_label(task, fields[positions[task.label]], f"{path}:{line}")
        index = fields[positions["index"]] if "index" in positions else str(row_number)
        text_b = fields[positions[task.text_b]] if task.text_b else None
        examples.append(GlueExample(f"{path}:{line}", fields[positions[task.text_a]], text_b, label, index))
    return examples


def _parse_label(task: GlueTask, value: str, where: str) -> str | float:
    value = value.strip()
    if task.labels is None:
        try:
            score = float(value)
        except ValueError:
            score = float("nan")
        if not 0.0 <= score <= 5.0:
            raise FinetuneError(f"{where}: score {value!r} is not a number in [0, 5] ({task.folder})")
        return score
    if value not in task.labels:
        raise FinetuneError(
            f"{where}: label {value!r} is not one of {', '.join(task.labels)} ({task.folder})"
        )
    return value


@dataclass
class GlueData:
    """A task folder read in full: train, each dev split, each test split present, and the
    diagnostic set when given."""

    train: list[GlueExample]
    dev: dict[str, list[GlueExample]]
    test: dict[str, list[GlueExample]]


def _file(data_dir: str, stem: str) -> str:
    return f"{data_dir.rstrip('/')}/{stem}.tsv"


def read_task(
    task: GlueTask, data_dir: str, *, diagnostic_file: str | None = None, with_test: bool = True
) -> GlueData:
    """Read ``data_dir`` (the task's folder of the GLUE download: ``train.tsv``, ``dev.tsv`` or
    MNLI's ``dev_matched.tsv``/``dev_mismatched.tsv``, and the test files when present)."""
    for stem in ["train", *task.dev]:
        if not exists(_file(data_dir, stem)):
            raise FinetuneError(
                f"{_file(data_dir, stem)} not found: --data-dir must be the {task.folder} folder of the "
                "GLUE download (train.tsv, dev.tsv, test.tsv)"
            )
    train = read_split(task, _file(data_dir, "train"), labelled=True)
    dev = {stem: read_split(task, _file(data_dir, stem), labelled=True) for stem in task.dev}
    test = {}
    if with_test:
        test = {
            stem: read_split(task, _file(data_dir, stem), labelled=False)
            for stem in task.test
            if exists(_file(data_dir, stem))
        }
    if diagnostic_file:
        if task.name != "mnli":
            raise FinetuneError("--diagnostic is predicted by the MNLI model: use it with --task mnli")
        test["diagnostic"] = read_split(task, diagnostic_file, labelled=False)
    return GlueData(train, dev, test)


# --- features, metrics, submissions ----------------------------------------------------------------


def features(
    task: GlueTask, examples: Sequence[GlueExample], encoder: Encoder, max_seq_length: int
) -> list[dict]:
    """Token ids per example, and ``labels`` (class index, or the score) when labelled."""
    result = []
    for example in examples:
        feature: dict[str, Any] = encode_pair(
            encoder.tokenizer, example.text_a, example.text_b, max_seq_length
        )
        if example.label is not None:
            if task.labels is None:
                feature["labels"] = float(example.label)
            else:
                feature["labels"] = task.labels.index(str(example.label))
        result.append(feature)
    return result


def score(
    task: GlueTask, predictions: Sequence[float], labels: Sequence[float], prefix: str = ""
) -> dict[str, float]:
    """The official metrics of ``task``: CoLA Matthews correlation (and accuracy); STS-B Pearson and
    Spearman; MRPC and QQP F1 and accuracy; the others accuracy. ``prefix`` names MNLI's split."""
    if task.labels is None:
        values = {"pearson": M.pearson(predictions, labels), "spearman": M.spearman(predictions, labels)}
    else:
        values = {"accuracy": M.accuracy(predictions, labels)}
        if task.name == "cola":
            values["mcc"] = M.matthews_corrcoef(predictions, labels)
        if task.name in ("mrpc", "qqp"):
            values["f1"] = M.f1(predictions, labels, positive=task.labels.index("1"))
    return {prefix + k: v for k, v in values.items()}


def to_predictions(task: GlueTask, logits: torch.Tensor) -> list:
    """Class indices (argmax), or scores clipped to [0, 5] for STS-B."""
    if task.labels is None:
        return [min(5.0, max(0.0, float(v))) for v in logits]
    return logits.argmax(-1).tolist()


def prediction_strings(task: GlueTask, predictions: Sequence) -> list[str]:
    """What the GLUE server expects in the prediction column: the label string, or the score."""
    if task.labels is None:
        return [f"{p:.3f}" for p in predictions]
    return [task.labels[p] for p in predictions]


def write_submission(path: str, examples: Sequence[GlueExample], predictions: Sequence[str]) -> None:
    """A GLUE server file: header ``index\\tprediction``, then one row per test example."""
    lines = ["index\tprediction"] + [f"{e.index}\t{p}" for e, p in zip(examples, predictions, strict=True)]
    write_file(path, "\n".join(lines) + "\n")


def majority_baseline(
    task: GlueTask, train: Sequence[GlueExample], dev: Sequence[GlueExample]
) -> dict[str, float]:
    """The metrics of always predicting the most common training label (mean score for STS-B)."""
    labels = _label_values(task, dev)
    if task.labels is None:
        mean = sum(float(e.label) for e in train) / len(train)
        return {"mse": sum((mean - y) ** 2 for y in labels) / len(labels)}
    counts = [sum(e.label == label for e in train) for label in task.labels]
    majority = counts.index(max(counts))
    return score(task, [majority] * len(labels), labels)


def _label_values(task: GlueTask, examples: Sequence[GlueExample]) -> list:
    if task.labels is None:
        return [float(e.label) for e in examples]
    return [task.labels.index(str(e.label)) for e in examples]


# --- running ---------------------------------------------------------------------------------------


def _run_name(config: TrainConfig) -> str:
    return f"bs{config.batch_size}-lr{config.lr:g}-ep{config.epochs:g}-seed{config.seed}"


def run_configs(base: TrainConfig, *, grid: bool, num_seeds: int) -> list[list[TrainConfig]]:
    """The runs to make, grouped by hyper-parameters: each group is one setting over ``num_seeds``
    seeds (``base.seed``, ``base.seed + 1``, ...); the paper's grid when ``grid``."""
    if num_seeds < 1:
        raise FinetuneError(f"--seeds must be at least 1, got {num_seeds}")
    settings = (
        [dict(batch_size=b, lr=lr, epochs=e) for b, lr, e in itertools.product(*GRID.values())]
        if grid
        else [{}]
    )
    return [[replace(base, **s, seed=base.seed + k) for k in range(num_seeds)] for s in settings]


def run_glue(
    task_name: str,
    data_dir: str,
    checkpoint: str,
    output: str,
    config: TrainConfig,
    *,
    max_seq_length: int = 128,
    grid: bool = False,
    num_seeds: int = 1,
    max_train_examples: int | None = None,
    max_eval_examples: int | None = None,
    diagnostic_file: str | None = None,
    cased: bool | None = None,
    predict_test: bool = True,
    bilstm: bool = False,
    train: bool = True,
    save: bool = True,
    before_training: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune ``checkpoint`` on one GLUE task and return (and write to ``output/metrics.json``)
    the dev metrics of the selected setting (mean and sd over seeds), every run's metrics, and the
    majority-class baseline. The selected setting's best seed predicts the dev set
    (``dev_predictions.tsv``) and the test files (the GLUE server's ``CoLA.tsv``, ``MNLI-m.tsv``,
    ...) unless not ``predict_test``. ``max_train_examples`` / ``max_eval_examples`` keep the first N
    rows (quick runs). ``bilstm``: a randomly initialised BiLSTM between the encoder and the
    classifier (the paper's "+ BiLSTM", :func:`finetune.glue_model.build_classifier`). The selected
    model is saved in ``output/model/`` unless not ``save``; as ``checkpoint`` that folder restores
    the classifier too, and ``train=False`` then only evaluates and predicts with it.
    ``before_training`` (the CLI's ``--overwrite`` clean-up) is called once the data, checkpoint
    and settings have passed their checks, right before the first run trains.
    """
    task = get_task(task_name)
    groups = run_configs(config, grid=grid, num_seeds=num_seeds)
    if not train and (grid or num_seeds > 1):
        raise FinetuneError("--predict-only trains nothing: leave out --grid and --seeds")
    data = read_task(task, data_dir, diagnostic_file=diagnostic_file, with_test=predict_test)
    train_examples = data.train[:max_train_examples] if max_train_examples else data.train
    dev = {k: (v[:max_eval_examples] if max_eval_examples else v) for k, v in data.dev.items()}
    encoder = load_encoder(checkpoint, cased=cased)
    check_max_seq_length(max_seq_length, encoder)
    check_casing(encoder, [e.text_a for e in train_examples or next(iter(dev.values()))])
    head = head_weights(encoder.source, task.name, task.num_labels, bilstm=bilstm)
    if not train and head is None:
        raise FinetuneError(
            f"--predict-only needs a fine-tuned classifier in --checkpoint; {encoder.source} has none "
            "(give the model/ folder of an earlier `finetune glue` run)"
        )
    inputs = _GlueInputs.of(task, encoder, train_examples if train else [], dev, max_seq_length)
    if before_training is not None:
        before_training()
    model, dev_predictions, chosen = _train_or_restore(inputs, groups, output, config, head, bilstm, train)
    files = _write_predictions(
        task, output, model, config, encoder, max_seq_length, dev, dev_predictions, data.test
    )
    if save:
        save_classifier(model, encoder, f"{output.rstrip('/')}/{MODEL_FOLDER}", task.name, task.labels)
        files.append(f"{MODEL_FOLDER}/")
    result = {
        "task": task.name,
        "checkpoint": encoder.source,
        "main_metric": task.main_metric,
        **chosen,
        "num_seeds": num_seeds,
        "grid": grid,
        "trained": train,
        "head": "from the checkpoint" if head is not None else "fresh",
        "bilstm": bilstm,
        "majority_baseline": {stem: majority_baseline(task, train_examples, dev[stem]) for stem in dev},
        "num_examples": {"train": len(train_examples), **{stem: len(v) for stem, v in dev.items()}},
        "max_seq_length": max_seq_length,
        "files": files,
    }
    write_json(f"{output}/metrics.json", result)
    return result


@dataclass(frozen=True)
class _GlueInputs:
    """What every run of one ``run_glue`` call shares: the task, encoder, examples and features."""

    task: GlueTask
    encoder: Encoder
    train: list[GlueExample]
    dev: dict[str, list[GlueExample]]
    train_features: Any
    dev_features: dict[str, Any]

    @classmethod
    def of(
        cls,
        task: GlueTask,
        encoder: Encoder,
        train: list[GlueExample],
        dev: dict[str, list[GlueExample]],
        max_seq_length: int,
    ) -> _GlueInputs:
        """The examples with their features at ``max_seq_length``."""
        return cls(
            task,
            encoder,
            train,
            dev,
            features(task, train, encoder, max_seq_length),
            {k: features(task, v, encoder, max_seq_length) for k, v in dev.items()},
        )


@dataclass(frozen=True)
class _KeptRun:
    """One run's dev main metric, weights (on CPU), dev predictions and name."""

    value: float
    state: dict
    predictions: dict
    name: str


def _evaluate_dev(
    inputs: _GlueInputs, model: torch.nn.Module, run: TrainConfig
) -> tuple[dict[str, float], dict[str, list]]:
    """Dev metrics (every dev split, prefixed) and dev predictions of one trained model."""
    task = inputs.task
    values, predictions = {}, {}
    for stem, prefix in task.dev.items():
        logits = stack(
            predict(
                model,
                inputs.dev_features[stem],
                batch_size=run.eval_batch_size,
                device=run.device,
                precision=run.precision,
                progress=run.progress,
            )
        )
        predictions[stem] = to_predictions(task, logits)
        values.update(score(task, predictions[stem], _label_values(task, inputs.dev[stem]), prefix))
    return values, predictions


def _train_groups(
    inputs: _GlueInputs,
    groups: list[list[TrainConfig]],
    output: str,
    *,
    bilstm: bool = False,
    head: dict | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], _KeptRun | None]:
    """Train every run of every setting from the same pre-trained weights (and ``head``, a saved
    classifier, when given); return every run's record, each setting's summary, and the best
    seed of the best setting."""
    task, encoder = inputs.task, inputs.encoder
    main = task.main_metric
    pretrained = copy.deepcopy(encoder.model.state_dict())
    runs: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    kept: _KeptRun | None = None
    for group in groups:
        group_best: _KeptRun | None = None
        group_runs = []
        for run in group:
            encoder.model.load_state_dict(pretrained)
            model = build_classifier(encoder.model, task.num_labels, seed=run.seed, bilstm=bilstm)
            if head is not None:
                load_head(model, head, encoder.source)
            name = _run_name(run)
            logger.info("%s: training %s on %d examples", task.name, name, len(inputs.train_features))
            trained = fit(model, inputs.train_features, run)
            values, predictions = _evaluate_dev(inputs, model, run)
            record = {"name": name, "config": run.to_dict(), "dev": values, "train": trained.to_dict()}
            if len(groups) * len(group) > 1:
                write_json(f"{output}/runs/{name}/metrics.json", record)
            group_runs.append(record)
            logger.info("%s: %s dev %s", task.name, name, values)
            if group_best is None or values[main] > group_best.value:
                state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
                group_best = _KeptRun(values[main], state, predictions, name)
        runs.extend(group_runs)
        summary = _summarise(group_runs)
        if not summaries or summary["dev_mean"][main] > max(s["dev_mean"][main] for s in summaries):
            kept = group_best
        summaries.append(summary)
    return runs, summaries, kept


def _train_or_restore(
    inputs: _GlueInputs,
    groups: list[list[TrainConfig]],
    output: str,
    config: TrainConfig,
    head: dict | None,
    bilstm: bool,
    train: bool,
) -> tuple[torch.nn.Module, dict[str, list], dict[str, Any]]:
    """The model to predict with, its dev predictions and its metrics.json entries: the best
    seed of the best setting when ``train``; else the classifier ``head`` restored, evaluated."""
    task, encoder = inputs.task, inputs.encoder
    model = build_classifier(encoder.model, task.num_labels, seed=config.seed, bilstm=bilstm)
    if not train:
        assert head is not None
        load_head(model, head, encoder.source)
        values, dev_predictions = _evaluate_dev(inputs, model, config)
        return model, dev_predictions, {"dev": values, "dev_sd": {k: 0.0 for k in values}, "runs": []}
    runs, summaries, kept = _train_groups(inputs, groups, output, bilstm=bilstm, head=head)
    selected = max(summaries, key=lambda s: s["dev_mean"][task.main_metric])
    assert kept is not None and kept.name in selected["runs"]
    model.load_state_dict(kept.state)
    chosen = {
        "dev": selected["dev_mean"],
        "dev_sd": selected["dev_sd"],
        "selected": selected["setting"],
        "selected_run": kept.name,
        "settings": summaries,
        "runs": runs,
    }
    return model, kept.predictions, chosen


def _summarise(group_runs: list[dict[str, Any]]) -> dict[str, Any]:
    config = group_runs[0]["config"]
    keys = group_runs[0]["dev"].keys()
    stats = {k: M.mean_and_sd([r["dev"][k] for r in group_runs]) for k in keys}
    return {
        "setting": {k: config[k] for k in ("batch_size", "lr", "epochs")},
        "runs": [r["name"] for r in group_runs],
        "dev_mean": {k: v[0] for k, v in stats.items()},
        "dev_sd": {k: v[1] for k, v in stats.items()},
    }


def _write_predictions(
    task: GlueTask,
    output: str,
    model: torch.nn.Module,
    config: TrainConfig,
    encoder: Encoder,
    max_seq_length: int,
    dev: dict[str, list[GlueExample]],
    dev_predictions: dict[str, list],
    test: dict[str, list[GlueExample]],
) -> list[str]:
    fs, root = output_folder(output)
    written = []
    for stem, examples in dev.items():
        name = f"{stem}_predictions.tsv"
        strings = prediction_strings(task, dev_predictions[stem])
        lines = ["index\tprediction\tlabel"] + [
            f"{e.index}\t{p}\t{e.label}" for e, p in zip(examples, strings, strict=True)
        ]
        write_file(f"{root}/{name}", "\n".join(lines) + "\n", fs)
        written.append(name)
    for stem, examples in test.items():
        name = DIAGNOSTIC_SUBMISSION if stem == "diagnostic" else task.test[stem]
        logits = stack(
            predict(
                model,
                features(task, examples, encoder, max_seq_length),
                batch_size=config.eval_batch_size,
                device=config.device,
                precision=config.precision,
                progress=config.progress,
            )
        )
        write_submission(
            f"{output.rstrip('/')}/{name}", examples, prediction_strings(task, to_predictions(task, logits))
        )
        written.append(name)
    return written
