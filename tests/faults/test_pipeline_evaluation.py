"""Fault tests for ``finetune evaluate squad``: every question of the data file is counted.

A prediction file that leaves questions out must not raise the score: a missing prediction
scores 0 (v1.1 and v2.0), the command says how many were unanswered (one line on stderr) and
records it as ``unanswered`` in its JSON. Made-up questions, no model: well under a second.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from finetune.cli import main


def _data(version: str) -> dict:
    qas = [
        {"id": "q1", "question": "Who?", "answers": [{"text": "Ada", "answer_start": 0}]},
        {"id": "q2", "question": "When?", "answers": [{"text": "1843", "answer_start": 13}]},
        {"id": "q3", "question": "Where?", "answers": []},
    ]
    if version == "2.0":
        qas[2]["is_impossible"] = True
    else:
        qas.pop()
    return {
        "version": f"v{version}",
        "data": [{"title": "T", "paragraphs": [{"context": "Ada wrote in 1843.", "qas": qas}]}],
    }


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_missing_predictions_score_zero_and_are_reported(version, tmp_path):
    data_file = tmp_path / "dev.json"
    data_file.write_text(json.dumps(_data(version)))
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps({"q1": "Ada"}))  # q2 (and q3) unanswered
    result = CliRunner().invoke(
        main,
        [
            "evaluate",
            "squad",
            "--version",
            version,
            "--data-file",
            str(data_file),
            "--predictions",
            str(predictions),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    total = 2 if version == "1.1" else 3
    assert scores["total"] == total and scores["unanswered"] == total - 1
    exact = scores["exact_match" if version == "1.1" else "exact"]
    assert exact == pytest.approx(100.0 / total)  # 1 right out of every question, not out of 1
    assert result.stderr.strip() == (
        f"warning: {total - 1} of {total} questions in {data_file} have no prediction in {predictions}; "
        "each scores 0"
    )
