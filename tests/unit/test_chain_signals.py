"""Stopping the chain: SIGINT/SIGTERM to ``run_chain`` reach the running stage's whole process
group (the stage and its own children), the chain exits 128 + the signal, and the stage is
recorded as interrupted, never finished, even when it exits 0 after the signal; the next stage
does not start. Each case runs a real chain in a subprocess over tiny Python stages."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chain.run import run_process

# A stage: starts a grandchild (a sleeping Python), writes both pids, then waits. ``MODE`` says what
# it does on a stop signal: "default" (dies), "graceful" (writes stopped.txt and exits 0, as
# pretrain saves a checkpoint and stops), "ignore" (ignores SIGTERM: the chain's SIGKILL ends it).
STAGE = """
import os, pathlib, signal, subprocess, sys, time
out, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
out.mkdir(parents=True, exist_ok=True)
if mode == "graceful":
    def stop(signum, frame):
        (out / "stopped.txt").write_text(signal.Signals(signum).name)
        sys.exit(0)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
elif mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
ready = out / "grandchild-ready"
code = (  # dies at SIGINT without Python's KeyboardInterrupt traceback
    "import pathlib, signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    f"pathlib.Path({str(ready)!r}).write_text(''); time.sleep(600)"
)
child = subprocess.Popen([sys.executable, "-c", code])
while not ready.exists():  # a signal to a Python still starting up prints a fatal error
    time.sleep(0.01)
(out / "pids.tmp").write_text(f"{os.getpid()} {child.pid}")
(out / "pids.tmp").rename(out / "pids.txt")
time.sleep(600)
(out / "COMPLETED").write_text("")
"""

# The chain: two stages, run by a command that keeps the project's exit rule (schemas.commands).
DRIVER = """
import sys, click
from chain.run import Stage, run_chain
from schemas.commands import OneLineCommand
from schemas.storage import Folder
work, mode, stage_script = sys.argv[1], sys.argv[2], sys.argv[3]
stages = [
    Stage("slow", "a slow stage", f"{work}/slow", [sys.executable, stage_script, f"{work}/slow", mode]),
    Stage("next", "the next stage", f"{work}/next",
          [sys.executable, "-c", f"import pathlib; pathlib.Path({work!r}, 'next-ran').write_text('')"]),
]
click.command(cls=OneLineCommand)(lambda: run_chain(stages, Folder(work), log=print, grace_s=1.0))([])
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _wait_for(path: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("mode", "signum"),
    [("default", signal.SIGTERM), ("graceful", signal.SIGINT), ("ignore", signal.SIGTERM)],
)
def test_a_stop_signal_ends_the_stage_group_and_the_chain_without_finishing_the_stage(tmp_path, mode, signum):
    (tmp_path / "stage.py").write_text(STAGE)
    work = tmp_path / "work"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    command = [sys.executable, "-c", DRIVER, str(work), mode, str(tmp_path / "stage.py")]
    chain = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(work / "slow" / "pids.txt")
        stage_pid, grandchild_pid = map(int, (work / "slow" / "pids.txt").read_text().split())
        assert os.getpgid(stage_pid) == stage_pid != os.getpgid(chain.pid)  # its own group
        chain.send_signal(signum)
        _, stderr = chain.communicate(timeout=60)
    finally:
        if chain.poll() is None:
            chain.kill()
    assert chain.returncode == 128 + signum, stderr
    name = signal.Signals(signum).name
    assert f"error: interrupted by {name}; stage slow recorded as interrupted; rerun to continue" in stderr
    assert "Traceback" not in stderr
    deadline = time.monotonic() + 10
    while (_alive(stage_pid) or _alive(grandchild_pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(stage_pid) and not _alive(grandchild_pid)  # the grandchild too
    state = json.loads((work / "chain.json").read_text())
    assert state["slow"]["interrupted"] == name and "finished" not in state["slow"]
    assert "next" not in state and not (work / "next-ran").exists()
    assert not (work / "slow" / "COMPLETED").exists()
    if mode == "graceful":  # forwarded as it came, so the stage could stop on its own terms
        assert (work / "slow" / "stopped.txt").read_text() == name


def _stage(tmp_path: Path, ignore_term: bool = False) -> list[str]:
    """A stage that writes ``ready`` once it runs, then sleeps (ignoring SIGTERM when asked)."""
    code = "import pathlib, signal, sys, time; "
    code += "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignore_term else ""
    code += f"pathlib.Path({str(tmp_path / 'ready')!r}).write_text(''); time.sleep(600)"
    return [sys.executable, "-c", code]


def _signal_self_when_ready(tmp_path: Path, count: int) -> threading.Thread:
    def send() -> None:
        _wait_for(tmp_path / "ready")
        for _ in range(count):
            os.kill(os.getpid(), signal.SIGTERM)  # run_process's handler forwards it to the stage
            time.sleep(0.3)

    thread = threading.Thread(target=send)
    thread.start()
    return thread


def test_a_signal_while_the_stage_starts_is_forwarded_once_it_exists(tmp_path, monkeypatch):
    started = subprocess.Popen

    def popen(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # before the process exists: kept, then forwarded
        return started(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    code, _, _, signum = run_process([sys.executable, "-c", "import time; time.sleep(600)"], grace_s=60)
    assert (code, signum) == (-signal.SIGTERM, signal.SIGTERM)  # as it came, not SIGKILL


@pytest.mark.parametrize("second_signal", [True, False])
def test_a_second_signal_or_the_grace_period_ends_a_stage_that_ignores_the_first(tmp_path, second_signal):
    sender = _signal_self_when_ready(tmp_path, 2 if second_signal else 1)
    started = time.monotonic()
    code, _, _, signum = run_process(_stage(tmp_path, ignore_term=True), grace_s=60 if second_signal else 1)
    sender.join()
    assert (code, signum) == (-signal.SIGKILL, signal.SIGTERM)
    assert time.monotonic() - started < 30
