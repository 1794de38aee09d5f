"""Checkpoint damage: pickle payloads, flipped bytes, truncated files, a ``trainer.json`` that is not
JSON or not an object, weights that are not finite, a ``pytorch_model.bin`` that would run code.
None runs code; each ends in one line naming the file, in resume (``pretrain --resume``), ``pretrain
export`` and fine-tuning's loader, and nothing is written."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from finetune.encoder import load_encoder
from pretrain import checkpoint as ckpt
from pretrain.cli import main as pretrain
from pretrain.model import BertConfig, BertForPreTraining
from schemas import storage
from schemas.commands import CommandError, InputError
from tests.unit.test_finetune_common import VOCAB, hf_folder, tiny_model


class _Payload:
    """Creates ``marker`` when unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _checkpoint(run: Path, model: torch.nn.Module | None = None) -> str:
    url = ckpt.step_url(str(run), 2)
    folder = Path(url)
    (model or tiny_model()).save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    state = {"step": 2, "cased": False, "optimizer": {"state": {0: {"exp_avg": torch.ones(3)}}}}
    ckpt.save_state(state, storage.Folder(url), ckpt.TRAINER_STATE)
    ckpt.save_state(ckpt.rng_state(), storage.Folder(url), ckpt.rng_file(0))
    ckpt.commit(storage.Folder(url), 2)
    return url


def _use(run: Path) -> None:
    """What resume, export and fine-tuning do first: resolve (hashes) and read the states."""
    found = ckpt.resolve(str(run))
    ckpt.load_state(f"{found.url}/{ckpt.TRAINER_STATE}")
    ckpt.load_state(f"{found.url}/{ckpt.rng_file(0)}")


def _lines(run: Path, tmp_path: Path, resume: bool = True) -> dict[str, str]:
    """The one line each of resume (before the shards are read), export and fine-tuning ends with
    on ``run`` (exit 1, nothing written)."""
    said = {}
    commands = {"export": ["export", "--checkpoint", str(run), "--output", str(tmp_path / "hf-out")]}
    if resume:
        commands["resume"] = ["--shards", str(tmp_path / "shards"), "--resume", str(run)]
    for name, args in commands.items():
        result = CliRunner().invoke(pretrain, args)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), result.output
        said[name] = lines[0]
    assert not (tmp_path / "hf-out").exists()
    with pytest.raises(InputError) as loaded:
        load_encoder(str(run))
    said["finetune"] = str(loaded.value)
    assert all("\n" not in line for line in said.values())
    return said


def test_round_trip_keeps_every_type(tmp_path: Path):
    url = _checkpoint(tmp_path / "run")
    state = ckpt.load_state(f"{url}/{ckpt.TRAINER_STATE}")
    assert state["optimizer"]["state"][0]["exp_avg"].tolist() == [1.0, 1.0, 1.0]
    rng = ckpt.load_state(f"{url}/{ckpt.rng_file(0)}")
    ckpt.set_rng_state(rng)
    ckpt.set_rng_state(ckpt.rng_state())  # numpy / python states decode into valid states
    assert isinstance(rng["python"], tuple)


@pytest.mark.parametrize(
    "name",
    [
        "trainer.json",
        "trainer.safetensors",
        "rng-rank00000.json",
        "rng-rank00000.safetensors",
        "model.safetensors",
        "config.json",
        "vocab.txt",
    ],
)
def test_pickle_payload_under_any_name_runs_no_code(tmp_path: Path, name: str):
    run, marker = tmp_path / "run", tmp_path / "pwned"
    url = _checkpoint(run)
    Path(url, name).write_bytes(pickle.dumps(_Payload(marker)))
    ckpt.commit(
        storage.Folder(url), 2
    )  # even a re-committed (matching hash) payload is only ever parsed as data
    with pytest.raises((InputError, CommandError, ValueError, OSError)) as err:
        _use(run)
        load_encoder(str(run))
    assert "\n" not in str(err.value)
    assert not marker.exists()


def test_a_checkpoint_of_pickles_is_refused_unread(tmp_path: Path):
    run, marker = tmp_path / "run", tmp_path / "pwned"
    url = _checkpoint(run)
    for stale in ("trainer.json", "trainer.safetensors"):
        Path(url, stale).unlink()
    Path(url, "trainer.pt").write_bytes(pickle.dumps(_Payload(marker)))
    ckpt.commit(storage.Folder(url), 2)
    with pytest.raises(InputError, match=r"trainer.json: missing; the checkpoint is incomplete"):
        _use(run)
    assert not marker.exists()


@pytest.mark.parametrize(
    "name", ["model.safetensors", "trainer.json", "trainer.safetensors", "rng-rank00000.json", "config.json"]
)
def test_flipped_byte_is_named(tmp_path: Path, name: str):
    run = tmp_path / "run"
    url = _checkpoint(run)
    path = Path(url, name)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    said = _lines(run, tmp_path)
    assert all(f"{name}: content differs from its SHA-256" in line for line in said.values()), said


