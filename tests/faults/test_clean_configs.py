"""Model configs checked against the weights before anything is allocated (``pretrain.hf``): an HF
``config.json`` with 100,000 layers over weights that hold 2, a checkpoint's ``config.json`` with
a width of 10^9 (its commit record rebuilt to match), configs and headers of the wrong shape. Each
is one line naming the file, in every place a model config is read: ``pretrain --init-from``,
``pretrain --resume``, ``pretrain export``, ``finetune --checkpoint`` (a run, an HF folder, the
``OUT/model/`` of an earlier fine-tuning)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from finetune.cli import main as finetune
from finetune.encoder import load_encoder
from pretrain import checkpoint as ckpt
from pretrain import hf
from pretrain.cli import main as pretrain
from pretrain.model import BertConfig, BertForPreTraining
from schemas import storage
from schemas.commands import CommandError
from tests.unit.test_finetune_common import VOCAB, hf_folder, tiny_model


def _forbid_models(monkeypatch) -> None:
    """From now on, fail the test if a model is made: the refusal must come before any tensor."""

    def refuse(self, *args, **kwargs):
        raise AssertionError("a model was built from a config that does not fit its weights")

    monkeypatch.setattr(BertForPreTraining, "__init__", refuse)


def _edit_config(folder: Path, **fields) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **fields}))


def _run_folder(root: Path) -> tuple[Path, Path]:
    """A run with one committed checkpoint of the tiny model; returns the run and the checkpoint."""
    run = root / "run"
    url = ckpt.step_url(str(run), 3)
    tiny_model().save_pretrained(url)
    (Path(url) / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    ckpt.save_state(
        {"step": 3, "tokens_seen": 0, "cased": False, "train_config": {}}, storage.Folder(url), "trainer"
    )
    ckpt.commit(storage.Folder(url), 3)
    return run, Path(url)


@pytest.mark.parametrize("nsp", [True, False])
def test_the_expected_shapes_are_those_of_the_model(nsp):
    config = BertConfig.preset("3/64/4", 50, nsp=nsp, max_position_embeddings=40, type_vocab_size=3)
    with torch.device("meta"):  # shapes only, no memory
        model = BertForPreTraining(config)
    shapes = {
        k: tuple(v.shape) for k, v in model.state_dict().items() if k != "cls.predictions.decoder.weight"
    }
    for name in ("bert.embeddings.word_embeddings.weight", "cls.predictions.bias"):  # padded rows inside
        shapes[name] = (50, *shapes[name][1:])
    assert hf.expected_shapes(config) == shapes


def test_an_hf_config_with_100000_layers_is_refused_before_a_model_exists(tmp_path, monkeypatch):
    folder = hf_folder(tmp_path / "hf")
    _edit_config(folder, num_hidden_layers=100_000)
    _forbid_models(monkeypatch)
    with pytest.raises(CommandError) as caught:
        load_encoder(str(folder))
    assert str(caught.value) == (
        f"--checkpoint {folder}: {folder}/config.json does not fit {folder}/model.safetensors: it says "
        "num_hidden_layers 100,000 where the weights hold 2: give the config.json saved with these weights"
    )


def _one_error(cli, args) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    errors = [line for line in result.output.splitlines() if line.lower().startswith("error")]
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert len(errors) == 1, result.output
    return errors[0]


def test_a_checkpoint_config_with_a_width_of_1e9_is_one_line_in_export_and_finetune(tmp_path, monkeypatch):
    run, url = _run_folder(tmp_path)
    _edit_config(url, hidden_size=10**9, intermediate_size=4 * 10**9)
    ckpt.commit(storage.Folder(str(url)), 3)  # the hashes rebuilt to match: only the shapes can tell
    _forbid_models(monkeypatch)
    said = (
        f"{url}/config.json does not fit {url}/model.safetensors: it says hidden_size 1,000,000,000 where "
        "the weights hold 32, intermediate_size 4,000,000,000 where the weights hold 64"
    )
    (tmp_path / "in.txt").write_text("the movie\n")
    assert said in _one_error(pretrain, ["export", "--checkpoint", run, "--output", tmp_path / "export"])
    features = ["features", "--checkpoint", run, "--input", tmp_path / "in.txt", "--output", tmp_path / "f"]
    assert said in _one_error(finetune, features)


def test_pretrain_resume_and_init_from_check_the_config_first(shards, vocab, tmp_path, monkeypatch):
    run, url = _run_folder(tmp_path)
    _edit_config(url, num_hidden_layers=100_000)
    ckpt.commit(storage.Folder(str(url)), 3)
    folder = tmp_path / "hf"  # over the shards' vocabulary, so that only the config is wrong
    config = BertConfig(
        len(Path(vocab).read_text().splitlines()),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
    )
    BertForPreTraining(config).save_pretrained(folder)
    (folder / "vocab.txt").write_text(Path(vocab).read_text())
    _edit_config(folder, num_hidden_layers=1)  # fewer layers than stored: the extra ones are refused too
    _forbid_models(monkeypatch)
    line = _one_error(pretrain, ["--shards", shards, "--resume", run, "--max-steps", "9"])
    assert line.endswith(
        "it says num_hidden_layers 100,000 where the weights hold 2: give the config.json saved with these weights"
    )
    assert line.startswith(f"error: --resume {run}: {url}/config.json does not fit")
    line = _one_error(pretrain, ["--shards", shards, "--init-from", folder, "--output", tmp_path / "o"])
    assert line.startswith(f"error: --init-from {folder}: {folder}/config.json does not fit")
    assert "it says num_hidden_layers 1 where the weights hold 2" in line


def test_a_fine_tuned_model_folder_is_checked_the_same_way(tmp_path, monkeypatch):
    folder = hf_folder(tmp_path / "ft" / "model")
    weights = hf.read_weights(folder)[0] | {
        "classifier.weight": torch.zeros(2, 32),
        "classifier.bias": torch.zeros(2),
    }
    import safetensors.torch

    safetensors.torch.save_file(weights, folder / "model.safetensors")
    _edit_config(folder, max_position_embeddings=10**12, finetuning_task="rte", id2label={"0": "a", "1": "b"})
    _forbid_models(monkeypatch)
    with pytest.raises(
        CommandError, match=r"max_position_embeddings 1,000,000,000,000 where the weights hold 64"
    ):
        load_encoder(str(folder))


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("[1, 2]", "config.json: holds a JSON list, not an object"),
        ("{not json", "config.json: not valid JSON"),
        (
            '{"vocab_size": 22}',
            "config.json: cannot load this BERT config: missing hidden_size, num_attention_heads, num_hidden_layers",
        ),
        (
            '{"vocab_size": 22, "hidden_size": null, "num_hidden_layers": 2, "num_attention_heads": 2}',
            "hidden_size must be a positive integer, got None",
        ),
        (
            '{"vocab_size": "22", "hidden_size": 32, "num_hidden_layers": "2", "num_attention_heads": 2}',
            "vocab_size must be a positive integer, got '22'",
        ),
    ],
)
def test_a_config_of_the_wrong_shape_is_one_line_naming_it(tmp_path, monkeypatch, content, said):
    folder = hf_folder(tmp_path / "hf")
    (folder / "config.json").write_text(content)
    _forbid_models(monkeypatch)
    with pytest.raises(CommandError) as caught:
        load_encoder(str(folder))
    assert f"{folder}/config.json" in str(caught.value) and said in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_oversized_config_is_not_read(tmp_path, monkeypatch):
    folder = hf_folder(tmp_path / "hf")
    monkeypatch.setattr(hf, "MAX_JSON_BYTES", 100)
    with pytest.raises(CommandError, match=r"config.json: \d+ bytes, more than any config \(100\); not read"):
        load_encoder(str(folder))


def _header(entries: dict, data: bytes = b"") -> bytes:
    header = json.dumps(entries).encode()
    return struct.pack("<Q", len(header)) + header + data


@pytest.mark.parametrize(
    ("entries", "data", "said"),
    [
        (
            {"a": {"dtype": "F32", "shape": [10**9, 10**9], "data_offsets": [0, 8]}},
            b"\0" * 8,
            "a of shape [1000000000, 1000000000] does not fit bytes 0-8 of 8",
        ),
        (
            {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
            b"\0" * 8,
            "a of shape [4] does not fit bytes 0-16 of 8",
        ),
        (
            {"a": {"dtype": "F99", "shape": [2], "data_offsets": [0, 8]}},
            b"\0" * 8,
            "the entry of a is not a dtype, shape and data_offsets",
        ),
        (
            {"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}},
            b"\0" * 8,
            "the entry of a is not a dtype",
        ),
        ([1], b"", "its header is not a JSON object"),
    ],
)
def test_a_safetensors_header_that_promises_more_than_its_file_is_refused(tmp_path, entries, data, said):
    folder = hf_folder(tmp_path / "hf")
    (folder / "model.safetensors").write_bytes(_header(entries, data))
    with pytest.raises(ValueError, match="not a valid safetensors file") as caught:
        hf.stored_shapes(folder)
    assert said in str(caught.value)


def test_a_sharded_index_naming_a_file_outside_the_folder_is_refused(tmp_path):
    folder = hf_folder(tmp_path / "hf")
    (folder / "model.safetensors").rename(tmp_path / "elsewhere.safetensors")
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"x": "../elsewhere.safetensors"}})
    )
    with pytest.raises(
        ValueError, match=r"shard '../elsewhere.safetensors' is not a file name in the folder"
    ):
        hf.stored_shapes(folder)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["x"]}))
    with pytest.raises(ValueError, match="no weight_map of tensor names to shard files"):
        hf.read_weights(folder)


def test_a_damaged_tokenizer_config_is_one_line(tmp_path):
    folder = hf_folder(tmp_path / "hf")
    (folder / "tokenizer_config.json").write_text("{oops")
    with pytest.raises(CommandError, match=r"tokenizer_config.json: not valid JSON"):
        load_encoder(str(folder))


def test_a_new_model_larger_than_the_machine_is_one_line_before_it_is_allocated(
    shards, tmp_path, monkeypatch
):
    """``--config L/H/A`` makes a new model from the command line alone: its weights, gradients and
    optimizer state are sized against the device's memory before any tensor exists."""
    _forbid_models(monkeypatch)
    out = tmp_path / "out"
    line = _one_error(
        pretrain, ["--shards", shards, "--output", out, "--config", "1000/8192/64", "--max-steps", "1"]
    )
    assert line.startswith("error: --config 1000/8192/64: 805,")
    assert "M parameters, whose weights, gradients and AdamW state alone take" in line
    assert line.endswith("GiB of this CPU's memory; choose a smaller --config")
    assert not (out / "COMPLETED").exists()


def test_the_memory_check_counts_16_bytes_a_parameter_over_the_padded_vocabulary():
    from pretrain.model import parameter_counts, training_state_bytes
    from pretrain.startup import check_fits
    from schemas.commands import InputError

    config = BertConfig.preset("base", 30522)
    padded = BertConfig.preset("base", 30528)  # 30522 rounded up to a multiple of 64
    assert training_state_bytes(config) == 16 * parameter_counts(padded)["total"]
    check_fits(config, "base", torch.device("cpu"), memory=training_state_bytes(config))  # fits exactly
    with pytest.raises(
        InputError, match=r"^--config base: 110M parameters, .* take 1\.6 GiB, more than all 1\.0 GiB"
    ):
        check_fits(config, "base", torch.device("cpu"), memory=2**30)
