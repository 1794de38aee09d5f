"""One writer per output: the claim file ``OUTPUT/.claim``.

A command claims its output folder before it writes anything there: it creates ``.claim``
exclusively (``O_EXCL`` on a local disk; a conditional create on a bucket, fsspec's
``pipe_file(mode="create")``: ``ifGenerationMatch=0`` on gs://, ``If-None-Match: *`` on s3://)
holding JSON that names the claimant (:class:`Claimant`: the command, its run id, host, pid, the
process's start and when it claimed). A second writer finds the file and stops with one line
naming the first; the claim is removed when the command ends, on success and on failure.

A claim whose process is gone (same host, and the pid no longer runs or now belongs to a process
started later) is stale: the next writer takes it over and says so. A claim made on another host
cannot be checked from here; the error says how to remove it. A server that ignores the
precondition (the GCS emulator does) is covered by looking for the file before creating it and
reading it back after: two writers then both pass only if both looked before either created.

The functions take the caller's fsspec filesystem, so this module imports nothing but the
standard library (``schemas/`` imports neither Beam nor torch).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

CLAIM_FILE = ".claim"
_ATTEMPTS = 3

log = logging.getLogger(__name__)


class ClaimError(ValueError):
    """Another writer holds the output (or held it and cannot be checked); the message names it."""


def new_run_id() -> str:
    """A fresh run id: 16 hex digits, random."""
    return uuid.uuid4().hex[:16]


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (Linux ``/proc``), or None where
    that cannot be read: with the pid it identifies a process even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return None if fields[0] == b"Z" else int(fields[19])  # a zombie has finished
    except (OSError, IndexError, ValueError):
        return None


def process_running(pid: int, started: int | None) -> bool:
    """Whether ``pid`` runs on this host and, when ``started`` is known, is the same process."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    except OSError:
        return False
    if not os.path.isdir("/proc/self"):
        return True  # no /proc here (macOS): the pid is all that can be checked
    now = process_start(pid)  # None: a zombie, or gone since
    return now is not None and (started is None or now == started)


@dataclass(frozen=True)
class Claimant:
    """Who holds an output: what :data:`CLAIM_FILE` records."""

    command: str
    run_id: str
    host: str
    pid: int
    process_start: int | None
    claimed: str
    """When, as an ISO 8601 UTC time."""

    @classmethod
    def this_process(cls, command: str, run_id: str) -> Claimant:
        """The claimant for this process."""
        pid = os.getpid()
        now = datetime.now(UTC).isoformat(timespec="seconds")
        return cls(command, run_id, socket.gethostname(), pid, process_start(pid), now)

    def to_json(self) -> bytes:
        """The claim file's content."""
        return (json.dumps(asdict(self), indent=1) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> Claimant:
        """Parse a claim file; ``ValueError`` naming what is wrong with it."""
        record = json.loads(data.decode("utf-8"))
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        fields = {"command": str, "run_id": str, "host": str, "pid": int, "claimed": str}
        for name, kind in fields.items():
            if not isinstance(record.get(name), kind) or isinstance(record.get(name), bool):
                raise ValueError(f"{name} missing or not a {kind.__name__}")
        start = record.get("process_start")
        if start is not None and not isinstance(start, int):
            raise ValueError("process_start not an integer")
        return cls(**{name: record[name] for name in fields}, process_start=start)

    def describe(self) -> str:
        """``pretrain`` (run R, pid P on host H, since T): one phrase for messages."""
        return (
            f"`{self.command}` (run {self.run_id}, pid {self.pid} on host {self.host}, since {self.claimed})"
        )

    def is_stale(self) -> bool | None:
        """True when its process is gone, False when it runs, None when it cannot be checked from
        here (claimed on another host)."""
        if self.host != socket.gethostname():
            return None
        return not process_running(self.pid, self.process_start)


@dataclass(frozen=True)
class Claim:
    """A claim this process holds: where, and the exact bytes it wrote."""

    fs: Any
    path: str
    url: str
    content: bytes
    claimant: Claimant


def remove_hint(url: str) -> str:
    """The shell command that removes a file at ``url``."""
    if url.startswith(("gs://", "gcs://")):
        return f"gcloud storage rm {url}"
    if url.startswith("s3://"):
        return f"aws s3 rm {url}"
    return f"rm {url}"


def _read(fs: Any, path: str) -> bytes | None:
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        return None


def claim(fs: Any, root: str, url: str, claimant: Claimant, *, option: str = "--output") -> Claim:
    """Claim the folder ``root`` of ``fs`` (``url`` as the user gave it) for ``claimant``.

    Raises :class:`ClaimError` naming the holder when another writer has it (with how to remove
    a claim that cannot be checked), ``OSError`` when the folder cannot be written; takes over a
    stale claim with a warning. The folder is created if needed. Messages start with ``option
    url`` (``url`` alone when ``option`` is empty: a positional argument)."""
    path, claim_url = f"{root}/{CLAIM_FILE}", f"{url.rstrip('/')}/{CLAIM_FILE}"
    where = f"{option} {url}" if option else url
    content = claimant.to_json()
    fs.makedirs(root, exist_ok=True)
    for _ in range(_ATTEMPTS):
        existing = _read(fs, path)
        if existing is not None:
            holder = _holder(existing, claim_url)
            stale = holder.is_stale()
            if stale is None:
                raise ClaimError(
                    f"{where}: claimed by {holder.describe()}, which cannot be checked from this "
                    f"host; if it no longer runs, remove the claim ({remove_hint(claim_url)}) and start again"
                )
            if not stale:
                raise ClaimError(
                    f"{where}: being written by {holder.describe()}; wait for it to end, or "
                    "choose another folder"
                )
            _take_over(fs, path, existing, where, holder)
            continue
        try:
            fs.pipe_file(path, content, mode="create")
        except FileExistsError:
            continue  # another writer was first: named on the next pass
        if _read(fs, path) == content:
            return Claim(fs, path, url, content, claimant)
    raise ClaimError(f"{where}: other writers keep claiming it; choose another folder")


def _holder(existing: bytes, claim_url: str) -> Claimant:
    try:
        return Claimant.from_json(existing)
    except (ValueError, UnicodeDecodeError) as err:
        raise ClaimError(
            f"{claim_url}: not a claim this release can read ({err}); if no other command writes "
            f"there, remove it ({remove_hint(claim_url)}) and start again"
        ) from None


def _take_over(fs: Any, path: str, stale: bytes, where: str, holder: Claimant) -> None:
    """Move a stale claim aside (one mover wins) and delete it; put back a claim that another
    writer made meanwhile and that was moved by mistake."""
    aside = f"{path}.stale-{uuid.uuid4().hex[:8]}"
    try:
        fs.mv(path, aside)
    except FileNotFoundError:
        return  # another writer took it over first
    moved = _read(fs, aside)
    if moved is not None and moved != stale:
        try:
            fs.pipe_file(path, moved, mode="create")
        except FileExistsError:
            pass
    fs.rm(aside)
    if moved == stale:
        log.warning("%s: took over the claim of %s, which no longer runs", where, holder.describe())


def release(held: Claim) -> None:
    """Remove the claim if it is still this process's (never another writer's)."""
    if _read(held.fs, held.path) == held.content:
        held.fs.rm(held.path)
