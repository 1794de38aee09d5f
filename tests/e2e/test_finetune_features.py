"""``finetune features`` on the real MiniLM weights equals transformers: the same tokens (its
``BertTokenizerFast``) and the same vectors (``BertModel(..., output_hidden_states=True)``) for the
layers asked for, through the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from finetune.cli import main
from finetune.extract import read_features

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

LINES = [
    "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
    "Unbelievably, the committee's re-evaluation took three years!",
    "",
    "Short.",
]


def test_vectors_equal_transformers_hidden_states(minilm_folder, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "feats"
    args = ["features", "--checkpoint", str(minilm_folder), "--input", str(text), "--output", str(out)]
    result = CliRunner().invoke(main, [*args, "--layers", "-1,-4,0", "--device", "cpu", "--batch-size", "2"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output[result.output.index("{") :])["num_lines"] == len(LINES)
    manifest, table = read_features(str(out))
    assert manifest.params["hidden_size"] == 384 and manifest.params["layers_absolute"] == [6, 3, 0]
    rows = table.to_pylist()

    tokenizer = transformers.BertTokenizerFast.from_pretrained(str(minilm_folder))
    model = transformers.BertModel.from_pretrained(str(minilm_folder)).eval()
    for number, line in enumerate(LINES):
        batch = tokenizer(line, return_tensors="pt")
        with torch.no_grad():
            states = model(**batch, output_hidden_states=True).hidden_states
        mine = [r for r in rows if r["line"] == number]
        tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
        assert [r["token"] for r in mine[::3]] == tokens
        for r in mine:
            want = states[r["layer"] % 7][0, r["token_index"]].numpy()
            np.testing.assert_allclose(r["vector"], want, rtol=0, atol=2e-5)
    words = [r["word_index"] for r in rows if r["line"] == 1 and r["layer"] == -1]
    assert words[0] == words[-1] == -1 and words[1:-1] == sorted(words[1:-1]) and max(words) == 6
