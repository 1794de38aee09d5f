"""The buckets a command names, probed before it starts work: each once, bounded in time.

Per bucket of a ``gs://`` or ``s3://`` path: credentials are there, the endpoint answers, the
bucket exists, each input can be looked up and each output written (an empty object put and
deleted), all in a daemon thread against one deadline (:data:`LIMIT_S`), so a hang is one line too.
An input missing from a bucket that exists is left to the command. Local paths are not probed.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from schemas import storage
from schemas.commands import CommandError, InputError, OutputError

LIMIT_S = 20.0
"""The most a probe of every bucket of a command takes."""
_GLOB = re.compile(r"[*?\[]")
_GRANT = "gcloud storage buckets add-iam-policy-binding gs://{b} --member=... --role=roles/storage.object"
_REMEDIES = {
    "gs": {
        "credentials": "no Google Cloud credentials found: run `gcloud auth application-default login`, "
        "or set GOOGLE_APPLICATION_CREDENTIALS to a service account's key file",
        "read": f"access denied: grant the account read access ({_GRANT}Viewer)",
        "write": f"no write access: grant the account write access ({_GRANT}Admin)",
        "missing": "no such bucket: create it (gcloud storage buckets create gs://{b} --location=REGION)",
        "endpoint": "the endpoint (STORAGE_EMULATOR_HOST for an emulator)",
    },
    "s3": {
        "credentials": "no AWS credentials found: run `aws configure`, or set AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL for a server other than AWS)",
        "read": "access denied: the IAM policy must allow s3:ListBucket and s3:GetObject on {b}",
        "write": "no write access: the IAM policy must allow s3:PutObject and s3:DeleteObject on {b}",
        "missing": "no such bucket: create it (aws s3 mb s3://{b})",
        "endpoint": "the endpoint (AWS_ENDPOINT_URL or --s3_endpoint_url for a server other than AWS)",
    },
}
_CREDENTIAL_ERRORS = {
    "NoCredentialsError",
    "PartialCredentialsError",
    "RefreshError",
    "DefaultCredentialsError",
}


def probe(
    reads: Mapping[str, str | Iterable[str]] | None = None,
    writes: Mapping[str, str | Iterable[str]] | None = None,
    limit_s: float | None = None,
) -> None:
    """Probe the buckets of ``reads`` and ``writes`` (flag → path or paths; globs allowed in
    reads) within ``limit_s`` (:data:`LIMIT_S`), with the options of ``schemas.storage``. Raises :class:`InputError` (an input's bucket), :class:`OutputError` (an
    output's) or :class:`CommandError` (no network, no credentials, no answer in time)."""
    uses = [
        (flag, path, role)
        for role, named in (("read", reads or {}), ("write", writes or {}))
        for flag, paths in named.items()
        for path in ([paths] if isinstance(paths, str) else paths or ())
        if path and _split(path)
    ]
    if not uses:
        return
    limit_s = LIMIT_S if limit_s is None else limit_s
    state: dict[str, Any] = {"use": uses[0]}

    def work() -> None:
        try:
            _probe(uses, state)
        except BaseException as err:  # handed to the caller's thread
            state["error"] = err

    thread = threading.Thread(target=work, name="bucket-probe", daemon=True)
    thread.start()
    thread.join(limit_s)
    if thread.is_alive():
        flag, path, _ = state["use"]
        cloud, bucket, _ = _split(path)
        raise CommandError(
            f"{flag} {path}: no answer from {cloud}://{bucket} within {limit_s:.0f} s; check the network "
            f"(a proxy, a firewall) and {_REMEDIES[cloud]['endpoint']}"
        )
    if "error" in state:
        raise state["error"]


def _split(path: str) -> tuple[str, str, str] | None:
    """(cloud, bucket, path without the protocol) of a bucket URL; None for anything else."""
    cloud, rest = storage.cloud_of(path), path.partition("://")[2]
    return (cloud, rest.split("/", 1)[0], rest.rstrip("/")) if cloud else None


def _probe(uses: list[tuple[str, str, str]], state: dict) -> None:
    filesystems: dict[tuple[str, str], Any] = {}
    for use in uses:
        state["use"] = flag, path, role = use
        cloud, bucket, key = _split(path)
        try:
            if (cloud, bucket) not in filesystems:
                if (fs := storage.bounded_filesystem(cloud)) is None:
                    raise CommandError(_REMEDIES[cloud]["credentials"])
                _reach(cloud)
                filesystems[cloud, bucket] = fs
            fs = filesystems[cloud, bucket]
            if role == "write":
                probe_object = f"{key}/.probe-{uuid.uuid4().hex}"
                fs.pipe_file(probe_object, b"")
                fs.rm_file(probe_object)
                continue
            literal = _GLOB.split(key, 1)[0]
            try:
                fs.info(literal if literal == key else literal.rsplit("/", 1)[0])
            except FileNotFoundError:
                fs.info(bucket)  # not found again: no such bucket; else the command says what is missing
        except CommandError as err:
            raise type(err)(f"{flag} {path}: {err}") from None
        except Exception as err:  # any client library's error: one line, classified
            raise _explain(err, flag, path, role) from None


def _reach(cloud: str) -> None:
    """Open one connection to the cloud's endpoint (not through a proxy: then the client says)."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")):
        return
    host, port = storage.endpoint_address(cloud)
    try:
        socket.create_connection((host, port), timeout=storage.CONNECT_S).close()
    except socket.gaierror:
        raise CommandError(
            f"cannot resolve {host}: no network or no DNS; {_REMEDIES[cloud]['endpoint']}"
        ) from None
    except TimeoutError:
        raise CommandError(
            f"no answer from {host}:{port} within {storage.CONNECT_S:.0f} s; check the network"
        ) from None
    except OSError as err:
        reason = f"{err.strerror or type(err).__name__}"
        raise CommandError(
            f"cannot connect to {host}:{port} ({reason}); {_REMEDIES[cloud]['endpoint']}"
        ) from None


def _explain(err: Exception, flag: str, path: str, role: str) -> CommandError:
    """One line for a client library's error: which bucket, what is wrong, what to do."""
    cloud, bucket, _ = _split(path)
    text = str(err).strip()
    if isinstance(err, FileNotFoundError) or "NoSuchBucket" in text:
        kind = "missing"
    elif (
        isinstance(err, PermissionError)
        or getattr(err, "code", None) in (401, 403)
        or text.startswith("Forbidden")
    ):
        kind = role
    elif {c.__name__ for c in type(err).__mro__} & _CREDENTIAL_ERRORS:
        return CommandError(f"{flag} {path}: {_REMEDIES[cloud]['credentials']}")
    else:
        first = text.splitlines()[0] if text else "no message"
        return CommandError(f"{flag} {path}: cannot use {cloud}://{bucket} ({type(err).__name__}: {first})")
    line = f"{flag} {path}: {_REMEDIES[cloud][kind].format(b=bucket)}"
    return (InputError if role == "read" else OutputError)(line)
