"""Records out of the files a corpus is published in: JSON Lines (plain, or ``.gz``, ``.zst``,
``.bz2``), Parquet, and the Arrow files of ``datasets`` (``save_to_disk``). A file is planned into
read tasks (a byte range of plain JSON Lines, a Parquet row group, else the whole file), each read
a line or a batch at a time, so memory is bounded by a batch, never by a file. A record that cannot
be used is a reject; a file that cannot be read on is one file error saying what was kept."""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import io
from pipelines.stage import FILE_ERROR, REJECTED, Outcome, reject_outcome
from schemas.inputs import MAX_LINE_BYTES

SOURCE = "documents"
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2"}
"""Compressed JSON Lines, decompressed by pyarrow's codecs as they are read (one task a file)."""
BATCH_ROWS = 1024
"""Rows of a Parquet batch converted at a time (an Arrow file's batches are its writer's)."""
_BLOCK_BYTES = 1 << 20
REQUIRED = ("--text-field", "--group-field")
"""The fields every record must have; an id or title may be absent or null."""


@dataclass(frozen=True)
class FilePart:
    """One unit of reading: a byte range of plain JSON Lines, Parquet row groups ``[start, end)``
    (the first one at row ``first_row``), or a whole file (``end`` None)."""

    path: str
    kind: str
    compression: str | None = None
    start: int = 0
    end: int | None = None
    first_row: int = 0


class Record(NamedTuple):
    """One row: its file, its position there (row, or byte of a JSON line read by range), the
    name rejects give it, and the named fields it has (``{name: value}``)."""

    path: str
    position: int
    name: str
    values: dict[str, Any]


def file_kind(path: str) -> tuple[str, str | None] | None:
    """``(kind, compression)`` of an input by its name: ``jsonl``, ``parquet`` or ``arrow``; None
    for a file of no format read here."""
    name = path.rsplit("/", 1)[-1].lower()
    compression = next((c for suffix, c in COMPRESSIONS.items() if name.endswith(suffix)), None)
    name = name.rsplit(".", 1)[0] if compression else name
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl", compression
    if compression is None and name.endswith((".parquet", ".arrow")):
        return name.rsplit(".", 1)[1], None
    return None


def plan_reads(path: str, fields: dict[str, str], bytes_per_read: int, whole: bool = False) -> list[FilePart]:
    """The read tasks of one file: a Parquet file's row groups; plain JSON Lines in ranges of
    ``bytes_per_read`` (unless ``whole``: rows then numbered from the file's start); else the file
    (which reports what is wrong with it as one file error)."""
    kind, compression = file_kind(path)
    if kind == "parquet":
        try:
            with io.open_binary(path) as f:
                parquet = pq.ParquetFile(f)
                metadata, problem = parquet.metadata, _column_problem(parquet.schema_arrow, fields, path)
        except Exception:  # Any error: the read of the whole file reports it.
            problem = True
        if problem:
            return [FilePart(path, kind)]
        tasks, first_row = [], 0
        for group in range(metadata.num_row_groups):
            tasks.append(FilePart(path, kind, None, group, group + 1, first_row))
            first_row += metadata.row_group(group).num_rows
        return tasks or [FilePart(path, kind)]
    if kind == "jsonl" and compression is None and not whole:
        with io.open_binary(path) as f:
            is_array = f.read(64).lstrip().startswith(b"[")
        size = io.file_size(path)
        if not is_array and size > bytes_per_read:
            starts = range(0, size, bytes_per_read)
            return [FilePart(path, kind, None, s, min(s + bytes_per_read, size)) for s in starts]
    return [FilePart(path, kind, compression)]


def iter_lines(f, offset: int, end: float, limit: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | None]]:
    """``(offset, line)`` for each line of ``f`` (read from ``offset``, a line start) that starts
    before ``end``, without its ``\\n``; a line longer than ``limit`` is ``None``, never held."""
    buf, at, line_start, too_long = b"", offset, offset, False  # at: the offset of buf[0]
    while line_start < end:
        block = f.read(_BLOCK_BYTES)
        buf += block
        pos = 0
        while (i := buf.find(b"\n", pos)) >= 0 and line_start < end:
            yield line_start, None if too_long or i - pos > limit else buf[pos:i]
            too_long, pos, line_start = False, i + 1, at + i + 1
        buf, at = buf[pos:], at + pos
        if len(buf) > limit:
            too_long, buf, at = True, b"", at + len(buf)
        if not block:
            if (buf or too_long) and line_start < end:
                yield line_start, None if too_long else buf
            return


