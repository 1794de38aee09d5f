"""`chain` and `chain ablate` check every flag, then every input, before the first stage (also with
--dry-run): one `error:` line listing every problem, exit 2 for the command line (no path looked at),
1 for an input, and nothing written. The chain's own record (chain.json) damaged, or a second chain in
a workdir, is one line too."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from chain.cli import main as chain_main
from chain.run import Stage, StageFailed, run_chain
from schemas import Manifest, completed_marker, storage
from schemas.outputs import OutputFolder
from tests.conftest import SHARED_DATA, require

NER = SHARED_DATA / "ner" / "conll2003"
MRPC = SHARED_DATA / "glue" / "MRPC"


def _errors(result) -> str:
    """The one `error:` line (its problems joined by "; ")."""
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0].removeprefix("error: ")


def _ablate(workdir: Path, *args: str):
    return CliRunner().invoke(chain_main, ["ablate", "--workdir", str(workdir), "--preset", "smoke", *args])


def _chain(workdir: Path, *args: str):
    return CliRunner().invoke(chain_main, ["--workdir", str(workdir), *args])


@pytest.fixture
def dump(tmp_path) -> Path:
    path = tmp_path / "dump.xml.bz2"
    path.write_bytes(b"BZh9")  # the checks see that it is there; the first stage reads it
    return path


def test_a_bad_glue_task_is_refused_before_any_stage(corpus_output, tmp_path):
    work = tmp_path / "w"
    result = _ablate(
        work, "--corpus", str(corpus_output), "--glue-dir", str(require(MRPC)), "--glue-task", "mrcp"
    )
    assert result.exit_code == 2
    assert _errors(result) == (
        "--glue-task: unknown GLUE task 'mrcp': choose one of cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte, wnli"
    )
    assert not work.exists()  # no vocabulary, shards or pre-training were built first


def test_a_glue_task_without_its_folder_is_refused(dump, tmp_path):
    result = _chain(tmp_path / "w", "--wiki-dump", str(dump), "--glue-task", "rte")
    assert result.exit_code == 2
    assert _errors(result) == (
        "--glue-task rte needs --glue-dir (its folder); without --glue-dir the chain fine-tunes on the "
        "task it derives from the corpus (MRPC layout)"
    )


@pytest.mark.parametrize("dry_run", [True, False])
def test_missing_inputs_are_listed_at_once_with_dry_run_too(tmp_path, dry_run):
    work = tmp_path / "w"
    missing = tmp_path / "missing"
    args = [
        "--wiki-dump",
        f"{missing}/dump.xml.bz2",
        "--ner-dir",
        f"{missing}/conll",
        "--glue-dir",
        str(missing),
    ]
    result = _ablate(work, *args, *(["--dry-run"] if dry_run else []))
    assert result.exit_code == 1
    assert _errors(result) == "; ".join(
        [
            f"--wiki-dump {missing}/dump.xml.bz2: no such file",
            f"--glue-dir {missing}: no such folder",
            f"--ner-dir {missing}/conll: no such folder",
        ]
    )
    assert not work.exists() and "preset smoke" not in result.output


def test_an_unfinished_or_modified_corpus_is_refused(corpus_output, tmp_path):
    unfinished = tmp_path / "unfinished"
    shutil.copytree(corpus_output, unfinished)
    (unfinished / "COMPLETED").unlink()
    result = _ablate(tmp_path / "w", "--corpus", str(unfinished), "--dry-run")
    assert result.exit_code == 1
    assert _errors(result) == (
        f"--corpus {unfinished}: not a completed stage output (no COMPLETED marker); run the stage "
        "that writes it, or let an interrupted run finish"
    )
    (unfinished / "COMPLETED").write_text("0" * 64 + "\n")
    result = _ablate(tmp_path / "w", "--corpus", str(unfinished), "--dry-run")
    assert result.exit_code == 1
    assert _errors(result) == (
        f"--corpus {unfinished}: COMPLETED does not match manifest.json; the output was modified"
    )
    assert not (tmp_path / "w").exists()


def test_a_corpus_without_the_splits_the_study_reads_is_refused(corpus_output, tmp_path):
    """The derived task's dev pairs come from the test split; a corpus without one is refused up
    front, and accepted with --glue-dir (then only train and validation are read)."""
    corpus = tmp_path / "no-test"
    shutil.copytree(corpus_output, corpus)
    manifest = Manifest.from_json((corpus / "manifest.json").read_text(), "manifest.json")
    kept = tuple(s for s in manifest.shards if s.split != "test")
    assert len(kept) < len(manifest.shards)
    text = Manifest(**{**manifest.__dict__, "shards": kept}).to_json()
    (corpus / "manifest.json").write_text(text)
    (corpus / "COMPLETED").write_text(completed_marker(text))
    result = _ablate(tmp_path / "w", "--corpus", str(corpus), "--dry-run")
    assert result.exit_code == 1
    assert _errors(result) == (
        f"--corpus {corpus}: no documents in its test split(s), which the study reads; rebuild it with "
        "`pipelines corpus --validation-fraction 0.05 --test-fraction 0.05`"
    )
    glue = _ablate(tmp_path / "w", "--corpus", str(corpus), "--glue-dir", str(require(MRPC)), "--dry-run")
    assert glue.exit_code == 0, glue.output
    assert glue.output.startswith("preset smoke: 2 pre-training runs")


def test_every_flag_problem_at_once_then_every_input(tmp_path):
    """The command line first (exit 2, not one path looked at: the missing dump is not named), then
    the inputs (exit 1)."""
    missing = tmp_path / "missing"
    bad_flags = f"--wiki-dump {missing} --books {missing} --vocab-size 50 --model 3/100/7 --precision fp8"
    bad_flags += " --pretrain-steps 0 --finetune-epochs 0 --seed -5 --beam-option runner=FnApiRunner"
    result = _chain(tmp_path / "w", *bad_flags.split())
    assert result.exit_code == 2
    assert _errors(result) == "; ".join(
        [
            "--vocab-size 50 leaves no room for word pieces after 5 special tokens and 100 [unused] slots: "
            "give at least 106",
            "--model: model size '3/100/7': hidden 100 is not a multiple of heads 7",
            "--precision must be one of fp32, bf16, fp16, got 'fp8'",
            "--pretrain-steps must be at least 1, got 0",
            "--finetune-epochs must be positive, got 0.0",
            "--seed must be between 0 and 4,294,967,295, got -5",
            "--beam-option 'runner=FnApiRunner' is not a Beam flag: give it as --beam-option=--name=value",
        ]
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    result = _chain(
        tmp_path / "w", "--wiki-dump", str(missing), "--books", str(empty), "--glue-dir", str(empty)
    )
    assert result.exit_code == 1
    assert _errors(result) == "; ".join(
        [
            f"--wiki-dump {missing}: no such file",
            f"--books {empty}: no *.txt (the books stage reads {empty}/*.txt)",
            f"--glue-dir {empty}: no train.tsv or dev.tsv (mrpc's layout of the GLUE download)",
        ]
    )
    assert not (tmp_path / "w").exists()


def test_good_inputs_pass_the_dry_run(corpus_output, tmp_path):
    inputs = [
        "--corpus",
        str(corpus_output),
        "--ner-dir",
        str(require(NER)),
        "--glue-dir",
        str(require(MRPC)),
    ]
    result = _ablate(tmp_path / "w", *inputs, "--glue-task", "MRPC", "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"--data-dir {require(NER)}" in result.output and "--task MRPC" in result.output
    assert not (tmp_path / "w").exists()


def test_a_failing_in_process_stage_is_one_line_not_a_traceback(tmp_path):
    """The derived task's stage runs in the chain's process; its refusal is the chain's one line."""

    def refuse() -> dict:
        raise ValueError("corpus: only 3 sentence pairs in its validation split")

    stages = [Stage("task", "a derived task", str(tmp_path / "task"), action=refuse)]
    with pytest.raises(StageFailed, match=r"^stage task failed: corpus: only 3 sentence pairs"):
        run_chain(stages, storage.Folder(tmp_path), log=lambda line: None)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "{not json",
            "not valid JSON (Expecting property name enclosed in double quotes at line 1, column 2)",
        ),
        ("[1, 2]", "a JSON list, not the record of the chain's stages"),
        ('{"vocab": [3]}', "stage vocab: a list where a JSON object is expected"),
        ('{"vocab": {"seconds": 3}}', "stage vocab: the field 'key' is missing"),
        (
            '{"vocab": {"key": "k", "seconds": "3"}}',
            "stage vocab: the field 'seconds' is a str, not int or float",
        ),
        ("\udcff", "not UTF-8 at byte 0"),
    ],
)
def test_a_damaged_chain_json_is_one_line_naming_it_and_what_to_do(dump, tmp_path, content, message):
    """The sweep's case: a damaged chain.json gave AttributeError, TypeError or RecursionError."""
    work = tmp_path / "w"
    work.mkdir()
    state = work / "chain.json"
    state.write_bytes(content.encode("utf-8", "surrogateescape"))
    result = _chain(work, "--wiki-dump", str(dump))
    assert result.exit_code == 1, result.output
    assert (
        _errors(result)
        == f"{state}: {message}; delete it to run every stage again, or choose another --workdir"
    )
    assert state.read_bytes() == content.encode("utf-8", "surrogateescape")  # left as it was


