"""``pipelines text``: files in the reference generator's input format into a corpus output.

The format of google-research/bert's ``create_pretraining_data.py``: UTF-8 text, one sentence
per line, a blank line between documents. Each line is stripped and kept as one sentence, as
the reference does; blank lines end a document. Unlike the reference, a new file always starts
a new document (there, a file without a trailing blank line runs into the next file's first
document). Duplicates are kept (the reference keeps them).

Graph: input files → reshuffle → read and parse each file (``Outcome`` per document) →
``WriteStageOutput`` with the splits of a ``pipelines corpus`` output (by default every document
in ``train``), so ``pipelines examples --corpus OUT`` takes it directly.

Bad input is counted, never a crash. An empty (or whitespace-only) file is a reject ``empty``
(see ``OUT/rejects``); a file with no blank line is one document, counted as
``files_without_blank_lines`` in ``stats.json``. A file that is not UTF-8 text is a file error
(``stats.json``'s ``file_errors`` and ``files_with_errors``, and a row in ``OUT/rejects``), which
leaves the output unmarked unless ``--allow-file-errors``: ``undecodable`` at its first invalid
UTF-8 byte, ``binary`` at its first NUL byte (UTF-16 text, or not text at all). The file is read
up to the document holding that byte: the documents before it are kept, the rest is counted as
``bytes_not_read`` and ``lines_not_read``. An input file that cannot be read at all is a file
error ``unreadable``.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam

from pipelines import io
from pipelines.config import TextConfig
from pipelines.corpus.split import assign_split
from pipelines.progress import ShowProgress
from pipelines.stage import (
    FILE_ERROR,
    REJECTED,
    Outcome,
    WriteStageOutput,
    reject_outcome,
    sentences_outcome,
)

SOURCE = "text"


def _reject(path: str, reason: str, detail: str, data: bytes = b"", kind: str = REJECTED) -> Outcome:
    excerpt = data[:200].decode("utf-8", errors="replace") if data else None
    return reject_outcome(
        source=SOURCE,
        origin=path,
        record_id=path.rsplit("/", 1)[-1],
        reason=reason,
        detail=detail,
        excerpt=excerpt,
        kind=kind,
    )


def parse_documents(text: str) -> list[list[str]]:
    """Documents of a file's text: stripped non-empty lines, split at blank lines."""
    documents: list[list[str]] = [[]]
    for line in text.splitlines():
        line = line.strip()
        if line:
            documents[-1].append(line)
        elif documents[-1]:
            documents.append([])
    return [doc for doc in documents if doc]


def text_file_outcomes(path: str, data: bytes, min_document_words: int) -> list[Outcome]:
    """One file's documents as outcomes, with a reject saying why a file was not (wholly) used.

    The first outcome carries the file's counts: ``records_in`` (its documents, or 1 for a
    rejected file: what ``stats.json`` reconciles against; a file error is not a record),
    ``text_files`` (files read) and ``files_without_blank_lines``.
    """
    outcomes = _parse_file(path, data, min_document_words)
    records = sum(o.kind != FILE_ERROR for o in outcomes)
    counts = {**(outcomes[0].counts or {}), "records_in": records, "text_files": 1}
    return [dataclasses.replace(outcomes[0], counts=counts), *outcomes[1:]]


def decode_text(data: bytes) -> tuple[str | None, tuple[int, str, str] | None]:
    """``data`` as UTF-8 text, or None and ``(offset, reason, what)`` of the first byte that keeps
    it from being text: invalid UTF-8 (``undecodable``) or a NUL byte (``binary``)."""
    nul = data.find(b"\x00")
    binary = (nul, "binary", "a NUL byte (UTF-16, or not text)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return None, binary if 0 <= nul < err.start else (err.start, "undecodable", "not UTF-8")
    return (None, binary) if nul >= 0 else (text, None)


def _cut_file(path: str, data: bytes, min_document_words: int, bad: tuple[int, str, str]) -> list[Outcome]:
    """The documents that end before the bad byte, and a file error counting what was not read."""
    offset, reason, what = bad
    line = data.count(b"\n", 0, offset) + 1
    lines = data[:offset].decode("utf-8").split("\n")
    # The line holding the bad byte is incomplete; the documents before the last blank line are whole.
    blank = max((i for i, text in enumerate(lines[:-1]) if not text.strip()), default=-1)
    read = "\n".join(lines[: blank + 1])
    kept = parse_documents(read.removeprefix("\ufeff"))
    unread_bytes = len(data) - (len(read.encode("utf-8")) + 1 if blank >= 0 else 0)
    num_lines = data.count(b"\n") + (not data.endswith(b"\n"))
    detail = (
        f"{what} at byte {offset:,} (line {line:,}); {len(kept):,} document(s) before it read, "
        f"{unread_bytes:,} bytes from line {blank + 2:,} on not read"
    )
    error = _reject(path, reason, detail, data[max(0, offset - 100) : offset + 100], kind=FILE_ERROR)
    error = dataclasses.replace(
        error, counts={"bytes_not_read": unread_bytes, "lines_not_read": num_lines - blank - 1}
    )
    return [*_documents(path, kept, min_document_words, {}), error]


def _documents(path: str, documents: list[list[str]], min_document_words: int, counts: dict) -> list[Outcome]:
    name = path.rsplit("/", 1)[-1]
    return [
        sentences_outcome(
            sentences,
            min_document_words,
            counts=counts if number == 0 and counts else None,
            source=SOURCE,
            origin=path,
            title=f"{name}#{number}",
        )
        for number, sentences in enumerate(documents)
    ]


def _parse_file(path: str, data: bytes, min_document_words: int) -> list[Outcome]:
    text, bad = decode_text(data)
    if text is None:
        return _cut_file(path, data, min_document_words, bad)
    documents = parse_documents(text.removeprefix("\ufeff"))
    if not documents:
        return [_reject(path, "empty", "the file has no non-blank line")]
    counts = {}
    if len(documents) == 1 and len(text.splitlines()) > 1:
        counts["files_without_blank_lines"] = 1
    return _documents(path, documents, min_document_words, counts)


def read_text_file(path: str, min_document_words: int) -> list[Outcome]:
    """Read one input file and parse it; a file that cannot be read is a file error, never a crash."""
    try:
        data = io.read_bytes(path)
    except Exception as err:  # Any filesystem error: a file error, the others go on.
        error = _reject(path, "unreadable", f"{type(err).__name__}: {err}"[:500], kind=FILE_ERROR)
        return [dataclasses.replace(error, counts={"records_in": 0, "text_files": 1})]
    return text_file_outcomes(path, data, min_document_words)


def build(pipeline: beam.Pipeline, config: TextConfig, files: list[str]) -> None:
    """Add the text stage to ``pipeline`` for already-expanded input ``files``."""

    def split_of(row: dict) -> str:
        return assign_split(
            row["doc_id"], config.validation_fraction, config.test_fraction, config.split_seed
        )

    paths = (
        pipeline
        | "Text files" >> beam.Create(files)
        | "Spread files" >> beam.Reshuffle()
        | "Progress" >> beam.ParDo(ShowProgress("pipelines text: reading", "files"))
    )
    outcomes = paths | "Parse files" >> beam.FlatMap(read_text_file, config.min_document_words)
    _ = outcomes | "Write" >> WriteStageOutput(
        output=config.output,
        producer="pipelines text",
        params=config.params(),
        num_shards=config.num_shards,
        namespace="pipelines.text",
        split_of=split_of,
        input_files=files,
    )
