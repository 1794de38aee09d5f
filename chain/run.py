"""Running a chain: its stages in order, each the real command in its own process; reruns skip
what is done (a stage's key: its command and its upstream stages' keys), an interrupted pre-training
run continues, and a stop signal reaches the running stage's process group. docs/chain.md"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from schemas import inputs, storage
from schemas.commands import CHAIN_STAGE, STOP_SIGNALS, CommandError, InputError, Stopped, UsageError
from schemas.outputs import OutputFolder

STATE_FILE = "chain.json"
MAX_STATE_BYTES = 64 << 20
GRACE_S = 60.0  # how long a stopped stage may take to finish (pretrain saves a checkpoint)
RECORD_FIELDS = (("seconds", (int, float)), ("finished", str), ("peak_rss_mb", (int, float, type(None))))


class StageFailed(CommandError):
    """A stage's command failed; the chain exits with the stage's exit status."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Stage:
    name: str
    title: str
    output: str
    command: list[str] | None = None  # None: ``action`` does the work in this process
    marker: str = ""  # a file that exists once the stage's output is complete
    upstream: tuple[str, ...] = ()  # the stages whose outputs it reads
    resume: list[str] | None = None  # continues the run when OUTPUT/checkpoints exists
    action: Callable[[], dict] | None = None
    info: dict = field(default_factory=dict)  # an action's settings, part of its key


def flags(**values: object) -> list[str]:
    """``--name value`` per keyword (``_`` as ``-``; True: the flag alone; None or False: left out)."""
    out = []
    for key, value in values.items():
        if value is not None and value is not False:
            out += [f"--{key.replace('_', '-')}", *([] if value is True else [str(value)])]
    return out


def tool(line: str, *args: object, **values: object) -> list[str]:
    """The command ``line`` (a console script of this installation and fixed flags, split at
    spaces), then ``args`` and :func:`flags` of ``values``."""
    name, *fixed = line.split()
    return [str(Path(sys.executable).parent / name), *fixed, *map(str, args), *flags(**values)]


def shown(argv: list[str]) -> str:
    """A command as a user would type it (the console script by name)."""
    return shlex.join([Path(argv[0]).name, *argv[1:]])


def read_state(url: str) -> dict:
    """``chain.json`` (empty when there is none), every record checked; damage is one line."""
    if not storage.exists(url):
        return {}
    try:
        storage.check_file(url)
        state = inputs.loads(storage.read_bytes(url, MAX_STATE_BYTES), url)
        if not isinstance(state, dict):
            raise InputError(f"{url}: a JSON {type(state).__name__}, not the record of the chain's stages")
        for name, record in state.items():
            inputs.field(record, "key", str, f"{url}: stage {name}")
            for key, kind in RECORD_FIELDS:
                inputs.field(record, key, kind, f"{url}: stage {name}", None)
    except InputError as err:
        raise InputError(f"{err}; delete it to run every stage again, or choose another --workdir") from None
    return state


