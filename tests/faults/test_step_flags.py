"""The step's switches (`--compile/--no-compile`, `--compile-mode`) refused on the command line, and
what the trainer leaves out on a machine without its optional packages."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from click.testing import CliRunner

from pretrain import metrics
from pretrain.cli import main
from pretrain.config import PretrainConfig
from schemas import storage


def _invoke(tmp_path: Path, *flags: str):
    args = ["--shards", str(tmp_path / "shards"), "--output", str(tmp_path / "run"), *flags]
    return CliRunner().invoke(main, args)


def test_compile_flags_are_checked_before_anything_is_read(tmp_path: Path):
    result = _invoke(tmp_path, "--no-compile", "--compile-mode", "reduce-overhead")
    assert result.exit_code == 2, result.output
    assert "--compile-mode reduce-overhead applies when compiling: drop --no-compile" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "run").exists()
    result = _invoke(tmp_path, "--compile-mode", "fast")
    assert result.exit_code == 2 and "--compile-mode" in result.output
    # by default the machine decides (on for CUDA); a mode alone is fine, and so is --compile with one
    assert PretrainConfig(shards="s", output="o").compile is None
    assert PretrainConfig(shards="s", output="o", compile_mode="reduce-overhead").problems() == []
    assert PretrainConfig(shards="s", output="o", compile=True, compile_mode="max-autotune").problems() == []


def test_without_matplotlib_a_run_warns_and_writes_no_plots(tmp_path: Path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    log = metrics.MetricsLog(storage.Folder(tmp_path), None)
    log.log({"step": 1, "split": "train", "loss": 1.0})
    log.close()
    with caplog.at_level(logging.WARNING, logger="pretrain"):
        assert log.plot() == []
    assert "matplotlib is not installed" in caplog.text and (tmp_path / "metrics.jsonl").exists()
    assert not (tmp_path / "plots").exists()
