"""Checkpoints record their run id and step in every file (COMMITTED, the trainer state and each
rank's RNG state: JSON and safetensors metadata; ``model.safetensors``' metadata), and resume,
export and fine-tuning refuse, in one line naming the file, a checkpoint whose files name different
runs (two writers mixed under a valid COMMITTED), whose folder name is not the step it records (renamed, or linked to another step),
that links out of its run's checkpoints folder, or that was copied in from another run. A tiny
model written with the checkpoint functions the trainer uses; no training."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune.encoder import load_encoder
from pretrain import checkpoint as ckpt
from pretrain import hf
from pretrain.cli import main as pretrain
from schemas import storage
from schemas.commands import CommandError, InputError
from schemas.outputs import RECORD_FILE, OutputRecord
from tests.unit.test_finetune_common import VOCAB, tiny_model


def _checkpoint(run: Path, run_id: str, step: int = 2, stamped: bool = True) -> Path:
    """A complete checkpoint of ``run`` at ``step``, its files written by ``run_id``."""
    url = ckpt.step_url(str(run), step)
    stamp = ckpt.Stamp(run_id, step) if stamped else None
    if stamped:
        hf.save_hf(tiny_model(), storage.Folder(url), metadata=stamp.metadata())
    else:
        tiny_model().save_pretrained(url)
    Path(url, "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    state = {"step": step, "tokens_seen": 10, "cased": False, "train_config": {}}
    ckpt.save_state(state, storage.Folder(url), ckpt.TRAINER_STATE, stamp)
    ckpt.save_state(ckpt.rng_state(), storage.Folder(url), ckpt.rng_file(0), stamp)
    ckpt.commit(storage.Folder(url), step, run_id if stamped else None)
    return Path(url)


def _record(run: Path, run_id: str) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / RECORD_FILE).write_bytes(
        OutputRecord("pretrain", run_id, [], "2026-01-01T00:00:00+00:00").to_json()
    )


def _refusals(run: Path, tmp_path: Path) -> list[str]:
    """What resume (the checkpoint ``resolve``), export and fine-tuning say about ``run``."""
    with pytest.raises(InputError) as resolved:
        ckpt.resolve(str(run))
    with pytest.raises(CommandError) as loaded:
        load_encoder(str(run))
    exported = CliRunner().invoke(
        pretrain, ["export", "--checkpoint", str(run), "--output", str(tmp_path / "hf")]
    )
    assert exported.exit_code == 1 and not (tmp_path / "hf").exists(), exported.output
    lines = exported.output.strip().splitlines()
    assert len(lines) == 1 and lines[0] == f"error: {resolved.value}"
    assert str(loaded.value) == str(resolved.value)
    return [str(resolved.value)]


def test_stamped_checkpoints_resolve_and_record_one_run_everywhere(tmp_path: Path):
    run = tmp_path / "run"
    folder = _checkpoint(run, "aaaaaaaaaaaaaaaa")
    _record(run, "aaaaaaaaaaaaaaaa")
    assert ckpt.resolve(str(run)).url == str(folder) and ckpt.run_id_of(str(run)) == "aaaaaaaaaaaaaaaa"
    for name in ("model.safetensors", "trainer.safetensors", "rng-rank00000.safetensors"):
        assert ckpt._stamp_of(storage.LocalFileSystem(), str(folder), str(folder), name) == (
            "aaaaaaaaaaaaaaaa",
            2,
        )
    assert ckpt.load_state(f"{folder}/{ckpt.TRAINER_STATE}")["step"] == 2  # the stamp is not state
    old = _checkpoint(tmp_path / "old", "", stamped=False)  # an older release's: no run id anywhere
    assert ckpt.resolve(str(tmp_path / "old")).url == str(old) and load_encoder(str(old)).source == str(old)


@pytest.mark.parametrize(
    "names",
    [
        ("trainer.json", "trainer.safetensors"),
        ("rng-rank00000.json", "rng-rank00000.safetensors"),
        ("model.safetensors", "config.json"),
    ],
)
def test_a_checkpoint_mixing_two_runs_is_refused_naming_the_file(tmp_path: Path, names):
    run = tmp_path / "run"
    mine = _checkpoint(run, "aaaaaaaaaaaaaaaa")
    theirs = _checkpoint(tmp_path / "other", "bbbbbbbbbbbbbbbb")
    for name in names:  # the other writer's files land in this run's folder ...
        shutil.copyfile(theirs / name, mine / name)
    ckpt.commit(
        storage.Folder(str(mine)), 2, "aaaaaaaaaaaaaaaa"
    )  # ... and COMMITTED lists them with valid hashes
    [line] = _refusals(run, tmp_path)
    first = sorted(n for n in names if n.endswith((".safetensors", "trainer.json", "rng-rank00000.json")))[0]
    assert line == (
        f"{mine}/{first}: written by run bbbbbbbbbbbbbbbb at step 2, but COMMITTED records run "
        "aaaaaaaaaaaaaaaa at step 2: the checkpoint mixes two runs' files; use another checkpoint"
    )


def test_a_renamed_checkpoint_folder_is_refused(tmp_path: Path):
    run = tmp_path / "run"
    folder = _checkpoint(run, "aaaaaaaaaaaaaaaa")
    renamed = folder.with_name("step-00000005")
    folder.rename(renamed)
    [line] = _refusals(run, tmp_path)
    assert line == (
        f"{renamed}: named for step 5 but its files record step 2: the folder was renamed or links to another "
        "step; rename it back to step-00000002 or remove it"
    )
    args = ["--shards", str(tmp_path / "shards"), "--resume", str(run), "--max-steps", "9"]
    resumed = CliRunner().invoke(pretrain, args)  # refused before any shard is read
    assert resumed.exit_code == 1 and resumed.output.strip() == f"error: {line}", resumed.output


def test_a_link_to_another_step_or_run_is_refused(tmp_path: Path):
    run = tmp_path / "run"
    folder = _checkpoint(run, "aaaaaaaaaaaaaaaa")
    link = folder.with_name("step-00000009")
    link.symlink_to(folder)  # the newest checkpoint, as far as its name says
    assert "named for step 9 but its files record step 2" in _refusals(run, tmp_path)[0]
    link.unlink()
    other = tmp_path / "other"
    _record(other, "bbbbbbbbbbbbbbbb")
    (other / "checkpoints").mkdir()
    (other / "checkpoints" / folder.name).symlink_to(folder)
    [line] = _refusals(other, tmp_path)
    assert line == (
        f"{other}/checkpoints/{folder.name}: links to {folder}, outside this run's checkpoints folder; use that "
        "checkpoint from its own run folder"
    )


def test_a_checkpoint_copied_in_from_another_run_is_refused(tmp_path: Path):
    _checkpoint(tmp_path / "a", "aaaaaaaaaaaaaaaa")
    run = tmp_path / "b"
    _record(run, "bbbbbbbbbbbbbbbb")
    shutil.copytree(tmp_path / "a" / "checkpoints", run / "checkpoints")
    [line] = _refusals(run, tmp_path)
    assert line == (
        f"{run}/checkpoints/step-00000002: a checkpoint of run aaaaaaaaaaaaaaaa, but {run} is run "
        "bbbbbbbbbbbbbbbb (its .output.json): copied or linked in from another run; use it from its own run "
        "folder, or remove it"
    )


def test_pruning_unlinks_a_linked_checkpoint_and_keeps_what_it_points_at(tmp_path: Path):
    theirs = _checkpoint(tmp_path / "a", "aaaaaaaaaaaaaaaa")
    run = tmp_path / "b"
    for step in (4, 6):
        _checkpoint(run, "bbbbbbbbbbbbbbbb", step)
    (run / "checkpoints" / theirs.name).symlink_to(theirs)
    assert ckpt.prune(str(run), 1) == [ckpt.step_url(str(run), 2), ckpt.step_url(str(run), 4)]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-00000006"]
    assert ckpt.resolve(str(tmp_path / "a")).url == str(theirs)  # the other run's files are whole
