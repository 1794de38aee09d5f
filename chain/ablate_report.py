"""The study's report: ``W/ablations/report.md``, ``report.html``, ``results.json`` and Figure 5
(``figure5.png`` + ``figure5.json`` + ``figure5.csv``).

Every number is read from a run's own records (fine-tuning ``metrics.json``, pre-training
``metrics.jsonl``); a cell whose runs have not finished says so. The paper's numbers (Devlin et
al., 2018, Tables 5-8, dev sets) stand beside ours for reference; at the quick preset's sizes
they are not comparable, only the direction of each difference is.
"""

from __future__ import annotations

import base64
import json
import shlex
from pathlib import Path

from chain import checks
from chain.ablate import AblationConfig, Grid
from chain.report import _cat, _markdown_to_html, _png, _table
from chain.run import Stage, read_json
from schemas.files import write_file, write_json
from schemas.outputs import OutputFolder

PAPER_TABLE5 = {  # MNLI-m, QNLI, MRPC, SST-2 (accuracy), SQuAD v1.1 (F1)
    "BERT_BASE": (84.4, 88.4, 86.7, 92.7, 88.5),
    "No NSP": (83.9, 84.9, 86.5, 92.6, 87.9),
    "LTR & No NSP": (82.1, 84.3, 77.5, 92.1, 77.8),
    "+ BiLSTM": (82.1, 84.1, 75.7, 91.6, 84.9),
}
PAPER_TABLE6 = {  # L/H/A: LM perplexity (dev), MNLI-m, MRPC, SST-2
    "3/768/12": (5.84, 77.9, 79.8, 88.4),
    "6/768/3": (5.24, 80.6, 82.2, 90.7),
    "6/768/12": (4.68, 81.9, 84.8, 91.3),
    "12/768/12": (3.99, 84.4, 86.7, 92.9),
    "12/1024/16": (3.54, 85.7, 86.9, 93.3),
    "24/1024/16": (3.23, 86.6, 87.8, 93.7),
}
PAPER_TABLE7 = {  # CoNLL-2003 dev F1, test F1
    "Fine-tuning: BERT_LARGE": (96.6, 92.8),
    "Fine-tuning: BERT_BASE": (96.4, 92.4),
    "Feature-based: embeddings": (91.0, None),
    "Feature-based: second-to-last": (95.6, None),
    "Feature-based: last": (94.9, None),
    "Feature-based: sum-last-4": (95.9, None),
    "Feature-based: concat-last-4": (96.1, None),
    "Feature-based: sum-all": (95.5, None),
}
PAPER_TABLE8 = {  # MNLI fine-tune, NER fine-tune, NER feature-based (dev)
    "80% / 10% / 10%": (84.2, 95.4, 94.9),
    "100% / 0% / 0%": (84.3, 94.9, 94.0),
    "80% / 0% / 20%": (84.1, 95.2, 94.6),
    "80% / 20% / 0%": (84.4, 95.2, 94.7),
    "0% / 20% / 80%": (83.7, 94.8, 94.6),
    "0% / 0% / 100%": (83.6, 94.9, 94.6),
}


def finetune_value(cfg: AblationConfig, name: str, task: str) -> float | None:
    """A fine-tuning run's dev metric in percent: accuracy (GLUE layout) or entity F1 (NER)."""
    metrics = read_json(cfg.url("ablations", "finetune", name, "metrics.json"))
    if not metrics:
        return None
    dev = metrics.get("dev", {})
    value = dev.get("f1") if task == "ner" else dev.get("accuracy", dev.get("matthews_corrcoef"))
    return None if value is None else 100 * float(value)


def majority_baseline(cfg: AblationConfig, name: str) -> float | None:
    """The dev accuracy (percent) of always predicting the training set's majority class, as the
    GLUE-layout fine-tune's ``metrics.json`` records it."""
    metrics = read_json(cfg.url("ablations", "finetune", name, "metrics.json")) or {}
    value = (metrics.get("majority_baseline") or {}).get("dev", {}).get("accuracy")
    return None if value is None else 100 * float(value)


