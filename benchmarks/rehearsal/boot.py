"""The SDK container's boot contract, as Dataflow's Python container runs it on a worker VM
(https://s.apache.org/beam-fn-api-container-contract), for the rehearsal's isolated worker pool.

``worker_pool_main --container_executable boot.py`` starts this once per SDK worker with the
job's endpoints. Like the container's boot program it asks the provision service for the
pipeline options and the staged files, fetches them from the artifact service (never from the
submitter's disk: this process cannot see it), installs the staged ``workflow.tar.gz`` (the
sdist built from ``--setup_file``) with pip, once per worker pool, and then runs the SDK harness.
The dependencies come from the pool's environment, which holds exactly the versions of
``constraints.txt``; pip runs without an index, so a requirement the sdist names and the
environment lacks fails the install, as a worker without network would.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import grpc
from apache_beam.portability import common_urns
from apache_beam.portability.api import (
    beam_artifact_api_pb2,
    beam_artifact_api_pb2_grpc,
    beam_provision_api_pb2,
    beam_provision_api_pb2_grpc,
    beam_runner_api_pb2,
    endpoints_pb2,
)
from google.protobuf import json_format, text_format


def staged_name(artifact) -> str:
    if artifact.role_urn != common_urns.artifact_roles.STAGING_TO.urn:
        raise SystemExit(f"boot: an artifact without a staged name ({artifact.role_urn})")
    return beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(artifact.role_payload).staged_name


def fetch(endpoint: str, dependencies, folder: Path, metadata) -> list[Path]:
    """Every staged file, through the artifact service, into ``folder``."""
    stub = beam_artifact_api_pb2_grpc.ArtifactRetrievalServiceStub(grpc.insecure_channel(endpoint))
    resolved = stub.ResolveArtifacts(
        beam_artifact_api_pb2.ResolveArtifactsRequest(artifacts=dependencies), metadata=metadata
    ).replacements
    files = []
    for artifact in resolved:
        path = folder / staged_name(artifact)
        with open(path, "wb") as out:
            for chunk in stub.GetArtifact(
                beam_artifact_api_pb2.GetArtifactRequest(artifact=artifact), metadata=metadata
            ):
                out.write(chunk.data)
        files.append(path)
    return files


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("id", "logging_endpoint", "artifact_endpoint", "provision_endpoint", "control_endpoint"):
        parser.add_argument(f"--{flag}", required=True)
    args = parser.parse_args()
    metadata = (("worker_id", args.id),)
    provision = beam_provision_api_pb2_grpc.ProvisionServiceStub(
        grpc.insecure_channel(args.provision_endpoint)
    )
    info = provision.GetProvisionInfo(
        beam_provision_api_pb2.GetProvisionInfoRequest(), metadata=metadata
    ).info
    home = Path(os.environ["REHEARSAL_WORKER_HOME"])
    with open(home / "install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time; the other workers wait for it
        staged = home / "staged" / args.id
        staged.mkdir(parents=True, exist_ok=True)
        names = {p.name: p for p in fetch(args.artifact_endpoint, info.dependencies, staged, metadata)}
        if "workflow.tar.gz" not in names:
            raise SystemExit(
                f"boot: no workflow.tar.gz staged (got {sorted(names)}): was --setup_file given?"
            )
        sdist = names["workflow.tar.gz"]
        digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
        installed = home / "installed"
        if not installed.exists() or installed.read_text() != digest:
            # The first install resolves the sdist's requirements against the pinned environment
            # (no index: a missing one fails); a later job's changed sdist replaces the project only.
            again = ["--force-reinstall", "--no-deps"] if installed.exists() else []
            pip = [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-index",
                "--no-build-isolation",
                "--no-cache-dir",
            ]
            subprocess.run([*pip, *again, "--disable-pip-version-check", "-q", str(sdist)], check=True)
            installed.write_text(digest)
    descriptor = lambda url: text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))  # noqa: E731
    os.environ.update(
        WORKER_ID=args.id,
        PIPELINE_OPTIONS=json_format.MessageToJson(info.pipeline_options),
        SEMI_PERSISTENT_DIRECTORY=str(home / "semi"),
        LOGGING_API_SERVICE_DESCRIPTOR=descriptor(args.logging_endpoint),
        CONTROL_API_SERVICE_DESCRIPTOR=descriptor(args.control_endpoint),
        RUNNER_CAPABILITIES=" ".join(info.runner_capabilities),
        ARROW_DEFAULT_MEMORY_POOL=os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "system"),  # the Dockerfile's
    )
    if info.HasField("status_endpoint"):
        os.environ["STATUS_API_SERVICE_DESCRIPTOR"] = text_format.MessageToString(info.status_endpoint)
    os.execv(sys.executable, [sys.executable, "-m", "apache_beam.runners.worker.sdk_worker_main"])


if __name__ == "__main__":
    main()
