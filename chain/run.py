"""The whole job, stage by stage, resumable: raw text → corpus → vocabulary → shards → pre-training →
evaluation → export → fine-tuning → report.

Each stage is its own process (the real ``pipelines``, ``wordpiece``, ``pretrain`` and ``finetune``
commands), so Beam and torch never share one and every stage can be rerun by hand with the command
the chain prints. A stage's *key* is a hash of its command line and of the keys and finishing times
of the stages it reads; ``WORKDIR/chain.json`` records, per stage, the key it ran with, its wall
time and its peak memory (``ru_maxrss`` of the process and the children it waited for, from
``os.wait4``). On a rerun a stage is skipped when its recorded key matches and its output is
complete (``COMPLETED``, the final checkpoint, ``metrics.json``); one whose key changed is redone,
and so is everything downstream of it. An interrupted pre-training run is resumed from its newest
checkpoint rather than restarted.

SIGINT and SIGTERM stop the chain cleanly: each stage's process runs in its own process group,
and a signal to the chain is forwarded to that whole group (the stage's workers included); the
chain waits for it to stop (``pretrain`` saves a checkpoint first), sends SIGKILL to the group
after ``grace_s`` or at a second signal, records the stage as interrupted (never as finished,
whatever the process's exit code) and raises :class:`ChainInterrupted`; the CLIs exit with
128 + the signal's number. A rerun continues from there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import fsspec

from schemas import files

STATE_FILE = "chain.json"


@dataclass
class Stage:
    name: str
    title: str
    output: str
    command: list[str] | None = None
    """A command to run (its first element a console script next to this Python), or None when
    ``action`` does the work in-process."""
    action: Callable[[], dict] | None = None
    done: Callable[[], bool] = lambda: False
    upstream: tuple[str, ...] = ()
    resume: Callable[[], list[str] | None] | None = None
    """For an incomplete output: the command that continues it, or None to start afresh."""
    info: dict = field(default_factory=dict)


def filesystem(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem of ``url`` and its path there, without a trailing slash."""
    fs, path = fsspec.core.url_to_fs(url)
    return fs, path.rstrip("/")


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.exists(path)


def read_json(url: str) -> dict | None:
    fs, path = filesystem(url)
    try:
        return json.loads(fs.cat_file(path))
    except (FileNotFoundError, ValueError):
        return None


def write_json(url: str, data: dict) -> None:
    fs, path = filesystem(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    files.write_json(path, data, fs, indent=1, sort_keys=True)


def script(name: str) -> str:
    """A console script of this installation (``pipelines``, ``pretrain``, …)."""
    return str(Path(sys.executable).parent / name)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 60.0
"""How long an interrupted stage may take to stop (``pretrain`` saves a checkpoint) before SIGKILL."""


class ChainError(RuntimeError):
    """A stage failed; the message names it and the command to rerun it by hand."""


class ChainInterrupted(ChainError):
    """SIGINT or SIGTERM stopped the chain; ``signum`` is the signal's number."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum


def exit_code(err: ChainError) -> int:
    """The chain's exit status for ``err``: 128 + the signal's number when interrupted (the shell's
    convention: 130 for SIGINT, 143 for SIGTERM), else 1."""
    return 128 + err.signum if isinstance(err, ChainInterrupted) else 1


class _Interrupts:
    """While installed: SIGINT/SIGTERM are forwarded to the running stage's process group (SIGKILL
    after ``grace_s``, or at once on a second signal); with no stage process running they raise
    :class:`ChainInterrupted` where the chain is."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.signum: int | None = None
        self.group: int | None = None
        self.starting = False
        self._forwarded = False
        self._timer: threading.Timer | None = None
        self._previous: dict = {}

    def __enter__(self) -> _Interrupts:
        self._previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._cancel_timer()

    def _handle(self, signum: int, frame: object) -> None:
        self.signum = self.signum or signum
        if self.starting:
            return  # forwarded once the process exists (``started``)
        if self.group is None:
            raise ChainInterrupted(f"interrupted by {signal.Signals(signum).name}", signum)
        self._forward()

    def _forward(self) -> None:
        """The first signal goes to the group as it came (SIGKILL after ``grace_s``); later ones
        become SIGKILL at once."""
        if self._forwarded:
            self._send(signal.SIGKILL)
            return
        assert self.signum is not None
        self._forwarded = True
        self._send(self.signum)
        self._timer = threading.Timer(self.grace_s, self._send, (signal.SIGKILL,))
        self._timer.daemon = True
        self._timer.start()

    def _send(self, signum: int) -> None:
        if self.group is not None:
            try:
                os.killpg(self.group, signum)
            except (ProcessLookupError, PermissionError):
                pass  # the group has already gone

    def started(self, pid: int) -> None:
        """The stage's process (leader of its own group) exists; forward a signal that came first."""
        self.group, self.starting = pid, False
        if self.signum is not None and not self._forwarded:
            self._forward()

    def finished(self) -> None:
        """The stage's process has exited: stop forwarding, and kill what is left of its group."""
        self._cancel_timer()
        if self.signum is not None:
            self._send(signal.SIGKILL)
        self.group = None

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def run_process(argv: list[str], interrupts: _Interrupts | None = None) -> tuple[int, float, float]:
    """Run ``argv`` in its own process group; return (exit code, wall seconds, peak RSS in MB of it
    and its waited children). With ``interrupts``, a stop signal is forwarded to that group."""
    start = time.perf_counter()
    if interrupts is not None:
        interrupts.starting = True  # a signal now waits for ``started``, which forwards it
    try:
        process = subprocess.Popen(argv, start_new_session=True)  # its own process group (3.10 too)
    except BaseException:
        if interrupts is not None:
            interrupts.starting = False
        raise
    try:
        if interrupts is not None:
            interrupts.started(process.pid)
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        if interrupts is not None:
            interrupts.finished()
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, time.perf_counter() - start, usage.ru_maxrss / 1024


