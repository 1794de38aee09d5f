"""Metrics against hand-computed values, and against scipy where it is installed."""

from __future__ import annotations

import math
import random

import pytest

from finetune import metrics as M
from finetune import paper
from finetune.glue import majority_baseline, to_predictions
from finetune.glue_tasks import METRICS, TASKS, score


def test_accuracy_and_f1_by_hand():
    predictions = [1, 1, 0, 0, 1, 0]
    labels = [1, 0, 0, 1, 1, 0]
    assert M.accuracy(predictions, labels) == pytest.approx(4 / 6)
    # TP = 2, FP = 1, FN = 1: F1 = 4 / (4 + 1 + 1)
    assert M.f1(predictions, labels) == pytest.approx(4 / 6)
    assert M.f1([0, 0], [1, 0]) == 0.0
    # F1 of class 0: TP = 2, FP = 1, FN = 1
    assert M.f1(predictions, labels, positive=0) == pytest.approx(4 / 6)


def test_matthews_by_hand():
    # TP = 3, TN = 2, FP = 1, FN = 2: (6 - 2) / sqrt(4 * 5 * 3 * 4)
    predictions = [1, 1, 1, 1, 0, 0, 0, 0]
    labels = [1, 1, 1, 0, 0, 0, 1, 1]
    assert M.matthews_corrcoef(predictions, labels) == pytest.approx(4 / math.sqrt(240))
    assert M.matthews_corrcoef([1, 1, 1], [1, 0, 1]) == 0.0  # constant predictions
    assert M.matthews_corrcoef([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)
    assert M.matthews_corrcoef([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)


def test_pearson_spearman_by_hand():
    x = [1.0, 2.0, 3.0, 4.0]
    assert M.pearson(x, [2.0, 4.0, 6.0, 8.0]) == pytest.approx(1.0)
    assert M.pearson(x, [1.0, 3.0, 2.0, 4.0]) == pytest.approx(0.8)
    # Monotone but not linear: Spearman 1, Pearson below 1.
    assert M.spearman(x, [1.0, 10.0, 100.0, 1000.0]) == pytest.approx(1.0)
    assert M.ranks([10.0, 20.0, 20.0, 5.0]) == [2.0, 3.5, 3.5, 1.0]
    assert M.pearson(x, [3.0, 3.0, 3.0, 3.0]) == 0.0


def test_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(7)
    x = [rng.choice([0.0, 0.5, 1.0, 2.5, 3.0, 4.25, 5.0]) for _ in range(200)]
    y = [v + rng.gauss(0, 1.5) for v in x]
    assert M.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert M.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)  # ties in x
    assert M.ranks(x) == pytest.approx(list(stats.rankdata(x)))


def test_matthews_against_its_definition_as_a_correlation():
    # For binary 0/1 vectors the Matthews coefficient equals Pearson's r (the phi coefficient).
    rng = random.Random(3)
    for _ in range(20):
        labels = [rng.randint(0, 1) for _ in range(50)]
        predictions = [y if rng.random() < 0.7 else 1 - y for y in labels]
        expected = M.pearson([float(p) for p in predictions], [float(y) for y in labels])
        assert M.matthews_corrcoef(predictions, labels) == pytest.approx(expected, abs=1e-12)


def test_mean_and_sd():
    assert M.mean_and_sd([1.0, 2.0, 3.0, 4.0]) == pytest.approx((2.5, math.sqrt(5 / 3)))
    assert M.mean_and_sd([0.7]) == (0.7, 0.0)


def test_bad_inputs():
    with pytest.raises(ValueError, match="2 predictions but 3 labels"):
        M.accuracy([1, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="no examples"):
        M.f1([], [])


def test_task_metrics_use_the_official_choice():
    assert set(score(TASKS["cola"], [1, 0], [1, 0])) == {"accuracy", "mcc"}
    assert set(score(TASKS["mrpc"], [1, 0], [1, 1])) == {"accuracy", "f1"}
    assert set(score(TASKS["qqp"], [1, 0], [1, 1])) == {"accuracy", "f1"}
    assert set(score(TASKS["stsb"], [1.0, 2.0], [1.0, 3.0])) == {"pearson", "spearman"}
    assert set(score(TASKS["mnli"], [0, 1], [0, 2], "matched_")) == {"matched_accuracy"}
    for task in ("sst2", "qnli", "rte", "wnli"):
        assert set(score(TASKS[task], [0, 1], [0, 1])) == {"accuracy"}


def test_each_row_of_the_task_table_holds_the_task_s_metrics_and_the_paper_s_first():
    """A task's row is all there is to its metrics: what score reports, the key runs are selected by
    (metrics.json's main_metric), and its column of the paper's Table 1."""
    expected_main = {"cola": "mcc", "mrpc": "f1", "qqp": "f1", "stsb": "spearman", "mnli": "matched_accuracy"}
    for name, task in TASKS.items():
        prefix = next(iter(task.dev.values()))
        assert set(task.metrics) <= set(METRICS), name
        assert task.main_metric == expected_main.get(name, "accuracy")
        assert task.main_metric in score(task, [0, 1], [0, 1], prefix)
    assert TASKS["mnli"].paper_metrics == ("matched_accuracy", "mismatched_accuracy")
    assert set(paper.TABLE_1_COLUMNS) - {"average"} == set(TASKS) - {"wnli"}  # Table 1 leaves WNLI out
    assert set(paper.GLUE_COLUMNS.values()) <= set(TASKS)


def test_predictions_and_majority_baseline():
    import torch

    assert to_predictions(TASKS["rte"], torch.tensor([[0.1, 0.9], [2.0, -1.0]])) == [1, 0]
    assert to_predictions(TASKS["stsb"], torch.tensor([-0.3, 2.5, 7.0])) == [0.0, 2.5, 5.0]
    from finetune.glue_tasks import GlueExample

    train = [GlueExample(str(i), "a", "b", label, str(i)) for i, label in enumerate("1101")]
    dev = [GlueExample(str(i), "a", "b", label, str(i)) for i, label in enumerate("1100")]
    assert majority_baseline(TASKS["mrpc"], train, dev) == pytest.approx({"accuracy": 0.5, "f1": 2 / 3})
