"""Checkpoint faults: pickle payloads, flipped bytes and truncated files never run code and end in
one line naming the file (the pickle-free format of pretrain/checkpoint.py)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from finetune.common import load_encoder
from pretrain import checkpoint as ckpt
from schemas.commands import CommandError
from tests.unit.test_finetune_common import VOCAB, tiny_model


class _Payload:
    """Creates ``marker`` when unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _checkpoint(run: Path) -> str:
    url = ckpt.step_url(str(run), 2)
    folder = Path(url)
    tiny_model().save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    state = {"step": 2, "cased": False, "optimizer": {"state": {0: {"exp_avg": torch.ones(3)}}}}
    ckpt.save_state(state, f"{url}/{ckpt.TRAINER_STATE}")
    ckpt.save_state(ckpt.rng_state(), f"{url}/{ckpt.rng_file(0)}")
    ckpt.commit(url, 2)
    return url


def _use(run: Path) -> None:
    """What resume, export and fine-tuning do first: resolve (hashes) and read the states."""
    found = ckpt.resolve(str(run))
    ckpt.load_state(f"{found.url}/{ckpt.TRAINER_STATE}")
    ckpt.load_state(f"{found.url}/{ckpt.rng_file(0)}")


def test_round_trip_keeps_every_type(tmp_path: Path):
    url = _checkpoint(tmp_path / "run")
    state = ckpt.load_state(f"{url}/{ckpt.TRAINER_STATE}")
    assert state["optimizer"]["state"][0]["exp_avg"].tolist() == [1.0, 1.0, 1.0]
    rng = ckpt.load_state(f"{url}/{ckpt.rng_file(0)}")
    before = torch.rand(2)
    ckpt.set_rng_state(rng)
    ckpt.set_rng_state(ckpt.rng_state())  # numpy / python states decode into valid states
    assert isinstance(rng["python"], tuple) and before.shape == (2,)


@pytest.mark.parametrize("name", ["trainer.json", "trainer.safetensors", "rng-rank00000.json",
                                  "rng-rank00000.safetensors", "model.safetensors", "config.json",
                                  "vocab.txt"])  # fmt: skip
def test_pickle_payload_under_any_name_runs_no_code(tmp_path: Path, name: str):
    run, marker = tmp_path / "run", tmp_path / "pwned"
    url = _checkpoint(run)
    Path(url, name).write_bytes(pickle.dumps(_Payload(marker)))
    ckpt.commit(url, 2)  # even a re-committed (matching hash) payload is only ever parsed as data
    with pytest.raises((ckpt.CheckpointError, CommandError, ValueError, OSError)) as err:
        _use(run)
        load_encoder(str(run))
    assert "\n" not in str(err.value)
    assert not marker.exists()


@pytest.mark.parametrize("name", ["trainer.pt", "rng-rank00000.pt"])
def test_old_pickle_format_is_refused_unread(tmp_path: Path, name: str):
    run, marker = tmp_path / "run", tmp_path / "pwned"
    url = _checkpoint(run)
    for stale in ("trainer.json", "trainer.safetensors"):
        Path(url, stale).unlink()
    Path(url, name).write_bytes(pickle.dumps(_Payload(marker)))
    ckpt.commit(url, 2)
    with pytest.raises(ckpt.CheckpointError, match="old pickle-based checkpoint"):
        ckpt.resolve(str(run))
    with pytest.raises(CommandError, match="old pickle-based checkpoint"):
        load_encoder(str(run))
    assert not marker.exists()


@pytest.mark.parametrize("name", ["model.safetensors", "trainer.json", "trainer.safetensors",
                                  "rng-rank00000.json", "config.json"])  # fmt: skip
def test_flipped_byte_is_named(tmp_path: Path, name: str):
    run = tmp_path / "run"
    url = _checkpoint(run)
    path = Path(url, name)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointError, match=f"{name}: content differs from its SHA-256"):
        ckpt.resolve(str(run))
    with pytest.raises(CommandError, match=name):
        load_encoder(str(run))


def test_truncated_file_makes_the_checkpoint_incomplete(tmp_path: Path):
    run = tmp_path / "run"
    url = _checkpoint(run)
    path = Path(url, "model.safetensors")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ckpt.CheckpointError, match="no complete checkpoint"):
        ckpt.resolve(str(run))


def test_corrupt_json_and_header_are_one_line(tmp_path: Path):
    url = _checkpoint(tmp_path / "run")
    Path(url, "trainer.json").write_text("{not json")
    with pytest.raises(ckpt.CheckpointError, match="trainer.json: not valid JSON"):
        ckpt.load_state(f"{url}/{ckpt.TRAINER_STATE}")
    Path(url, "trainer.safetensors").write_bytes(b"\xff" * 16)
    Path(url, "trainer.json").write_text("{}")
    with pytest.raises(ckpt.CheckpointError, match="trainer.safetensors: not a valid safetensors"):
        ckpt.load_state(f"{url}/{ckpt.TRAINER_STATE}")
