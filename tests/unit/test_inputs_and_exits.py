"""The shared input rules (regular files, bounded reads, strict JSON) and the one exit handler."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

import click
import pytest
from click.testing import CliRunner

from schemas import inputs, storage
from schemas.commands import (
    InputError,
    OneLineCommand,
    OutputError,
    UsageError,
    config_default,
    config_option,
)


def test_special_files_are_refused_at_once(tmp_path):
    fifo = tmp_path / "train.tsv"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "FIFO"), ("/dev/zero", "character device"), (tmp_path, "folder")):
        with pytest.raises(InputError, match=kind):
            storage.check_file(path)
    regular = tmp_path / "ok.txt"
    regular.write_text("x")
    storage.check_file(regular)
    storage.check_file("memory://bucket/not-looked-at")  # an object store holds objects only


def test_a_line_over_the_limit_names_its_number_not_its_text():
    data = io.BytesIO(b"short\n" + b"secret" * 10 + b"\nmore\n")
    with pytest.raises(InputError) as err:
        list(inputs.lines(data, "in.txt", limit=20))
    assert "line 2" in str(err.value) and "secret" not in str(err.value)
    assert list(inputs.lines(io.BytesIO(b"a\nbb"), "in.txt", limit=2)) == [b"a\n", b"bb"]


def test_a_read_over_its_limit_stops_there():
    with pytest.raises(InputError, match="limit of 4 bytes"):
        inputs.read_bytes(io.BytesIO(b"12345"), "f", limit=4)
    assert inputs.read_bytes(io.BytesIO(b"1234"), "f", limit=4) == b"1234"


def test_a_generous_limit_reserves_no_memory(monkeypatch):
    """``read(n)`` allocates ``n`` bytes first: a 512 MB limit must not mean 512 MB per small file."""
    monkeypatch.setattr(inputs, "READ_BLOCK", 4)
    asked = []

    class Recording(io.BytesIO):
        def read(self, size=-1):
            asked.append(size)
            return super().read(size)

    assert inputs.read_bytes(Recording(b"0123456789"), "f", limit=1 << 29) == b"0123456789"
    assert max(asked) == 4 and len(asked) == 4  # three blocks, then the empty read at the end
    with pytest.raises(InputError, match="limit of 9 bytes"):
        inputs.read_bytes(Recording(b"0123456789"), "f", limit=9)


@pytest.mark.parametrize(
    "data, problem",
    [
        (b'{"q": "\\ud800"}', "lone UTF-16 surrogate"),
        (b"[" * 100_000, "nested too deeply"),
        (b'{"a": 1', "not valid JSON"),
        (b"\xff{}", "not UTF-8 at byte 0"),
    ],
)
def test_json_that_is_not_clean_text_is_one_line(data, problem):
    with pytest.raises(InputError, match=problem):
        inputs.loads(data, "train.json")


def test_fields_are_typed_and_booleans_take_only_the_documented_strings():
    record = {"answerable": "false", "n": True, "text": "x"}
    assert inputs.boolean(record, "answerable", "q1") is False
    assert inputs.boolean({"b": "true"}, "b", "q1") is True
    assert inputs.boolean({}, "b", "q1", default=False) is False
    with pytest.raises(InputError, match="'maybe'"):
        inputs.boolean({"b": "maybe"}, "b", "q1")
    with pytest.raises(InputError, match="'n' is a bool, not int"):
        inputs.field(record, "n", int, "q1")
    with pytest.raises(InputError, match="'missing' is missing"):
        inputs.field(record, "missing", str, "q1")


@pytest.mark.parametrize(
    "error, code", [(UsageError("bad --lr"), 2), (InputError("bad\nfile"), 1), (OutputError("taken"), 1)]
)
def test_every_command_error_is_one_line_and_its_exit_code(error, code):
    @click.command(cls=OneLineCommand)
    def command():
        raise error

    result = CliRunner().invoke(command, [])
    assert result.exit_code == code
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")
    assert "Traceback" not in result.output


def test_a_flag_default_is_the_configs():
    @dataclass(frozen=True)
    class Inner:
        max_seq_length: int = 128

    @dataclass(frozen=True)
    class Config:
        lr: float = 1e-4
        inner: Inner = Inner()

    assert config_default(Config, "inner.max_seq_length") == 128

    @click.command()
    @config_option(Config, "lr")
    @config_option(Config, "inner.max_seq_length")
    def command(lr, max_seq_length):
        click.echo(f"{lr} {max_seq_length}")

    assert CliRunner().invoke(command, []).output == "0.0001 128\n"
    assert "[default: 0.0001]" in CliRunner().invoke(command, ["--help"]).output
