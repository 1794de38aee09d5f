"""A mistyped option is refused before anything runs, in one line naming the closest known option,
the command's or Beam's; what `pipelines` and `wordpiece train` hand on to Beam must be one of Beam's
own options with a value Beam's parser takes (issue 37). Beam alone would drop it without a word:
``--num-shard 2`` wrote 16 shards, ``--runer=DataflowRunner`` ran a Dataflow job locally."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.beam_options import beam_parser, problems
from tests.clis import CLIS

CASES = [
    (
        "pipelines books --input {root}/b.txt --output {root}/o --num-shard 2 --min-document-word 50000",
        "--num-shard: not an option of `pipelines books` or of Beam; did you mean --num-shards?; "
        "--min-document-word: not an option of `pipelines books` or of Beam; did you mean --min-document-words?",
    ),
    (
        "pipelines examples --corpus {root}/c --vocab {root}/v.txt --output {root}/o --max-seq-lenght 64",
        "--max-seq-lenght: not an option of `pipelines examples` or of Beam; did you mean --max-seq-length?",
    ),
    (
        "wordpiece train --corpus {root}/c --output {root}/o --vocab-sise 500",
        "--vocab-sise: not an option of `wordpiece train` or of Beam; did you mean --vocab-size?",
    ),
    (
        "pipelines books --input {root}/b.txt --output {root}/o --runer=DataflowRunner --projet=p",
        "--runer=DataflowRunner: not an option of `pipelines books` or of Beam; did you mean --runner?; "
        "--projet=p: not an option of `pipelines books` or of Beam; did you mean --project?",
    ),
    (
        "pipelines corpus --input {root}/c --output {root}/o --temp-location=gs://b/t",
        "--temp-location=gs://b/t: not an option of `pipelines corpus` or of Beam; did you mean --temp_location?",
    ),
    (
        "pipelines books --input {root}/b.txt --output {root}/o --direct_num_workers=-5",
        "--direct_num_workers -5: Beam takes 0 or more here",
    ),
    (
        "pipelines books --input {root}/b.txt --output {root}/o --direct_running_mode=threads",
        "--direct_running_mode: invalid choice: 'threads' (choose from 'in_memory', 'multi_threading', "
        "'multi_processing')",
    ),
    (
        "pipelines books --input {root}/b.txt --output {root}/o --runner=DataflowRuner",
        "--runner DataflowRuner: not a runner Beam has; did you mean DataflowRunner?",
    ),
    (
        "pipelines books --input {root}/b.txt --output {root}/o extra",
        "extra: not an argument of `pipelines books` or of Beam",
    ),
    (
        "pretrain --shards {root}/s --output {root}/o --lrr 1",
        "--lrr: not an option of `pretrain`; did you mean --lr?",
    ),
    (
        "finetune glue --task mrpc --data-dir {root} --checkpoint {root} --output {root}/o --tsk x",
        "--tsk: not an option of `finetune glue`; did you mean --task?",
    ),
    ("chain --seeed 3", "--seeed: not an option of `chain`; did you mean --seed?"),
]


def _invoke(line: str, root: Path):
    tool, *args = line.format(root=root).split()
    return CliRunner().invoke(CLIS[tool], args, prog_name=tool)


@pytest.mark.parametrize(
    ("line", "expected"), CASES, ids=[c[0].split(" --")[0] + f" #{i}" for i, c in enumerate(CASES)]
)
def test_a_typo_is_one_line_naming_the_closest_option_and_nothing_runs(line, expected, tmp_path):
    (tmp_path / "b.txt").write_text("A book.\n")
    result = _invoke(line, tmp_path)
    assert (result.exit_code, result.output) == (2, f"error: {expected}\n")
    assert not (tmp_path / "o").exists()


REQUIRED = {"examples": ["--corpus", "c", "--vocab", "v.txt"]}


@pytest.mark.parametrize("command", ["wikipedia", "books", "text", "documents", "corpus", "examples"])
def test_every_pipelines_stage_refuses_an_option_neither_its_own_nor_beams(command, tmp_path):
    args = [command, *REQUIRED.get(command, ["--input", "i"]), "--output", str(tmp_path / "o"), "--overwrit"]
    result = CliRunner().invoke(CLIS["pipelines"], args, prog_name="pipelines")
    assert result.exit_code == 2
    assert result.output == (
        f"error: --overwrit: not an option of `pipelines {command}` or of Beam; did you mean --overwrite?\n"
    )


def test_beams_own_options_pass_with_their_values():
    """Every option string of Beam's parser is known; real values of several kinds are taken."""
    assert len({s for a in beam_parser()._actions for s in a.option_strings}) > 150
    given = ["--runner=DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    given += [
        "--project=p",
        "--region=r",
        "--temp_location=gs://b/t",
        "--num_workers",
        "3",
        "--setup_file=./s.py",
    ]
    assert problems(given) == []
    assert problems(["--parallelism=-1"]) == []  # Flink's default is -1: not refused as a negative count


def test_chain_checks_its_beam_options_the_same_way(tmp_path):
    dump = tmp_path / "d.xml.bz2"
    dump.write_bytes(b"")
    args = [
        "--workdir",
        str(tmp_path / "w"),
        "--wiki-dump",
        str(dump),
        "--beam-option=--runer=DataflowRunner",
    ]
    result = CliRunner().invoke(CLIS["chain"], args, prog_name="chain")
    assert result.exit_code == 2
    assert (
        result.output
        == "error: --beam-option --runer=DataflowRunner: not an option of Beam; did you mean --runner?\n"
    )
    assert not (tmp_path / "w").exists()


def test_a_typo_in_a_real_process_is_one_line_on_stderr_within_seconds(tmp_path):
    (tmp_path / "b.txt").write_text("A book.\n")
    argv = [str(Path(sys.executable).parent / "pipelines"), "books", "--input", str(tmp_path / "b.txt")]
    started = time.monotonic()
    done = subprocess.run(
        [*argv, "--output", str(tmp_path / "o"), "--num-shard", "2"], capture_output=True, text=True
    )
    assert time.monotonic() - started < 30
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "error: --num-shard: not an option of `pipelines books` or of Beam; did you mean --num-shards?\n"
    )
    assert not (tmp_path / "o").exists()
