"""Running a Beam job so that it ends the way a command should: a stop signal (SIGINT, SIGTERM)
stops the job and its local worker processes and ends the command as
``schemas.commands.Stopped``, and a failure, however the runner wrapped it, becomes the one line a
user can act on. Used by every corpus stage (``pipelines``) and by ``wordpiece train``'s counting
job: it lives here, in the lower of the two Beam packages, so that ``wordpiece`` never imports
``pipelines``."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import StandardOptions

from schemas.commands import STOP_SIGNALS, raise_if_stopped, raise_stopped, stop_received

DEFAULT_RUNNER = "DirectRunner"
_IN_PROCESS_RUNNERS = (
    "DirectRunner",
    "FnApiRunner",
    "SwitchingDirectRunner",
    "BundleBasedDirectRunner",
    "PrismRunner",
)
"""Runners whose work ends with this process and its children (a service runner's job goes on)."""
_OUR_ERRORS = (
    "InputError",
    "OutputError",
    "DumpError",
    "WriteError",
    "CorpusError",
)
STEP_ANNOTATION = re.compile(r"\s*\[while running '[^']*'\]")
"""What Beam appends to a worker's error message: the step it ran."""


def explain_failure(err: BaseException) -> str:
    """The line of a (possibly runner-wrapped) exception a user can act on."""
    text = STEP_ANNOTATION.sub("", str(err))
    for name in _OUR_ERRORS:
        match = re.search(rf"{name}: (.+)", text)
        if match:
            return match.group(1).strip()
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1] if lines else 'no message'}"


def run_pipeline(pipeline: beam.Pipeline, output: str) -> Any:
    """Run ``pipeline``, wait for it and return its final state. A stop signal (SIGINT, SIGTERM)
    ends it as ``schemas.commands.Stopped`` (``output`` not marked COMPLETED), whatever error
    Beam's runner rewrapped it as; the local runner's worker processes
    (``--direct_running_mode multi_processing``), which the runner waits for as it unwinds, are
    stopped with it."""
    runner = str(pipeline.options.view_as(StandardOptions).runner or DEFAULT_RUNNER).rsplit(".", 1)[-1]
    remote = "" if runner in _IN_PROCESS_RUNNERS else f"; the job may still run on {runner}: cancel it there"
    with _workers_stop_with_us():
        try:
            return pipeline.run().wait_until_finish()
        except BaseException:
            raise_if_stopped(f"{output} is not marked COMPLETED{remote}")
            raise


@contextlib.contextmanager
def _workers_stop_with_us() -> Iterator[None]:
    """While the block runs: a stop signal first sends SIGTERM to this process's descendants (the
    runner's SDK workers, which a signal to this process alone does not reach), then goes to the
    handler that was there; the runner's threads that see their worker die say nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def stop(signum: int, frame: Any) -> None:
        for pid in _descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        handler = previous[signum]
        (handler if callable(handler) else raise_stopped)(signum, frame)

    hook = threading.excepthook

    def quiet_when_stopped(args: threading.ExceptHookArgs) -> None:
        if stop_received() is None:
            hook(args)

    threading.excepthook = quiet_when_stopped
    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        threading.excepthook = hook


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first), from ``/proc`` (none where there is none)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            parents.setdefault(ppid, []).append(int(entry))
    found, queue = [], [pid]
    while queue:
        children = parents.get(queue.pop(0), [])
        found.extend(children)
        queue.extend(children)
    return found
