"""Every check before any work (issue 37): `chain` reads its GLUE folder as the task's before the
first stage and claims its workdir before the slower checks; `pipelines examples` names every bad
flag in one line; a portable runner's job service is reached before the job is built, and a job
longer than Beam's default service timeout keeps its submitter."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from schemas.outputs import OutputFolder
from tests.clis import CLIS
from tests.conftest import ENWIKI_EXCERPT, SHARED_DATA, require


def _run(tool: str, *args: str):
    return CliRunner().invoke(CLIS[tool], list(args), prog_name=tool)


def test_chain_reads_the_glue_folder_as_its_task_before_the_first_stage(tmp_path):
    cola = require(SHARED_DATA / "glue" / "CoLA")
    dump, work = require(ENWIKI_EXCERPT), tmp_path / "w"
    result = _run(
        "chain",
        "--workdir",
        str(work),
        "--wiki-dump",
        str(dump),
        "--glue-dir",
        str(cola),
        "--glue-task",
        "mrpc",
    )
    assert result.exit_code == 1
    assert result.output.startswith(
        f"error: --glue-dir {cola} (--glue-task mrpc): {cola}/train.tsv:1: the header has no column '#1 String' ("
    )
    assert result.output.endswith("); is this the MRPC file of the official GLUE data?\n")
    assert result.output.count("\n") == 1 and not work.exists()  # no stage ran, the workdir left as it was


def test_a_held_workdir_is_said_before_the_inputs_are_looked_at(tmp_path):
    work = tmp_path / "w"
    missing = tmp_path / "no-such-dump.xml.bz2"  # an input check would say this first
    with OutputFolder.open(str(work), "chain", continuing=True, option="--workdir") as first:
        result = _run("chain", "--workdir", str(work), "--wiki-dump", str(missing))
    assert result.exit_code == 1
    assert result.output.startswith(
        f"error: --workdir {work}: being written by `chain` (run {first.run_id}, pid {os.getpid()} on host "
    )


def test_pipelines_examples_names_every_bad_flag_at_once(tmp_path: Path):
    args = [
        "--corpus",
        str(tmp_path / "c"),
        "--vocab",
        str(tmp_path / "v.txt"),
        "--output",
        str(tmp_path / "o"),
    ]
    bad = ["--dupe-factor", "0", "--max-seq-length", "3", "--masked-lm-prob", "2", "--seed", "-1"]
    result = _run("pipelines", "examples", *args, *bad)
    assert (result.exit_code, result.output) == (
        2,
        "error: invalid settings: --max-seq-length must be at least 5, got 3; --masked-lm-prob must be in (0, 1), "
        "got 2.0; --dupe-factor must be between 1 and 32,767, got 0; --seed must be between 0 and 4,294,967,295, "
        "got -1\n",
    )


def test_a_portable_job_service_is_reached_first_and_a_long_job_keeps_its_submitter(monkeypatch, tmp_path):
    from concurrent import futures

    import grpc
    import pytest
    from apache_beam.options.pipeline_options import PortableOptions

    from pipelines import jobs
    from schemas.commands import UsageError

    monkeypatch.setattr(jobs, "ENDPOINT_WAIT_S", 1)
    portable = ["--runner=PortableRunner", "--environment_type=LOOPBACK"]
    with pytest.raises(UsageError, match=r"--job_endpoint localhost:1: no job service answers \(1 s\)"):
        jobs.check_job(jobs.job_options([*portable, "--job_endpoint=localhost:1"]), {}, {})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("localhost:0")
    server.start()
    try:
        options = jobs.job_options([*portable, f"--job_endpoint=localhost:{port}"])
        jobs.check_job(options, {}, {})
    finally:
        server.stop(None)
    # Beam gives a job's state and message streams the service timeout too (300 s by default).
    assert options.view_as(PortableOptions).job_server_timeout == 7 * 86400
    given = jobs.job_options([*portable, "--job_server_timeout=60"])
    assert given.view_as(PortableOptions).job_server_timeout == 60
