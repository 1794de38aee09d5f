"""Records out of the files a corpus is published in: JSON Lines (plain, or ``.gz``, ``.zst``,
``.bz2``), Parquet, and the Arrow files of ``datasets`` (``save_to_disk``). A file is planned into
parts (a byte range of plain JSON Lines, a Parquet row group, else the whole file), each read a
line or a batch at a time: memory is bounded by a batch, never by a file. A record that cannot be
used is a reject; a file that cannot be read on ends in one file error saying what was kept."""

from __future__ import annotations

import difflib
import itertools
import json
import math
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import files
from pipelines.stage import FILE_ERROR, REJECTED, Outcome, reject_outcome
from pipelines.text import garbled_text
from schemas.inputs import MAX_LINE_BYTES

SOURCE = "documents"
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2"}
"""Compressed JSON Lines, decompressed by pyarrow's codecs as they are read (one part a file)."""
BATCH_ROWS, BATCH_BYTES = 1024, 64 << 20
"""Parquet rows converted at a time: at most 1,024 and about 64 MiB (an Arrow file's batches are its writer's)."""
_SURROGATE = re.compile("[\ud800-\udfff]")
"""A lone surrogate (a JSON ``\\ud800`` escape, a byte that was not UTF-8): no text, never written."""
REQUIRED = ("--text-field", "--group-field")
"""The fields a record must have; an id or title may be absent or null."""


class FilePart(NamedTuple):
    """A unit of reading: bytes or Parquet row groups ``[start, end)`` (the first at row
    ``first_row``) of ``path``, or all of it (``end`` None)."""

    path: str
    start: int = 0
    end: int | None = None
    first_row: int = 0


class Record(NamedTuple):
    """One row: its file, its place there (row, or byte where its JSON line starts when read by
    range), the name rejects give it (its id, else its place) and its named fields' values."""

    path: str
    position: int
    name: str
    values: dict[str, Any]


def file_kind(path: str) -> tuple[str, str | None] | None:
    """``(jsonl | parquet | arrow, compression)`` by the file's name; None for another format."""
    name = path.rsplit("/", 1)[-1].lower()
    compression = next((c for suffix, c in COMPRESSIONS.items() if name.endswith(suffix)), None)
    name = name.rsplit(".", 1)[0] if compression else name
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl", compression
    tables = not compression and name.endswith((".parquet", ".arrow"))
    return (name.rsplit(".", 1)[1], None) if tables else None


def plan_reads(path: str, fields: dict[str, str], bytes_per_read: int, whole: bool = False) -> list[FilePart]:
    """A Parquet file's row groups; plain JSON Lines in ranges of ``bytes_per_read`` (unless
    ``whole``: rows then counted from the file's start); any other file, or one whose footer or
    columns are wrong (its read reports it), whole."""
    kind, compression = file_kind(path)
    if kind == "parquet":
        try:
            with files.open_binary(path) as f:
                table = pq.ParquetFile(f)
            groups = [table.metadata.row_group(g).num_rows for g in range(table.num_row_groups)]
            groups = groups if set(fields) <= set(table.schema_arrow.names) else []
        except Exception:  # Any error: the read of the whole file reports it.
            groups = []
        starts = list(itertools.accumulate(groups, initial=0))[: len(groups)]
        return [FilePart(path, g, g + 1, first) for g, first in enumerate(starts)] or [FilePart(path)]
    size = files.file_size(path) if kind == "jsonl" and not compression and not whole else 0
    parts = [FilePart(path, s, min(s + bytes_per_read, size)) for s in range(0, size, bytes_per_read)]
    return parts or [FilePart(path)]


def iter_lines(f, offset: int, end: float, limit: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | None]]:
    """``(offset, line)`` for each line of ``f`` (read from ``offset``, a line start) that starts
    before ``end``, without its ``\\n``; a line longer than ``limit`` is ``None``, never held."""
    buf, at, line_start, too_long = b"", offset, offset, False  # at: the offset of buf[0]
    while line_start < end:
        block = f.read(1 << 20)
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


def _missing(name: str, flag: str, names: list[str], what: str) -> tuple[str, str]:
    """``missing_field`` (or ``missing_column``): what the record (or table) has, the closest first."""
    found = difflib.get_close_matches(name, names, 1, cutoff=0.4)
    closest = f"; the closest is {found[0]!r}" if found else ""
    return f"missing_{what}", f"no {what} {name!r} ({flag}); its {what}s: {', '.join(names[:20])}{closest}"


def json_values(line: bytes, fields: dict[str, str]) -> dict[str, Any] | tuple[str, str]:
    """The named ``fields`` (name -> flag) of one JSON line, or ``(reason, detail)`` when it is no
    UTF-8 JSON object or lacks a required field."""
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
            return _missing(name, flag, sorted(record), "field")
    return {name: record.get(name) for name in fields}


