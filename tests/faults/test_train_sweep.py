"""A sweep of bad inputs over ``pretrain``, ``pretrain export`` and ``finetune glue|squad|swag|ner``:
each ends in exactly one line naming the flag or file, exit 1 or 2, no traceback, and every file
that was there before (earlier outputs included) is left byte for byte as it was.

In-process through the CLI table (``tests/clis.py``) with a tiny BERT made in code; every case
fails before training. Two cases also run as real processes, whose stderr must hold no traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import fsspec
import pytest
from click.testing import CliRunner

from schemas.outputs import RECORD_FILE, OutputRecord
from tests.clis import CLIS
from tests.conftest import SHARED_DATA, require
from tests.faults.test_checkpoint import _checkpoint
from tests.unit.test_finetune_common import VOCAB, hf_folder

ROOT = Path(__file__).resolve().parents[2]
TINY = "--config tiny --global-batch-size 8 --max-steps 2 --precision fp32 --num-workers 0"
QUICK = "--epochs 1 --batch-size 2 --max-seq-length 32"


@pytest.fixture(scope="module")
def world(shards, tmp_path_factory) -> Path:
    """Earlier outputs, checkpoints good and bad, and tiny task data, all made in code."""
    root = tmp_path_factory.mktemp("sweep")
    hf_folder(root / "hf")  # also an earlier `pretrain export` output
    _record(root / "hf", "pretrain export")
    hf_folder(root / "bad-vocab", vocab=[*VOCAB, "extra"])  # vocab.txt 1 longer than the embeddings
    _swapped_vocab_folder(root / "swapped-vocab", shards)
    _checkpoint(root / "run")  # a run folder with a committed checkpoint
    _record(root / "run", "pretrain")
    (root / "run-foreign").mkdir()
    (root / "run-foreign" / "metrics.jsonl").write_text("{}\n")
    (root / "run-foreign" / "NOTES.md").write_text("someone's notes")
    (root / "empty-run" / "checkpoints").mkdir(parents=True)
    (root / "blocker").write_text("a file where a folder should be")
    (root / "fresh").mkdir()  # an empty output folder: allowed, and it must stay empty
    (root / "incomplete").mkdir()  # shards whose COMPLETED marker is missing
    (root / "incomplete" / "manifest.json").write_text((shards / "manifest.json").read_text())
    for name in ("glue", "squad", "swag", "ner"):
        (root / f"{name}-done").mkdir()
        (root / f"{name}-done" / "metrics.json").write_text(json.dumps({"dev": {"accuracy": 0.9}}))
        _record(root / f"{name}-done", f"finetune {name}")
    ner = root / "conll"
    ner.mkdir()
    for split in ("train", "valid"):
        (ner / f"{split}.txt").write_text("the DT B-NP O\nmovie NN I-NP B-MISC\n\nplot NN B-NP O\n\n")
    return root


def _record(folder: Path, command: str) -> None:
    """Make ``folder`` an earlier, finished run of ``command``: its record lists every file in it."""
    files = tuple(sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()))
    (folder / RECORD_FILE).write_bytes(OutputRecord(command, "0123456789abcdef", files, "t", "t").to_json())


def _swapped_vocab_folder(folder: Path, shards: Path) -> None:
    """A tiny BERT with as many embedding rows as the shards' vocabulary has tokens, whose
    vocab.txt is that vocabulary with ids 1000 and 1001 swapped (same size, other token ids)."""
    from pretrain.model import BertConfig, BertForPreTraining

    manifest = json.loads((shards / "manifest.json").read_text())
    tokens = Path(manifest["params"]["vocab"]).read_text(encoding="utf-8").splitlines()
    tokens[1000], tokens[1001] = tokens[1001], tokens[1000]
    config = BertConfig(
        vocab_size=len(tokens),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    BertForPreTraining(config, seed=0).save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")


def _cases(shards: Path) -> list[tuple[str, str, str]]:
    """(name, command line with {root} for the world folder, text the one line must contain)."""
    rte = require(SHARED_DATA / "glue_format_samples" / "rte" / "dummy_data" / "RTE")
    squad = require(SHARED_DATA / "squad" / "allennlp-models_test_fixtures_squad.json")
    swag = require(SHARED_DATA / "swag" / "allennlp-models_test_fixtures_swag.csv")
    pre = f"pretrain --shards {shards} {TINY}"
    init = (
        f"pretrain --shards {shards} {TINY.replace('--config tiny ', '')} --output {{root}}/new --init-from"
    )
    glue = f"finetune glue --task rte --data-dir {rte} {QUICK}"
    sq = f"finetune squad --version 1.1 --predict-file {squad} --max-seq-length 64 --max-query-length 16"
    sw = f"finetune swag --train-file {swag} --dev-file {swag} {QUICK}"
    ner = f"finetune ner --data-dir {{root}}/conll {QUICK}"
    return [
        ("pretrain: existing run folder", f"{pre} --output {{root}}/run", "--resume {root}/run"),
        (
            "pretrain: --overwrite beside files no run wrote",
            f"{pre} --output {{root}}/run-foreign --overwrite",
            "NOTES.md",
        ),
        (
            "pretrain: --overwrite, then a missing vocabulary",
            f"{pre} --output {{root}}/run --overwrite --vocab {{root}}/nope.txt",
            "nope.txt",
        ),
        ("pretrain: --overwrite with --resume", f"{pre} --resume {{root}}/run --overwrite", "--overwrite"),
        ("pretrain: --lr nan", f"{pre} --output {{root}}/new --lr nan", "--lr"),
        ("pretrain: --weight-decay -1", f"{pre} --output {{root}}/new --weight-decay -1", "--weight-decay"),
        (
            "pretrain: --masked-lm-prob 2",
            f"{pre} --output {{root}}/new --dynamic-masking --masked-lm-prob 2",
            "--masked-lm-prob",
        ),
        (
            "pretrain: shards without COMPLETED",
            f"pretrain --shards {{root}}/incomplete {TINY} --output {{root}}/fresh",
            "COMPLETED",
        ),
        (
            "pretrain: shards without COMPLETED, a new output",
            f"pretrain --shards {{root}}/incomplete {TINY} --output {{root}}/new",
            "COMPLETED",
        ),
        (
            "pretrain: missing vocabulary",
            f"{pre} --output {{root}}/fresh --vocab {{root}}/nope.txt",
            "nope.txt",
        ),
        ("pretrain: unwritable output", f"{pre} --output {{root}}/blocker/run", "cannot write"),
        (
            "pretrain: --init-from vocab.txt against the embeddings",
            f"{init} {{root}}/bad-vocab",
            "21 tokens but the word embeddings",
        ),
        (
            "pretrain: --init-from vocab.txt against the shards'",
            f"{init} {{root}}/hf",
            "has 20 tokens but the shards' vocabulary",
        ),
        (
            "pretrain: --init-from vocab.txt, same size, other ids",
            f"{init} {{root}}/swapped-vocab",
            "both have 30522 tokens but differ from id 1000",
        ),
        (
            "export: existing output",
            "pretrain export --checkpoint {root}/run --output {root}/hf",
            "of an earlier `pretrain export` run",
        ),
        (
            "export: run folder without a checkpoint",
            "pretrain export --checkpoint {root}/empty-run --output {root}/new",
            "no complete checkpoint",
        ),
        (
            "export: unwritable output",
            "pretrain export --checkpoint {root}/run --output {root}/blocker/hf",
            "cannot write",
        ),
        (
            "glue: existing output",
            f"{glue} --checkpoint {{root}}/hf --output {{root}}/glue-done",
            "of an earlier `finetune glue` run",
        ),
        (
            "glue: missing data dir",
            "finetune glue --task rte --data-dir {root}/nowhere --checkpoint {root}/hf --output {root}/new",
            "nowhere",
        ),
        (
            "glue: vocab.txt against the embeddings",
            f"{glue} --checkpoint {{root}}/bad-vocab --output {{root}}/new",
            "21 tokens",
        ),
        (
            "glue: missing checkpoint",
            f"{glue} --checkpoint {{root}}/no-model --output {{root}}/new",
            "no-model",
        ),
        ("glue: --lr inf", f"{glue} --checkpoint {{root}}/hf --output {{root}}/new --lr inf", "--lr"),
        (
            "glue: unwritable output",
            f"{glue} --checkpoint {{root}}/hf --output {{root}}/blocker/ft",
            "cannot write",
        ),
        (
            "glue: --overwrite, then a missing data dir",
            "finetune glue --task rte --data-dir {root}/nowhere --checkpoint {root}/hf --output {root}/glue-done --overwrite",
            "nowhere",
        ),
        (
            "glue: --overwrite, then a missing checkpoint",
            f"{glue} --checkpoint {{root}}/no-model --output {{root}}/glue-done --overwrite",
            "no-model",
        ),
        (
            "squad: existing output",
            f"{sq} --checkpoint {{root}}/hf --output {{root}}/squad-done",
            "of an earlier `finetune squad` run",
        ),
        (
            "squad: missing predict file",
            "finetune squad --version 1.1 --predict-file {root}/nope.json --checkpoint {root}/hf --output {root}/new",
            "nope.json",
        ),
        (
            "squad: vocab.txt against the embeddings",
            f"{sq} --checkpoint {{root}}/bad-vocab --output {{root}}/new",
            "21 tokens",
        ),
        (
            "squad: --overwrite, then a missing predict file",
            "finetune squad --version 1.1 --predict-file {root}/nope.json --checkpoint {root}/hf --output {root}/squad-done --overwrite",
            "nope.json",
        ),
        (
            "squad: --overwrite, then vocab.txt against the embeddings",
            f"{sq} --checkpoint {{root}}/bad-vocab --output {{root}}/squad-done --overwrite",
            "21 tokens",
        ),
        (
            "squad: --overwrite, then --lr inf",
            f"{sq} --checkpoint {{root}}/hf --output {{root}}/squad-done --overwrite --lr inf",
            "--lr",
        ),
        (
            "swag: existing output",
            f"{sw} --checkpoint {{root}}/hf --output {{root}}/swag-done",
            "of an earlier `finetune swag` run",
        ),
        (
            "swag: missing data dir",
            "finetune swag --data-dir {root}/nowhere --checkpoint {root}/hf --output {root}/new",
            "nowhere",
        ),
        (
            "swag: vocab.txt against the embeddings",
            f"{sw} --checkpoint {{root}}/bad-vocab --output {{root}}/new",
            "21 tokens",
        ),
        (
            "swag: --overwrite, then a missing data dir",
            "finetune swag --data-dir {root}/nowhere --checkpoint {root}/hf --output {root}/swag-done --overwrite",
            "nowhere",
        ),
        (
            "swag: --overwrite, then vocab.txt against the embeddings",
            f"{sw} --checkpoint {{root}}/bad-vocab --output {{root}}/swag-done --overwrite",
            "21 tokens",
        ),
        (
            "ner: existing output",
            f"{ner} --checkpoint {{root}}/hf --output {{root}}/ner-done",
            "of an earlier `finetune ner` run",
        ),
        (
            "ner: missing data dir",
            "finetune ner --data-dir {root}/nowhere --checkpoint {root}/hf --output {root}/new",
            "nowhere",
        ),
        (
            "ner: run folder without a checkpoint",
            f"{ner} --checkpoint {{root}}/empty-run --output {{root}}/new",
            "no complete checkpoint",
        ),
        (
            "ner: --overwrite, then a missing data dir",
            "finetune ner --data-dir {root}/nowhere --checkpoint {root}/hf --output {root}/ner-done --overwrite",
            "nowhere",
        ),
        (
            "ner: --overwrite, then a run folder without a checkpoint",
            f"{ner} --checkpoint {{root}}/empty-run --output {{root}}/ner-done --overwrite",
            "no complete checkpoint",
        ),
    ]


CASE_NAMES = [name for name, _, _ in _cases(Path("shards"))]


def _snapshot(root: Path) -> dict[str, str]:
    """Every file and folder under ``root``: its SHA-256 ('' for a folder)."""
    return {
        str(p.relative_to(root)): "" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


def _one_line(output: str) -> str:
    lines = [
        line for line in output.splitlines() if line.strip() and not line.startswith(("Usage:", "Try '"))
    ]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize("index", range(len(CASE_NAMES)), ids=CASE_NAMES)
def test_a_bad_input_is_one_line_and_changes_nothing(index, world, shards):
    name, command, expected = _cases(shards)[index]
    program, *args = command.format(root=world).split()
    before = _snapshot(world)
    result = CliRunner().invoke(CLIS[program], args)
    assert result.exit_code in (1, 2), (name, result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        name,
        repr(result.exception),
    )
    assert "Traceback" not in result.output
    line = _one_line(result.output)
    assert expected.format(root=world) in line, (name, line)
    if "--output" in line and (": holds " in line or "cannot write" in line):
        assert result.exit_code == 1, (name, line)  # an output in the way (README: exit codes)
    assert _snapshot(world) == before, f"{name}: files changed"


@pytest.mark.parametrize("program", ["pretrain", "finetune"])
def test_a_refused_output_is_one_line_on_stderr_of_a_real_process(program, world, shards):
    args = {
        "pretrain": ["--shards", str(shards), *TINY.split(), "--output", str(world / "run")],
        "finetune": [
            "ner",
            "--data-dir",
            str(world / "conll"),
            "--checkpoint",
            str(world / "hf"),
            "--output",
            str(world / "ner-done"),
        ],
    }[program]
    before = _snapshot(world)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", program, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr  # an output in the way (README: exit codes)
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert ": holds the " in _one_line(done.stderr) and "earlier" in _one_line(done.stderr)
    assert _snapshot(world) == before


def _temporary(folder: Path) -> list[str]:
    """The entries of a temporary folder, but torch's per-user kernel cache (``torchinductor_USER``,
    shared by every run and meant to stay)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("torchinductor_"))