def validation_perplexity(cfg: AblationConfig, run: str) -> float | None:
    """The run's last held-out MLM perplexity (``metrics.jsonl``)."""
    text = _cat(cfg.url("ablations", "runs", run, "metrics.jsonl"))
    if not text:
        return None
    records = [json.loads(line) for line in text.decode().splitlines() if line.strip()]
    valid = [r for r in records if r.get("split") == "validation" and r.get("mlm_perplexity") is not None]
    return float(valid[-1]["mlm_perplexity"]) if valid else None


def summarise(values: list[float | None]) -> dict:
    """Mean ± sample standard deviation of the finished runs' values, and how many ran."""
    done = [v for v in values if v is not None]
    if not done:
        return {"mean": None, "std": None, "n": 0, "of": len(values)}
    mean = sum(done) / len(done)
    std = (sum((v - mean) ** 2 for v in done) / (len(done) - 1)) ** 0.5 if len(done) > 1 else None
    return {"mean": mean, "std": std, "n": len(done), "of": len(values)}


def format_cell(summary: dict, digits: int = 1) -> str:
    """``71.3 ± 1.2 (n=3)``, ``71.3``, or ``not run`` for a cell without finished runs."""
    if summary is None or summary["n"] == 0:
        return "not run"
    text = f"{summary['mean']:.{digits}f}"
    if summary["std"] is not None:
        text += f" ± {summary['std']:.{digits}f}"
    if summary["n"] > 1 or summary["of"] > 1:
        text += (
            f" (n={summary['n']}" + (f" of {summary['of']}" if summary["n"] != summary["of"] else "") + ")"
        )
    if summary.get("at_baseline"):
        text += " †"
    return text


BASELINE_NOTE = (
    "† every run of the cell scores exactly the majority-class baseline (it predicts one class for every "
    "dev example): the fine-tuned model learned nothing the baseline does not know."
)


def collect(cfg: AblationConfig, g: Grid) -> list[dict]:
    """Every cell with its values, summary and the runs (and seeds) behind it."""
    results = []
    for cell in g.cells:
        if "runs" in cell:
            values = [validation_perplexity(cfg, r) for r in cell["runs"]]
            seeds = [g.runs[r].seed for r in cell["runs"]]
            names = list(cell["runs"])
        else:
            task = "glue" if cell["column"] not in ("ner", "ner-features") else "ner"
            values = [finetune_value(cfg, f, task) for f in cell["finetunes"]]
            seeds = [g.finetunes[f].seed for f in cell["finetunes"]]
            names = list(cell["finetunes"])
        summary = summarise(values)
        if "finetunes" in cell and task == "glue" and summary["n"]:
            pairs = [
                (v, majority_baseline(cfg, f)) for f, v in zip(names, values, strict=True) if v is not None
            ]
            summary["at_baseline"] = all(b is not None and abs(v - b) < 1e-6 for v, b in pairs)
        results.append({**cell, "values": values, "seeds": seeds, "names": names, "summary": summary})
    return results


def _get(results: list[dict], table: str, row: str, column: str) -> dict | None:
    return next((r for r in results if (r["table"], r["row"], r["column"]) == (table, row, column)), None)


def _fmt(cell: dict | None, digits: int = 1) -> str:
    return format_cell(cell["summary"], digits) if cell else "not in preset"


