"""``pipelines text``: files in the reference generator's input format into a corpus output.

The format of google-research/bert's ``create_pretraining_data.py``: UTF-8 text, one sentence
per line, a blank line between documents. Each line is stripped and kept as one sentence, as
the reference does; blank lines end a document. Unlike the reference, a new file always starts
a new document (there, a file without a trailing blank line runs into the next file's first
document). Duplicates are kept (the reference keeps them).

Graph: input files → reshuffle → read and parse each file (``Outcome`` per document) →
``WriteStageOutput`` with the splits of a ``pipelines corpus`` output (by default every document
in ``train``), so ``pipelines examples --corpus OUT`` takes it directly.

Bad input is counted, never a crash: an empty (or whitespace-only) file and a binary file
(NUL bytes or not UTF-8) are rejects with that reason (see ``OUT/rejects``); a file with no
blank line is one document, counted as ``files_without_blank_lines`` in ``stats.json``.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam

from pipelines import io
from pipelines.config import TextConfig
from pipelines.corpus.split import assign_split
from pipelines.progress import ShowProgress
from pipelines.stage import Outcome, WriteStageOutput, reject_outcome, sentences_outcome

SOURCE = "text"


def _reject(path: str, reason: str, detail: str, data: bytes = b"") -> Outcome:
    excerpt = data[:200].decode("utf-8", errors="replace") if data else None
    return reject_outcome(
        source=SOURCE,
        origin=path,
        record_id=path.rsplit("/", 1)[-1],
        reason=reason,
        detail=detail,
        excerpt=excerpt,
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
    """One file's documents as outcomes, or one reject saying why the file was not used.

    The first outcome carries the file's counts: ``records_in`` (its documents, or 1 for a
    rejected file: what ``stats.json`` reconciles against), ``text_files`` (files read) and
    ``files_without_blank_lines``.
    """
    outcomes = _parse_file(path, data, min_document_words)
    counts = {**(outcomes[0].counts or {}), "records_in": len(outcomes), "text_files": 1}
    return [dataclasses.replace(outcomes[0], counts=counts), *outcomes[1:]]


def _parse_file(path: str, data: bytes, min_document_words: int) -> list[Outcome]:
    if b"\x00" in data:
        return [_reject(path, "binary", "the file holds NUL bytes: not a text file", data)]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return [_reject(path, "binary", f"not UTF-8 at byte {err.start}", data)]
    documents = parse_documents(text.removeprefix("\ufeff"))
    if not documents:
        return [_reject(path, "empty", "the file has no non-blank line")]
    counts = {}
    if len(documents) == 1 and len(text.splitlines()) > 1:
        counts["files_without_blank_lines"] = 1
    name = path.rsplit("/", 1)[-1]
    outcomes = []
    for number, sentences in enumerate(documents):
        outcomes.append(
            sentences_outcome(
                sentences,
                min_document_words,
                counts=counts if number == 0 and counts else None,
                source=SOURCE,
                origin=path,
                title=f"{name}#{number}",
            )
        )
    return outcomes


def read_text_file(path: str, min_document_words: int) -> list[Outcome]:
    """Read one input file and parse it; an unreadable file is a reject, never a crash."""
    try:
        data = io.read_bytes(path)
    except Exception as err:  # Any filesystem error: the file is rejected, the others go on.
        reject = _reject(path, "unreadable", f"{type(err).__name__}: {err}"[:500])
        return [dataclasses.replace(reject, counts={"records_in": 1, "text_files": 1})]
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
