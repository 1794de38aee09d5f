"""docs/pretrain.md states the trainer's constants as the code has them: the figures of the page are
checked here, not typed and forgotten."""

from __future__ import annotations

from pathlib import Path

from pretrain import config, optim
from pretrain.data import ShardLoader
from schemas.commands import MAX_SEED
from wordpiece.tokenizer import UNK_WARN_SHARE

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "pretrain.md").read_text(encoding="utf-8")


def test_the_page_states_the_divergence_rule_as_the_code_has_it():
    skips = optim.MAX_FP16_SKIPS
    assert f"{skips} steps in a row whose gradients overflow" in PAGE
    assert f"after {skips} it has\nfallen {2**skips:,}-fold" in PAGE


def test_the_page_states_the_ranges_and_limits_as_the_code_has_them():
    assert config.RANGES["lr"] == (0.0, 1.0, False, True) and "a learning rate outside (0, 1]" in PAGE
    assert config.RANGES["weight_decay"][:2] == (0.0, 1.0) and "a weight decay outside [0, 1]" in PAGE
    assert config.RANGES["decay_power"][:2] == (0.0, 10.0) and "`--decay-power` outside [0, 10]" in PAGE
    assert config.RANGES["num_workers"][1] == 64 and "more than 64 workers" in PAGE
    assert f"a seed outside 0 … {MAX_SEED}" in PAGE
    assert f"more than {UNK_WARN_SHARE:.0%}" in PAGE
    assert ShardLoader.__init__.__kwdefaults__["timeout_s"] == 600.0 and "sends nothing for 600 s" in PAGE


def test_the_page_names_every_preset_with_its_shape():
    for name, (layers, hidden) in config.PRESETS.items():
        assert f"`{name}` {layers}/{hidden}" in PAGE, name
