"""One writer per output: a command claims its output (``.claim``, created exclusively: ``O_EXCL``
locally, a conditional create on buckets) before it writes anything; a second writer stops with
one line naming the first; a stale claim (its process gone) is taken over with a warning; a claim
that cannot be checked from this host says how to remove it; the claim goes when the command
ends. Without it two ``pretrain`` processes into one new ``--output`` would both finish with a
checkpoint mixing the two runs, and one of two ``pipelines examples`` would mark ``COMPLETED`` over
a shard the other wrote. Here the first writer is a real process holding the claim (made
deterministic: it claims, says so, and waits), the second the real command in its own process."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest
from click.testing import CliRunner

from pretrain import checkpoint as ckpt
from schemas.commands import OutputError
from schemas.outputs import CLAIM_FILE, RECORD_FILE, OutputFolder, process_start, remove_hint

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sys
from schemas.outputs import OutputFolder
url, command = sys.argv[1], sys.argv[2]
folder = OutputFolder.open(url, command)
print(folder.run_id, flush=True)
sys.stdin.read()  # hold the claim until the test closes stdin (or kills this process)
folder.close()
"""


def _open(url: str, command: str = "pretrain", **kw) -> OutputFolder:
    return OutputFolder.open(url, command, **kw)


def _claim(command: str, run_id: str, host: str, pid: int, start: int | None) -> bytes:
    """A claim file's bytes, as another process would have written them."""
    fields = {"command": command, "run_id": run_id, "host": host, "pid": pid, "process_start": start}
    return json.dumps({**fields, "claimed": "2026-01-01T00:00:00+00:00"}).encode()


def _named(command: str, run_id: str, host: str, pid: int) -> str:
    return f"`{command}` (run {run_id}, pid {pid} on host {host}, since 2026-01-01T00:00:00+00:00)"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


class Holder:
    """A real process that claims ``url`` for ``command`` and holds the claim until released."""

    def __init__(self, url: str, command: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, url, command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_env(),
            cwd=ROOT,
            text=True,
        )
        self.run_id = self.process.stdout.readline().strip()
        assert self.run_id, "the holder did not claim"
        self.pid = self.process.pid

    def release(self) -> None:
        self.process.communicate("", timeout=60)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=60)


def _busy_line(url: Path | str, holder: Holder, command: str, prefix: str) -> str:
    return (
        f"{prefix}: --output {url}: being written by `{command}` (run {holder.run_id}, pid {holder.pid} on host "
        f"{socket.gethostname()}, since "
    )


def _command(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=600,
    )


