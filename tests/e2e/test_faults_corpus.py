"""Fault test: a corpus with a few hundred corrupted pages and binary files among the books.

The inputs are made here from real data: the enwiki excerpt's 206 pages plus 308 damaged copies
of its articles (new ids and titles; the XML stays well-formed), two more dump files damaged as
files (a truncated bz2, a raw invalid UTF-8 byte), and the Gutenberg novels among binary,
empty and broken files. Then the whole chain runs: `pipelines wikipedia`, `pipelines books`,
`pipelines corpus`, `wordpiece train`, `pipelines examples`. Every command finishes with a
complete output (the wikipedia stage with --allow-file-errors, which accepts its file errors); every
injected fault maps to its reject reason, its drop reason or, for damage the cleaner absorbs, a
document of clean prose; and the counts of every `stats.json` reconcile.
"""

from __future__ import annotations

import bz2
import gzip
import json
import random
import re
import shutil
import zipfile
from collections import Counter
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import pyarrow.dataset as ds
import pytest

from pipelines.wiki.dump import RawPage, iter_pages
from pipelines.wiki.pipeline import page_outcome
from pipelines.wiki.wikitext import _renderer
from tests.conftest import ENWIKI_EXCERPT, GUTENBERG, require
from tests.e2e.conftest import FAST_RUNNER, read_output, read_rejects, run_cli, run_wordpiece
from tests.multistream import _split_dump

pytestmark = pytest.mark.slow

FIRST_DAMAGED_ID = 1_000_000
COPIES_PER_KIND = 22
MIN_WORDS = 8  # `pipelines wikipedia`'s default --min-document-words
MARKUP = ("{{", "}}", "[[", "]]", "<ref", "{|", "|}", "&nbsp;", "thumb|", "Category:", "File:")
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")

# What each kind of damaged page must become: ("rejected" | "dropped", reason), or "document"
# for damage the cleaner absorbs (the page keeps its prose, and no markup or control character).
PAGE_FAULTS: dict[str, tuple[str, str] | str] = {
    "truncated_in_template": "document",
    "truncated_in_link": "document",
    "unbalanced_braces": "document",
    "unbalanced_brackets": "document",
    "stray_control_characters": "document",
    "apostrophe_run": "document",
    "binary_text": ("rejected", "binary"),
    "invalid_utf8_replaced": ("rejected", "undecodable"),
    "empty_text": ("dropped", "empty_after_cleaning"),
    "whitespace_text": ("dropped", "empty_after_cleaning"),
    "markup_only": ("dropped", "empty_after_cleaning"),
    "redirect": ("dropped", "redirect"),
    "talk_namespace": ("dropped", "not_article_namespace"),
    "template_namespace": ("dropped", "not_article_namespace"),
}

# What each file put among the books must become.
BOOK_FAULTS: dict[str, tuple[str, str] | str] = {
    "random-bytes.txt": ("rejected", "binary"),
    "cover-png.txt": ("rejected", "binary"),
    "archive-zip.txt": ("rejected", "binary"),
    "program-elf.txt": ("rejected", "binary"),
    "book-gzip.txt": ("rejected", "binary"),
    "nul-bytes.txt": ("rejected", "binary"),
    "control-heavy.txt": ("rejected", "binary"),
    "empty.txt": ("rejected", "empty"),
    "blank-lines.txt": ("rejected", "empty"),
    "utf16-broken.txt": ("file_error", "undecodable"),  # a damaged input file, not a record
    "licence-only.txt": ("rejected", "empty"),  # "no prose paragraphs left after cleaning"
    "a-note.txt": ("dropped", "too_short"),
    "utf16-valid.txt": "document",
}


def _page_xml(page_id: int, title: str, text: str | None, ns: int = 0, redirect: str | None = None) -> str:
    """One well-formed ``<page>`` as a dump writes it; ``text=None`` writes an empty ``<text />``."""
    body = (
        '<text xml:space="preserve" />'
        if text is None
        else f'<text xml:space="preserve">{escape(text)}</text>'
    )
    redirect_xml = f"    <redirect title={quoteattr(redirect)} />\n" if redirect is not None else ""
    return (
        f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{ns}</ns>\n    <id>{page_id}</id>\n"
        f"{redirect_xml}    <revision>\n      <id>{page_id + 1}</id>\n      {body}\n    </revision>\n  </page>\n"
    )


def _xml_chars(text: str) -> str:
    """Only the characters XML 1.0 allows (tab, newline, carriage return, U+0020 and up)."""
    return "".join(c for c in text if c in "\t\n\r" or ord(c) >= 0x20)


