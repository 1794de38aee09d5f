"""Every JSON field ``finetune`` reads is typed. A SQuAD v2 ``"is_impossible": "false"`` (a
string, as some converters write it) must not turn an answerable question into an unanswerable
one; a lone surrogate and a tampered ``metrics.json`` read by ``finetune report`` are inputs too.
Booleans are booleans or the documented strings; any other type is one line naming the file, the
record and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from finetune.encoder import load_encoder
from finetune.squad import read_squad
from schemas.commands import InputError
from tests.faults.finetune_inputs import invoke
from tests.unit.test_finetune_common import hf_folder

CONTEXT = "Denver won the game in 2016."


def _squad(path: Path, **fields) -> str:
    qa = {"id": "q1", "question": "Who won?", "answers": [{"text": "Denver", "answer_start": 0}], **fields}
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": CONTEXT, "qas": [qa]}]}]}))
    return str(path)


@pytest.mark.parametrize(
    ("value", "impossible"),
    [(False, False), ("false", False), ("False", False), ("0", False), (True, True), ("true", True)],
)
def test_is_impossible_as_a_boolean_or_its_documented_strings(value, impossible, tmp_path):
    answers = [] if impossible else [{"text": "Denver", "answer_start": 0}]
    examples, stats = read_squad(_squad(tmp_path / "train.json", is_impossible=value, answers=answers), "2.0")
    assert examples[0].is_impossible is impossible and stats.num_impossible == int(impossible)
    assert (examples[0].answer_text is None) is impossible


def test_an_answerable_string_false_question_is_scored_as_answerable(tmp_path):
    data = _squad(tmp_path / "dev.json", is_impossible="false")
    (tmp_path / "predictions.json").write_text(json.dumps({"q1": "Denver"}))
    code, errors, _ = invoke(
        [
            "evaluate",
            "squad",
            "--version",
            "2.0",
            "--data-file",
            data,
            "--predictions",
            str(tmp_path / "predictions.json"),
        ]
    )
    assert code == 0 and not errors


BAD_SQUAD = {
    "is_impossible 'maybe'": (
        {"is_impossible": "maybe"},
        "question 'q1': the field 'is_impossible' is 'maybe', not a boolean",
    ),
    "is_impossible 1": (
        {"is_impossible": 1},
        "question 'q1': the field 'is_impossible' is a int, not bool or str",
    ),
    "answer_start '0'": (
        {"answers": [{"text": "Denver", "answer_start": "0"}]},
        "question 'q1', answer 0: the field 'answer_start' is a str, not int",
    ),
    "answer_start true": (
        {"answers": [{"text": "Denver", "answer_start": True}]},
        "question 'q1', answer 0: the field 'answer_start' is a bool, not int",
    ),
    "question null": ({"question": None}, "question 'q1': the field 'question' is a NoneType, not str"),
    "answers an object": (
        {"answers": {"text": "Denver"}},
        "question 'q1': the field 'answers' is a dict, not list",
    ),
    "a lone surrogate": ({"question": "\ud800?"}, "holds a lone UTF-16 surrogate"),
}


@pytest.mark.parametrize("case", sorted(BAD_SQUAD))
@pytest.mark.parametrize("command", ["squad", "evaluate squad"])
def test_a_wrong_type_in_squad_is_one_line_naming_file_question_and_field(command, case, tmp_path):
    fields, said = BAD_SQUAD[case]
    data = _squad(tmp_path / "data.json", **fields)
    if command == "squad":
        args = ["squad", "--version", "2.0", "--train-file", data, "--predict-file", data]
        args += ["--checkpoint", str(tmp_path / "none"), "--output", str(tmp_path / "out")]
    else:
        args = ["evaluate", "squad", "--version", "2.0", "--data-file", data, "--predictions", data]
    code, errors, seconds = invoke(args)
    assert code == 1 and len(errors) == 1, errors
    assert errors[0].startswith(f"error: {data}: ") and said in errors[0], errors[0]
    assert seconds < 10


BAD_PREDICTIONS = {
    "a list": (["Denver"], "a JSON list; give one object mapping each question id to an answer string"),
    "a number as an answer": ({"q1": 7}, "the field 'q1' is a int, not str"),
    "not JSON": ("{", "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(BAD_PREDICTIONS))
def test_a_wrong_prediction_file_is_one_line_naming_it(case, tmp_path):
    content, said = BAD_PREDICTIONS[case]
    data = _squad(tmp_path / "dev.json")
    predictions = tmp_path / "predictions.json"
    predictions.write_text(content if isinstance(content, str) else json.dumps(content))
    args = ["evaluate", "squad", "--version", "1.1", "--data-file", data, "--predictions", str(predictions)]
    code, errors, _ = invoke(args)
    assert code == 1 and len(errors) == 1 and errors[0].startswith(f"error: {predictions}: {said}"), errors


def test_null_odds_must_be_numbers(tmp_path):
    data = _squad(tmp_path / "dev.json")
    (tmp_path / "p.json").write_text(json.dumps({"q1": "Denver"}))
    (tmp_path / "odds.json").write_text(json.dumps({"q1": "high"}))
    args = [
        "evaluate",
        "squad",
        "--version",
        "2.0",
        "--data-file",
        data,
        "--predictions",
        str(tmp_path / "p.json"),
    ]
    code, errors, _ = invoke([*args, "--null-odds", str(tmp_path / "odds.json")])
    assert code == 1 and errors == [
        f"error: {tmp_path / 'odds.json'}: the field 'q1' is a str, not int or float"
    ]


TAMPERED = {
    "a list": ("[1, 2]", "a list where a JSON object is expected"),
    "task a number": ('{"task": 5}', "the field 'task' is a int, not str"),
    "dev a string": ('{"task": "mrpc", "dev": "high"}', "the field 'dev' is a str, not dict"),
    "f1 a string": (
        '{"task": "mrpc", "dev": {"f1": "0.9"}}',
        "dev: the field 'f1' is a str, not int or float",
    ),
    "f1 missing": ('{"task": "cola", "dev": {"accuracy": 0.7}}', "dev: the field 'mcc' is missing"),
    "sd a list": (
        '{"task": "mrpc", "dev": {"f1": 0.9}, "dev_sd": [0]}',
        "the field 'dev_sd' is a list, not dict",
    ),
    "squad f1 a string": (
        '{"task": "squad", "version": "1.1", "f1": "88"}',
        "scores: the field 'f1' is a str",
    ),
    "nested a million deep": ("[" * 1_000_000 + "]" * 1_000_000, "JSON nested too deeply"),
    "not UTF-8": (b'{"task": "\xff"}', "not UTF-8 at byte 10"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_metrics_json_is_one_line_naming_it_and_what_to_do(case, tmp_path):
    content, said = TAMPERED[case]
    metrics = tmp_path / "run" / "metrics.json"
    metrics.parent.mkdir()
    metrics.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, errors, seconds = invoke(["report", str(metrics.parent), "--output", str(tmp_path / "report")])
    assert code == 1 and len(errors) == 1, errors
    assert errors[0].startswith(f"error: {metrics}") and said in errors[0], errors[0]
    assert errors[0].endswith("rerun that fine-tuning or leave it out"), errors[0]
    assert seconds < 10 and not (tmp_path / "report" / "results.md").exists()


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("trainer.json", '{"cased": "yes"}', "the field 'cased' is 'yes', not a boolean"),
        ("trainer.json", "[1, 2]", "a list where a JSON object is expected"),
        (
            "tokenizer_config.json",
            '{"do_lower_case": 1}',
            "the field 'do_lower_case' is a int, not bool or str",
        ),
    ],
)
def test_a_checkpoints_casing_is_typed(name, content, said, tmp_path):
    folder = hf_folder(tmp_path / "hf")
    (folder / name).write_text(content)
    with pytest.raises(InputError, match=f"{name}: {said}"):
        load_encoder(str(folder))
    assert load_encoder(str(folder), cased=True).cased is True  # --cased/--uncased reads neither
