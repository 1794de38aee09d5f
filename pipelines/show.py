"""Reading a completed documents output back: a summary and a few sample documents."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pipelines import io
from schemas import DOCUMENTS, STATS_FILE


def iter_documents(folder: str, split: str | None = None) -> Iterator[dict[str, Any]]:
    """Yield the documents of a completed output (one split, or all), shard by shard."""
    manifest = io.load_manifest(folder, DOCUMENTS.name)
    for shard in manifest.shards:
        if split is not None and shard.split != split:
            continue
        # Checked against the manifest's SHA-256 first: a damaged shard is one line, not a traceback.
        yield from io.read_document_shard((io.join(folder, shard.path), shard.sha256))


def describe(folder: str, num_samples: int = 3, num_sentences: int = 3) -> list[str]:
    """Lines describing an output: rows per split, stats, and the first sentences of a few documents."""
    manifest = io.load_manifest(folder, DOCUMENTS.name)
    stats = json.loads(io.read_bytes(io.join(folder, STATS_FILE)))
    lines = [f"{folder}: {manifest.producer}, {len(manifest.shards)} shards"]
    for split in manifest.splits():
        lines.append(f"  {split}: {manifest.num_rows(split):,} documents")
    lines.append(
        f"  {stats['sentences']:,} sentences, {stats['words']:,} words; dropped {stats['dropped']}, "
        f"rejected {stats['rejected']}"
    )
    for i, doc in enumerate(iter_documents(folder)):
        if i == num_samples:
            break
        lines.append(
            f"- {doc['title']!r} ({doc['source']}, {doc['num_sentences']} sentences, id {doc['doc_id']})"
        )
        lines.extend(f"    | {sentence}" for sentence in doc["sentences"][:num_sentences])
    return lines
