"""Running a corpus stage: checks, the output claimed, the job run and what it left checked."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import apache_beam as beam

from pipelines import files
from pipelines.jobs import (
    LOCAL_RUNNERS,
    STEP_ANNOTATION,
    check_job,
    dry_run,
    explain_failure,
    job_options,
    run_pipeline,
    runner_name,
)
from schemas import COMPLETED_FILE, DOCUMENTS, STATS_FILE, storage
from schemas.commands import CommandError, InputError
from schemas.outputs import OutputFolder

_LOG = logging.getLogger(__name__)


class PipelineFailed(CommandError):
    """The Beam job failed on the runner, or ended without leaving its output: one line, exit 1."""


def run_stage(
    build: Callable[[beam.Pipeline, Any, Any, storage.Folder], None],
    config: Any,
    load_inputs: Callable[[], Any],
    beam_args: list[str],
    command: str,
    reads: Mapping[str, str | Iterable[str]],
    writes: Mapping[str, str | Iterable[str]] | None = None,
    submitter_reads: Mapping[str, str | Iterable[str]] | None = None,
    cleanup: Callable[[], Any] | None = None,
    fmt: str = DOCUMENTS.name,
) -> tuple[dict[str, Any], str, str | None] | None:
    """Check the paths and buckets (:func:`pipelines.jobs.check_job`), claim the output for
    ``command``, ``build`` the stage from ``load_inputs()`` and run it; a finished job's output is
    verified. Returns :func:`finished_output`'s (None for a dry run)."""
    options = job_options(beam_args)
    check_job(options, reads, {"--output": config.output, **(writes or {})}, submitter_reads)
    inputs = load_inputs()
    if dry_run(options):
        build(pipeline := beam.Pipeline(options=options), config, inputs, storage.Folder(config.output))
        run_pipeline(pipeline, config.output)
        return None
    if cleanup is None and runner_name(options) in LOCAL_RUNNERS:  # what GroupOnDisk wrote there
        cleanup = functools.partial(files.remove_tree, files.join(config.output, files.TEMP_DIR))
    with OutputFolder.open(config.output, command, overwrite=config.overwrite) as folder:
        folder.begin()
        state = _run(build, config, inputs, options, cleanup, folder)
    if state not in (beam.runners.runner.PipelineState.DONE, None):
        raise PipelineFailed(f"the pipeline ended in state {state}; see the runner's logs")
    return finished_output(config.output, fmt)


def _run(build, config, inputs, options, cleanup, folder: OutputFolder) -> Any:
    pipeline = beam.Pipeline(options=options)
    build(pipeline, config, inputs, folder)  # its transforms journal what the workers will write
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


def finished_output(output: str, fmt: str) -> tuple[dict[str, Any], str, str | None]:
    """What a finished job left at ``output``: its ``stats.json``, what its verified manifest holds,
    and a warning when most of its shards are empty (``--num-shards`` far above the rows)."""
    stats_path = files.join(output, STATS_FILE)
    if not files.exists(stats_path):
        raise PipelineFailed(
            f"--output {output}: the runner says the job is done, but it left no {STATS_FILE} there; "
            "its workers wrote elsewhere or failed: see the runner's logs"
        )
    stats = json.loads(files.read_bytes(stats_path))
    if not files.exists(files.join(output, COMPLETED_FILE)):
        return stats, f"output: {output} (not marked COMPLETED)", None
    try:
        manifest = files.load_manifest(output, fmt)
    except InputError as err:
        raise PipelineFailed(f"--output {output}: the job's output does not verify: {err}") from None
    size_mb = sum(s.num_bytes for s in manifest.shards) / 1e6
    holds = (
        f"{len(manifest.shards):,} {manifest.format} shards, {manifest.num_rows():,} rows, {size_mb:,.1f} MB"
    )
    empty = sum(not s.num_rows for s in manifest.shards)
    warning = None
    if empty > len(manifest.shards) / 2:
        warning = (
            f"{empty:,} of the {len(manifest.shards):,} shards are empty, for {manifest.num_rows():,} row(s) in all: "
            "lower --num-shards (each shard of 100-500 MB at scale)"
        )
    return stats, f"output: {output} (COMPLETED: {holds})", warning


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
