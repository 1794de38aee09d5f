"""pipelines.progress.ShowProgress: elements pass unchanged; off a terminal, plain periodic lines."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.progress import ShowProgress
from schemas.progress import Progress


def test_elements_pass_through_and_lines_are_plain(capfd):
    with test_pipeline.TestPipeline() as p:
        out = (
            p
            | beam.Create(list(range(5)))
            | beam.ParDo(ShowProgress("pipelines x: reading", "docs", interval_s=0))
        )
        assert_that(out, equal_to(list(range(5))))
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("pipelines x: reading: ")]
    assert lines and lines[-1].startswith("pipelines x: reading: 5 docs (")
    assert "\r" not in err and "\x1b" not in err


def test_a_line_without_a_total_counts_and_rates():
    clock = iter([0.0, 30.0]).__next__
    progress = Progress(None, desc="pipelines books: cleaning", unit="books", enabled=False, clock=clock)
    progress.update(1200)
    assert progress.status() == "1,200 books (40/s)"
    assert Progress(None, desc="d", unit="pages", enabled=False, clock=lambda: 0.0).status() == "0 pages"
