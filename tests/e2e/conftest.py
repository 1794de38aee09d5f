"""Running the real commands in-process, and reading their outputs back."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from pipelines.cli import main
from schemas import DOCUMENTS, REJECTS, Manifest

FAST_RUNNER = ["--runner", "FnApiRunner"]


def run_cli(*args: str, expect: int = 0):
    """Run ``pipelines ARGS`` in-process; check the exit code; return the click result."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == expect, f"exit {result.exit_code}\n{result.output}"
    return result


def read_output(folder: Path) -> tuple[Manifest, dict, dict[str, pa.Table]]:
    """The manifest, stats and per-split documents of a completed output."""
    manifest = Manifest.from_json((folder / "manifest.json").read_text(), "manifest.json")
    stats = json.loads((folder / "stats.json").read_text())
    tables: dict[str, list[pa.Table]] = {}
    for shard in manifest.shards:
        tables.setdefault(shard.split, []).append(
            DOCUMENTS.read_ipc((folder / shard.path).read_bytes(), shard.path)
        )
    return manifest, stats, {split: pa.concat_tables(t) for split, t in tables.items()}


def read_rejects(folder: Path) -> list[dict]:
    """Every reject row of an output."""
    rows = []
    for shard in sorted((folder / "rejects").glob("*.arrow")):
        rows.extend(REJECTS.read_ipc(shard.read_bytes(), str(shard)).to_pylist())
    return rows


def shard_bytes(folder: Path) -> dict[str, bytes]:
    """Every Arrow file of an output by relative path."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.arrow"))}


@pytest.fixture(scope="session")
def released_vocab() -> str:
    """The released bert-base-uncased vocab.txt from ../shared/data."""
    from tests.conftest import SHARED_DATA, require

    return str(require(SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"))


@pytest.fixture(scope="session")
def wiki_output(tmp_path_factory) -> Path:
    """`pipelines wikipedia` on the real enwiki excerpt, run once for the session."""
    from tests.conftest import ENWIKI_EXCERPT, require

    dump = require(ENWIKI_EXCERPT)
    out = tmp_path_factory.mktemp("wiki") / "out"
    run_cli("wikipedia", "--input", str(dump), "--output", str(out), "--num-shards", "4", *FAST_RUNNER)
    return out


@pytest.fixture(scope="session")
def corpus_output(wiki_output, tmp_path_factory) -> Path:
    """`pipelines corpus` over the enwiki excerpt's documents, 10% validation and 10% test."""
    out = tmp_path_factory.mktemp("corpus") / "out"
    run_cli(
        "corpus",
        "--input",
        str(wiki_output),
        "--output",
        str(out),
        "--validation-fraction",
        "0.1",
        "--test-fraction",
        "0.1",
        "--num-shards",
        "2",
        *FAST_RUNNER,
    )
    return out


def run_wordpiece(*args: str, expect: int = 0):
    """Run ``wordpiece ARGS`` in-process; check the exit code; return the click result."""
    from wordpiece.cli import main as wordpiece_main

    result = CliRunner().invoke(wordpiece_main, list(args), catch_exceptions=False)
    assert result.exit_code == expect, f"exit {result.exit_code}\n{result.output}"
    return result


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gcs_emulator(monkeypatch):
    """A local GCS emulator for the test; Beam's gs:// filesystem talks to it anonymously."""
    port = _free_port()
    emulator = Path(sys.executable).parent / "gcp-storage-emulator"
    process = subprocess.Popen(
        [str(emulator), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail("the GCS emulator did not start")
                time.sleep(0.2)
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        client = storage.Client(project="test", credentials=AnonymousCredentials())
        client.create_bucket("bert-bucket")
        import gcsfs

        gcsfs.GCSFileSystem.clear_instance_cache()  # an instance may hold an earlier emulator's address
        yield client.bucket("bert-bucket")
    finally:
        process.terminate()
        process.wait(timeout=10)


S3_BUCKET = "bert-bucket"


@pytest.fixture
def s3_server(monkeypatch):
    """A local S3 server (moto's ``ThreadedMotoServer`` on 127.0.0.1, a free port) holding the
    empty bucket ``bert-bucket``, stopped after the test. s3fs, boto3 and Beam's S3 filesystem
    find it through ``AWS_ENDPOINT_URL`` and the dummy keys set here; yields the endpoint URL."""
    pytest.importorskip("s3fs", reason="s3fs is not installed (the [aws] extra)")
    moto_server = pytest.importorskip("moto.server", reason="moto is not installed (the dev extra)")
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for name, value in (
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    import s3fs

    try:
        # moto keeps its buckets in the process, across servers: start from none.
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")).close()
        s3fs.S3FileSystem.clear_instance_cache()  # an instance may hold an earlier server's address
        s3fs.S3FileSystem().mkdir(S3_BUCKET)
        yield endpoint
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        server.stop()


def _examples(corpus: Path, vocab: str, out: Path, split: str) -> Path:
    run_cli(
        "examples",
        "--corpus",
        str(corpus),
        "--vocab",
        vocab,
        "--output",
        str(out),
        "--split",
        split,
        "--max-seq-length",
        "64",
        "--dupe-factor",
        "1",
        "--num-shards",
        "2",
        "--num-buckets",
        "4",
        *FAST_RUNNER,
    )
    return out


@pytest.fixture(scope="module")
def vocab() -> str:
    """The released bert-base-uncased vocabulary (for the pre-training tests)."""
    from tests.conftest import SHARED_DATA, require

    return str(require(SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"))


@pytest.fixture(scope="module")
def shards(corpus_output, vocab, tmp_path_factory) -> Path:
    """`pipelines examples` at 64 tokens, dupe factor 1, from the enwiki excerpt's train split."""
    return _examples(corpus_output, vocab, tmp_path_factory.mktemp("shards") / "seq64", "train")


@pytest.fixture(scope="module")
def validation_shards(corpus_output, vocab, tmp_path_factory) -> Path:
    return _examples(corpus_output, vocab, tmp_path_factory.mktemp("shards") / "val64", "validation")