def _paper(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _runs(cell: dict | None) -> str:
    return ", ".join(f"`{n}`" for n in cell["names"]) if cell else "—"


def _rows_of(results: list[dict], table: str) -> list[str]:
    seen: list[str] = []
    for r in results:
        if r["table"] == table and r["row"] not in seen:
            seen.append(r["row"])
    return seen


def table5(results: list[dict], task_label: str) -> str:
    """Table 5: the effect of the pre-training tasks."""
    rows = []
    for row in _rows_of(results, "5"):
        cell = _get(results, "5", row, "task")
        paper = PAPER_TABLE5.get(row, (None,) * 5)
        rows.append([row, _fmt(cell), *(_paper(v) for v in paper), _runs(cell)])
    return _table(
        ["pre-training", f"ours: {task_label} dev acc", "paper MNLI-m", "QNLI", "MRPC", "SST-2", "SQuAD F1",
         "runs (name-…-sSEED)"], rows,
    )  # fmt: skip


def table6(results: list[dict], task_label: str) -> str:
    """Table 6: model size; ours, then the paper's grid."""
    rows = []
    for row in _rows_of(results, "6"):
        layers, hidden, heads = row.split("/")
        ppl, task = _get(results, "6", row, "ppl"), _get(results, "6", row, "task")
        paper = PAPER_TABLE6.get(row, (None,) * 4)
        rows.append(
            [layers, hidden, heads, _fmt(ppl, 2), _fmt(task), *(_paper(v) for v in paper), _runs(task)]
        )
    ours = _table(
        ["#L", "#H", "#A", "ours: MLM ppl (held-out)", f"ours: {task_label} dev acc", "paper LM ppl",
         "paper MNLI-m", "MRPC", "SST-2", "runs"], rows,
    )  # fmt: skip
    paper = _table(
        ["#L", "#H", "#A", "LM ppl", "MNLI-m", "MRPC", "SST-2"],
        [[*size.split("/"), *(_paper(v) for v in values)] for size, values in PAPER_TABLE6.items()],
    )
    return ours + "\n\nThe paper's grid (BERT sizes, 1M steps):\n\n" + paper


def table7(results: list[dict]) -> str:
    """Table 7: CoNLL-2003 NER, fine-tuned and feature-based."""
    rows = []
    for row in _rows_of(results, "7"):
        cell = _get(results, "7", row, "ner")
        dev, test = PAPER_TABLE7.get(row, (None, None))
        rows.append([row, _fmt(cell), _paper(dev), _paper(test), _runs(cell)])
    return _table(["system", "ours: dev F1 (valid.txt)", "paper dev F1", "paper test F1", "runs"], rows)


def table8(results: list[dict], task_label: str) -> str:
    """Table 8: masking mixes."""
    rows = []
    for row in _rows_of(results, "8"):
        cells = [_get(results, "8", row, c) for c in ("task", "ner", "ner-features")]
        paper = PAPER_TABLE8.get(row, (None,) * 3)
        rows.append([row, *(_fmt(c) for c in cells), *(_paper(v) for v in paper), _runs(cells[0])])
    return _table(
        ["MASK / SAME / RND", f"ours: {task_label} dev acc", "ours: NER F1 fine-tune", "ours: NER F1 features",
         "paper MNLI", "paper NER fine-tune", "paper NER features", "runs"], rows,
    )  # fmt: skip


def figure5_points(results: list[dict]) -> list[dict]:
    """Figure 5's points: dev accuracy (mean over fine-tuning seeds) per run and pre-training step."""
    points = []
    for r in results:
        if r["table"] == "fig5":
            s = r["summary"]
            points.append(
                {"run": r["row"], "step": int(r["column"]), "mean": s["mean"], "std": s["std"], "n": s["n"]}
            )
    return sorted(points, key=lambda p: (p["run"], p["step"]))


def figure5_png(points: list[dict], task_label: str) -> bytes | None:
    """Dev accuracy against pre-training steps, one line per run (the paper's Figure 5)."""
    done = [p for p in points if p["mean"] is not None]
    if not done:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 3.8))
    for run in sorted({p["run"] for p in done}):
        line = [p for p in done if p["run"] == run]
        axis.errorbar([p["step"] for p in line], [p["mean"] for p in line],
                      yerr=[p["std"] or 0 for p in line], marker="o", capsize=3, label=run)  # fmt: skip
    axis.set_xlabel("pre-training steps")
    axis.set_ylabel(f"{task_label} dev accuracy (%)")
    axis.set_title("Fine-tuning from checkpoints of one run (Figure 5)")
    axis.legend()
    return _png(figure)


def _commands(stages: list[Stage], state: dict) -> str:
    rows = []
    for stage in stages:
        if not stage.name.startswith("ablate/") or not stage.command:
            continue
        record = state.get(stage.name, {})
        seed = stage.command[stage.command.index("--seed") + 1] if "--seed" in stage.command else "—"
        argv = [Path(stage.command[0]).name, *stage.command[1:]]
        rows.append([stage.name.removeprefix("ablate/"), seed, record.get("seconds", "not run"),
                     f"`{shlex.join(argv)}`"])  # fmt: skip
    return _table(["run", "seed", "seconds", "command"], rows)


