"""``finetune features`` on a tiny encoder made in code (a pretrain run folder): the vectors equal
the model's own hidden states recomputed here, the layers are the ones asked for, pieces map to
their words, long lines are windowed, and the Arrow output round-trips through its manifest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from finetune.cli import main
from finetune.encoder import load_encoder
from finetune.extract import ExtractSettings, extract_features, read_features, vectors, word_indices
from pretrain import checkpoint as ckpt
from pretrain.model import BertConfig, BertForPreTraining
from schemas import COMPLETED_FILE, MANIFEST_FILE, storage
from schemas.commands import CommandError, InputError

WORDS = "the a cat dog sat on mat play walk".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "##ing", "##s", ",", "."]
LAYERS = 3
TEXT = [
    "the cat sat on the mat .",
    "",
    "dogs playing, walks",  # dog ##s | play ##ing | , | walk ##s
    "zebra the cat",  # an unknown word: [UNK]
]


def run_folder(root: Path) -> Path:
    """A pretrain run with one complete checkpoint: what --checkpoint RUN resolves."""
    config = BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=16,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=128,
    )
    url = ckpt.step_url(str(root), 5)
    BertForPreTraining(config, seed=3).save_pretrained(Path(url))
    (Path(url) / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    ckpt.save_state({"step": 5, "cased": False}, storage.Folder(url), ckpt.TRAINER_STATE)
    ckpt.commit(storage.Folder(url), 5)
    return root


def expected_states(encoder, line: str) -> list[torch.Tensor]:
    """Recompute one line's hidden states with the model's own modules (no hooks): the embeddings,
    then each layer."""
    model = encoder.model.eval()
    special = encoder.tokenizer.special_ids()
    ids = torch.tensor([[special["[CLS]"], *encoder.tokenizer.encode(line), special["[SEP]"]]])
    with torch.no_grad():
        x = model.embeddings(ids, torch.zeros_like(ids))
        states = [x]
        for layer in model.encoder.layer:
            x = layer(x, None)
            states.append(x)
        last, _ = model(ids)
    torch.testing.assert_close(states[-1], last)  # the recomputation is the model's forward
    return [s[0] for s in states]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return run_folder(tmp_path / "run")


@pytest.fixture
def text(tmp_path: Path) -> Path:
    path = tmp_path / "text.txt"
    path.write_text("\n".join(TEXT) + "\n")
    return path


def test_vectors_equal_the_models_hidden_states(run, text, tmp_path):
    settings = ExtractSettings(layers="-1,0,-2", max_seq_length=32, batch_size=2, device="cpu")
    stats = extract_features(str(run), str(text), str(tmp_path / "out"), settings)
    manifest, table = read_features(str(tmp_path / "out"))
    assert manifest.params["layers"] == [-1, 0, -2] and manifest.params["layers_absolute"] == [3, 0, 2]
    assert manifest.params["checkpoint"].endswith("step-00000005")
    assert manifest.params["input_sha256"] == hashlib.sha256(text.read_bytes()).hexdigest()
    assert stats["num_lines"] == 4 and stats["num_empty_lines"] == 1 and stats["num_split_lines"] == 0
    rows = table.to_pylist()
    assert sorted({r["layer"] for r in rows}) == [-2, -1, 0]
    matrix = vectors(table)
    assert matrix.dtype == np.float32 and matrix.shape == (len(rows), 16)
    np.testing.assert_array_equal(matrix[7], np.array(rows[7]["vector"], dtype=np.float32))
    encoder = load_encoder(str(run))
    for number, line in enumerate(TEXT):
        states = expected_states(encoder, line)
        mine = [r for r in rows if r["line"] == number]
        assert len(mine) == states[0].shape[0] * 3
        assert [r["layer"] for r in mine[:3]] == [-1, 0, -2]  # token-major, layers as asked
        for r in mine:
            want = states[r["layer"] % (LAYERS + 1)][r["token_index"]]
            np.testing.assert_allclose(r["vector"], want.numpy(), rtol=0, atol=1e-5)
    assert stats["num_rows"] == len(rows) == sum(len(expected_states(encoder, t)[0]) for t in TEXT) * 3


def test_tokens_map_to_their_words(run, text, tmp_path):
    extract_features(str(run), str(text), str(tmp_path / "out"), ExtractSettings(layers="-1", device="cpu"))
    _, table = read_features(str(tmp_path / "out"))
    line2 = [r for r in table.to_pylist() if r["line"] == 2]
    assert [(r["token"], r["word_index"]) for r in line2] == [
        ("[CLS]", -1),
        ("dog", 0),
        ("##s", 0),
        ("play", 1),
        ("##ing", 1),
        (",", 1),
        ("walk", 2),
        ("##s", 2),
        ("[SEP]", -1),
    ]
    assert [r["token_index"] for r in line2] == list(range(9))
    line3 = [r["token"] for r in table.to_pylist() if r["line"] == 3]
    assert line3 == ["[CLS]", "[UNK]", "the", "cat", "[SEP]"]
    assert [r["token"] for r in table.to_pylist() if r["line"] == 1] == ["[CLS]", "[SEP]"]
    assert word_indices("  a  bc d", [(2, 3), (5, 6), (6, 7), (8, 9)]) == [0, 1, 1, 2]


def test_long_lines_are_windowed_and_each_piece_keeps_its_most_context_vector(run, tmp_path):
    words = (WORDS * 4)[:30]
    path = tmp_path / "long.txt"
    path.write_text(" ".join(words) + "\n")
    settings = ExtractSettings(layers="-1", max_seq_length=12, stride=4, device="cpu")
    stats = extract_features(str(run), str(path), str(tmp_path / "out"), settings)
    assert stats["num_split_lines"] == 1 and stats["num_windows"] > 1
    _, table = read_features(str(tmp_path / "out"))
    rows = table.to_pylist()
    assert [r["token_index"] for r in rows] == list(range(32))  # every piece once, [CLS] + 30 + [SEP]
    assert [r["word_index"] for r in rows[1:-1]] == list(range(30))
    # Windows of 10 pieces start at 0, 4, 8, 12, 16, 20. Piece 16 has min(left, right) context 1
    # in the window from 8, 4 in the one from 12 and 0 in the one from 16: its vector is the one
    # of the window 12..21, computed here alone, and not that of the window 8..17.
    encoder = load_encoder(str(run))
    special = encoder.tokenizer.special_ids()

    def window_vectors(start: int) -> np.ndarray:
        ids = [
            special["[CLS]"],
            *encoder.tokenizer.encode(" ".join(words[start : start + 10])),
            special["[SEP]"],
        ]
        with torch.no_grad():
            return encoder.model.eval()(torch.tensor([ids]))[0][0].numpy()

    np.testing.assert_allclose(rows[1 + 16]["vector"], window_vectors(12)[1 + 4], rtol=0, atol=1e-5)
    assert np.abs(np.array(rows[1 + 16]["vector"]) - window_vectors(8)[1 + 8]).max() > 1e-3
    np.testing.assert_allclose(rows[0]["vector"], window_vectors(0)[0], rtol=0, atol=1e-5)  # [CLS]
    np.testing.assert_allclose(rows[-1]["vector"], window_vectors(20)[-1], rtol=0, atol=1e-5)  # [SEP]


def test_output_is_refused_unless_overwrite_and_damage_is_detected(run, text, tmp_path):
    out = tmp_path / "out"
    settings = ExtractSettings(layers="-1", device="cpu")
    extract_features(str(run), str(text), str(out), settings)
    with pytest.raises(CommandError, match="holds the 4 file.*`finetune features` run.*--overwrite"):
        extract_features(str(run), str(text), str(out), settings)
    extract_features(str(run), str(text), str(out), ExtractSettings(layers="0", device="cpu"), overwrite=True)
    manifest, table = read_features(str(out))
    assert set(table.column("layer").to_pylist()) == {0} and len(manifest.shards) == 1
    (out / "notes.txt").write_text("mine")
    with pytest.raises(CommandError, match="no `finetune features` run recorded writing \\(notes.txt"):
        extract_features(str(run), str(text), str(out), settings, overwrite=True)
    (out / "notes.txt").unlink()
    shard = out / manifest.shards[0].path
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(CommandError, match="does not match manifest.json"):
        read_features(str(out))
    (out / COMPLETED_FILE).unlink()
    with pytest.raises(CommandError, match="no COMPLETED"):
        read_features(str(out))


def test_cli_writes_shards_and_names_bad_flags(run, text, tmp_path):
    out = tmp_path / "cli"
    args = [
        "features",
        "--checkpoint",
        str(run),
        "--input",
        str(text),
        "--output",
        str(out),
        "--device",
        "cpu",
    ]
    result = CliRunner().invoke(main, [*args, "--layers", "-1,-2"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / MANIFEST_FILE).read_text())["params"]["layers"] == [-1, -2]
    assert (out / COMPLETED_FILE).exists()
    bad = CliRunner().invoke(main, [*args, "--overwrite", "--layers", "-5"])
    assert (
        bad.exit_code == 1
        and "--layers -5: [-5] out of range" in bad.output
        and "Traceback" not in bad.output
    )
    assert (out / COMPLETED_FILE).exists()  # refused before the earlier run was touched
    bad = CliRunner().invoke(main, [*args, "--max-seq-length", "2", "--batch-size", "0"])
    assert bad.exit_code == 2 and "--max-seq-length" in bad.output and "--batch-size" in bad.output
    missing = CliRunner().invoke(main, [*args[:4], str(tmp_path / "nope.txt"), *args[5:], "--overwrite"])
    assert missing.exit_code == 1 and "nope.txt not found" in missing.output


def test_the_features_schema_refuses_bad_rows():
    from schemas.features import features_format

    fmt = features_format(2)
    good = {
        "line": 0,
        "token": "[CLS]",
        "token_index": 0,
        "word_index": -1,
        "layer": -1,
        "vector": [0.5, 1.0],
    }
    assert fmt.to_table([good]).column("vector").type.list_size == 2
    with pytest.raises(InputError, match="word_index must be -1"):
        fmt.to_table([{**good, "word_index": -2}])
    with pytest.raises(InputError, match="do not fit"):
        fmt.to_table([{**good, "vector": [0.5]}])


def test_a_failed_run_leaves_neither_shards_nor_marker(run, tmp_path, monkeypatch):
    import finetune.extract as extract

    monkeypatch.setattr(extract, "LINES_PER_CHUNK", 2)  # a shard per two lines ...
    path = tmp_path / "bad.txt"
    path.write_bytes(("\n".join(TEXT) + "\n").encode() + b"the \xff cat\n")  # ... then line 5 is not UTF-8
    settings = ExtractSettings(layers="-1", device="cpu", max_shard_bytes=1)
    with pytest.raises(CommandError, match=r"bad.txt:5: not UTF-8"):
        extract_features(str(run), str(path), str(tmp_path / "new"), settings)
    assert not (tmp_path / "new").exists()  # the two shards written first are gone with the folder
    (tmp_path / "mine").mkdir()
    with pytest.raises(CommandError, match="not UTF-8"):
        extract_features(str(run), str(path), str(tmp_path / "mine"), settings)
    assert (tmp_path / "mine").is_dir() and not list((tmp_path / "mine").iterdir())
