"""``pipelines documents``: a corpus in JSON Lines, Parquet or ``datasets`` Arrow files into
documents: a row is a document, cleaned by the books' rules; rows that are sentences
(``bookcorpus``) become documents grouped by a field or by ``--group-rows`` consecutive rows."""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

import apache_beam as beam

from pipelines import files
from pipelines.books.clean import clean_text
from pipelines.config import DocumentsConfig
from pipelines.documents.read import SOURCE, Record, file_kind, plan_reads, read_part
from pipelines.progress import ShowProgress
from pipelines.shuffle import runs_locally
from pipelines.stage import DROPPED, FILE_ERROR, CountRecords, Outcome, WriteStageOutput, sentences_outcome
from pipelines.text import normalize_text, paragraphs_to_sentences, split_sentences
from schemas import storage
from schemas.commands import InputError, UsageError
from schemas.inputs import items, loads, read_bytes
from schemas.rejects import Rejection

SAMPLE_RECORDS, SAMPLE_CHARS = 1000, 8 << 20
"""Records (and characters) of the first file read before the job is built, to check it."""
SENTENCE_ROWS_SHARE = 0.9
"""At least this share of sampled rows (of 20 or more) of one sentence each: a sentence-per-row layout."""


def _title(value: Any) -> str | None:
    return (normalize_text(value)[:1000] or None) if isinstance(value, str) else None


def record_outcome(record: Record, config: DocumentsConfig) -> Outcome:
    """One row as a document cleaned by the books' rules (an integer id kept as ``page_id``), or
    why it was dropped."""
    book = clean_text(record.values[config.text_field], record.name)
    if isinstance(book, Rejection):
        return Outcome(DROPPED, "empty_after_cleaning")
    page_id = str(record.values.get(config.id_field))
    page_id = int(page_id) if page_id.isascii() and page_id.isdigit() and len(page_id) <= 18 else None
    title = _title(record.values.get(config.title_field)) or book.title
    sentences = paragraphs_to_sentences(book.paragraphs)
    fields = dict(source=SOURCE, origin=record.path, title=title, page_id=page_id)
    return sentences_outcome(sentences, config.min_document_words, **fields)


def group_member(record: Record, config: DocumentsConfig) -> tuple[str, tuple]:
    """A row of a grouped layout keyed by its document: its ``--group-field`` value, or its file
    and ``--group-rows`` block."""
    if config.group_field:
        key = json.dumps(record.values[config.group_field])
    else:
        key = f"{record.path}\t{record.position // config.group_rows}"
    text = record.values[config.text_field]
    return key, (record.path, record.position, text, _title(record.values.get(config.title_field)))


def group_outcome(key: str, members, config: DocumentsConfig) -> Outcome:
    """A group's rows in file order, each a paragraph, as one document (titled by its first row's
    title, else by its group field's value)."""
    members = sorted(members)
    title = members[0][3] or (_title(str(json.loads(key))) if config.group_field else None)
    sentences = paragraphs_to_sentences(text for _, _, text, _ in members)
    fields = dict(source=SOURCE, origin=members[0][0], title=title)
    outcome = sentences_outcome(sentences, config.min_document_words, **fields)
    return dataclasses.replace(outcome, counts={**(outcome.counts or {}), "grouped_rows": len(members)})


class ReadDocuments(beam.PTransform):
    """Input files into one outcome per record (a row, or a group of rows) and file errors."""

    def __init__(self, config: DocumentsConfig):
        super().__init__()
        self._config = config

    def expand(self, paths):
        config, whole = self._config, self._config.group_rows is not None
        read = (
            paths
            | "Plan reads" >> beam.FlatMap(plan_reads, config.fields(), config.bytes_per_read, whole)
            | "Spread reads" >> beam.Reshuffle()
            | "Read records" >> beam.FlatMap(read_part, config.fields())
        )
        if config.group_field or config.group_rows:
            rejects, rows = read | "Rows kept" >> beam.Partition(lambda r, _: int(isinstance(r, Record)), 2)
            outcomes = (
                rows
                | "Key rows" >> beam.Map(group_member, config)
                | "Group rows" >> beam.GroupByKey()
                | "Documents" >> beam.MapTuple(lambda key, members: group_outcome(key, members, config))
            )
            return (rejects, outcomes) | "All outcomes" >> beam.Flatten()
        if not runs_locally(paths.pipeline):  # a local runner would hold every record
            read = read | "Spread records" >> beam.Reshuffle()
        return (
            read
            | "Progress" >> beam.ParDo(ShowProgress("pipelines documents: cleaning", "records"))
            | "Clean" >> beam.Map(lambda r: record_outcome(r, config) if isinstance(r, Record) else r)
        )


