"""Spilling the bulk of ``pipelines examples`` to temporary files, so only references are shuffled.

Each DoFn writes what it produces to one new file (:func:`spill`: the pieces back to back) under
the run's temporary folder (local or a bucket, through Beam's filesystems) and sends a
:class:`SpillRef` per piece (path, offset, length) through the shuffle; the consumer reads back
its own pieces (:func:`read_spilled`). The folder is removed when the run ends, finished or failed
(:func:`remove_folder`). Runners whose shuffle keeps data out of memory (Dataflow, Flink, Spark)
need none of this: ``--spill auto`` spills on Beam's local runners only, and with no folder the
pieces travel through the shuffle as bytes. Documents and requests are ``.npz`` archives of numpy
arrays, read back with ``allow_pickle=False``.
"""

from __future__ import annotations

import io as bytes_io
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
from apache_beam.io.filesystems import FileSystems

from pipelines import io
from pipelines.examples.batches import Requests
from pipelines.examples.pairs import TokenizedDocument
from schemas.commands import InputError

TEMP_DIR = io.TEMP_DIR
"""The default temporary folder, inside the output (``--temp-location`` chooses another); an
``--overwrite`` run removes what a killed run left there."""
SPILL_SUFFIX = ".spill"


class SpillRef(NamedTuple):
    """Where one spilled piece lies: ``length`` bytes at ``offset`` of the file at ``path``."""

    path: str
    offset: int
    length: int


def run_folder(base: str) -> str:
    """A new folder for one run's temporary files under ``base`` (nothing is created yet)."""
    return io.join(base, f"examples-{uuid.uuid4().hex}")


def spill(folder: str | None, pieces: Sequence[tuple[Any, bytes]]) -> list[tuple[Any, SpillRef | bytes]]:
    """Write ``(key, bytes)`` pieces back to back into one new file under ``folder``; the key and
    the reference of each, in order. No file is written for no pieces; with no folder (spilling
    off) the pieces are returned as they are, to go through the shuffle themselves."""
    if folder is None or not pieces:
        return list(pieces)
    path = io.join(folder, f"{uuid.uuid4().hex}{SPILL_SUFFIX}")
    refs, offset = [], 0
    for key, data in pieces:
        refs.append((key, SpillRef(path, offset, len(data))))
        offset += len(data)
    io.write_bytes(path, [data for _, data in pieces])
    return refs


def read_spilled(pieces: Iterable[SpillRef | bytes]) -> Iterator[bytes]:
    """The bytes of each piece: those that travelled as bytes first, then the spilled ones, read
    file by file in offset order (each file opened once)."""
    by_path: dict[str, list[SpillRef]] = {}
    for piece in pieces:
        if isinstance(piece, SpillRef):
            by_path.setdefault(piece.path, []).append(piece)
        else:
            yield piece
    for path in sorted(by_path):
        with io.open_binary(path) as f:
            for ref in sorted(by_path[path], key=lambda r: r.offset):
                f.seek(ref.offset)
                data = f.read(ref.length)
                if len(data) != ref.length:
                    raise InputError(
                        f"{path}: temporary file ends at {ref.offset + len(data)} bytes, a piece needs "
                        f"{ref.offset + ref.length}; it was changed or removed while the run went on"
                    )
                yield data


def remove_folder(folder: str) -> int:
    """Delete ``folder`` and every file under it (local or bucket); how many files were deleted."""
    files = [m.path for m in FileSystems.match([io.join(folder, "**")])[0].metadata_list]
    if files:
        FileSystems.delete(files)
    if FileSystems.exists(folder):  # a local directory (buckets have no empty folders)
        FileSystems.delete([folder])
    return len(files)


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = bytes_io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _load_npz(data: bytes) -> dict[str, np.ndarray]:
    with np.load(bytes_io.BytesIO(data), allow_pickle=False) as archive:
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
