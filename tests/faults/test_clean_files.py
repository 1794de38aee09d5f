"""Whole files or none (``schemas.storage.write_bytes``, on the launching machine and Beam's workers): a disk that fills up
mid-write, a failing bucket upload or a stop signal leave neither a truncated file under its final
name nor a temporary file, keep what was there before, and say so in one line naming the file."""

from __future__ import annotations

import errno
import signal
from pathlib import Path

import fsspec
import pytest

from schemas.commands import WriteError
from schemas.storage import is_temporary_name, temporary_name, write_bytes
from tests.faults.full_disk import FullMemoryFileSystem, fill_disk_after


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_whole_file_appears_under_its_name_and_nothing_else_stays(tmp_path: Path):
    write_bytes(tmp_path / "a" / "b.bin", [b"x" * 10, b"y" * 5])  # the folder is made
    write_bytes(str(tmp_path / "c.json"), "{}")
    write_bytes(str(tmp_path / "d.json"), b'{"k": 1}')
    assert (tmp_path / "a" / "b.bin").read_bytes() == b"x" * 10 + b"y" * 5
    assert (tmp_path / "c.json").read_text() == "{}"
    assert _files(tmp_path) == ["a/b.bin", "c.json", "d.json"]


def test_temporary_names_are_recognised_and_finished_names_are_not():
    name = temporary_name("model.safetensors")
    assert name.startswith(".model.safetensors.") and is_temporary_name(name)
    for finished in ("model.safetensors", "metrics.jsonl.tmp", ".hidden", "x.0123456789ab.tmp"):
        assert not is_temporary_name(finished)


def test_a_full_disk_leaves_the_earlier_file_and_no_temporary_file(tmp_path: Path, monkeypatch):
    target = tmp_path / "model.safetensors"
    target.write_bytes(b"the earlier, complete file")
    failed = fill_disk_after(monkeypatch, "model.safetensors", limit_bytes=10)
    with pytest.raises(WriteError) as caught:
        write_bytes(str(target), b"z" * 1000)
    assert failed == [str(target)]
    assert str(caught.value) == f"{target}: cannot write it (No space left on device)"
    assert caught.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"the earlier, complete file"
    assert _files(tmp_path) == ["model.safetensors"]


def test_a_stop_signal_mid_write_removes_the_temporary_file(tmp_path: Path):
    # Python's default handler, whatever an earlier test in this process left installed
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupted_write(tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert _files(tmp_path) == []


def _interrupted_write(tmp_path: Path) -> None:
    def chunks():
        yield b"first part"
        signal.raise_signal(signal.SIGINT)  # Python's default handler: KeyboardInterrupt here
        yield b"never written"

    with pytest.raises(KeyboardInterrupt):
        write_bytes(tmp_path / "out.bin", chunks())


def test_a_failed_bucket_upload_leaves_no_object(monkeypatch):
    fs = FullMemoryFileSystem()
    monkeypatch.setattr(FullMemoryFileSystem, "store", {})
    write_bytes("fullmem://bucket/run/small.json", b"{}")
    with pytest.raises(WriteError, match=r"^fullmem://bucket/run/big.bin: cannot write it \(No space left"):
        write_bytes("fullmem://bucket/run/big.bin", [b"b" * 500, b"b" * 500])
    assert fs.find("/bucket") == ["/bucket/run/small.json"]


def test_memory_buckets_take_the_whole_bytes_in_one_upload():
    write_bytes("memory://clean-files/a/b.txt", [b"who", b"le"])
    assert fsspec.filesystem("memory").cat_file("/clean-files/a/b.txt") == b"whole"
