"""The chain's resume rules and the derived task, on stand-in stages."""

from __future__ import annotations

import json
import sys

import pytest

from chain.run import Stage, StageFailed, run_chain
from chain.task import pairs
from schemas import storage


def _stage(name: str, folder, text: str, upstream: tuple[str, ...] = ()) -> Stage:
    out = folder / name
    code = f"import pathlib; p = pathlib.Path({str(out)!r}); p.mkdir(exist_ok=True); (p / 'COMPLETED').write_text({text!r})"
    return Stage(
        name, f"stage {name}", str(out), [sys.executable, "-c", code], str(out / "COMPLETED"), upstream
    )


def _plan(folder, b_text: str = "b") -> list[Stage]:
    return [_stage("a", folder, "a"), _stage("b", folder, b_text, ("a",)), _stage("c", folder, "c", ("b",))]


def test_a_rerun_skips_complete_stages_and_redoes_changed_ones(tmp_path):
    lines: list[str] = []
    state = run_chain(_plan(tmp_path), storage.Folder(tmp_path), log=lines.append)
    assert [n for n in state] == ["a", "b", "c"]
    assert all(state[n]["seconds"] >= 0 and state[n]["peak_rss_mb"] > 1 for n in state)
    assert json.loads((tmp_path / "chain.json").read_text()) == state

    lines.clear()
    again = run_chain(_plan(tmp_path), storage.Folder(tmp_path), log=lines.append)
    assert all("complete, skipped" in line for line in lines if line.startswith("=="))
    assert again == state

    # a stage whose settings changed is redone, and so is everything after it
    lines.clear()
    changed = run_chain(_plan(tmp_path, b_text="b2"), storage.Folder(tmp_path), log=lines.append)
    skipped = [line.split()[3].rstrip(":") for line in lines if "skipped" in line]
    assert skipped == ["a"] and changed["c"]["finished"] >= state["c"]["finished"]
    assert (tmp_path / "b" / "COMPLETED").read_text() == "b2" and changed["b"]["key"] != state["b"]["key"]
    assert changed["c"]["key"] != state["c"]["key"]  # its upstream ran again

    # an output that went missing is redone even with the same settings
    (tmp_path / "c" / "COMPLETED").unlink()
    lines.clear()
    run_chain(_plan(tmp_path, b_text="b2"), storage.Folder(tmp_path), log=lines.append)
    assert [line.split()[3].rstrip(":") for line in lines if "skipped" in line] == ["a", "b"]


def test_a_failing_stage_names_its_command_and_passes_on_its_exit_status(tmp_path):
    bad = Stage(
        "bad", "a failing stage", str(tmp_path / "bad"), [sys.executable, "-c", "raise SystemExit(3)"]
    )
    with pytest.raises(StageFailed, match=r"stage bad failed \(exit 3\): .*SystemExit\(3\)") as failed:
        run_chain([bad], storage.Folder(tmp_path), log=lambda line: None)
    assert failed.value.exit_code == 3
    assert json.loads((tmp_path / "chain.json").read_text())["bad"]["failed"] == 3


def test_derived_pairs_are_balanced_and_negatives_cross_documents():
    documents = [
        (f"d{k}", [f"document {k} sentence number {i} has several words" for i in range(12)])
        for k in range(4)
    ]
    rows = pairs(documents, limit=1000, seed=7)
    assert rows == pairs(documents, limit=1000, seed=7)
    assert sum(r[0] for r in rows) == len(rows) // 2 == 4 * 11
    for label, id1, id2, _first, _second in rows:
        doc1, doc2 = id1.split(":")[0], id2.split(":")[0]
        if label:
            assert doc1 == doc2 and int(id2.split(":")[1]) == int(id1.split(":")[1]) + 1
        else:
            assert doc1 != doc2
    assert len(pairs(documents, limit=10, seed=7)) == 10
    assert pairs(documents[:1], limit=10, seed=7) == []


def test_a_corpus_in_json_lines_or_parquet_is_a_documents_stage_feeding_the_corpus():
    from chain.plan import ChainConfig, plan

    options = ("--title-field=title", "--group-rows=100")
    cfg = ChainConfig(workdir="w", documents="hub/*.parquet", documents_options=options, books="books")
    stages = {stage.name: stage for stage in plan(cfg)}
    assert "wikipedia" not in stages and stages["corpus"].upstream == ("books", "documents")
    assert stages["documents"].command[1:] == [
        *"documents --num-shards 4 --overwrite".split(),
        *options,
        *("--input", "hub/*.parquet", "--output", "w/corpus/documents"),
    ]
    corpus = ["--input", "w/corpus/books", "--input", "w/corpus/documents", "--output", "w/corpus/all"]
    assert stages["corpus"].command[-6:] == corpus
    assert ChainConfig(workdir="w").problems()[0] == "give --wiki-dump or --documents"


def test_the_reports_majority_baseline_is_the_tasks_main_metric(tmp_path):
    """The fine-tuning section reads the baseline the task table names: MNLI's on dev_matched."""
    from pathlib import Path

    from chain.report import build

    outputs = {k: str(tmp_path / k) for k in ("corpus", "vocab", "shards", "run", "finetune")}
    outputs |= dict.fromkeys(("wiki", "books", "documents"), "")
    (tmp_path / "finetune").mkdir()
    baseline = {"dev_matched": {"accuracy": 0.25}, "dev_mismatched": {"accuracy": 0.5}}
    metrics = {"task": "mnli", "dev": {"matched_accuracy": 0.75}, "majority_baseline": baseline}
    (tmp_path / "finetune" / "metrics.json").write_text(json.dumps(metrics))
    report = Path(build(outputs, {}, str(tmp_path))["markdown"]).read_text()
    assert "| matched_accuracy | 0.75 |" in report
    assert "Majority-class baseline (matched_accuracy): 0.25" in report
