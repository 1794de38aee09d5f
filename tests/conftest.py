"""Shared fixtures: where the real third-party data lives, and small helpers."""

from __future__ import annotations

from pathlib import Path

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
