"""The manifest every stage writes beside its shards (each with its split, rows, size and SHA-256),
and the ``COMPLETED`` marker, written last, that holds the manifest's SHA-256. Outputs of token ids
(``examples``) name their vocabulary: ``params.vocab_sha256`` (required), ``params.cased`` and
``vocab_file``, the copy in the folder. Every problem is an InputError naming the file."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from schemas import storage
from schemas.commands import InputError
from schemas.inputs import loads

MANIFEST_VERSION = 1
MANIFEST_FILE = "manifest.json"
STATS_FILE = "stats.json"
COMPLETED_FILE = "COMPLETED"
VOCAB_FILE = "vocab.txt"  # the vocabulary an ``examples`` output carries: a token a line, in id order
VOCAB_FORMATS = frozenset({"examples"})  # formats of token ids: their manifests name the vocabulary
MAX_VOCAB_FILE_BYTES = 64 << 20  # the largest vocabulary copy a manifest names (a million tokens: 10 MB)
_PATH_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=+-]*")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


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
    """The vocabulary copy of an ``examples`` output: its path in the folder, size and SHA-256."""

    path: str
    num_bytes: int
    sha256: str


@dataclass(frozen=True)
class ManifestVocabulary:
    """An ``examples`` manifest's vocabulary: ``params.vocab_sha256`` (of the tokens in id order joined
    by newlines), ``params.cased`` and ``params.vocab`` (None: not recorded), and ``vocab_file``."""

    sha256: str
    cased: bool | None
    source: str | None
    copy: VocabFile | None


def manifest_vocabulary(manifest: Manifest, source: str) -> ManifestVocabulary:
    """The vocabulary fields of a manifest, checked; :class:`InputError` naming ``source``."""
    params = manifest.params
    damaged = "the manifest is damaged: write the shards again (pipelines examples), or copy them again"
    recorded, cased, vocab = params.get("vocab_sha256"), params.get("cased"), params.get("vocab")
    if recorded is None:
        problem = "no params.vocab_sha256 (the SHA-256 of the vocabulary the token ids index)"
    elif not isinstance(recorded, str) or not SHA256_HEX.fullmatch(recorded):
        problem = f"params.vocab_sha256 is {json.dumps(recorded)[:80]}, not a SHA-256 (64 hex digits)"
    elif cased is not None and not isinstance(cased, bool):
        problem = f"params.cased is {json.dumps(cased)[:80]}, not true or false"
    elif vocab is not None and not isinstance(vocab, str):
        problem = f"params.vocab is {json.dumps(vocab)[:80]}, not a path"
    else:
        return ManifestVocabulary(recorded, cased, vocab, manifest.vocab_file)
    raise InputError(f"{source}: {problem}; {damaged}")


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
    index: IndexReference | None = None  # ``examples`` outputs; absent from the JSON when None
    vocab_file: VocabFile | None = None  # ``examples`` outputs; absent from the JSON when None

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
        """Deterministic JSON text (sorted keys, shards in path order, no key for a None)."""
        data = asdict(self)
        for key in ("shards", "rejects"):
            data[key] = sorted(data[key], key=lambda s: s["path"])
        for optional in ("index", "vocab_file"):
            if data[optional] is None:
                del data[optional]
        return json.dumps(data, sort_keys=True, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str) -> Manifest:
        """Parse and validate manifest JSON; errors name ``source``."""
        data = loads(text, source)
        if not isinstance(data, dict):
            raise InputError(f"{source}: a manifest is a JSON object")
        if data.get("manifest_version") != MANIFEST_VERSION:
            raise InputError(
                f"{source}: manifest version {data.get('manifest_version')!r:.40} is not supported (this code "
                f"reads {MANIFEST_VERSION})"
            )
        for key in ("shards", "rejects"):
            if not isinstance(data.get(key, []), list):
                raise InputError(f"{source}: {key} is not a list")
        optional = {"index": IndexReference, "vocab_file": VocabFile}
        found = {
            key: _entry(data[key], kind, source)
            for key, kind in optional.items()
            if data.get(key) is not None
        }
        try:
            manifest = cls(
                format=str(data["format"]),
                format_version=int(data["format_version"]),
                producer=str(data["producer"]),
                params=dict(data["params"]),
                shards=tuple(_entry(s, ShardEntry, source) for s in data["shards"]),
                rejects=tuple(_entry(s, ShardEntry, source) for s in data.get("rejects", [])),
                **found,
            )
        except (KeyError, TypeError, ValueError) as err:
            raise InputError(f"{source}: malformed manifest ({type(err).__name__}: {err})") from None
        if manifest.format in VOCAB_FORMATS:
            manifest_vocabulary(manifest, source)  # token ids are never read without their vocabulary
        return manifest


def relative_path_problem(path: object) -> str | None:
    """Why ``path`` is not a safe relative path inside a folder (parts of letters, digits and ``_.=+-``,
    not starting with a dot), or None."""
    if not isinstance(path, str) or not path:
        return f"the path {path!r} is not a non-empty string"
    if len(path) > 1024 or not all(_PATH_PART.fullmatch(part) for part in path.split("/")):
        return f"the path {path!r} is not a relative path inside the folder"
    return None


def _entry(data: object, kind: type, source: str) -> Any:
    """A manifest's shard entry, index reference or vocabulary file, every field checked."""
    keys = [f.name for f in fields(kind)]
    if not isinstance(data, dict) or set(data) != set(keys):
        problem = f"not an object with exactly the keys {', '.join(sorted(keys))}"
    else:
        problem = relative_path_problem(data["path"])
    for key in keys[1:] if problem is None else ():
        value, counted = data[key], key.startswith("num_")
        if counted and (type(value) is not int or value < 0):
            problem = f"{key} {value!r:.80} is not a non-negative integer"
        elif key == "sha256" and not (isinstance(value, str) and SHA256_HEX.fullmatch(value)):
            problem = f"sha256 {value!r:.80} is not a hex SHA-256"
        elif not counted and not isinstance(value, str):
            problem = f"{key} {value!r:.80} is not a string"
        elif kind is VocabFile and key == "num_bytes" and value > MAX_VOCAB_FILE_BYTES:
            problem = f"num_bytes {value} is above {MAX_VOCAB_FILE_BYTES:,}"
        if problem is not None:
            break
    if problem is None:
        return kind(**data)
    if kind is ShardEntry:
        name = data.get("path") if isinstance(data, dict) else None
        raise InputError(f"{source}: shard {name!r:.200}: {problem}")
    if kind is VocabFile:
        raise InputError(f"{source}: vocab_file: {problem}; the manifest is damaged: copy the shards again")
    raise InputError(f"{source}: index: {problem}")


