"""An output folder as one command owns it: claimed, checked, cleared, recorded, released.

- The record ``OUTPUT/.output.json`` (:class:`OutputRecord`) says which command wrote the folder,
  under which run id, and which files are its own: the glob patterns it writes (recorded before
  its first write, so that a killed run's files are covered) and, once it ends, finished or
  failed, the exact list of the files it left. ``--overwrite`` deletes those files and nothing
  else; a file that no record of this command lists is someone else's: it is never deleted, and
  its presence refuses ``--overwrite`` with a line saying so.
- :class:`OutputFolder` is one command's use of a folder. :meth:`OutputFolder.open` claims it
  (:mod:`schemas.claims`: one writer per output) and refuses a folder that holds files unless
  the command was told what to do with them, saying whose they are (exit 1);
  :meth:`OutputFolder.begin`, called once every other check has passed, just before the first
  write, removes the earlier run's files (markers first) and writes the new record;
  :meth:`OutputFolder.close` records the files left and releases the claim, on success and on
  failure. A folder that the claim created is removed again when nothing was begun.

Like :mod:`schemas.claims`, this works on the caller's fsspec filesystem and imports only the
standard library.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from schemas.claims import CLAIM_FILE, Claim, Claimant, ClaimError, claim, new_run_id, release
from schemas.files import final_name, is_temporary_name, write_file
from schemas.manifest import COMPLETED_FILE

RECORD_FILE = ".output.json"
RECORD_FORMAT, RECORD_VERSION = "output-record", 1
MARKERS = ("COMMITTED", COMPLETED_FILE, "metrics.json")
"""Files that say an output (or a checkpoint) is complete: removed before anything else."""
_HIDDEN = (CLAIM_FILE, RECORD_FILE)
_LEGACY_PREFIXES = (".write-probe-", f"{CLAIM_FILE}.stale-")
_SHOWN = 3

log = logging.getLogger(__name__)


class OutputError(ValueError):
    """An output folder a command may not (or cannot) write into; the message says why and what
    to do. The CLIs exit 1 (an output in the way), the project's exit-code rule."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class OutputRecord:
    """What ``.output.json`` holds: who wrote the folder and which of its files are theirs."""

    command: str
    run_id: str
    patterns: tuple[str, ...]
    """Glob patterns (relative to the folder; ``*`` crosses ``/``) of the files the command writes."""
    files: tuple[str, ...] | None = None
    """The files the run left, once it ended; None while it runs (or when it was killed)."""
    started: str = field(default_factory=_now)
    ended: str | None = None

    def owns(self, relative: str) -> bool:
        """Whether the file ``relative`` is one this run wrote (by its list, else its patterns),
        or a temporary file it was writing when it was killed (:func:`schemas.files.temporary_name`
        beside a file of its patterns)."""
        if self.files is not None and relative in self.files:
            return True
        folder, _, name = relative.rpartition("/")
        if is_temporary_name(name):
            relative = f"{folder}/{final_name(name)}" if folder else final_name(name)
        elif self.files is not None:
            return False
        return any(fnmatch.fnmatch(relative, pattern) for pattern in self.patterns)

    def to_json(self) -> bytes:
        """The record file's content."""
        data = {"format": RECORD_FORMAT, "version": RECORD_VERSION, "command": self.command,
                "run_id": self.run_id, "started": self.started, "ended": self.ended,
                "patterns": list(self.patterns), "files": None if self.files is None else list(self.files)}  # fmt: skip
        return (json.dumps(data, indent=1) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, where: str) -> OutputRecord:
        """Parse a record; :class:`OutputError` naming ``where`` when it is not one."""
        try:
            record = json.loads(data.decode("utf-8"))
            if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
                raise ValueError(f"not an {RECORD_FORMAT}")
            if record.get("version") != RECORD_VERSION:
                raise ValueError(f"version {record.get('version')!r}, this release reads {RECORD_VERSION}")
            text = [record.get(k) for k in ("command", "run_id", "started")]
            patterns, files = record.get("patterns"), record.get("files")
            if not all(isinstance(v, str) for v in text) or not _strings(patterns):
                raise ValueError("command, run_id, started or patterns missing or of the wrong type")
            if (
                files is not None
                and not _strings(files)
                or not isinstance(record.get("ended"), (str, type(None)))
            ):
                raise ValueError("files or ended of the wrong type")
        except (ValueError, UnicodeDecodeError) as err:
            raise OutputError(
                f"{where}: not a readable output record ({err}); if the folder holds nothing of value, "
                "delete it, else choose another folder"
            ) from None
        return cls(
            record["command"], record["run_id"], tuple(patterns), None if files is None else tuple(files),
            record["started"], record["ended"],
        )  # fmt: skip


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def read_record(fs: Any, root: str, url: str) -> OutputRecord | None:
    """The record of the folder ``root`` (``url`` for messages), or None when it has none."""
    try:
        data = fs.cat_file(f"{root.rstrip('/')}/{RECORD_FILE}")
    except (FileNotFoundError, NotADirectoryError):
        return None
    return OutputRecord.from_json(data, f"{url.rstrip('/')}/{RECORD_FILE}")