def test_a_run_leaves_no_temporary_files_on_success_or_failure(shards, tmp_path, monkeypatch):
    """A tiny run into a bucket (its TensorBoard mirror is local) that succeeds, and one that fails
    at its second metrics record: the temporary folder holds no more entries than before."""
    from pretrain.config import PretrainConfig
    from pretrain.metrics import MetricsLog
    from pretrain.train import train

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    tiny = {"config": "tiny", "global_batch_size": 8, "max_steps": 2, "save_steps": 2, "log_steps": 1}
    tiny |= {"warmup_steps": 1, "precision": "fp32", "num_workers": 0}
    record = train(PretrainConfig(shards=str(shards), output="memory://sweep-temp/ok", **tiny))
    assert record["step"] == 2 and fsspec.filesystem("memory").exists("/sweep-temp/ok/tensorboard")
    assert _temporary(scratch) == []
    # The uploaded events hold the last step: the writer is closed before the mirror is uploaded.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    memory, board = fsspec.filesystem("memory"), tmp_path / "board"
    board.mkdir()
    for name in memory.ls("/sweep-temp/ok/tensorboard", detail=False):
        (board / name.rsplit("/", 1)[-1]).write_bytes(memory.cat_file(name))
    events = EventAccumulator(str(board))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2]

    original = MetricsLog.log

    def failing(self, record):
        original(self, record)
        if record["step"] == 2:
            raise OSError("the bucket went away")

    monkeypatch.setattr(MetricsLog, "log", failing)
    with pytest.raises(OSError, match="went away"):
        train(PretrainConfig(shards=str(shards), output="memory://sweep-temp/failed", **tiny))
    assert _temporary(scratch) == []


