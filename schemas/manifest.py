"""The manifest every stage writes beside its shards, and the ``COMPLETED`` marker.

An output folder is complete only when ``COMPLETED`` exists and holds the SHA-256 of
``manifest.json``; the marker is written last, so a crash never leaves an output that looks
finished. ``manifest.json`` lists every shard with its split, row count, size and SHA-256.

Outputs whose records are token ids (``examples``) name the vocabulary those ids index:
``params.vocab_sha256`` (required: its identity, :class:`ManifestVocabulary`), ``params.cased``
and, since shards carry their vocabulary, ``vocab_file``: the copy in the folder (``vocab.txt``)
with its size and SHA-256, so shards moved to another machine need nothing beside them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

MANIFEST_VERSION = 1
MANIFEST_FILE = "manifest.json"
STATS_FILE = "stats.json"
COMPLETED_FILE = "COMPLETED"
VOCAB_FILE = "vocab.txt"
"""The vocabulary an ``examples`` output carries: one token per line in id order."""
VOCAB_FORMATS = frozenset({"examples"})
"""Record formats of token ids: their manifests must name the vocabulary by ``params.vocab_sha256``."""
MAX_VOCAB_FILE_BYTES = 64 << 20
"""The largest vocabulary copy a manifest may name (a million tokens take about 10 MB)."""


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
class VocabFile:
    """The vocabulary copy of an ``examples`` output: its path inside the output folder, its size and
    the SHA-256 of its bytes (what ``COMPLETED``, through the manifest, vouches for)."""

    path: str
    num_bytes: int
    sha256: str


@dataclass(frozen=True)
class ManifestVocabulary:
    """What an ``examples`` manifest says of the vocabulary its token ids index."""

    sha256: str
    """``params.vocab_sha256``: SHA-256 of the tokens in id order joined by newlines (the
    vocabulary's identity, the same for its vocab.txt and tokenizer.json)."""
    cased: bool | None
    """``params.cased``: whether the text was tokenised cased (None: not recorded)."""
    source: str | None
    """``params.vocab``: where ``pipelines examples`` read it (an absolute path or URL)."""
    copy: VocabFile | None
    """``vocab_file``: the copy inside the output; None for outputs written before shards carried it."""


def manifest_vocabulary(manifest: Manifest, source: str) -> ManifestVocabulary:
    """The vocabulary fields of a manifest, checked: ``params.vocab_sha256`` is required (64
    lower-case hex digits), ``params.cased`` is true or false and ``params.vocab`` a string when
    present. Raises :class:`ManifestError`, one line naming ``source``."""
    params = manifest.params
    damaged = "the manifest is damaged: write the shards again (pipelines examples), or copy them again"
    recorded = params.get("vocab_sha256")
    if recorded is None:
        raise ManifestError(
            f"{source}: no params.vocab_sha256 (the SHA-256 of the vocabulary the token ids index); {damaged}"
        )
    if not isinstance(recorded, str) or not _SHA256.fullmatch(recorded):
        raise ManifestError(
            f"{source}: params.vocab_sha256 is {json.dumps(recorded)[:80]}, not a SHA-256 (64 hex digits); {damaged}"
        )
    cased, vocab = params.get("cased"), params.get("vocab")
    if cased is not None and not isinstance(cased, bool):
        raise ManifestError(
            f"{source}: params.cased is {json.dumps(cased)[:80]}, not true or false; {damaged}"
        )
    if vocab is not None and not isinstance(vocab, str):
        raise ManifestError(f"{source}: params.vocab is {json.dumps(vocab)[:80]}, not a path; {damaged}")
    return ManifestVocabulary(recorded, cased, vocab, manifest.vocab_file)


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
    vocab_file: VocabFile | None = None
    """The vocabulary copy (``examples`` outputs since they carry one); absent from the JSON when None."""

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
        for optional in ("index", "vocab_file"):
            if data[optional] is None:
                del data[optional]  # manifests without one keep their old bytes (and COMPLETED)
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
        for key in ("shards", "rejects"):
            if not isinstance(data.get(key, []), list):
                raise ManifestError(f"{source}: {key} is not a list")
        try:
            manifest = cls(
                format=str(data["format"]),
                format_version=int(data["format_version"]),
                producer=str(data["producer"]),
                params=dict(data["params"]),
                shards=tuple(shard_entry(s, source) for s in data["shards"]),
                rejects=tuple(shard_entry(s, source) for s in data.get("rejects", [])),
                index=_index_reference(data["index"], source) if data.get("index") is not None else None,
                vocab_file=_vocab_file(data["vocab_file"], source)
                if data.get("vocab_file") is not None
                else None,
            )
        except ManifestError:
            raise
        except (KeyError, TypeError, ValueError) as err:
            raise ManifestError(f"{source}: malformed manifest ({type(err).__name__}: {err})") from None
        if manifest.format in VOCAB_FORMATS:
            manifest_vocabulary(manifest, source)  # token ids are never read without their vocabulary
        return manifest


_PATH_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=+-]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def relative_path_problem(path: object) -> str | None:
    """Why ``path`` is not a safe file path inside an output folder, or None: it must be a
    relative POSIX path whose parts are letters, digits and ``_.=+-`` not starting with a dot (no
    absolute path, URL, ``..``, ``.``, empty part, backslash or control character)."""
    if not isinstance(path, str) or not path:
        return f"the path {path!r} is not a non-empty string"
    if len(path) > 1024 or not all(_PATH_PART.fullmatch(part) for part in path.split("/")):
        return f"the path {path!r} is not a relative path inside the folder"
    return None


