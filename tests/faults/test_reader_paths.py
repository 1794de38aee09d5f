"""Shard paths that leave the output folder — ``..``, absolute, a symbolic link to a file outside —
with every hash matched: the reader reads nothing outside the folder and says so in one line
(``pretrain``: exit 1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pretrain.data import ExampleShards
from schemas.commands import InputError
from tests.faults.reader_folders import copy_output, pretrain, rewrite

SHARD = "examples/part-00000-of-00002.arrow"


def _moved_out(folder: Path, outside: Path, new_path: str) -> None:
    """Move the first shard to ``outside`` and give it ``new_path`` in the manifest and the index
    (its hashes still match the bytes)."""
    outside.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(folder / SHARD, outside)

    def rename(data: dict) -> None:
        for shard in data["shards"]:
            if shard["path"] == SHARD:
                shard["path"] = new_path

    rewrite(folder, index=rename, manifest=rename)


def _cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (where the shard goes, the path the manifest gives it)."""
    return {
        "dot-dot": (tmp_path / "elsewhere" / "part.arrow", "../elsewhere/part.arrow"),
        "inner dot-dot": (tmp_path / "elsewhere" / "part.arrow", "examples/../../elsewhere/part.arrow"),
        "absolute": (tmp_path / "elsewhere" / "part.arrow", str(tmp_path / "elsewhere" / "part.arrow")),
        "URL": (tmp_path / "elsewhere" / "part.arrow", f"file://{tmp_path}/elsewhere/part.arrow"),
        "empty part": (tmp_path / "out" / "examples" / "part.arrow", "examples//part.arrow"),
    }


@pytest.mark.parametrize("name", ["dot-dot", "inner dot-dot", "absolute", "URL", "empty part"])
def test_a_shard_path_out_of_the_folder_is_refused(shards, tmp_path, name):
    folder = copy_output(shards, tmp_path / "out")
    outside, new_path = _cases(tmp_path)[name]
    _moved_out(folder, outside, new_path)
    with pytest.raises(InputError) as caught:
        ExampleShards(str(folder), batch_size=8)
    message = str(caught.value)
    assert message == (
        f"{folder}/manifest.json: shard {new_path!r}: the path {new_path!r} is not a relative path inside the folder"
    )
    code, line = pretrain(folder, tmp_path / "run")
    assert code == 1 and line == f"error: --shards {folder}: {message}"


def _symlinked(shards: Path, tmp_path: Path) -> Path:
    """An output whose first shard is a symbolic link to an identical copy outside the folder."""
    folder = copy_output(shards, tmp_path / "out")
    outside = tmp_path / "elsewhere" / "part.arrow"
    outside.parent.mkdir()
    shutil.move(folder / SHARD, outside)
    (folder / SHARD).symlink_to(outside)
    return folder


def test_a_symlink_out_of_the_folder_is_refused(shards, tmp_path):
    folder = _symlinked(shards, tmp_path)
    with pytest.raises(InputError) as caught:
        ExampleShards(str(folder), batch_size=8)
    assert str(caught.value) == (
        f"{folder}/{SHARD}: a symbolic link to a file outside {folder}; the shards of an output are read "
        "only from inside it: copy the file into the folder"
    )
    code, line = pretrain(folder, tmp_path / "run")
    assert code == 1 and line == f"error: --shards {folder}: {caught.value}"


def test_symlinks_inside_the_folder_and_to_the_folder_are_followed(shards, tmp_path):
    """A shard linked to another file inside the folder, and the whole folder reached through a
    link (shards kept on another disk), read as usual."""
    folder = copy_output(shards, tmp_path / "out")
    (folder / "store").mkdir()
    shutil.move(folder / SHARD, folder / "store" / "part.arrow")
    (folder / SHARD).symlink_to(folder / "store" / "part.arrow")
    (tmp_path / "link").symlink_to(folder)
    for url in (folder, tmp_path / "link"):
        reader = ExampleShards(str(url), batch_size=64, shuffle=False)
        assert (
            sum(len(b["input_ids"]) for b in reader)
            == reader.world_size * reader.streams * reader.stream_rows
        )