def _key(stage: Stage, state: dict) -> str:
    upstream = {
        name: [state.get(name, {}).get("key"), state.get(name, {}).get("finished")] for name in stage.upstream
    }
    command = stage.command or [stage.name, json.dumps(stage.info, sort_keys=True)]
    text = json.dumps({"command": command[1:], "upstream": upstream}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_chain(stages: list[Stage], workdir: str, log=print, *, grace_s: float = GRACE_S) -> dict:
    """Run (or skip) every stage in order; return the state written to ``WORKDIR/chain.json``.
    SIGINT/SIGTERM stop the running stage's process group and raise :class:`ChainInterrupted`
    (the stage recorded as ``interrupted``, not finished; ``grace_s``: see :data:`GRACE_S`)."""
    state_url = f"{workdir.rstrip('/')}/{STATE_FILE}"
    state: dict = read_json(state_url) or {}
    with _Interrupts(grace_s) as interrupts:
        for number, stage in enumerate(stages, 1):
            _run_stage(stage, f"== {number}/{len(stages)} {stage.title}", state, state_url, interrupts, log)
    return state


def _run_stage(stage: Stage, header: str, state: dict, state_url: str, interrupts: _Interrupts, log) -> None:
    """Run (or skip) one stage and record it in ``state`` (and ``state_url``)."""
    key = _key(stage, state)
    recorded = state.get(stage.name, {})
    if recorded.get("key") == key and stage.done():
        log(
            f"{header}: complete, skipped (ran {recorded.get('seconds', 0):.0f} s on {recorded.get('finished', '?')})"
        )
        return
    log(header)
    command = stage.command
    if recorded.get("key") == key and stage.resume is not None:
        command = stage.resume() or command
        if command is not stage.command:
            log("   (continuing the interrupted run)")
    started = time.perf_counter()
    extra: dict = {}
    try:
        if command is not None:
            log("   " + " ".join(shlex.quote(Path(a).name if i == 0 else a) for i, a in enumerate(command)))
            code, seconds, peak_mb = run_process(command, interrupts)
        else:
            extra = _act(stage)
            code, seconds, peak_mb = 0, time.perf_counter() - started, None
    except ChainInterrupted as err:
        _record_interrupt(stage, key, err.signum, state, state_url)
    if interrupts.signum is not None:  # the stage's process stopped because of a signal
        _record_interrupt(stage, key, interrupts.signum, state, state_url)
    if code != 0:
        state[stage.name] = {"key": key, "failed": True}
        write_json(state_url, state)
        raise ChainError(f"stage {stage.name} failed (exit {code}): {shlex.join(command or [])}")
    state[stage.name] = {
        "key": key,
        "seconds": round(seconds, 1),
        "peak_rss_mb": round(peak_mb, 1) if peak_mb is not None else None,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "output": stage.output,
        **extra,
    }
    write_json(state_url, state)


def _act(stage: Stage) -> dict:
    """Run an in-process stage; its error (an input too small, an output in the way) is one line."""
    try:
        return stage.action() or {}
    except (ValueError, OSError) as err:
        raise ChainError(f"stage {stage.name} failed: {err}") from None


def check_apart(workdir: str, stages: list[Stage], inputs: dict[str, str | None]) -> None:
    """Refuse (:class:`schemas.commands.UsageError`, exit 2 in the CLIs) a ``--workdir`` that is or
    lies inside one of the chain's ``inputs`` (``{flag: path}``: the dump, books, GLUE, NER and
    corpus folders), and a stage whose output is, holds or lies inside one, before any stage runs
    (also for ``--dry-run``): no stage ever writes over what the chain reads."""
    from schemas.commands import UsageError
    from schemas.paths import INSIDE, SAME, location, relation
    from schemas.paths import check_apart as check_stage

    for flag, path in inputs.items():
        if path and relation(location(workdir), location(path)) in (SAME, INSIDE):
            raise UsageError(
                f"--workdir {workdir} {relation(location(workdir), location(path))} {flag} {path}: the chain's "
                "outputs are never written over an input; choose another --workdir"
            )
    for stage in stages:
        check_stage({f"stage {stage.name} output": stage.output}, inputs, remedy="choose another --workdir")


def _record_interrupt(stage: Stage, key: str, signum: int, state: dict, state_url: str) -> None:
    """Record ``stage`` as interrupted (its key kept, so a rerun continues it) and raise."""
    name = signal.Signals(signum).name
    state[stage.name] = {"key": key, "interrupted": name}
    write_json(state_url, state)
    raise ChainInterrupted(f"interrupted by {name} during stage {stage.name}; rerun to continue", signum)
