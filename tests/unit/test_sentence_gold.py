"""The sentence-segmentation gold set is well formed, and the pipelines' segmenter still scores on it.

The gold passages are rebuilt from ``../shared/data`` (the project stores only their locators and
offsets, see docs/sentence-segmentation.md), so these tests skip where that folder is absent.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from pipelines.text import split_sentences

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCHMARK_SCRIPT = REPO_ROOT / "benchmarks" / "sentence_segmentation.py"

RESULTS = REPO_ROOT / "benchmarks" / "results" / "sentence_segmentation.json"
MEASURED_F1 = json.loads(RESULTS.read_text())["candidates"]["project"]["scores"]["all"]["f1"]
"""Boundary F1 of ``pipelines.text.split_sentences`` on the gold, as the benchmark measured it."""
F1_MARGIN = 0.02
MIN_SENTENCES = 300


def _load_benchmark() -> ModuleType:
    """Import benchmarks/sentence_segmentation.py (a script, not a package) as a module."""
    spec = importlib.util.spec_from_file_location("sentence_segmentation_benchmark", BENCHMARK_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


bench = _load_benchmark()

pytestmark = pytest.mark.skipif(
    not bench.DATA_DIR.is_dir(),
    reason=f"shared data folder {bench.DATA_DIR} is absent; the gold passages are rebuilt from it",
)


@pytest.fixture(scope="module")
def passages() -> list:
    """Rebuild the gold passages once for the module."""
    return bench.load_gold()


def test_gold_has_enough_sentences_from_every_source(passages: list) -> None:
    """At least 300 gold sentences, from the BERT sample, the books and Wikipedia."""
    counts: dict[str, int] = {}
    for passage in passages:
        counts[passage.source] = counts.get(passage.source, 0) + len(passage.sentence_starts)
    assert sum(counts.values()) >= MIN_SENTENCES
    assert set(counts) == {"bert-sample", "books", "wiki"}


def test_gold_offsets_are_valid(passages: list) -> None:
    """Offsets start at 0, increase, and each is a non-space character right after a space."""
    for passage in passages:
        where = f"{passage.file}:{passage.start_line}-{passage.end_line}"
        text, starts = passage.text, passage.sentence_starts
        assert text and text == text.strip(), where
        assert starts and starts[0] == 0, where
        assert all(a < b for a, b in itertools.pairwise(starts)), f"{where}: offsets not increasing"
        for offset in starts:
            assert 0 <= offset < len(text), f"{where}: offset {offset} out of range"
            assert not text[offset].isspace(), f"{where}: offset {offset} is a space"
            assert offset == 0 or text[offset - 1] == " ", f"{where}: offset {offset} not after a space"
        assert all(passage.sentences), where


def test_pipeline_segmenter_keeps_its_measured_f1(passages: list) -> None:
    """``split_sentences`` scores at least the recorded boundary F1 minus a small margin."""
    scores = bench.evaluate(split_sentences, passages)["all"]
    assert scores["f1"] >= MEASURED_F1 - F1_MARGIN, (
        f"split_sentences boundary F1 fell to {scores['f1']:.3f} "
        f"(precision {scores['precision']:.3f}, recall {scores['recall']:.3f}); measured {MEASURED_F1:.3f} in {RESULTS}"
    )
