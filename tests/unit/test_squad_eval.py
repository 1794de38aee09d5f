"""SQuAD's official EM/F1 (v1.1 and v2.0) against hand-computed values."""

from __future__ import annotations

import json

import pytest

from finetune.squad import evaluate_file
from finetune.squad_eval import (
    best_threshold,
    evaluate_v1,
    evaluate_v2,
    exact_match_v1,
    f1_v1,
    f1_v2,
    has_answer_by_id,
    normalize_answer,
    raw_scores_v2,
    tune_null_threshold,
)
from schemas.commands import CommandError


def squad_data(*questions: tuple[str, list[str]]) -> list[dict]:
    """A ``data`` list with one paragraph holding ``(id, gold texts)`` questions."""
    qas = [
        {"id": qid, "question": "?", "answers": [{"text": t, "answer_start": 0} for t in golds]}
        for qid, golds in questions
    ]
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("The Cat!", "cat"),
        ("  An  apple,\ta day ", "apple day"),
        ("theater and anthem", "theater and anthem"),  # articles only as whole words
        ("U.S.-based", "usbased"),  # punctuation removed, not replaced by a space
        ("A", ""),
        ("Ünïcode «quotes»", "ünïcode «quotes»"),  # only ASCII punctuation goes
    ],
)
def test_normalize_answer(text, normalised):
    assert normalize_answer(text) == normalised


def test_exact_match_and_f1_by_hand():
    assert exact_match_v1("The Cat!", "cat") == 1.0
    assert exact_match_v1("cats", "cat") == 0.0
    # pred {big, red, dog}, gold {red, dog, barked}: 2 shared, P = R = 2/3.
    assert f1_v1("the big red dog", "a red dog barked") == pytest.approx(2 / 3)
    # Counts are clipped: pred red red dog vs gold red dog share 2; P = 2/3, R = 1, F1 = 0.8.
    assert f1_v1("red red dog", "red dog") == pytest.approx(0.8)
    # 1 shared of 1 predicted and 4 gold tokens: P = 1, R = 1/4, F1 = 0.4.
    assert f1_v1("Broncos", "the Denver Broncos football team") == pytest.approx(0.4)
    assert f1_v1("Denver", "Carolina Panthers") == 0.0


def test_empty_answers_differ_between_versions():
    assert exact_match_v1("", "") == 1.0
    assert f1_v1("", "") == 0.0  # v1.1: no tokens, no F1
    assert f1_v2("", "") == 1.0  # v2.0: both say "no answer"
    assert f1_v2("The", "") == 1.0  # "the" normalises to nothing
    assert f1_v2("cat", "") == 0.0
    assert f1_v2("", "cat") == 0.0


def test_evaluate_v1_takes_max_over_golds_and_counts_missing_as_zero():
    data = squad_data(
        ("q1", ["Denver Broncos", "the Broncos"]),  # pred "Broncos!": EM 1 via the second gold
        ("q2", ["the Denver Broncos football team"]),  # pred "Broncos": F1 0.4
        ("q3", ["1858"]),  # no prediction: 0
    )
    result = evaluate_v1(data, {"q1": "Broncos!", "q2": "Broncos"})
    assert result["exact_match"] == pytest.approx(100 / 3)
    assert result["f1"] == pytest.approx(100 * 1.4 / 3)
    assert result["total"] == 3 and result["unanswered"] == 1


def v2_case() -> tuple[list[dict], dict[str, str], dict[str, float]]:
    data = squad_data(("q1", ["Denver Broncos"]), ("q2", ["1858"]), ("q3", []), ("q4", []))
    predictions = {"q1": "Broncos", "q2": "1858", "q3": "", "q4": "Paris"}
    null_odds = {"q1": -2.0, "q2": 3.0, "q3": 0.5, "q4": 2.0}
    return data, predictions, null_odds