def shard_entry(data: object, source: str) -> ShardEntry:
    """A manifest's shard entry, its path checked (:func:`relative_path_problem`) and its fields
    typed (strings, non-negative integers that are not booleans, a hex SHA-256); errors name
    ``source``."""
    problem = _entry_problem(data, ShardEntry, ("format", "split"))
    if problem is not None:
        name = data.get("path") if isinstance(data, dict) else None
        raise ManifestError(f"{source}: shard {name!r:.200}: {problem}")
    return ShardEntry(**data)


def _vocab_file(data: object, source: str) -> VocabFile:
    """The manifest's ``vocab_file``, checked as :func:`shard_entry` checks a shard, its size at
    most :data:`MAX_VOCAB_FILE_BYTES`."""
    problem = _entry_problem(data, VocabFile, ())
    if problem is None and data["num_bytes"] > MAX_VOCAB_FILE_BYTES:  # type: ignore[index]
        problem = f"num_bytes {data['num_bytes']} is above {MAX_VOCAB_FILE_BYTES:,}"  # type: ignore[index]
    if problem is not None:
        raise ManifestError(
            f"{source}: vocab_file: {problem}; the manifest is damaged: copy the shards again"
        )
    return VocabFile(**data)  # type: ignore[arg-type]


def _index_reference(data: object, source: str) -> IndexReference:
    """The manifest's reference to its record-batch index, checked as :func:`shard_entry` checks a
    shard."""
    problem = _entry_problem(data, IndexReference, ())
    if problem is not None:
        raise ManifestError(f"{source}: index: {problem}")
    return IndexReference(**data)


def _entry_problem(data: object, kind: type, strings: tuple[str, ...]) -> str | None:
    """What is wrong with a JSON object meant to be a ``kind`` (``path``, ``num_bytes``,
    ``sha256`` and, for a shard, ``num_rows`` and the ``strings``), or None."""
    keys = set(kind.__dataclass_fields__)
    if not isinstance(data, dict) or set(data) != keys:
        return f"not an object with exactly the keys {', '.join(sorted(keys))}"
    problem = relative_path_problem(data["path"])
    for key in strings:
        if problem is None and not isinstance(data[key], str):
            problem = f"{key} {data[key]!r:.80} is not a string"
    for key in ("num_rows", "num_bytes"):
        if problem is None and key in keys and (type(data[key]) is not int or data[key] < 0):
            problem = f"{key} {data[key]!r:.80} is not a non-negative integer"
    if problem is None and not (isinstance(data["sha256"], str) and _SHA256.fullmatch(data["sha256"])):
        problem = f"sha256 {data['sha256']!r:.80} is not a hex SHA-256"
    return problem


def bytes_match(data: bytes, entry: ShardEntry | IndexReference | VocabFile) -> bool:
    """Whether ``data`` is the file a manifest ``entry`` records: its size, then its SHA-256."""
    return len(data) == entry.num_bytes and hashlib.sha256(data).hexdigest() == entry.sha256


def path_leaves_folder(folder: str, relative: str) -> bool:
    """Whether the local file ``folder/relative`` resolves, through symlinks, to a place outside
    ``folder`` (also resolved); always False for a URL (``gs://``, ``s3://``, ``memory://``: no
    symlinks). ``relative`` must have passed :func:`relative_path_problem`."""
    if "://" in folder and not folder.startswith("file://"):
        return False
    root = os.path.realpath(folder.removeprefix("file://"))
    resolved = os.path.realpath(os.path.join(root, relative))
    return os.path.commonpath([root, resolved]) != root


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
