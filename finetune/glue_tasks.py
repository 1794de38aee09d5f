"""The GLUE task table: each task's files, columns, labels and metrics in one row, as google's
``run_classifier.py`` and HF's ``run_glue.py`` keep them; adding a task is adding a row; and the
reader of a task's folder. Imports no torch, so ``chain`` checks a task name and reads its folder
before anything heavy loads."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from finetune import metrics as M
from finetune.inputs import input_lines
from schemas import storage
from schemas.commands import InputError, UsageError


@dataclass(frozen=True)
class GlueTask:
    """The layout, labels and metrics of one GLUE task. ``text_a``, ``text_b`` (or None) and
    ``label`` are header names; ``positional`` names the columns of train/dev files without a
    header (CoLA). ``metrics`` are what :func:`score` reports, the paper's first: it selects
    among runs and is the task's column of the paper's Table 1. ``dev`` maps each dev file's stem
    to its metrics' prefix, ``test`` each test file's stem to its submission file (default
    ``test`` -> ``<folder>.tsv``)."""

    name: str
    folder: str
    labels: tuple[str, ...] | None  # None: regression (STS-B)
    text_a: str
    text_b: str | None
    label: str
    metrics: tuple[str, ...]
    dev: dict[str, str] = dataclasses.field(default_factory=lambda: {"dev": ""})
    test: dict[str, str] = dataclasses.field(default_factory=dict)
    test_index: str = "index"
    positional: tuple[str, ...] | None = None
    diagnostic: str | None = None  # the submission file of the diagnostic set (AX) this task's model predicts

    def __post_init__(self) -> None:
        if not self.test:  # the GLUE server's name for the test file's predictions
            object.__setattr__(self, "test", {"test": f"{self.folder}.tsv"})

    @property
    def num_labels(self) -> int:
        """Outputs of the head: the number of classes, or 1 for regression."""
        return 1 if self.labels is None else len(self.labels)

    @property
    def paper_metrics(self) -> tuple[str, ...]:
        """The paper's metric on each dev split, as keys of ``metrics.json``'s ``dev`` (MNLI: m and mm)."""
        return tuple(prefix + self.metrics[0] for prefix in self.dev.values())

    @property
    def main_split(self) -> str:
        """The dev split runs are selected on: the first (the stem that keys ``majority_baseline``)."""
        return next(iter(self.dev))

    @property
    def main_metric(self) -> str:
        """The key runs are selected by: the paper's metric on :attr:`main_split`."""
        return self.paper_metrics[0]


ACCURACY, F1, MCC = ("accuracy",), ("f1", "accuracy"), ("mcc", "accuracy")
BINARY = ("0", "1")
ENTAILMENT = ("entailment", "not_entailment")
NLI = ("sentence1", "sentence2", "label", ACCURACY)
MNLI_DEV = {"dev_matched": "matched_", "dev_mismatched": "mismatched_"}
MNLI_TEST = {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"}
COLA_COLUMNS = ("source", "label", "original_label", "sentence")
TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        GlueTask("cola", "CoLA", BINARY, "sentence", None, "label", MCC, positional=COLA_COLUMNS),
        GlueTask("sst2", "SST-2", BINARY, "sentence", None, "label", ACCURACY),
        GlueTask("mrpc", "MRPC", BINARY, "#1 String", "#2 String", "Quality", F1),
        GlueTask("qqp", "QQP", BINARY, "question1", "question2", "is_duplicate", F1, test_index="id"),
        GlueTask("stsb", "STS-B", None, "sentence1", "sentence2", "score", ("spearman", "pearson")),
        GlueTask(
            "mnli",
            "MNLI",
            ("contradiction", "entailment", "neutral"),
            *NLI[:2],
            "gold_label",
            ACCURACY,
            dev=MNLI_DEV,
            test=MNLI_TEST,
            diagnostic="AX.tsv",
        ),
        GlueTask("qnli", "QNLI", ENTAILMENT, "question", "sentence", "label", ACCURACY),
        GlueTask("rte", "RTE", ENTAILMENT, *NLI),
        GlueTask("wnli", "WNLI", BINARY, *NLI),
    )
}
METRICS: dict[str, Callable[[GlueTask, Sequence[float], Sequence[float]], float]] = {  # as GLUE computes them
    "accuracy": lambda task, predictions, labels: M.accuracy(predictions, labels),
    "mcc": lambda task, predictions, labels: M.matthews_corrcoef(predictions, labels),
    "f1": lambda task, predictions, labels: M.f1(predictions, labels, positive=task.labels.index("1")),
    "pearson": lambda task, predictions, labels: M.pearson(predictions, labels),
    "spearman": lambda task, predictions, labels: M.spearman(predictions, labels),
}


