"""The Dataflow rehearsal (``benchmarks/rehearsal/rehearse.py``): every Beam stage on workers that cannot see this
machine's disk, byte-identical to FnApiRunner; and every path a remote worker would need refused
before anything is built or submitted."""

from __future__ import annotations

import time

import grpc
import pytest
from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc
from apache_beam.runners.portability.stager import Stager
from click.testing import CliRunner

from benchmarks.rehearsal.rehearse import BUCKET, DATA, STAGES, Rehearsal, rehearse, upload_inputs
from pipelines.cli import main as pipelines_main
from tests.conftest import in_ci
from wordpiece.cli import main as wordpiece_main

pytestmark = [pytest.mark.rehearsal, pytest.mark.slow]
VOCAB = str(DATA / "vocab" / "bert-base-uncased_vocab.txt")


@pytest.fixture(scope="module")
def rehearsal():
    try:
        with Rehearsal() as started:
            upload_inputs(started)
            yield started
    except RuntimeError as err:
        if in_ci():
            raise  # CI runs as root: the rehearsal must run there
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def chain(rehearsal):
    """Every stage through the rehearsal, each compared with FnApiRunner over the same inputs."""
    return {result.stage: (result, same) for result, same in rehearse(rehearsal, list(STAGES), compare=True)}


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_runs_on_isolated_workers_byte_identical_to_fnapirunner(chain, stage):
    result, same = chain[stage]
    assert result.exit_code == 0, result.output
    assert same, f"{stage}: the rehearsal's output differs from FnApiRunner's"
    assert "sdist" not in result.output and "warning" not in result.output  # the package's build is quiet


def test_a_local_vocabulary_travels_with_the_job(chain):
    result, _ = chain["examples"]  # --vocab is a local file the workers cannot see
    assert result.exit_code == 0 and "COMPLETED: 3 examples shards" in result.output


@pytest.fixture
def submitted(rehearsal, monkeypatch):
    """The commands run in this process against the rehearsal; what reached the job service and
    whether a package was built for workers are counted."""
    for name, value in rehearsal.env.items():
        monkeypatch.setenv(name, value)
    built = []
    original = Stager.create_job_resources
    counted = staticmethod(lambda *a, **k: built.append(1) or original(*a, **k))
    monkeypatch.setattr(Stager, "create_job_resources", counted)
    jobs = beam_job_api_pb2_grpc.JobServiceStub(grpc.insecure_channel(f"localhost:{rehearsal.job_port}"))

    def count() -> tuple[int, int]:
        return len(jobs.GetJobs(beam_job_api_pb2.GetJobsRequest()).job_info), len(built)

    return count


def invoke(rehearsal, tool: str, *args: str):
    main = wordpiece_main if tool == "wordpiece" else pipelines_main
    start = time.monotonic()
    result = CliRunner().invoke(main, [*args, *rehearsal.beam_args], catch_exceptions=False)
    return result, time.monotonic() - start


REFUSED = {
    "local --output": (
        "pipelines",
        ["books", "--input", f"gs://{BUCKET}/inputs/books/*.txt", "--output", "{tmp}/books"],
        "--output {tmp}/books: a local path",
    ),
    "local --input": (
        "pipelines",
        ["books", "--input", str(DATA / "books" / "gutenberg" / "*.txt"), "--output", f"gs://{BUCKET}/r/b"],
        "--input ",
    ),
    "local --corpus": (
        "pipelines",
        ["examples", "--corpus", "{tmp}/corpus", "--vocab", VOCAB, "--output", f"gs://{BUCKET}/r/e"],
        "--corpus {tmp}/corpus: a local path",
    ),
    "local spill folder": (
        "pipelines",
        ["examples", "--corpus", f"gs://{BUCKET}/c", "--vocab", VOCAB, "--output", f"gs://{BUCKET}/r/e"]
        + ["--spill", "always", "--temp-location", "{tmp}/spill"],
        "--temp-location {tmp}/spill: a local path",
    ),
    "local wordpiece --output": (
        "wordpiece",
        ["train", "--corpus", f"gs://{BUCKET}/c", "--output", "{tmp}/vocab"],
        "--output {tmp}/vocab: a local path",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_local_path_remote_workers_need_is_refused_before_submission(rehearsal, submitted, tmp_path, case):
    tool, args, expected = REFUSED[case]
    before = submitted()
    result, seconds = invoke(rehearsal, tool, *(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + expected.replace("{tmp}", str(tmp_path)))
    assert "cannot see this one's disk; give a bucket URL" in lines[0]
    assert submitted() == before and seconds < 10  # no job, no package built
    assert not list(tmp_path.iterdir())


def test_a_dry_run_checks_builds_and_runs_nothing(rehearsal, submitted):
    """Its own process (google-auth reads the metadata server's address when imported); a
    --setup_file that is not there proves that no package is built."""
    before = submitted()
    output = f"gs://{BUCKET}/dry/books"
    args = ["books", "--input", f"gs://{BUCKET}/inputs/books/*.txt", "--output", output, "--dry_run=True"]
    result = rehearsal.run("books", [*args, "--setup_file", "/no/such/setup.py"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "dry run: the job was built and not submitted; nothing was written"
    assert submitted() == before and result.seconds < 20
    assert not rehearsal.fs.exists(output.removeprefix("gs://"))
    asked = rehearsal.run("books", [*args[:-1], "--dry_run=sdist", "--setup_file", "/no/such/setup.py"])
    assert asked.exit_code == 1 and "/no/such/setup.py cannot be found" in asked.output  # built when asked


def test_a_dry_run_refuses_a_local_output_within_seconds(rehearsal, submitted, tmp_path):
    args = [
        "books",
        "--input",
        f"gs://{BUCKET}/inputs/books/*.txt",
        "--output",
        str(tmp_path / "o"),
        "--dry_run=True",
    ]
    result, seconds = invoke(rehearsal, "pipelines", *args)
    assert result.exit_code == 2 and "a local path" in result.output and seconds < 10
