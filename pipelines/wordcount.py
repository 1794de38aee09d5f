"""``wordpiece train``'s Beam job: the words of the corpus splits counted after BERT's normalisation
and pre-tokenisation (``pre_tokenize``) into sorted ``word_counts`` Arrow files, for the learning
splits and the measurement split side by side; the vocabulary is then learned from the counts on
the launching machine (``wordpiece.train``), so neither ever reads the text again.

``wordpiece/cli.py`` imports this module inside its ``train`` command: the one place ``wordpiece``
reaches into ``pipelines``, so that ``wordpiece`` itself imports no Beam.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import TestOptions

from pipelines import files
from pipelines.jobs import job_options, run_pipeline
from schemas import DOCUMENTS, WORD_COUNTS, Manifest, storage
from schemas.commands import InputError
from schemas.outputs import OutputFolder
from wordpiece.tokenizer import pre_tokenize
from wordpiece.train import COUNTS_FOLDER, LEARN, MEASURE, VocabConfig, learn_vocabulary


def read_sentences(shard: tuple[str, str]) -> Iterator[list[str]]:
    """The sentences of every document in one corpus shard ``(path, sha256)``, a record batch at a
    time, refusing a damaged shard."""
    for table in files.read_document_table(shard, ["sentences"]):
        yield from table.column("sentences").to_pylist()


def document_word_counts(sentences: list[str], cased: bool) -> list[tuple[str, int]]:
    """How often each pre-tokenised word occurs in one document."""
    counts: Counter = Counter()
    for sentence in sentences:
        counts.update(pre_tokenize(sentence, cased))
    return list(counts.items())


def counts_shard_name(group: str, index: int, num_shards: int) -> str:
    """Relative path of one counts shard."""
    return f"{COUNTS_FOLDER}/{group}-{index:05d}-of-{num_shards:05d}.arrow"


def _shard_of(word: str, num_shards: int) -> int:
    return int(hashlib.sha256(word.encode("utf-8")).hexdigest()[:16], 16) % num_shards


def _write_counts(element, output: str, group: str, num_shards: int) -> str:
    index, items = element
    rows = sorted((item for item in items if item is not None), key=lambda wc: wc[0])
    relative = counts_shard_name(group, index, num_shards)
    path = files.join(output, relative)
    table = WORD_COUNTS.to_table(({"word": w, "count": c} for w, c in rows), source=path)
    files.write_bytes(path, WORD_COUNTS.to_ipc_bytes(table, source=path))
    return relative


class CountWords(beam.PTransform):
    """Corpus shards ``(path, sha256)`` → ``(word, count)`` summed over the whole corpus."""

    def __init__(self, cased: bool):
        super().__init__()
        self._cased = cased

    def expand(self, shards):
        cased = self._cased
        return (
            shards
            | "Spread shards" >> beam.Reshuffle()
            | "Read documents" >> beam.FlatMap(read_sentences)
            | "Count in document" >> beam.FlatMap(document_word_counts, cased)
            | "Sum per word" >> beam.CombinePerKey(sum)
        )


class WriteCounts(beam.PTransform):
    """Write ``(word, count)`` pairs into exactly ``num_shards`` sorted files; emit their paths."""

    def __init__(self, out: storage.Folder, group: str, num_shards: int):
        super().__init__()
        out.journal(
            *(counts_shard_name(group, i, num_shards) for i in range(num_shards))
        )  # before the workers
        self._output, self._group, self._num_shards = out.url, group, num_shards

    def expand(self, counts):
        n = self._num_shards
        keyed = counts | "Key by shard" >> beam.Map(lambda wc: (_shard_of(wc[0], n), wc))
        placeholders = counts.pipeline | "Every shard" >> beam.Create([(i, None) for i in range(n)])
        return (
            (keyed, placeholders)
            | "Merge" >> beam.Flatten()
            | "Group by shard" >> beam.GroupByKey()
            | "Write" >> beam.Map(_write_counts, self._output, self._group, n)
        )


def corpus_shards(folder: str, manifest: Manifest, splits: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(path, sha256)`` of the corpus shards of the given splits, in a stable order."""
    return sorted(
        (files.join(folder, s.path), s.sha256) for split in splits for s in manifest.shards_for(split)
    )


def build(
    pipeline: beam.Pipeline,
    *,
    corpus: str,
    manifest: Manifest,
    groups: dict[str, tuple[str, ...]],
    cased: bool,
    out: storage.Folder,
    num_shards: int,
) -> None:
    """Count words for each group of splits (for example ``learn`` and ``measure``) into ``out``."""
    for group, splits in groups.items():
        _ = (
            pipeline
            | f"{group}: shards" >> beam.Create(corpus_shards(corpus, manifest, splits))
            | f"{group}: count" >> CountWords(cased)
            | f"{group}: write" >> WriteCounts(out, group, num_shards)
        )


def train_vocabulary(config: VocabConfig, beam_args: list[str]) -> dict[str, Any] | None:
    """Count words with Beam, then learn and write the vocabulary; stats.json (None for a dry run)."""
    options = job_options(beam_args)
    try:
        manifest = files.load_manifest(config.corpus, DOCUMENTS.name)
        manifest_sha256 = files.manifest_sha256(config.corpus)
    except (InputError, OSError) as err:
        raise InputError(f"--corpus {err}") from None
    if options.view_as(TestOptions).dry_run:
        _count(config, manifest, options, storage.Folder(config.output))
        return None
    with OutputFolder.open(config.output, "wordpiece train", overwrite=config.overwrite) as out:
        out.begin()
        _count(config, manifest, options, out)
        try:
            return learn_vocabulary(config, manifest_sha256, out)
        except InputError:  # no partial output is left
            n = config.num_count_shards
            files.remove(out.path(counts_shard_name(g, i, n)) for g in (LEARN, MEASURE) for i in range(n))
            raise


def _count(config: VocabConfig, manifest: Manifest, options, out: storage.Folder) -> None:
    """The Beam job that writes the word counts (``word_counts/``) into ``out``."""
    pipeline = beam.Pipeline(options=options)
    build(
        pipeline,
        corpus=config.corpus,
        manifest=manifest,
        groups={LEARN: config.splits, MEASURE: (config.measure_split,)},
        cased=config.cased,
        out=out,
        num_shards=config.num_count_shards,
    )
    run_pipeline(pipeline, config.output)
