"""CI never passes without the real data: under ``CI=true`` a skip for missing data is a failure.

Runs a throw-away suite in a subprocess that uses the project's conftest hook: once with CI set,
once without. Other skips stay skips under CI. About two seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import pytest
from tests.conftest import require

def test_needs_data(tmp_path):
    require(tmp_path / "absent.bz2")

def test_other_skip():
    pytest.skip("an optional package is not installed")
"""


def _run(tmp_path: Path, ci: str | None) -> str:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_runtest_makereport  # noqa: F401\n"
    )
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(ROOT)
    if ci is not None:
        env["CI"] = ci
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-rfs",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    return result.stdout


def test_a_data_skip_fails_under_ci_and_other_skips_stay(tmp_path):
    out = _run(tmp_path, "true")
    assert "1 failed, 1 skipped" in out, out
    assert "CI=true and the real data is missing" in out


def test_without_ci_a_data_skip_is_a_skip(tmp_path):
    out = _run(tmp_path, None)
    assert "2 skipped" in out, out