def _error_lines(done: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in done.stderr, done.stderr
    return [line for line in done.stderr.splitlines() if line.lower().startswith("error")]


# -- the rules, on a local folder ---------------------------------------------------------------------


def test_a_second_writer_is_refused_naming_the_first_and_the_claim_goes_at_the_end(tmp_path: Path):
    out = str(tmp_path / "out")
    first = _open(out)
    with pytest.raises(OutputError) as refused:
        _open(out, "finetune glue")
    claim = json.loads((tmp_path / "out" / CLAIM_FILE).read_text())
    assert claim["pid"] == os.getpid() and claim["run_id"] == first.run_id and claim["command"] == "pretrain"
    assert str(refused.value) == (
        f"--output {out}: being written by `pretrain` (run {first.run_id}, pid {os.getpid()} on host "
        f"{socket.gethostname()}, since {claim['claimed']}); wait for it to end, or choose another folder"
    )
    first.close()
    assert not (tmp_path / "out").exists()  # nothing was begun: the folder the claim made goes too
    with _open(out) as second:
        second.begin()
        second.write("metrics.jsonl", "{}")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [RECORD_FILE, "metrics.jsonl"]


def test_a_stale_claim_is_taken_over_with_a_warning(tmp_path: Path, caplog):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    out = tmp_path / "out"
    out.mkdir()
    (out / CLAIM_FILE).write_bytes(
        _claim("pretrain", "feedfacefeedface", socket.gethostname(), gone.pid, None)
    )
    with caplog.at_level(logging.WARNING, logger="schemas"), _open(str(out)) as folder:
        assert json.loads((out / CLAIM_FILE).read_text())["run_id"] == folder.run_id
    stale = _named("pretrain", "feedfacefeedface", socket.gethostname(), gone.pid)
    assert caplog.messages == [f"--output {out}: took over the claim of {stale}, which no longer runs"]
    # a pid that runs again, but another process (started at another time) is stale too
    started = (process_start(os.getpid()) or 0) + 1
    (out / CLAIM_FILE).write_bytes(
        _claim("pretrain", "0123456789abcdef", socket.gethostname(), os.getpid(), started)
    )
    _open(str(out)).close()
    assert not (out / CLAIM_FILE).exists()


def test_a_claim_that_cannot_be_checked_says_how_to_remove_it(tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    (out / CLAIM_FILE).write_bytes(_claim("pipelines examples", "0123456789abcdef", "another-host", 4242, 1))
    with pytest.raises(OutputError) as refused:
        _open(str(out))
    assert str(refused.value) == (
        f"--output {out}: claimed by `pipelines examples` (run 0123456789abcdef, pid 4242 on host another-host, "
        "since 2026-01-01T00:00:00+00:00), which cannot be checked from this host; if it no longer runs, remove "
        f"the claim (rm {out}/{CLAIM_FILE}) and start again"
    )
    (out / CLAIM_FILE).write_text("{not json")
    with pytest.raises(
        OutputError, match=rf"{out}/\.claim: not a claim this release can read; .*remove it \(rm "
    ):
        _open(str(out))
    assert (out / CLAIM_FILE).read_text() == "{not json"  # left for its owner
    assert remove_hint("gs://b/x/.claim") == "gcloud storage rm gs://b/x/.claim"
    assert remove_hint("s3://b/x/.claim") == "aws s3 rm s3://b/x/.claim"


def test_release_never_removes_another_writers_claim(tmp_path: Path):
    folder = _open(str(tmp_path / "out"))
    other = _claim("pretrain", "0123456789abcdef", "another-host", 1, None)
    (tmp_path / "out" / CLAIM_FILE).write_bytes(other)  # e.g. removed by hand and retaken
    folder.close()
    assert json.loads((tmp_path / "out" / CLAIM_FILE).read_text())["host"] == "another-host"


def test_one_chain_per_workdir_and_the_second_is_told_of_the_first(tmp_path: Path):
    """Two `chain` runs in one --workdir would mix their stages; the chain claims its workdir as a
    folder it adds to, and the second is told of the first."""
    work = str(tmp_path / "work")
    with _open(work, "chain", continuing=True, option="--workdir") as first:
        first.begin()
        first.write("chain.json", "{}")
        with pytest.raises(OutputError) as refused:
            _open(work, "chain", continuing=True, option="--workdir")
        assert str(refused.value).startswith(
            f"--workdir {work}: being written by `chain` (run {first.run_id}, pid {os.getpid()} on host "
        )
    with _open(work, "chain", continuing=True, option="--workdir") as rerun:  # continues the chain's record
        rerun.begin()
        assert rerun.run_id == first.run_id
    assert json.loads((tmp_path / "work" / RECORD_FILE).read_text())["files"] == ["chain.json"]


def test_a_feature_cache_has_one_writer(tmp_path: Path):
    from finetune.cli import main as finetune

    cache = tmp_path / "cache"
    with _open(
        str(cache), "finetune ner --feature-cache", continuing=True, option="--feature-cache"
    ) as holder:
        result = CliRunner().invoke(
            finetune,
            [
                "ner",
                "--data-dir",
                str(tmp_path / "conll"),
                "--checkpoint",
                str(tmp_path / "c"),
                "--output",
                str(tmp_path / "out"),
                "--features",
                "last",
                "--feature-cache",
                str(cache),
            ],
        )
    assert result.exit_code == 1, result.output
    assert (
        f"--feature-cache {cache}: being written by `finetune ner --feature-cache` (run {holder.run_id}"
        in (result.output)
    )
    assert not (tmp_path / "out").exists()  # the output claimed first is released and gone again


# -- buckets: a conditional create ---------------------------------------------------------------------


@pytest.mark.s3
def test_s3_claims_are_conditional_creates(s3_server):
    fs = fsspec.filesystem("s3")
    fs.pipe_file("bert-bucket/x", b"1", mode="create")
    with pytest.raises(FileExistsError):  # the server enforces If-None-Match: two creates, one wins
        fs.pipe_file("bert-bucket/x", b"2", mode="create")
    out = "s3://bert-bucket/runs/a"
    with _open(out) as first:
        with pytest.raises(
            OutputError, match=rf"--output {out}: being written by `pretrain` \(run {first.run_id}"
        ):
            _open(out)
    assert not fs.exists("bert-bucket/runs/a/.claim")
    fs.pipe_file("bert-bucket/runs/a/.claim", _claim("pretrain", "0123456789abcdef", "another-host", 1, None))
    with pytest.raises(OutputError, match=r"remove the claim \(aws s3 rm s3://bert-bucket/runs/a/\.claim\)"):
        _open(out)


@pytest.mark.emulator
def test_gcs_claims_refuse_a_second_writer(gcs_emulator):
    out = "gs://bert-bucket/runs/a"
    with _open(out) as first:
        with pytest.raises(OutputError, match=rf"being written by `pretrain` \(run {first.run_id}"):
            _open(out, "pretrain export")
        claim = json.loads(gcs_emulator.blob("runs/a/.claim").download_as_bytes())
        assert claim["pid"] == os.getpid()
    assert not gcs_emulator.blob("runs/a/.claim").exists()


# -- two real processes ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_pretrain_processes_never_write_one_run(shards, tmp_path: Path, caplog):
    from click.testing import CliRunner

    from pretrain.cli import main as pretrain

    out = tmp_path / "run"
    args = [
        "--shards",
        shards,
        "--output",
        out,
        "--config",
        "tiny",
        "--global-batch-size",
        "8",
        "--max-steps",
        "2",
        "--save-steps",
        "2",
        "--precision",
        "fp32",
        "--num-workers",
        "0",
        "--quiet",
    ]
    holder = Holder(str(out), "pretrain")
    try:
        done = _command("pretrain", *args)
        assert done.returncode == 1, done.stderr
        lines = _error_lines(done)
        assert len(lines) == 1 and lines[0].startswith(_busy_line(out, holder, "pretrain", "error")), (
            done.stderr
        )
        assert lines[0].endswith("; wait for it to end, or choose another folder")
        assert [p.name for p in out.iterdir()] == [CLAIM_FILE]  # the second wrote nothing
    finally:
        holder.kill()  # the first dies without releasing: its claim is stale now
    with caplog.at_level(logging.WARNING, logger="schemas"):
        result = CliRunner().invoke(pretrain, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert any(f"took over the claim of `pretrain` (run {holder.run_id}" in m for m in caplog.messages)
    record = json.loads((out / RECORD_FILE).read_text())
    step = Path(ckpt.step_url(str(out), 2))
    assert f"checkpoints/{step.name}/COMMITTED" in record["files"] and not (out / CLAIM_FILE).exists()
    assert json.loads((step / "COMMITTED").read_text())["run_id"] == record["run_id"] != holder.run_id
    assert ckpt.resolve(str(out)).step == 2  # every file of the checkpoint names the one run


@pytest.mark.slow
def test_two_example_writers_never_mix_shards(corpus_output, vocab, tmp_path: Path):
    out = tmp_path / "shards"
    args = [
        "examples",
        "--corpus",
        corpus_output,
        "--vocab",
        vocab,
        "--output",
        out,
        "--max-seq-length",
        "64",
        "--dupe-factor",
        "1",
        "--num-shards",
        "2",
        "--num-buckets",
        "4",
        "--runner",
        "FnApiRunner",
    ]
    holder = Holder(str(out), "pipelines examples")
    try:
        done = _command("pipelines", *args)
        assert done.returncode == 1, done.stderr
        lines = _error_lines(done)
        assert lines == [done.stderr.strip()] and lines[0].startswith(
            _busy_line(out, holder, "pipelines examples", "error")
        )
        assert [p.name for p in out.iterdir()] == [CLAIM_FILE]
        assert json.loads((out / CLAIM_FILE).read_text())["pid"] == holder.pid  # the first's claim is intact
    finally:
        holder.release()
    assert not out.exists()  # the first ended without writing: its claim and folder are gone
