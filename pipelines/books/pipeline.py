"""``pipelines books``: plain-text books (one a file) into documents, one per book."""

from __future__ import annotations

import apache_beam as beam

from pipelines import files
from pipelines.books.clean import clean_book
from pipelines.config import BooksConfig
from pipelines.progress import ShowProgress
from pipelines.stage import (
    FILE_ERROR,
    REJECTED,
    CountRecords,
    Outcome,
    WriteStageOutput,
    reject_outcome,
    sentences_outcome,
)
from pipelines.text import paragraphs_to_sentences
from schemas import storage
from schemas.commands import InputError
from schemas.inputs import MAX_LINE_BYTES, lines
from schemas.rejects import Rejection

SOURCE = "books"
MAX_BOOK_BYTES = 128 << 20
"""The largest book read (the longest novels are a few MB)."""
FILE_ERROR_REASONS = ("undecodable", "unreadable", "too_large", "line_too_long")
"""Books that could not be read or decoded: file errors; a ``binary`` or ``empty`` file is a reject."""


def book_outcome(path: str, data: bytes, min_document_words: int) -> Outcome:
    """Clean one book file into a document, or say why it was dropped or rejected."""
    name = path.rsplit("/", 1)[-1]
    book = clean_book(data, name)
    if isinstance(book, Rejection):
        # Text that cannot be decoded is a damaged input file, not a record to drop quietly.
        kind = FILE_ERROR if book.reason in FILE_ERROR_REASONS else REJECTED
        detail = book.detail.removeprefix(f"{name}: ") if kind == FILE_ERROR else book.detail
        excerpt = data[:200].decode("utf-8", errors="replace")
        return reject_outcome(SOURCE, path, name, book.reason, detail, excerpt=excerpt, kind=kind)
    replaced = book.replaced_characters
    counts = {"replaced_characters": replaced, "books_with_replacements": 1} if replaced else None
    title = book.title or name.rsplit(".", 1)[0]
    sentences = paragraphs_to_sentences(book.paragraphs)
    return sentences_outcome(sentences, min_document_words, counts, source=SOURCE, origin=path, title=title)


def _read_book(path: str) -> bytes | tuple[str, str]:
    """A book's bytes, or ``(reason, detail)`` when it holds too long a line or is too large."""
    parts, size = [], 0
    with files.open_binary(path) as f:
        try:
            for line in lines(f, path, MAX_LINE_BYTES):
                size += len(line)
                if size > MAX_BOOK_BYTES:
                    return "too_large", f"larger than the limit of {MAX_BOOK_BYTES:,} bytes for one book"
                parts.append(line)
        except InputError as err:
            return "line_too_long", str(err).removeprefix(f"{path}: ")
    return b"".join(parts)


def read_book_outcome(path: str, min_document_words: int) -> Outcome:
    """Read one book file and clean it; a file that cannot be read is a file error, never a crash."""
    try:
        data = _read_book(path)
    except Exception as err:  # Any filesystem error: a file error, the other books go on.
        data = "unreadable", f"{type(err).__name__}: {err}"[:500]
    if isinstance(data, tuple):
        return reject_outcome(SOURCE, path, path.rsplit("/", 1)[-1], *data, kind=FILE_ERROR)
    return book_outcome(path, data, min_document_words)


def build(pipeline: beam.Pipeline, config: BooksConfig, inputs: list[str], out: storage.Folder) -> None:
    """Add the books stage to ``pipeline`` for already-expanded ``inputs``."""
    paths = (
        pipeline
        | "Book files" >> beam.Create(inputs)
        | "Spread books" >> beam.Reshuffle()
        | "Progress" >> beam.ParDo(ShowProgress("pipelines books: cleaning", "books"))
    )
    outcomes = paths | "Clean books" >> beam.Map(read_book_outcome, config.min_document_words)
    books_read = (
        outcomes
        | "Books read" >> beam.Filter(lambda o: o.kind != FILE_ERROR)
        | "Count books" >> CountRecords()
    )
    _ = outcomes | "Write" >> WriteStageOutput(
        out, "pipelines books", config, extra_tallies=[books_read], input_files=inputs
    )