def build_report(
    cfg: AblationConfig, g: Grid, stages: list[Stage], state: dict, task_label: str | None = None
) -> dict[str, str]:
    """Write the study's report under ``W/ablations``; return the paths written."""
    task_label = task_label or (
        (cfg.glue_task or checks.DERIVED_TASK).upper() if cfg.glue_dir else "next-sentence task"
    )
    results = collect(cfg, g)
    points = figure5_points(results)
    p = cfg.preset
    sections = [
        f"# BERT ablations: preset `{p.name}`\n\n{p.note}. Base model {p.model} (L/H/A), {p.steps:,} steps "
        f"of {p.batch_size} x {p.max_seq_length} tokens, lr {p.lr:g}; fine-tuning seeds per cell: "
        f"{p.finetune_seeds}, pre-training seeds: {p.pretrain_seeds}. Ours: dev metrics in percent, mean ± "
        f"sample std over the seeds; the fine-tuning task is the {task_label} "
        f"({'GLUE folder' if cfg.glue_dir else 'derived from held-out documents, MRPC layout'}). "
        "The paper's numbers are BERT at full size: for reference, not comparison.\n",
    ]
    for number, title, body in (
        ("5", "Table 5: pre-training tasks", table5(results, task_label)),
        ("6", "Table 6: model size", table6(results, task_label)),
        ("7", "Table 7: CoNLL-2003 NER, fine-tuned and feature-based", table7(results)),
        ("8", "Table 8: masking mixes during pre-training", table8(results, task_label)),
    ):
        text = f"## {title}\n\n{body}\n"
        if "†" in body:
            text += f"\n{BASELINE_NOTE}\n"
        for missing in g.missing.get(number, []):
            text += f"\nNot run: {missing}.\n"
        sections.append(text)
    sections.append(
        "## Figure 5: training length\n\n"
        + _table(
            ["run", "pre-training step", "dev acc", "n"],
            [
                [q["run"], q["step"], "not run" if q["mean"] is None else f"{q['mean']:.1f}", q["n"]]
                for q in points
            ],
        )  # fmt: skip
        + "\n\nPoints also in figure5.json and figure5.csv.\n"
    )
    sections.append("## Runs and their commands\n\n" + _commands(stages, state) + "\n")
    return _write(cfg, sections, points, results, figure5_png(points, task_label))


def _write(cfg: AblationConfig, sections: list[str], points, results, png: bytes | None) -> dict[str, str]:
    """The report's files into ``WORKDIR/ablations`` (beside the runs' folders), claimed and journaled."""
    with OutputFolder.open(cfg.url("ablations"), "chain ablate", continuing=True, option="") as folder:
        folder.begin()
        return _write_files(cfg, folder.fs, folder.root, sections, points, results, png)


def _write_files(
    cfg: AblationConfig, fs, root: str, sections: list[str], points, results, png
) -> dict[str, str]:
    markdown = "\n".join(sections)
    figure = ""
    if png:
        write_file(f"{root}/figure5.png", png, fs)
        markdown += "\n![Figure 5: dev accuracy against pre-training steps](figure5.png)\n"
        figure = f'<figure><img src="data:image/png;base64,{base64.b64encode(png).decode()}" alt="Figure 5"></figure>'
    csv = "run,step,mean,std,n\n" + "".join(
        f"{q['run']},{q['step']},{'' if q['mean'] is None else q['mean']},{'' if q['std'] is None else q['std']},{q['n']}\n"
        for q in points
    )
    write_json(f"{root}/figure5.json", points, fs, indent=1)
    write_file(f"{root}/figure5.csv", csv, fs)
    write_json(f"{root}/results.json", results, fs, indent=1)
    write_file(f"{root}/report.md", markdown, fs)
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>BERT ablations</title><style>"
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
        "th{background:#f3f3f3}img{max-width:100%}</style></head><body>"
        + "".join(_markdown_to_html(s) for s in sections) + figure + "</body></html>"
    )  # fmt: skip
    write_file(f"{root}/report.html", page, fs)
    base = cfg.url("ablations")
    return {"markdown": f"{base}/report.md", "html": f"{base}/report.html", "figure5": f"{base}/figure5.png"}
