"""``pipelines show``: a completed documents output's summary and a few sample documents."""

from __future__ import annotations

import itertools

from pipelines import files
from schemas import DOCUMENTS, STATS_FILE
from schemas.inputs import field, loads


def describe(folder: str, num_samples: int = 3, num_sentences: int = 3) -> list[str]:
    """Lines describing an output: rows per split, stats, and the first sentences of a few documents."""
    manifest = files.load_manifest(folder, DOCUMENTS.name)
    path = files.join(folder, STATS_FILE)
    stats = loads(files.read_bytes(path), path)
    sentences, words = (field(stats, key, int, path) for key in ("sentences", "words"))
    dropped, rejected = (field(stats, key, dict, path) for key in ("dropped", "rejected"))
    lines = [f"{folder}: {manifest.producer}, {len(manifest.shards)} shards"]
    lines += [f"  {split}: {manifest.num_rows(split):,} documents" for split in manifest.splits()]
    lines.append(f"  {sentences:,} sentences, {words:,} words; dropped {dropped}, rejected {rejected}")
    shards = ((files.join(folder, s.path), s.sha256) for s in manifest.shards)
    for doc in itertools.islice(
        (d for shard in shards for d in files.read_document_shard(shard)), num_samples
    ):
        lines.append(
            f"- {doc['title']!r} ({doc['source']}, {doc['num_sentences']} sentences, id {doc['doc_id']})"
        )
        lines.extend(f"    | {sentence}" for sentence in doc["sentences"][:num_sentences])
    return lines