def _listing(fs: Any, root: str) -> list[str]:
    """The files under ``root``, relative to it, without the claim, the record and leftovers of
    an older release's probes."""
    if not fs.isdir(root):
        return []
    found = [path[len(root) :].lstrip("/") for path in sorted(fs.find(root))]
    return [p for p in found if p not in _HIDDEN and not p.startswith(_LEGACY_PREFIXES)]


def _missing_folders(fs: Any, root: str) -> tuple[str, ...]:
    """The folders a ``makedirs(root)`` would create, deepest first."""
    made, folder = [], root
    while folder not in ("", "/") and not fs.exists(folder):
        made.append(folder)
        folder = folder.rsplit("/", 1)[0]
    return tuple(made)


def _names(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:_SHOWN])
    return f"{shown}, ..." if len(paths) > _SHOWN else shown


@dataclass
class OutputFolder:
    """One command's claimed output folder; see the module docstring. Use as a context manager
    (or call :meth:`close`)."""

    url: str
    fs: Any
    root: str
    command: str
    patterns: tuple[str, ...]
    run_id: str
    held: Claim
    stale: tuple[str, ...]
    """Files of the earlier run that :meth:`begin` removes (``--overwrite``)."""
    made: tuple[str, ...]
    option: str = "--output"
    begun: bool = False

    @classmethod
    def open(
        cls,
        url: str,
        fs: Any,
        root: str,
        command: str,
        patterns: Sequence[str],
        *,
        overwrite: bool = False,
        continuing: bool = False,
        continue_hint: str | None = None,
        option: str = "--output",
        run_id: str | None = None,
    ) -> OutputFolder:
        """Claim ``url`` (``root`` in ``fs``) for ``command``, whose files match ``patterns``.

        Refuses (:class:`OutputError`, the claim released, nothing changed) a folder holding
        files unless ``overwrite`` and all are the earlier run's of this command, or
        ``continuing`` (``pretrain --resume RUN`` writing into RUN: every file is the run's
        own; the run id its record holds is kept, else ``run_id`` when given, else a new one).
        ``continue_hint`` (``--resume RUN``) is named in the refusal."""
        root = root.rstrip("/") or "/"
        try:
            if fs.isfile(root):
                raise OutputError(f"{option} {url}: is a file, not a folder; choose a folder")
            earlier = read_record(fs, root, url)
            made = _missing_folders(fs, root)
        except OSError as err:
            raise OutputError(f"{option} {url}: cannot read it ({type(err).__name__}: {err})") from None
        kept = continuing and earlier is not None and earlier.command == command
        run_id = earlier.run_id if kept else (run_id if continuing and run_id else new_run_id())
        try:
            held = claim(fs, root, url, Claimant.this_process(command, run_id), option=option)
        except ClaimError as err:
            raise OutputError(str(err)) from None
        except OSError as err:
            _remove_folders(fs, made)
            raise OutputError(f"{option} {url}: cannot write there ({type(err).__name__}: {err})") from None
        folder = cls(url, fs, root, command, tuple(patterns), run_id, held, (), made, option)
        try:
            if not continuing:
                folder.stale = folder._earlier_files(earlier, overwrite, continue_hint)
        except OSError as err:
            folder.close()
            raise OutputError(f"{option} {url}: cannot read it ({type(err).__name__}: {err})") from None
        except BaseException:
            folder.close()
            raise
        return folder

    def _earlier_files(
        self, earlier: OutputRecord | None, overwrite: bool, hint: str | None
    ) -> tuple[str, ...]:
        """The files ``--overwrite`` is to remove; :class:`OutputError` saying what is there when
        the folder may not be written."""
        present = _listing(self.fs, self.root)
        if not present:
            return ()
        where, command = f"{self.option} {self.url}", self.command
        if earlier is not None and earlier.command != command:
            raise OutputError(
                f"{where}: holds the output of `{earlier.command}` ({len(present)} file(s): {_names(present)}), "
                f"which `{command}` never replaces, even with --overwrite; choose another folder"
            )
        ours = [p for p in present if earlier is not None and earlier.owns(p)]
        others = [p for p in present if earlier is None or not earlier.owns(p)]
        to_continue = f"continue it with {hint}, or " if hint else ""
        if others:
            besides = f", besides the {len(ours)} of its earlier run" if ours else ""
            raise OutputError(
                f"{where}: holds {len(others)} file(s) that no `{command}` run recorded writing "
                f"({_names(others)}){besides}; they are never deleted, even with --overwrite: {to_continue}"
                "choose an empty folder, or move them away"
            )
        if not overwrite:
            state = "a completed" if COMPLETED_FILE in ours else "an earlier"
            state = "an interrupted" if earlier.files is None else state
            raise OutputError(
                f"{where}: holds the {len(ours)} file(s) of {state} `{command}` run ({_names(ours)}; run "
                f"{earlier.run_id}); {to_continue}pass --overwrite to replace them (only them), or choose "
                "an empty folder"
            )
        return tuple(ours)

    def begin(self) -> int:
        """Just before the first write: remove the earlier run's files (markers first, then the
        rest, then the folders they leave empty) and record this run; return how many files were
        removed. Calling it again does nothing."""
        if self.begun:
            return 0
        paths = [f"{self.root}/{p}" for p in self.stale]
        ordered = sorted(paths, key=lambda p: p.rsplit("/", 1)[-1] not in MARKERS)
        try:
            for path in ordered:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm(path)
            _remove_folders(self.fs, _emptied(self.root, paths))
            record = OutputRecord(self.command, self.run_id, self.patterns)
            write_file(f"{self.root}/{RECORD_FILE}", record.to_json(), self.fs)
        except OSError as err:
            raise OutputError(
                f"{self.option} {self.url}: cannot replace the earlier run's files or record this run "
                f"({type(err).__name__}: {err})"
            ) from None
        self.begun = True
        return len(ordered)

    def close(self) -> None:
        """Record the files the run left (when it began) and release the claim; a folder the
        claim made is removed when the run left nothing in it. Never raises for a filesystem error (the
        run's own outcome matters more): a record or claim left behind is logged."""
        left = True
        try:
            if self.begun:
                left = self._record_what_is_left()
        except (OSError, OutputError) as err:
            log.warning("%s: could not record the files this run left (%s)", self.url, err)
        finally:
            try:
                release(self.held)
                if not (self.begun and left):
                    _remove_folders(self.fs, self.made)
            except OSError as err:
                log.warning("%s: could not remove the claim %s (%s)", self.url, CLAIM_FILE, err)

    def _record_what_is_left(self) -> bool:
        """Rewrite the record with the exact files the run left; a run that left none leaves no
        record either. Returns whether files were left."""
        files = tuple(_listing(self.fs, self.root))
        path = f"{self.root}/{RECORD_FILE}"
        if not files:
            self.fs.rm(path)
            return False
        old = read_record(self.fs, self.root, self.url)
        started = old.started if old is not None else _now()
        record = OutputRecord(self.command, self.run_id, self.patterns, files, started, _now())
        write_file(path, record.to_json(), self.fs)
        return True

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _emptied(root: str, paths: Sequence[str]) -> list[str]:
    """The folders between ``root`` and ``paths``, deepest first."""
    folders = set()
    for path in paths:
        while (path := path.rsplit("/", 1)[0]) != root and path.startswith(root + "/"):
            folders.add(path)
    return sorted(folders, key=len, reverse=True)


def _remove_folders(fs: Any, folders: Sequence[str]) -> None:
    """Remove each folder that exists and is empty, in the order given (deepest first)."""
    for folder in folders:
        with contextlib.suppress(OSError):
            if fs.isdir(folder) and not fs.ls(folder):
                fs.rmdir(folder)


__all__ = ["MARKERS", "RECORD_FILE", "OutputError", "OutputFolder", "OutputRecord", "Claimant", "read_record"]
