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
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import fsspec

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
    fresh: bool = True
    """Remove ``output`` before running (stages that do not overwrite it themselves)."""
    resume: Callable[[], list[str] | None] | None = None
    """For an incomplete output: the command that continues it, or None to start afresh."""
    info: dict = field(default_factory=dict)


def _fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    fs, path = fsspec.core.url_to_fs(url)
    return fs, path.rstrip("/")


def exists(url: str) -> bool:
    fs, path = _fs(url)
    return fs.exists(path)


def read_json(url: str) -> dict | None:
    fs, path = _fs(url)
    try:
        return json.loads(fs.cat_file(path))
    except (FileNotFoundError, ValueError):
        return None


def write_json(url: str, data: dict) -> None:
    fs, path = _fs(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())


def remove(url: str) -> None:
    fs, path = _fs(url)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def script(name: str) -> str:
    """A console script of this installation (``pipelines``, ``pretrain``, …)."""
    return str(Path(sys.executable).parent / name)


def run_process(argv: list[str]) -> tuple[int, float, float]:
    """Run ``argv``; return (exit code, wall seconds, peak RSS in MB of it and its waited children)."""
    start = time.perf_counter()
    process = subprocess.Popen(argv)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, time.perf_counter() - start, usage.ru_maxrss / 1024


def _key(stage: Stage, state: dict) -> str:
    upstream = {
        name: [state.get(name, {}).get("key"), state.get(name, {}).get("finished")] for name in stage.upstream
    }
    command = stage.command or [stage.name, json.dumps(stage.info, sort_keys=True)]
    text = json.dumps({"command": command[1:], "upstream": upstream}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ChainError(RuntimeError):
    """A stage failed; the message names it and the command to rerun it by hand."""


def run_chain(stages: list[Stage], workdir: str, log=print) -> dict:
    """Run (or skip) every stage in order; return the state written to ``WORKDIR/chain.json``."""
    state_url = f"{workdir.rstrip('/')}/{STATE_FILE}"
    state: dict = read_json(state_url) or {}
    total = len(stages)
    for number, stage in enumerate(stages, 1):
        key = _key(stage, state)
        recorded = state.get(stage.name, {})
        header = f"== {number}/{total} {stage.title}"
        if recorded.get("key") == key and stage.done():
            log(
                f"{header}: complete, skipped (ran {recorded.get('seconds', 0):.0f} s on {recorded.get('finished', '?')})"
            )
            continue
        log(header)
        command = stage.command
        if recorded.get("key") == key and stage.resume is not None:
            command = stage.resume() or command
            if command is not stage.command:
                log("   (continuing the interrupted run)")
        elif stage.fresh:
            remove(stage.output)
        started = time.perf_counter()
        if command is not None:
            log("   " + " ".join(shlex.quote(Path(a).name if i == 0 else a) for i, a in enumerate(command)))
            code, seconds, peak_mb = run_process(command)
            if code != 0:
                state[stage.name] = {"key": key, "failed": True}
                write_json(state_url, state)
                raise ChainError(f"stage {stage.name} failed (exit {code}): {shlex.join(command)}")
            extra: dict = {}
        else:
            extra = stage.action() or {}
            seconds, peak_mb = time.perf_counter() - started, None
        state[stage.name] = {
            "key": key,
            "seconds": round(seconds, 1),
            "peak_rss_mb": round(peak_mb, 1) if peak_mb is not None else None,
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "output": stage.output,
            **extra,
        }
        write_json(state_url, state)
    return state
