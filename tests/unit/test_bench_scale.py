"""benchmarks/scale_corpus.py makes the same bytes for the same arguments, a multistream dump whose
index reads every page, books and the reference format; benchmarks/scale.py's ratios and tables."""

from __future__ import annotations

import bz2
import hashlib

import pytest

from benchmarks import scale
from benchmarks.scale_corpus import generate, mint, replace_words
from pipelines.wiki.dump import iter_pages, iter_range_pages, plan_stream_ranges, read_stream_offsets
from tests.conftest import ENWIKI_EXCERPT, GUTENBERG, require


def _digests(folder) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    require(ENWIKI_EXCERPT), require(GUTENBERG)
    folders = [tmp_path_factory.mktemp(f"made{i}") for i in range(2)]
    return folders, [generate(folder, 0.6, seed=3) for folder in folders]


def test_the_same_arguments_make_the_same_bytes(made):
    (first, second), (found, _) = made
    assert _digests(first) == _digests(second)
    assert sum(found["text_bytes"].values()) >= 0.6e6 and found["books"] >= 1 and found["redirects"] >= 1


def test_the_index_reads_every_page_of_the_dump_and_the_text_has_every_document(made):
    (folder, _), (found, _) = made
    dump = next((folder / "wiki").glob("*-multistream.xml.bz2"))
    index = next((folder / "wiki").glob("*-index.txt.bz2"))
    with open(index, "rb") as f:
        offsets = read_stream_offsets(f)
    with open(dump, "rb") as f:
        whole = [p.page_id for p in iter_pages(f)]
        ranges = plan_stream_ranges(offsets, dump.stat().st_size, 1)
        ranged = [p.page_id for start, end in ranges for p in iter_range_pages(f, start, end)]
    assert whole == ranged and len(whole) == found["pages"] and len(set(whole)) == len(whole)
    lines = bz2.decompress(index.read_bytes()).decode().splitlines()
    assert len({line.split(":", 2)[2] for line in lines}) == len(lines)  # every title differs
    text = "".join(p.read_text() for p in sorted((folder / "text").glob("*.txt")))
    assert text.count("\n\n") == found["documents"] and found["documents"] > found["books"]


def test_replacements_keep_case_and_minted_words_differ():
    assert replace_words(
        "Anna saw anna and ANNA, annals.", {"anna": "kubo", "Anna": "Kubo", "ANNA": "KUBO"}
    ) == ("Kubo saw kubo and KUBO, annals.")
    assert len({mint(i) for i in range(5000)}) == 5000


def test_ratios_compare_the_largest_with_the_smallest_and_the_middle():
    runs = [(20, 400, 10), (200, 420, 90), (2000, 500, 990)]
    sizes = [
        {"mb": mb, "stages": {"text": {"input_mb": mb, "peak_rss_mb": rss, "wall_s": s, "cpu_s": s}}}
        for mb, rss, s in runs
    ]
    found = scale.ratios(sizes)["text"]
    assert found == {"memory": 1.25, "wall_per_mb": 1.1, "cpu_per_mb": 1.1}
