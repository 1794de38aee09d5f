"""The corpora users bring, in the layouts their publishers use, built from the real text in
../shared/data (nothing third-party is committed): for tests and benchmarks of `pipelines documents`.

- ``wikipedia``: ``wikimedia/wikipedia`` Parquet (``id``, ``url``, ``title``, ``text``: an article a
  row, its sections' headings on lines of their own), from the enwiki excerpt's even articles;
- ``bookcorpusopen``: Parquet with ``title`` and ``text``, a book a row (four Gutenberg novels);
- ``bookcorpus``: Parquet with one ``text`` sentence a row and no book boundaries (every novel);
- ``dolma``: gzipped JSON Lines with ``id``, ``text``, ``source``, ``added``, ``created`` and
  ``metadata``, as Dolma's wiki source writes them (the title, a blank line, the body), from the
  excerpt's odd articles;
- ``save_to_disk``: a ``datasets.Dataset.save_to_disk`` folder (``title``, ``text``) of the other
  four novels, in two Arrow files.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.books.clean import DecodedBook, clean_book, decode_book
from pipelines.text import normalize_text, paragraphs_to_sentences, split_sentences
from pipelines.wiki.dump import iter_pages
from pipelines.wiki.wikitext import clean_wikitext

_HEADING = re.compile(r"^(={2,6})\s*(.+?)\s*\1\s*$", re.MULTILINE)
LAYOUTS = ("wikipedia", "bookcorpusopen", "bookcorpus", "dolma", "save_to_disk")
GROUP_ROWS = 100
"""Sentences per document for the ``bookcorpus`` layout (``--group-rows``)."""


@dataclass
class Layout:
    """One layout on disk: what to give ``pipelines documents`` and the rows written, in order."""

    inputs: list[str]
    flags: list[str]
    files: list[Path]
    rows: list[dict] = field(default_factory=list)


def wiki_articles(dump: Path) -> list[dict]:
    """The excerpt's articles as ``wikimedia/wikipedia`` rows: each section's prose cleaned on its
    own, under its heading line, blocks separated by blank lines."""
    rows = []
    with open(dump, "rb") as f:
        for page in iter_pages(f):
            if page.ns != 0 or page.redirect_title is not None:
                continue
            if clean_wikitext(page.text, page.title).is_disambiguation:
                continue
            parts = _HEADING.split(page.text)  # intro, then (marks, heading, body) per section
            blocks = clean_wikitext(parts[0], page.title).paragraphs
            for i in range(1, len(parts), 3):
                paragraphs = clean_wikitext(parts[i + 2], page.title).paragraphs
                if paragraphs:
                    blocks += [re.sub(r"[\[\]{}'|]", "", parts[i + 1]).strip(), *paragraphs]
            if blocks:
                title = page.title
                url = "https://en.wikipedia.org/wiki/" + title.replace(" ", "_")
                rows.append(
                    {"id": str(page.page_id), "url": url, "title": title, "text": "\n\n".join(blocks)}
                )
    return rows


def decoded_books(books: list[Path]) -> list[dict]:
    """Each book decoded as ``pipelines books`` decodes it, as a ``bookcorpusopen`` row."""
    rows = []
    for book in books:
        decoded = decode_book(book.read_bytes(), book.name)
        assert isinstance(decoded, DecodedBook), decoded
        rows.append({"title": book.name, "text": decoded.text})
    return rows


def book_sentences(books: list[Path]) -> list[dict]:
    """The books' sentences in order, one a row (``bookcorpus``), each one that splits into itself."""
    rows = []
    for book in books:
        cleaned = clean_book(book.read_bytes(), book.name)
        for sentence in paragraphs_to_sentences(cleaned.paragraphs):
            if split_sentences(normalize_text(sentence)) == [sentence]:
                rows.append({"text": sentence})
    return rows


def _parquet(rows: list[dict], path: Path, schema: pa.Schema, row_group_size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=row_group_size)
    return path


def _halves(rows: list) -> list[list]:
    return [rows[: len(rows) // 2], rows[len(rows) // 2 :]]


def build_layouts(root: Path, dump: Path, books: list[Path]) -> dict[str, Layout]:
    """Every layout under ``root``, from the enwiki ``dump`` and the Gutenberg ``books``."""
    import datasets

    articles, texts = wiki_articles(dump), decoded_books(books)
    layouts: dict[str, Layout] = {}
    schema = pa.schema([(name, pa.string()) for name in ("id", "url", "title", "text")])
    folder = root / "wikimedia-wikipedia" / "20231101.en"
    rows, files = articles[0::2], []
    for i, half in enumerate(_halves(rows)):
        files.append(_parquet(half, folder / f"train-{i:05d}-of-00002.parquet", schema, 16))
    layouts["wikipedia"] = Layout([str(folder)], ["--id-field", "id", "--title-field", "title"], files, rows)

    schema = pa.schema([("title", pa.string()), ("text", pa.string())])
    rows = texts[:4]
    path = _parquet(rows, root / "bookcorpusopen" / "train-00000-of-00001.parquet", schema, 2)
    layouts["bookcorpusopen"] = Layout([str(path)], ["--title-field", "title"], [path], rows)

    rows, files = book_sentences(books), []
    for i, half in enumerate(_halves(rows)):
        path = root / "bookcorpus" / f"train-{i:05d}-of-00002.parquet"
        files.append(_parquet(half, path, pa.schema([("text", pa.string())]), 5000))
    glob = str(root / "bookcorpus" / "*.parquet")
    layouts["bookcorpus"] = Layout([glob], ["--group-rows", str(GROUP_ROWS)], files, rows)

    rows, files = [], []
    for article in articles[1::2]:
        text = f"{article['title']}\n\n{article['text']}"
        metadata = {"length": len(text), "url": article["url"]}
        added, created = "2023-03-27T00:00:00.000Z", "2022-03-01T00:00:00.000Z"
        rows.append(
            dict(
                id=article["id"],
                text=text,
                source="wikipedia",
                added=added,
                created=created,
                metadata=metadata,
            )
        )
    for i, half in enumerate(_halves(rows)):
        path = root / "dolma" / "documents" / f"wiki-{i:04d}.json.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in half).encode("utf-8"), mtime=0))
        files.append(path)
    layouts["dolma"] = Layout([str(root / "dolma" / "documents")], ["--id-field", "id"], files, rows)

    rows, folder = texts[4:], root / "save_to_disk"
    datasets.disable_progress_bars()
    datasets.Dataset.from_list(rows).save_to_disk(str(folder), num_shards=2)
    files = sorted(folder.glob("*.arrow"))
    layouts["save_to_disk"] = Layout([str(folder)], ["--title-field", "title"], files, rows)
    return layouts