def test_evaluate_v2_without_null_odds():
    data, predictions, _ = v2_case()
    # q1 F1 2/3 (P 1, R 1/2), q2 1, q3 1 (both empty), q4 0.
    assert evaluate_v2(data, predictions) == pytest.approx(
        {
            "exact": 50.0,
            "f1": 100 * (2 / 3 + 2) / 4,
            "total": 4,
            "HasAns_exact": 50.0,
            "HasAns_f1": 100 * (2 / 3 + 1) / 2,
            "HasAns_total": 2,
            "NoAns_exact": 50.0,
            "NoAns_f1": 50.0,
            "NoAns_total": 2,
            "unanswered": 0,
        }
    )


def test_evaluate_v2_with_null_odds_applies_the_default_threshold_and_searches():
    data, predictions, null_odds = v2_case()
    result = evaluate_v2(data, predictions, null_odds)
    # Odds above 1.0 count as "": q2 (has an answer) drops to 0, q4 (has none) rises to 1.
    assert result["exact"] == pytest.approx(50.0)
    assert result["f1"] == pytest.approx(100 * (2 / 3 + 2) / 4)
    assert result["HasAns_f1"] == pytest.approx(100 * (2 / 3) / 2)
    assert result["NoAns_exact"] == pytest.approx(100.0)
    # The script's search, from "all null" (2 of 4 right) in order q1, q3, q4, q2:
    # F1 2 -> 2 2/3 (best, at q1's -2) -> 2 2/3 -> 1 2/3 -> 2 2/3; EM never beats 2.
    assert result["best_f1"] == pytest.approx(100 * (8 / 3) / 4)
    assert result["best_f1_thresh"] == -2.0
    assert result["best_exact"] == pytest.approx(50.0)
    assert result["best_exact_thresh"] == 0.0


def test_v2_gold_answers_that_normalise_to_nothing_mean_no_answer():
    data = squad_data(("q1", ["the", "."]))
    exact, f1 = raw_scores_v2(data, {"q1": ""})
    assert exact == {"q1": 1.0} and f1 == {"q1": 1.0}
    assert has_answer_by_id(data) == {"q1": True}  # still counted under HasAns, as the script does


def test_v2_repeated_id_keeps_the_last_question():
    data = squad_data(("q1", []), ("q1", ["Paris"]))
    assert evaluate_v2(data, {"q1": "Paris"}) == {
        "exact": 100.0,
        "f1": 100.0,
        "total": 1,
        "HasAns_exact": 100.0,
        "HasAns_f1": 100.0,
        "HasAns_total": 1,
        "unanswered": 0,
    }


def test_v2_counts_a_missing_prediction_as_zero_in_the_total():
    data, predictions, null_odds = v2_case()
    del predictions["q3"]  # unanswerable: "" would have scored 1
    result = evaluate_v2(data, predictions)
    # q1 F1 2/3, q2 1, q3 missing 0, q4 0: out of 4, not 3.
    assert result["total"] == 4 and result["unanswered"] == 1
    assert result["exact"] == pytest.approx(25.0)
    assert result["f1"] == pytest.approx(100 * (2 / 3 + 1) / 4)
    assert result["NoAns_total"] == 2 and result["NoAns_exact"] == 0.0
    # With null odds (q3's odds present but no prediction): q3 stays 0 at every threshold.
    searched = evaluate_v2(data, predictions, null_odds)
    assert searched["total"] == 4 and searched["unanswered"] == 1
    # All null over the answered: q4 right (1); then q1 (+2/3, best), q4 (-1), q2 (+1) -> F1 best 5/3 of 4.
    assert searched["best_f1"] == pytest.approx(100 * (5 / 3) / 4)
    assert searched["best_f1_thresh"] == -2.0


def test_v2_missing_null_odds_is_an_error():
    data, predictions, null_odds = v2_case()
    del null_odds["q3"]
    with pytest.raises(ValueError, match="q3"):
        evaluate_v2(data, predictions, null_odds)


def test_best_threshold_all_null_start():
    data = squad_data(("q1", []), ("q2", ["x"]))
    scores = {"q1": 0.0, "q2": 0.0}
    assert best_threshold({"q1": "y", "q2": "z"}, scores, {"q1": 1.0, "q2": 2.0}, has_answer_by_id(data)) == (
        50.0,
        0.0,
    )


