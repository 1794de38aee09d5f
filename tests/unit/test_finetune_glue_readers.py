"""GLUE readers on the real task files and layout samples in ../shared/data, and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from finetune.glue_tasks import TASKS, get_task, read_split, read_task, read_tsv
from schemas.commands import CommandError
from tests.conftest import SHARED_DATA, require

GLUE = SHARED_DATA / "glue"
SAMPLES = SHARED_DATA / "glue_format_samples"
SAMPLE_DIRS = {
    "sst2": "sst2/dummy_data/SST-2",
    "qqp": "qqp/dummy_data/QQP",
    "mnli": "mnli/dummy_data/MNLI",
    "qnli": "qnli/dummy_data/QNLI",
    "rte": "rte/dummy_data/RTE",
    "wnli": "wnli/dummy_data/WNLI",
}


def test_cola_real_folder_no_header_train_dev_header_test():
    data = read_task(TASKS["cola"], str(require(GLUE / "CoLA")))
    assert (len(data.train), len(data.dev["dev"]), len(data.test["test"])) == (8551, 1043, 1063)
    first = data.train[0]
    assert first.text_a.startswith("Our friends won't buy this analysis")
    assert first.text_b is None and first.label == "1"
    assert {e.label for e in data.train} == {"0", "1"}
    assert data.test["test"][0].index == "0" and data.test["test"][0].label is None
    assert data.test["test"][0].text_a == "Bill whistled past the house."


def test_mrpc_real_folder_bom_header_and_quotes_kept_as_text():
    data = read_task(TASKS["mrpc"], str(require(GLUE / "MRPC")))
    assert (len(data.train), len(data.dev["dev"]), len(data.test["test"])) == (3668, 408, 1725)
    dev0 = data.dev["dev"][0]
    assert dev0.label == "1"
    # A stray opening quote with no closing one: CSV quoting would swallow the following rows.
    assert dev0.text_b.startswith('"The foodservice pie business')
    assert data.train[0].guid.endswith("train.tsv:2")
    assert data.test["test"][1724].index == "1724"


def test_stsb_real_folder_scores_are_floats():
    data = read_task(TASKS["stsb"], str(require(GLUE / "STS-B")))
    assert (len(data.train), len(data.dev["dev"]), len(data.test["test"])) == (5749, 1500, 1379)
    assert data.dev["dev"][0].label == 5.0 and data.dev["dev"][1].label == 4.75
    assert all(0.0 <= e.label <= 5.0 for e in data.train)
    assert data.dev["dev"][0].text_b == "A man wearing a hard hat is dancing."


@pytest.mark.parametrize("task", sorted(SAMPLE_DIRS))
def test_layout_samples_of_every_other_task(task: str):
    folder = require(SAMPLES / SAMPLE_DIRS[task])
    spec = TASKS[task]
    data = read_task(spec, str(folder))
    assert data.train and all(e.label in spec.labels for e in data.train)
    assert set(data.dev) == set(spec.dev) and all(data.dev.values())
    assert set(data.test) == set(spec.test)
    for examples in data.test.values():
        assert examples and all(e.label is None and e.text_a for e in examples)
    if spec.text_b:
        assert all(e.text_b for e in data.train)


def test_mnli_gold_label_is_found_by_name_in_both_dev_layouts():
    folder = require(SAMPLES / SAMPLE_DIRS["mnli"])
    data = read_task(TASKS["mnli"], str(folder))
    # train has label1 + gold_label, dev has label1..label5 + gold_label: both end in gold_label.
    for path in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"):
        rows = read_tsv(str(folder / path))
        header = rows[0][1]
        examples = read_split(TASKS["mnli"], str(folder / path), labelled=True)
        assert [e.label for e in examples] == [r[1][header.index("gold_label")] for r in rows[1:]]
    assert data.dev["dev_matched"][0].text_a == "The new rights are nice enough"


def test_diagnostic_set_with_mnli(tmp_path: Path):
    folder = require(SAMPLES / SAMPLE_DIRS["mnli"])
    ax = require(SAMPLES / "ax" / "dummy_data" / "ax.tsv")
    data = read_task(TASKS["mnli"], str(folder), diagnostic_file=str(ax))
    assert data.test["diagnostic"][0].text_b == "The cat did not sit on the mat."
    with pytest.raises(CommandError, match="--task mnli"):
        read_task(TASKS["rte"], str(require(SAMPLES / SAMPLE_DIRS["rte"])), diagnostic_file=str(ax))


def test_task_names():
    assert get_task("STS-B").name == "stsb" and get_task("SST2").name == "sst2"
    with pytest.raises(CommandError, match="unknown GLUE task"):
        get_task("squad")


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_missing_column_names_file_and_line(tmp_path: Path):
    path = _write(
        tmp_path / "train.tsv", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tonly one\n"
    )
    with pytest.raises(CommandError, match=r"train\.tsv:3: 2 tab-separated fields, no column 'sentence2'"):
        read_split(TASKS["rte"], path, labelled=True)


def test_header_without_a_needed_column(tmp_path: Path):
    path = _write(tmp_path / "dev.tsv", "index\tpremise\thypothesis\tlabel\n0\ta\tb\tentailment\n")
    with pytest.raises(CommandError, match=r"dev\.tsv:1: the header has no column 'sentence1'"):
        read_split(TASKS["rte"], path, labelled=True)


def test_label_outside_the_task_set(tmp_path: Path):
    path = _write(tmp_path / "train.tsv", "gj04\t1\t\tfine.\ngj04\t2\t*\tbad.\n")
    with pytest.raises(CommandError, match=r"train\.tsv:2: label '2' is not one of 0, 1 \(CoLA\)"):
        read_split(TASKS["cola"], path, labelled=True)
    path = _write(tmp_path / "s.tsv", "sentence1\tsentence2\tscore\na\tb\t5.5\n")
    with pytest.raises(CommandError, match=r"s\.tsv:2: score '5.5' is not a number in \[0, 5\]"):
        read_split(TASKS["stsb"], path, labelled=True)


def test_crlf_bom_blank_lines_and_unicode_separators(tmp_path: Path):
    text = "\ufeffsentence\tlabel\r\nit 's \u2028 fine \x0c ok \t1\r\n\r\nbad\t0\r\n"
    path = _write(tmp_path / "train.tsv", text)
    examples = read_split(TASKS["sst2"], path, labelled=True)
    assert [e.label for e in examples] == ["1", "0"]
    assert examples[0].text_a == "it 's \u2028 fine \x0c ok "
    assert examples[1].guid.endswith(":4")


def test_missing_folder_is_a_clear_error(tmp_path: Path):
    with pytest.raises(CommandError, match=r"train\.tsv not found: --data-dir must be the MRPC folder"):
        read_task(TASKS["mrpc"], str(tmp_path))
