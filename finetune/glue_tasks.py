"""The GLUE task table: each task's files, columns, labels and metrics in one row, as google's
``run_classifier.py`` and HF's ``run_glue.py`` keep them; adding a task is adding a row. Imports no
torch, so ``chain`` checks a task name before anything heavy loads."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from finetune import metrics as M
from schemas.commands import UsageError


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
    def main_metric(self) -> str:
        """The key runs are selected by: the paper's metric on the first dev split."""
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
