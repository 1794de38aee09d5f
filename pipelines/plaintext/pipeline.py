"""``pipelines text``: files in ``create_pretraining_data.py``'s input format into a corpus output
(docs/corpus.md). A file error keeps the documents before the last blank line before it and counts
the rest as not read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import apache_beam as beam

from pipelines import files
from pipelines.config import TextConfig
from pipelines.corpus.split import assign_split
from pipelines.progress import ShowProgress
from pipelines.stage import FILE_ERROR, REJECTED, Outcome, WriteStageOutput, reject_outcome, sentences_outcome
from schemas import storage
from schemas.inputs import MAX_LINE_BYTES

SOURCE = "text"
_CONTEXT_BYTES = 100
"""Bytes kept on each side of a bad byte for the reject's excerpt."""


def _reject(path: str, reason: str, detail: str, data: bytes = b"", kind: str = REJECTED) -> Outcome:
    excerpt = data[:200].decode("utf-8", errors="replace") if data else None
    return reject_outcome(SOURCE, path, path.rsplit("/", 1)[-1], reason, detail, excerpt=excerpt, kind=kind)


def _first_bad_byte(line: bytes) -> tuple[int, str, str] | None:
    """``(position, reason, what)`` of the first byte that keeps ``line`` from being text: a NUL
    (``binary``) or invalid UTF-8 (``undecodable``), whichever comes first."""
    nul = line.find(b"\x00")
    binary = (nul, "binary", "a NUL byte (UTF-16, or not text)")
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as err:
        return binary if 0 <= nul < err.start else (err.start, "undecodable", "not UTF-8")
    return binary if nul >= 0 else None


def _lines(f) -> Iterator[bytes]:
    """The lines of ``f``, each read at most ``MAX_LINE_BYTES + 1`` bytes long (a longer one is cut)."""
    while line := f.readline(MAX_LINE_BYTES + 1):
        yield line


def _file_outcomes(path: str, f, size: int, min_document_words: int) -> Iterator[Outcome]:
    """The outcomes of one open file (``size`` bytes), read line by line. A document is given out
    once a blank line (a whitespace-only line between two ``\\n``) follows it, so that what a bad
    byte cuts off is exactly what comes after the last blank line before it."""
    name = path.rsplit("/", 1)[-1]
    pending: list[list[str]] = []  # documents ended, waiting for a blank line
    current: list[str] = []
    number = offset = num_lines = num_text_lines = 0
    blank_end, blank_line = 0, 0  # where the last blank line ends (bytes, lines)
    history, bad = b"", None

    def documents(docs: list[list[str]]) -> Iterator[Outcome]:
        nonlocal number
        for sentences in docs:
            yield sentences_outcome(
                sentences, min_document_words, source=SOURCE, origin=path, title=f"{name}#{number}"
            )
            number += 1

    for line in _lines(f):
        if len(line) > MAX_LINE_BYTES:
            bad = (offset, "line_too_long", f"a line longer than the limit of {MAX_LINE_BYTES:,} bytes")
            break
        if (found := _first_bad_byte(line)) is not None:
            bad = (offset + found[0], *found[1:])
            break
        text = line.decode("utf-8")
        pieces = (text.removeprefix("\ufeff") if offset == 0 else text).splitlines()
        num_text_lines += len(text.splitlines())
        for piece in pieces:
            if piece := piece.strip():
                current.append(piece)
            elif current:
                pending.append(current)
                current = []
        history = (history + line)[-_CONTEXT_BYTES:]
        offset += len(line)
        num_lines += 1
        if line.endswith(b"\n") and not text.strip():
            yield from documents(pending)
            pending, blank_end, blank_line = [], offset, num_lines
    if bad is None:
        total = pending + ([current] if current else [])
        if not total and not number:
            yield _reject(path, "empty", "the file has no non-blank line")
        elif len(total) == 1 and not number and num_text_lines > 1:
            (only,) = documents(total)
            yield dataclasses.replace(only, counts={"files_without_blank_lines": 1})
        else:
            yield from documents(total)
        return
    at, reason, what = bad
    counts = {"bytes_not_read": size - blank_end}
    after, newlines, last, rest = line[at - offset :], line.count(b"\n"), line[-1:], offset + len(line)
    # The rest of a text file is read to count its lines; a file with an endless line is not text.
    while reason != "line_too_long" and rest < size and (chunk := f.read(min(1 << 20, size - rest))):
        after = after if len(after) >= _CONTEXT_BYTES else after + chunk[:_CONTEXT_BYTES]
        rest, newlines, last = rest + len(chunk), newlines + chunk.count(b"\n"), chunk[-1:]
    if reason != "line_too_long":
        counts["lines_not_read"] = num_lines + newlines + (last != b"\n") - blank_line
    detail = (
        f"{what} at byte {at:,} (line {num_lines + 1:,}); {number:,} document(s) before it read, "
        f"{counts['bytes_not_read']:,} bytes from line {blank_line + 1:,} on not read"
    )
    excerpt = (history + line[: at - offset])[-_CONTEXT_BYTES:] + after[:_CONTEXT_BYTES]
    yield dataclasses.replace(_reject(path, reason, detail, excerpt, kind=FILE_ERROR), counts=counts)


def read_text_file(path: str, min_document_words: int) -> Iterator[Outcome]:
    """The outcomes of one input file; a file that cannot be read is a file error, never a crash."""
    first = True
    try:
        with files.open_binary(path) as f:
            for outcome in _file_outcomes(path, f, files.file_size(path), min_document_words):
                counts = {**(outcome.counts or {}), "records_in": int(outcome.kind != FILE_ERROR)}
                yield dataclasses.replace(outcome, counts={**counts, "text_files": 1} if first else counts)
                first = False
    except Exception as err:  # Any filesystem error: a file error, the others go on.
        error = _reject(path, "unreadable", f"{type(err).__name__}: {err}"[:500], kind=FILE_ERROR)
        yield dataclasses.replace(error, counts={"records_in": 0, "text_files": int(first)})


def build(pipeline: beam.Pipeline, config: TextConfig, inputs: list[str], out: storage.Folder) -> None:
    """Add the text stage to ``pipeline`` for already-expanded ``inputs``."""

    def split_of(row: dict) -> str:
        return assign_split(
            row["doc_id"], config.validation_fraction, config.test_fraction, config.split_seed
        )

    paths = (
        pipeline
        | "Text files" >> beam.Create(inputs)
        | "Spread files" >> beam.Reshuffle()
        | "Progress" >> beam.ParDo(ShowProgress("pipelines text: reading", "files"))
    )
    outcomes = paths | "Parse files" >> beam.FlatMap(read_text_file, config.min_document_words)
    _ = outcomes | "Write" >> WriteStageOutput(
        out, "pipelines text", config, split_of=split_of, input_files=inputs
    )
