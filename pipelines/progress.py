"""Progress of a running pipeline: a pass-through DoFn counting what flows by, as a bar or lines."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

import apache_beam as beam

LINE_INTERVAL_S = 30.0
"""Seconds between two progress lines when standard error is not a terminal."""


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


def progress_line(description: str, count: int, unit: str, elapsed_s: float) -> str:
    """``pipelines books: cleaning: 1,200 books (40/s)``."""
    rate = f" ({count / elapsed_s:,.3g}/s)" if elapsed_s > 0 else ""
    return f"{description}: {count:,} {unit}{rate}"


class ShowProgress(beam.DoFn):
    """Pass elements through unchanged, counting them on a terminal bar or in periodic lines."""

    def __init__(self, description: str, unit: str, *, interval_s: float = LINE_INTERVAL_S):
        self._description, self._unit, self._interval_s = description, unit, interval_s
        self._bar = None
        self._count = 0

    def setup(self) -> None:
        self._count, self._start = 0, time.monotonic()
        self._last_line = self._start
        if _is_terminal(sys.stderr):
            from tqdm import tqdm

            self._bar = tqdm(desc=self._description, unit=f" {self._unit}", leave=False, mininterval=0.5)

    def process(self, element):
        self._count += 1
        if self._bar is not None:
            self._bar.update(1)
        elif time.monotonic() - self._last_line >= self._interval_s:
            self._write()
        yield element

    def teardown(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _write(self) -> None:
        now = time.monotonic()
        sys.stderr.write(progress_line(self._description, self._count, self._unit, now - self._start) + "\n")
        sys.stderr.flush()
        self._last_line = now
