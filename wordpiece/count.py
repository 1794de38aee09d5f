"""The distributed part of vocabulary training: a Beam pipeline that counts the words of the
corpus splits after BERT's normalisation and pre-tokenisation (``pre_tokenize``) into sorted
``word_counts`` Arrow files, for the learning splits and the measurement split side by side, so
training and its statistics never read the text again.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.localfilesystem import LocalFileSystem
from apache_beam.options.pipeline_options import PipelineOptions, S3Options

from schemas import DOCUMENTS, WORD_COUNTS, Manifest
from schemas.commands import InputError
from schemas.files import temporary_name, write_error, write_local_file
from schemas.outputs import journal
from wordpiece.tokenizer import pre_tokenize

COUNTS_FOLDER = "word_counts"


def s3_storage_options(options: PipelineOptions) -> dict[str, Any]:
    """fsspec's (s3fs') options for the server and credentials that Beam's ``S3Options`` name."""
    s3 = options.view_as(S3Options)
    client = {
        k: v for k, v in (("endpoint_url", s3.s3_endpoint_url), ("region_name", s3.s3_region_name)) if v
    }
    if s3.s3_verify is not None:
        client["verify"] = s3.s3_verify
    found: dict[str, Any] = {"client_kwargs": client} if client else {}
    for ours, theirs in (
        ("key", "s3_access_key_id"),
        ("secret", "s3_secret_access_key"),
        ("token", "s3_session_token"),
    ):
        if getattr(s3, theirs):
            found[ours] = getattr(s3, theirs)
    if s3.s3_disable_ssl:
        found["use_ssl"] = False
    return found


def read_bytes(path: str) -> bytes:
    """Read a whole file through Beam's filesystems (local or bucket), uncompressed."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def write_bytes(path: str, data: bytes | Sequence[bytes]) -> None:
    """The Beam side's one writer: ``data`` (bytes or pieces of them) whole or nothing under its name
    (locally and on ``s3://``, whose multipart upload completes even after a failed part, through a
    temporary name renamed once whole); a failure is a ``WriteError``."""
    chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    try:
        if isinstance(FileSystems.get_filesystem(path), LocalFileSystem):
            write_local_file(path, chunks)  # journaled there
            return
        journal(path)
        if path.startswith("gs://"):
            _upload(path, chunks)
        else:
            folder, name = path.rsplit("/", 1)
            temp = f"{folder}/{temporary_name(name)}"
            try:
                _upload(temp, chunks)
                FileSystems.rename([temp], [path])
            except BaseException:
                with contextlib.suppress(Exception):
                    FileSystems.delete([temp])
                raise
    except OSError as err:  # Beam's BeamIOError is one too
        raise write_error(err, path) from None


def _upload(path: str, chunks: Sequence[bytes]) -> None:
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for chunk in chunks:
            f.write(chunk)


def read_documents(shard: tuple[str, str]) -> Iterator[list[str]]:
    """The sentences of every document in one corpus shard, a record batch at a time, refusing a
    damaged shard."""
    path, expected_sha256 = shard
    data = read_bytes(path)
    if hashlib.sha256(data).hexdigest() != expected_sha256:
        raise InputError(f"{path}: checksum differs from its manifest; the corpus was modified or damaged")
    for table in DOCUMENTS.read_ipc_batches(data, source=path):
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
    path = FileSystems.join(output, relative)
    table = WORD_COUNTS.to_table(({"word": w, "count": c} for w, c in rows), source=path)
    write_bytes(path, WORD_COUNTS.to_ipc_bytes(table, source=path))
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
            | "Read documents" >> beam.FlatMap(read_documents)
            | "Count in document" >> beam.FlatMap(document_word_counts, cased)
            | "Sum per word" >> beam.CombinePerKey(sum)
        )


class WriteCounts(beam.PTransform):
    """Write ``(word, count)`` pairs into exactly ``num_shards`` sorted files; emit their paths."""

    def __init__(self, output: str, group: str, num_shards: int):
        super().__init__()
        self._output, self._group, self._num_shards = output, group, num_shards

    def expand(self, counts):
        n = self._num_shards
        journal(*(FileSystems.join(self._output, counts_shard_name(self._group, i, n)) for i in range(n)))
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
        (FileSystems.join(folder, s.path), s.sha256) for split in splits for s in manifest.shards_for(split)
    )


def build(
    pipeline: beam.Pipeline,
    *,
    corpus: str,
    manifest: Manifest,
    groups: dict[str, tuple[str, ...]],
    cased: bool,
    output: str,
    num_shards: int,
) -> None:
    """Count words for each group of splits (for example ``learn`` and ``measure``)."""
    for group, splits in groups.items():
        _ = (
            pipeline
            | f"{group}: shards" >> beam.Create(corpus_shards(corpus, manifest, splits))
            | f"{group}: count" >> CountWords(cased)
            | f"{group}: write" >> WriteCounts(output, group, num_shards)
        )
