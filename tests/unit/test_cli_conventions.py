"""Conventions every CLI keeps: ``--version``, and exit codes 0 (ok), 1 (failure: an input missing,
incomplete or damaged, an output in the way, a failed run), 2 (usage: an unknown flag, or a value the
settings refuse before anything is read)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.clis import CLIS


@pytest.mark.parametrize("name", sorted(CLIS))
def test_version_prints_the_package_version_and_exits_0(name):
    result = CliRunner().invoke(CLIS[name], ["--version"], prog_name=name)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{name} {importlib.metadata.version('bert-pretraining')}"


@pytest.mark.parametrize("name", sorted(CLIS))
def test_an_unknown_flag_is_a_usage_error_exit_2(name):
    result = CliRunner().invoke(CLIS[name], ["--no-such-flag"], prog_name=name)
    assert result.exit_code == 2
    assert "--no-such-flag" in result.output
    assert "Traceback" not in result.output


def test_a_failed_run_exits_1_with_one_line(tmp_path):
    missing = tmp_path / "no-shards"
    result = CliRunner().invoke(
        CLIS["pretrain"],
        ["--shards", str(missing), "--output", str(tmp_path / "run"), "--config", "tiny", "--max-steps", "1"],
        prog_name="pretrain",
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert str(missing) in result.output or "no-shards" in result.output


def test_every_pretrain_setting_but_the_adam_constants_has_its_flag():
    from pretrain.config import PretrainConfig

    flags = {param.name for param in CLIS["pretrain"].params} | {"compile"}
    fields = set(PretrainConfig.__dataclass_fields__) - {"adam_beta1", "adam_beta2", "adam_eps"}
    assert fields <= flags, f"PretrainConfig fields without a pretrain flag: {sorted(fields - flags)}"


def test_schedule_steps_reaches_the_config_and_is_checked_there(tmp_path):
    result = CliRunner().invoke(
        CLIS["pretrain"],
        ["--shards", str(tmp_path), "--output", str(tmp_path / "run"), "--max-steps", "10"]
        + ["--schedule-steps", "5"],
        prog_name="pretrain",
    )
    assert result.exit_code == 2  # a usage error: the settings are refused before the shards are read
    assert "--schedule-steps 5 must be at least --max-steps 10" in result.output


MISSING_INPUTS = {
    "pipelines corpus": ("pipelines", ["corpus", "--input", "{missing}", "--output", "{out}"]),
    "pipelines examples": (
        "pipelines",
        ["examples", "--corpus", "{missing}", "--vocab", "{missing}/vocab.txt", "--output", "{out}"],
    ),
    "wordpiece train": ("wordpiece", ["train", "--corpus", "{missing}", "--output", "{out}"]),
    "wordpiece encode": ("wordpiece", ["encode", "--vocab", "{missing}/vocab.txt"]),
    "pretrain": ("pretrain", ["--shards", "{missing}", "--output", "{out}", "--config", "tiny"]),
    "pretrain export": ("pretrain", ["export", "--checkpoint", "{missing}", "--output", "{out}"]),
    "finetune glue": (
        "finetune",
        [
            "glue",
            "--task",
            "rte",
            "--data-dir",
            "{missing}",
            "--checkpoint",
            "{missing}",
            "--output",
            "{out}",
        ],
    ),
    "finetune squad": (
        "finetune",
        ["squad", "--version", "1.1", "--predict-file", "{missing}/dev.json", "--checkpoint", "{missing}"]
        + ["--output", "{out}"],
    ),
}
REFUSED_VALUES = {
    "pipelines corpus": (
        "pipelines",
        ["corpus", "--input", "{missing}", "--output", "{out}", "--num-shards", "0"],
    ),
    "wordpiece train": (
        "wordpiece",
        ["train", "--corpus", "{missing}", "--output", "{out}", "--vocab-size", "0"],
    ),
    "pretrain": ("pretrain", ["--shards", "{missing}", "--output", "{out}", "--max-steps", "0"]),
    "finetune glue": (
        "finetune",
        ["glue", "--task", "rte", "--data-dir", "{missing}", "--checkpoint", "{missing}", "--output", "{out}"]
        + ["--lr", "0"],
    ),
}


def _invoke(tmp_path, name: str, args: list[str]):
    paths = {"missing": str(tmp_path / "missing"), "out": str(tmp_path / "out")}
    return CliRunner().invoke(CLIS[name], [a.format(**paths) for a in args], prog_name=name, input="hello\n")


@pytest.mark.parametrize("command", sorted(MISSING_INPUTS))
def test_a_missing_input_is_a_failure_exit_1_naming_it(command, tmp_path):
    """One rule for every tool: the command ran and found an input that is not there."""
    result = _invoke(tmp_path, *MISSING_INPUTS[command])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.lower().startswith("error:")]
    assert len(errors) == 1 and "missing" in errors[0], result.output
    out = tmp_path / "out"
    assert not out.exists() or not any(out.iterdir())  # nothing written (pretrain checks --output first)


@pytest.mark.parametrize("command", sorted(REFUSED_VALUES))
def test_a_refused_value_is_a_usage_error_exit_2_before_anything_is_read(command, tmp_path):
    """A value the settings refuse wins over the missing input: nothing was looked at yet."""
    result = _invoke(tmp_path, *REFUSED_VALUES[command])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "missing" not in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["pipelines", "wordpiece"])
def test_every_package_runs_as_python_m(name):
    """``python -m NAME`` is the same command as ``NAME`` (click names it ``python -m NAME``); pretrain,
    finetune and chain run that way in the end-to-end tests, torchrun and ``make demo`` already."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-m", name, "--version"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"python -m {name} {importlib.metadata.version('bert-pretraining')}"


@pytest.mark.parametrize("args", [[], ["export"], ["params"]], ids=["pretrain", "export", "params"])
def test_pretrain_help_fits_a_screen_and_points_to_its_doc(args):
    result = CliRunner().invoke(CLIS["pretrain"], [*args, "--help"], prog_name="pretrain", terminal_width=80)
    lines = result.output.rstrip().splitlines()
    assert result.exit_code == 0 and len(lines) <= 40, result.output
    assert lines[-1].strip().endswith("docs/pretrain.md")
