"""The manifest every stage writes beside its shards, and the ``COMPLETED`` marker.

An output folder is complete only when ``COMPLETED`` exists and holds the SHA-256 of
``manifest.json``; the marker is written last, so a crash never leaves an output that looks
finished. ``manifest.json`` lists every shard with its split, row count, size and SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

MANIFEST_VERSION = 1
MANIFEST_FILE = "manifest.json"
STATS_FILE = "stats.json"
COMPLETED_FILE = "COMPLETED"


class ManifestError(ValueError):
    """A manifest is missing, malformed or does not match the files beside it."""


@dataclass(frozen=True)
class ShardEntry:
    """One data file of an output: its path relative to the output folder and its checksum."""

    path: str
    format: str
    split: str
    num_rows: int
    num_bytes: int
    sha256: str


@dataclass(frozen=True)
class IndexReference:
    """The record-batch index file of an output (``schemas.index``): its path, size and SHA-256."""

    path: str
    num_bytes: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """What a stage wrote: record format, producing command, parameters and shards."""

    format: str
    format_version: int
    producer: str
    params: dict[str, Any]
    shards: tuple[ShardEntry, ...]
    rejects: tuple[ShardEntry, ...] = field(default=())
    manifest_version: int = MANIFEST_VERSION
    index: IndexReference | None = None
    """The record-batch index (``examples`` outputs since it exists); absent from the JSON when None."""

    def splits(self) -> list[str]:
        """The split names present, in first-seen order."""
        return list(dict.fromkeys(s.split for s in self.shards))

    def shards_for(self, split: str) -> list[ShardEntry]:
        """The data shards of one split."""
        return [s for s in self.shards if s.split == split]

    def num_rows(self, split: str | None = None) -> int:
        """Rows over all shards, or over one split's shards."""
        return sum(s.num_rows for s in self.shards if split is None or s.split == split)

    def to_json(self) -> str:
        """Deterministic JSON text (sorted keys, shards in path order)."""
        data = asdict(self)
        data["shards"] = sorted(data["shards"], key=lambda s: s["path"])
        data["rejects"] = sorted(data["rejects"], key=lambda s: s["path"])
        if data["index"] is None:
            del data["index"]  # manifests without an index keep their old bytes (and COMPLETED)
        return json.dumps(data, sort_keys=True, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str) -> Manifest:
        """Parse and validate manifest JSON; errors name ``source``."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ManifestError(f"{source}: not valid JSON ({err})") from None
        if not isinstance(data, dict):
            raise ManifestError(f"{source}: a manifest is a JSON object")
        version = data.get("manifest_version")
        if version != MANIFEST_VERSION:
            raise ManifestError(
                f"{source}: manifest version {version!r} is not supported (this code reads {MANIFEST_VERSION})"
            )
        try:
            return cls(
                format=str(data["format"]),
                format_version=int(data["format_version"]),
                producer=str(data["producer"]),
                params=dict(data["params"]),
                shards=tuple(ShardEntry(**s) for s in data["shards"]),
                rejects=tuple(ShardEntry(**s) for s in data.get("rejects", [])),
                index=IndexReference(**data["index"]) if data.get("index") is not None else None,
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ManifestError(f"{source}: malformed manifest ({type(err).__name__}: {err})") from None


def absolute_reference(path: str) -> str:
    """``path`` as a manifest records it: a URL (``gs://``, ``s3://``, ...) as given, a local
    path made absolute, so that a reader started in another folder finds the same file."""
    if "://" in path:
        return path
    return os.path.abspath(os.path.expanduser(path))


def completed_marker(manifest_json: str) -> str:
    """The content of ``COMPLETED`` for a manifest: its SHA-256 on one line."""
    return hashlib.sha256(manifest_json.encode("utf-8")).hexdigest() + "\n"


def verify_completed(
    manifest_text: str, marker_text: str | None, folder: str, expected_format: str
) -> Manifest:
    """Check a stage output's marker against its manifest and return the manifest.

    ``marker_text`` is the content of ``COMPLETED`` (None when the file is missing). Errors name
    the folder and say what to do.
    """
    if marker_text is None:
        raise ManifestError(
            f"{folder}: not a completed stage output (no {COMPLETED_FILE} marker); "
            "run the stage that writes it, or let an interrupted run finish"
        )
    if marker_text != completed_marker(manifest_text):
        raise ManifestError(
            f"{folder}: {COMPLETED_FILE} does not match {MANIFEST_FILE}; the output was modified"
        )
    manifest = Manifest.from_json(manifest_text, f"{folder}/{MANIFEST_FILE}")
    if manifest.format != expected_format:
        raise ManifestError(f"{folder}: holds '{manifest.format}' records, expected '{expected_format}'")
    return manifest
