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
import time
from pathlib import Path

import pytest

from chain.run import _Interrupts

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

# The chain: two stages, the CLIs' exit status (chain.run.exit_code) on an error.
DRIVER = """
import sys
from chain.run import ChainError, Stage, exit_code, run_chain
work, mode, stage_script = sys.argv[1], sys.argv[2], sys.argv[3]
stages = [
    Stage("slow", "a slow stage", f"{work}/slow", [sys.executable, stage_script, f"{work}/slow", mode]),
    Stage("next", "the next stage", f"{work}/next",
          [sys.executable, "-c", f"import pathlib; pathlib.Path({work!r}, 'next-ran').write_text('')"]),
]
try:
    run_chain(stages, work, log=print, grace_s=1.0)
except ChainError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(exit_code(err))
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
    chain = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(work), mode, str(tmp_path / "stage.py")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
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
    assert f"interrupted by {name} during stage slow; rerun to continue" in stderr
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


def _sleeper(ignore_term: bool = False) -> subprocess.Popen:
    code = "import signal, sys, time; "
    if ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    code += "print('ready', flush=True); time.sleep(600)"
    process = subprocess.Popen(
        [sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "ready"
    return process


def test_a_signal_while_the_stage_starts_is_forwarded_once_it_exists():
    interrupts = _Interrupts(grace_s=60)
    interrupts.starting = True
    interrupts._handle(signal.SIGTERM, None)  # no process yet: kept, not raised
    process = _sleeper()
    interrupts.started(process.pid)
    assert process.wait(timeout=30) == -signal.SIGTERM  # as it came, not SIGKILL
    interrupts.finished()


def test_a_second_signal_or_the_grace_period_ends_a_stage_that_ignores_the_first():
    for second_signal in (True, False):
        interrupts = _Interrupts(grace_s=60 if second_signal else 0.5)  # only the cause under test kills
        process = _sleeper(ignore_term=True)
        interrupts.started(process.pid)
        interrupts._handle(signal.SIGTERM, None)
        time.sleep(0.2)
        assert process.poll() is None  # SIGTERM ignored
        if second_signal:
            interrupts._handle(signal.SIGTERM, None)
        assert process.wait(timeout=30) == -signal.SIGKILL
        interrupts.finished()