def bytes_match(data: bytes, entry: ShardEntry | IndexReference | VocabFile) -> bool:
    """Whether ``data`` is the file a manifest ``entry`` records: its size, then its SHA-256."""
    return len(data) == entry.num_bytes and hashlib.sha256(data).hexdigest() == entry.sha256


def path_leaves_folder(folder: str, relative: str) -> bool:
    """Whether the local file ``folder/relative`` resolves, through symlinks, outside ``folder``."""
    if "://" in folder and not folder.startswith("file://"):
        return False
    root = os.path.realpath(folder.removeprefix("file://"))
    return os.path.commonpath([root, os.path.realpath(os.path.join(root, relative))]) != root


def absolute_reference(path: str) -> str:
    """``path`` as a manifest records it: a URL as given, a local path made absolute."""
    return path if "://" in path else os.path.abspath(os.path.expanduser(path))


def completed_marker(manifest_json: str) -> str:
    """The content of ``COMPLETED`` for a manifest: its SHA-256 on one line."""
    return hashlib.sha256(manifest_json.encode("utf-8")).hexdigest() + "\n"


def verify_completed(
    manifest_text: str, marker_text: str | None, folder: str, expected_format: str
) -> Manifest:
    """The manifest of a completed output (``marker_text``: ``COMPLETED``'s, None if missing)."""
    if marker_text is None:
        raise InputError(
            f"{folder}: not a completed stage output (no {COMPLETED_FILE} marker); "
            "run the stage that writes it, or let an interrupted run finish"
        )
    if marker_text != completed_marker(manifest_text):
        raise InputError(
            f"{folder}: {COMPLETED_FILE} does not match {MANIFEST_FILE}; the output was modified"
        )
    manifest = Manifest.from_json(manifest_text, f"{folder}/{MANIFEST_FILE}")
    if manifest.format != expected_format:
        raise InputError(f"{folder}: holds '{manifest.format}' records, expected '{expected_format}'")
    return manifest


def load_completed(folder: str, expected_format: str) -> Manifest:
    """The manifest of the completed output at ``folder`` (a path or URL), refusing an incomplete
    or foreign one (:func:`verify_completed`); an unreadable one is an InputError naming it."""
    marker_path, manifest_path = storage.join(folder, COMPLETED_FILE), storage.join(folder, MANIFEST_FILE)
    try:
        marker = storage.read_bytes(marker_path).decode("utf-8") if storage.exists(marker_path) else None
        text = storage.read_bytes(manifest_path).decode("utf-8") if marker is not None else ""
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{manifest_path}: cannot read the manifest ({type(err).__name__}: {err})") from None
    return verify_completed(text, marker, folder, expected_format)