def test_tune_null_threshold_by_hand():
    data, _, null_odds = v2_case()
    best_non_null = {"q1": "Broncos", "q2": "1858", "q3": "Paris", "q4": "Paris"}
    # All null: 2. Answer q1 (-2): 2 2/3 (best); + q3 (0.5): 1 2/3; + q4 (2): 2/3; + q2 (3): 1 2/3.
    assert tune_null_threshold(data, best_non_null, null_odds) == -2.0
    # If q3's and q4's answers were right the best is answering everything: threshold q2's 3.0.
    right = {**best_non_null, "q3": "", "q4": ""}
    assert tune_null_threshold(data, right, null_odds) == 3.0


def test_tune_null_threshold_when_answering_nothing_is_best():
    data = squad_data(("q1", []), ("q2", []))
    assert tune_null_threshold(data, {"q1": "a b", "q2": "c"}, {"q1": 0.5, "q2": 4.0}) == -0.5


def test_tune_null_threshold_treats_equal_odds_together():
    # q1 right, q2 wrong, equal odds: answering both (1 of 2 right) does not beat answering none
    # (1 of 2), so the threshold stays below both odds.
    data = squad_data(("q1", ["x"]), ("q2", []))
    assert tune_null_threshold(data, {"q1": "x", "q2": "y"}, {"q1": 1.0, "q2": 1.0}) == 0.0
    # Without the tie, q1 alone would be answered: 2 of 2 right at threshold 1.0.
    assert tune_null_threshold(data, {"q1": "x", "q2": "y"}, {"q1": 1.0, "q2": 1.5}) == 1.0


def write(path, obj) -> str:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return str(path)


def test_evaluate_file_round_trip(tmp_path):
    data, predictions, null_odds = v2_case()
    data_file = write(tmp_path / "dev.json", {"version": "v2.0", "data": data})
    preds = write(tmp_path / "predictions.json", predictions)
    odds = write(tmp_path / "null_odds.json", null_odds)
    assert evaluate_file("2.0", data_file, preds, odds) == evaluate_v2(data, predictions, null_odds)
    assert evaluate_file("2.0", data_file, preds) == evaluate_v2(data, predictions)
    v1_data = squad_data(("q1", ["Denver Broncos"]), ("q2", ["1858"]))
    v1_file = write(tmp_path / "dev1.json", {"data": v1_data})
    assert evaluate_file("1.1", v1_file, preds) == {
        "exact_match": 50.0,
        "f1": pytest.approx(100 * (5 / 3) / 2),
        "total": 2,
        "unanswered": 0,
    }


def test_evaluate_file_names_the_bad_file(tmp_path):
    data, predictions, _ = v2_case()
    good = write(tmp_path / "dev.json", {"data": data})
    preds = write(tmp_path / "predictions.json", predictions)
    broken = json.loads(json.dumps(data))
    del broken[0]["paragraphs"][0]["qas"][1]["id"]
    bad = write(tmp_path / "bad.json", {"data": broken})
    with pytest.raises(
        CommandError, match=r"bad\.json: data\[0\]\.paragraphs\[0\]\.qas\[1\]: the field 'id' is missing"
    ):
        evaluate_file("2.0", bad, preds)
    listed = write(tmp_path / "list.json", ["Broncos"])
    with pytest.raises(
        CommandError, match=r"list\.json: a JSON list; give one object mapping each question id"
    ):
        evaluate_file("2.0", good, listed)
    with pytest.raises(CommandError, match=r"missing\.json: no such file"):
        evaluate_file("2.0", str(tmp_path / "missing.json"), preds)
    with pytest.raises(CommandError, match="the top level: the field 'data' is missing"):
        evaluate_file("1.1", write(tmp_path / "nodata.json", {"version": "1.1"}), preds)
    numbers = write(tmp_path / "numbers.json", {**predictions, "q1": 3})
    with pytest.raises(CommandError, match=r"numbers\.json: the field 'q1' is a int, not str"):
        evaluate_file("2.0", good, numbers)
