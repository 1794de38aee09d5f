"""Where a path really is, and whether a command's output is, holds or lies inside one of its inputs."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping

from schemas.commands import UsageError

_SCHEME_ALIASES = {"gcs": "gs", "s3a": "s3", "s3n": "s3", "file": "", "local": ""}

Paths = str | Iterable[str] | None
SAME = "is the same place as"
CONTAINS = "holds"
INSIDE = "lies inside"


def location(path: str) -> str:
    """``path`` resolved for comparison: ``scheme://bucket/prefix`` for a URL (``gcs://`` is ``gs://``,
    ``s3a://`` is ``s3://``; slashes and ``.``/``..`` normalised), else the absolute local path with
    ``~`` expanded and symlinks followed (``file://`` URLs are local paths)."""
    scheme, sep, rest = path.partition("://")
    if sep:
        scheme = _SCHEME_ALIASES.get(scheme.lower(), scheme.lower())
        if scheme:
            bucket, _, key = rest.partition("/")
            key = posixpath.normpath("/" + key).lstrip("/") if key.strip("/") else ""
            return f"{scheme}://{bucket}" + (f"/{key}" if key else "")
        path = rest if rest.startswith("/") else "/" + rest
    return os.path.realpath(os.path.expanduser(path))


def relation(output: str, input_: str) -> str | None:
    """How the location ``output`` overlaps the location ``input_`` (both from :func:`location`):
    :data:`SAME`, :data:`CONTAINS`, :data:`INSIDE`, or None when apart."""
    if output == input_:
        return SAME
    if input_.startswith(output.rstrip("/") + "/"):
        return CONTAINS
    if output.startswith(input_.rstrip("/") + "/"):
        return INSIDE
    return None


def _same_file(a: str, b: str) -> bool:
    """Two existing local paths that are one file or folder (a bind mount, a hard link)."""
    try:
        return "://" not in a and "://" not in b and os.path.samefile(a, b)
    except OSError:
        return False


def _paths(value: Paths) -> list[str]:
    if isinstance(value, str) or value is None:
        return [value] if value else []
    return [v for v in value if v]


def check_output(flag: str, path: str) -> None:
    """:class:`~schemas.commands.UsageError` for an output that would not be where the user can find
    it: a name that looks like an option (``--output -h``), or this process's memory (``memory://``)."""
    if path.startswith("-"):
        raise UsageError(
            f"{flag} {path}: an option, not a folder; give a folder (./{path} for one of that name)"
        )
    if path.lower().startswith("memory:"):
        raise UsageError(
            f"{flag} {path}: memory:// lives only as long as this process: the output would be gone when the "
            "command ends; give a folder or a bucket URL"
        )


def check_apart(outputs: Mapping[str, Paths], inputs: Mapping[str, Paths], remedy: str | None = None) -> None:
    """Raise :class:`~schemas.commands.UsageError` when an output (``{flag: path or paths}``) is refused by
    :func:`check_output`, or is, holds or lies inside an input, naming the pair and ``remedy``
    (default: another value of the flag)."""
    for out_flag, out_value in outputs.items():
        for out in _paths(out_value):
            check_output(out_flag, out)
            out_at = location(out)
            for in_flag, in_value in inputs.items():
                for inp in _paths(in_value):
                    in_at = location(inp)
                    found = relation(out_at, in_at) or (SAME if _same_file(out_at, in_at) else None)
                    if found is None:
                        continue
                    shown = f"{out_flag} {out} {found} {in_flag} {inp}"
                    if (out.rstrip("/"), inp.rstrip("/")) != (out_at, in_at):
                        both = f"both are {out_at}" if out_at == in_at else f"resolved: {out_at} and {in_at}"
                        shown += f" ({both})"
                    raise UsageError(
                        f"{shown}: an output is never written over an input, even with --overwrite; "
                        f"{remedy or f'choose another {out_flag}'}"
                    )
