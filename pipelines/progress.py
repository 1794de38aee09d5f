"""Progress of a running pipeline: a pass-through DoFn counting what flows by, as a bar or lines."""

from __future__ import annotations

import apache_beam as beam

from schemas.progress import LINE_INTERVAL_S, Progress


class ShowProgress(beam.DoFn):
    """Pass elements through unchanged, counting them (``unit``: plural) on a bar or in lines."""

    def __init__(self, description: str, unit: str, *, interval_s: float = LINE_INTERVAL_S):
        self._description, self._unit, self._interval_s = description, unit, interval_s
        self._progress: Progress | None = None

    def setup(self) -> None:
        self._progress = Progress(None, desc=self._description, unit=self._unit, interval_s=self._interval_s)

    def process(self, element):
        self._progress.update()
        yield element

    def teardown(self) -> None:
        if self._progress is not None:
            self._progress.close(finished=False)
            self._progress = None
