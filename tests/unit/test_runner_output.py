"""What a job left is read back before a stage is called done: a job that the runner calls DONE but
that left no ``stats.json`` (its workers wrote elsewhere), or a ``COMPLETED`` that its manifest does
not match, is ``PipelineFailed`` (exit 1), never success."""

from __future__ import annotations

import os

import pytest

from pipelines.runner import PipelineFailed, finished_output


def test_a_done_job_that_left_nothing_at_the_output_is_a_failure(tmp_path):
    with pytest.raises(PipelineFailed) as caught:
        finished_output(str(tmp_path), "documents")
    assert str(caught.value) == (
        f"--output {tmp_path}: the runner says the job is done, but it left no stats.json there; "
        "its workers wrote elsewhere or failed: see the runner's logs"
    )
    assert caught.value.exit_code == 1


def test_a_completed_marker_its_manifest_does_not_match_is_a_failure(tmp_path):
    (tmp_path / "stats.json").write_text("{}")
    (tmp_path / "manifest.json").write_text('{"format": "documents"}')
    (tmp_path / "COMPLETED").write_text("0" * 64 + "\n")
    with pytest.raises(PipelineFailed, match=r"the job's output does not verify"):
        finished_output(str(tmp_path), "documents")


def test_an_output_not_marked_completed_is_said(tmp_path):
    (tmp_path / "stats.json").write_text('{"documents_out": 0}')
    stats, line, warning = finished_output(str(tmp_path), "documents")
    assert stats == {"documents_out": 0} and line == f"output: {tmp_path} (not marked COMPLETED)"
    assert warning is None


def test_a_failed_job_is_one_line_naming_its_cause():
    """Our errors raised on a worker come back as their own line, Beam's step annotation dropped; a
    job service's gRPC failure (a multi-line text ending in ">") says its status and details."""
    import grpc

    from pipelines.jobs import explain_failure

    worker = RuntimeError("Traceback ...\nInputError: b.txt: not UTF-8 [while running 'Read books']")
    assert explain_failure(worker) == "b.txt: not UTF-8"

    class StreamRemoved(grpc.RpcError):
        def __str__(self):
            return "<_MultiThreadedRendezvous of RPC that terminated with:\n\tstatus = ...\n>"

        def code(self):
            return grpc.StatusCode.DEADLINE_EXCEEDED

        def details(self):
            return "Stream removed (Deadline Exceeded)"

    assert explain_failure(StreamRemoved()) == (
        "the runner's service stopped the job (DEADLINE_EXCEEDED: Stream removed (Deadline Exceeded))"
    )
    assert explain_failure(ValueError("first\nlast")) == "ValueError: last"


def test_a_dry_run_leaves_no_temporary_folder():
    """Every Beam pipeline makes a local temporary folder that only ``run()`` removes."""
    import apache_beam as beam

    from pipelines import jobs

    pipeline = beam.Pipeline(options=jobs.job_options(["--runner=FnApiRunner", "--dry_run=True"]))
    _ = pipeline | beam.Create([1]) | beam.Map(str)
    assert os.path.isdir(pipeline.local_tempdir)
    assert jobs.run_pipeline(pipeline, "out") is None
    assert not os.path.exists(pipeline.local_tempdir)
