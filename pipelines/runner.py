"""Running a corpus stage: options, output preparation, execution and the user-facing summary."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TestOptions

from pipelines import io
from schemas import STATS_FILE, SchemaError
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
    "SchemaError",
    "ManifestError",
    "DumpError",
    "WriteError",
    "CorpusError",
)
_LOG = logging.getLogger(__name__)


# glibc's mallopt parameters: blocks at least this big are mmapped (and unmapped when freed),
# and free memory above this much at the top of the heap is given back to the system.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_RETAINED_BYTES = 1 << 30


def retain_freed_memory() -> bool:
    """Keep freed memory in this process for reuse instead of giving it back at once (glibc).

    By default glibc unmaps every freed block above a threshold of at most 32 MiB and trims the
    heap's free top, so a stage that makes and drops arrays of tens of MB batch after batch
    faults their pages in afresh each time: about a third of ``pipelines examples``' system
    time on the books (docs/examples.md). Raising both thresholds to 1 GiB lets the next batch
    reuse the pages; the peak stays that of the largest batch. Arrow then allocates through
    glibc too (its system memory pool). Returns whether it applied
    (False off glibc, e.g. on macOS, where nothing changes).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    retained = bool(mallopt(_M_MMAP_THRESHOLD, _RETAINED_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _RETAINED_BYTES)
    )
    if retained:
        # Arrow's own allocator (mimalloc) decommits freed pages shortly after (madvise), to be
        # faulted in again by the next batch; through glibc's malloc Arrow's buffers share the
        # kept memory. Measured on the books: `pipelines examples` about 0.3 CPU-s and 70 MB of
        # peak RSS less. The variable carries the choice to worker processes started from here.
        pa.set_memory_pool(pa.system_memory_pool())
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    return retained


class StageFailed(RuntimeError):
    """A pipeline failed while running; the message is the most useful single line."""


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """Beam options from the pass-through arguments, with DirectRunner as the default runner."""
    options = PipelineOptions(beam_args)
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = DEFAULT_RUNNER
    return options


def runner_name(beam_args: list[str]) -> str:
    """The runner a stage will run on (``--runner``, DirectRunner by default), without a module path."""
    return str(pipeline_options(beam_args).view_as(StandardOptions).runner).rsplit(".", 1)[-1]


def is_dry_run(options: PipelineOptions) -> bool:
    """Whether the runner only builds the job (Dataflow ``--dry_run``), writing nothing."""
    return bool(options.view_as(TestOptions).dry_run)


_STEP_ANNOTATION = re.compile(r"\s*\[while running '[^']*'\]")
"""What Beam appends to a worker's error message: the step it ran."""


def explain_failure(err: BaseException) -> str:
    """The line of a (possibly runner-wrapped) exception a user can act on."""
    text = _STEP_ANNOTATION.sub("", str(err))
    for name in _OUR_ERRORS:
        match = re.search(rf"{name}: (.+)", text)
        if match:
            return match.group(1).strip()
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1] if lines else 'no message'}"


def run_stage(
    build: Callable[[beam.Pipeline, Any, Any], None],
    config: Any,
    inputs: Any,
    beam_args: list[str],
    cleanup: Callable[[], Any] | None = None,
) -> dict[str, Any] | None:
    """Prepare the output, build and run one stage; return its ``stats.json`` (None for a dry run).

    ``cleanup`` (removing the stage's temporary files) runs once the pipeline has ended, finished
    or failed (or was stopped by a signal: :func:`run_pipeline`), unless it was a dry run.
    """
    retain_freed_memory()
    options = pipeline_options(beam_args)
    io.use_beam_options(beam_args)
    dry_run = is_dry_run(options)
    if not dry_run:
        io.prepare_output(config.output, config.overwrite)
    pipeline = beam.Pipeline(options=options)
    build(pipeline, config, inputs)
    try:
        state = run_pipeline(pipeline, config.output)
    except (io.InputError, io.OutputError, SchemaError) as err:  # raised again by Beam, step named
        raise StageFailed(_STEP_ANNOTATION.sub("", str(err))) from err
    except Exception as err:  # The runner wraps worker errors in its own types.
        _LOG.debug("pipeline failed", exc_info=True)
        raise StageFailed(explain_failure(err)) from err
    finally:
        if cleanup is not None and not dry_run:
            _clean_up(cleanup)
    if dry_run:
        return None
    if state not in (beam.runners.runner.PipelineState.DONE, None):
        raise StageFailed(f"the pipeline ended in state {state}; see the runner's logs")
    return json.loads(io.read_bytes(io.join(config.output, STATS_FILE)))


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


def _clean_up(cleanup: Callable[[], Any]) -> None:
    """Run ``cleanup``; a failure is reported on one line, never hides the run's own outcome."""
    try:
        cleanup()
    except Exception as err:  # Any filesystem error: the files stay, and the user is told.
        _LOG.error(
            "could not remove the temporary files (%s: %s); delete them by hand", type(err).__name__, err
        )


def summary_lines(stats: dict[str, Any], output: str, record_name: str) -> list[str]:
    """A short human summary of a stage's ``stats.json``."""
    lines = [
        f"{record_name} read: {stats['records_in']:,}",
        f"documents written: {stats['documents_out']:,} "
        f"({stats['sentences']:,} sentences, {stats['words']:,} words)",
    ]
    for key in ("dropped", "rejected", "file_errors"):
        for reason, count in stats[key].items():
            lines.append(f"  {key.replace('_', ' ')}: {reason}: {count:,}")
    for split, count in stats.get("splits", {}).items():
        lines.append(f"  split {split}: {count:,} documents")
    lines.append(f"counts reconcile: {'yes' if stats['reconciles'] else 'NO'}")
    lines.append(f"output: {output}")
    return lines
