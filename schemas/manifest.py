"""The manifest every stage writes beside its shards, and the ``COMPLETED`` marker.

An output folder is complete only when ``COMPLETED`` exists and holds the SHA-256 of
``manifest.json``; the marker is written last, so a crash never leaves an output that looks
finished. ``manifest.json`` lists every shard with its split, row count, size and SHA-256.

Outputs whose records are token ids (``examples``) name the vocabulary those ids index:
``params.vocab_sha256`` (required: its identity), ``params.cased`` and ``vocab_file``, the copy
in the folder (``vocab.txt``) with its size and SHA-256, so moved shards need nothing beside them.
Every problem is a :class:`~schemas.commands.InputError` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from schemas.commands import InputError

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
_PATH_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=+-]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")


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
    """What an ``examples`` manifest says of the vocabulary its token ids index: ``sha256``
    (``params.vocab_sha256``: the SHA-256 of the tokens in id order joined by newlines), ``cased``
    (``params.cased``; None: not recorded), ``source`` (``params.vocab``: where it was read) and
    ``copy`` (``vocab_file``; None for outputs written before shards carried one)."""

    sha256: str
    cased: bool | None
    source: str | None
    copy: VocabFile | None


def manifest_vocabulary(manifest: Manifest, source: str) -> ManifestVocabulary:
    """The vocabulary fields of a manifest, checked (``params.vocab_sha256`` required, 64
    lower-case hex digits; ``params.cased`` true or false and ``params.vocab`` a string when
    present); :class:`InputError` naming ``source`` otherwise."""
    params = manifest.params
    damaged = "the manifest is damaged: write the shards again (pipelines examples), or copy them again"
    recorded, cased, vocab = params.get("vocab_sha256"), params.get("cased"), params.get("vocab")
    if recorded is None:
        problem = "no params.vocab_sha256 (the SHA-256 of the vocabulary the token ids index)"
    elif not isinstance(recorded, str) or not _SHA256.fullmatch(recorded):
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
    index: IndexReference | None = None
    """The record-batch index (``examples`` outputs); absent from the JSON when None."""
    vocab_file: VocabFile | None = None
    """The vocabulary copy (``examples`` outputs); absent from the JSON when None."""

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
        """Deterministic JSON text (sorted keys, shards in path order; no ``index`` or
        ``vocab_file`` key when there is none, so such manifests keep their bytes)."""
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
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as err:
            raise InputError(f"{source}: not valid JSON ({err})") from None
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
    """Why ``path`` is not a safe file path inside an output folder, or None: it must be a
    relative POSIX path whose parts are letters, digits and ``_.=+-`` not starting with a dot (no
    absolute path, URL, ``..``, ``.``, empty part, backslash or control character)."""
    if not isinstance(path, str) or not path:
        return f"the path {path!r} is not a non-empty string"
    if len(path) > 1024 or not all(_PATH_PART.fullmatch(part) for part in path.split("/")):
        return f"the path {path!r} is not a relative path inside the folder"
    return None


def _entry(data: object, kind: type, source: str) -> Any:
    """A manifest's shard entry, index reference or vocabulary file, every field checked: exactly
    its keys, a safe relative path, strings, non-negative integers that are not booleans, a hex
    SHA-256, a vocabulary copy of at most :data:`MAX_VOCAB_FILE_BYTES`."""
    keys = [f.name for f in fields(kind)]
    if not isinstance(data, dict) or set(data) != set(keys):
        problem = f"not an object with exactly the keys {', '.join(sorted(keys))}"
    else:
        problem = relative_path_problem(data["path"])
    for key in keys[1:] if problem is None else ():
        value, counted = data[key], key in ("num_rows", "num_bytes")
        if counted and (type(value) is not int or value < 0):
            problem = f"{key} {value!r:.80} is not a non-negative integer"
        elif key == "sha256" and not (isinstance(value, str) and _SHA256.fullmatch(value)):
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
    """Whether the local file ``folder/relative`` resolves, through symlinks, to a place outside
    ``folder`` (also resolved); always False for a URL (no symlinks). ``relative`` must have passed
    :func:`relative_path_problem`."""
    if "://" in folder and not folder.startswith("file://"):
        return False
    root = os.path.realpath(folder.removeprefix("file://"))
    return os.path.commonpath([root, os.path.realpath(os.path.join(root, relative))]) != root


def absolute_reference(path: str) -> str:
    """``path`` as a manifest records it: a URL as given, a local path made absolute, so that a
    reader started in another folder finds the same file."""
    return path if "://" in path else os.path.abspath(os.path.expanduser(path))


def completed_marker(manifest_json: str) -> str:
    """The content of ``COMPLETED`` for a manifest: its SHA-256 on one line."""
    return hashlib.sha256(manifest_json.encode("utf-8")).hexdigest() + "\n"


def verify_completed(
    manifest_text: str, marker_text: str | None, folder: str, expected_format: str
) -> Manifest:
    """Check a stage output's marker (the content of ``COMPLETED``; None when it is missing)
    against its manifest and return the manifest; errors name the folder and say what to do."""
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
