"""Faults in pre-training: SIGKILL at random steps, and a bucket outage mid-run. Either way the final
weights are bitwise those of a run that never stopped."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pretrain import checkpoint as ckpt
from tests.e2e.test_pretrain import _args, _cli, _records, _weights

pytestmark = pytest.mark.slow


def _kill_after(process: subprocess.Popen, marker: Path, delay: float) -> None:
    """SIGKILL ``process`` ``delay`` seconds after ``marker`` appears (mid-way between checkpoints)."""
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert process.poll() is None, process.stdout.read()
        assert time.monotonic() < deadline, f"no {marker}"
        time.sleep(0.02)
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL


def test_sigkill_at_random_steps_and_resume_equals_an_uninterrupted_run(shards, tmp_path):
    """Killed three times at random points and resumed each time (with only the data and the run
    given: every other setting comes from the checkpoint), the run ends bitwise equal."""
    rng = random.Random(20261202)
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    reference = _cli(*_args(shards, whole))
    victim = _cli(*_args(shards, broken))
    for checkpoint in sorted(rng.sample([4, 8, 12, 16, 20, 24, 28, 32], 3)):
        _kill_after(
            victim, broken / "checkpoints" / f"step-{checkpoint:08d}" / "COMMITTED", rng.uniform(0, 0.3)
        )
        assert not (broken / "checkpoints" / "step-00000040").exists()
        victim = _cli("--resume", str(broken), "--shards", str(shards), "--quiet")
    assert victim.wait(timeout=300) == 0, victim.stdout.read()
    assert reference.wait(timeout=300) == 0, reference.stdout.read()
    a, b = _weights(whole, 40), _weights(broken, 40)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    trainer = ckpt.load_state(str(broken / "checkpoints" / "step-00000040" / "trainer"))
    assert trainer["step"] == 40 and trainer["data"]["reader"]["batches_done"] > 0
    # metrics of the killed runs after their checkpoints were dropped: one record per logging step
    assert [r["step"] for r in _records(broken)] == list(range(4, 41, 4))


def _start_emulator(port: int, folder: Path) -> subprocess.Popen:
    """A GCS emulator that keeps its objects on disk in ``folder`` (so a restart keeps them)."""
    import socket

    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gcp-storage-emulator"),
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            assert time.monotonic() < deadline and process.poll() is None, "the GCS emulator did not start"
            time.sleep(0.1)


@pytest.mark.emulator
def test_a_bucket_outage_mid_run_loses_nothing(shards, tmp_path, monkeypatch):
    """The emulator is stopped for 4 s while a run streams from it and checkpoints to it. The run
    either rides it out (retries) or stops with a clear error and is resumed; either way its final
    weights are bitwise those of a run that never saw an outage."""
    import socket

    import fsspec
    import gcsfs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = tmp_path / "store"
    store.mkdir()
    server = _start_emulator(port, store)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    gcsfs.GCSFileSystem.clear_instance_cache()
    try:
        fs = fsspec.filesystem("gs")
        fs.mkdir("bert-bucket")
        fs.put(str(shards), "bert-bucket/shards", recursive=True)
        args = _args(Path("gs://bert-bucket/shards"), Path("x"), "--max-steps", "25", "--save-steps", "5")
        args[args.index("--output") + 1] = "gs://bert-bucket/runs/outage"
        args = [a.replace("gs:/bert", "gs://bert") for a in args]
        reference = tmp_path / "reference"
        local = [a if a != "gs://bert-bucket/shards" else str(shards) for a in args]
        local[local.index("--output") + 1] = str(reference)
        expected = _cli(*local)
        victim = _cli(*args)
        deadline = time.monotonic() + 240
        while not fs.exists("bert-bucket/runs/outage/checkpoints/step-00000010/COMMITTED"):
            assert victim.poll() is None, victim.stdout.read()
            assert time.monotonic() < deadline
            time.sleep(0.2)
            fs.invalidate_cache()
        server.terminate()
        server.wait(timeout=10)
        time.sleep(4)
        server = _start_emulator(port, store)
        code = victim.wait(timeout=400)
        log = victim.stdout.read()
        if code != 0:  # stopped with a clear error: resume once the bucket is back
            assert "--resume gs://bert-bucket/runs/outage" in log, log
            resumed = _cli("--resume", "gs://bert-bucket/runs/outage", "--shards", "gs://bert-bucket/shards")
            assert resumed.wait(timeout=400) == 0, resumed.stdout.read()
        assert expected.wait(timeout=400) == 0, expected.stdout.read()
        fs.invalidate_cache()
        with fs.open("bert-bucket/runs/outage/checkpoints/step-00000025/model.safetensors", "rb") as f:
            from safetensors.torch import load as load_bytes

            got = load_bytes(f.read())
        want = _weights(reference, 25)
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    finally:
        server.terminate()
        server.wait(timeout=10)
