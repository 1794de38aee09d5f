"""``pipelines documents``: a corpus in JSON Lines, Parquet or ``datasets`` Arrow files into
documents: a row is a document, cleaned by the books' rules; rows that are sentences
(``bookcorpus``) become documents grouped by a field or by ``--group-rows`` consecutive rows."""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

import apache_beam as beam

from pipelines import io
from pipelines.books.clean import Rejection, clean_text
from pipelines.config import DocumentsConfig
from pipelines.documents.read import SOURCE, Record, file_kind, plan_reads, read_task
from pipelines.progress import ShowProgress
from pipelines.stage import DROPPED, FILE_ERROR, Outcome, WriteStageOutput, reject_outcome, sentences_outcome
from pipelines.text import garbled_text, normalize_text, paragraphs_to_sentences, split_sentences
from schemas.commands import InputError, UsageError
from schemas.inputs import items, loads, read_bytes
from schemas.paths import check_apart

SAMPLE_RECORDS = 1000
SAMPLE_CHARS = 8 << 20
"""Records (and characters) of the first input read before the job is built, to check its fields and layout."""
SENTENCE_ROWS_SHARE = 0.9
"""At least this share of sampled rows of one sentence each (of 20 or more) is a sentence-per-row layout."""
MAX_TITLE_CHARS = 1000
_INT64_DIGITS = 18


def _reject(record: Record, reason: str, detail: str, excerpt: str) -> Outcome:
    return reject_outcome(SOURCE, record.path, record.name, reason, detail, excerpt=excerpt)


def _page_id(value: Any) -> int | None:
    """An id that is an integer (``12``, ``"12"``), kept as the document's ``page_id``."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= _INT64_DIGITS:
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else None


def _title(value: Any) -> str | None:
    return normalize_text(value)[:MAX_TITLE_CHARS] or None if isinstance(value, str) else None


def record_outcome(record: Record, config: DocumentsConfig) -> Outcome:
    """One row as a document cleaned by the books' rules, or why it was dropped or rejected."""
    text = record.values[config.text_field]
    if (problem := garbled_text(text)) is not None:
        return _reject(record, *problem, excerpt=text)
    book = clean_text(text, record.name)
    if isinstance(book, Rejection):
        return Outcome(DROPPED, "empty_after_cleaning")
    title = _title(record.values.get(config.title_field)) or book.title
    page_id = _page_id(record.values.get(config.id_field))
    return sentences_outcome(
        paragraphs_to_sentences(book.paragraphs),
        config.min_document_words,
        source=SOURCE,
        origin=record.path,
        title=title,
        page_id=page_id,
    )


def group_member(record: Record, config: DocumentsConfig) -> Outcome | tuple[str, tuple]:
    """A row of a grouped layout keyed by its document (``--group-field`` or ``--group-rows``), or its reject."""
    text = record.values[config.text_field]
    if (problem := garbled_text(text)) is not None:
        return _reject(record, *problem, excerpt=text)
    if config.group_field:
        key = json.dumps(record.values[config.group_field])
    else:
        key = f"{record.path}\t{record.position // config.group_rows}"
    title = _title(record.values.get(config.title_field))
    return key, (record.path, record.position, text, title)


def group_outcome(key: str, members, config: DocumentsConfig) -> Outcome:
    """A group's rows in file order, each a paragraph, as one document."""
    members = sorted(members)
    sentences = paragraphs_to_sentences(text for _, _, text, _ in members)
    title = members[0][3] or (_title(str(json.loads(key))) if config.group_field else None)
    outcome = sentences_outcome(
        sentences, config.min_document_words, source=SOURCE, origin=members[0][0], title=title
    )
    return dataclasses.replace(outcome, counts={**(outcome.counts or {}), "grouped_rows": len(members)})


def counted(outcome: Outcome) -> Outcome:
    """An outcome counted as one record read (``records_in``), unless it is a file error."""
    if outcome.kind == FILE_ERROR:
        return outcome
    return dataclasses.replace(outcome, counts={**(outcome.counts or {}), "records_in": 1})


class ReadDocuments(beam.PTransform):
    """Input files into one outcome per record (a row, or a group of rows) and file errors."""

    def __init__(self, config: DocumentsConfig):
        super().__init__()
        self._config = config

    def expand(self, files):
        config = self._config
        read = (
            files
            | "Plan reads"
            >> beam.FlatMap(plan_reads, config.fields(), config.bytes_per_read, config.group_rows is not None)
            | "Spread reads" >> beam.Reshuffle()
            | "Read records" >> beam.FlatMap(read_task, config.fields())
        )
        if config.group_field or config.group_rows:
            keyed = read | "Key rows" >> beam.Map(
                lambda r: r if isinstance(r, Outcome) else group_member(r, config)
            )
            rejects, rows = keyed | "Rows kept" >> beam.Partition(
                lambda m, _: int(not isinstance(m, Outcome)), 2
            )
            documents = (
                rows
                | "Group rows" >> beam.GroupByKey()
                | "Documents" >> beam.MapTuple(lambda key, members: group_outcome(key, members, config))
            )
            outcomes = (rejects, documents) | "All outcomes" >> beam.Flatten()
        else:
            outcomes = (
                read
                | "Spread records" >> beam.Reshuffle()
                | "Progress" >> beam.ParDo(ShowProgress("pipelines documents: cleaning", "records"))
                | "Clean records"
                >> beam.Map(lambda r: r if isinstance(r, Outcome) else record_outcome(r, config))
            )
        return outcomes | "Count records" >> beam.Map(counted)


