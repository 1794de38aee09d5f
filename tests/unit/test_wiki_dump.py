"""Tests for pipelines.wiki.dump on real (shortened) Wikipedia dumps and on damaged copies of them."""

from __future__ import annotations

import bz2
import gzip
import io
import itertools
import random
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest

from pipelines.wiki.dump import (
    RawPage,
    index_path_for,
    iter_pages,
    iter_range_pages,
    plan_stream_ranges,
    read_stream_offsets,
)
from schemas.rejects import Rejection
from tests.conftest import SHARED_DATA, require
from tests.multistream import build_multistream

DATA = SHARED_DATA / "wiki"
ENWIKI = DATA / "gensim_enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
BGWIKI = DATA / "gensim_bgwiki-latest-pages-articles-shortened.xml.bz2"


def _read(path: Path) -> list[RawPage]:
    with path.open("rb") as f:
        return list(iter_pages(f))


def _collect(pages: object) -> tuple[list[RawPage], Rejection]:
    """Consume an iterator that must end in a defect; return the pages before it and the defect."""
    *got, defect = list(pages)  # type: ignore[call-overload]
    assert isinstance(defect, Rejection) and "\n" not in defect.detail
    assert not any(isinstance(page, Rejection) for page in got)
    return got, defect


@pytest.fixture(scope="module")
def enwiki_pages() -> list[RawPage]:
    return _read(require(ENWIKI))


@pytest.fixture(scope="module")
def enwiki_xml() -> bytes:
    return bz2.decompress(require(ENWIKI).read_bytes())


@pytest.fixture(scope="module", params=[100, 7], ids=["100-per-stream", "7-per-stream"])
def multistream(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[int], int]:
    """A multistream copy of the enwiki excerpt: (dump path, stream offsets, pages per stream)."""
    out = tmp_path_factory.mktemp(f"multistream{request.param}")
    dump, index = build_multistream(require(ENWIKI), out, pages_per_stream=request.param)
    assert index_path_for(str(dump)) == str(index)
    with index.open("rb") as f:
        return dump, read_stream_offsets(f), request.param


def test_whole_dump(enwiki_pages: list[RawPage]) -> None:
    assert len(enwiki_pages) == 206
    redirects = [p for p in enwiki_pages if p.redirect_title is not None]
    assert len(redirects) == 100
    assert all(p.text.lstrip().upper().startswith("#REDIRECT") for p in redirects)
    # One redirect lives in the project namespace (4), everything else in the main one.
    assert Counter(p.ns for p in enwiki_pages) == {0: 205, 4: 1}
    ids = [p.page_id for p in enwiki_pages]
    assert ids == sorted(set(ids))
    assert all(p.revision_id and p.text and p.title for p in enwiki_pages)
    first = enwiki_pages[0]
    assert (first.title, first.ns, first.page_id, first.revision_id) == (
        "AccessibleComputing",
        0,
        10,
        631144794,
    )
    assert first.redirect_title == "Computer accessibility"


