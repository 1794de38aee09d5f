"""Progress of a long loop or a pipeline stage: a tqdm bar on a terminal, plain lines anywhere else."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

LINE_INTERVAL_S = 30.0  # seconds between two progress lines off a terminal


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal that can redraw a bar (not ``TERM=dumb``)."""
    try:
        interactive = stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False
    return interactive and os.environ.get("TERM", "") != "dumb"


def format_duration(seconds: float) -> str:
    """``3h02m05s``, ``4m05s`` or ``12s``."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """Count ``total`` units of work (None: unknown) from ``initial``: a bar, lines, or (``enabled``
    False) nothing. ``interval_s`` None: only the final line, for callers that log their own with
    :meth:`status`."""

    def __init__(
        self,
        total: int | None,
        *,
        desc: str,
        unit: str = "step",
        initial: int = 0,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        interval_s: float | None = LINE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.n, self.desc, self.unit = total, initial, desc, unit
        self._initial, self._stream, self._interval_s, self._clock = (
            initial,
            stream or sys.stderr,
            interval_s,
            clock,
        )
        self._start = self._last_line = clock()
        self._postfix: dict[str, Any] = {}
        self._bar = None
        if enabled is False:
            self.mode = "off"
        elif is_terminal(self._stream):
            from tqdm import tqdm

            self.mode = "bar"
            self._bar = tqdm(
                total=total, initial=initial, desc=desc, unit=unit, file=self._stream, dynamic_ncols=True
            )
        else:
            self.mode = "lines"

    def rate(self) -> float:
        """Units per second since the start (0 before the first one)."""
        elapsed = self._clock() - self._start
        return (self.n - self._initial) / elapsed if elapsed > 0 else 0.0

    def status(self) -> str:
        """``step 120/1,000 (12%), 3.21 step/s, ETA 4m34s``; without a total ``1,200 books (40/s)``."""
        rate = self.rate()
        if self.total is None:
            return f"{self.n:,} {self.unit}" + (f" ({rate:,.3g}/s)" if rate > 0 else "")
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        eta = format_duration((self.total - self.n) / rate) if rate > 0 else "?"
        return f"{self.unit} {self.n:,}/{self.total:,}{share}, {rate:.3g} {self.unit}/s, ETA {eta}"

    def update(self, n: int = 1) -> None:
        """``n`` more units done; in lines mode, a line when ``interval_s`` has passed."""
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.mode == "lines" and self._interval_s is not None:
            if self._clock() - self._last_line >= self._interval_s:
                self._write(self.status())

    def set_postfix(self, **values: Any) -> None:
        """Figures shown after the counts (the loss, the epoch), on the bar or the next line."""
        self._postfix = values
        if self._bar is not None:
            self._bar.set_postfix(**values)

    def close(self, finished: bool = True) -> None:
        """End the bar, or write the final ``done`` line (not when the loop failed or was stopped)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.mode == "lines" and finished:
            done = self.n - self._initial
            elapsed = format_duration(self._clock() - self._start)
            units = self.unit + ("es" if self.unit.endswith(("s", "sh", "ch", "x")) else "s")
            self._write(f"done, {done:,} {units} in {elapsed} ({self.rate():.3g} {self.unit}/s)")
        self.mode = "off"

    def _write(self, text: str) -> None:
        postfix = "".join(f", {key} {value}" for key, value in self._postfix.items())
        self._stream.write(f"{self.desc}: {text}{postfix}\n")
        self._stream.flush()
        self._last_line = self._clock()
