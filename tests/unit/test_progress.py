"""schemas.progress: a bar on a terminal; elsewhere plain periodic lines with rate and ETA."""

from __future__ import annotations

import io

import pytest

from schemas.progress import Progress, format_duration, is_terminal


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_every_interval_with_rate_eta_and_figures_and_no_control_characters():
    clock, out = Clock(), io.StringIO()
    bar = Progress(10, desc="fine-tune", stream=out, interval_s=30, clock=clock)
    assert bar.mode == "lines"
    for _ in range(4):  # 4 steps at 10 s each: one line, when 30 s have passed
        clock.now += 10
        bar.set_postfix(loss="0.5312")
        bar.update()
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines == [
        "fine-tune: step 3/10 (30%), 0.1 step/s, ETA 1m10s, loss 0.5312",
        "fine-tune: done, 4 steps in 40s (0.1 step/s), loss 0.5312",
    ]
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_resumed_counts_rate_from_where_it_started_and_unknown_eta_before_any_step():
    clock = Clock()
    bar = Progress(1000, desc="pretrain", initial=900, enabled=False, clock=clock)
    assert bar.status() == "step 900/1,000 (90%), 0 step/s, ETA ?"
    clock.now += 50
    bar.update(25)
    assert bar.status() == "step 925/1,000 (92%), 0.5 step/s, ETA 2m30s"


def test_disabled_writes_nothing_and_no_interval_writes_only_the_last_line():
    out = io.StringIO()
    quiet = Progress(5, desc="x", enabled=False, stream=out)
    quiet.update(5)
    quiet.close()
    assert out.getvalue() == ""
    clock = Clock()
    logged = Progress(5, desc="pretrain", stream=out, interval_s=None, clock=clock)
    clock.now += 1000
    logged.update(5)
    logged.close()
    assert out.getvalue() == "pretrain: done, 5 steps in 16m40s (0.005 step/s)\n"


def test_a_terminal_gets_a_bar_unless_term_is_dumb(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    assert is_terminal(Terminal()) and not is_terminal(io.StringIO())
    bar = Progress(3, desc="predict", unit="batch", stream=Terminal())
    assert bar.mode == "bar"
    bar.close()
    monkeypatch.setenv("TERM", "dumb")
    assert Progress(3, desc="predict", stream=Terminal()).mode == "lines"


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (59.6, "1m00s"), (245, "4m05s"), (10925, "3h02m05s")]
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text
