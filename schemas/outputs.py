"""One command's output folder: one writer (``.claim``, created exclusively; a stale one taken over),
a journal (``.output.json`` lists each file before it is written, even if killed: the writer is given
the :class:`OutputFolder` and writes through it), and ``--overwrite`` deleting exactly the journaled
files (and their temporary files), never another."""

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

from schemas import storage
from schemas.commands import OutputError
from schemas.manifest import COMPLETED_FILE

CLAIM_FILE, RECORD_FILE = ".claim", ".output.json"
RECORD_FORMAT, RECORD_VERSION = "output-record", 1
MARKERS = ("COMMITTED", COMPLETED_FILE, "metrics.json")  # say an output is complete: deleted first
_MACHINERY = (CLAIM_FILE, RECORD_FILE, f".{RECORD_FILE}.")  # the claim, the record and its temporary file

log = logging.getLogger(__name__)


def new_run_id() -> str:
    """A fresh run id: 16 random hex digits."""
    return uuid.uuid4().hex[:16]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (ticks since boot, from ``/proc``); None if unknown or a zombie."""
    with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
        return None if fields[0] == b"Z" else int(fields[19])
    return None


def remove_hint(url: str) -> str:
    """The shell command that removes the file at ``url``."""
    if url.startswith(("gs://", "gcs://")):
        return f"gcloud storage rm {url}"
    return f"aws s3 rm {url}" if url.startswith("s3://") else f"rm {url}"


def _cat(fs: storage.FileSystem, path: str) -> bytes | None:
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        return fs.cat_file(path)
    return None


def _claim(fs: storage.FileSystem, root: str, url: str, command: str, run_id: str, where: str) -> bytes:
    """Create the claim file of ``root`` (made if needed); its exact bytes."""
    path, claim_url = f"{root}/{CLAIM_FILE}", f"{url.rstrip('/')}/{CLAIM_FILE}"
    me = {"command": command, "run_id": run_id, "host": socket.gethostname(), "pid": os.getpid()}
    me.update(process_start=process_start(os.getpid()), claimed=_now())
    content = (json.dumps(me, indent=1) + "\n").encode("utf-8")
    fs.makedirs(root, exist_ok=True)
    for _ in range(3):
        if (existing := _cat(fs, path)) is None:
            with contextlib.suppress(FileExistsError):  # another writer was first: named on the next pass
                if isinstance(fs, storage.LocalFileSystem):
                    with open(path, "xb") as f:
                        f.write(content)
                else:
                    fs.pipe_file(path, content, mode="create")
                if _cat(fs, path) == content:  # read back: some servers ignore the condition
                    return content
            continue
        try:
            c = json.loads(existing)
            named = f"`{c['command']}` (run {c['run_id']}, pid {int(c['pid'])} on host {c['host']}, since {c['claimed']})"
        except (ValueError, RecursionError, KeyError, TypeError):
            raise OutputError(
                f"{claim_url}: not a claim this release can read; if no other command writes there, "
                f"remove it ({remove_hint(claim_url)}) and start again"
            ) from None
        if c["host"] != me["host"] or not os.path.isdir("/proc/self"):  # no /proc (macOS): no check
            raise OutputError(
                f"{where}: claimed by {named}, which cannot be checked from this host; if it no longer "
                f"runs, remove the claim ({remove_hint(claim_url)}) and start again"
            )
        started = process_start(int(c["pid"]))
        if started is not None and c.get("process_start") in (None, started):
            raise OutputError(
                f"{where}: being written by {named}; wait for it to end, or choose another folder"
            )
        aside = f"{path}.stale-{uuid.uuid4().hex[:8]}"  # the stale claim moved aside: one mover wins
        with contextlib.suppress(FileNotFoundError, FileExistsError):
            fs.mv(path, aside)
            if (moved := _cat(fs, aside)) not in (existing, None):  # a new claim, moved by mistake
                fs.pipe_file(path, moved, mode="create")
            fs.rm(aside)
            if moved == existing:
                log.warning("%s: took over the claim of %s, which no longer runs", where, named)
    raise OutputError(f"{where}: other writers keep claiming it; choose another folder")


@dataclass
class OutputRecord:
    """What ``.output.json`` holds: the command, its run and the files it journaled, in order."""

    command: str
    run_id: str
    files: dict[str, None]  # the journal in order, as dict keys for lookups
    started: str
    ended: str | None = None  # None while it runs, or when it was killed

    def to_json(self) -> bytes:
        data = {"format": RECORD_FORMAT, "version": RECORD_VERSION, **asdict(self), "files": list(self.files)}
        return (json.dumps(data, indent=1) + "\n").encode("utf-8")

    def owns(self, relative: str) -> bool:
        """Whether the file ``relative`` (or the one its temporary name stands for) is journaled."""
        folder, _, name = relative.rpartition("/")
        relative = posixpath.join(folder, storage.final_name(name))
        folders = (relative[: i + 1] for i, c in enumerate(relative) if c == "/")
        return relative in self.files or any(f in self.files for f in folders)


def read_record(fs: storage.FileSystem, root: str, url: str) -> OutputRecord | None:
    """The record in the folder ``root`` (``url`` in messages), or None; an OutputError if damaged."""
    if (data := _cat(fs, f"{root.rstrip('/')}/{RECORD_FILE}")) is None:
        return None
    with contextlib.suppress(ValueError, RecursionError, KeyError, TypeError):
        r = json.loads(data)
        names = r["files"] or []  # null: a killed run whose files are unknown (none is taken for its own)
        record = OutputRecord(r["command"], r["run_id"], dict.fromkeys(names), r["started"], r["ended"])
        strings = (record.command, record.run_id, record.started, record.ended or "", *names)
        if (r["format"], r["version"]) == (RECORD_FORMAT, RECORD_VERSION) and isinstance(names, list):
            inside = (posixpath.normpath(f) == f.rstrip("/") and not f.startswith(("/", "..")) for f in names)
            if all(isinstance(s, str) for s in strings) and all(inside):
                return record
    raise OutputError(
        f"{url.rstrip('/')}/{RECORD_FILE}: not an {RECORD_FORMAT} version {RECORD_VERSION}; if the folder holds "
        "nothing of value, delete it, else choose another folder"
    )


def _names(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (", ..." if len(paths) > 3 else "")


def _remove_empty(fs: storage.FileSystem, folders: list[str]) -> None:
    for folder in folders:  # deepest first
        with contextlib.suppress(OSError):
            if fs.isdir(folder) and not fs.ls(folder):
                fs.rmdir(folder)


class OutputFolder(storage.Folder, contextlib.AbstractContextManager):
    """One command's claimed output folder (see the module's docstring); closed on leaving a ``with``.
    Its writer journals each file (:meth:`journal`, :meth:`write`) before it is created."""

    def __init__(self, url: str, fs: storage.FileSystem, root: str, shown: str) -> None:
        super().__init__(url)
        self.fs, self.root, self.shown, self._lock = fs, root, shown, threading.RLock()
        self.made = []
        while root not in ("", "/") and not fs.exists(root):  # the folders the claim makes, deepest first
            self.made.append(root)
            root = root.rsplit("/", 1)[0]
        self.claim, self.stale, self.begun = None, [], False

    @classmethod
    def open(
        cls,
        url: str,
        command: str,
        *,
        overwrite: bool = False,
        continuing: bool = False,
        continue_hint: str | None = None,
        option: str = "--output",
        run_id: str | None = None,
    ) -> OutputFolder:
        """Claim ``url`` for ``command``; refuse (nothing changed) a folder holding files unless all are
        an earlier run's of ``command`` and ``overwrite``, or ``continuing`` (``--resume``, a cache):
        adding to the folder, keeping its record's run id (else ``run_id``) and journal."""
        fs, root = storage.filesystem(url)
        shown = f"{option} {url}" if option else url
        folder = cls(url, fs, root, shown)
        try:
            if fs.isfile(folder.root):
                raise OutputError(f"{shown}: is a file, not a folder; choose a folder")
            earlier = read_record(fs, folder.root, url)
            kept = earlier if continuing and earlier is not None and earlier.command == command else None
            folder.run_id = (kept and kept.run_id) or run_id or new_run_id()
            folder.record = OutputRecord(command, folder.run_id, kept.files if kept else {}, _now())
            folder.claim = _claim(fs, folder.root, url, command, folder.run_id, shown)
            present = folder._files()
            if present and earlier is not None and earlier.command != command:
                raise OutputError(
                    f"{shown}: holds the output of `{earlier.command}` ({len(present)} file(s): {_names(present)}), "
                    f"which `{command}` never replaces, even with --overwrite; choose another folder"
                )
            ours = [p for p in present if earlier is not None and earlier.owns(p)]
            others = sorted(set(present) - set(ours))
            hint = f"continue it with {continue_hint}, or " if continue_hint else ""
            if others and not continuing:
                besides = f", besides the {len(ours)} of its earlier run" if ours else ""
                raise OutputError(
                    f"{shown}: holds {len(others)} file(s) that no `{command}` run recorded writing "
                    f"({_names(others)}){besides}; they are never deleted, even with --overwrite: {hint}"
                    "choose an empty folder, or move them away"
                )
            if ours and not (overwrite or continuing):
                state = "a completed" if COMPLETED_FILE in ours else "an earlier"
                raise OutputError(
                    f"{shown}: holds the {len(ours)} file(s) of {state if earlier.ended else 'an interrupted'} "
                    f"`{command}` run ({_names(ours)}; run {earlier.run_id}); {hint}pass --overwrite to "
                    "replace them (only them), or choose an empty folder"
                )
            folder.stale = [] if continuing else ours  # what begin() deletes
        except BaseException as err:
            folder.close()
            if isinstance(err, OSError):
                raise OutputError(f"{shown}: cannot write there ({type(err).__name__}: {err})") from None
            raise
        return folder

    def path(self, relative: str) -> str:
        """The path or URL of the file ``relative``, as this output's filesystem names it."""
        path = f"{self.root.rstrip('/')}/{relative}"
        return path if isinstance(self.fs, storage.LocalFileSystem) else self.fs.unstrip_protocol(path)

    def sub(self, relative: str) -> storage.Folder:
        """The folder ``relative`` inside this output; its files are journaled here."""
        return _Within(self, relative)

    def journal(self, *relatives: str) -> None:
        """Record the files ``relatives`` (a trailing ``/``: a folder of temporary files) before they are
        written, here or by workers (a WriteError: none may be written; an OutputError once the folder
        was moved or deleted under this command)."""
        with self._lock:
            if self.begun:
                self.check_in_place()
            new = [r for r in relatives if not r.startswith(_MACHINERY) and not self.record.owns(r)]
            for relative in new:
                assert posixpath.normpath(relative) == relative.rstrip("/") and not relative.startswith(
                    ("/", "..")
                ), relative
                self.record.files[relative] = None
            if new and self.begun:  # until then the earlier run's record stays
                self._write_record()

    def _write_record(self) -> None:
        storage.write_bytes(self.path(RECORD_FILE), self.record.to_json())

    def _files(self) -> list[str]:
        """The files in the folder (not the claim or the record), relative to it, sorted."""
        relative = (f[len(self.root) :].lstrip("/") for f in self.fs.find(self.root))
        return sorted(p for p in relative if not p.startswith(_MACHINERY))

    def begin(self) -> int:
        """Before the first write: delete the earlier run's files (markers first), write the record."""
        paths, self.stale = sorted(self.stale, key=lambda p: p.rsplit("/", 1)[-1] not in MARKERS), []
        folders = {p.rsplit("/", i)[0] + "/" for p in paths for i in range(1, p.count("/") + 1)}
        for path in paths:  # an OSError is the command's one line, naming the file
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(f"{self.root}/{path}")
        _remove_empty(self.fs, [f"{self.root}/{f}" for f in sorted(folders, key=len, reverse=True)])
        with self._lock:
            self.begun = True
            self._write_record()
        return len(paths)

    def check_in_place(self) -> None:
        """:class:`OutputError` once the folder no longer holds this command's claim (moved or deleted
        under it): a write never makes it again where it was."""
        if _cat(self.fs, f"{self.root}/{CLAIM_FILE}") != self.claim:
            raise OutputError(
                f"{self.shown}: moved or deleted while this command wrote into it ({CLAIM_FILE} is gone); "
                "stopped rather than make it again there"
            )

    def close(self) -> None:
        """Cut the journal to the files left, release the claim; errors are logged, never raised."""
        mine = self.claim is not None and _cat(self.fs, f"{self.root}/{CLAIM_FILE}") == self.claim
        try:
            if self.begun and mine:  # else it was moved or deleted: nothing of ours to record there
                present = set(self._files())
                present |= {p.rsplit("/", i)[0] + "/" for p in present for i in range(1, p.count("/") + 1)}
                self.record.files = {f: None for f in self.record.files if f in present}
                self.record.ended = _now()
                if self.record.files:
                    self._write_record()
                else:
                    self.fs.rm(f"{self.root}/{RECORD_FILE}")
        except OSError as err:
            log.warning("%s: could not record the files this run left (%s)", self.url, err)
        try:
            if mine:  # not another's
                self.fs.rm(f"{self.root}/{CLAIM_FILE}")
            _remove_empty(self.fs, self.made)  # only those left empty
        except OSError as err:
            log.warning("%s: could not remove the claim %s (%s)", self.url, CLAIM_FILE, err)

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Within(storage.Folder):
    """A folder inside a claimed output, whose files are journaled in the output's record."""

    def __init__(self, output: OutputFolder, prefix: str) -> None:
        super().__init__(output.path(prefix))
        self.output, self.prefix = output, prefix.strip("/")

    def sub(self, relative: str) -> storage.Folder:
        return _Within(self.output, f"{self.prefix}/{relative}")

    def journal(self, *relatives: str) -> None:
        self.output.journal(*(f"{self.prefix}/{r}" for r in relatives))
