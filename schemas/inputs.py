"""Reading what a user or a bucket supplies, bounded and typed: regular files only, a size limit on
every read, strict JSON read field by field; every problem one InputError naming the file."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from schemas.commands import InputError

MiB = 1 << 20
MAX_JSON_BYTES = 512 * MiB  # the largest JSON document read whole (SQuAD's train set is 40 MB)
MAX_LINE_BYTES = 16 * MiB  # the longest line of a text input (a TSV row, a sentence file's line)
READ_BLOCK = 8 * MiB


def read_bytes(f, where: str, limit: int) -> bytes:
    """All of the open binary file ``f``, or :class:`InputError` when it holds more than ``limit`` bytes.
    Reads in blocks: ``read(n)`` allocates ``n`` bytes up front, so one read of a generous limit
    would reserve it all for a small file."""
    blocks, size = [], 0
    while block := f.read(min(READ_BLOCK, limit + 1 - size)):
        blocks.append(block)
        size += len(block)
        if size > limit:
            raise InputError(f"{where}: larger than the limit of {limit:,} bytes for this kind of file")
    return b"".join(blocks)


def lines(f, where: str, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The lines of the open binary file ``f`` (with their line ends), each at most ``limit``
    bytes; a longer one is :class:`InputError` naming the line number, never its text. Reads in
    blocks (bucket files' ``readline`` takes no size), so little more than ``limit`` is held."""
    number, pending = 0, b""
    while True:
        block = f.read(1 << 20)
        *complete, pending = (pending + block).split(b"\n")
        for line in complete:
            number += 1
            if len(line) > limit:
                raise InputError(f"{where}: line {number:,} is longer than the limit of {limit:,} bytes")
            yield line + b"\n"
        if len(pending) > limit:
            raise InputError(f"{where}: line {number + 1:,} is longer than the limit of {limit:,} bytes")
        if not block:
            if pending:
                yield pending
            return


def loads(data: bytes | str, where: str) -> Any:
    """JSON parsed strictly (UTF-8, no lone surrogate, bounded nesting), or :class:`InputError`."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(f"{where}: not UTF-8 at byte {err.start:,}") from None
    try:
        value = json.loads(data, object_pairs_hook=_unique_keys)
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except json.JSONDecodeError as err:
        raise InputError(
            f"{where}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})"
        ) from None
    except UnicodeEncodeError:
        raise InputError(f"{where}: holds a lone UTF-16 surrogate (\\ud800-\\udfff), not text") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None
    except KeyError as err:
        raise InputError(
            f"{where}: the key {err.args[0]!r} appears twice in one object; which is meant?"
        ) from None
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (``json`` would keep the last without a word)."""
    if len(obj := dict(pairs)) < len(pairs):
        raise KeyError(next(k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i])))
    return obj


def field(record: Any, key: str, kinds: type | tuple[type, ...], where: str, default: Any = ...) -> Any:
    """``record[key]`` checked to be of ``kinds`` (``bool`` is never a number); missing: ``default``."""
    if not isinstance(record, Mapping):
        raise InputError(f"{where}: a {type(record).__name__} where a JSON object is expected")
    if key not in record:
        if default is not ...:
            return default
        raise InputError(f"{where}: the field {key!r} is missing")
    value = record[key]
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise InputError(f"{where}: the field {key!r} is a {type(value).__name__}, not {names}")
    return value


# strings some converters write for a JSON boolean, taken as one (boolean())
TRUE_STRINGS, FALSE_STRINGS = ("true", "True", "TRUE", "1"), ("false", "False", "FALSE", "0")


def boolean(record: Any, key: str, where: str, default: Any = ...) -> bool:
    """``record[key]`` as a boolean: ``true``, ``false`` or one of the strings taken for them."""
    value = field(record, key, (bool, str), where, default)
    if isinstance(value, bool) or value is default:
        return value
    if value in TRUE_STRINGS or value in FALSE_STRINGS:
        return value in TRUE_STRINGS
    raise InputError(f"{where}: the field {key!r} is {value[:20]!r}, not a boolean (true or false)")


def items(record: Any, key: str, where: str, default: Any = ...) -> Iterable[Any]:
    """``record[key]`` checked to be a JSON array."""
    return field(record, key, list, where, default)