def _key(stage: Stage, state: dict) -> str:
    upstream = {name: [state.get(name, {}).get(k) for k in ("key", "finished")] for name in stage.upstream}
    command = stage.command[1:] if stage.command else [stage.name, stage.info]
    text = json.dumps({"command": command, "upstream": upstream}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_process(argv: list[str], grace_s: float = GRACE_S) -> tuple[int, float, float, int | None]:
    """Run ``argv`` in its own process group, a stop signal forwarded to the group (SIGKILL after
    ``grace_s`` or at a second signal); return (exit status, seconds, peak RSS in MB of it and its
    waited children, the stop signal or None)."""
    received: list[tuple[int, float]] = []  # (signal, when)
    group: list[int] = []

    def forward(signum: int, frame: object) -> None:
        received.append((signum, time.monotonic()))
        _kill(group, signum if len(received) == 1 else signal.SIGKILL)

    start = time.perf_counter()
    previous = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
    try:
        env = {**os.environ, CHAIN_STAGE: "1"}  # the stage's stop line is the chain's to say
        group.append(subprocess.Popen(argv, start_new_session=True, env=env).pid)
        if received:  # it came while the process started
            _kill(group, received[0][0])
        while not (done := os.wait4(group[0], os.WNOHANG))[0]:
            if received and time.monotonic() > received[0][1] + grace_s:
                _kill(group, signal.SIGKILL)
            time.sleep(0.1)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        _kill(group, signal.SIGKILL)  # what is left of the group
    code = os.waitstatus_to_exitcode(done[1])
    return code, time.perf_counter() - start, done[2].ru_maxrss / 1024, received[0][0] if received else None


def _kill(group: list[int], signum: int) -> None:
    with contextlib.suppress(IndexError, ProcessLookupError, PermissionError):  # none yet, or gone
        os.killpg(group[0], signum)


def claim(workdir: str, command: str) -> OutputFolder:
    """``workdir`` claimed for ``command`` (a second chain there is refused, naming the first)."""
    folder = OutputFolder.open(workdir, command, continuing=True, option="--workdir")
    folder.begin()
    return folder


def run_chain(stages: list[Stage], workdir: storage.Folder, log=print, *, grace_s: float = GRACE_S) -> dict:
    """Run or skip every stage in order; return the state written to ``WORKDIR/chain.json``."""
    state = read_state(workdir.path(STATE_FILE))
    for number, stage in enumerate(stages, 1):
        _run_stage(stage, f"== {number}/{len(stages)} {stage.title}", state, workdir, log, grace_s)
    return state


def _run_stage(stage: Stage, header: str, state: dict, workdir: storage.Folder, log, grace_s: float) -> None:
    key, recorded = _key(stage, state), state.get(stage.name, {})
    if recorded.get("key") == key and stage.marker and storage.exists(stage.marker):
        return log(
            f"{header}: complete, skipped (ran {recorded.get('seconds', 0):.0f} s, {recorded.get('finished')})"
        )
    log(header)
    argv = stage.command
    if recorded.get("key") == key and stage.resume and storage.exists(f"{stage.output}/checkpoints"):
        log("   (continuing the interrupted run)")
        argv = stage.resume
    started, extra, peak_mb, signum = time.perf_counter(), {}, None, None
    if argv is not None:
        log(f"   {shown(argv)}")
        code, seconds, peak_mb, signum = run_process(argv, grace_s)
    else:
        try:
            extra, code = stage.action() or {}, 0
        except Stopped as stop:
            signum = stop.signum
        except (ValueError, OSError, CommandError) as err:
            raise StageFailed(f"stage {stage.name} failed: {err}") from None
        seconds = time.perf_counter() - started
    if signum is not None:
        state[stage.name] = {"key": key, "interrupted": signal.Signals(signum).name}
    elif code != 0:
        state[stage.name] = {"key": key, "failed": code}
    else:
        finished = datetime.now(UTC).isoformat(timespec="seconds")
        peak = None if peak_mb is None else round(peak_mb, 1)
        state[stage.name] = {
            "key": key,
            "seconds": round(seconds, 1),
            "peak_rss_mb": peak,
            "finished": finished,
        }
        state[stage.name].update(output=stage.output, **extra)
    workdir.write_json(STATE_FILE, state, indent=1, sort_keys=True)
    if signum is not None:
        raise Stopped(signum, f"stage {stage.name} recorded as interrupted; rerun to continue")
    if code != 0:
        status = 128 - code if code < 0 else code
        raise StageFailed(f"stage {stage.name} failed (exit {code}): {shown(argv or [])}", status)


def check_apart(workdir: str, stages: list[Stage], given: dict[str, str | None]) -> None:
    """:class:`UsageError` for a ``--workdir`` at or inside one of the chain's inputs (``{flag:
    path}``), or a stage output over one, before anything runs."""
    from schemas.paths import INSIDE, SAME, check_output, location, relation
    from schemas.paths import check_apart as check_stage

    check_output("--workdir", workdir)
    for flag, path in given.items():
        if path and (where := relation(location(workdir), location(path))) in (SAME, INSIDE):
            raise UsageError(
                f"--workdir {workdir} {where} {flag} {path}: the chain's outputs are never written over an "
                "input; choose another --workdir"
            )
    for stage in stages:
        check_stage({f"stage {stage.name} output": stage.output}, given, remedy="choose another --workdir")
