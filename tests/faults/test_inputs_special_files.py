"""Special files as inputs of every ``finetune`` command: a FIFO (which would block a reader),
``/dev/zero`` (endless), a line of hundreds of megabytes. Each is one ``error:`` line naming the
file (and, for a long line, its number and the limit, never its text), exit 1, within seconds,
before any training."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from schemas.inputs import MAX_LINE_BYTES
from tests.faults.finetune_inputs import COMMANDS, inputs, invoke
from tests.unit.test_finetune_common import hf_folder


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "is a FIFO (named pipe), not a regular file; give a file"


def _device(path: Path) -> str:
    path.symlink_to("/dev/zero")
    return "is a character device, not a regular file"


def _folder(path: Path) -> str:
    path.mkdir()
    return "is a folder, not a regular file"


KINDS = {"a FIFO": _fifo, "/dev/zero": _device, "a folder": _folder}


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> str:
    return str(hf_folder(tmp_path_factory.mktemp("bert") / "hf"))


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("command", COMMANDS)
def test_a_special_file_as_input_is_one_line_at_once(command, kind, bert, tmp_path):
    args, bad = inputs(tmp_path, bert)[command]
    bad.unlink(missing_ok=True)
    said = KINDS[kind](bad)
    code, errors, seconds = invoke(args)
    assert code == 1 and len(errors) == 1, errors
    assert errors[0].startswith(f"error: {bad}: ") and said in errors[0], errors[0]
    assert seconds < 20
    assert not (tmp_path / "out" / "metrics.json").exists()


LINE_READERS = ["glue train.tsv", "swag --train-file", "ner train.txt", "features --input"]
FIRST_LINES = {"swag --train-file": "swag.csv", "features --input": "text.txt"}


@pytest.mark.parametrize("command", LINE_READERS)
def test_a_line_over_the_limit_names_its_number_and_the_limit_never_its_text(command, bert, tmp_path):
    args, bad = inputs(tmp_path, bert)[command]
    first = (tmp_path / FIRST_LINES[command] if command in FIRST_LINES else bad).read_bytes().splitlines()[0]
    with open(bad, "wb") as f:  # a good first line, then 2 GB without a line end (sparse: no disk)
        f.write(first + b"\n")
        f.truncate(2 << 30)
    code, errors, seconds = invoke(args)
    assert code == 1 and len(errors) == 1, errors
    assert errors[0] == f"error: {bad}: line 2 is longer than the limit of {MAX_LINE_BYTES:,} bytes"
    assert seconds < 20


JSON_READERS = ["squad --predict-file", "evaluate squad --predictions", "report metrics.json"]


@pytest.mark.parametrize("command", JSON_READERS)
def test_a_json_document_over_the_limit_is_refused_unread(command, bert, tmp_path, monkeypatch):
    args, bad = inputs(tmp_path, bert)[command]
    limit = (tmp_path / "squad.json").stat().st_size  # the good SQuAD file passes
    monkeypatch.setattr("finetune.inputs.MAX_JSON_BYTES", limit)
    bad.write_text('{"data": "' + "x" * limit + '"}')
    code, errors, _ = invoke(args)
    assert code == 1 and len(errors) == 1, errors
    assert errors[0].startswith(
        f"error: {bad}: larger than the limit of {limit:,} bytes for this kind of file"
    )
