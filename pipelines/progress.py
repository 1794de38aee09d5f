"""A progress bar on long local runs: a pass-through DoFn that counts what flows by.

The bar is drawn only when standard error is a terminal, so Dataflow workers, CI and tests
stay quiet. On Beam's in-process runner there is one bar per step; with several worker
processes each draws its own.
"""

from __future__ import annotations

import sys

import apache_beam as beam
from tqdm import tqdm


class ShowProgress(beam.DoFn):
    """Pass elements through unchanged, advancing a terminal progress bar."""

    def __init__(self, description: str, unit: str):
        self._description, self._unit = description, unit
        self._bar: tqdm | None = None

    def setup(self) -> None:
        self._bar = tqdm(
            desc=self._description,
            unit=f" {self._unit}",
            disable=not sys.stderr.isatty(),
            leave=False,
            mininterval=0.5,
        )

    def process(self, element):
        self._bar.update(1)
        yield element

    def teardown(self) -> None:
        if self._bar is not None:
            self._bar.close()
