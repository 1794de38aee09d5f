"""Buckets that cannot be used: ``schemas.buckets.probe`` gives one line naming the flag, the bucket
and the remedy, within its limit, for every cloud (gs:// on the GCS emulator, s3:// on moto)."""

from __future__ import annotations

import socket
import time

import pytest

from schemas import buckets
from schemas.commands import CommandError, InputError, OutputError


@pytest.fixture
def no_cloud_credentials(monkeypatch, tmp_path):
    """No Google or AWS credentials anywhere: no key file, no gcloud or aws configuration."""
    names = "GOOGLE_APPLICATION_CREDENTIALS STORAGE_EMULATOR_HOST AWS_PROFILE AWS_ENDPOINT_URL"
    for name in (*names.split(), "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def silent_endpoint():
    """A port that takes connections and never answers: a network that hangs."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def probe_line(limit_s: float = buckets.LIMIT_S, **paths) -> tuple[type, str, float]:
    start = time.monotonic()
    with pytest.raises(CommandError) as caught:
        buckets.probe(limit_s=limit_s, **paths)
    return type(caught.value), str(caught.value), time.monotonic() - start


@pytest.mark.parametrize("url", ["gs://b/corpus", "s3://b/corpus"])
def test_no_credentials_is_one_line_with_the_clouds_remedy(no_cloud_credentials, url):
    kind, line, seconds = probe_line(reads={"--corpus": url})
    remedy = "gcloud auth application-default login" if url.startswith("gs") else "aws configure"
    assert kind is CommandError and line.startswith(f"--corpus {url}: no ") and remedy in line
    assert "\n" not in line and seconds < buckets.LIMIT_S


@pytest.mark.parametrize("cloud", ["gs", "s3"])
def test_an_endpoint_that_refuses_is_one_line_at_once(monkeypatch, cloud):
    endpoint = closed_port()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST" if cloud == "gs" else "AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    kind, line, seconds = probe_line(writes={"--output": f"{cloud}://b/out"})
    hint = (
        "STORAGE_EMULATOR_HOST for an emulator" if cloud == "gs" else "AWS_ENDPOINT_URL or --s3_endpoint_url"
    )
    assert line.startswith(
        f"--output {cloud}://b/out: cannot connect to {endpoint[7:]} (Connection refused); "
    )
    assert hint in line
    assert seconds < 2


@pytest.mark.parametrize("cloud", ["gs", "s3"])
def test_an_endpoint_that_never_answers_is_one_line_at_the_limit(monkeypatch, silent_endpoint, cloud):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST" if cloud == "gs" else "AWS_ENDPOINT_URL", silent_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    kind, line, seconds = probe_line(limit_s=1.5, reads={"--input": f"{cloud}://b/in/*.txt"})
    assert line.startswith(f"--input {cloud}://b/in/*.txt: no answer from {cloud}://b within 2 s; ")
    assert 1.5 <= seconds < 3


@pytest.mark.emulator
def test_gcs_a_missing_bucket_is_refused_and_a_usable_one_passes(gcs_emulator):
    gcs_emulator.blob("in/a.txt").upload_from_string("text")
    buckets.probe(reads={"--input": "gs://bert-bucket/in/*.txt"}, writes={"--output": "gs://bert-bucket/out"})
    assert [b.name for b in gcs_emulator.client.list_blobs("bert-bucket")] == ["in/a.txt"]
    kind, line, _ = probe_line(reads={"--input": "gs://bert-bucket/in"}, writes={"--output": "gs://nope/out"})
    assert kind is OutputError
    assert line == (
        "--output gs://nope/out: no such bucket: create it (gcloud storage buckets create gs://nope "
        "--location=REGION)"
    )


@pytest.mark.s3
def test_s3_a_missing_bucket_is_refused_and_a_missing_input_left_to_the_command(s3_server):
    buckets.probe(reads={"--shards": "s3://bert-bucket/not-yet"}, writes={"--output": "s3://bert-bucket/run"})
    kind, line, _ = probe_line(reads={"--shards": "s3://nope/shards"})
    assert (kind, line) == (
        InputError,
        "--shards s3://nope/shards: no such bucket: create it (aws s3 mb s3://nope)",
    )


def test_local_paths_are_not_probed():
    buckets.probe(reads={"--input": ["/no/such/file", "memory://x"]}, writes={"--output": "out"}, limit_s=0)


@pytest.mark.parametrize(
    ("error", "role", "expected"),
    [
        (
            OSError("Forbidden: b/o\nno access"),
            "read",
            "gs://b --member=... --role=roles/storage.objectViewer",
        ),
        (PermissionError("denied"), "write", "gs://b --member=... --role=roles/storage.objectAdmin"),
    ],
)
def test_access_denied_names_the_role_to_grant(error, role, expected):
    found = buckets._explain(error, "--x", "gs://b/o", role)
    assert type(found) is (InputError if role == "read" else OutputError)
    assert str(found).startswith("--x gs://b/o: ") and expected in str(found)


COMMANDS = {
    "pipelines wikipedia": ("pipelines", "wikipedia --input {url}/dump.xml.bz2 --output {url}/wiki"),
    "pipelines books": ("pipelines", "books --input {url}/in/*.txt --output {url}/books"),
    "pipelines text": ("pipelines", "text --input {url}/text.txt --output {url}/text"),
    "pipelines corpus": ("pipelines", "corpus --input {url}/wiki --output {url}/corpus"),
    "pipelines examples": (
        "pipelines",
        "examples --corpus {url}/corpus --vocab {url}/vocab.txt --output {url}/ex",
    ),
    "pipelines show": ("pipelines", "show {url}/corpus"),
    "wordpiece train": ("wordpiece", "train --corpus {url}/corpus --output {url}/vocab"),
    "wordpiece encode": ("wordpiece", "encode --vocab {url}/vocab.txt"),
    "finetune glue": (
        "finetune",
        "glue --task rte --data-dir {url}/rte --checkpoint {url}/run --output {url}/o",
    ),
    "finetune ner": ("finetune", "ner --data-dir {url}/conll --checkpoint {url}/run --output {url}/o"),
    "finetune squad": (
        "finetune",
        "squad --version 1.1 --predict-file {url}/dev.json --checkpoint {url}/run --output {url}/o",
    ),
    "finetune features": (
        "finetune",
        "features --checkpoint {url}/run --input {url}/in.txt --output {url}/o",
    ),
    "finetune report": ("finetune", "report {url}/run --output {url}/report"),
    "pretrain": ("pretrain", "--shards {url}/shards --output {url}/run --config tiny"),
    "pretrain export": ("pretrain", "export --checkpoint {url}/run --output {url}/hf"),
    "chain": ("chain", "--wiki-dump {url}/dump.xml.bz2 --workdir {url}/work"),
    "chain ablate": ("chain", "ablate --wiki-dump {url}/dump.xml.bz2 --workdir {url}/work --dry-run"),
}
BUCKET_FAULTS = ("gs without credentials", "s3 without credentials", "gs unreachable", "s3 unreachable")


@pytest.fixture
def bucket_fault(request, no_cloud_credentials, monkeypatch):
    """The cloud's URL and the line's expected start for one kind of fault."""
    fault = request.param
    cloud = fault[:2]
    if fault.endswith("unreachable"):
        monkeypatch.setenv("STORAGE_EMULATOR_HOST" if cloud == "gs" else "AWS_ENDPOINT_URL", closed_port())
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        return f"{cloud}://b", "cannot connect to 127.0.0.1:"
    return f"{cloud}://b", "no Google Cloud credentials" if cloud == "gs" else "no AWS credentials"


@pytest.mark.parametrize("bucket_fault", BUCKET_FAULTS, indirect=True)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_gives_one_line_for_a_bucket_it_cannot_use(bucket_fault, command):
    from click.testing import CliRunner

    from tests.clis import CLIS

    url, expected = bucket_fault
    tool, args = COMMANDS[command]
    start = time.monotonic()
    result = CliRunner().invoke(CLIS[tool], args.format(url=url).split(), input="text\n")
    seconds = time.monotonic() - start
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and f" {url}/" in lines[0] and expected in lines[0]
    assert seconds < buckets.LIMIT_S


@pytest.mark.parametrize("tool", ["pretrain", "finetune"])
def test_a_fresh_process_says_one_line_too(no_cloud_credentials, tool):
    """A new process imports the bucket libraries after its logging is set up, so nothing they
    announce on import reaches the user (the in-process cases above import them earlier; gcsfs's
    default filesystem, which the tests' conftest switches off, announces itself at INFO)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    args = {
        "pretrain": ["--shards", "gs://b/shards", "--output", "gs://b/run", "--config", "tiny"],
        "finetune": ["glue", "--task", "rte", "--data-dir", "gs://b/rte", "--checkpoint", "gs://b/run"]
        + ["--output", "gs://b/o"],
    }[tool]
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", tool, *args],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root), "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "true"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stdout + done.stderr
    assert lines[0].startswith("error: ") and "no Google Cloud credentials" in lines[0]
