"""`python -m chain ablate --preset smoke` end to end on the enwiki corpus: every stage runs, the
report has every table with real numbers, and a rerun skips every finished run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _ablate(workdir: Path, corpus: Path) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "chain", "ablate", "--workdir", str(workdir), "--preset", "smoke",
        "--corpus", str(corpus), "--beam-option=--runner=FnApiRunner",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_the_smoke_study_writes_every_table_and_reruns_nothing(corpus_output, tmp_path):
    first = _ablate(tmp_path / "w", corpus_output)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    folder = tmp_path / "w" / "ablations"
    report = (folder / "report.md").read_text()
    for heading in ("Table 5", "Table 6", "Table 7", "Table 8", "Figure 5", "Runs and their commands"):
        assert f"## {heading}" in report
    results = json.loads((folder / "results.json").read_text())
    done = {(r["table"], r["row"], r["column"]): r["summary"] for r in results}
    for key in (("5", "BERT_BASE", "task"), ("5", "No NSP", "task"), ("6", "1/64/2", "ppl"),
                ("8", "80% / 10% / 10%", "task"), ("fig5", "base-s12345", "10")):  # fmt: skip
        assert done[key]["n"] == 1 and done[key]["mean"] > 0, key
    assert 0 <= done[("5", "No NSP", "task")]["mean"] <= 100
    assert "every row: no --ner-dir" in report  # Table 7 says why it is empty
    assert (folder / "figure5.png").read_bytes().startswith(b"\x89PNG")
    assert "<h2>Table 5: pre-training tasks</h2>" in (folder / "report.html").read_text()
    nonsp = (folder / "runs" / "no-nsp-s12345" / "checkpoints" / "step-00000010" / "config.json").read_text()
    assert json.loads(nonsp).get("nsp") is False

    again = _ablate(tmp_path / "w", corpus_output)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    headers = [line for line in again.stdout.splitlines() if line.startswith("== ")]
    assert headers and all("complete, skipped" in line for line in headers), again.stdout
