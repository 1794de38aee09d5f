"""The whole chain (`python -m chain`) with its work folder on a bucket (the local GCS emulator):
every stage runs, the report is written, and a rerun skips every complete stage."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ENWIKI_EXCERPT, GUTENBERG, require

pytestmark = [pytest.mark.slow, pytest.mark.emulator]
ROOT = Path(__file__).resolve().parents[2]


def _chapters(folder: Path) -> Path:
    """A real novel's chapters as JSON Lines (title, text): a corpus for `pipelines documents`."""
    book = sorted(require(GUTENBERG).glob("*.txt"))[2].read_text(encoding="utf-8-sig")
    chapters = re.split(r"\n\s*CHAPTER [IVXL]+\.", book)[1:]
    path = folder / "chapters.jsonl"
    path.write_text(
        "".join(json.dumps({"title": f"Chapter {i}", "text": c}) + "\n" for i, c in enumerate(chapters))
    )
    return path


def _chain(workdir: str, documents: Path) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "chain",
        "--workdir",
        workdir,
        "--wiki-dump",
        str(require(ENWIKI_EXCERPT)),
        "--documents",
        str(documents),
        "--documents-option=--title-field=title",
    ]
    command += (
        "--vocab-size 3000 --pretrain-steps 6 --finetune-epochs 1 --beam-option=--runner=FnApiRunner".split()
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_the_whole_chain_on_a_bucket_and_its_resume(gcs_emulator, tmp_path):
    import fsspec

    documents = _chapters(tmp_path)
    first = _chain("gs://bert-bucket/demo", documents)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    fs = fsspec.filesystem("gs")
    fs.invalidate_cache()
    names = set(fs.find("bert-bucket/demo"))
    expected = "corpus/documents/COMPLETED corpus/all/COMPLETED vocab/vocab.txt shards/seq128/COMPLETED shards/seq128-validation/COMPLETED"
    expected += (
        " runs/tiny/checkpoints/step-00000006/COMMITTED hf/tiny/model.safetensors tasks/next-sentence/dev.tsv"
    )
    expected += (
        " finetune/next-sentence/metrics.json report/report.md report/report.html report/sentence_lengths.png"
    )
    for name in f"{expected} report/curves.png report/length_histogram.png chain.json".split():
        assert f"bert-bucket/demo/{name}" in names, name
    report = fs.cat_file("bert-bucket/demo/report/report.md").decode()
    for heading in (
        "## Data card",
        "## Vocabulary",
        "## Pre-training examples",
        "## Pre-training",
        "## Fine-tuning",
    ):
        assert heading in report
    assert "Time and peak memory per stage" in report
    assert re.search(r"Steps \d+ → 6, \d{1,3}(,\d{3})* tokens seen\.", report), report
    state = json.loads(fs.cat_file("bert-bucket/demo/chain.json"))
    assert all(
        state[name]["seconds"] > 0
        for name in ("wikipedia", "documents", "corpus", "vocab", "pretrain", "finetune")
    )

    again = _chain("gs://bert-bucket/demo", documents)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    headers = [
        line for line in again.stdout.splitlines() if line.startswith("== ") and "/" in line.split()[1]
    ]
    assert headers and all("complete, skipped" in line for line in headers), again.stdout
