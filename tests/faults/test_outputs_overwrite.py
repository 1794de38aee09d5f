"""``--overwrite`` deletes only what the command itself wrote before, as the output's own record
(``.output.json``) lists it, never anything else in the folder; the refusal says what is there: an
earlier run's files (completed, interrupted) or files no run of the command recorded writing
(never "files of an earlier run" for the user's own data). Tiny made-up runs; no model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune.cli import main as finetune
from schemas.outputs import RECORD_FILE, OutputRecord

SQUAD_DATA = ("train.tsv", "dev.tsv", "test.tsv")


def _report(tmp_path: Path, out: Path, *extra: str, expect: int = 0) -> list[str]:
    """``finetune report RUN --output OUT``: one made-up MRPC run; the output's lines."""
    run = tmp_path / "mrpc"
    run.mkdir(exist_ok=True)
    (run / "metrics.json").write_text(json.dumps({"task": "mrpc", "dev": {"f1": 0.8, "accuracy": 0.7}}))
    result = CliRunner().invoke(finetune, ["report", str(run), "--output", str(out), *extra])
    assert result.exit_code == expect, result.output
    return result.output.strip().splitlines()


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_folder_of_user_data_is_named_as_such_and_never_deleted(tmp_path: Path):
    """The sweep's case: the refusal called the user's TSVs 'files of an earlier run' and
    suggested --overwrite, which then deleted them."""
    data = tmp_path / "MRPC"
    data.mkdir()
    for name in SQUAD_DATA:
        (data / name).write_text(name)
    elsewhere = tmp_path / "glue"
    elsewhere.mkdir()
    for flags in ((), ("--overwrite",)):
        result = CliRunner().invoke(
            finetune,
            ["glue", "--task", "mrpc", "--data-dir", str(elsewhere), "--checkpoint", str(tmp_path / "none"),
             "--output", str(data), *flags],
        )  # fmt: skip
        assert result.exit_code == 1, result.output
        assert result.output.strip().splitlines() == [
            f"error: --output {data}: holds 3 file(s) that no `finetune glue` run recorded writing (dev.tsv, "
            "test.tsv, train.tsv); they are never deleted, even with --overwrite: choose an empty folder, or "
            "move them away"
        ]
    assert _files(data) == {name: name.encode() for name in SQUAD_DATA}


def test_overwrite_replaces_exactly_the_files_the_earlier_run_recorded(tmp_path: Path):
    out = tmp_path / "results"
    _report(tmp_path, out)
    record = json.loads((out / RECORD_FILE).read_text())
    assert record["command"] == "finetune report" and record["files"] == ["results.json", "results.md"]
    assert not (out / ".claim").exists()  # released
    refused = _report(tmp_path, out, expect=1)
    assert refused == [
        f"error: --output {out}: holds the 2 file(s) of an earlier `finetune report` run (results.json, "
        f"results.md; run {record['run_id']}); pass --overwrite to replace them (only them), or choose an "
        "empty folder"
    ]
    (out / "notes.md").write_text("mine")  # added by hand after the run: not the run's own
    (out / "results.csv").write_text("mine too")
    refused = _report(tmp_path, out, "--overwrite", expect=1)
    assert refused[0].endswith(
        "holds 2 file(s) that no `finetune report` run recorded writing (notes.md, results.csv), besides the "
        "2 of its earlier run; they are never deleted, even with --overwrite: choose an empty folder, or move "
        "them away"
    )
    assert (out / "notes.md").read_text() == "mine" and (out / "results.md").exists()
    (out / "notes.md").unlink()
    (out / "results.csv").unlink()
    _report(tmp_path, out, "--overwrite")
    assert json.loads((out / RECORD_FILE).read_text())["run_id"] != record["run_id"]


def test_an_interrupted_run_is_replaced_by_its_patterns_only(tmp_path: Path):
    """A killed run never wrote its final list: the record it wrote before its first file names
    the patterns it writes, and only those go."""
    out = tmp_path / "results"
    out.mkdir()
    (out / RECORD_FILE).write_bytes(
        OutputRecord("finetune report", "0123456789abcdef", ("results.json", "results.md")).to_json()
    )
    (out / "results.json").write_text("{")  # half-written
    refused = _report(tmp_path, out, expect=1)
    assert (
        "holds the 1 file(s) of an interrupted `finetune report` run (results.json; run 0123456789abcdef)"
        in refused[0]
    )
    _report(tmp_path, out, "--overwrite")
    assert json.loads((out / "results.json").read_text())["glue"]


def test_another_commands_output_is_never_replaced(tmp_path: Path):
    out = tmp_path / "ft"
    out.mkdir()
    (out / RECORD_FILE).write_bytes(
        OutputRecord("finetune glue", "0123456789abcdef", ("metrics.json",), ("metrics.json",)).to_json()
    )
    (out / "metrics.json").write_text("{}")
    refused = _report(tmp_path, out, "--overwrite", expect=1)
    assert refused == [
        f"error: --output {out}: holds the output of `finetune glue` (1 file(s): metrics.json), which "
        "`finetune report` never replaces, even with --overwrite; choose another folder"
    ]


@pytest.mark.parametrize(
    "content", [b"{not json", b'{"format": "output-record", "version": 9}', b'{"format": "output-record", '
                b'"version": 1, "command": "finetune report", "run_id": "x", "started": "t", "patterns": 3}']
)  # fmt: skip
def test_a_damaged_record_is_one_line_and_nothing_is_deleted(tmp_path: Path, content: bytes):
    out = tmp_path / "results"
    out.mkdir()
    (out / RECORD_FILE).write_bytes(content)
    (out / "results.md").write_text("kept")
    refused = _report(tmp_path, out, "--overwrite", expect=1)
    assert len(refused) == 1 and f"{out}/{RECORD_FILE}: not a readable output record" in refused[0]
    assert (out / "results.md").read_text() == "kept" and not (out / ".claim").exists()