def get_task(name: str) -> GlueTask:
    """The task called ``name`` (case and ``-`` ignored)."""
    key = name.lower().replace("-", "")
    if key not in TASKS:
        raise UsageError(f"unknown GLUE task {name!r}: choose one of {', '.join(TASKS)}")
    return TASKS[key]


def score(
    task: GlueTask, predictions: Sequence[float], labels: Sequence[float], prefix: str = ""
) -> dict[str, float]:
    """The task's :attr:`~GlueTask.metrics` of ``predictions``; ``prefix`` names MNLI's split."""
    return {prefix + name: METRICS[name](task, predictions, labels) for name in task.metrics}


@dataclass(frozen=True)
class GlueExample:
    """One row: where it came from (``file:line``), its texts, label (None in test files) and index."""

    guid: str
    text_a: str
    text_b: str | None
    label: str | float | None
    index: str


def read_tsv(path: str) -> list[tuple[int, list[str]]]:
    """Every non-empty row of a TSV file as ``(line number, fields)``."""
    rows = []
    for number, line in input_lines(path):
        line = line.removesuffix("\n").removesuffix("\r")
        if line.strip():
            rows.append((number, line.split("\t")))
    return rows


def read_split(task: GlueTask, path: str, *, labelled: bool) -> list[GlueExample]:
    """Read one GLUE file of ``task``: train/dev files (``labelled``) or test files (no labels)."""
    rows = read_tsv(path)
    wanted = [task.text_a] + ([task.text_b] if task.text_b else []) + ([task.label] if labelled else [])
    if task.positional and labelled:
        positions = {name: task.positional.index(name) for name in wanted}
    else:
        if not rows:
            raise InputError(f"{path}: empty file (expected a header row)")
        (_, header), rows = rows[0], rows[1:]
        for name in wanted:
            if name not in header:
                raise InputError(
                    f"{path}:1: the header has no column {name!r} (columns: {', '.join(header)}); "
                    f"is this the {task.folder} file of the official GLUE data?"
                )
        positions = {name: header.index(name) for name in wanted}
        index_name = "index" if labelled else task.test_index
        if index_name in header:
            positions["index"] = header.index(index_name)
    examples = []
    for row_number, (line, fields) in enumerate(rows):
        missing = [name for name, at in positions.items() if at >= len(fields)]
        if missing:
            raise InputError(
                f"{path}:{line}: {len(fields)} tab-separated fields, no column {missing[0]!r} "
                f"(field {positions[missing[0]] + 1})"
            )
        label = _label(task, fields[positions[task.label]], f"{path}:{line}") if labelled else None
        index = fields[positions["index"]] if "index" in positions else str(row_number)
        text_b = fields[positions[task.text_b]] if task.text_b else None
        examples.append(GlueExample(f"{path}:{line}", fields[positions[task.text_a]], text_b, label, index))
    return examples


def _label(task: GlueTask, value: str, where: str) -> str | float:
    value = value.strip()
    if task.labels is not None:
        if value not in task.labels:
            raise InputError(
                f"{where}: label {value!r} is not one of {', '.join(task.labels)} ({task.folder})"
            )
        return value
    try:
        score = float(value)
    except ValueError:
        score = float("nan")
    if not 0.0 <= score <= 5.0:
        raise InputError(f"{where}: score {value!r} is not a number in [0, 5] ({task.folder})")
    return score


@dataclass
class GlueData:
    """A task folder read in full: train, and each dev and test split present."""

    train: list[GlueExample]
    dev: dict[str, list[GlueExample]]
    test: dict[str, list[GlueExample]]


def read_task(
    task: GlueTask, data_dir: str, *, diagnostic_file: str | None = None, with_test: bool = True
) -> GlueData:
    """Read the task's folder of the GLUE download (the test files when present)."""

    def file(stem: str) -> str:
        return f"{data_dir.rstrip('/')}/{stem}.tsv"

    for stem in ["train", *task.dev]:
        if not storage.exists(file(stem)):
            raise InputError(
                f"{file(stem)} not found: --data-dir must be the {task.folder} folder of the "
                "GLUE download (train.tsv, dev.tsv, test.tsv)"
            )
    if diagnostic_file and task.diagnostic is None:
        raise UsageError("--diagnostic is predicted by the MNLI model: use it with --task mnli")
    train = read_split(task, file("train"), labelled=True)
    dev = {stem: read_split(task, file(stem), labelled=True) for stem in task.dev}
    test = {}
    if with_test:
        test = {s: read_split(task, file(s), labelled=False) for s in task.test if storage.exists(file(s))}
    if diagnostic_file:
        test["diagnostic"] = read_split(task, diagnostic_file, labelled=False)
    return GlueData(train, dev, test)
