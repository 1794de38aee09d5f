"""Submitting and running a Beam job the way a command should, for the corpus stages and
``wordpiece train``'s counting job: paths and buckets checked before anything is built, a dry run,
a stop signal that stops the local workers too, and a failure, however the runner wrapped it, as
one line a user can act on."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    StandardOptions,
    TestOptions,
)

from pipelines import files
from schemas import buckets
from schemas.commands import STOP_SIGNALS, UsageError, raise_if_stopped, raise_stopped, stop_received

DEFAULT_RUNNER = "FnApiRunner"
"""Beam's in-process runner, the tests' (DirectRunner first tries to download Prism, another runner)."""
LOCAL_RUNNERS = StandardOptions.LOCAL_RUNNERS
"""Runners whose work ends with this process and its children, on this machine's disk."""
ENDPOINT_WAIT_S = 60  # how long a portable runner's job service may take to answer
_OUR_ERRORS = ("InputError", "OutputError", "CommandError", "WriteError")
STEP_ANNOTATION = re.compile(r"\s*\[while running '[^']*'\]")
"""What Beam appends to a worker's error message: the step it ran."""


def explain_failure(err: BaseException) -> str:
    """The line of a (possibly runner-wrapped) exception a user can act on."""
    text = STEP_ANNOTATION.sub("", str(err))
    for name in _OUR_ERRORS:
        match = re.search(rf"{name}: (.+)", text)
        if match:
            return match.group(1).strip()
    if callable(getattr(err, "code", None)) and callable(getattr(err, "details", None)):  # gRPC
        return f"the runner's service stopped the job ({err.code().name}: {err.details()})"
    return f"{type(err).__name__}: {(text.strip().splitlines() or ['no message'])[-1].strip()}"


def job_options(beam_args: Iterable[str]) -> PipelineOptions:
    """Beam's options from the pass-through arguments, DEFAULT_RUNNER unless ``--runner`` says; this
    process's file access takes them from now on (``files.use_beam_options``)."""
    options = PipelineOptions(list(beam_args))
    standard = options.view_as(StandardOptions)
    standard.runner = standard.runner or DEFAULT_RUNNER
    if "job_server_timeout" not in options.get_all_options(drop_default=True):  # Beam's 300 s would
        options.view_as(PortableOptions).job_server_timeout = 7 * 86400  # end a longer portable job
    files.use_beam_options(options)
    return options


def runner_name(options: PipelineOptions) -> str:
    """The runner's class name (``--runner`` may give a module path)."""
    return str(options.view_as(StandardOptions).runner).rsplit(".", 1)[-1]


def workers_elsewhere(options: PipelineOptions) -> bool:
    """Whether the runner's workers run on other machines (Dataflow; a portable runner, Flink or
    Spark in any environment but LOOPBACK), where this machine's disk is out of reach."""
    runner = runner_name(options)
    environment = (options.view_as(PortableOptions).environment_type or "").upper()
    return runner not in LOCAL_RUNNERS and ("Dataflow" in runner or environment != "LOOPBACK")


def dry_run(options: PipelineOptions) -> str:
    """``--dry_run``: "" (none), "sdist" (the job and the workers' package built) or "true" (the job)."""
    value = str(options.view_as(TestOptions).dry_run).strip().lower()
    return "" if value in ("", "false", "0", "no", "none") else "sdist" if value == "sdist" else "true"


