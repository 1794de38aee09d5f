"""Running a corpus stage: checks, the output claimed, the job run and what it left checked."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import apache_beam as beam

from pipelines import io
from pipelines.shuffle import remove_folder
from schemas import COMPLETED_FILE, DOCUMENTS, STATS_FILE
from schemas.commands import CommandError, InputError
from wordpiece.beam_jobs import (
    LOCAL_RUNNERS,
    STEP_ANNOTATION,
    check_job,
    dry_run,
    explain_failure,
    job_options,
    run_pipeline,
    runner_name,
)

_LOG = logging.getLogger(__name__)


class PipelineFailed(CommandError):
    """The Beam job failed on the runner, or ended without leaving its output: one line, exit 1."""


def run_stage(
    build: Callable[[beam.Pipeline, Any, Any], None],
    config: Any,
    load_inputs: Callable[[], Any],
    beam_args: list[str],
    command: str,
    reads: Mapping[str, str | Iterable[str]],
    writes: Mapping[str, str | Iterable[str]] | None = None,
    submitter_reads: Mapping[str, str | Iterable[str]] | None = None,
    cleanup: Callable[[], Any] | None = None,
    fmt: str = DOCUMENTS.name,
) -> tuple[dict[str, Any], str] | None:
    """Check the paths and buckets (:func:`wordpiece.beam_jobs.check_job`), claim the output for
    ``command``, ``build`` the stage from ``load_inputs()`` and run it; a finished job's output is
    verified. Returns its ``stats.json`` and what the output holds (None for a dry run)."""
    options = job_options(beam_args)
    io.use_beam_options(beam_args)
    check_job(options, reads, {"--output": config.output, **(writes or {})}, submitter_reads)
    inputs = load_inputs()
    if dry_run(options):
        build(pipeline := beam.Pipeline(options=options), config, inputs)
        run_pipeline(pipeline, config.output)
        return None
    if cleanup is None and runner_name(options) in LOCAL_RUNNERS:  # what GroupOnDisk wrote there
        cleanup = functools.partial(remove_folder, io.join(config.output, io.TEMP_DIR))
    with io.open_output(config.output, command, config.overwrite) as folder:
        folder.begin()
        state = _run(build, config, inputs, options, cleanup)
    if state not in (beam.runners.runner.PipelineState.DONE, None):
        raise PipelineFailed(f"the pipeline ended in state {state}; see the runner's logs")
    return finished_output(config.output, fmt)


def _run(build, config, inputs, options, cleanup) -> Any:
    pipeline = beam.Pipeline(options=options)
    build(pipeline, config, inputs)
    try:
        return run_pipeline(pipeline, config.output)
    except CommandError as err:  # ours, raised again by an in-process runner with the step named
        raise type(err)(STEP_ANNOTATION.sub("", str(err))) from None
    except Exception as err:  # The runner wraps worker errors in its own types.
        _LOG.debug("pipeline failed", exc_info=True)
        raise PipelineFailed(explain_failure(err)) from err
    finally:
        if cleanup is not None:
            try:
                cleanup()
            except Exception as err:  # Any filesystem error: the files stay, and the user is told.
                _LOG.error(
                    "could not remove the temporary files (%s: %s); delete them by hand",
                    type(err).__name__,
                    err,
                )


def finished_output(output: str, fmt: str) -> tuple[dict[str, Any], str]:
    """What a finished job left at ``output``: its ``stats.json`` and what its verified manifest holds."""
    stats_path = io.join(output, STATS_FILE)
    if not io.exists(stats_path):
        raise PipelineFailed(
            f"--output {output}: the runner says the job is done, but it left no {STATS_FILE} there; "
            "its workers wrote elsewhere or failed: see the runner's logs"
        )
    stats = json.loads(io.read_bytes(stats_path))
    if not io.exists(io.join(output, COMPLETED_FILE)):
        return stats, f"output: {output} (not marked COMPLETED)"
    try:
        manifest = io.load_manifest(output, fmt)
    except InputError as err:
        raise PipelineFailed(f"--output {output}: the job's output does not verify: {err}") from None
    size_mb = sum(s.num_bytes for s in manifest.shards) / 1e6
    holds = (
        f"{len(manifest.shards):,} {manifest.format} shards, {manifest.num_rows():,} rows, {size_mb:,.1f} MB"
    )
    return stats, f"output: {output} (COMPLETED: {holds})"


def summary_lines(stats: dict[str, Any], record_name: str) -> list[str]:
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
    return lines
