"""`chain ablate`: the grid, its stages, the GPU preset's plan and refusal, and the report builder on
runs written in code."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from click.testing import CliRunner

from chain.ablate import PRESETS, AblationConfig, grid, series_steps, stages
from chain.ablate_report import build_report, finetune_value, format_cell, summarise
from chain.cli import main
from tests.conftest import SHARED_DATA, require

REFERENCE = "/models/minilm"


def _cfg(
    tmp_path, preset: str = "quick", ner: bool = True, reference: str | None = REFERENCE
) -> AblationConfig:
    return AblationConfig(
        str(tmp_path), PRESETS[preset], "dump.xml.bz2", ner_dir="conll" if ner else None, reference=reference
    )


def _cell(g, table: str, row: str, column: str = "task") -> list[str]:
    return next(c for c in g.cells if (c["table"], c["row"], c["column"]) == (table, row, column))[
        "finetunes"
    ]


def test_the_quick_grid_fills_every_row_of_every_table_and_shares_the_base_run(tmp_path):
    g = grid(_cfg(tmp_path))
    assert {c["table"] for c in g.cells} == {"5", "6", "7", "8", "fig5"}
    rows5 = [c["row"] for c in g.cells if c["table"] == "5"]
    assert rows5 == ["BERT_BASE", "No NSP", "No NSP, packed sentences (ours)", "LTR & No NSP", "+ BiLSTM"]
    # "+ BiLSTM" fine-tunes the LTR run (no run of its own) with --bilstm; the others without.
    assert {g.finetunes[f].run for f in _cell(g, "5", "+ BiLSTM")} == {"ltr-s12345"}
    assert all(g.finetunes[f].bilstm for f in _cell(g, "5", "+ BiLSTM"))
    assert not any(g.finetunes[f].bilstm for f in _cell(g, "5", "LTR & No NSP"))
    base = _cell(g, "5", "BERT_BASE")
    assert base == _cell(g, "8", "80% / 10% / 10%") == _cell(g, "6", "4/128/4")  # the base is 4 layers
    assert {g.finetunes[f].seed for f in base} == {12345, 12346}  # two fine-tuning seeds
    assert len(g.runs) == 11 and g.runs["ltr-s12345"].flags == ("--objective", "ltr")
    assert g.runs["base-s12345"].config == "4/128/4" and g.runs["L1-128-2-s12345"].config == "1/128/2"
    # Table 7: every row, ours and the reference checkpoint's, two seeds each
    rows7 = ["Fine-tuning: BERT_BASE"] + [f"Feature-based: {f}" for f in PRESETS["quick"].ner_features]
    for column in ("ner", "reference"):
        assert [c["row"] for c in g.cells if c["table"] == "7" and c["column"] == column] == rows7
    concat = _cell(g, "7", "Feature-based: concat-last-4", "reference")
    assert [g.finetunes[f].run for f in concat] == ["reference"] * 2
    assert _cell(g, "8", "80% / 10% / 10%", "ner-features") == _cell(
        g, "7", "Feature-based: concat-last-4", "ner"
    )
    assert g.missing["7"] == ["Fine-tuning: BERT_LARGE (the study pre-trains one base size)"]


def test_without_ner_data_or_a_reference_the_report_says_what_is_left_out(tmp_path):
    g = grid(_cfg(tmp_path, ner=False))
    assert not [c for c in g.cells if c["table"] == "7"] and all(
        f.task == "glue" for f in g.finetunes.values()
    )
    assert "no --ner-dir" in g.missing["7"][0] and "no --ner-dir" in g.missing["8"][0]
    g = grid(_cfg(tmp_path, reference=None))
    assert not [c for c in g.cells if c["column"] == "reference"]
    assert "the reference column: no --reference checkpoint was given" in g.missing["7"]


def test_stages_run_the_switches_and_fine_tune_the_checkpoints(tmp_path):
    cfg = _cfg(tmp_path)
    plan = stages(cfg, grid(cfg))
    names = [s.name for s in plan]
    assert names[:6] == ["wikipedia", "corpus", "vocab", "examples", "examples-validation", "task"]
    assert len(names) == len(set(names))
    by_name = {s.name: s for s in plan}
    packed = by_name["ablate/examples-packed"].command
    assert packed[packed.index("--format") + 1] == "packed" and "--overwrite" in packed
    mix = by_name["ablate/examples-mask-0-20-80"].command
    assert mix[mix.index("--mask-share") + 1 :][:5] == ["0.0", "--keep-share", "0.2", "--random-share", "0.8"]
    nonsp = by_name["ablate/pretrain/no-nsp-packed-s12345"]
    assert "--no-nsp" in nonsp.command and nonsp.upstream == ("ablate/examples-packed", "examples-validation")
    assert nonsp.command[nonsp.command.index("--shards") + 1].endswith("ablations/shards/packed-seq128")
    base = by_name["ablate/pretrain/base-s12345"].command
    assert base[base.index("--save-steps") + 1] == "100" and base[base.index("--keep-checkpoints") + 1] == "4"
    ft = by_name["ablate/finetune/base-s12345/glue-step100-s12345"]  # a Figure-5 point
    assert ft.command[ft.command.index("--checkpoint") + 1].endswith("base-s12345/checkpoints/step-00000100")
    assert ft.upstream == ("ablate/pretrain/base-s12345", "task")
    bilstm = by_name["ablate/finetune/ltr-s12345/glue-bilstm-step300-s12345"]
    assert "--bilstm" in bilstm.command and "--bilstm" not in ft.command
    feats = by_name["ablate/finetune/base-s12345/ner-sum-all-step300-s12345"].command
    assert feats[feats.index("--features") + 1] == "sum-all" and "--lr" not in feats  # the command's own
    assert feats[feats.index("--feature-cache") + 1].endswith("ablations/feature-cache")
    reference = by_name["ablate/finetune/reference/ner-step0-s12346"]
    assert reference.command[reference.command.index("--checkpoint") + 1] == REFERENCE
    assert reference.command[reference.command.index("--lr") + 1] == "0.0001" and reference.upstream == ()
    assert series_steps(PRESETS["quick"]) == [100, 200, 300]
    assert series_steps(replace(PRESETS["quick"], steps=10, series_points=3)) == [3, 6, 9, 10]


def test_a_given_corpus_replaces_the_corpus_stages(tmp_path):
    cfg = AblationConfig(str(tmp_path), PRESETS["smoke"], corpus="gs://b/corpus/")
    plan = stages(cfg, grid(cfg))
    assert "wikipedia" not in [s.name for s in plan] and "corpus" not in [s.name for s in plan]
    vocab = next(s for s in plan if s.name == "vocab")
    assert vocab.command[vocab.command.index("--corpus") + 1] == "gs://b/corpus"
    assert (
        "give --wiki-dump (to build the corpus) or --corpus"
        in AblationConfig("w", PRESETS["smoke"]).problems()[0]
    )


def test_books_join_the_corpus_as_in_the_demo(tmp_path):
    cfg = AblationConfig(str(tmp_path), PRESETS["quick"], "dump.xml.bz2", books="gutenberg")
    plan = {s.name: s for s in stages(cfg, grid(cfg))}
    assert plan["books"].command[plan["books"].command.index("--input") + 1] == "gutenberg/*.txt"
    assert plan["corpus"].command.count("--input") == 2 and plan["corpus"].upstream == ("wikipedia", "books")
    refused = AblationConfig("w", PRESETS["smoke"], corpus="c", books="gutenberg").problems()
    assert refused == ["--books goes into the corpus the study builds, not into a given --corpus"]


def test_summaries_are_mean_and_sample_std_and_a_difference_below_the_spreads_is_within_noise():
    assert summarise([70.0, 72.0, None]) == {"mean": 71.0, "std": 2.0**0.5, "n": 2, "of": 3}
    assert format_cell(summarise([70.0, 72.0, None])) == "71.0 ± 1.4 (n=2 of 3)"
    assert format_cell(summarise([64.25])) == "64.2"
    assert format_cell(summarise([None, None])) == "not run"
    first = summarise([70.0, 72.0])
    assert format_cell(summarise([72.0, 73.0]), first) == "72.5 ± 0.7 (n=2); Δ +1.5 *within noise*"
    assert format_cell(summarise([80.0, 81.0]), first) == "80.5 ± 0.7 (n=2); Δ +9.5"
    assert format_cell(summarise([80.0]), summarise([70.0])) == "80.0; Δ +10.0 *no spread*"


def _write_runs(cfg: AblationConfig, g, accuracy_of) -> None:
    """Metrics as finished runs write them: fine-tuning metrics.json and pre-training metrics.jsonl."""
    for name, ft in g.finetunes.items():
        if (value := accuracy_of(ft)) is None:
            continue
        dev = {"f1": value, "precision": value, "recall": value} if ft.task == "ner" else {"accuracy": value}
        dev["f1"] = value  # MRPC's main metric, which the GLUE cells read
        folder = tmp = __import__("pathlib").Path(cfg.url("finetune", name))
        folder.mkdir(parents=True)
        (tmp / "metrics.json").write_text(
            json.dumps({"dev": dev, "majority_baseline": {"dev": {"accuracy": 0.5, "f1": 0.5}}})
        )
    for name in g.runs:
        folder = __import__("pathlib").Path(cfg.url("runs", name))
        folder.mkdir(parents=True)
        records = [{"split": "train", "step": 300, "loss": 5.0}]
        records.append({"split": "validation", "step": 300, "mlm_perplexity": 100.0 + len(name)})
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_report_has_every_table_with_spreads_and_the_papers_numbers(tmp_path):
    cfg = _cfg(tmp_path)
    g = grid(cfg)

    def accuracy(ft):
        if ft.run == "no-nsp-s12345":
            return None  # not run yet
        if ft.run == "ltr-s12345":
            return 0.5  # one class for every example: the majority baseline
        if ft.run == "reference":
            return 0.8 + (ft.seed - 12345) * 0.01
        return 0.6 + (ft.seed - 12345) * 0.02 + ft.step / 10000

    _write_runs(cfg, g, accuracy)
    paths = build_report(cfg, g, stages(cfg, g), {"ablate/pretrain/base-s12345": {"seconds": 12.5}})
    report = (tmp_path / "ablations" / "report.md").read_text()
    for heading in ("Table 5", "Table 6", "Table 7", "Table 8", "Figure 5", "Runs and their commands"):
        assert f"## {heading}" in report
    # BERT_BASE: seeds 12345 and 12346 -> 63.0 and 65.0 -> 64.0 ± 1.4; the paper's 84.4 beside it.
    assert "| BERT_BASE | 64.0 ± 1.4 (n=2) | 84.4 | 88.4 | 86.7 | 92.7 | 88.5 |" in report
    assert "| No NSP | not run | 83.9 |" in report
    assert "| LTR & No NSP | 50.0 ± 0.0 (n=2) †; Δ -14.0 | 82.1 |" in report
    # perplexity 100 + the run name's length: the base (11 characters) against the 1-layer run (15)
    assert "| 4 | 128 | 4 | 111.00; Δ -4.00 *no spread* | 64.0 ± 1.4 (n=2); Δ +0.0 *within noise* |" in report
    assert (
        "| Feature-based: last | 64.0 ± 1.4 (n=2); Δ +0.0 *within noise* | 80.5 ± 0.7 (n=2); Δ +0.0" in report
    )
    assert "all-MiniLM-L6-v2" not in report and f"{REFERENCE}: dev F1" in report
    assert "Not run: Fine-tuning: BERT_LARGE" in report and "finetune glue --task mrpc" in report
    points = json.loads((tmp_path / "ablations" / "figure5.json").read_text())
    assert [(p["step"], round(p["mean"], 3)) for p in points if p["run"] == "base-s12345"] == [
        (100, 62.0),
        (200, 63.0),
        (300, 64.0),
    ]
    assert (tmp_path / "ablations" / "figure5.csv").read_text().startswith("run,step,mean,std,n\n")
    assert (tmp_path / "ablations" / "figure5.png").read_bytes().startswith(b"\x89PNG")
    html = (tmp_path / "ablations" / "report.html").read_text()
    assert "<h2>Table 8: masking mixes</h2>" in html and "data:image/png;base64," in html
    assert paths["markdown"].endswith("ablations/report.md")


def test_a_glue_cell_reads_its_tasks_main_metric_from_the_task_table(tmp_path):
    """MNLI's cells read matched accuracy and its baseline on dev_matched, as metrics.json holds them."""
    cfg = replace(_cfg(tmp_path, "smoke", ner=False), glue_dir="glue/MNLI", glue_task="mnli")
    name = _cell(grid(cfg), "5", "BERT_BASE")[0]
    folder = tmp_path / "ablations" / "finetune" / name
    folder.mkdir(parents=True)
    dev = {"matched_accuracy": 0.75, "mismatched_accuracy": 0.5}
    baseline = {"dev_matched": {"accuracy": 0.25}, "dev_mismatched": {"accuracy": 0.5}}
    (folder / "metrics.json").write_text(json.dumps({"dev": dev, "majority_baseline": baseline}))
    assert finetune_value(cfg, name, "glue") == (75.0, 25.0)