def value_problem(values: dict[str, Any], fields: dict[str, str]) -> tuple[str, str] | None:
    """``(reason, detail)`` when a named field's value cannot be used: a required one null, one not
    UTF-8 or of the wrong type, or a text empty or garbled (``garbled_text``)."""
    for name, flag in fields.items():
        value, what, wants_text = values[name], f"{flag} {name!r}", flag in ("--text-field", "--title-field")
        if value is None and flag in REQUIRED:
            return "missing_field", f"{what} is null"
        if isinstance(value, str) and _SURROGATE.search(value):
            return "undecodable", f"{what} is not valid UTF-8"
        if value is not None and not isinstance(value, str) and (wants_text or type(value) is not int):
            wanted = "a string" if wants_text else "a string or an integer"
            return "wrong_type", f"{what} is of type {type(value).__name__}, not {wanted}"
        if flag == "--text-field" and not value.strip():
            return "empty_field", f"{what} is empty"
        if flag == "--text-field" and (garbled := garbled_text(value)):
            return garbled
    return None


def _reject(path: str, name: str, reason: str, detail: str, data: Any = None, kind=REJECTED) -> Outcome:
    excerpt = data[:200].decode("utf-8", "replace") if isinstance(data, bytes) else data
    excerpt = _SURROGATE.sub("\ufffd", excerpt[:200]) if isinstance(excerpt, str) else None
    return reject_outcome(SOURCE, path, name, reason, detail, excerpt=excerpt, kind=kind)


def _record(
    path: str, position: int, name: str, values: dict | tuple, fields: dict, raw=b""
) -> Record | Outcome:
    """A row's record, or its reject (``values``: the reason), named by its id where it has one."""
    if isinstance(values, tuple):
        return _reject(path, name, *values, raw)
    ids = [values[n] for n, flag in fields.items() if flag == "--id-field"]
    if ids and (type(ids[0]) is int or isinstance(ids[0], str)):
        name = _SURROGATE.sub("\ufffd", str(ids[0])[:200])
    if problem := value_problem(values, fields):
        return _reject(path, name, *problem, values[next(iter(fields))])
    return Record(path, position, name, values)


def _jsonl(f, part: FilePart, fields: dict[str, str], compression: str | None) -> Iterator[Record | Outcome]:
    stream = pa.CompressedInputStream(pa.PythonFile(f, "r"), compression) if compression else f
    f.seek(max(part.start - 1, 0))
    lines = iter_lines(stream, max(part.start - 1, 0), math.inf if part.end is None else part.end)
    if part.start:
        next(lines, None)  # the end of the line that the range before reads
    row = 0
    for offset, line in lines:
        if line is None:
            detail = f"longer than the limit of {MAX_LINE_BYTES:,} bytes"
            yield _reject(part.path, f"byte {offset}", "line_too_long", detail)
        elif offset == 0 and line.lstrip().startswith(b"["):
            detail = "a JSON array, not JSON Lines (one object a line): write it with lines=True"
            yield _reject(part.path, "file", "json_array", detail, kind=FILE_ERROR)
            return
        elif line.strip():
            position = row if part.end is None else offset
            yield _record(part.path, position, f"byte {offset}", json_values(line, fields), fields, line)
            row += 1


def _values(column: pa.Array) -> list[Any]:
    """A column as Python values; strings that are not UTF-8 keep lone surrogates (rejected later)."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        raw = column.view(pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary())
        return [v if v is None else v.decode("utf-8", "surrogateescape") for v in raw.to_pylist()]


def _tables(f, part: FilePart, fields: dict[str, str], kind: str) -> Iterator[Record | Outcome]:
    if kind == "parquet":
        table = pq.ParquetFile(f)
        schema, groups = table.schema_arrow, range(part.start, part.end or table.num_row_groups)
        first = table.metadata.row_group(part.start) if groups else None  # rows sized to BATCH_BYTES
        rows = BATCH_BYTES * first.num_rows // max(first.total_byte_size, 1) if first else 1
        rows, groups = max(1, min(rows, BATCH_ROWS)), list(groups)
        batches = table.iter_batches(rows, row_groups=groups, columns=list(fields))
    else:
        is_file = f.read(6) == b"ARROW1"  # the IPC file format; datasets writes the stream format
        f.seek(0)
        reader = pa.ipc.open_file(f) if is_file else pa.ipc.open_stream(f)
        schema = reader.schema
        batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) if is_file else reader
    for name, flag in fields.items():
        if name not in schema.names:
            yield _reject(part.path, "file", *_missing(name, flag, schema.names, "column"), kind=FILE_ERROR)
            return
    row = part.first_row
    for batch in batches:
        for i, values in enumerate(zip(*(_values(batch.column(name)) for name in fields), strict=True)):
            yield _record(
                part.path, row + i, f"row {row + i}", dict(zip(fields, values, strict=True)), fields
            )
        row += batch.num_rows


def read_part(part: FilePart, fields: dict[str, str]) -> Iterator[Record | Outcome]:
    """The records of one part of a file (rejects for unusable rows); a file that cannot be read
    on ends the part with one file error naming the records kept before it."""
    num_records, (kind, compression) = 0, file_kind(part.path)
    try:
        with files.open_binary(part.path) as f:
            read = _jsonl(f, part, fields, compression) if kind == "jsonl" else _tables(f, part, fields, kind)
            for item in read:
                num_records += isinstance(item, Record)
                yield item
    except Exception as err:  # Any error of the file, its codec or its format: the other files go on.
        reason = "truncated_input" if "runcated" in str(err) or isinstance(err, EOFError) else "unreadable"
        detail = f"{type(err).__name__}: {str(err)[:300]}; the {num_records:,} records before it were kept"
        yield _reject(part.path, "file", reason, detail, kind=FILE_ERROR)
