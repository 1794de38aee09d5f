"""`python -m chain ablate`: the grid, its stages and the report builder, on runs written in code."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from chain.ablate import PRESETS, AblationConfig, grid, series_steps, stages, with_preset
from chain.ablate_report import build_report, format_cell, summarise


def _cfg(tmp_path, preset: str = "quick", ner: bool = True) -> AblationConfig:
    return AblationConfig(
        workdir=str(tmp_path), preset=PRESETS[preset], wiki_dump="dump.xml.bz2",
        ner_dir="conll" if ner else None,
    )  # fmt: skip


def test_the_quick_grid_fills_every_table_and_shares_the_base_run(tmp_path):
    g = grid(_cfg(tmp_path))
    tables = {c["table"] for c in g.cells}
    assert tables == {"5", "6", "7", "8", "fig5"}
    rows5 = [c["row"] for c in g.cells if c["table"] == "5"]
    assert rows5 == ["BERT_BASE", "No NSP", "No NSP, packed sentences (ours)", "LTR & No NSP", "+ BiLSTM"]
    # "+ BiLSTM" fine-tunes the LTR run (no run of its own) with --bilstm; the others without.
    cells5 = {c["row"]: c["finetunes"] for c in g.cells if c["table"] == "5"}
    assert {g.finetunes[f].run for f in cells5["+ BiLSTM"]} == {"ltr-s12345"}
    assert all(g.finetunes[f].bilstm for f in cells5["+ BiLSTM"])
    assert not any(g.finetunes[f].bilstm for f in cells5["LTR & No NSP"])
    assert set(cells5["+ BiLSTM"]).isdisjoint(cells5["LTR & No NSP"])
    assert [c["row"] for c in g.cells if c["table"] == "8" and c["column"] == "task"] == [
        "80% / 10% / 10%", "100% / 0% / 0%", "80% / 0% / 20%", "80% / 20% / 0%", "0% / 20% / 80%", "0% / 0% / 100%",
    ]  # fmt: skip
    base = next(c for c in g.cells if c["table"] == "5" and c["row"] == "BERT_BASE")["finetunes"]
    assert (
        next(c for c in g.cells if c["table"] == "8" and c["row"] == "80% / 10% / 10%")["finetunes"] == base
    )
    assert (
        next(c for c in g.cells if c["table"] == "6" and c["row"] == "2/128/2" and c["column"] == "task")[
            "finetunes"
        ]
        == base
    )
    assert len(base) == 2  # two fine-tuning seeds
    assert {g.finetunes[f].seed for f in base} == {12345, 12346}
    # 4 of Table 5, 2 more sizes, 5 more masking mixes
    assert len(g.runs) == 11 and g.runs["ltr-s12345"].flags == ("--objective", "ltr")
    # Features that need 4 layers are named as missing for a 2-layer base, with the reason.
    assert any("concat-last-4 (needs 4 layers" in m for m in g.missing["7"])
    assert g.missing["5"] == ["SQuAD column: the study fine-tunes on the GLUE-layout task only"]


def test_without_ner_data_table_7_says_why(tmp_path):
    g = grid(_cfg(tmp_path, ner=False))
    assert not [c for c in g.cells if c["table"] == "7"]
    assert g.missing["7"] == ["every row: no --ner-dir (a CoNLL-2003 folder) was given"]
    assert all(f.task == "glue" for f in g.finetunes.values())


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
    assert bilstm.command[bilstm.command.index("--checkpoint") + 1].endswith(
        "ltr-s12345/checkpoints/step-00000300"
    )
    assert bilstm.upstream == ("ablate/pretrain/ltr-s12345", "task")
    feats = by_name["ablate/finetune/base-s12345/ner-sum-all-step300-s12345"].command
    assert feats[feats.index("--features") + 1] == "sum-all"
    assert series_steps(PRESETS["quick"]) == [100, 200, 300]
    assert series_steps(with_preset(cfg, steps=10, series_points=3).preset) == [3, 6, 9, 10]


def test_a_given_corpus_replaces_the_corpus_stages(tmp_path):
    cfg = AblationConfig(workdir=str(tmp_path), preset=PRESETS["smoke"], corpus="gs://b/corpus/")
    plan = stages(cfg, grid(cfg))
    assert "wikipedia" not in [s.name for s in plan] and "corpus" not in [s.name for s in plan]
    vocab = next(s for s in plan if s.name == "vocab")
    assert vocab.command[vocab.command.index("--corpus") + 1] == "gs://b/corpus" and vocab.upstream == ()
    with pytest.raises(ValueError, match="give --wiki-dump .to build the corpus. or --corpus"):
        AblationConfig(workdir="w", preset=PRESETS["smoke"])


def test_books_join_the_corpus_as_in_the_demo(tmp_path):
    cfg = AblationConfig(
        workdir=str(tmp_path), preset=PRESETS["quick"], wiki_dump="dump.xml.bz2", books="gutenberg"
    )
    plan = {s.name: s for s in stages(cfg, grid(cfg))}
    assert plan["books"].command[plan["books"].command.index("--input") + 1] == "gutenberg/*.txt"
    corpus = plan["corpus"].command
    assert corpus.count("--input") == 2 and plan["corpus"].upstream == ("wikipedia", "books")
    assert "books" not in {s.name for s in stages(_cfg(tmp_path), grid(_cfg(tmp_path)))}
    with pytest.raises(ValueError, match="--books goes into the corpus"):
        AblationConfig(workdir="w", preset=PRESETS["smoke"], corpus="c", books="gutenberg")


def test_summaries_are_mean_and_sample_std():
    assert summarise([70.0, 72.0, None]) == {"mean": 71.0, "std": 2.0**0.5, "n": 2, "of": 3}
    assert format_cell(summarise([70.0, 72.0, None])) == "71.0 ± 1.4 (n=2 of 3)"
    assert format_cell(summarise([64.25])) == "64.2"
    assert format_cell(summarise([None, None])) == "not run"


def _write_run(cfg: AblationConfig, g, accuracy_of) -> None:
    """Metrics as finished runs write them: fine-tuning metrics.json and pre-training metrics.jsonl."""
    root = cfg.url("ablations")
    for name, ft in g.finetunes.items():
        value = accuracy_of(ft)
        if value is None:
            continue
        dev = {"f1": value, "precision": value, "recall": value} if ft.task == "ner" else {"accuracy": value}
        folder = f"{root}/finetune/{name}"
        __import__("os").makedirs(folder, exist_ok=True)
        with open(f"{folder}/metrics.json", "w") as handle:
            json.dump({"dev": dev, "majority_baseline": {"dev": {"accuracy": 0.5}}}, handle)
    for name in g.runs:
        folder = f"{root}/runs/{name}"
        __import__("os").makedirs(folder, exist_ok=True)
        with open(f"{folder}/metrics.jsonl", "w") as handle:
            handle.write(json.dumps({"split": "train", "step": 300, "loss": 5.0}) + "\n")
            perplexity = 100.0 + len(name)
            handle.write(
                json.dumps({"split": "validation", "step": 300, "mlm_perplexity": perplexity}) + "\n"
            )


def test_the_report_has_every_table_with_our_numbers_beside_the_papers(tmp_path):
    cfg = _cfg(tmp_path)
    g = grid(cfg)
    plan = stages(cfg, g)

    def accuracy(ft):
        if ft.run == "no-nsp-s12345":
            return None  # not run yet
        if ft.run == "ltr-s12345":
            return 0.5  # one class for every example: the majority baseline
        return 0.6 + (ft.seed - 12345) * 0.02 + ft.step / 10000

    _write_run(cfg, g, accuracy)
    paths = build_report(cfg, g, plan, {"ablate/pretrain/base-s12345": {"seconds": 12.5}})
    report = (tmp_path / "ablations" / "report.md").read_text()
    for heading in ("Table 5", "Table 6", "Table 7", "Table 8", "Figure 5", "Runs and their commands"):
        assert f"## {heading}" in report
    # BERT_BASE: seeds 12345 and 12346 -> 63.0 and 65.0 -> 64.0 ± 1.4; the paper's 84.4 beside it.
    assert "| BERT_BASE | 64.0 ± 1.4 (n=2) | 84.4 | 88.4 | 86.7 | 92.7 | 88.5 |" in report
    assert "| No NSP | not run | 83.9 |" in report
    assert (
        "| LTR & No NSP | 50.0 ± 0.0 (n=2) † | 82.1 |" in report
        and "† every run of the cell scores" in report
    )
    assert "| 2 | 128 | 2 | 111.00 | 64.0 ± 1.4 (n=2) |" in report  # perplexity of base-s12345: 100 + 11
    assert "| 80% / 10% / 10% | 64.0 ± 1.4 (n=2) | 63.0 | not in preset |" in report
    assert "| Feature-based: last | 63.0 | 94.9 |" in report
    assert "| + BiLSTM | 50.0 ± 0.0 (n=2) † | 82.1 | 84.1 | 75.7 | 91.6 | 84.9 |" in report
    assert "Not run: + BiLSTM" not in report and "Not run: Fine-tuning: BERT_LARGE" in report
    assert "finetune glue --task mrpc" in report and "| 12.5 |" in report
    points = json.loads((tmp_path / "ablations" / "figure5.json").read_text())
    base_points = [(p["step"], round(p["mean"], 3)) for p in points if p["run"] == "base-s12345"]
    assert base_points == [(100, 62.0), (200, 63.0), (300, 64.0)]
    assert (tmp_path / "ablations" / "figure5.csv").read_text().startswith("run,step,mean,std,n\n")
    assert (tmp_path / "ablations" / "figure5.png").read_bytes().startswith(b"\x89PNG")
    html = (tmp_path / "ablations" / "report.html").read_text()
    assert "<h2>Table 8: masking mixes during pre-training</h2>" in html and "data:image/png;base64," in html
    assert paths["markdown"].endswith("ablations/report.md")


def test_dry_run_prints_the_paper_plan_and_runs_nothing(tmp_path):
    dump = tmp_path / "dump.xml.bz2"
    dump.write_bytes(b"BZh9")  # checked to exist, not read
    result = subprocess.run(
        [sys.executable, "-m", "chain", "ablate", "--workdir", str(tmp_path / "w"), "--preset", "paper",
         "--wiki-dump", str(dump), "--dry-run"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("preset paper: 14 pre-training runs")
    assert "--config 24/1024/16" in result.stdout and "--max-steps 1000000" in result.stdout
    assert not (tmp_path / "w").exists()
    bad = subprocess.run(
        [sys.executable, "-m", "chain", "ablate", "--workdir", str(tmp_path / "w"), "--dry-run"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "give --wiki-dump" in bad.stderr and "Traceback" not in bad.stderr
