"""A result is what it says it is, or the command says what differs (issue 37): SQuAD questions
sharing an id counted and named, a prediction file giving one id twice refused, a span head that was
never trained never scored, a report that would drop a run refused, validation shards that are
the training split refused, a device torch cannot see refused and a precision run as given."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from finetune.config import FitConfig
from pretrain.runtime import resolve_precision
from tests.clis import CLIS
from tests.conftest import require
from tests.faults.finetune_inputs import QUICK, RTE
from tests.unit.test_finetune_common import hf_folder

CONTEXT = "Paris is the capital of France. Berlin is in Germany."
QUESTIONS = [
    ("q1", "capital?", "Paris", 0),
    ("q1", "where is Berlin?", "Germany", 45),
    ("q2", "x?", "France", 24),
]


def _squad(path: Path) -> Path:
    qas = [{"id": i, "question": q, "answers": [{"text": t, "answer_start": s}]} for i, q, t, s in QUESTIONS]
    path.write_text(
        json.dumps(
            {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]}
        )
    )
    return path


def _run(tool: str, *args: str):
    return CliRunner().invoke(CLIS[tool], list(args), prog_name=tool)


def test_squad_questions_sharing_an_id_are_counted_and_named(tmp_path):
    data, predictions = _squad(tmp_path / "dev.json"), tmp_path / "p.json"
    predictions.write_text('{"q1": "Paris", "q2": "France"}')
    result = _run(
        "finetune",
        "evaluate",
        "squad",
        "--version",
        "1.1",
        "--data-file",
        str(data),
        "--predictions",
        str(predictions),
    )
    assert result.exit_code == 0
    warning, scores = result.output.split("\n", 1)
    assert warning == (
        f"warning: 1 question(s) in {data} repeat an earlier question's id ('q1'); predictions are keyed by id, "
        "so those are scored by one"
    )
    assert json.loads(scores) | {"exact_match": 0, "f1": 0} == {
        "exact_match": 0,
        "f1": 0,
        "total": 3,
        "unanswered": 0,
        "num_duplicate_ids": 1,
        "duplicate_ids": ["q1"],
    }


def test_a_prediction_file_giving_one_id_twice_is_refused(tmp_path):
    data, predictions = _squad(tmp_path / "dev.json"), tmp_path / "p.json"
    predictions.write_text('{"q1": "Paris", "q1": "Germany", "q2": "France"}')
    result = _run(
        "finetune",
        "evaluate",
        "squad",
        "--version",
        "1.1",
        "--data-file",
        str(data),
        "--predictions",
        str(predictions),
    )
    assert (result.exit_code, result.output) == (
        1,
        f"error: {predictions}: the key 'q1' appears twice in one object; which is meant?\n",
    )


def test_squad_without_training_refuses_a_checkpoint_without_a_span_head(tmp_path):
    bert = hf_folder(tmp_path / "bert")
    out = tmp_path / "out"
    args = [
        "squad",
        "--version",
        "1.1",
        "--predict-file",
        str(_squad(tmp_path / "dev.json")),
        "--checkpoint",
        str(bert),
    ]
    result = _run(
        "finetune",
        *args,
        "--output",
        str(out),
        "--device",
        "cpu",
        "--max-seq-length",
        "64",
        "--max-query-length",
        "16",
        "--doc-stride",
        "16",
    )
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"error: without --train-file the span head is scored as it is, and {bert} has none (it would be random): "
        "give --train-file, or the model/ folder of an earlier `finetune squad` run"
    )
    assert not (out / "metrics.json").exists()


def test_a_report_never_drops_a_run_of_a_task_it_has_one_cell_for(tmp_path):
    for name, f1 in (("a", 0.8), ("b", 0.7)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps({"task": "mrpc", "dev": {"f1": f1}}))
    result = _run(
        "finetune", "report", str(tmp_path / "a"), str(tmp_path / "b"), "--output", str(tmp_path / "r")
    )
    assert (result.exit_code, result.output) == (
        1,
        f"error: {tmp_path / 'a'} and {tmp_path / 'b'} are both mrpc runs, and the table has one mrpc cell: give "
        "one of them (a run with --seeds N reports their mean and spread)\n",
    )
    assert not (tmp_path / "r" / "results.md").exists()


def test_validation_shards_of_the_training_split_are_refused(shards, tmp_path):
    args = ["--shards", str(shards), "--validation-shards", str(shards), "--output", str(tmp_path / "run")]
    result = _run(
        "pretrain", *args, "--config", "tiny", "--max-steps", "1", "--num-workers", "0", "--precision", "fp32"
    )
    assert result.exit_code == 1
    assert result.output.splitlines()[-1].startswith(
        f"error: --validation-shards {shards}: made from the same corpus split (train of "
    )
    assert result.output.splitlines()[-1].endswith(
        f") as --shards {shards}: its figures would be training figures; make held-out shards with "
        "`pipelines examples --split validation`"
    )
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is here")
def test_a_device_torch_cannot_see_is_one_line_before_anything_is_read(tmp_path):
    args = [
        "glue",
        "--task",
        "mrpc",
        "--data-dir",
        str(tmp_path),
        "--checkpoint",
        str(tmp_path),
        "--output",
        str(tmp_path / "o"),
    ]
    result = _run("finetune", *args, "--device", "cuda")
    assert (result.exit_code, result.output) == (
        2,
        f"error: --device cuda: torch {torch.__version__} sees 0 CUDA GPU(s) here; use --device cpu or auto\n",
    )


def test_a_precision_given_is_the_precision_run_and_recorded(tmp_path):
    cpu = torch.device("cpu")
    assert [resolve_precision(p, cpu) for p in ("fp16", "bf16", "fp32", "auto")] == [
        "fp16",
        "bf16",
        "fp32",
        "fp32",
    ]
    assert FitConfig(precision="fp16", device="cpu").problems() == []
    data = tmp_path / "rte"
    data.mkdir()
    for name in ("train.tsv", "dev.tsv"):
        shutil.copy(require(RTE / name), data / name)
    args = [
        "glue",
        "--task",
        "rte",
        "--data-dir",
        str(data),
        "--checkpoint",
        str(hf_folder(tmp_path / "bert")),
    ]
    result = _run(
        "finetune", *args, "--output", str(tmp_path / "o"), *QUICK, "--precision", "fp16", "--no-save-model"
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert metrics["runs"][0]["train"]["precision"] == "fp16"  # what ran, not only what was asked