def test_overwrite_replaces_an_earlier_finetune_run_once_its_checks_pass(world, tmp_path):
    """The counterpart of the refusals above: with every check passed, --overwrite removes the
    earlier run's files (also one the new run does not write again) and the run writes its own."""
    output = tmp_path / "ner"
    output.mkdir()
    (output / "metrics.json").write_text('{"dev": {"f1": 0.5}}')
    (output / "test_predictions.txt").write_text("an earlier run's test split\n")
    _record(output, "finetune ner")
    args = f"ner --data-dir {world}/conll {QUICK} --checkpoint {world}/hf --output {output} --overwrite"
    result = CliRunner().invoke(CLIS["finetune"], args.split())
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in output.iterdir()) == [RECORD_FILE, "metrics.json", "valid_predictions.txt"]
    assert json.loads((output / "metrics.json").read_text())["task"] == "ner"


def test_a_shard_lost_mid_run_is_one_line_naming_the_step_and_the_resume(shards, tmp_path, monkeypatch):
    """A shard that becomes unreadable at the second batch: one line with the shard's error, the
    step the run stopped at and the ``--resume`` to continue with; no COMPLETED marker."""
    from pretrain import data
    from pretrain.config import PretrainConfig
    from pretrain.train import train
    from schemas.commands import InputError

    original, calls = data.collate, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise data.InputError("part-00000-of-00001.arrow: unreadable after 3 attempts")
        return original(*args, **kwargs)

    monkeypatch.setattr(data, "collate", failing)
    output = tmp_path / "run"
    tiny = {"config": "tiny", "global_batch_size": 8, "max_steps": 3, "log_steps": 1, "warmup_steps": 1}
    tiny |= {"precision": "fp32", "num_workers": 0}
    with pytest.raises(InputError) as caught:
        train(PretrainConfig(shards=str(shards), output=str(output), **tiny))
    message = str(caught.value)
    assert "\n" not in message, message
    assert message.startswith("part-00000-of-00001.arrow: unreadable after 3 attempts; stopped at step 1; ")
    assert message.endswith(f"continue with --resume {output} once the data is reachable and whole")
    assert not (output / "COMPLETED").exists()
