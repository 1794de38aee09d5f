"""An output folder as one command owns it: claimed, journaled, cleared, released.

One writer: ``OUTPUT/.claim`` is created exclusively (``O_EXCL`` locally, ``ifGenerationMatch=0``
on gs://, ``If-None-Match: *`` on s3://; read back for servers that ignore it); a second writer
gets one line naming the first, a claim whose process is gone is taken over with a warning.
A journal: ``schemas.files`` calls :func:`journal` before every write, which lists the file in
``OUTPUT/.output.json`` (rewritten whole), so a killed run's record names every file it made;
files other processes write (Beam's workers, other ranks) are journaled beforehand by the
process holding the output. ``--overwrite`` deletes exactly the journaled files that exist (and
their temporary files ``.NAME.<hex>.tmp``); any other file is the user's: never deleted, it
refuses ``--overwrite`` in one line naming it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import posixpath
import socket
import threading
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from schemas import files
from schemas.commands import OutputError
from schemas.files import final_name, is_temporary_name, write_file
from schemas.manifest import COMPLETED_FILE
from schemas.paths import location

CLAIM_FILE, RECORD_FILE = ".claim", ".output.json"
RECORD_FORMAT, RECORD_VERSION = "output-record", 1
MARKERS = ("COMMITTED", COMPLETED_FILE, "metrics.json")
"""Files that say an output (or a checkpoint) is complete: deleted before the others."""

log = logging.getLogger(__name__)
_lock = threading.RLock()
_held: list[OutputFolder] = []  # the outputs this process holds, which journal() records into


def new_run_id() -> str:
    """A fresh run id: 16 random hex digits."""
    return uuid.uuid4().hex[:16]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (ticks since boot, from ``/proc``; None where unknown)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return None if fields[0] == b"Z" else int(fields[19])  # a zombie has finished
    except (OSError, IndexError, ValueError):
        return None


def _running(pid: int, started: object) -> bool:
    """Whether ``pid`` (started at ``started``, when known: pids are reused) runs on this host."""
    if not os.path.isdir("/proc/self"):
        return True  # no /proc (macOS): a claim is never taken over, the user removes it
    return (now := process_start(pid)) is not None and started in (None, now)


def remove_hint(url: str) -> str:
    """The shell command that removes the file at ``url``."""
    if url.startswith(("gs://", "gcs://")):
        return f"gcloud storage rm {url}"
    return f"aws s3 rm {url}" if url.startswith("s3://") else f"rm {url}"


def _cat(fs: Any, path: str) -> bytes | None:
    try:
        return fs.cat_file(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _claim(fs: Any, root: str, url: str, command: str, run_id: str, where: str) -> bytes:
    """Create the claim file of ``root`` (made if needed); its exact bytes."""
    path, claim_url = f"{root}/{CLAIM_FILE}", f"{url.rstrip('/')}/{CLAIM_FILE}"
    me = {"command": command, "run_id": run_id, "host": socket.gethostname(), "pid": os.getpid()}
    me.update(process_start=process_start(os.getpid()), claimed=_now())
    content = (json.dumps(me, indent=1) + "\n").encode("utf-8")
    fs.makedirs(root, exist_ok=True)
    for _ in range(3):
        if (existing := _cat(fs, path)) is not None:
            try:
                c = json.loads(existing)
                named = f"`{c['command']}` (run {c['run_id']}, pid {int(c['pid'])} on host {c['host']}, since {c['claimed']})"
            except (ValueError, RecursionError, KeyError, TypeError):
                raise OutputError(
                    f"{claim_url}: not a claim this release can read; if no other command writes there, "
                    f"remove it ({remove_hint(claim_url)}) and start again"
                ) from None
            if c["host"] != me["host"]:
                raise OutputError(
                    f"{where}: claimed by {named}, which cannot be checked from this host; if it no longer "
                    f"runs, remove the claim ({remove_hint(claim_url)}) and start again"
                )
            if _running(int(c["pid"]), c.get("process_start")):
                raise OutputError(
                    f"{where}: being written by {named}; wait for it to end, or choose another folder"
                )
            if _take_over(fs, path, existing):
                log.warning("%s: took over the claim of %s, which no longer runs", where, named)
            continue
        try:
            if isinstance(fs, LocalFileSystem):
                with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as f:
                    f.write(content)
            else:
                fs.pipe_file(path, content, mode="create")
        except FileExistsError:
            continue  # another writer was first: named on the next pass
        if _cat(fs, path) == content:
            return content
    raise OutputError(f"{where}: other writers keep claiming it; choose another folder")


def _take_over(fs: Any, path: str, stale: bytes) -> bool:
    """Move a stale claim aside (one mover wins) and delete it; put back another writer's that was
    moved by mistake. Whether this process took the stale one over."""
    aside = f"{path}.stale-{uuid.uuid4().hex[:8]}"
    with contextlib.suppress(FileNotFoundError, FileExistsError):
        fs.mv(path, aside)
        if (moved := _cat(fs, aside)) != stale and moved is not None:
            fs.pipe_file(path, moved, mode="create")
        fs.rm(aside)
        return moved == stale
    return False


@dataclass
class OutputRecord:
    """What ``.output.json`` holds: the command, its run and the files it journaled, in order."""

    command: str
    run_id: str
    files: dict[str, None]  # the journal in order (from any iterable); a dict for lookups
    started: str
    ended: str | None = None  # None while it runs, or when it was killed

    def __post_init__(self) -> None:
        self.files = dict.fromkeys(self.files)

    def to_json(self) -> bytes:
        data = {"format": RECORD_FORMAT, "version": RECORD_VERSION, **asdict(self), "files": list(self.files)}
        return (json.dumps(data, indent=1) + "\n").encode("utf-8")

    def owns(self, relative: str) -> bool:
        """Whether the file ``relative`` is journaled, lies in a journaled folder, or is the
        temporary file of a journaled name."""
        folder, _, name = relative.rpartition("/")
        if is_temporary_name(name):
            relative = posixpath.join(folder, final_name(name))
        parts = relative.split("/")
        return relative in self.files or any(
            "/".join(parts[:i]) + "/" in self.files for i in range(1, len(parts))
        )


def read_record(fs: Any, root: str, url: str) -> OutputRecord | None:
    """The record of the folder ``root`` (``url`` in messages), None when it has none;
    :class:`~schemas.commands.OutputError` when it is not one this release reads."""
    if (data := _cat(fs, f"{root.rstrip('/')}/{RECORD_FILE}")) is None:
        return None
    with contextlib.suppress(ValueError, RecursionError, KeyError, TypeError):
        r = json.loads(data)
        files = r["files"] or []  # null: a killed run whose files are unknown (none is taken for its own)
        if (r["format"], r["version"]) == (RECORD_FORMAT, RECORD_VERSION) and isinstance(files, list):
            record = OutputRecord(r["command"], r["run_id"], files, r["started"], r["ended"])
            fields = (record.command, record.run_id, record.started, record.ended or "")
            inside = (
                posixpath.normpath(f) == f.rstrip("/") and not f.startswith(("/", "..")) for f in record.files
            )
            if all(isinstance(v, str) for v in (*fields, *record.files)) and all(inside):
                return record
    raise OutputError(
        f"{url.rstrip('/')}/{RECORD_FILE}: not an {RECORD_FORMAT} version {RECORD_VERSION}; if the folder holds "
        "nothing of value, delete it, else choose another folder"
    )


def _machinery(relative: str) -> bool:
    """The claim (a stale one moved aside too) and the record (and its temporary file)."""
    name = final_name(relative) if is_temporary_name(relative) else relative
    return relative.startswith(CLAIM_FILE) or name == RECORD_FILE


def _names(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (", ..." if len(paths) > 3 else "")


def _remove_empty(fs: Any, folders: list[str]) -> None:
    for folder in folders:  # deepest first
        with contextlib.suppress(OSError):
            if fs.isdir(folder) and not fs.ls(folder):
                fs.rmdir(folder)


def journal(*urls: str) -> None:
    """Record the files ``urls`` (local paths or URLs; a trailing ``/``: a folder of the run's
    temporary files), before they are written, in the output this process holds each in (the
    innermost); others are left alone. Raises :class:`~schemas.files.WriteError` when the record
    cannot be written: then neither may the file."""
    if not _held:
        return
    with _lock:
        changed = []
        for url in urls:
            path = url.rstrip("/").removeprefix("file://")
            if "://" not in path:  # a local file's own name is not resolved: a link there is replaced
                path = os.path.join(location(os.path.dirname(path)), os.path.basename(path))
            here = location(path) + ("/" if url.endswith("/") else "")
            folder = max(
                (f for f in _held if here.startswith(f.where + "/")), key=lambda f: len(f.where), default=None
            )
            if folder is not None and folder.add(here[len(folder.where) + 1 :]) and folder not in changed:
                changed.append(folder)
        for folder in changed:
            folder.save()


files.BEFORE_WRITE.append(journal)


class OutputFolder:
    """One command's claimed output folder (see the module's docstring); a context manager."""

    def __init__(self, url: str, fs: Any, root: str, command: str, shown: str) -> None:
        self.url, self.fs, self.root, self.command, self.shown = url, fs, root, command, shown
        self.where, self.made, up = location(fs.unstrip_protocol(root)), [], root
        while up not in ("", "/") and not fs.exists(up):  # the folders the claim makes, deepest first
            self.made.append(up)
            up = up.rsplit("/", 1)[0]
        self.record = OutputRecord(command, "", {}, _now())
        self.claim, self.stale, self.begun = b"", [], False

    @property
    def run_id(self) -> str:
        """The run's id: in the claim, the record and (``pretrain``) every checkpoint."""
        return self.record.run_id

    @classmethod
    def open(
        cls,
        url: str,
        command: str,
        *,
        fs: Any = None,
        overwrite: bool = False,
        continuing: bool = False,
        continue_hint: str | None = None,
        option: str = "--output",
        run_id: str | None = None,
    ) -> OutputFolder:
        """Claim ``url`` for ``command`` (``fs``: its fsspec filesystem, else the URL's).

        Refuses (:class:`~schemas.commands.OutputError`; nothing changed) a folder holding files
        unless ``overwrite`` and all are the earlier run's of ``command``, or ``continuing``: the
        run adds to the folder (``pretrain --resume RUN``, a cache), keeping its record's run id
        and journal (without one: ``run_id``, else a new id). ``continue_hint`` (``--resume
        RUN``) is named in the refusal."""
        fs, root = fsspec.core.url_to_fs(url) if fs is None else (fs, fs._strip_protocol(url))
        root, shown = root.rstrip("/") or "/", f"{option} {url}" if option else url
        folder = cls(url, fs, root, command, shown)
        try:
            if fs.isfile(root):
                raise OutputError(f"{shown}: is a file, not a folder; choose a folder")
            earlier = read_record(fs, root, url)
            if continuing and earlier is not None and earlier.command == command:
                folder.record.run_id, folder.record.files = earlier.run_id, dict(earlier.files)
            folder.record.run_id = folder.record.run_id or run_id or new_run_id()
            folder.claim = _claim(fs, root, url, command, folder.run_id, shown)
        except OSError as err:
            _remove_empty(fs, folder.made)
            raise OutputError(f"{shown}: cannot write there ({type(err).__name__}: {err})") from None
        try:
            folder.stale = folder._earlier_files(earlier, overwrite, continue_hint, continuing)
        except BaseException as err:
            folder.close()
            if isinstance(err, OSError):
                raise OutputError(f"{shown}: cannot read it ({type(err).__name__}: {err})") from None
            raise
        with _lock:
            _held.append(folder)
        return folder

    def _earlier_files(
        self, earlier: OutputRecord | None, overwrite: bool, hint: str | None, adding: bool
    ) -> list[str]:
        """The files :meth:`begin` deletes; :class:`OutputError` when the folder may not be written."""
        found = sorted(self.fs.find(self.root)) if self.fs.isdir(self.root) else []
        present = [p for p in (f[len(self.root) :].lstrip("/") for f in found) if not _machinery(p)]
        where, command, what = self.shown, self.command, f"{len(present)} file(s): {_names(present)}"
        if present and earlier is not None and earlier.command != command:
            raise OutputError(
                f"{where}: holds the output of `{earlier.command}` ({what}), which `{command}` never replaces, "
                "even with --overwrite; choose another folder"
            )
        ours = [p for p in present if earlier is not None and earlier.owns(p)]
        others = [p for p in present if p not in ours]
        to_continue = f"continue it with {hint}, or " if hint else ""
        if others and not adding:
            besides = f", besides the {len(ours)} of its earlier run" if ours else ""
            raise OutputError(
                f"{where}: holds {len(others)} file(s) that no `{command}` run recorded writing "
                f"({_names(others)}){besides}; they are never deleted, even with --overwrite: {to_continue}"
                "choose an empty folder, or move them away"
            )
        if ours and not (overwrite or adding):
            state = "a completed" if COMPLETED_FILE in ours else "an earlier"
            raise OutputError(
                f"{where}: holds the {len(ours)} file(s) of {state if earlier.ended else 'an interrupted'} "
                f"`{command}` run ({_names(ours)}; run {earlier.run_id}); {to_continue}pass --overwrite to "
                "replace them (only them), or choose an empty folder"
            )
        return [] if adding else ours

    def add(self, relative: str) -> bool:
        """Journal ``relative`` in memory; whether it is new."""
        if _machinery(relative) or self.record.owns(relative):
            return False
        self.record.files[relative] = None
        return True

    def save(self) -> None:
        """Write the record whole, once :meth:`begin` ran (until then the earlier run's stays)."""
        if self.begun:
            write_file(f"{self.root}/{RECORD_FILE}", self.record.to_json(), self.fs)

    def begin(self) -> int:
        """Just before the first write: delete the earlier run's files (markers first, then the
        folders they leave empty) and write this run's record; return how many were deleted.
        Calling it again does nothing."""
        if self.begun:
            return 0
        paths = sorted(self.stale, key=lambda p: p.rsplit("/", 1)[-1] not in MARKERS)
        folders = {p.rsplit("/", i)[0] for p in paths for i in range(1, p.count("/") + 1)}
        try:
            for path in paths:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm(f"{self.root}/{path}")
            _remove_empty(self.fs, [f"{self.root}/{f}" for f in sorted(folders, key=len, reverse=True)])
            with _lock:
                self.begun = True
                self.save()
        except OSError as err:
            raise OutputError(
                f"{self.shown}: cannot replace the earlier run's files or record this run "
                f"({type(err).__name__}: {err})"
            ) from None
        return len(paths)

    def close(self) -> None:
        """Cut the journal to the files left (no record when none is) and release the claim; a
        folder the claim made goes when the run left nothing. Filesystem errors are logged, never
        raised: the run's own outcome matters more."""
        left = False
        try:
            if self.begun:
                present = [f[len(self.root) + 1 :] for f in self.fs.find(self.root)]
                kept = {f for f in present if f in self.record.files}
                kept |= {
                    f for f in self.record.files if f.endswith("/") and any(p.startswith(f) for p in present)
                }
                self.record.files = {f: None for f in self.record.files if f in kept}
                self.record.ended, left = _now(), bool(kept)
                if left:
                    self.save()
                else:
                    self.fs.rm(f"{self.root}/{RECORD_FILE}")
        except (OSError, OutputError) as err:
            log.warning("%s: could not record the files this run left (%s)", self.url, err)
        finally:
            with _lock:
                if self in _held:
                    _held.remove(self)
            try:
                if _cat(self.fs, f"{self.root}/{CLAIM_FILE}") == self.claim:  # never another writer's
                    self.fs.rm(f"{self.root}/{CLAIM_FILE}")
                if not left:
                    _remove_empty(self.fs, self.made)
            except OSError as err:
                log.warning("%s: could not remove the claim %s (%s)", self.url, CLAIM_FILE, err)

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
