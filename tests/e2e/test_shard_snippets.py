"""The ```python blocks of docs/shards.md run, each in a fresh interpreter, on real shards
(`pipelines examples` over the Wikipedia excerpt, seq 64). Blocks that do not import this
project's packages must not load them indirectly either: they are the third-party recipes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.examples import examples_format

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[2] / "docs" / "shards.md"
OUR_PACKAGES = ("pipelines", "pretrain", "finetune", "schemas", "wordpiece", "chain")
SHARDS_LINE = re.compile(r"^SHARDS = .*$", re.MULTILINE)

_CHECK_NOT_OURS = f"""
import sys as _sys
_ours = sorted(m for m in _sys.modules if m.split(".")[0] in {OUR_PACKAGES!r})
if _ours:
    raise SystemExit(f"this snippet should not need the project's code, but loaded {{_ours}}")
"""


def python_blocks(markdown: str) -> list[tuple[str, str]]:
    """``(heading, code)`` of every ```python block, with the nearest ``##`` heading above it."""
    blocks, heading = [], ""
    for match in re.finditer(r"^## ([^\n]+)$|^```python\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL):
        if match.group(1):
            heading = match.group(1).strip()
        else:
            blocks.append((heading, match.group(2)))
    return blocks


BLOCKS = python_blocks(DOC.read_text(encoding="utf-8"))


def run_block(code: str, shards: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    program = SHARDS_LINE.sub(f"SHARDS = {str(shards)!r}", code)
    if not any(re.search(rf"^(from|import) {p}\b", code, re.MULTILINE) for p in OUR_PACKAGES):
        program += _CHECK_NOT_OURS
    hf = tmp_path / "hf"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(hf), "HF_DATASETS_CACHE": str(hf / "datasets")}
    return subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_page_has_its_three_recipes():
    headings = [heading for heading, _ in BLOCKS]
    assert headings == [
        "Reading with plain pyarrow",
        "Training with transformers and datasets alone",
        "Reading with this project's reader",
    ]
    for heading, code in BLOCKS:
        assert len(SHARDS_LINE.findall(code)) == 1, f"{heading}: needs exactly one 'SHARDS = ...' line"


def test_the_column_table_lists_every_column_of_the_schema():
    section = DOC.read_text(encoding="utf-8").split("## Columns", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE)
    assert documented == [f.name for f in examples_format(30522).fields]


def test_every_params_key_of_a_real_manifest_is_in_the_table(shards):
    import json

    section = DOC.read_text(encoding="utf-8").split("## `manifest.json`", 1)[1].split("\n## ", 1)[0]
    manifest = json.loads((shards / "manifest.json").read_text())
    named = set(re.findall(r"\w+", " ".join(re.findall(r"`([^`]+)`", section))))
    missing = [k for k in [*manifest, *manifest["params"], *manifest["params"]["pairs"]] if k not in named]
    assert not missing, f"manifest keys the page does not name: {missing}"


READING = [block for block in BLOCKS if "Training" not in block[0]]


@pytest.mark.parametrize("heading, code", READING, ids=[heading for heading, _ in READING])
def test_a_reading_recipe_runs_on_real_shards(heading, code, shards, tmp_path):
    result = run_block(code, shards, tmp_path)
    assert result.returncode == 0, f"{heading}:\n{result.stdout}\n{result.stderr}"


def test_a_tiny_bert_trains_from_the_page_alone(shards, tmp_path):
    (code,) = [code for heading, code in BLOCKS if "Training" in heading]
    result = run_block(code, shards, tmp_path)
    assert result.returncode == 0, result.stderr
    ratio = float(re.search(r"\(([\d.]+)x\) in 150 steps", result.stdout).group(1))
    assert ratio < 0.85, result.stdout
