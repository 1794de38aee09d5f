"""A task's input files, local or bucket URLs: opened once known to be a file, read as bounded
UTF-8 lines or one strict JSON document; an empty split refused."""

from __future__ import annotations

import codecs
import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from schemas import storage
from schemas.commands import InputError
from schemas.inputs import MAX_JSON_BYTES, lines, loads, read_bytes


@contextlib.contextmanager
def open_input(url: str) -> Iterator[Any]:
    """``url`` (a path or bucket URL) opened in binary once it is known to be a file or bucket object."""
    storage.check_file(url)
    try:
        f = storage.open_binary(url)
    except FileNotFoundError:
        raise InputError(f"{url}: no such file") from None
    with f:
        yield f


def input_lines(url: str) -> Iterator[tuple[int, str]]:
    """The numbered lines of a UTF-8 text input (line ends kept, a leading BOM dropped), each bounded."""
    with open_input(url) as f:
        for number, line in enumerate(lines(f, url), 1):
            try:
                yield number, line.removeprefix(codecs.BOM_UTF8 if number == 1 else b"").decode("utf-8")
            except UnicodeDecodeError as err:
                raise InputError(f"{url}:{number}: not UTF-8 (byte {err.start + 1} of the line)") from None


def input_json(url: str) -> Any:
    """The JSON document in ``url``, read whole up to a bound and parsed strictly."""
    with open_input(url) as f:
        return loads(read_bytes(f, url, MAX_JSON_BYTES), url)


def check_examples(examples: Sequence[Any], what: str) -> None:
    """Refuse an empty split before any model is loaded: nothing to train on or score."""
    if not examples:
        raise InputError(f"{what}: no examples; give a file with at least one")
