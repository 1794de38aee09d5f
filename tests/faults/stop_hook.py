"""Holding a command at a chosen point, so that a stop signal arrives there and nowhere else.

:func:`hold` wraps a function (``"module:Class.method"``) so that its first call (or ``nth``)
whose arguments mention ``needle`` writes the file ``ready`` and then waits: until the file ``go``
appears when one is named (a command that stops gracefully, such as ``pretrain``, goes on to its
checkpoint), else until a signal ends the wait. :func:`signal_self` is the in-process variant:
the wrapped function sends the signal to its own process and goes on.

Run as a script, it holds and then runs a tool, for the subprocess tests::

    python -m tests.faults.stop_hook MODULE:ATTR NEEDLE NTH READY GO TOOL ARGS...   (GO may be "-")
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

TOOLS = {
    "pipelines": "pipelines.cli",
    "wordpiece": "wordpiece.cli",
    "pretrain": "pretrain.cli",
    "finetune": "finetune.cli",
    "chain": "chain.cli",
}


def _patch(target: str, needle: str, before: Callable[[], None], nth: int = 1) -> None:
    """Replace ``module:qualname`` by a wrapper that runs ``before`` once, at the ``nth`` call whose
    arguments' text contains ``needle``, then calls the original."""
    module_name, qualname = target.split(":")
    owner = importlib.import_module(module_name)
    *parents, name = qualname.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    original = getattr(owner, name)
    calls = []

    @functools.wraps(original)
    def held(*args, **kwargs):
        if len(calls) < nth and needle in repr(args) + repr(kwargs):
            calls.append(True)
            if len(calls) == nth:
                before()
        return original(*args, **kwargs)

    setattr(owner, name, held)


def hold(
    target: str, needle: str, ready: Path, go: Path | None = None, nth: int = 1, timeout_s: float = 120.0
) -> None:
    """Make ``target`` write ``ready`` and wait (for ``go``, or for a signal) at its ``nth`` call
    mentioning ``needle``."""

    def wait() -> None:
        ready.write_text(str(os.getpid()))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not (go is not None and go.exists()):
            time.sleep(0.01)

    _patch(target, needle, wait, nth)


def signal_self(monkeypatch, target: str, needle: str, signum: int) -> None:
    """In-process: make ``target`` send ``signum`` to this process at its first call mentioning
    ``needle`` (the handler runs right there), then go on; undone with ``monkeypatch``."""
    module_name, qualname = target.split(":")
    owner = importlib.import_module(module_name)
    *parents, name = qualname.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    monkeypatch.setattr(owner, name, getattr(owner, name))  # restored after the test
    _patch(target, needle, lambda: os.kill(os.getpid(), signum))


if __name__ == "__main__":
    target, needle, nth, ready, go, tool, *args = sys.argv[1:]
    hold(target, needle, Path(ready), None if go == "-" else Path(go), int(nth))
    importlib.import_module(TOOLS[tool]).main(args=args, prog_name=tool)