def test_a_second_chain_in_a_workdir_is_refused_naming_the_first(dump, tmp_path):
    """The sweep's case: two chains in one --workdir mixed their stages, and one told the user to
    --resume a run with no checkpoint."""
    work = tmp_path / "w"
    with OutputFolder.open(str(work), "chain", continuing=True, option="--workdir") as first:
        result = _chain(work, "--wiki-dump", str(dump))
        ablation = _ablate(work, "--wiki-dump", str(dump))
        assert [p.name for p in work.iterdir()] == [".claim"]  # nothing of the second chain's
    for refused in (result, ablation):
        assert refused.exit_code == 1, refused.output
        assert _errors(refused).startswith(
            f"--workdir {work}: being written by `chain` (run {first.run_id}, pid {os.getpid()} on host "
        )


def test_chains_own_flags_before_a_subcommand_are_refused(dump, tmp_path):
    result = CliRunner().invoke(
        chain_main, ["--workdir", str(tmp_path / "w"), "ablate", "--wiki-dump", str(dump)]
    )
    assert result.exit_code == 2 and _errors(result) == "--workdir is chain's, not chain ablate's"
    empty = CliRunner().invoke(chain_main, ["--workdir", "", "--wiki-dump", str(dump)])
    assert empty.exit_code == 2 and _errors(empty) == "--workdir must not be empty"


def test_a_corpus_for_pipelines_documents_is_checked_as_that_stage_checks_it(tmp_path):
    """Rows of one sentence each, or a missing file, are refused before any stage (the stage run dry)."""
    rows = "".join(f'{{"text": "usually , he would be there at {i} ."}}\n' for i in range(40))
    (tmp_path / "bookcorpus.jsonl").write_text(rows)
    result = _chain(tmp_path / "w", "--documents", str(tmp_path / "bookcorpus.jsonl"))
    assert result.exit_code == 1
    assert _errors(result).startswith(
        f"--documents {tmp_path / 'bookcorpus.jsonl'}: --input {tmp_path / 'bookcorpus.jsonl'}: 40 of its first "
        "40 records hold one sentence each: next-sentence prediction needs document boundaries"
    )
    missing = tmp_path / "missing.parquet"
    result = _chain(tmp_path / "w", "--documents", str(missing), "--documents-option=--group-rows=10")
    assert result.exit_code == 1
    assert (
        _errors(result) == f"--documents {missing}: --input {missing}: no file matches this path or pattern"
    )
    assert not (tmp_path / "w").exists()