def _closest(name: str, names: list[str]) -> str:
    """``"; the closest is 'x'"`` when one of ``names`` is close to ``name``."""
    found = difflib.get_close_matches(name, names, 1, cutoff=0.4)
    return f"; the closest is {found[0]!r}" if found else ""


def json_values(line: bytes, fields: dict[str, str]) -> dict[str, Any] | tuple[str, str]:
    """The named ``fields`` (name -> flag) of one JSON line (an absent id or title None), or
    ``(reason, detail)`` when it is no UTF-8 JSON object or lacks its text or group field."""
    try:
        record = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as err:
        return "undecodable", f"not UTF-8 at byte {err.start:,} of the line"
    except (ValueError, RecursionError) as err:
        return "not_json", f"not a JSON object ({str(err)[:200]})"
    if not isinstance(record, dict):
        return "not_json", f"a JSON {type(record).__name__}, not an object"
    for name, flag in fields.items():
        if name not in record and flag in REQUIRED:
            has = sorted(record)
            listed = ", ".join(has[:20]) + (" ..." if len(has) > 20 else "")
            return "missing_field", f"no field {name!r} ({flag}); its fields: {listed}{_closest(name, has)}"
    return {name: record.get(name) for name in fields}


def value_problem(values: dict[str, Any], fields: dict[str, str]) -> tuple[str, str] | None:
    """``(reason, detail)`` when a named field's value (read from JSON or a table) cannot be used: a
    null text or group, not valid UTF-8, of the wrong type (text and title: a string; id and group:
    a string or an integer) or an empty text."""
    for name, flag in fields.items():
        value, what = values[name], f"{flag} {name!r}"
        if value is None and flag in REQUIRED:
            return "missing_field", f"{what} is null"
        if value is None:
            continue
        if isinstance(value, bytes) or (isinstance(value, str) and not _is_utf8(value)):
            return "undecodable", f"{what} is not valid UTF-8"
        wants_text = flag in ("--text-field", "--title-field")
        if not isinstance(value, str) and (wants_text or type(value) is not int):
            wanted = "a string" if wants_text else "a string or an integer"
            return "wrong_type", f"{what} is of type {type(value).__name__}, not {wanted}"
        if flag == "--text-field" and not value.strip():
            return "empty_field", f"{what} is empty"
    return None


def _is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (JSON's ``\\ud800`` escapes give lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _reject(
    path: str, name: str, reason: str, detail: str, data: bytes = b"", kind: str = REJECTED
) -> Outcome:
    excerpt = data[:200].decode("utf-8", errors="replace") if data else None
    return reject_outcome(SOURCE, path, name, reason, detail, excerpt=excerpt, kind=kind)


def _jsonl(f, task: FilePart, fields: dict[str, str]) -> Iterator[Record | Outcome]:
    stream = (
        f if task.compression is None else pa.CompressedInputStream(pa.PythonFile(f, "r"), task.compression)
    )
    ranged = task.end is not None
    if task.start:
        f.seek(task.start - 1)
    lines = iter_lines(stream, max(task.start - 1, 0), task.end if ranged else math.inf)
    if task.start:
        next(lines, None)  # the end of the line that the range before reads
    row = 0
    for offset, line in lines:
        name = f"byte {offset}"
        if line is None:
            yield _reject(
                task.path, name, "line_too_long", f"longer than the limit of {MAX_LINE_BYTES:,} bytes"
            )
            continue
        if offset == 0 and line.lstrip().startswith(b"["):
            detail = "a JSON array, not JSON Lines (one object a line): write it with lines=True"
            yield _reject(task.path, "file", "json_array", detail, kind=FILE_ERROR)
            return
        if not line.strip():
            continue
        values = json_values(line, fields)
        yield _record(task.path, offset if ranged else row, name, values, fields, line)
        row += 1


