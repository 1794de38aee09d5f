"""``run_squad`` end to end on the real SQuAD v1.1 and v2.0 fixtures from the real MiniLM weights."""

from __future__ import annotations

import json

import pytest
import torch

from finetune.squad import SquadConfig, evaluate_file, run_squad
from schemas import storage
from tests.conftest import SHARED_DATA, require

pytestmark = pytest.mark.slow
WINDOWS = {"max_seq_length": 96, "doc_stride": 48, "max_query_length": 24, "progress": False}

FIXTURES = {
    "1.1": SHARED_DATA / "squad" / "allennlp-models_test_fixtures_squad.json",
    "2.0": SHARED_DATA / "squad" / "allennlp-models_test_fixtures_squad2.json",
}


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def read(path):
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_run_squad_writes_what_the_official_evaluation_reproduces(
    version, minilm_folder, tmp_path, two_threads
):
    data = str(require(FIXTURES[version]))
    out = tmp_path / "out"
    config = SquadConfig(epochs=1, batch_size=16, **WINDOWS)
    metrics = run_squad(version, data, data, str(minilm_folder), storage.Folder(out), config)
    assert read(out / "metrics.json") == json.loads(json.dumps(metrics))
    predictions = read(out / "predictions.json")
    nbest = read(out / "nbest_predictions.json")
    questions = [qa for a in read(FIXTURES[version])["data"] for p in a["paragraphs"] for qa in p["qas"]]
    ids = {qa["id"] for qa in questions}
    assert set(predictions) == set(nbest) == ids
    contexts = {
        qa["id"]: p["context"]
        for a in read(FIXTURES[version])["data"]
        for p in a["paragraphs"]
        for qa in p["qas"]
    }
    for qid, entries in nbest.items():
        assert 1 <= len(entries) <= (20 if version == "1.1" else 21)  # v2.0 may add "" to the 20
        assert sum(e["probability"] for e in entries) == pytest.approx(1.0)
        assert all(set(e) == {"text", "probability", "start_logit", "end_logit"} for e in entries)
        assert all(e["text"] in contexts[qid] for e in entries)  # spans of the context ("" included)
    train, predict = metrics["train"], metrics["predict"]
    assert train["num_examples_used"] == len(questions) and train["num_features"] >= len(questions)
    assert train["steps"] == 1 and train["num_examples_bad_offset"] == 0
    assert predict["num_examples_predicted"] == len(questions) and predict["num_features"] > len(questions)

    assert metrics["span_head"] == "fresh"
    if version == "1.1":
        # The saved model restores encoder and span head: predicting from it gives the same answers.
        again = run_squad(
            version,
            None,
            data,
            str(out / "model"),
            storage.Folder(tmp_path / "again"),
            SquadConfig(**WINDOWS),
        )
        assert again["span_head"] == "from the checkpoint"
        assert read(tmp_path / "again" / "predictions.json") == predictions
        assert set(metrics) >= {"exact_match", "f1"}
        assert evaluate_file(version, data, str(out / "predictions.json")) == {
            "exact_match": metrics["exact_match"],
            "f1": metrics["f1"],
            "total": len(questions),
            "unanswered": 0,
        }
        assert all(text for text in predictions.values())
        return
    null_odds = read(out / "null_odds.json")
    assert set(null_odds) == ids
    for qid, text in predictions.items():
        assert text == ("" if null_odds[qid] > 0 else nbest[qid][0]["text"] or nbest[qid][1]["text"])
    official = evaluate_file(version, data, str(out / "predictions.json"), str(out / "null_odds.json"))
    # The fixture repeats one id (its unanswerable question, then an answerable one): scored once, and said.
    repeated = {"num_duplicate_ids": 1, "duplicate_ids": predict["duplicate_ids"]}
    assert official == metrics["threshold_0"] | repeated and predict["num_duplicate_ids"] == 1
    assert official["total"] == len(ids) == len(questions) - 1
    tuned = metrics["tuned_threshold"]
    threshold = tuned.pop("null_score_diff_threshold")
    assert evaluate_file(version, data, str(out / "predictions_tuned_threshold.json")) == tuned | repeated
    # Tuned for F1 on this very file: never below threshold 0's F1.
    assert tuned["f1"] >= evaluate_file(version, data, str(out / "predictions.json"))["f1"]
    assert isinstance(threshold, float)


def test_bad_offsets_are_reported_and_subsets_scored(minilm_folder, tmp_path, two_threads):
    real = read(require(FIXTURES["1.1"]))
    real["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 3  # now points elsewhere
    train = tmp_path / "train.json"
    train.write_text(json.dumps(real), encoding="utf-8")
    out = tmp_path / "out"
    config = SquadConfig(epochs=1, max_train_examples=2, max_eval_examples=2, **WINDOWS)
    metrics = run_squad(
        "1.1", str(train), str(FIXTURES["1.1"]), str(minilm_folder), storage.Folder(out), config
    )
    assert metrics["train"]["num_examples_bad_offset"] == 1
    assert metrics["train"]["bad_offset_ids"] == ["5733be284776f41900661182"]
    assert metrics["train"]["num_examples_used"] == 1 and metrics["train"]["num_examples_skipped"] == 1
    assert metrics["predict"]["num_examples_predicted"] == 2
    assert len(read(out / "predictions.json")) == 2
    assert not (out / "null_odds.json").exists()


def test_bad_settings_are_all_listed():
    problems = SquadConfig(doc_stride=0, max_seq_length=32).problems()
    assert problems == [
        "--doc-stride must be at least 1, got 0",
        "--max-seq-length 32 leaves no room for the context after a question of up to --max-query-length 64 "
        "tokens: lower --max-query-length",
    ]
