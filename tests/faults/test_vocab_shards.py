"""The vocabulary of a shards folder is never trusted unchecked: ``pretrain`` refuses, with one
line and exit 1 before the first step, a manifest without (or with a malformed) vocabulary hash or
casing, a vocabulary copy that is missing, modified or named outside the folder, validation shards
without the hash, and ``--resume`` on shards of another vocabulary than the run's. Each damaged
manifest comes with a ``COMPLETED`` rebuilt to match, so that only the vocabulary check can
refuse it; no file is changed by a refused run."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from schemas import completed_marker
from tests.clis import CLIS

TINY = [
    "--config",
    "tiny",
    "--global-batch-size",
    "8",
    "--max-steps",
    "1",
    "--save-steps",
    "1",
    "--precision",
    "fp32",
    "--num-workers",
    "0",
    "--quiet",
]


def _damaged(shards: Path, folder: Path, edit: Callable[[dict, Path], None]) -> Path:
    """A copy of ``shards`` whose manifest (and files) ``edit`` changed, ``COMPLETED`` rebuilt."""
    shutil.copytree(shards, folder)
    data = json.loads((folder / "manifest.json").read_text())
    edit(data, folder)
    text = json.dumps(data, sort_keys=True, indent=2) + "\n"
    (folder / "manifest.json").write_text(text)
    (folder / "COMPLETED").write_text(completed_marker(text))
    return folder


def _swap_two_tokens(data: dict, folder: Path) -> None:
    """Swap ids 1000 and 1001 in the copy: same size, another vocabulary."""
    tokens = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    tokens[1000], tokens[1001] = tokens[1001], tokens[1000]
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")


def _another_vocabulary(data: dict, folder: Path) -> None:
    """The copy and every hash made consistent for the swapped vocabulary: shards that, as far as
    any check can tell, were made with another vocabulary of the same size."""
    _swap_two_tokens(data, folder)
    copy = (folder / "vocab.txt").read_bytes()
    data["vocab_file"].update(num_bytes=len(copy), sha256=hashlib.sha256(copy).hexdigest())
    data["params"]["vocab_sha256"] = hashlib.sha256(copy[:-1]).hexdigest()  # tokens joined by newlines


CASES = {
    # name: (edit, what the one line must say, with {shards} for the damaged folder)
    "vocab_sha256 removed": (
        lambda d, f: d["params"].pop("vocab_sha256"),
        "{shards}/manifest.json: no params.vocab_sha256",
    ),
    "vocab_sha256 a number": (
        lambda d, f: d["params"].update(vocab_sha256=12),
        "{shards}/manifest.json: params.vocab_sha256 is 12, not a SHA-256",
    ),
    "vocab_sha256 cut short": (
        lambda d, f: d["params"].update(vocab_sha256=d["params"]["vocab_sha256"][:12]),
        "not a SHA-256 (64 hex digits)",
    ),
    "cased removed": (lambda d, f: d["params"].pop("cased"), "{shards}/manifest.json: no params.cased"),
    "cased a string": (
        lambda d, f: d["params"].update(cased="false"),
        'params.cased is "false", not true or false',
    ),
    "the copy modified": (
        _swap_two_tokens,
        "{shards}/vocab.txt: differs from the size and SHA-256 the manifest records",
    ),
    "the copy missing": (
        lambda d, f: (f / "vocab.txt").unlink(),
        "{shards}/vocab.txt: missing, but the manifest names it",
    ),
    "the copy named outside the folder": (
        lambda d, f: d["vocab_file"].update(path="../vocab.txt"),
        "{shards}/manifest.json: vocab_file: the path '../vocab.txt' is not a relative path inside the folder",
    ),
    "the copy of another size than recorded": (
        lambda d, f: d["vocab_file"].update(num_bytes=d["vocab_file"]["num_bytes"] - 1),
        "{shards}/vocab.txt: differs from the size and SHA-256",
    ),
}


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


def _refused(args: list[str], root: Path) -> str:
    """Run ``pretrain ARGS``: exit 1, one ``error:`` line and no traceback, nothing under ``root`` changed."""
    before = _snapshot(root)
    result = CliRunner().invoke(CLIS["pretrain"], args)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, (
        result.output
    )
    assert _snapshot(root) == before
    return lines[0]


@pytest.mark.parametrize("name", list(CASES))
def test_a_damaged_vocabulary_record_is_refused_with_one_line(name, shards, tmp_path):
    edit, expected = CASES[name]
    damaged = _damaged(shards, tmp_path / "shards", edit)
    line = _refused(["--shards", str(damaged), "--output", str(tmp_path / "run"), *TINY], tmp_path)
    assert expected.replace("{shards}", str(damaged)) in line
    assert not (tmp_path / "run").exists()


def test_a_copy_that_links_out_of_the_folder_is_refused(shards, tmp_path):
    """The same bytes, but through a symlink to a file outside the folder: refused as the reader
    refuses a linked shard."""
    outside = tmp_path / "elsewhere.txt"
    outside.write_bytes((shards / "vocab.txt").read_bytes())
    damaged = _damaged(shards, tmp_path / "shards", lambda d, f: (f / "vocab.txt").unlink())
    (damaged / "vocab.txt").symlink_to(outside)
    line = _refused(["--shards", str(damaged), "--output", str(tmp_path / "run"), *TINY], tmp_path)
    assert f"{damaged}/vocab.txt: a link to a file outside the shards folder" in line


def test_validation_shards_without_the_vocabulary_hash_are_refused(shards, tmp_path):
    damaged = _damaged(shards, tmp_path / "validation", lambda d, f: d["params"].pop("vocab_sha256"))
    args = [
        "--shards",
        str(shards),
        "--validation-shards",
        str(damaged),
        "--output",
        str(tmp_path / "run"),
        *TINY,
    ]
    line = _refused(args, tmp_path)
    assert f"--validation-shards {damaged}: {damaged}/manifest.json: no params.vocab_sha256" in line


def test_resume_refuses_shards_of_another_vocabulary(shards, tmp_path):
    run = tmp_path / "run"
    result = CliRunner().invoke(CLIS["pretrain"], ["--shards", str(shards), "--output", str(run), *TINY])
    assert result.exit_code == 0, result.output
    other = _damaged(shards, tmp_path / "other", _another_vocabulary)
    resume = ["--resume", str(run), "--shards", str(other), "--max-steps", "2", "--quiet"]
    line = _refused(resume, tmp_path)
    assert (
        f"{run}/checkpoints/step-00000001 was trained with another vocabulary than the shards' {other}/vocab.txt"
        in line
    )
