"""The ```python blocks of docs/shards.md run, each in a fresh interpreter, on a real shard folder.

The folder is written in code with the examples schema (no Beam): three shards of random but
well-formed examples, ``manifest.json``, ``stats.json`` and ``COMPLETED`` as ``pipelines
examples`` lays them out. Each block's ``SHARDS = ...`` line is pointed at it. Blocks that do not
import this project's packages must also not load them indirectly: they are the "without our
code" recipes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from schemas import COMPLETED_FILE, MANIFEST_FILE, STATS_FILE, Manifest, ShardEntry, completed_marker
from schemas.examples import EXAMPLES_VERSION, examples_format
from schemas.index import INDEX_FILE, ShardIndex, index_reference, shard_index_entry

DOC = Path(__file__).resolve().parents[2] / "docs" / "shards.md"
OUR_PACKAGES = ("pipelines", "pretrain", "finetune", "schemas", "wordpiece")
VOCAB_SIZE = 30522
CLS_ID, SEP_ID, MASK_ID = 101, 102, 103
SHARD_ROWS = (400, 410, 390)  # 1,200 examples: enough for two reader streams at batch 32
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


def _example(rng: np.random.Generator, uid: int) -> dict:
    """``[CLS] A [SEP] B [SEP]`` with reference-like lengths and 15% of the tokens masked."""
    num_tokens = 128 if rng.random() < 0.9 else int(rng.integers(8, 128))
    len_a = int(rng.integers(1, num_tokens - 4))
    len_b = num_tokens - 3 - len_a
    a, b = rng.integers(999, VOCAB_SIZE, len_a), rng.integers(999, VOCAB_SIZE, len_b)
    ids = np.concatenate([[CLS_ID], a, [SEP_ID], b, [SEP_ID]]).astype(np.int64)
    candidates = np.array([i for i in range(num_tokens) if ids[i] not in (CLS_ID, SEP_ID)])
    count = min(20, max(1, round(0.15 * num_tokens)))
    positions = np.sort(rng.choice(candidates, count, replace=False))
    originals = ids[positions].copy()
    ids[positions] = MASK_ID
    return {
        "input_ids": ids.tolist(),
        "masked_lm_positions": positions.tolist(),
        "masked_lm_ids": originals.tolist(),
        "next_sentence_labels": int(rng.random() < 0.5),
        "num_tokens_a": len_a + 2,
        "num_tokens": num_tokens,
        "doc_id": hashlib.sha256(str(uid // 7).encode()).hexdigest()[:32],
        "dupe_index": uid % 5,
    }


def write_examples_folder(root: Path, seed: int = 0) -> int:
    """A completed examples output at ``root``, written with the real schema; returns its rows."""
    fmt = examples_format(VOCAB_SIZE)
    rng = np.random.default_rng(seed)
    (root / "examples").mkdir(parents=True)
    entries, indexed, uid = [], [], 0
    for index, num_rows in enumerate(SHARD_ROWS):
        rows = [_example(rng, uid + k) for k in range(num_rows)]
        uid += num_rows
        path = f"examples/part-{index:05d}-of-{len(SHARD_ROWS):05d}.arrow"
        blob = fmt.to_ipc_bytes(fmt.to_table(rows, path), path)
        (root / path).write_bytes(blob)
        entries.append(
            ShardEntry(path, "examples", "examples", num_rows, len(blob), hashlib.sha256(blob).hexdigest())
        )
        indexed.append(shard_index_entry(path, blob)[0])
    params = {"pairs": {"max_seq_length": 128}, "seed": seed, "vocab_sha256": "0" * 64}
    index_json = ShardIndex("examples", EXAMPLES_VERSION, fmt.schema, tuple(indexed)).to_json()
    (root / INDEX_FILE).write_text(index_json)
    manifest = Manifest(
        "examples", EXAMPLES_VERSION, "test", params, tuple(entries), index=index_reference(index_json)
    ).to_json()
    (root / STATS_FILE).write_text(json.dumps({"examples": uid}) + "\n")
    (root / MANIFEST_FILE).write_text(manifest)
    (root / COMPLETED_FILE).write_text(completed_marker(manifest))
    return uid


@pytest.fixture(scope="module")
def shard_folder(tmp_path_factory) -> tuple[Path, int]:
    root = tmp_path_factory.mktemp("shards") / "seq128"
    return root, write_examples_folder(root)


def test_the_page_has_the_four_recipes():
    headings = [heading for heading, _ in BLOCKS]
    assert len(BLOCKS) == 4, headings
    for heading, code in BLOCKS:
        assert len(SHARDS_LINE.findall(code)) == 1, f"{heading}: needs exactly one 'SHARDS = ...' line"


def test_the_column_table_lists_every_column_of_the_schema():
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Columns", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE)
    assert documented == [f.name for f in examples_format(VOCAB_SIZE).fields]


@pytest.mark.parametrize("heading, code", BLOCKS, ids=[h for h, _ in BLOCKS])
def test_snippet_runs_on_a_real_shard_folder(heading, code, shard_folder, tmp_path):
    root, num_examples = shard_folder
    program = SHARDS_LINE.sub(f"SHARDS = {str(root)!r}", code)
    uses_ours = any(re.search(rf"^(from|import) {p}\b", code, re.MULTILINE) for p in OUR_PACKAGES)
    if not uses_ours:
        program += _CHECK_NOT_OURS
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets"),
    }
    result = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{heading}:\n{result.stdout}\n{result.stderr}"
    if not uses_ours:  # the plain recipes read every example and say how many
        assert str(num_examples) in result.stdout, result.stdout