def test_truncated_file_makes_the_checkpoint_incomplete(tmp_path: Path):
    run = tmp_path / "run"
    url = _checkpoint(run)
    path = Path(url, "model.safetensors")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(InputError, match="no complete checkpoint"):
        ckpt.resolve(str(run))


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("{not json", "trainer.json: not valid JSON"),
        ("[1, 2]", "trainer.json: holds a JSON list, not an object"),
        ('{"train_config": [1, 2]}', "trainer.json: no train_config"),
        ('{"train_config": {"lr": "fast"}}', "trainer.json: damaged train_config"),
        ("\ud800".encode("utf-8", "surrogatepass"), "trainer.json: not UTF-8"),
    ],
)
def test_a_damaged_trainer_json_is_one_line_when_resuming(tmp_path: Path, content, said):
    run = tmp_path / "run"
    url = _checkpoint(run)
    path = Path(url, "trainer.json")
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    ckpt.commit(storage.Folder(url), 2)  # consistently committed: what a writer with a bug would leave
    result = CliRunner().invoke(pretrain, ["--shards", str(tmp_path / "shards"), "--resume", str(run)])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"error: {url}/{said}"), result.output
    if "train_config" not in said:  # the state itself is damaged, not only the settings in it
        with pytest.raises(InputError, match=said):
            ckpt.load_state(f"{url}/{ckpt.TRAINER_STATE}")


def test_a_damaged_safetensors_header_is_one_line(tmp_path: Path):
    url = _checkpoint(tmp_path / "run")
    Path(url, "trainer.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(InputError, match="trainer.safetensors: not a valid safetensors"):
        ckpt.load_state(f"{url}/{ckpt.TRAINER_STATE}")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_weights_that_are_not_finite_are_refused_everywhere(tmp_path: Path, value: float):
    model = tiny_model()
    with torch.no_grad():
        model.bert.encoder.layer[1].output.dense.weight[0, 0] = value
    run = tmp_path / "run"
    _checkpoint(run, model)
    said = _lines(run, tmp_path, resume=False)  # resume: tests/faults/test_divergence.py
    name = "bert.encoder.layer.1.output.dense.weight holds NaN or infinity"
    assert all(name in line for line in said.values()), said


def test_an_optimizer_state_that_is_not_finite_is_refused_on_resume(tmp_path: Path):
    run = tmp_path / "run"
    url = _checkpoint(run)
    state = {"step": 2, "optimizer": {"state": {0: {"exp_avg": torch.tensor([1.0, float("nan")])}}}}
    ckpt.save_state(state, storage.Folder(url), ckpt.TRAINER_STATE)
    ckpt.commit(storage.Folder(url), 2)
    with pytest.raises(
        InputError, match=r"trainer.safetensors: optimizer.state.0.exp_avg holds NaN or infinity"
    ):
        ckpt.load_state(f"{url}/{ckpt.TRAINER_STATE}")


def test_a_pytorch_model_bin_that_would_run_code_is_one_line(tmp_path: Path, shards: Path):
    """As ``--init-from`` (a folder of the shards' vocabulary) and fine-tuning's ``--checkpoint``."""
    marker, init = tmp_path / "pwned", tmp_path / "init"
    tokens = (shards / "vocab.txt").read_text().splitlines()
    BertForPreTraining(BertConfig.preset("tiny", len(tokens))).save_pretrained(init)
    (init / "vocab.txt").write_text("\n".join(tokens) + "\n")
    for folder in (init, hf_folder(tmp_path / "hf")):
        (folder / "model.safetensors").unlink()
        torch.save({"weights": _Payload(marker)}, folder / "pytorch_model.bin")
    args = ["--shards", str(shards), "--init-from", str(tmp_path / "init"), "--output", str(tmp_path / "o")]
    result = CliRunner().invoke(pretrain, [*args, "--precision", "fp32"])
    with pytest.raises(InputError) as loaded:
        load_encoder(str(tmp_path / "hf"))
    for line in (str(loaded.value), result.output.strip()):
        assert "pytorch_model.bin: not plain weights (unpickling it would run code, or it is damaged)" in line
        assert "\n" not in line
    assert result.exit_code == 1 and not marker.exists()


def test_init_from_and_fine_tuning_read_a_run_folder_one_way(tmp_path: Path, shards: Path):
    """``--init-from RUN`` and ``--checkpoint RUN`` both name the run's newest complete checkpoint
    (``pretrain.checkpoint.weights_folder``): a run whose only checkpoint is not committed is one line."""
    run = tmp_path / "run"
    Path(_checkpoint(run), ckpt.COMMITTED).unlink()
    args = ["--shards", str(shards), "--init-from", str(run), "--output", str(tmp_path / "o")]
    result = CliRunner().invoke(pretrain, [*args, "--precision", "fp32"])
    with pytest.raises(InputError) as loaded:
        load_encoder(str(run))
    line = f"{run}: no complete checkpoint under {run}/checkpoints (a run folder written by `pretrain`)"
    assert str(loaded.value) == line
    assert result.exit_code == 1 and result.output.strip() == f"error: {line}", result.output
