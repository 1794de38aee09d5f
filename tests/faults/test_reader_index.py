"""Sizes and shapes read from an examples output's ``index.json`` and ``manifest.json``, with the
hashes rebuilt to match (``reader_folders``): each is checked before anything is sized from it,
and a bad one is one line naming the file (``pretrain``: exit 1, no traceback)."""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path

import pytest

from pretrain.data import ExampleShards
from schemas.commands import InputError
from tests.faults.reader_folders import copy_output, load, pretrain, rewrite

SHARD = "examples/part-00000-of-00002.arrow"


def _batches(data: dict, path: str = SHARD) -> dict:
    return next(s for s in data["shards"] if s["path"] == path)["batches"]


def _set_rows(folder: Path, rows: int) -> None:
    """Every record batch claims ``rows`` rows, and the manifest's counts agree."""

    def index(data: dict) -> None:
        for shard in data["shards"]:
            shard["batches"]["num_rows"] = [rows] * len(shard["batches"]["num_rows"])

    def manifest(data: dict) -> None:
        counts = {s["path"]: sum(s["batches"]["num_rows"]) for s in load(folder, "index.json")["shards"]}
        for shard in data["shards"]:
            shard["num_rows"] = counts[shard["path"]]

    rewrite(folder, index=index)
    rewrite(folder, manifest=manifest)


def test_a_huge_row_count_fails_at_the_first_record_batch_in_little_memory(shards, tmp_path):
    """Every record batch claims 1,000,000 rows (the manifest agrees): nothing is sized from the
    count before the first record batch is decoded and found to hold fewer (the reader that planned
    its epoch up front grew to 21.5 GB here)."""
    folder = copy_output(shards, tmp_path / "huge")
    _set_rows(folder, 1_000_000)
    tracemalloc.start()
    try:
        reader = ExampleShards(str(folder), batch_size=8)
        assert reader.num_examples == 8_000_000 and len(reader) == 1_000_000
        with pytest.raises(InputError) as caught:
            next(iter(reader))
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak_bytes < 50e6, peak_bytes
    assert re.fullmatch(
        rf"{folder}/examples/part-0000\d-of-00002\.arrow: record batch \d: \d+ rows, index\.json says 1000000; "
        r"the output does not hold what `pipelines examples` writes \(for this vocabulary\): regenerate it",
        str(caught.value),
    ), str(caught.value)
    code, line = pretrain(folder, tmp_path / "run")
    assert (
        code == 1
        and line.startswith(f"error: {folder}/examples/part-0000")
        and "index.json says 1000000" in line
    )


def _index_case(name: str):
    """(edit of the index JSON, text the one line must hold) for each hostile index."""
    big = 1 << 40
    cases = {
        "rows above the limit": (
            lambda d: _batches(d)["num_rows"].__setitem__(0, big),
            "num_rows 1099511627776 is not an integer from 0 to 1,048,576",
        ),
        "negative row count": (
            lambda d: _batches(d)["num_rows"].__setitem__(0, -1),
            "num_rows -1 is not an integer",
        ),
        "huge length": (
            lambda d: _batches(d)["length"].__setitem__(0, big),
            "offset 792 and length 1099511627776 are not integers with 0 <= offset and 0 < length <= 268,435,456",
        ),
        "negative offset": (
            lambda d: _batches(d)["offset"].__setitem__(1, -5),
            "record batch 1: offset -5 and length",
        ),
        "range beyond the shard": (
            lambda d: _batches(d)["offset"].__setitem__(3, 500_000),
            "record batch 3: bytes 500000-592816 lie beyond the shard's 500,490 bytes",
        ),
        "string for a number": (
            lambda d: _batches(d)["offset"].__setitem__(0, "792"),
            "offset '792' and length",
        ),
        "bool for a number": (
            lambda d: _batches(d)["num_rows"].__setitem__(0, True),
            "num_rows True is not an integer",
        ),
        "list where an object belongs": (
            lambda d: d["shards"][0].__setitem__("batches", []),
            "batches is not an object",
        ),
        "object where a list belongs": (lambda d: d.__setitem__("shards", {}), "shards is not a list"),
        "missing key": (
            lambda d: d["shards"][0].pop("num_bytes"),
            "a shard is not an object with exactly the keys",
        ),
        "columns of other lengths": (lambda d: _batches(d)["sha256"].pop(), "are not lists of one length"),
        "not a hash": (
            lambda d: _batches(d)["sha256"].__setitem__(0, "x" * 64),
            "record batch 0: sha256 is not a hex SHA-256",
        ),
        "bool for the version": (
            lambda d: d.__setitem__("index_version", True),
            "index version True is not supported",
        ),
        "a shard listed twice": (lambda d: d["shards"].append(d["shards"][0]), f"{SHARD} is listed twice"),
        "a shard the manifest lacks": (
            lambda d: d["shards"].append({**d["shards"][0], "path": "examples/extra.arrow"}),
            "examples/extra.arrow is not in the manifest",
        ),
        "rows that disagree with the manifest": (
            lambda d: _batches(d)["num_rows"].__setitem__(0, 1000),
            f"{SHARD} differs from the manifest's entry",
        ),
        "another format": (
            lambda d: d.__setitem__("format", "documents"),
            "it indexes 'documents' version 1, the manifest holds 'examples' version 1",
        ),
        "a path out of the folder": (
            lambda d: d["shards"][0].__setitem__("path", "../part.arrow"),
            "shard '../part.arrow': the path '../part.arrow' is not a relative path",
        ),
    }
    return cases[name]


