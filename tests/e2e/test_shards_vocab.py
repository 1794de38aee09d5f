"""Shards carry their vocabulary: made from the enwiki excerpt with a vocabulary that is then
deleted, moved to another folder, they train without ``--vocab``; ``--vocab`` overrides the copy
only with the same vocabulary; an output written before shards carried one reads with ``--vocab``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from pretrain import checkpoint as ckpt
from pretrain.cli import main as pretrain_main
from pretrain.config import PretrainConfig
from pretrain.train import train
from schemas import completed_marker, verify_completed
from wordpiece.tokenizer import read_vocab_file, vocab_sha256

pytestmark = pytest.mark.slow

TINY = [
    "--config",
    "tiny",
    "--global-batch-size",
    "8",
    "--precision",
    "fp32",
    "--num-workers",
    "0",
    "--quiet",
]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> str:
    """A copy of the released bert-base-uncased vocab.txt that the test may delete (the shards
    fixture of tests/e2e/conftest.py makes this module's shards with it)."""
    from tests.conftest import SHARED_DATA, require

    released = require(SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt")
    copy = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    shutil.copyfile(released, copy)
    return str(copy)


@pytest.fixture(scope="module")
def moved(shards, vocab, tmp_path_factory) -> Path:
    """The module's shards moved to another folder, the vocabulary they were made with deleted."""
    target = tmp_path_factory.mktemp("elsewhere") / "seq64"
    shutil.move(str(shards), target)
    Path(vocab).unlink()
    return target


def _pretrain(*args: str, expect: int) -> str:
    result = CliRunner().invoke(pretrain_main, list(args))
    assert result.exit_code == expect, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.output


def _error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    return lines[0]


def test_moved_shards_train_without_vocab(moved, vocab, tmp_path):
    manifest = json.loads((moved / "manifest.json").read_text())
    assert manifest["params"]["vocab"] == vocab and not Path(vocab).exists()
    copy = (moved / "vocab.txt").read_bytes()
    assert manifest["vocab_file"]["path"] == "vocab.txt" and manifest["vocab_file"]["num_bytes"] == len(copy)
    assert vocab_sha256(read_vocab_file(str(moved / "vocab.txt"))) == manifest["params"]["vocab_sha256"]

    run = tmp_path / "run"
    record = train(
        PretrainConfig(
            shards=str(moved),
            output=str(run),
            config="tiny",
            global_batch_size=8,
            max_steps=2,
            save_steps=2,
            log_steps=1,
            precision="fp32",
            num_workers=0,
        )
    )
    assert record["step"] == 2
    step = run / "checkpoints" / "step-00000002"
    assert (step / "vocab.txt").read_bytes() == copy  # the checkpoint carries the same vocabulary on
    state = ckpt.load_state(str(step / ckpt.TRAINER_STATE))
    assert state["vocab_sha256"] == manifest["params"]["vocab_sha256"] and state["cased"] is False


def test_vocab_overrides_the_copy_only_with_the_same_vocabulary(moved, tmp_path):
    from tests.conftest import SHARED_DATA

    released = SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"
    other = tmp_path / "other-vocab.txt"
    tokens = released.read_text(encoding="utf-8").splitlines()
    tokens[1000], tokens[1001] = tokens[1001], tokens[1000]  # same size, other ids
    other.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    common = ["--shards", str(moved), *TINY, "--max-steps", "1", "--save-steps", "1"]

    line = _error_line(_pretrain(*common, "--output", str(tmp_path / "a"), "--vocab", str(other), expect=1))
    recorded = json.loads((moved / "manifest.json").read_text())["params"]["vocab_sha256"]
    assert (
        f"--vocab {other} is not the vocabulary the shards at {moved} were made with ({moved}/vocab.txt)"
        in line
    )
    assert f"{vocab_sha256(tokens)[:12]}… against {recorded[:12]}…" in line
    assert not (tmp_path / "a" / "checkpoints").exists()

    _pretrain(*common, "--output", str(tmp_path / "b"), "--vocab", str(released), expect=0)
    assert (tmp_path / "b" / "checkpoints" / "step-00000001" / "COMMITTED").exists()


def _old_layout(shards: Path, folder: Path) -> Path:
    """``shards`` without a copy of their vocabulary: no vocab.txt, no ``vocab_file`` in the
    manifest (COMPLETED made for that manifest)."""
    shutil.copytree(shards, folder)
    (folder / "vocab.txt").unlink()
    data = json.loads((folder / "manifest.json").read_text())
    del data["vocab_file"]
    text = json.dumps(data, sort_keys=True, indent=2) + "\n"
    (folder / "manifest.json").write_text(text)
    (folder / "COMPLETED").write_text(completed_marker(text))
    assert verify_completed(text, completed_marker(text), str(folder), "examples").vocab_file is None
    return folder


def test_an_output_without_a_copy_reads_with_vocab(moved, vocab, tmp_path):
    from tests.conftest import SHARED_DATA

    old = _old_layout(moved, tmp_path / "old")
    common = ["--shards", str(old), *TINY, "--max-steps", "1", "--save-steps", "1"]
    line = _error_line(_pretrain(*common, "--output", str(tmp_path / "a"), expect=1))
    assert line == (
        f"error: {old} carries no copy of its vocabulary: pass --vocab with the one they were made with "
        f"(params.vocab records {vocab!r})"
    )

    released = SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"
    _pretrain(*common, "--output", str(tmp_path / "b"), "--vocab", str(released), expect=0)
    assert (tmp_path / "b" / "checkpoints" / "step-00000001" / "COMMITTED").exists()
