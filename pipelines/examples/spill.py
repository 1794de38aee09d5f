"""Spilling the bulk of ``pipelines examples`` to temporary files, so only references (a
:class:`SpillRef` per piece, as a plain tuple) are shuffled, on disk too (``GroupOnDisk``): Beam's
local runners hold every shuffled PCollection in memory. Documents and requests are ``.npz``
archives, read with ``allow_pickle=False``; a reference names a file of the run's folder only.
"""

from __future__ import annotations

import io
import re
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from pipelines import files
from pipelines.examples.batches import Requests
from pipelines.examples.pairs import TokenizedDocument
from schemas.commands import InputError

SPILL_SUFFIX = ".spill"
_SPILL_NAME = re.compile(r"[0-9a-f]{32}\.spill")


class SpillRef(NamedTuple):
    """Where one spilled piece lies: ``length`` bytes at ``offset`` of the file ``name`` in the folder."""

    name: str
    offset: int
    length: int


def run_folder(base: str) -> str:
    """A new folder for one run's temporary files under ``base`` (nothing is created yet)."""
    return files.join(base, f"examples-{uuid.uuid4().hex}")


def spill(folder: str | None, pieces: Sequence[tuple[Any, bytes]]) -> list[tuple[Any, tuple | bytes]]:
    """Write ``(key, bytes)`` pieces back to back into one new file under ``folder`` (None: spilling off,
    the pieces go through the shuffle); the key and the reference of each (a :class:`SpillRef`'s
    fields: a plain tuple is shuffled compactly), in order."""
    if folder is None or not pieces:
        return list(pieces)
    name = f"{uuid.uuid4().hex}{SPILL_SUFFIX}"
    refs, offset = [], 0
    for key, data in pieces:
        refs.append((key, (name, offset, len(data))))
        offset += len(data)
    files.write_bytes(files.join(folder, name), [data for _, data in pieces], sync=False)
    return refs


def read_spilled(pieces: Iterable[Sequence | bytes], folder: str | None) -> Iterator[bytes]:
    """The bytes of each piece: those that travelled as bytes first, then the spilled ones (references
    to files of ``folder``, checked), file by file."""
    by_name: dict[str, list[SpillRef]] = {}
    for piece in pieces:
        if isinstance(piece, bytes):
            yield piece
            continue
        ref = SpillRef(*piece) if isinstance(piece, (list, tuple)) and len(piece) == 3 else None
        if (
            ref is None
            or not _SPILL_NAME.fullmatch(str(ref.name))
            or not all(type(v) is int and v >= 0 for v in ref[1:])
        ):
            raise InputError(f"{folder}: {str(piece)[:200]} is no reference to a file this run spilled")
        by_name.setdefault(ref.name, []).append(ref)
    for name in sorted(by_name):
        path = files.join(folder, name)
        with files.open_binary(path) as f:
            for ref in sorted(by_name[name], key=lambda r: r.offset):
                f.seek(ref.offset)
                data = f.read(ref.length)
                if len(data) != ref.length:
                    raise InputError(
                        f"{path}: temporary file ends at {ref.offset + len(data)} bytes, a piece needs "
                        f"{ref.offset + ref.length}; it was changed or removed while the run went on"
                    )
                yield data


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _load_npz(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def documents_to_bytes(documents: Sequence[TokenizedDocument]) -> bytes:
    """Tokenised documents as one ``.npz``: their ids, tokens and sentence offsets back to back."""
    return _npz(
        {
            "doc_ids": np.array([d.doc_id for d in documents], dtype=str),
            "num_tokens": np.array([len(d.tokens) for d in documents], dtype=np.int64),
            "num_offsets": np.array([len(d.offsets) for d in documents], dtype=np.int64),
            "tokens": np.concatenate([d.tokens for d in documents]),
            "offsets": np.concatenate([d.offsets for d in documents]),
        }
    )


def documents_from_bytes(data: bytes) -> list[TokenizedDocument]:
    """What :func:`documents_to_bytes` wrote, the same ids, arrays and dtypes."""
    arrays = _load_npz(data)
    tokens = np.split(arrays["tokens"], np.cumsum(arrays["num_tokens"])[:-1])
    offsets = np.split(arrays["offsets"], np.cumsum(arrays["num_offsets"])[:-1])
    return [
        TokenizedDocument(doc_id, t, o)
        for doc_id, t, o in zip(arrays["doc_ids"].tolist(), tokens, offsets, strict=True)
    ]


def requests_to_bytes(requests: Requests) -> bytes:
    """Random-next requests as one ``.npz``, a member per field (document ids as text)."""
    arrays = requests._asdict()
    arrays["doc_ids"] = arrays["doc_ids"].astype(str)
    return _npz(arrays)


def requests_from_bytes(data: bytes) -> Requests:
    """What :func:`requests_to_bytes` wrote, document ids as Python strings again."""
    arrays = _load_npz(data)
    arrays["doc_ids"] = arrays["doc_ids"].astype(object)
    return Requests(**arrays)
