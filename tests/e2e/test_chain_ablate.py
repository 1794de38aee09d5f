"""The ablation study end to end on the enwiki corpus and CoNLL-2003: the GPU preset's grid (every row of
Tables 5-8 and Figure 5, bf16, its loaders) at tiny steps and widths on the CPU, without the GPU check,
writes every table with numbers; a rerun skips every finished stage. And `chain ablate --preset smoke`
as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from chain.ablate import PRESETS, AblationConfig, grid, stages
from chain.cli import run_study
from tests.conftest import SHARED_DATA, require

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TINY = dict(  # the GPU preset at tiny steps, widths and example counts (its grid, precision and feed kept)
    model="4/32/2",
    sizes=("2/32/2", "4/32/2", "6/32/2"),
    steps=2,
    batch_size=4,
    max_seq_length=64,
    dupe_factor=1,
    vocab_size=3000,
    finetune_seeds=1,
    ner_seeds=1,
    finetune_train_examples=16,
    finetune_eval_examples=16,
    ner_epochs=1,
    ner_max_seq_length=32,
    ner_train_examples=16,
    ner_eval_examples=16,
)


def test_the_gpu_presets_grid_at_tiny_steps_fills_every_table_and_reruns_nothing(corpus_output, tmp_path):
    preset = replace(PRESETS["gpu"], **TINY)
    ner = require(SHARED_DATA / "ner" / "conll2003")
    cfg = AblationConfig(str(tmp_path / "w"), preset, corpus=str(corpus_output), ner_dir=str(ner))
    g = grid(cfg)
    todo = stages(cfg, g)
    lines: list[str] = []
    run_study(cfg, g, todo, log=lines.append)
    folder = tmp_path / "w" / "ablations"
    done = {
        (r["table"], r["row"], r["column"]): r["summary"]
        for r in json.loads((folder / "results.json").read_text())
    }
    assert {table for table, _, _ in done} == {"5", "6", "7", "8", "fig5"}
    assert all(s["n"] == 1 and s["mean"] is not None for s in done.values()), done
    report = (folder / "report.md").read_text()
    assert (
        "| + BiLSTM |" in report
        and "| Feature-based: concat-last-4 |" in report
        and "| 6 | 32 | 2 |" in report
    )
    assert "not run" not in report.split("## Runs and their commands")[0]
    config = json.loads(
        (folder / "runs" / "base-s12345" / "checkpoints" / "step-00000002" / "config.json").read_text()
    )
    assert config["num_hidden_layers"] == 4
    assert any("--precision bf16 --save-steps" in line and "--num-workers 8" in line for line in lines)
    lines.clear()
    run_study(cfg, g, todo, log=lines.append)
    headers = [line for line in lines if line.startswith("== ")]
    assert len(headers) == len(todo) and all("complete, skipped" in line for line in headers)


def test_the_smoke_preset_as_a_user_runs_it(corpus_output, tmp_path):
    command = [sys.executable, "-m", "chain", "ablate", "--workdir", str(tmp_path / "w"), "--preset", "smoke"]
    command += ["--corpus", str(corpus_output), "--beam-option=--runner=FnApiRunner"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (tmp_path / "w" / "ablations" / "report.md").read_text()
    assert "| BERT_BASE | " in report and "no --ner-dir" in report
    assert (tmp_path / "w" / "ablations" / "figure5.png").read_bytes().startswith(b"\x89PNG")
    assert (
        "<h2>Table 5: pre-training tasks</h2>" in (tmp_path / "w" / "ablations" / "report.html").read_text()
    )