def build(pipeline: beam.Pipeline, config: DocumentsConfig, inputs: list[str], out: storage.Folder) -> None:
    """Add the documents stage to ``pipeline`` for already-expanded ``inputs``."""
    outcomes = pipeline | "Input files" >> beam.Create(inputs) | ReadDocuments(config)
    records = outcomes | "Records" >> beam.Filter(lambda o: o.kind != FILE_ERROR) | CountRecords()
    _ = outcomes | "Write" >> WriteStageOutput(
        out, "pipelines documents", config, extra_tallies=[records], input_files=inputs
    )


def _folder_files(folder: str) -> list[str]:
    """The Arrow files a ``datasets.save_to_disk`` folder's ``state.json`` lists, else the files of
    a format read here in the folder (not in its subfolders); none when it is no folder. A
    ``DatasetDict``'s folder is refused: its splits are folders of their own."""
    state = files.join(folder, "state.json")
    if files.exists(files.join(folder, "dataset_dict.json")):
        raise UsageError(
            f"--input {folder}: a DatasetDict saved by datasets; give one of its splits' folders"
        )
    if not files.exists(state):
        try:
            return [f for f in files.expand_inputs([files.join(folder, "*")]) if file_kind(f)]
        except InputError:  # no such folder: the path is taken as a file
            return []
    with files.open_binary(state) as f:
        entries = items(loads(read_bytes(f, state, 1 << 20), state), "_data_files", state)
    names = [entry.get("filename") if isinstance(entry, dict) else None for entry in entries]
    if not names or not all(isinstance(n, str) and n.endswith(".arrow") and "/" not in n for n in names):
        raise InputError(f"{state}: _data_files must list the folder's .arrow files by name")
    return [files.join(folder, name) for name in names]


def expand_documents(inputs: tuple[str, ...]) -> list[str]:
    """The files ``--input`` names: files, globs, folders (their files of a format read here, not
    their subfolders') and ``datasets.save_to_disk`` folders; a file of another format is refused."""
    found_files: set[str] = set()
    for given in inputs:
        found = []
        if file_kind(given) is None and not any(c in given for c in "*?["):
            found = _folder_files(given)
        for path in files.expand_inputs(found or [given]):
            if file_kind(path) is None:
                raise UsageError(
                    f"--input {given}: {path} is not JSON Lines (.jsonl, .json, .ndjson; plain, .gz, .zst "
                    "or .bz2), Parquet (.parquet) or Arrow (.arrow)"
                )
            found_files.add(path)
    return sorted(found_files)


def check_sample(paths: list[str], config: DocumentsConfig) -> list[str]:
    """``paths`` once the first records of the first file, read before the job is built, have the
    fields asked for (else one line naming what they have, the closest first) and, unless grouped,
    are not one sentence each (next-sentence prediction needs document boundaries)."""
    part = plan_reads(paths[0], config.fields(), config.bytes_per_read, whole=True)[0]
    sample, num_chars = [], 0
    for item in itertools.islice(read_part(part, config.fields()), SAMPLE_RECORDS):
        sample.append(item)
        num_chars += len(item.values[config.text_field]) if isinstance(item, Record) else 0
        if num_chars > SAMPLE_CHARS:
            break
    texts = [r.values[config.text_field][:1000] for r in sample if isinstance(r, Record)]
    refused = [o for o in sample if isinstance(o, Outcome) and o.reason in ("missing_column", "json_array")]
    refused += [] if texts else [o for o in sample if isinstance(o, Outcome) and o.reason == "missing_field"]
    if refused:
        raise InputError(f"{paths[0]}: {refused[0].row['detail']}")
    single = sum(len(split_sentences(normalize_text(t))) <= 1 for t in texts)
    if not (config.group_field or config.group_rows) and single >= max(20, SENTENCE_ROWS_SHARE * len(texts)):
        raise UsageError(
            f"--input {paths[0]}: {single:,} of its first {len(texts):,} records hold one sentence each: "
            "next-sentence prediction needs document boundaries; give --group-field FIELD (the field naming "
            "each record's document) or --group-rows N (documents of N consecutive records, recorded in the "
            "manifest; --group-rows 1 keeps each record a document)"
        )
    return paths
