"""A sweep of bad inputs over every ``pipelines`` and ``wordpiece`` command, ``finetune
evaluate/features/report`` and ``pretrain params``: each ends in exactly one line naming the flag
or file, a non-zero exit, and no traceback (the training commands' sweep:
tests/faults/test_train_sweep.py). In-process (click's runner), tiny inputs: a few seconds in all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.clis import CLIS as MAINS


def _prepare(root: Path) -> None:
    (root / "incomplete").mkdir()
    (root / "incomplete" / "stats.json").write_text("{}")
    (root / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nword\n")
    (root / "not-json.json").write_text("{not json")
    (root / "dev.json").write_text(json.dumps({"data": []}))
    (root / "preds.json").write_text(json.dumps({"q1": "x"}))
    (root / "run").mkdir()
    (root / "run" / "metrics.json").write_text("{not json")
    (root / "report").mkdir()
    (root / "report" / "results.md").write_text("earlier")


# (name, command line with {root} for the case's folder, text the one line must contain)
CASES = [
    (
        "wikipedia: glob matches nothing",
        "pipelines wikipedia --input {root}/none-*.bz2 --output {root}/o",
        "none-*",
    ),
    (
        "wikipedia: --num-shards 0",
        "pipelines wikipedia --input {root}/vocab.txt --output {root}/o --num-shards 0",
        "--num-shards",
    ),
    ("books: missing file", "pipelines books --input {root}/missing.txt --output {root}/o", "missing.txt"),
    (
        "books: --min-document-words -1",
        "pipelines books --input {root}/vocab.txt --output {root}/o --min-document-words -1",
        "--min-document-words",
    ),
    (
        "corpus: input without COMPLETED",
        "pipelines corpus --input {root}/incomplete --output {root}/o",
        "COMPLETED",
    ),
    (
        "corpus: --test-fraction 2",
        "pipelines corpus --input {root}/incomplete --output {root}/o --test-fraction 2",
        "--test-fraction",
    ),
    (
        "examples: corpus without COMPLETED",
        "pipelines examples --corpus {root}/incomplete --vocab {root}/vocab.txt --output {root}/o",
        "COMPLETED",
    ),
    (
        "examples: missing vocabulary",
        "pipelines examples --corpus {root}/incomplete --vocab {root}/nope.txt --output {root}/o",
        "nope.txt",
    ),
    (
        "examples: --dupe-factor 0",
        "pipelines examples --corpus {root}/incomplete --vocab {root}/vocab.txt --output {root}/o --dupe-factor 0",
        "--dupe-factor",
    ),
    ("show: folder without COMPLETED", "pipelines show {root}/incomplete", "COMPLETED"),
    ("show: missing folder", "pipelines show {root}/nowhere", "nowhere"),
    (
        "wordpiece train: corpus without COMPLETED",
        "wordpiece train --corpus {root}/incomplete --output {root}/o",
        "COMPLETED",
    ),
    (
        "wordpiece train: --vocab-size 0",
        "wordpiece train --corpus {root}/incomplete --output {root}/o --vocab-size 0",
        "--vocab-size",
    ),
    ("wordpiece encode: missing vocabulary", "wordpiece encode --vocab {root}/nope.txt", "nope.txt"),
    (
        "evaluate squad: missing data file",
        "finetune evaluate squad --version 1.1 --data-file {root}/nope.json --predictions {root}/preds.json",
        "nope.json",
    ),
    (
        "evaluate squad: predictions not JSON",
        "finetune evaluate squad --version 1.1 --data-file {root}/dev.json --predictions {root}/not-json.json",
        "not-json.json",
    ),
    (
        "evaluate squad: no questions",
        "finetune evaluate squad --version 2.0 --data-file {root}/dev.json --predictions {root}/preds.json",
        "dev.json",
    ),
    ("text: glob matches nothing", "pipelines text --input {root}/none-*.txt --output {root}/o", "none-*"),
    (
        "features: missing checkpoint",
        "finetune features --checkpoint {root}/nowhere --input {root}/vocab.txt --output {root}/f",
        "nowhere",
    ),
    (
        "features: missing input",
        "finetune features --checkpoint {root}/nowhere --input {root}/missing.txt --output {root}/f",
        "missing.txt",
    ),
    (
        "report: run folder without metrics.json",
        "finetune report {root}/nowhere --output {root}/r",
        "nowhere",
    ),
    ("report: metrics.json not JSON", "finetune report {root}/run --output {root}/r", "metrics.json"),
    (
        "report: an earlier report at --output",
        "finetune report {root}/run --output {root}/report",
        "--overwrite",
    ),
    ("pretrain params: heads do not divide hidden", "pretrain params --config 3/100/7", "3/100/7"),
    ("pretrain params: unknown size", "pretrain params --config huge", "huge"),
    (
        "evaluate squad: null odds with v1.1",
        "finetune evaluate squad --version 1.1 --data-file {root}/dev.json --predictions {root}/preds.json --null-odds {root}/preds.json",
        "null odds",
    ),
]


@pytest.mark.parametrize(("name", "command", "names"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_is_one_line_without_traceback(name, command, names, tmp_path):
    _prepare(tmp_path)
    program, *args = command.format(root=tmp_path).split()
    result = CliRunner().invoke(MAINS[program], args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code in (1, 2), (name, result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        name,
        repr(result.exception),
    )
    assert "Traceback" not in result.output
    assert len(lines) == 1, (name, result.output)
    assert names in lines[0], (name, lines[0])
