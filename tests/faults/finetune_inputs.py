"""What the fault tests of ``finetune``'s inputs share: a folder per command holding good inputs
from ../shared/data (one of which a test then replaces with a bad one), the command line that
reads them, and a run that returns the error lines, the exit code and the seconds it took (a
hang is a failure after ``within_s``, not a stuck test)."""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path

from click.testing import CliRunner

from finetune.cli import main
from tests.conftest import SHARED_DATA, require

RTE = SHARED_DATA / "glue_format_samples" / "rte" / "dummy_data" / "RTE"
SWAG = SHARED_DATA / "swag" / "allennlp-models_test_fixtures_swag.csv"
SQUAD = SHARED_DATA / "squad" / "allennlp-models_test_fixtures_squad.json"
CONLL = SHARED_DATA / "ner" / "conll2003"
COMMANDS = (
    "glue train.tsv",
    "glue dev.tsv",
    "swag --train-file",
    "ner train.txt",
    "squad --train-file",
    "squad --predict-file",
    "evaluate squad --predictions",
    "report metrics.json",
    "features --input",
)
"""Every input of every ``finetune`` command that :func:`inputs` can make bad."""
QUICK = ["--epochs", "1", "--batch-size", "2", "--max-seq-length", "32", "--device", "cpu"]


def inputs(root: Path, bert: str) -> dict[str, tuple[list[str], Path]]:
    """Per command, its arguments over good inputs copied under ``root`` and the input a test
    makes bad (created anew by the test)."""
    for name in ("train.tsv", "dev.tsv"):
        (root / "rte").mkdir(exist_ok=True)
        shutil.copy(require(RTE / name), root / "rte" / name)
    (root / "conll").mkdir(exist_ok=True)
    for name in ("train.txt", "valid.txt"):
        lines = require(CONLL / name).read_text().splitlines()[:60]
        (root / "conll" / name).write_text("\n".join(lines) + "\n")
    shutil.copy(require(SWAG), root / "swag.csv")
    shutil.copy(require(SQUAD), root / "squad.json")
    (root / "predictions.json").write_text(json.dumps({"x": "y"}))
    (root / "run").mkdir(exist_ok=True)
    (root / "run" / "metrics.json").write_text(
        json.dumps({"task": "mrpc", "dev": {"f1": 0.8, "accuracy": 0.7}})
    )
    (root / "text.txt").write_text("the movie was good\n")
    out = ["--checkpoint", bert, "--output", str(root / "out")]
    squad = ["squad", "--version", "1.1", *out, *QUICK, "--max-query-length", "16"]
    return {
        "glue train.tsv": (
            ["glue", "--task", "rte", "--data-dir", str(root / "rte"), *out, *QUICK],
            root / "rte" / "train.tsv",
        ),
        "glue dev.tsv": (
            ["glue", "--task", "rte", "--data-dir", str(root / "rte"), *out, *QUICK],
            root / "rte" / "dev.tsv",
        ),
        "swag --train-file": (
            ["swag", "--train-file", str(root / "bad"), "--dev-file", str(root / "swag.csv"), *out, *QUICK],
            root / "bad",
        ),
        "ner train.txt": (
            ["ner", "--data-dir", str(root / "conll"), *out, *QUICK],
            root / "conll" / "train.txt",
        ),
        "squad --train-file": (
            [*squad, "--train-file", str(root / "bad"), "--predict-file", str(root / "squad.json")],
            root / "bad",
        ),
        "squad --predict-file": ([*squad, "--predict-file", str(root / "bad")], root / "bad"),
        "evaluate squad --predictions": (
            [
                "evaluate",
                "squad",
                "--version",
                "1.1",
                "--data-file",
                str(root / "squad.json"),
                "--predictions",
                str(root / "bad"),
            ],
            root / "bad",
        ),
        "report metrics.json": (
            ["report", str(root / "run"), "--output", str(root / "report")],
            root / "run" / "metrics.json",
        ),
        "features --input": (
            ["features", "--input", str(root / "bad"), *out, "--max-seq-length", "32", "--layers", "-1"],
            root / "bad",
        ),
    }


def _alarm(signum, frame):
    raise TimeoutError("the command did not end in time")


def invoke(args: list[str], within_s: float = 30.0) -> tuple[int, list[str], float]:
    """Run ``finetune ARGS`` in-process: the exit code, the ``error:`` lines, and the seconds."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(within_s))
    start = time.perf_counter()
    try:
        result = CliRunner().invoke(main, args, catch_exceptions=False)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    seconds = time.perf_counter() - start
    assert "Traceback" not in result.output, result.output
    return (
        result.exit_code,
        [line for line in result.output.splitlines() if line.startswith("error:")],
        seconds,
    )
