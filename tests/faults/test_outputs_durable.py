"""Outputs are durable and where the user put them (issue 37): ``memory://`` and option-like names
refused as outputs, a run whose folder was moved stops instead of making it again, an input
pattern never takes an output's own files, Beam's temporary folders are removed, ``file://`` paths
are the local paths they name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from schemas.commands import OutputError
from schemas.outputs import OutputFolder
from tests.clis import CLIS

PIPELINES = str(Path(sys.executable).parent / "pipelines")


def _run(tool: str, *args: str):
    return CliRunner().invoke(CLIS[tool], list(args), prog_name=tool)


@pytest.mark.parametrize(
    "line",
    [
        "pretrain --shards {root}/s --output {out}",
        "pipelines books --input {root}/b.txt --output {out}",
        "wordpiece train --corpus {root}/c --output {out}",
        "finetune glue --task mrpc --data-dir {root} --checkpoint {root}/m --output {out}",
        "chain --wiki-dump {root}/d.xml.bz2 --workdir {out}",
    ],
)
@pytest.mark.parametrize("out", ["memory://run", "-h"])
def test_an_output_no_one_could_find_afterwards_is_refused(line, out, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tool, *args = line.format(root=tmp_path, out=out).split()
    result = _run(tool, *args)
    flag = "--workdir" if tool == "chain" else "--output"
    expected = (
        f"{flag} {out}: an option, not a folder; give a folder (./{out} for one of that name)"
        if out == "-h"
        else f"{flag} {out}: memory:// lives only as long as this process: the output would be gone when the "
        "command ends; give a folder or a bucket URL"
    )
    assert (result.exit_code, result.output) == (2, f"error: {expected}\n")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_moved_while_written_is_never_made_again(tmp_path):
    with OutputFolder.open(str(tmp_path / "run"), "pretrain") as folder:
        folder.begin()
        folder.write("a.txt", "first")
        (tmp_path / "run").rename(tmp_path / "moved")
        with pytest.raises(OutputError) as caught:
            folder.sub("checkpoints").write("b.txt", "second")
    assert str(caught.value) == (
        f"--output {tmp_path / 'run'}: moved or deleted while this command wrote into it (.claim is gone); "
        "stopped rather than make it again there"
    )
    assert not (tmp_path / "run").exists()
    assert sorted(p.name for p in (tmp_path / "moved").iterdir()) == [".claim", ".output.json", "a.txt"]


def test_an_input_pattern_never_takes_an_outputs_own_files(tmp_path):
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "a.txt").write_text("A short book with a few words in it.\n" * 40)
    earlier = tmp_path / "books" / "out"
    assert (
        _run("pipelines", "books", "--input", f"{tmp_path}/books/*.txt", "--output", str(earlier)).exit_code
        == 0
    )
    result = _run("pipelines", "books", "--input", f"{tmp_path}/books/**", "--output", str(tmp_path / "o"))
    assert result.exit_code == 1
    assert result.output.startswith(f"error: --input {tmp_path}/books/**: matches {earlier}/")
    assert result.output.endswith(
        f", a file of the output at {earlier}; an input never takes an output's own files: give a pattern that "
        "matches only the input files\n"
    )
    assert not (tmp_path / "o").exists()


def test_a_pipeline_leaves_nothing_in_the_temporary_folder_and_takes_file_urls(tmp_path):
    (tmp_path / "temp").mkdir()
    (tmp_path / "a.txt").write_text("A short book with a few words in it.\n" * 40)
    env = {**os.environ, "TMPDIR": str(tmp_path / "temp")}
    argv = [
        PIPELINES,
        "books",
        "--input",
        f"file://{tmp_path}/a.txt",
        "--output",
        f"file://{tmp_path}/o",
        "--num-shards",
        "1",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, env=env)  # Beam's default runner
    assert (done.returncode, done.stderr) == (0, "")
    assert (tmp_path / "o" / "COMPLETED").exists()
    assert list((tmp_path / "temp").iterdir()) == []
