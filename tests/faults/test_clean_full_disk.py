"""A full disk, command by command (in-process, the real CLIs): the disk fills up while a command
writes its main output (``tests/faults/full_disk.py``). Each ends with one line naming the file
and exit 1, prints neither a traceback nor ``done``, leaves no truncated file under its final name,
no temporary file and no completion marker; and a full standard output is one line too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune.cli import main as finetune
from pipelines.cli import main as pipelines
from pretrain.cli import main as pretrain
from schemas.storage import is_temporary_name
from tests.conftest import SHARED_DATA, require, save_tiny_bert
from tests.faults.full_disk import fill_disk_after
from tests.unit.test_finetune_common import hf_folder
from wordpiece.cli import main as wordpiece

FULL = "No space left on device"


def _invoke(cli, *args: str):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _one_error_line(output: str) -> str:
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.lower().startswith("error:")]
    assert len(errors) == 1, output
    return errors[0]


def _leftovers(root: Path) -> list[str]:
    """Temporary files and completion markers anywhere under ``root``."""
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if is_temporary_name(p.name) or p.name in ("COMPLETED", "COMMITTED")
    )


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory) -> Path:
    """A tiny random BERT over the released uncased vocabulary (real text tokenises)."""
    return save_tiny_bert(tmp_path_factory.mktemp("bert"))


def test_finetune_glue_leaves_no_truncated_model(bert_folder: Path, tmp_path: Path, monkeypatch):
    data = require(SHARED_DATA / "glue_format_samples" / "rte" / "dummy_data" / "RTE")
    out = tmp_path / "rte"
    failed = fill_disk_after(monkeypatch, "model.safetensors")
    result = _invoke(
        finetune,
        "glue",
        "--task",
        "rte",
        "--data-dir",
        data,
        "--checkpoint",
        bert_folder,
        "--output",
        out,
        "--epochs",
        "1",
        "--batch-size",
        "2",
        "--max-seq-length",
        "32",
    )
    assert result.exit_code == 1, result.output
    model = out / "model" / "model.safetensors"
    assert failed == [str(model)]
    assert _one_error_line(result.output) == f"error: {model}: cannot write it ({FULL})"
    assert not model.exists() and not (out / "metrics.json").exists() and not _leftovers(out)


def test_finetune_features_leaves_no_truncated_shard_and_no_completed(tmp_path: Path, monkeypatch):
    text = tmp_path / "text.txt"
    text.write_text("the movie was good\nthe plot was bad\n")
    out = tmp_path / "feats"
    fill_disk_after(monkeypatch, "features-*.arrow")
    result = _invoke(
        finetune,
        "features",
        "--checkpoint",
        hf_folder(tmp_path / "hf"),
        "--input",
        text,
        "--output",
        out,
        "--max-seq-length",
        "16",
        "--layers",
        "-1",
    )
    assert result.exit_code == 1, result.output
    line = _one_error_line(result.output)
    assert line.lower().startswith(f"error: {out}/features-") and line.endswith(
        f".arrow: cannot write it ({FULL})"
    )
    assert not list(out.glob("features-*")) and not _leftovers(out)


def test_pipelines_examples_names_the_shard_and_is_not_completed(corpus_output, vocab, tmp_path, monkeypatch):
    out = tmp_path / "shards"
    fill_disk_after(monkeypatch, "part-00001-of-00002.arrow")
    result = _invoke(
        pipelines,
        "examples",
        "--corpus",
        corpus_output,
        "--vocab",
        vocab,
        "--output",
        out,
        "--max-seq-length",
        "64",
        "--dupe-factor",
        "1",
        "--num-shards",
        "2",
        "--num-buckets",
        "4",
        "--runner",
        "FnApiRunner",
    )
    assert result.exit_code == 1, result.output
    shard = out / "examples" / "part-00001-of-00002.arrow"
    assert _one_error_line(result.output) == f"error: {shard}: cannot write it ({FULL})"
    assert not shard.exists() and not (out / ".temp").exists() and not _leftovers(out)


@pytest.mark.parametrize("name", ["learn-00000-of-00001.arrow", "vocab.txt"])  # in a DoFn, then after Beam
def test_wordpiece_train_names_the_file_and_is_not_completed(name, corpus_output, tmp_path, monkeypatch):
    out = tmp_path / "vocab"
    fill_disk_after(monkeypatch, name)
    result = _invoke(
        wordpiece,
        "train",
        "--corpus",
        corpus_output,
        "--output",
        out,
        "--vocab-size",
        "2000",
        "--num-count-shards",
        "1",
        "--runner",
        "FnApiRunner",
    )
    assert result.exit_code == 1, result.output
    target = out / "word_counts" / name if name.endswith(".arrow") else out / name
    assert _one_error_line(result.output) == f"error: {target}: cannot write it ({FULL})"
    assert not target.exists() and not _leftovers(out)


def test_pretrain_checkpoint_on_a_full_disk_is_one_line_and_never_done(shards, tmp_path, monkeypatch):
    run = tmp_path / "run"
    fill_disk_after(monkeypatch, "model.safetensors", limit_bytes=1000)
    result = _invoke(
        pretrain,
        "--shards",
        shards,
        "--output",
        run,
        "--config",
        "tiny",
        "--max-steps",
        "2",
        "--global-batch-size",
        "4",
        "--num-workers",
        "0",
        "--precision",
        "fp32",
        "--log-steps",
        "1",
    )
    assert result.exit_code == 1, result.output
    model = run / "checkpoints" / "step-00000002" / "model.safetensors"
    line = _one_error_line(result.output)
    assert (
        line.startswith("error: writing the checkpoint of step 2")
        and f"{model}: cannot write it ({FULL})" in line
    )
    assert "done," not in result.output  # the progress line of a finished run
    assert not model.exists() and not _leftovers(run)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this platform")
def test_a_full_standard_output_is_one_line(tmp_path: Path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world"]) + "\n")
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "wordpiece", "encode", "--vocab", str(vocab), "--uncased"],
            input="hello world\n" * 10_000,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1, done.stderr
    assert _one_error_line(done.stderr) == "error: OSError: [Errno 28] No space left on device"
