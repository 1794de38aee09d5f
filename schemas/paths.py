"""Where a path really is, and whether a command's output overlaps one of its inputs.

Every command refuses an output that is, holds, or lies inside one of its inputs, even with
``--overwrite`` (``--overwrite`` replaces an earlier output, never an input): :func:`check_apart`,
called with the command's flags before anything is read. Paths are compared as
:func:`location` resolves them: a local path absolute with its symlinks followed (and ``~``
expanded), a URL by scheme, bucket and normalised prefix (``gcs://`` is ``gs://``, ``s3a://`` is
``s3://``, repeated and trailing slashes and ``.``/``..`` segments do not count), so two spellings
of one place compare equal. :func:`relation` is the pure test on two resolved locations.

Pure functions on strings, except that :func:`location` asks the local filesystem where symlinks
point (and whether two existing local paths are one file, for bind mounts and hard links).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping

_SCHEME_ALIASES = {"gcs": "gs", "s3a": "s3", "s3n": "s3", "file": "", "local": ""}

SAME = "is the same place as"
CONTAINS = "holds"
INSIDE = "lies inside"


class OverlapError(ValueError):
    """An output that is, holds or lies inside an input; the message names both flags. The
    command line is refused before anything is read: exit 2 (the project's exit-code rule)."""


def location(path: str) -> str:
    """``path`` resolved for comparison: ``scheme://bucket/prefix`` for a URL (normalised), the
    absolute local path with symlinks followed otherwise (``file://`` URLs are local paths)."""
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
    """How the output location ``output`` overlaps the input location ``input_`` (both from
    :func:`location`): :data:`SAME`, :data:`CONTAINS`, :data:`INSIDE`, or None when apart."""
    if output == input_:
        return SAME
    if _under(input_, output):
        return CONTAINS
    if _under(output, input_):
        return INSIDE
    return None


def _under(path: str, folder: str) -> bool:
    """Whether ``path`` lies strictly below ``folder`` (``/a/bc`` is not below ``/a/b``)."""
    return path.startswith(folder.rstrip("/") + "/") and path != folder


def _same_file(a: str, b: str) -> bool:
    """Two existing local paths that are one file or folder (a bind mount, a hard link)."""
    try:
        return "://" not in a and "://" not in b and os.path.samefile(a, b)
    except OSError:
        return False


def _paths(value: str | Iterable[str] | None) -> list[str]:
    if isinstance(value, str) or value is None:
        return [value] if value else []
    return [v for v in value if v]


def check_apart(
    outputs: Mapping[str, str | Iterable[str] | None],
    inputs: Mapping[str, str | Iterable[str] | None],
    remedy: str | None = None,
) -> None:
    """Raise :class:`OverlapError` when an output (``{flag: path or paths}``) is, holds or lies
    inside an input (same shape); the message names the first such pair and what to do
    (``remedy``, default: choose another value of the output's flag). ``None`` values (flags not
    given) are skipped."""
    for out_flag, out_value in outputs.items():
        for out in _paths(out_value):
            out_location = location(out)
            for in_flag, in_value in inputs.items():
                for inp in _paths(in_value):
                    in_location = location(inp)
                    found = relation(out_location, in_location)
                    if found is None and _same_file(out_location, in_location):
                        found = SAME
                    if found is not None:
                        shown = _shown(out_flag, out, out_location, found, in_flag, inp, in_location)
                        raise OverlapError(
                            f"{shown}: an output is never written over an input, even with --overwrite; "
                            f"{remedy or f'choose another {out_flag}'}"
                        )


def _shown(out_flag: str, out: str, out_loc: str, found: str, in_flag: str, inp: str, in_loc: str) -> str:
    """The pair, with where the paths resolve to when that is not what was typed."""
    shown = f"{out_flag} {out} {found} {in_flag} {inp}"
    if (out.rstrip("/"), inp.rstrip("/")) == (out_loc, in_loc):
        return shown
    return shown + (f" (both are {out_loc})" if out_loc == in_loc else f" (resolved: {out_loc} and {in_loc})")
