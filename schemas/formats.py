"""Versioned Arrow record formats, one definition for every writer and reader: tables are validated
before a byte is written and when read; every error is an InputError naming the file."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.ipc as ipc

from schemas.commands import InputError

FORMAT_KEY = b"format"
VERSION_KEY = b"format_version"
BATCH_ROWS = 1024  # rows per record batch of a file that to_ipc_bytes writes (the last may hold fewer)


def batch_row_counts(num_rows: int) -> list[int]:
    """The row counts of the record batches ``to_ipc_bytes`` writes for a one-chunk table."""
    return [min(BATCH_ROWS, num_rows - first) for first in range(0, num_rows, BATCH_ROWS)]


RowCheck = Callable[[pa.Table], list[str]]
_ZSTD = ipc.IpcWriteOptions(compression="zstd")


class _Pieces(list):
    """A write-only file that keeps each piece written."""

    closed = False

    def write(self, data) -> int:
        self.append(bytes(data))
        return len(data)


@dataclass(frozen=True)
class RecordFormat:
    """An Arrow schema with a name and a version, plus row-level checks."""

    name: str
    version: int
    fields: tuple[pa.Field, ...]
    row_checks: tuple[RowCheck, ...] = field(default=())

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema, with the format name and version in its metadata."""
        return pa.schema(
            list(self.fields),
            metadata={FORMAT_KEY: self.name.encode(), VERSION_KEY: str(self.version).encode()},
        )

    def to_table(self, rows: Iterable[Mapping[str, Any]], source: str = "<rows>") -> pa.Table:
        """Build a validated table from row dicts (missing nullable fields become null)."""
        rows = list(rows)
        columns = {f.name: [row.get(f.name) for row in rows] for f in self.fields}
        try:
            table = pa.table(columns, schema=self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
            raise InputError(
                f"{source}: rows do not fit the {self.name} v{self.version} schema: {err}"
            ) from None
        self.validate(table, source)
        return table

    def validate(self, table: pa.Table, source: str) -> None:
        """Raise ``InputError`` unless ``table`` has exactly this schema and passes the row checks."""
        metadata = table.schema.metadata or {}
        found_name, found_version = (metadata.get(key, b"").decode() for key in (FORMAT_KEY, VERSION_KEY))
        if found_name != self.name:
            raise InputError(
                f"{source}: expected a '{self.name}' file, found format '{found_name or 'unknown'}'"
            )
        if found_version != str(self.version):
            raise InputError(
                f"{source}: '{self.name}' format version {found_version or 'unknown'} is not supported "
                f"(this code reads version {self.version}); regenerate the file with this version"
            )
        if not table.schema.equals(self.schema, check_metadata=False):
            raise InputError(
                f"{source}: columns do not match the '{self.name}' v{self.version} schema: "
                f"expected {self.schema.to_string(show_schema_metadata=False)!r}, "
                f"found {table.schema.to_string(show_schema_metadata=False)!r}"
            )
        problems = [problem for check in self.row_checks for problem in check(table)]
        for f in self.fields:
            if not f.nullable and table.column(f.name).null_count:
                problems.append(f"column '{f.name}' has {table.column(f.name).null_count} nulls")
        if problems:
            raise InputError(f"{source}: invalid '{self.name}' rows: " + "; ".join(problems))

    def to_ipc_bytes(self, table: pa.Table, source: str) -> bytes:
        """Validate and serialise ``table`` as an Arrow IPC file (deterministic bytes)."""
        return b"".join(self.ipc_chunks([table], source))

    def ipc_chunks(self, tables: Iterable[pa.Table], source: str) -> Iterator[bytes]:
        """Validate ``tables`` and serialise them as one Arrow IPC file, as ``to_ipc_bytes`` does, its
        bytes given out as they are written: a writer holds one table at a time."""
        sink = _Pieces()
        with ipc.new_file(pa.PythonFile(sink, mode="w"), self.schema, options=_ZSTD) as writer:
            for table in tables:
                self.validate(table, source)
                writer.write_table(table, max_chunksize=BATCH_ROWS)
                yield from sink
                sink.clear()
        yield from sink

    def read_ipc_batches(self, data: bytes | BinaryIO, source: str) -> Iterator[pa.Table]:
        """The record batches of an Arrow IPC file written by ``to_ipc_bytes`` (its bytes, or the file
        opened: then only a batch at a time is read), each decoded and validated when reached (as a
        table), so that one batch at a time is held decoded."""
        try:
            reader = ipc.open_file(pa.py_buffer(data) if isinstance(data, bytes) else data)
            self.validate(reader.schema.empty_table(), source)
            for index in range(reader.num_record_batches):
                table = pa.Table.from_batches([reader.get_batch(index)])
                self.validate(table, source)
                yield table
        except (pa.ArrowInvalid, OSError) as err:
            raise InputError(f"{source}: not a readable Arrow IPC file ({err})") from None

    def read_ipc(self, data: bytes | BinaryIO, source: str) -> pa.Table:
        """Read and validate an Arrow IPC file written by ``to_ipc_bytes``."""
        buffer = pa.py_buffer(data) if isinstance(data, bytes) else data
        try:
            table = ipc.open_file(buffer).read_all()
        except (pa.ArrowInvalid, OSError) as err:
            raise InputError(f"{source}: not a readable Arrow IPC file ({err})") from None
        self.validate(table, source)
        return table
