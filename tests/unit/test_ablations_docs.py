"""docs/ablations.md types no figure the code or a measurement does not back: its presets table is the
presets' own rendering, its H200 rate the one the GPU estimate uses (and the one measured), and the
quick study's time and tables are the committed report's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chain.ablate import H200_TOKENS_PER_S, PRESETS

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "ablations.md").read_text()


def _presets_table() -> str:
    lines = [
        "| preset | base (L/H/A) | steps x batch x tokens | Table 6 sizes | seeds: pre-train / fine-tune / NER "
        "| precision |",
        "|---|---|---|---|---|---|",
    ]
    for p in PRESETS.values():
        seeds = f"{p.pretrain_seeds} / {p.finetune_seeds} / {p.ner_seeds}"
        shape = f"{p.steps:,} x {p.batch_size} x {p.max_seq_length}"
        lines.append(f"| `{p.name}` | {p.model} | {shape} | {', '.join(p.sizes)} | {seeds} | {p.precision} |")
    return "\n".join(lines)


def test_the_presets_table_is_the_presets_own():
    table = re.search(r"<!-- presets -->\n(.*?)\n<!-- /presets -->", DOC, re.S).group(1)
    assert table == _presets_table()


def test_the_h200_rate_is_the_estimates_and_the_measured_one():
    assert f"{H200_TOKENS_PER_S:,} real tokens/s" in DOC
    gpu = ROOT.parent / "shared" / "GPU.md"
    if not gpu.exists():
        pytest.skip("../shared/GPU.md (the GPU runs' record) is not here")
    row = next(line for line in gpu.read_text().splitlines() if "`--batching padded`, batch 256" in line)
    assert f"| {H200_TOKENS_PER_S:,} |" in row