INDEX_CASES = [
    "rows above the limit",
    "negative row count",
    "huge length",
    "negative offset",
    "range beyond the shard",
    "string for a number",
    "bool for a number",
    "list where an object belongs",
    "object where a list belongs",
    "missing key",
    "columns of other lengths",
    "not a hash",
    "bool for the version",
    "a shard listed twice",
    "a shard the manifest lacks",
    "rows that disagree with the manifest",
    "another format",
    "a path out of the folder",
]


@pytest.mark.parametrize("name", INDEX_CASES)
def test_a_hostile_index_is_one_line_naming_it(shards, tmp_path, name):
    edit, expected = _index_case(name)
    folder = copy_output(shards, tmp_path / "out")
    rewrite(folder, index=edit)
    with pytest.raises(InputError) as caught:
        ExampleShards(str(folder), batch_size=8)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{folder}/index.json: "), message
    assert expected in message, message


def test_a_hostile_index_stops_pretrain_with_one_line(shards, tmp_path):
    folder = copy_output(shards, tmp_path / "out")
    rewrite(folder, index=lambda d: _batches(d)["length"].__setitem__(0, 1 << 40))
    code, line = pretrain(folder, tmp_path / "run")
    assert code == 1 and line.startswith(f"error: --shards {folder}: {folder}/index.json: malformed index"), (
        line
    )
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").rglob("COMPLETED"))


def test_an_index_larger_than_a_reader_takes_is_refused_unread(shards, tmp_path, monkeypatch):
    folder = copy_output(shards, tmp_path / "out")
    rewrite(folder, manifest=lambda d: d["index"].__setitem__("num_bytes", 1 << 40))
    with pytest.raises(InputError, match=r"manifest\.json: the index is 1,099,511,627,776 bytes, more than"):
        ExampleShards(str(folder), batch_size=8)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda d: d["shards"][0].__setitem__("num_rows", "3715"),
            "num_rows '3715' is not a non-negative integer",
        ),
        (
            lambda d: d["shards"][0].__setitem__("num_bytes", True),
            "num_bytes True is not a non-negative integer",
        ),
        (lambda d: d["shards"][0].pop("sha256"), "not an object with exactly the keys"),
        (lambda d: d.__setitem__("shards", {"a": 1}), "shards is not a list"),
        (lambda d: d["shards"].__setitem__(0, ["a"]), "not an object with exactly the keys"),
        (
            lambda d: d["index"].__setitem__("num_bytes", -1),
            "index: num_bytes -1 is not a non-negative integer",
        ),
    ],
    ids=[
        "string rows",
        "bool bytes",
        "missing hash",
        "object for the list",
        "list for an entry",
        "negative index size",
    ],
)
def test_a_manifest_of_the_wrong_shape_is_one_line_naming_it(shards, tmp_path, edit, expected):
    folder = copy_output(shards, tmp_path / "out")
    rewrite(folder, manifest=edit)
    with pytest.raises(InputError) as caught:
        ExampleShards(str(folder), batch_size=8)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{folder}/manifest.json: ") and expected in message, (
        message
    )


def test_json_that_is_not_an_object_is_one_line(shards, tmp_path):
    folder = copy_output(shards, tmp_path / "out")
    rewrite(folder, index_text=json.dumps([1, 2, 3]))
    with pytest.raises(InputError, match=r"index\.json: index version None is not supported"):
        ExampleShards(str(folder), batch_size=8)
    rewrite(folder, index_text="[" * 100_000)
    with pytest.raises(InputError, match=r"index\.json: not valid JSON"):
        ExampleShards(str(folder), batch_size=8)