def _ablate(tmp_path, *args: str):
    dump = tmp_path / "dump.xml.bz2"
    dump.write_bytes(b"BZh9")  # checked to exist, not read
    return CliRunner().invoke(
        main, ["ablate", "--workdir", str(tmp_path / "w"), "--wiki-dump", str(dump), *args]
    )


def test_the_gpu_preset_plans_about_an_hour_on_an_h200_with_bert_base_widths(tmp_path):
    ner, reference = require(SHARED_DATA / "ner" / "conll2003"), tmp_path / "reference"
    reference.mkdir()
    result = _ablate(
        tmp_path, "--preset", "gpu", "--dry-run", "--ner-dir", str(ner), "--reference", str(reference)
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("preset gpu: 11 pre-training runs")
    assert "--config 6/768/12" in result.output and "--config 12/768/12" in result.output
    assert "--precision bf16" in result.output and "--max-steps 2500" in result.output
    minutes = float(re.search(r"expected: ([\d.]+) min on one H200", result.output).group(1))
    assert 45 <= minutes <= 75
    assert not (tmp_path / "w").exists()


def test_the_gpu_preset_without_a_gpu_is_refused_with_one_line(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    result = _ablate(tmp_path, "--preset", "gpu")
    assert result.exit_code == 2
    assert (
        result.output
        == "error: --preset gpu needs a CUDA GPU and none is here; see its plan with --dry-run\n"
    )
    assert not (tmp_path / "w").exists()


def test_dry_run_prints_the_paper_plan_and_refuses_a_runner_beam_does_not_know(tmp_path):
    result = _ablate(tmp_path, "--preset", "paper", "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("preset paper: 14 pre-training runs")
    assert "--config 24/1024/16" in result.output and "--max-steps 1000000" in result.output
    bad = _ablate(tmp_path, "--dry-run", "--beam-option=--runner=NoSuchRunner")
    assert bad.exit_code == 2 and bad.output.count("\n") == 1
    assert bad.output.startswith(
        "error: --beam-option --runner NoSuchRunner: not a runner Beam has; Beam has "
    )
    assert not (tmp_path / "w").exists()