def _cut_inside(text: str, opener: str, rng: random.Random) -> str:
    """The text cut a few characters after an ``opener`` in its second half (mid-template, mid-link)."""
    positions = [m.start() for m in re.finditer(re.escape(opener), text) if m.start() > len(text) // 2]
    return text[: rng.choice(positions) + len(opener) + rng.randrange(1, 12)]


_ONE_LINE_TEMPLATE = re.compile(r"\{\{([^{}|]+)(?:\|[^{}]*)?\}\}")
_BLOCK_START = re.compile(r"\{\{\s*(?:Infobox|Navbox|Taxobox)|\{\|", re.IGNORECASE)


def _markup_only(text: str) -> str:
    """The lines of a page's infoboxes, navboxes and tables, and its one-line templates without a renderer."""
    kept, depth = [], 0
    for line in text.split("\n"):
        if depth > 0 or _BLOCK_START.match(line):
            kept.append(line)
            depth += line.count("{{") - line.count("}}") + line.count("{|") - line.count("|}")
        elif (match := _ONE_LINE_TEMPLATE.fullmatch(line.strip())) and _renderer(match[1])[0] is None:
            kept.append(line)
    return "\n".join(kept)


def _damage(kind: str, page: RawPage, rng: random.Random) -> tuple[str | None, int, str | None]:
    """Return (text, namespace, redirect target) of a damaged copy of ``page``."""
    text = page.text
    if kind == "truncated_in_template":
        return _cut_inside(text, "{{", rng), 0, None
    if kind == "truncated_in_link":
        return _cut_inside(text, "[[", rng), 0, None
    if kind == "unbalanced_braces":
        closers = [m.start() for m in re.finditer("}}", text)]
        for at in sorted(rng.sample(closers, min(3, len(closers))), reverse=True):
            text = text[:at] + text[at + 2 :]
        at = text.index("\n\n", len(text) // 3)
        return text[:at] + "\n\n{{Stray template|" + text[at:], 0, None
    if kind == "unbalanced_brackets":
        closers = [m.start() for m in re.finditer(r"\]\]", text)]
        for at in sorted(rng.sample(closers, min(5, len(closers))), reverse=True):
            text = text[:at] + text[at + 2 :]
        return "[[" + text, 0, None
    if kind == "stray_control_characters":  # at most 1 in 300 characters: below the binary share
        return (
            "".join(c + (rng.choice("\x7f\x85\x9b") if i % 300 == 299 else "") for i, c in enumerate(text)),
            0,
            None,
        )
    if kind == "apostrophe_run":  # vandalism: must stay linear in wikitext.py
        at = text.index("\n\n", len(text) // 2)
        return text[:at] + "\n\n" + "'''" * 3000 + "x\n" + text[at:], 0, None
    if kind == "binary_text":  # a binary blob read as Latin-1, as far as XML allows it
        return _xml_chars(rng.randbytes(4000).decode("latin-1")), 0, None
    if kind == "invalid_utf8_replaced":  # every 40th byte damaged, then decoded with replacement
        data = bytearray(text.encode("utf-8"))
        for i in range(0, len(data), 40):
            data[i] = 0xFF
        return data.decode("utf-8", errors="replace"), 0, None
    if kind == "empty_text":
        return None, 0, None
    if kind == "whitespace_text":
        return " \n\n\t \n", 0, None
    if kind == "markup_only":  # only the page's infoboxes, tables and non-prose templates
        return _markup_only(text), 0, None
    if kind == "redirect":
        return f"#REDIRECT [[{page.title}]]", 0, page.title
    if kind == "talk_namespace":
        return text, 1, None
    if kind == "template_namespace":
        return text, 10, None
    raise AssertionError(kind)


@pytest.fixture(scope="module")
def wiki_inputs(tmp_path_factory) -> dict:
    """Three dump files (damaged pages; a truncated bz2; an invalid byte) and what was injected."""
    source = require(ENWIKI_EXCERPT)
    header, raw_pages, footer = _split_dump(bz2.decompress(source.read_bytes()).decode("utf-8"))
    with source.open("rb") as f:
        pages = list(iter_pages(f))
    baseline = {page.page_id: page_outcome(page, str(source), MIN_WORDS) for page in pages}
    # Sources for damaged copies: articles (documents of 300+ words) with templates and links late on.
    sources = [
        p
        for p in pages
        if baseline[p.page_id].kind == "document"
        and baseline[p.page_id].row["num_words"] >= 300
        and len(p.text) < 40_000  # shorter articles keep the test quick
        and all(o in p.text[len(p.text) // 2 :] for o in ("{{", "[[", "}}", "]]"))
        and "\n\n" in p.text[len(p.text) // 2 :]
    ]
    assert len(sources) >= 20
    rng = random.Random(7)
    injected: dict[int, tuple[str, int]] = {}  # damaged page id -> (kind, source page id)
    damaged_xml = []
    for k, kind in enumerate(PAGE_FAULTS):
        for j in range(COPIES_PER_KIND):
            page = sources[(k * COPIES_PER_KIND + j) % len(sources)]
            page_id = FIRST_DAMAGED_ID + 10 * len(injected)
            text, ns, redirect = _damage(kind, page, rng)
            prefix = {1: "Talk:", 10: "Template:"}.get(ns, "")
            title = f"{prefix}{page.title} (damaged {len(injected)})"
            damaged_xml.append(_page_xml(page_id, title, text, ns, redirect))
            injected[page_id] = (kind, page.page_id)
    folder = tmp_path_factory.mktemp("dumps")
    (folder / "enwiki-damaged-pages.xml.bz2").write_bytes(
        bz2.compress((header + "".join(raw_pages) + "".join(damaged_xml) + footer).encode("utf-8"))
    )
    # A file cut in its trailing portion (a download that stopped): the pages before the cut are kept.
    copies = [_page_xml(2_000_000 + 10 * i, f"{p.title} (copy)", p.text) for i, p in enumerate(sources[:30])]
    # 100 kB blocks, so that the blocks before the cut still decompress.
    whole = bz2.compress((header + "".join(copies) + footer).encode("utf-8"), compresslevel=1)
    (folder / "enwiki-truncated.xml.bz2").write_bytes(whole[: len(whole) * 3 // 4])
    # Raw invalid UTF-8 inside page 5 of a plain XML dump: malformed XML; pages 1-4 are kept.
    copies = [
        _page_xml(3_000_000 + 10 * i, f"{p.title} (copy b)", p.text).encode("utf-8")
        for i, p in enumerate(sources[:8])
    ]
    copies[4] = copies[4].replace(b"</title>", b"</title>\n    <!-- \xff\xfe -->", 1)
    (folder / "enwiki-invalid-byte.xml").write_bytes(
        header.encode("utf-8") + b"".join(copies) + footer.encode("utf-8")
    )
    return {"folder": folder, "baseline": baseline, "injected": injected, "num_pages": len(pages)}


def _real_books() -> list[Path]:
    """The three shortest novels (Alice among them): enough real text, and the test stays quick."""
    return sorted(sorted(require(GUTENBERG).glob("*.txt"), key=lambda p: p.stat().st_size)[:3])


def _licence_only(book: bytes) -> bytes:
    """A Gutenberg file with its header and licence but no text between them."""
    lines = book.split(b"\n")
    start = next(i for i, line in enumerate(lines) if b"*** START OF" in line)
    end = next(i for i, line in enumerate(lines) if b"*** END OF" in line)
    return b"\n".join(lines[: start + 1] + lines[end:])


@pytest.fixture(scope="module")
def books_folder(tmp_path_factory) -> Path:
    """The real novels, with binary, empty and broken files among them, all named ``.txt``."""
    books = _real_books()
    folder = tmp_path_factory.mktemp("books")
    for book in books:
        shutil.copy(book, folder / book.name)
    alice = next(b for b in books if b.name.startswith("Alice")).read_bytes()
    rng = random.Random(11)
    noise = rng.randbytes(1 << 16)
    archive = folder / "archive-zip.txt"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("alice.txt", alice)
    alice_utf16 = alice.decode("utf-8").encode("utf-16")  # with a BOM
    files = {
        "random-bytes.txt": noise,
        "cover-png.txt": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + noise[:8192],
        "program-elf.txt": b"\x7fELF\x02\x01\x01\x00" + bytes(8) + noise[:8192],
        "book-gzip.txt": gzip.compress(alice, mtime=0),
        "nul-bytes.txt": bytes(4096),
        "control-heavy.txt": bytes(b for b in noise if b and b not in b"\t\n\r"),  # no NULs: not UTF-16
        "empty.txt": b"",
        "blank-lines.txt": b"\n \r\n\t\n\n",
        # A lone surrogate every 100 characters: beyond the tolerated share of replacements.
        "utf16-broken.txt": b"\x00\xd8".join(alice_utf16[i : i + 200] for i in range(0, 40000, 200)),
        "licence-only.txt": _licence_only(alice),
        "a-note.txt": b"Back in ten minutes.\n",
        "utf16-valid.txt": alice_utf16,
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    assert set(files) | {archive.name} == set(BOOK_FAULTS)
    return folder


def _reconciles(stats: dict) -> None:
    accounted = stats["documents_out"] + sum(stats["dropped"].values()) + sum(stats["rejected"].values())
    assert stats["reconciles"] and accounted == stats["records_in"], stats


def _clean(sentences: list[str]) -> bool:
    return not any(any(m in s for m in MARKUP) or CONTROL.search(s) for s in sentences)


def test_the_chain_completes_and_every_fault_is_accounted_for(wiki_inputs, books_folder, tmp_path):
    out = tmp_path
    injected, baseline = wiki_inputs["injected"], wiki_inputs["baseline"]

    # --- pipelines wikipedia: two file errors, accepted with --allow-file-errors (complete output).
    result = run_cli(
        "wikipedia",
        "--input",
        f"{wiki_inputs['folder']}/*",
        "--output",
        str(out / "wiki"),
        "--num-shards",
        "4",
        "--allow-file-errors",
        *FAST_RUNNER,
    )
    assert "warning: 1 input file(s) ended early (truncated_input)" in result.output
    assert "warning: 1 input file(s) ended early (malformed_xml)" in result.output
    manifest, wiki_stats, wiki_tables = read_output(out / "wiki")
    assert (out / "wiki" / "COMPLETED").exists()
    _reconciles(wiki_stats)
    assert wiki_stats["file_errors"] == {"malformed_xml": 1, "truncated_input": 1}
    rejects = read_rejects(out / "wiki")
    file_errors = {Path(r["origin"]).name: r for r in rejects if r["record_id"] == "file"}
    assert {name: r["reason"] for name, r in file_errors.items()} == {
        "enwiki-truncated.xml.bz2": "truncated_input",
        "enwiki-invalid-byte.xml": "malformed_xml",
    }
    assert "the 4 pages before it were kept" in file_errors["enwiki-invalid-byte.xml"]["detail"]
    kept = int(re.search(r"the (\d+) pages before it", file_errors["enwiki-truncated.xml.bz2"]["detail"])[1])
    assert 0 < kept < 30
    assert wiki_stats["records_in"] == wiki_inputs["num_pages"] + len(injected) + kept + 4

    documents = wiki_tables["all"].select(["page_id", "sentences"]).to_pylist()
    pages_out = {row["page_id"]: row["sentences"] for row in documents}
    assert len(pages_out) == len(documents)
    page_rejects = {int(r["record_id"]): r for r in rejects if r["record_id"] != "file"}
    expected_dropped = Counter(o.reason for o in baseline.values() if o.kind == "dropped")
    expected_rejected = Counter(o.reason for o in baseline.values() if o.kind == "rejected")
    for page_id, (kind, source_id) in injected.items():
        expected = PAGE_FAULTS[kind]
        if expected == "document":
            sentences = pages_out.get(page_id)
            assert sentences, f"{kind}: page {page_id} was lost"
            assert _clean(sentences), f"{kind}: markup or control characters kept in page {page_id}"
            original = set(baseline[source_id].row["sentences"])
            if kind != "apostrophe_run":  # its line stays, as MediaWiki renders it
                assert sum(s in original for s in sentences) >= 0.8 * len(sentences), kind
            assert page_id not in page_rejects
        elif expected[0] == "rejected":
            assert page_id not in pages_out
            assert page_rejects[page_id]["reason"] == expected[1], (kind, page_rejects[page_id])
            assert page_rejects[page_id]["excerpt"] and page_rejects[page_id]["detail"]
            expected_rejected[expected[1]] += 1
        else:
            assert page_id not in pages_out and page_id not in page_rejects, kind
            expected_dropped[expected[1]] += 1
    # Pages of the two damaged files are undamaged copies: documents; no reject is unexplained.
    assert set(page_rejects) == {i for i, (k, _) in injected.items() if PAGE_FAULTS[k][0] == "rejected"}
    assert wiki_stats["rejected"] == dict(sorted(expected_rejected.items()))
    assert wiki_stats["dropped"] == dict(sorted(expected_dropped.items()))
    for page_id, outcome in baseline.items():  # the real pages come out as they do alone
        assert pages_out.get(page_id) == (outcome.row["sentences"] if outcome.kind == "document" else None)
    assert all(_clean(row["sentences"]) for row in documents)
    assert manifest.rejects and sum(s.num_rows for s in manifest.rejects) == len(rejects)

    # --- pipelines books: binary, empty and broken files rejected by name, the rest documents; the
    # undecodable book is a file error, accepted with --allow-file-errors.
    run_cli(
        "books",
        "--input",
        f"{books_folder}/*.txt",
        "--output",
        str(out / "books"),
        "--num-shards",
        "2",
        "--allow-file-errors",
        *FAST_RUNNER,
    )
    _, books_stats, books_tables = read_output(out / "books")
    _reconciles(books_stats)
    num_real = len(_real_books())
    file_errors = {n: e[1] for n, e in BOOK_FAULTS.items() if e != "document" and e[0] == "file_error"}
    assert books_stats["records_in"] == num_real + len(BOOK_FAULTS) - len(file_errors)
    assert books_stats["file_errors"] == dict(Counter(file_errors.values()))
    book_rejects = {r["record_id"]: r["reason"] for r in read_rejects(out / "books")}
    assert book_rejects == {
        n: e[1] for n, e in BOOK_FAULTS.items() if e != "document" and e[0] in ("rejected", "file_error")
    }
    book_rejects = {n: reason for n, reason in book_rejects.items() if n not in file_errors}
    assert books_stats["rejected"] == dict(sorted(Counter(book_rejects.values()).items()))
    assert books_stats["dropped"] == dict(
        sorted(Counter(e[1] for e in BOOK_FAULTS.values() if e != "document" and e[0] == "dropped").items())
    )
    origins = {
        Path(r["origin"]).name: r["doc_id"]
        for r in books_tables["all"].select(["origin", "doc_id"]).to_pylist()
    }
    assert set(origins) == {p.name for p in _real_books()} | {"utf16-valid.txt"}
    alice = next(name for name in origins if name.startswith("Alice"))
    assert origins["utf16-valid.txt"] == origins[alice]  # decoded exactly as its UTF-8 original
    assert all(_clean(s) for s in books_tables["all"].column("sentences").to_pylist())

    # --- pipelines corpus: takes both outputs (one has file errors), reconciles, drops the copies.
    run_cli(
        "corpus",
        "--input",
        str(out / "wiki"),
        "--input",
        str(out / "books"),
        "--output",
        str(out / "corpus"),
        "--validation-fraction",
        "0.05",
        "--test-fraction",
        "0.05",
        "--num-shards",
        "2",
        *FAST_RUNNER,
    )
    _, corpus_stats, corpus_tables = read_output(out / "corpus")
    _reconciles(corpus_stats)
    assert corpus_stats["records_in"] == wiki_stats["documents_out"] + books_stats["documents_out"]
    # Undamaged copies (the file-error dumps' pages, the UTF-16 book) are exact duplicates.
    assert corpus_stats["dropped"]["exact_duplicate"] >= kept + 4 + 1
    assert corpus_stats["splits"] == {split: t.num_rows for split, t in corpus_tables.items()}
    assert sum(corpus_stats["splits"].values()) == corpus_stats["documents_out"]

    # --- wordpiece train: no control character or U+FFFD made it into the vocabulary.
    run_wordpiece(
        "train",
        "--corpus",
        str(out / "corpus"),
        "--output",
        str(out / "vocab"),
        "--vocab-size",
        "3000",
        "--num-unused",
        "10",
        "--num-count-shards",
        "2",
        *FAST_RUNNER,
    )
    vocab = (out / "vocab" / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(vocab) == 3000 and (out / "vocab" / "COMPLETED").exists()
    assert not [t for t in vocab if CONTROL.search(t) or "\ufffd" in t]

    # --- pipelines examples: every train document is used or counted as skipped.
    run_cli(
        "examples",
        "--corpus",
        str(out / "corpus"),
        "--vocab",
        str(out / "vocab" / "vocab.txt"),
        "--output",
        str(out / "examples"),
        "--max-seq-length",
        "64",
        "--dupe-factor",
        "1",
        "--num-shards",
        "2",
        "--num-buckets",
        "4",
        *FAST_RUNNER,
    )
    examples_stats = json.loads((out / "examples" / "stats.json").read_text())
    skipped = examples_stats["skipped"]["documents_without_tokens"]
    assert examples_stats["documents_used"] + skipped == corpus_stats["splits"]["train"]
    assert examples_stats["skipped"]["pairs_without_other_document"] == 0
    table = ds.dataset(str(out / "examples" / "examples"), format="ipc").to_table()
    assert table.num_rows == examples_stats["examples"] > 0
    assert (out / "examples" / "COMPLETED").exists()