def test_multistream_ranges_match_whole_file(
    multistream: tuple[Path, list[int], int], enwiki_pages: list[RawPage]
) -> None:
    dump, offsets, per_stream = multistream
    assert _read(dump) == enwiki_pages
    assert len(offsets) == -(-len(enwiki_pages) // per_stream)
    size = dump.stat().st_size
    for streams_per_range in (1, 3):
        ranges = plan_stream_ranges(offsets, size, streams_per_range)
        assert ranges[0][0] == offsets[0] and ranges[-1][1] == size
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        with dump.open("rb") as f:
            pages = [page for start, end in ranges for page in iter_range_pages(f, start, end)]
        assert pages == enwiki_pages


def test_range_from_file_start_includes_header(
    multistream: tuple[Path, list[int], int], enwiki_pages: list[RawPage]
) -> None:
    dump, offsets, per_stream = multistream
    with dump.open("rb") as f:
        assert list(iter_range_pages(f, 0, offsets[1])) == enwiki_pages[:per_stream]
        assert list(iter_range_pages(f, 0, offsets[0])) == []  # the header stream alone


def test_plain_and_gzip_xml(tmp_path: Path, enwiki_xml: bytes, enwiki_pages: list[RawPage]) -> None:
    plain, gz = tmp_path / "dump.xml", tmp_path / "dump.xml.gz"
    plain.write_bytes(enwiki_xml)
    gz.write_bytes(gzip.compress(enwiki_xml, compresslevel=1))
    assert _read(plain) == enwiki_pages
    assert _read(gz) == enwiki_pages


def test_unseekable_stream_with_short_reads(enwiki_xml: bytes, enwiki_pages: list[RawPage]) -> None:
    class ReadOnly:
        def __init__(self, raw: bytes) -> None:
            self._buffer = io.BytesIO(raw)

        def read(self, size: int = -1) -> bytes:
            return self._buffer.read(min(size, 1001))

    assert list(iter_pages(ReadOnly(enwiki_xml))) == enwiki_pages  # type: ignore[arg-type]
    end = 0
    for _ in range(20):
        end = enwiki_xml.index(b"</page>", end) + len(b"</page>")
    first_20 = bz2.compress(enwiki_xml[:end] + b"\n</mediawiki>\n", compresslevel=1)
    assert list(iter_pages(ReadOnly(first_20))) == enwiki_pages[:20]  # type: ignore[arg-type]


def test_utf16_dump() -> None:
    pages = _read(require(BGWIKI))
    assert len(pages) == 3
    assert [p.ns for p in pages] == [0, 4, 4]
    assert all(p.title and p.text and p.revision_id for p in pages)


def test_truncated_bz2(enwiki_xml: bytes) -> None:
    raw = require(ENWIKI).read_bytes()
    pages, error = _collect(iter_pages(io.BytesIO(raw[: len(raw) // 2])))
    assert 0 < len(pages) < 206
    assert error.reason == "truncated_input"
    assert f"after {len(pages)} pages" in error.detail


def test_truncated_plain_xml(enwiki_xml: bytes) -> None:
    pages, error = _collect(iter_pages(io.BytesIO(enwiki_xml[: len(enwiki_xml) // 2])))
    assert 0 < len(pages) < 206 and error.reason == "truncated_input"


def test_malformed_xml(enwiki_xml: bytes, enwiki_pages: list[RawPage]) -> None:
    cut = enwiki_xml.index(b"</title>", len(enwiki_xml) // 2)
    broken = enwiki_xml[:cut] + enwiki_xml[cut + len(b"</title>") :]
    pages, error = _collect(iter_pages(io.BytesIO(broken)))
    assert pages == enwiki_pages[: len(pages)] and 0 < len(pages) < 206
    assert error.reason == "malformed_xml"
    # The parser notices at the first closing tag after the cut, within the same page.
    first_line = broken[:cut].count(b"\n") + 1
    last_line = broken[: broken.index(b"</page>", cut)].count(b"\n") + 1
    line = int(error.detail.split(" at line ")[1].split(",")[0])
    assert first_line <= line <= last_line


@pytest.mark.parametrize(
    "data",
    [
        random.Random(0).randbytes(4096),
        b"BZh9" + random.Random(1).randbytes(4096),
        b"\x1f\x8b" + random.Random(2).randbytes(4096),
        b"",
        b"<html><body>not a dump</body></html>",
        bz2.compress(b"just some text, not XML at all\n" * 100),
    ],
    ids=["random", "bz2-magic-then-random", "gzip-magic-then-random", "empty", "other-xml", "bz2-of-text"],
)
def test_not_a_dump(data: bytes) -> None:
    pages, error = _collect(iter_pages(io.BytesIO(data)))
    assert pages == [] and error.reason == "not_a_dump"


def test_truncated_and_misaligned_ranges(
    multistream: tuple[Path, list[int], int], enwiki_pages: list[RawPage]
) -> None:
    dump, offsets, _ = multistream
    start, end = plan_stream_ranges(offsets, dump.stat().st_size, 3)[0]
    with dump.open("rb") as f:
        pages, error = _collect(iter_range_pages(f, start, (start + end) // 2))
        assert error.reason == "truncated_input" and pages == enwiki_pages[: len(pages)]
        _, error = _collect(iter_range_pages(f, start + 1, end))
        assert error.reason == "not_a_dump"
        assert list(iter_range_pages(f, start, start)) == []
        with pytest.raises(ValueError):
            list(iter_range_pages(f, end, start))


def test_corrupt_compressed_data(enwiki_xml: bytes, enwiki_pages: list[RawPage]) -> None:
    damaged_crc = bytearray(gzip.compress(enwiki_xml, compresslevel=1))
    damaged_crc[-8] ^= 0xFF  # the member's CRC-32: all inflates, the check at the end fails
    pages, error = _collect(iter_pages(io.BytesIO(bytes(damaged_crc))))
    # gzip checks the CRC before handing out the last chunk, so the last page(s) never arrive.
    assert 150 < len(pages) < 206 and pages == enwiki_pages[: len(pages)]
    assert error.reason == "corrupt_input"
    # bz2 hands out a block's data before checking its CRC, so damage inside a block usually
    # reaches the XML parser first.
    raw = require(ENWIKI).read_bytes()
    middle = len(raw) // 2
    flipped = raw[:middle] + bytes(b ^ 0xFF for b in raw[middle : middle + 16]) + raw[middle + 16 :]
    pages, error = _collect(iter_pages(io.BytesIO(flipped)))
    assert 0 < len(pages) < 206 and error.reason in {"corrupt_input", "malformed_xml"}


def test_bounded_memory(enwiki_xml: bytes, enwiki_pages: list[RawPage]) -> None:
    largest = max(len(p.text.encode("utf-8")) for p in enwiki_pages)
    source = io.BytesIO(enwiki_xml)  # allocated before tracing starts, so not counted
    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_pages(source))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 206
    # About 1.3 MB against 6.1 MB of XML: the peak is set by the largest page (180 kB of text),
    # which ElementTree holds as one small string per line until </text>, then joins.
    assert peak < 0.25 * len(enwiki_xml), f"peak {peak} bytes for {len(enwiki_xml)} bytes of XML"
    assert peak < 10 * largest + 512 * 1024, f"peak {peak} bytes, largest page text {largest} bytes"


def test_memory_does_not_grow_with_page_count() -> None:
    def synthetic(pages: int) -> io.BytesIO:
        page = (
            "<page><title>Page {i}</title><ns>0</ns><id>{i}</id><revision><id>{i}</id>"
            "<text>" + "lorem ipsum " * 10 + "</text></revision></page>\n"
        )
        body = "".join(page.format(i=i) for i in range(1, pages + 1))
        return io.BytesIO(f'<mediawiki xmlns="urn:x">\n{body}</mediawiki>\n'.encode())

    peaks = []
    for pages in (1_000, 10_000):
        source = synthetic(pages)
        tracemalloc.start()
        try:
            assert sum(1 for _ in iter_pages(source)) == pages
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[1] < 1.5 * peaks[0] + 64 * 1024, peaks


@pytest.mark.parametrize(
    ("dump", "index"),
    [
        (
            "/dumps/enwiki-20261101-pages-articles-multistream.xml.bz2",
            "/dumps/enwiki-20261101-pages-articles-multistream-index.txt.bz2",
        ),
        (
            "enwiki-20261101-pages-articles-multistream1.xml-p1p41242.bz2",
            "enwiki-20261101-pages-articles-multistream-index1.txt-p1p41242.bz2",
        ),
        (
            "gs://bucket/wiki/enwiki-20261101-pages-articles-multistream27.xml-p68475910p69975909.bz2",
            "gs://bucket/wiki/enwiki-20261101-pages-articles-multistream-index27.txt-p68475910p69975909.bz2",
        ),
    ],
)
def test_index_path_for(dump: str, index: str) -> None:
    assert index_path_for(dump) == index


def test_index_path_for_is_none_for_other_names() -> None:
    assert index_path_for("gs://bucket/enwiki-20261101-pages-articles.xml.bz2") is None


def test_read_stream_offsets_plain_and_bz2() -> None:
    lines = b"600:12:Alpha\n600:13:Beta: a title: with colons\n1200:14:Gamma\n\n50000:15:Delta\n"
    assert read_stream_offsets(io.BytesIO(lines)) == [600, 1200, 50000]
    assert read_stream_offsets(io.BytesIO(bz2.compress(lines))) == [600, 1200, 50000]
    assert read_stream_offsets(io.BytesIO(b"600:12:Alpha\nnot an index line\n")) == Rejection(
        "malformed_index", "index line 2 does not start with OFFSET:"
    )
    assert read_stream_offsets(io.BytesIO(bz2.compress(lines * 50)[:-20])).reason == "truncated_input"


def test_plan_stream_ranges() -> None:
    offsets = [50, 10, 30, 20, 40, 30]
    assert plan_stream_ranges(offsets, 60, 2) == [(10, 30), (30, 50), (50, 60)]
    assert plan_stream_ranges(offsets, 60, 1) == [(10, 20), (20, 30), (30, 40), (40, 50), (50, 60)]
    assert plan_stream_ranges(offsets, 60, 99) == [(10, 60)]
    assert plan_stream_ranges([], 60, 3) == []
    with pytest.raises(ValueError):
        plan_stream_ranges(offsets, 60, 0)
    with pytest.raises(ValueError):
        plan_stream_ranges(offsets, 50, 1)
