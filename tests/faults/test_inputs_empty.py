"""An empty split: ``finetune glue`` on a header-only dev.tsv trained for the whole run and then
died with an IndexError. Every command now refuses an empty training or scoring split before any
model is loaded: one line naming the file, exit 1, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults.finetune_inputs import inputs, invoke
from tests.unit.test_finetune_common import hf_folder

EMPTY = {
    "glue dev.tsv": ("index\tsentence1\tsentence2\tlabel\n", "no examples; give a file with at least one"),
    "glue train.tsv": ("index\tsentence1\tsentence2\tlabel\n", "no examples; give a file with at least one"),
    "swag --train-file": (
        ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n",
        "no examples; give a file with at least one",
    ),
    "squad --predict-file": (json.dumps({"data": []}), "no examples; give a file with at least one"),
    "ner train.txt": ("-DOCSTART- -X- O O\n\n", "no sentences"),
}


@pytest.mark.parametrize("command", sorted(EMPTY))
def test_an_empty_split_is_refused_before_any_model_is_loaded(command, tmp_path: Path):
    bert = str(hf_folder(tmp_path / "hf"))
    args, bad = inputs(tmp_path, bert)[command]
    content, said = EMPTY[command]
    bad.write_text(content)
    code, errors, seconds = invoke(args)
    assert code == 1 and errors == [f"error: {bad}: {said}"], errors
    assert seconds < 10 and not (tmp_path / "out" / "metrics.json").exists()
