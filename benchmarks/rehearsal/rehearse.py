"""A Dataflow rehearsal: the Beam stages run the way Dataflow runs them, before anyone pays.

    python -m benchmarks.rehearsal.rehearse [--stage all|books|wikipedia|documents|corpus|wordpiece|examples] [--compare]

(``make dataflow-rehearsal STAGE=...``.) It starts, on this machine:

- a GCS emulator (``gcp-storage-emulator``, in memory) holding the bucket ``gs://rehearsal``, and
  a metadata server that hands out a token, as a Dataflow worker's VM has (without one Beam's
  GCS client retries for credentials for half a minute in every process);
- a Beam job service (``local_job_service_main``, through ``job_service.py``: a job's bundles spread
  over ``--workers`` SDK workers): what Dataflow's service is to a job;
- an external worker pool (``worker_pool_main``) in its own mount namespace (``unshare -m``,
  root only), where the checkout, its parent folder, ``../shared`` and every temporary folder
  are hidden under empty tmpfs mounts: its workers see the buckets and nothing of the
  submitter's disk. Each worker boots as Dataflow's container does (``boot.py``): it fetches the
  staged files from the job service and installs the sdist that ``--setup_file`` built, into a
  fresh environment whose dependencies are this checkout's ``.venv`` site-packages, mounted
  read-only (the versions ``constraints.txt`` pins; installing them again would only cost time).

Each stage is then submitted with the real command line, ``--runner PortableRunner
--environment_type EXTERNAL``, its inputs uploaded to the bucket the way a user would (``gcloud
storage cp``), the examples' vocabulary left local (it travels inside the job). The report
gives each stage's outcome (its ``error:`` line is what Dataflow would hit) and wall time; with
``--compare`` each stage also runs on FnApiRunner over the same inputs and its output files
must be byte-identical.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = (ROOT.parent / "shared").resolve()
DATA = SHARED / "data"
BUCKET = "rehearsal"
STAGES = ("books", "wikipedia", "documents", "corpus", "wordpiece", "examples")
ENV = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "PYTHONDONTWRITEBYTECODE": "1"}
WORKER_HOME = "/tmp/rehearsal-worker"
MEASURED = ("learn_s", "peak_rss_mb")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, what: str, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while True:
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the {what} did not start (exit {process.poll()})")
        time.sleep(0.2)


class MetadataServer(http.server.BaseHTTPRequestHandler):
    """The GCE metadata server as google-auth asks it: a token and a service account."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        if path.endswith("/token"):
            body = {"access_token": "rehearsal", "expires_in": 3600, "token_type": "Bearer"}
        elif path.endswith("/service-accounts/default/"):
            body = {
                "email": "rehearsal@rehearsal.iam.gserviceaccount.com",
                "scopes": [],
                "aliases": ["default"],
            }
        else:  # the universe domain, the project id
            body = "googleapis.com" if path.endswith("universe-domain") else "rehearsal"
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(200)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def isolation_script(port: int) -> str:
    """The worker pool's start in its own mount namespace: a tmpfs /tmp holding the worker's
    home, the .venv's site-packages bound read-only, then the checkout, its parent and the
    shared data hidden, and the pool started from / (no way back to the checkout)."""
    site = next((ROOT / ".venv" / "lib").glob("python3.*/site-packages"))
    python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    folders = sorted({p for p in (ROOT, ROOT.parent, SHARED) if p.is_dir()}, key=lambda p: -len(p.parts))
    hidden = " ".join(f"'{p}'" for p in folders)  # deepest first: ../shared may lie inside the parent
    home = WORKER_HOME
    return f"""set -e
mount -t tmpfs tmpfs /tmp
mkdir -p {home}/site {home}/semi
mount --bind '{site}' {home}/site
mount -o remount,bind,ro {home}/site
'{python}' -m venv --without-pip {home}/venv
echo {home}/site > "$(ls -d {home}/venv/lib/python3.*/site-packages)/rehearsal-deps.pth"
{{ echo '#!{home}/venv/bin/python'; cat '{ROOT}/benchmarks/rehearsal/boot.py'; }} > {home}/boot.py
chmod +x {home}/boot.py
for d in {hidden} /var/tmp; do mount -t tmpfs -o ro tmpfs "$d"; done
test ! -e '{ROOT}/setup.py'
cd {home}
exec {home}/venv/bin/python -m apache_beam.runners.worker.worker_pool_main --service_port {port} \\
  --container_executable {home}/boot.py
"""


@dataclass
class Result:
    stage: str
    runner: str
    exit_code: int
    seconds: float
    output: str

    def line(self) -> str:
        lines = self.output.strip().splitlines()
        errors = [x for x in lines if x.startswith("error:")]
        return errors[-1] if errors else (lines[-1] if lines else "")