def _record(
    path: str, position: int, name: str, values: dict | tuple, fields: dict[str, str], line: bytes = b""
) -> Record | Outcome:
    """A row's record, or its reject (``values``: the reason), named by its id where it has one."""
    ids = (
        [values[n] for n, flag in fields.items() if flag == "--id-field"] if isinstance(values, dict) else []
    )
    if ids and (type(ids[0]) is int or (isinstance(ids[0], str) and _is_utf8(ids[0]))):
        name = str(ids[0])[:200]
    problem = values if isinstance(values, tuple) else value_problem(values, fields)
    if problem is None:
        return Record(path, position, name, values)
    text = values.get(next(iter(fields))) if isinstance(values, dict) else None
    excerpt = text.encode() if isinstance(text, str) and _is_utf8(text) else line
    return _reject(path, name, *problem, data=excerpt)


def _column_problem(schema: pa.Schema, fields: dict[str, str], path: str) -> Outcome | None:
    """A file error when the table lacks a named column or its text column holds no strings."""
    for name, flag in fields.items():
        if name not in schema.names:
            detail = f"no column {name!r} ({flag}); its columns: {', '.join(schema.names)}"
            return _reject(
                path, "file", "missing_column", detail + _closest(name, schema.names), kind=FILE_ERROR
            )
    name, flag = next(iter(fields.items()))
    kind = schema.field(name).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
        detail = f"its column {name!r} ({flag}) is {kind}, not text (string)"
        return _reject(path, "file", "not_text_column", detail, kind=FILE_ERROR)
    return None


def _values(column: pa.Array) -> list[Any]:
    """A column as Python values; a string that is not UTF-8 stays ``bytes`` (a reject later)."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        try:
            column.validate(full=True)
        except pa.ArrowInvalid:
            binary = pa.binary() if pa.types.is_string(column.type) else pa.large_binary()
            return [_decoded(v) for v in column.view(binary).to_pylist()]
    return column.to_pylist()


def _decoded(value: bytes | None) -> str | bytes | None:
    try:
        return value if value is None else value.decode("utf-8")
    except UnicodeDecodeError:
        return value


def _table_records(batches, path: str, row: int, fields: dict[str, str]) -> Iterator[Record]:
    for batch in batches:
        columns = [_values(batch.column(name)) for name in fields]
        for i, values in enumerate(zip(*columns, strict=True)):
            yield _record(path, row + i, f"row {row + i}", dict(zip(fields, values, strict=True)), fields)
        row += batch.num_rows


def _parquet(f, task: FilePart, fields: dict[str, str]) -> Iterator[Record | Outcome]:
    table = pq.ParquetFile(f)
    if problem := _column_problem(table.schema_arrow, fields, task.path):
        yield problem
        return
    groups = range(task.start, table.num_row_groups if task.end is None else task.end)
    batches = table.iter_batches(BATCH_ROWS, row_groups=list(groups), columns=list(fields))
    yield from _table_records(batches, task.path, task.first_row, fields)


def _arrow(f, task: FilePart, fields: dict[str, str]) -> Iterator[Record | Outcome]:
    is_file = f.read(6) == b"ARROW1"  # the IPC file format; datasets writes the stream format
    f.seek(0)
    reader = pa.ipc.open_file(f) if is_file else pa.ipc.open_stream(f)
    if problem := _column_problem(reader.schema, fields, task.path):
        yield problem
        return
    batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) if is_file else reader
    yield from _table_records((b.select(list(fields)) for b in batches), task.path, 0, fields)


_READERS = {"jsonl": _jsonl, "parquet": _parquet, "arrow": _arrow}


def read_task(task: FilePart, fields: dict[str, str]) -> Iterator[Record | Outcome]:
    """The records of one read task (rejects for unusable rows); a file that cannot be read on
    ends the task with one file error naming the records kept before it."""
    num_records = 0
    try:
        with io.open_binary(task.path) as f:
            for item in _READERS[task.kind](f, task, fields):
                num_records += isinstance(item, Record)
                yield item
    except Exception as err:  # Any error of the file, its codec or its format: the other files go on.
        reason = "truncated_input" if "runcated" in str(err) or isinstance(err, EOFError) else "unreadable"
        where = "" if task.end is None else f" (bytes {task.start:,}-{task.end:,})"
        if task.kind == "parquet" and task.end is not None:
            where = f" (row group {task.start:,})"
        detail = (
            f"{type(err).__name__}: {str(err)[:300]}{where}; the {num_records:,} records before it were kept"
        )
        yield _reject(task.path, "file", reason, detail, kind=FILE_ERROR)
