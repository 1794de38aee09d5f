"""Exact ownership: a command journals each file in its output's record (``.output.json``) before
it creates it, so that ``--overwrite`` after a killed run deletes exactly the files that run made
(and the temporary files of their names), never a file the user put there, whatever its name.
The sweep's case: a SIGKILLed run's record held only glob patterns, and ``--overwrite`` deleted a
file the user had since put in the folder under a matching name (``finetune glue``, ``pretrain``).
The refusals say whose files are there: an earlier run's (completed, interrupted) or files no run
of the command journaled (never "files of an earlier run" for the user's own data)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest
from click.testing import CliRunner

from finetune.cli import main as finetune
from pretrain.metrics import MetricsLog
from schemas import storage
from schemas.commands import OutputError
from schemas.outputs import RECORD_FILE, OutputFolder, OutputRecord
from schemas.storage import temporary_name
from tests.faults.test_clean_signals import _held, inputs  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[2]
KILLED = """
import os, signal, sys
from schemas.outputs import OutputFolder
folder = OutputFolder.open(sys.argv[1], "pretrain")
folder.begin()
folder.write("metrics.jsonl", "{}")
folder.sub("checkpoints/step-00000001").write("model.safetensors", b"weights")
folder.journal("checkpoints/step-00000001/rng-rank00001.json", ".temp/")  # another rank's, a temp folder
folder.write(".temp/a.spill", b"spilled")
os.kill(os.getpid(), signal.SIGKILL)
"""


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _record(folder: Path) -> dict:
    return json.loads((folder / RECORD_FILE).read_text())


def _bucket_record(fs) -> list[str] | None:
    return (
        json.loads(fs.cat_file("/bucket/out/.output.json"))["files"]
        if fs.exists("/bucket/out/.output.json")
        else None
    )


def _killed_run(out: Path) -> None:
    """A `pretrain`-like run into ``out``, SIGKILLed after writing a few files."""
    done = subprocess.run(
        [sys.executable, "-c", KILLED, str(out)], env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT
    )
    assert done.returncode == -signal.SIGKILL


def _refusal(out: Path, **kw) -> str:
    with pytest.raises(OutputError) as refused:
        OutputFolder.open(str(out), "pretrain", **kw)
    return str(refused.value)


def test_a_killed_runs_record_lists_every_file_it_made_and_overwrite_deletes_exactly_those(tmp_path: Path):
    out = tmp_path / "run"
    _killed_run(out)
    record = _record(out)
    assert record["ended"] is None and record["files"] == [
        "metrics.jsonl",
        "checkpoints/step-00000001/model.safetensors",
        "checkpoints/step-00000001/rng-rank00001.json",
        ".temp/",
    ]
    # the user's files under names the run's glob patterns matched (checkpoints/*, plots/*, *.jsonl)
    mine = {"checkpoints/notes.txt": "mine", "plots/curves.png": "my plot", "old.jsonl": "mine too"}
    for name, text in mine.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    half = out / "checkpoints" / "step-00000001" / temporary_name("rng-rank00001.json")  # cut off mid-write
    half.write_text("{")
    line = _refusal(out, overwrite=True)
    assert line == (
        f"--output {out}: holds 3 file(s) that no `pretrain` run recorded writing (checkpoints/notes.txt, "
        "old.jsonl, plots/curves.png), besides the 4 of its earlier run; they are never deleted, even with "
        "--overwrite: choose an empty folder, or move them away"
    )
    assert all((out / name).read_text() == text for name, text in mine.items())
    for name in mine:
        (out / name).rename(tmp_path / Path(name).name)
    assert "holds the 4 file(s) of an interrupted `pretrain` run" in _refusal(out)
    with OutputFolder.open(str(out), "pretrain", overwrite=True) as folder:
        assert folder.begin() == 4  # the three it made, and the temporary file of a name it journaled
        assert _files(out) == [".claim", RECORD_FILE] and not (out / "checkpoints").exists()
    assert _files(out) == []  # the new run wrote nothing: no record either


def test_each_file_is_journaled_before_it_is_created_locally_and_in_a_bucket(tmp_path: Path, monkeypatch):
    out, seen = tmp_path / "out", []

    def replace(src, dst, original=os.replace):  # a local file appears under its name here
        if Path(dst).name != RECORD_FILE:
            seen.append((Path(dst).name, _record(out)["files"]))
        original(src, dst)

    monkeypatch.setattr(storage.os, "replace", replace)
    with OutputFolder.open(str(out), "finetune glue") as folder:
        folder.begin()
        folder.sub("model").write("model.safetensors", b"w")
        folder.write_json("metrics.json", {"f1": 1})
    journal = ["model/model.safetensors", "metrics.json"]
    assert seen == [("model.safetensors", journal[:1]), ("metrics.json", journal)]
    fs, seen = fsspec.filesystem("memory"), []
    pipe = fs.pipe_file
    monkeypatch.setattr(
        fs, "pipe_file", lambda path, data, **kw: seen.append(_bucket_record(fs)) or pipe(path, data, **kw)
    )
    with OutputFolder.open("memory://bucket/out", "finetune glue") as folder:
        folder.begin()
        folder.write("metrics.json", "{}")
    assert seen[-2:] == [["metrics.json"], ["metrics.json"]]  # at its upload, and at the record's last


def test_a_file_is_journaled_in_the_output_it_is_written_into_even_one_inside_another(tmp_path: Path):
    with OutputFolder.open(str(tmp_path / "work"), "chain", continuing=True) as work:
        work.begin()
        with OutputFolder.open(str(tmp_path / "work" / "report"), "chain report", option="") as report:
            report.begin()
            report.write("report.md", "# report")
        work.write("chain.json", "{}")
        storage.write_bytes(tmp_path / "elsewhere.txt", "not an output's")  # journaled nowhere
    assert _record(tmp_path / "work")["files"] == ["chain.json"]
    assert _record(tmp_path / "work" / "report")["files"] == ["report.md"]


@pytest.mark.parametrize("entry", ["../outside.txt", "/etc/passwd", "a/../../b", "", "a//b", 7])
def test_a_record_that_names_a_file_outside_its_folder_deletes_nothing(tmp_path: Path, entry):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "outside.txt").write_text("kept")
    (out / "a").write_text("kept")
    data = json.loads(OutputRecord("pretrain", "r", ["a"], "t").to_json())
    (out / RECORD_FILE).write_text(json.dumps({**data, "files": ["a", entry]}))
    assert f"{out}/{RECORD_FILE}: not an output-record version 1" in _refusal(out, overwrite=True)
    assert (tmp_path / "outside.txt").read_text() == (out / "a").read_text() == "kept"


def test_a_record_without_a_file_list_claims_no_file(tmp_path: Path):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "x").write_text("whose?")
    record = {"format": "output-record", "version": 1, "command": "pretrain", "run_id": "r", "started": "t"}
    (out / RECORD_FILE).write_text(
        json.dumps({**record, "ended": None, "patterns": ["checkpoints/*"], "files": None})
    )
    assert "holds 1 file(s) that no `pretrain` run recorded writing (checkpoints/x)" in _refusal(
        out, overwrite=True
    )
    assert (out / "checkpoints" / "x").read_text() == "whose?"


def test_tensorboard_event_files_are_published_whole_never_appended_in_place(tmp_path: Path):
    out = tmp_path / "run"
    with OutputFolder.open(str(out), "pretrain") as folder:
        folder.begin()
        log = MetricsLog(folder, resume_step=None)
        log.log({"step": 1, "loss": 2.0})
        log.flush()
        [events] = list((out / "tensorboard").iterdir())
        before, inode = events.read_bytes(), events.stat().st_ino
        with open(events, "rb") as published:  # what a reader holds open
            log.log({"step": 2, "loss": 1.0})
            log.close()
            assert published.read() == before  # the file it holds was never written to
        assert events.stat().st_ino != inode and len(events.read_bytes()) > len(before)
        resumed = MetricsLog(folder, resume_step=1)  # a new session: a new event file, the old one kept
        resumed.log({"step": 2, "loss": 1.5})
        resumed.close()
    names = sorted(p.name for p in (out / "tensorboard").iterdir())
    assert len(names) == 2 and events.name in names
    assert sorted(f"tensorboard/{n}" for n in names) == sorted(
        f for f in _record(out)["files"] if f.startswith("tensorboard/")
    )


# -- what --overwrite says and does, through the commands ------------------------------------------


def _report(tmp_path: Path, out: Path, *extra: str, expect: int = 0) -> list[str]:
    """``finetune report RUN --output OUT``: one made-up MRPC run; the output's lines, each without
    its ``error:`` prefix."""
    run = tmp_path / "mrpc"
    run.mkdir(exist_ok=True)
    (run / "metrics.json").write_text(json.dumps({"task": "mrpc", "dev": {"f1": 0.8, "accuracy": 0.7}}))
    result = CliRunner().invoke(finetune, ["report", str(run), "--output", str(out), *extra])
    assert result.exit_code == expect, result.output
    return [line.split("rror: ", 1)[-1] for line in result.output.strip().splitlines()]


def test_a_folder_of_user_data_is_named_as_such_and_never_deleted(tmp_path: Path):
    """The sweep's case: the refusal called the user's TSVs 'files of an earlier run' and
    suggested --overwrite, which then deleted them."""
    data = tmp_path / "MRPC"
    data.mkdir()
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        (data / name).write_text(name)
    for flags in ((), ("--overwrite",)):
        result = CliRunner().invoke(
            finetune,
            [
                "glue",
                "--task",
                "mrpc",
                "--data-dir",
                str(tmp_path / "glue"),
                "--checkpoint",
                str(tmp_path / "none"),
                "--output",
                str(data),
                *flags,
            ],
        )
        assert result.exit_code == 1, result.output
        assert (
            result.output.strip()
            .splitlines()[-1]
            .endswith(
                f"--output {data}: holds 3 file(s) that no `finetune glue` run recorded writing (dev.tsv, "
                "test.tsv, train.tsv); they are never deleted, even with --overwrite: choose an empty folder, or "
                "move them away"
            )
        )
    assert _files(data) == ["dev.tsv", "test.tsv", "train.tsv"]


def test_overwrite_replaces_exactly_the_files_the_earlier_run_journaled(tmp_path: Path):
    out = tmp_path / "results"
    _report(tmp_path, out)
    record = _record(out)
    assert record["command"] == "finetune report" and record["files"] == ["results.json", "results.md"]
    assert record["ended"] and not (out / ".claim").exists()  # finished, released
    assert _report(tmp_path, out, expect=1) == [
        f"--output {out}: holds the 2 file(s) of an earlier `finetune report` run (results.json, results.md; "
        f"run {record['run_id']}); pass --overwrite to replace them (only them), or choose an empty folder"
    ]
    (out / "notes.md").write_text("mine")  # added by hand after the run: not the run's own
    refused = _report(tmp_path, out, "--overwrite", expect=1)
    assert refused[0].endswith(
        "holds 1 file(s) that no `finetune report` run recorded writing (notes.md), "
        "besides the 2 of its earlier run; they are never deleted, even with --overwrite: "
        "choose an empty folder, or move them away"
    )
    (out / "notes.md").unlink()
    _report(tmp_path, out, "--overwrite")
    assert _record(out)["run_id"] != record["run_id"]


def test_another_commands_output_is_never_replaced(tmp_path: Path):
    out = tmp_path / "ft"
    out.mkdir()
    (out / RECORD_FILE).write_bytes(
        OutputRecord("finetune glue", "0123456789abcdef", ["metrics.json"], "t", "t").to_json()
    )
    (out / "metrics.json").write_text("{}")
    assert _report(tmp_path, out, "--overwrite", expect=1) == [
        f"--output {out}: holds the output of `finetune glue` (1 file(s): metrics.json), which "
        "`finetune report` never replaces, even with --overwrite; choose another folder"
    ]


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b'{"format": "output-record", "version": 9}',
        b"[1, 2]",
        b'{"format": "output-record", '
        b'"version": 1, "command": "finetune report", "run_id": "x", "started": "t", "ended": null, "files": 3}',
    ],
)
def test_a_damaged_record_is_one_line_and_nothing_is_deleted(tmp_path: Path, content: bytes):
    out = tmp_path / "results"
    out.mkdir()
    (out / RECORD_FILE).write_bytes(content)
    (out / "results.md").write_text("kept")
    assert _report(tmp_path, out, "--overwrite", expect=1) == [
        f"{out}/{RECORD_FILE}: not an output-record version 1; if the folder holds nothing of value, delete it, "
        "else choose another folder"
    ]
    assert (out / "results.md").read_text() == "kept" and not (out / ".claim").exists()


# -- the commands: killed mid-run, then a user's file, then --overwrite ------------------------------


def _finetune_glue(inputs, out: Path) -> list[str]:  # noqa: F811 (the fixture's value)
    return [
        "finetune",
        "glue",
        "--task",
        "rte",
        "--data-dir",
        inputs["glue"],
        "--checkpoint",
        inputs["bert"],
        "--output",
        out,
        "--epochs",
        "1",
        "--batch-size",
        "2",
        "--max-seq-length",
        "32",
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "held", "mine"),
    [
        ("finetune glue", ("schemas.storage:write_bytes", "metrics.json", 1), "notes.tsv"),
        ("pretrain", ("pretrain.checkpoint:commit", "", 1), "checkpoints/notes.txt"),
        ("pipelines examples", ("pipelines.files:write_bytes", ".arrow", 1), "examples/notes.arrow"),
    ],
)
def test_a_killed_commands_overwrite_keeps_the_users_file(
    command,
    held,
    mine,
    inputs,  # noqa: F811
    request,
    tmp_path: Path,
):
    out = tmp_path / "out"
    if command == "finetune glue":
        args = _finetune_glue(inputs, out)
    elif command == "pretrain":
        args = [
            "pretrain",
            "--shards",
            request.getfixturevalue("shards"),
            "--output",
            out,
            "--config",
            "tiny",
            "--max-steps",
            "3",
            "--save-steps",
            "1",
            "--global-batch-size",
            "4",
            "--num-workers",
            "0",
            "--precision",
            "fp32",
        ]
    else:
        args = [
            "pipelines",
            "examples",
            "--corpus",
            request.getfixturevalue("corpus_output"),
            "--vocab",
            request.getfixturevalue("vocab"),
            "--output",
            out,
            "--max-seq-length",
            "32",
            "--num-shards",
            "2",
            "--num-buckets",
            "2",
            "--runner",
            "FnApiRunner",
        ]
    process, _ = _held(*held, tmp_path, *map(str, args))
    process.kill()
    process.communicate(timeout=60)
    journaled = _record(out)["files"]
    made = [f for f in _files(out) if f not in (".claim", RECORD_FILE)]
    assert made and all(OutputRecord(command, "", journaled, "").owns(f) for f in made)
    (out / mine).parent.mkdir(parents=True, exist_ok=True)
    (out / mine).write_text("the user's")
    tool, *rest = map(str, args)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            {"finetune": "finetune", "pretrain": "pretrain", "pipelines": "pipelines"}[tool],
            *rest,
            "--overwrite",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
    )
    assert done.returncode == 1, done.stderr
    assert f"holds 1 file(s) that no `{command}` run recorded writing ({mine})" in done.stderr
    assert (out / mine).read_text() == "the user's" and all((out / f).exists() for f in made)