class Rehearsal:
    """The emulator, the job service and the isolated worker pool (``emulator``, ``job_service``,
    ``pool``: their processes), started together; stopped (by their process ids) when the block ends."""

    def __init__(self, workers: int = 1):
        self.workers = workers
        self._processes: list[subprocess.Popen] = []
        self._work = Path(tempfile.mkdtemp(prefix="rehearsal-"))

    def __enter__(self) -> Rehearsal:
        if os.geteuid() != 0 or not shutil.which("unshare"):
            raise RuntimeError("the rehearsal's worker pool needs root and unshare (a mount namespace)")
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _spawn(self, command: list[str], name: str, env: dict) -> subprocess.Popen:
        log = open(self._work / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        process = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
        self._processes.append(process)
        return process

    def _start(self) -> None:
        self.gcs_port, self.job_port, self.pool_port = free_port(), free_port(), free_port()
        self._metadata = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MetadataServer)
        threading.Thread(target=self._metadata.serve_forever, daemon=True).start()
        metadata = f"127.0.0.1:{self._metadata.server_address[1]}"
        self.env = {
            **os.environ,
            **ENV,
            "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{self.gcs_port}",
            "GCE_METADATA_HOST": metadata,
            "GCE_METADATA_IP": metadata,
        }
        bin_dir = Path(sys.executable).parent
        emulator = [str(bin_dir / "gcp-storage-emulator"), "start", "--host", "127.0.0.1"]
        self.emulator = self._spawn(
            [*emulator, "--port", str(self.gcs_port), "--in-memory"], "emulator", self.env
        )
        wait_for_port(self.gcs_port, self.emulator, "GCS emulator")
        self.fs.mkdir(BUCKET)
        job_service = [sys.executable, str(Path(__file__).with_name("job_service.py"))]
        staging = self._work / "job-service"
        job_service += ["--port", str(self.job_port), "--staging_dir", str(staging)]
        self.job_service = self._spawn(job_service, "job-service", self.env)
        wait_for_port(self.job_port, self.job_service, "job service")
        pool_env = {**self.env, "REHEARSAL_WORKER_HOME": WORKER_HOME}
        pool = ["unshare", "-m", "--propagation", "private", "sh", "-c", isolation_script(self.pool_port)]
        self.pool = self._spawn(pool, "worker-pool", pool_env)  # its process becomes the pool's (exec)
        wait_for_port(self.pool_port, self.pool, "isolated worker pool", 120)

    def __exit__(self, *exc) -> None:
        if hasattr(self, "_metadata"):
            self._metadata.shutdown()
        for process in reversed(self._processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        shutil.rmtree(self._work, ignore_errors=True)

    @property
    def fs(self):
        os.environ.update(ENV)
        import gcsfs

        return gcsfs.GCSFileSystem(
            token="anon", endpoint_url=self.env["STORAGE_EMULATOR_HOST"], skip_instance_cache=True
        )

    @property
    def beam_args(self) -> list[str]:
        """What a Dataflow submission gives, pointed at the rehearsal's job service and pool."""
        return (
            f"--runner PortableRunner --job_endpoint localhost:{self.job_port} --environment_type EXTERNAL "
            f"--environment_config localhost:{self.pool_port} --sdk_worker_parallelism {self.workers} "
            f"--direct_num_workers {self.workers} "
            f"--setup_file {ROOT / 'setup.py'} --temp_location gs://{BUCKET}/tmp"
        ).split()

    def upload(self, files: list[Path], prefix: str) -> str:
        """``files`` copied to ``gs://rehearsal/PREFIX/`` (as ``gcloud storage cp`` would)."""
        for path in files:
            self.fs.put_file(str(path), f"{BUCKET}/{prefix}/{path.name}")
        return f"gs://{BUCKET}/{prefix}"

    def run(self, stage: str, args: list[str], runner: str = "rehearsal", timeout_s: float = 900) -> Result:
        """``pipelines``/``wordpiece`` ARGS as a user runs them, on the rehearsal or on FnApiRunner."""
        tool = "wordpiece" if args[0] in ("train", "encode") else "pipelines"
        extra = self.beam_args if runner == "rehearsal" else ["--runner", "FnApiRunner"]
        start = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", tool, args[0], *extra, *args[1:]],  # later flags win
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        return Result(stage, runner, done.returncode, time.monotonic() - start, done.stdout + done.stderr)

    def files(self, url: str) -> dict[str, bytes]:
        """Every file under a bucket folder by relative path, ownership records left out and the
        measurements of the submitting process (``wordpiece train``'s ``learn_s``, ``peak_rss_mb``)
        taken out of ``stats.json``."""
        root = url.removeprefix("gs://").rstrip("/")
        fs = self.fs
        found = {
            path[len(root) + 1 :]: fs.cat_file(path)
            for path in fs.find(root)
            if not path.rsplit("/", 1)[-1].startswith(".")  # the output's ownership records
        }
        if "stats.json" in found:
            stats = json.loads(found["stats.json"])
            found["stats.json"] = json.dumps({k: v for k, v in stats.items() if k not in MEASURED}).encode()
        return found


def stage_args(stage: str, inputs: dict[str, str], output: str) -> list[str]:
    """The command line of each stage over small real inputs."""
    vocab = str(DATA / "vocab" / "bert-base-uncased_vocab.txt")
    commands = {
        "books": f"books --input {inputs['books']}/*.txt --num-shards 2",
        "wikipedia": f"wikipedia --input {inputs['wiki']}/*.bz2 --num-shards 2",
        "documents": f"documents --input {inputs['hub']}/* --id-field id --title-field title --num-shards 2 "
        "--bytes-per-read 65536",
        "corpus": f"corpus --input {inputs.get('wikipedia')} --input {inputs.get('books')} --input "
        f"{inputs.get('documents')} --num-shards 2 --validation-fraction 0.1 --test-fraction 0.1",
        "wordpiece": f"train --corpus {inputs.get('corpus')} --vocab-size 3000 --num-unused 10 --num-count-shards 2",
        "examples": f"examples --corpus {inputs.get('corpus')} --vocab {vocab} --max-seq-length 64 --dupe-factor 2 "
        "--num-shards 3 --num-buckets 8 --spill always",
    }
    return [*commands[stage].split(), "--output", output]


def upload_inputs(rehearsal: Rehearsal) -> dict[str, str]:
    """Three of the shared Gutenberg books and the enwiki excerpt, in the bucket; and for `pipelines
    documents` the excerpt's articles as wikimedia/wikipedia Parquet, Dolma's gzipped JSON Lines and
    the same uncompressed (read by byte range), as tests/layouts.py builds them."""
    import gzip

    from tests.layouts import build_layouts

    books = sorted((DATA / "books" / "gutenberg").glob("*.txt"))[:3]
    wiki = DATA / "wiki" / "gensim_enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    layouts = build_layouts(
        rehearsal._work / "layouts", wiki, sorted((DATA / "books" / "gutenberg").glob("*.txt"))
    )
    hub = [*layouts["wikipedia"].files, *layouts["dolma"].files]
    plain = rehearsal._work / "layouts" / "plain.jsonl"
    plain.write_bytes(gzip.decompress(layouts["dolma"].files[0].read_bytes()))
    return {
        "books": rehearsal.upload(books, "inputs/books"),
        "wiki": rehearsal.upload([wiki], "inputs/wiki"),
        "hub": rehearsal.upload([*hub, plain], "inputs/hub"),
    }