def check_job(
    options: PipelineOptions,
    reads: Mapping[str, str | Iterable[str]],
    writes: Mapping[str, str | Iterable[str]],
    submitter_reads: Mapping[str, str | Iterable[str]] | None = None,
) -> None:
    """Before anything is read, built or submitted: where workers run elsewhere, every path they
    read or write (Beam's temporary and staging folders too) must be a URL and a portable runner's
    job service must answer (else UsageError); then every bucket, ``submitter_reads`` too, is probed."""
    google = options.view_as(GoogleCloudOptions)
    if workers_elsewhere(options):
        runner = runner_name(options)
        if "Dataflow" in runner and not (google.project and google.region and google.temp_location):
            raise UsageError(f"{runner} needs --project, --region and --temp_location gs://BUCKET/tmp")
        beam_paths = {"--temp_location": google.temp_location, "--staging_location": google.staging_location}
        for flag, paths in {**reads, **writes, **beam_paths}.items():
            for path in [paths] if isinstance(paths, str) else paths or ():
                if path and "://" not in path or path.startswith("file://"):
                    scheme = "gs://BUCKET/..." if "Dataflow" in runner else "a bucket URL (gs://, s3://)"
                    raise UsageError(
                        f"{flag} {path}: a local path, and the workers of {runner} run on other machines "
                        f"and cannot see this one's disk; give {scheme}"
                    )
    endpoint = options.view_as(PortableOptions).job_endpoint
    if endpoint and endpoint != "embed":
        import grpc

        with grpc.insecure_channel(endpoint) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=ENDPOINT_WAIT_S)
            except grpc.FutureTimeoutError:
                raise UsageError(
                    f"--job_endpoint {endpoint}: no job service answers ({ENDPOINT_WAIT_S} s)"
                ) from None
    beam_writes = {
        "--temp_location": google.temp_location or (),
        "--staging_location": google.staging_location or (),
    }
    buckets.probe(reads={**reads, **(submitter_reads or {})}, writes={**writes, **beam_writes})


def run_pipeline(pipeline: beam.Pipeline, output: str) -> Any:
    """Run ``pipeline`` and return its final state. A dry run builds the job (every DoFn pickled;
    with ``--dry_run=sdist`` the workers' package too) and runs nothing, on any runner (None). A
    stop signal ends it as ``Stopped`` (with the local runner's worker processes), whatever Beam
    rewrapped it as. The package's build on a remote submission is quiet unless ``--verbose``."""
    options = pipeline.options
    quiet = _quiet_stderr if workers_elsewhere(options) and not _beam_logs() else contextlib.nullcontext
    if dry_run(options):
        try:
            pipeline.to_runner_api()
            if dry_run(options) == "sdist":
                from apache_beam.transforms.environments import python_sdk_dependencies

                with tempfile.TemporaryDirectory() as folder, quiet():
                    python_sdk_dependencies(options, folder)
        finally:  # the folder every Pipeline makes, which only run() removes
            shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)
        return None
    remote = (
        ""
        if runner_name(options) in LOCAL_RUNNERS
        else f"; the job may still run on {runner_name(options)}: cancel it there"
    )
    with _workers_stop_with_us(), _temp_folder_of_its_own():
        try:
            with quiet():
                result = pipeline.run()
            return result.wait_until_finish()
        except BaseException:
            raise_if_stopped(f"{output} is not marked COMPLETED{remote}")
            raise


@contextlib.contextmanager
def _temp_folder_of_its_own() -> Iterator[None]:
    """For the block, this process's temporary folder is one of its own, removed when the process
    ends, after Beam's exit handlers (registered later, run first): Beam's local runners leave
    folders there (``beam-temp*`` of a job server that could not start)."""
    saved, tempfile.tempdir = tempfile.tempdir, tempfile.mkdtemp(prefix="pipelines-beam-")
    atexit.register(shutil.rmtree, tempfile.tempdir, True)
    try:
        yield
    finally:  # as it was, for what the process does next
        tempfile.tempdir = saved


def _beam_logs() -> bool:
    import logging

    return logging.getLogger("apache_beam").isEnabledFor(logging.INFO)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Standard error (file descriptor 2, which child processes share) to nowhere for the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "wb") as sink:
        os.dup2(sink.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def _workers_stop_with_us() -> Iterator[None]:
    """While the block runs: a stop signal first sends SIGTERM to this process's descendants (the
    runner's SDK workers, which a signal to this process alone does not reach), then goes to the
    handler that was there; the runner's threads that see their worker die say nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    stopping: list[int] = []  # set before a worker dies, so no runner thread reports its death

    def stop(signum: int, frame: Any) -> None:
        stopping.append(signum)
        for pid in _descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        handler = previous[signum]
        (handler if callable(handler) else raise_stopped)(signum, frame)

    hook = threading.excepthook

    def quiet_when_stopped(args: threading.ExceptHookArgs) -> None:
        if not stopping and stop_received() is None:
            hook(args)

    threading.excepthook = quiet_when_stopped
    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if not stopping:  # after a stop the runner's threads may still report while we exit
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
