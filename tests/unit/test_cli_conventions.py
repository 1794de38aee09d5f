"""Conventions every CLI keeps: ``--version``, and exit codes 0 (ok), 1 (failure), 2 (usage)."""

from __future__ import annotations

import importlib.metadata

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
    from pretrain.config import TrainConfig

    flags = {param.name for param in CLIS["pretrain"].params} | {"compile"}
    fields = set(TrainConfig.__dataclass_fields__) - {"adam_beta1", "adam_beta2", "adam_eps"}
    assert fields <= flags, f"TrainConfig fields without a pretrain flag: {sorted(fields - flags)}"


def test_schedule_steps_reaches_the_config_and_is_checked_there(tmp_path):
    result = CliRunner().invoke(
        CLIS["pretrain"],
        ["--shards", str(tmp_path), "--output", str(tmp_path / "run"), "--max-steps", "10"]
        + ["--schedule-steps", "5"],
        prog_name="pretrain",
    )
    assert result.exit_code == 1
    assert "--schedule-steps 5 must be at least --max-steps 10" in result.output
