"""`pipelines examples` spills to temporary files: none survive a finished or a failed run.

Tiny made-up books and vocabulary (the ``corpus`` fixture of test_pipeline_outputs), FnApiRunner.
"""

from __future__ import annotations

from pathlib import Path

import pipelines.examples.write as write
from schemas.outputs import RECORD_FILE, OutputRecord
from tests.e2e.conftest import FAST_RUNNER, run_cli
from tests.faults.test_pipeline_outputs import corpus, write_vocab

__all__ = ["corpus"]  # the fixture, shared


def _examples(corpus: Path, vocab: Path, output: Path, *extra: str, expect: int = 0):
    return run_cli(
        "examples",
        "--corpus",
        str(corpus),
        "--vocab",
        str(vocab),
        "--output",
        str(output),
        "--num-shards",
        "2",
        "--num-buckets",
        "4",
        *extra,
        *FAST_RUNNER,
        expect=expect,
    )


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_overwrite_removes_a_killed_runs_temporary_files_and_a_finished_run_leaves_none(
    corpus, tmp_path, monkeypatch
):
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "examples"
    leftover = out / ".temp" / "part.spill"  # what a killed run leaves: its record, its temporary files
    leftover.parent.mkdir(parents=True)
    (out / RECORD_FILE).write_bytes(
        OutputRecord("pipelines examples", "0123456789abcdef", [".temp/"], "t").to_json()
    )
    leftover.write_bytes(b"spilled")
    refused = _examples(corpus, vocab, out, expect=1)
    assert (
        "holds the 1 file(s) of an interrupted `pipelines examples` run (.temp/part.spill; run 0123456789abcdef); "
        "pass --overwrite" in refused.output
    )
    received = []

    def recording_read(pieces, folder):
        pieces = list(pieces)
        received.extend(pieces)
        return read(pieces, folder)

    read = write.read_spilled
    monkeypatch.setattr(write, "read_spilled", recording_read)
    _examples(corpus, vocab, out, "--overwrite")
    assert (out / "COMPLETED").exists() and not (out / ".temp").exists()
    # only references reached the shard writer through the shuffle, never the examples' bytes
    assert received and all(isinstance(p, list) and p[0].endswith(".spill") for p in received)
    # Elsewhere with --temp-location: the run's folder there is removed, the location kept.
    elsewhere = tmp_path / "scratch"
    elsewhere.mkdir()
    _examples(corpus, vocab, tmp_path / "examples2", "--temp-location", str(elsewhere))
    assert (tmp_path / "examples2" / "COMPLETED").exists() and list(elsewhere.iterdir()) == []


def test_a_failed_run_removes_its_temporary_files_and_is_not_completed(corpus, tmp_path, monkeypatch):
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "examples"
    seen = []

    def failing_shard_table(pieces, fmt):
        seen.extend(_files(out / ".temp"))  # the pieces were spilled before the writer fails
        raise OSError("no space left on device")

    monkeypatch.setattr(write, "shard_table", failing_shard_table)
    result = _examples(corpus, vocab, out, expect=1)
    assert seen and all(p.suffix in (".spill", ".jsonl") for p in seen)  # spilled, and GroupOnDisk's runs
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("error: ") and "no space left on device" in lines[-1]
    assert not (out / "COMPLETED").exists() and not (out / ".temp").exists()


def test_an_example_lost_on_its_way_to_the_shards_fails_the_run(corpus, tmp_path, monkeypatch):
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "examples"
    read = write.read_spilled

    def losing_read(pieces, folder):
        return list(read(pieces, folder))[1:]  # the first piece of every shard goes missing

    monkeypatch.setattr(write, "read_spilled", losing_read)
    result = _examples(corpus, vocab, out, expect=1)
    assert (
        "examples but" in result.output
        and "were made (see stats.json); not marked COMPLETED" in result.output
    )
    assert not (out / "COMPLETED").exists() and (out / "stats.json").exists()
    assert not (out / ".temp").exists()
