"""`pipelines examples --format packed` end to end on the enwiki corpus, and pre-training on it."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.dataset as ds
import pytest

from tests.e2e.conftest import FAST_RUNNER, read_output, run_cli
from wordpiece.tokenizer import WordPieceTokenizer

pytestmark = pytest.mark.slow

CLS, SEP = 101, 102


@pytest.fixture(scope="module")
def packed_output(corpus_output, released_vocab, tmp_path_factory):
    out = tmp_path_factory.mktemp("packed") / "seq64"
    run_cli(
        "examples",
        "--corpus",
        str(corpus_output),
        "--vocab",
        released_vocab,
        "--output",
        str(out),
        "--format",
        "packed",
        "--max-seq-length",
        "64",
        "--dupe-factor",
        "2",
        "--num-shards",
        "2",
        "--num-buckets",
        "4",
        *FAST_RUNNER,
    )
    return out


def test_packed_shards_hold_every_token_once_per_pass(packed_output, corpus_output, released_vocab):
    tokenizer = WordPieceTokenizer.load(released_vocab, cased=False)
    tokenizer.tokenizer.encode_special_tokens = True  # as the pipeline: "[SEP]" in text is text
    _, _, tables = read_output(corpus_output)
    corpus_tokens: Counter = Counter()
    for row in tables["train"].select(["sentences"]).to_pylist():
        for ids in tokenizer.encode_batch(row["sentences"]):
            corpus_tokens.update(ids)
    rows = ds.dataset(str(packed_output / "examples"), format="ipc").to_table().to_pylist()
    per_pass: dict[int, Counter] = {0: Counter(), 1: Counter()}
    separators = 0
    for row in rows:
        ids = list(row["input_ids"])
        assert len(ids) == row["num_tokens"] == row["num_tokens_a"] <= 64
        assert row["next_sentence_labels"] == 0 and ids[0] == CLS and ids[-1] == SEP
        assert len(row["masked_lm_positions"]) <= 20
        for position, original in zip(row["masked_lm_positions"], row["masked_lm_ids"], strict=True):
            ids[position] = original
        assert CLS not in ids[1:]
        separators += ids[1:-1].count(SEP)
        per_pass[row["dupe_index"]].update(t for t in ids[1:-1] if t != SEP)
    assert per_pass[0] == per_pass[1] == corpus_tokens  # every token, exactly once per pass
    stats = json.loads((packed_output / "stats.json").read_text())
    assert stats["format"] == "packed" and stats["random_next_rate"] is None
    assert stats["examples"] == len(rows) and stats["document_separators"] == separators > 0
    # Packing fills examples: on average to within about a sentence of the maximum length.
    mean_length = sum(len(r["input_ids"]) for r in rows) / len(rows)
    assert mean_length > 0.7 * 64, mean_length
    assert abs(stats["masked_share_mask"] - 0.8) < 0.03
    manifest = json.loads((packed_output / "manifest.json").read_text())
    assert manifest["params"]["format"] == "packed"


def test_pretrain_refuses_nsp_on_packed_shards_and_trains_without_it(packed_output, tmp_path):
    from pretrain.config import PretrainConfig
    from pretrain.train import train
    from schemas.commands import InputError

    settings = dict(
        shards=str(packed_output),
        config="1/64/2",
        global_batch_size=8,
        max_steps=6,
        warmup_steps=1,
        save_steps=6,
        precision="fp32",
        num_workers=0,
        log_steps=3,
    )
    with pytest.raises(InputError, match=r"packed shards \(--format packed\) .* add --no-nsp"):
        train(PretrainConfig(output=str(tmp_path / "nsp"), **settings))
    assert not (tmp_path / "nsp" / "checkpoints").exists()
    train(PretrainConfig(output=str(tmp_path / "mlm"), nsp=False, **settings))
    records = [json.loads(line) for line in (tmp_path / "mlm" / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["split"] == "train"]
    assert train_records and all(r["nsp_loss"] == 0.0 for r in train_records)
    assert (tmp_path / "mlm" / "checkpoints" / "step-00000006" / "COMMITTED").exists()