def build(pipeline: beam.Pipeline, config: DocumentsConfig, files: list[str]) -> None:
    """Add the documents stage to ``pipeline`` for already-expanded input ``files``."""
    _ = (
        pipeline
        | "Input files" >> beam.Create(files)
        | "Read documents" >> ReadDocuments(config)
        | "Write"
        >> WriteStageOutput(
            output=config.output,
            producer="pipelines documents",
            params=config.params(),
            num_shards=config.num_shards,
            input_files=files,
        )
    )


def _dataset_files(folder: str) -> list[str]:
    """The Arrow files of a ``datasets.save_to_disk`` folder (from its ``state.json``); none when
    ``folder`` is no such folder. A ``DatasetDict``'s folder is refused, naming its splits."""
    state, splits = io.join(folder, "state.json"), io.join(folder, "dataset_dict.json")
    if io.exists(splits):
        with io.open_binary(splits) as f:
            names = items(loads(read_bytes(f, splits, 1 << 20), splits), "splits", splits)
        raise UsageError(
            f"--input {folder}: a DatasetDict saved by datasets, with the splits {', '.join(map(str, names))}; "
            f"give one as --input {folder.rstrip('/')}/SPLIT (repeat --input for more)"
        )
    if not io.exists(state):
        return []
    with io.open_binary(state) as f:
        data_files = items(loads(read_bytes(f, state, 1 << 20), state), "_data_files", state)
    names = [entry.get("filename") if isinstance(entry, dict) else None for entry in data_files]
    if not names or not all(isinstance(n, str) and n.endswith(".arrow") and "/" not in n for n in names):
        raise InputError(f"{state}: _data_files must list the folder's .arrow files by name")
    return [io.join(folder, name) for name in names]


def _folder_files(folder: str) -> list[str]:
    """A folder's files of a format read here (not those of its subfolders); none when it is no folder."""
    try:
        return [f for f in io.expand_inputs([io.join(folder, "*")]) if file_kind(f)]
    except InputError:
        return []


def expand_documents(inputs: tuple[str, ...]) -> list[str]:
    """The files ``--input`` names: files, globs, folders (their files of a format read here) and
    ``datasets.save_to_disk`` folders; a file of another format is refused."""
    files: set[str] = set()
    for given in inputs:
        found = []
        if file_kind(given) is None and not any(c in given for c in "*?["):
            found = _dataset_files(given) or _folder_files(given)
        for path in io.expand_inputs(found or [given]):
            if file_kind(path) is None:
                raise UsageError(
                    f"--input {given}: {path} is not JSON Lines (.jsonl, .json, .ndjson; plain, .gz, .zst "
                    "or .bz2), Parquet (.parquet) or Arrow (.arrow)"
                )
            files.add(path)
    return sorted(files)


def check_sample(files: list[str], config: DocumentsConfig) -> None:
    """Read the first records of the first file before the job is built: a missing field or column
    is one line naming the file, what it has and the closest name; rows of one sentence each need
    ``--group-field`` or ``--group-rows`` (next-sentence prediction needs document boundaries)."""
    task = plan_reads(files[0], config.fields(), config.bytes_per_read, whole=True)[0]
    sample, num_chars = [], 0
    for item in itertools.islice(read_task(task, config.fields()), SAMPLE_RECORDS):
        sample.append(item)
        num_chars += len(item.values[config.text_field]) if isinstance(item, Record) else 0
        if num_chars > SAMPLE_CHARS:
            break
    records = [r for r in sample if isinstance(r, Record)]
    schema = [o for o in sample if isinstance(o, Outcome) and o.reason in ("missing_column", "json_array")]
    missing = [o for o in sample if isinstance(o, Outcome) and o.reason == "missing_field"]
    if schema or (missing and not records):
        raise InputError(f"{files[0]}: {(schema or missing)[0].row['detail']}")
    if config.group_field or config.group_rows:
        return
    texts = [r.values[config.text_field][:1000] for r in records]
    single = sum(len(split_sentences(normalize_text(t))) <= 1 for t in texts)
    if len(texts) >= 20 and single >= SENTENCE_ROWS_SHARE * len(texts):
        raise UsageError(
            f"--input {files[0]}: {single:,} of its first {len(texts):,} records hold one sentence each: "
            "next-sentence prediction needs document boundaries; give --group-field FIELD (the field naming "
            "each record's document) or --group-rows N (documents of N consecutive records, recorded in the "
            "manifest; --group-rows 1 keeps each record a document)"
        )


def load_files(config: DocumentsConfig):
    """The stage's ``load_inputs``: the input files, none over ``--output``, their first records checked."""
    check_apart({"--output": config.output}, {"--input": config.inputs})

    def load() -> list[str]:
        files = expand_documents(config.inputs)
        check_apart({"--output": config.output}, {"--input": files})
        check_sample(files, config)
        return files

    return load
