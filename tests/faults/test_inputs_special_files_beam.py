"""Special files and unbounded lines given to the Beam-side commands: a FIFO or a device as
``--input``/``--vocab`` is refused at once (it would block or never end), and ``wordpiece encode``
never hands the tokenizer a line over the limit (a 180 MB line aborted it in Rust)."""

from __future__ import annotations

import os
import time

import pytest
from click.testing import CliRunner

from pipelines.cli import main as pipelines_main
from tests.conftest import SHARED_DATA, require
from wordpiece import cli as wordpiece_cli

VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"


@pytest.fixture(params=["fifo", "device"])
def special(request, tmp_path):
    if request.param == "device":
        return "/dev/zero", "a character device"
    path = tmp_path / "pipe.txt"
    os.mkfifo(path)
    return str(path), "a FIFO (named pipe)"


def one_line(main, args: list[str], **kwargs) -> str:
    start = time.monotonic()
    result = CliRunner().invoke(main, args, **kwargs)
    assert result.exit_code == 1 and time.monotonic() - start < 10, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def test_a_special_file_as_input_is_refused_at_once(special, tmp_path):
    path, kind = special
    line = one_line(pipelines_main, ["books", "--input", path, "--output", str(tmp_path / "out")])
    assert line == f"error: {path}: is {kind}, not a regular file; give a file"


def test_a_special_file_as_vocabulary_is_refused_at_once(special, tmp_path):
    path, kind = special
    args = [
        "examples",
        "--corpus",
        str(tmp_path / "corpus"),
        "--vocab",
        path,
        "--output",
        str(tmp_path / "o"),
    ]
    assert one_line(pipelines_main, args) == f"error: {path}: is {kind}, not a regular file; give a file"
    line = one_line(wordpiece_cli.main, ["encode", "--vocab", path], input="text\n")
    assert line == f"error: {path}: is {kind}, not a regular file; give a file"


def test_encode_refuses_a_line_over_the_limit_naming_its_number(monkeypatch):
    monkeypatch.setattr(wordpiece_cli, "MAX_LINE_BYTES", 1_000)
    text = "short line\n" + "word " * 1_000 + "\n"
    line = one_line(wordpiece_cli.main, ["encode", "--vocab", str(require(VOCAB)), "--uncased"], input=text)
    assert line == "error: standard input: line 2 is longer than the limit of 1,000 bytes"
