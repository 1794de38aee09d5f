"""Running a corpus stage: options, output preparation, execution and the user-facing summary."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TestOptions

from pipelines import io
from schemas import STATS_FILE
from schemas.commands import InputError
from wordpiece.beam_jobs import DEFAULT_RUNNER, STEP_ANNOTATION, explain_failure, run_pipeline

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


def run_stage(
    build: Callable[[beam.Pipeline, Any, Any], None],
    config: Any,
    inputs: Any,
    beam_args: list[str],
    cleanup: Callable[[], Any] | None = None,
    command: str = "pipelines",
) -> dict[str, Any] | None:
    """Claim and prepare the output, build and run one stage; return its ``stats.json`` (None for
    a dry run).

    The output is claimed for ``command`` here, in the launching process, before anything is
    written (one writer; Dataflow's workers write under this claim), its earlier run's own files
    removed with ``--overwrite`` (:func:`pipelines.io.open_output`), and released when the
    pipeline has ended, finished or failed (or was stopped by a signal: :func:`run_pipeline`),
    after ``cleanup`` (removing the stage's temporary files), which runs then too. A dry run
    writes nothing and claims nothing.
    """
    retain_freed_memory()
    options = pipeline_options(beam_args)
    io.use_beam_options(beam_args)
    dry_run = is_dry_run(options)
    folder = None if dry_run else io.open_output(config.output, command, config.overwrite)
    with folder or contextlib.nullcontext():
        if folder is not None:
            folder.begin()
        pipeline = beam.Pipeline(options=options)
        build(pipeline, config, inputs)
        try:
            state = run_pipeline(pipeline, config.output)
        except (io.InputError, io.OutputError, InputError) as err:  # raised again by Beam, step named
            raise StageFailed(STEP_ANNOTATION.sub("", str(err))) from err
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