def rehearse(rehearsal: Rehearsal, stages: list[str], compare: bool) -> list[tuple[Result, bool | None]]:
    """Run ``stages`` in chain order (each reads the previous stage's rehearsal output; with
    ``compare`` the FnApiRunner run reads the same inputs and writes beside it)."""
    inputs = upload_inputs(rehearsal)
    report = []
    for stage in stages:
        output = f"gs://{BUCKET}/rehearsal/{stage}"
        result = rehearsal.run(stage, stage_args(stage, inputs, output))
        same = None
        if compare and result.exit_code == 0:
            reference = f"gs://{BUCKET}/fnapi/{stage}"
            expected = rehearsal.run(stage, stage_args(stage, inputs, reference), runner="FnApiRunner")
            same = expected.exit_code == 0 and rehearsal.files(output) == rehearsal.files(reference)
        report.append((result, same))
        inputs[stage] = output
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", default="all", choices=("all", *STAGES))
    parser.add_argument(
        "--compare", action="store_true", help="Also run on FnApiRunner and compare the bytes."
    )
    parser.add_argument("--workers", type=int, default=1, help="SDK worker processes per job.")
    args = parser.parse_args()
    wanted = STAGES if args.stage == "all" else STAGES[: STAGES.index(args.stage) + 1]
    start = time.monotonic()
    with Rehearsal(args.workers) as rehearsal:
        print(
            f"rehearsal: job service, isolated worker pool and GCS emulator up in {time.monotonic() - start:.1f} s"
        )
        failed = False
        for result, same in rehearse(rehearsal, list(wanted), args.compare):
            verdict = "ok" if result.exit_code == 0 else f"exit {result.exit_code}"
            compared = (
                ""
                if same is None
                else ("; byte-identical to FnApiRunner" if same else "; DIFFERS from FnApiRunner")
            )
            print(f"{result.stage:10s} {verdict:7s} {result.seconds:6.1f} s{compared}: {result.line()}")
            failed |= result.exit_code != 0 or same is False
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
