"""The study's report in ``WORKDIR/ablations``: report.md and .html, results.json (every cell's values,
seeds and runs) and Figure 5 (figure5.png, .json, .csv). Each cell is the mean ± sample standard
deviation over its seeds, read from the runs' own records; a row that differs from its table's first
row by less than the two rows' spreads added is marked "within noise". The paper's numbers
(:mod:`finetune.paper`, dev sets) stand beside ours for reference."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from chain.ablate import AblationConfig, Grid, chain_config, installed_reference
from chain.report import get, png, read_json, table, write
from chain.run import Stage, shown
from finetune.glue_tasks import get_task
from finetune.paper import ABLATION_COLUMNS, ABLATIONS

NOTES = (
    "† every run of the cell scores exactly the majority-class baseline (it predicts one class for every dev "
    "example). Δ: the difference from the table's first row; *within noise* where it is smaller than the two "
    "rows' seed spreads (sample standard deviations) added; *no spread* where a row has one seed."
)


def finetune_value(cfg: AblationConfig, name: str, task: str) -> tuple[float | None, float | None]:
    """A fine-tune's dev score in percent (entity F1 for NER, else the GLUE task's main metric, from
    its row of :mod:`finetune.glue_tasks`) and that metric's majority-class baseline, from its
    ``metrics.json``."""
    url, glue = cfg.url("finetune", name, "metrics.json"), get_task(chain_config(cfg).task)
    metrics = read_json(url)
    value = get(metrics, url, "dev", "f1" if task == "ner" else glue.main_metric)
    baseline = get(metrics, url, "majority_baseline", glue.main_split, glue.metrics[0])
    return tuple(None if v is None else 100 * v for v in (value, baseline))


def validation_perplexity(cfg: AblationConfig, run: str) -> float | None:
    """The run's last held-out MLM perplexity (``metrics.jsonl``)."""
    url = cfg.url("runs", run, "metrics.jsonl")
    values = [
        get(r, url, "mlm_perplexity") for r in read_json(url, lines=True) if r.get("split") == "validation"
    ]
    return next((v for v in reversed(values) if v is not None), None)


def summarise(values: list[float | None]) -> dict:
    """Mean and sample standard deviation of the finished runs' values, and how many ran of how many."""
    done = [v for v in values if v is not None]
    mean = sum(done) / len(done) if done else None
    std = (sum((v - mean) ** 2 for v in done) / (len(done) - 1)) ** 0.5 if len(done) > 1 else None
    return {"mean": mean, "std": std, "n": len(done), "of": len(values)}


def format_cell(s: dict | None, first: dict | None = None, digits: int = 1) -> str:
    """``71.3 ± 1.2 (n=3)`` (``not run`` without finished runs), then its Δ from ``first``."""
    if s is None or not s["n"]:
        return "not run" if s else "not in preset"
    text = f"{s['mean']:.{digits}f}" + ("" if s["std"] is None else f" ± {s['std']:.{digits}f}")
    text += (f" (n={s['n']})" if s["n"] == s["of"] else f" (n={s['n']} of {s['of']})") if s["of"] > 1 else ""
    text += " †" if s.get("at_baseline") else ""
    if first and first is not s and first["n"]:
        delta = s["mean"] - first["mean"]
        noise = None if s["std"] is None or first["std"] is None else s["std"] + first["std"]
        verdict = "no spread" if noise is None else "within noise" if abs(delta) < noise else ""
        text += f"; Δ {delta:+.{digits}f}" + (f" *{verdict}*" if verdict else "")
    return text


def collect(cfg: AblationConfig, g: Grid) -> list[dict]:
    """Every cell with its values, seeds, runs and summary."""
    results = []
    for cell in g.cells:
        if "runs" in cell:
            names, seeds = cell["runs"], [g.runs[r].seed for r in cell["runs"]]
            values, baselines = [validation_perplexity(cfg, r) for r in names], []
        else:
            names, seeds = cell["finetunes"], [g.finetunes[f].seed for f in cell["finetunes"]]
            pairs = [finetune_value(cfg, f, g.finetunes[f].task) for f in names]
            values, baselines = [v for v, _ in pairs], [b for v, b in pairs if v is not None]
        summary = summarise(values)
        done = [v for v in values if v is not None]
        summary["at_baseline"] = (
            bool(done)
            and len(baselines) == len(done)
            and all(b is not None and abs(v - b) < 1e-6 for v, b in zip(done, baselines, strict=True))
        )
        results.append({**cell, "values": values, "seeds": seeds, "names": names, "summary": summary})
    return results


def _table(results: list[dict], number: str, columns: dict, first: list[str], digits: dict) -> tuple:
    """Table ``number``'s header and rows: per row our ``columns`` (cell column: header), each with its
    Δ from the first row, then the paper's."""
    cells = {(r["row"], r["column"]): r["summary"] for r in results if r["table"] == number}
    paper_columns = ABLATION_COLUMNS[number]
    rows = list(dict.fromkeys(row for row, _ in cells))
    body = []
    for row in rows:
        ours = [
            format_cell(cells.get((row, c)), cells.get((rows[0], c)), (digits or {}).get(c, 1))
            for c in columns
        ]
        paper = ABLATIONS[number].get(row, (None,) * len(paper_columns))
        body.append([*(row.split("/") if number == "6" else [row]), *ours, *paper])
    return [*first, *columns.values(), f"paper {paper_columns[0]}", *paper_columns[1:]], body


def figure5(results: list[dict], label: str) -> tuple[list[dict], bytes | None]:
    """Figure 5's points (the dev score ``label`` per run and pre-training step) and its picture."""
    points = [
        {"run": r["row"], "step": int(r["column"]), **{k: r["summary"][k] for k in ("mean", "std", "n")}}
        for r in results
        if r["table"] == "fig5"
    ]
    points.sort(key=lambda p: (p["run"], p["step"]))
    done = [p for p in points if p["mean"] is not None]
    if not done:
        return points, None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 3.8))
    for run in sorted({p["run"] for p in done}):
        line = [p for p in done if p["run"] == run]
        x, y, err = ([p[k] or 0 for p in line] for k in ("step", "mean", "std"))
        axis.errorbar(x, y, yerr=err, marker="o", capsize=3, label=run)
    axis.set(xlabel="pre-training steps", ylabel=f"{label} (%)", title="Figure 5")
    axis.legend()
    return points, png(figure)


def _times(state: dict) -> str:
    """The stages' time in all, and the wall time from the first stage's start to now."""
    done = [(datetime.fromisoformat(s["finished"]), s["seconds"]) for s in state.values() if "finished" in s]
    if not done:
        return "No stage has run yet.\n"
    wall = (datetime.now(UTC) - min(end - timedelta(seconds=s) for end, s in done)).total_seconds() / 60
    return (
        f"Time: {sum(s for _, s in done) / 60:.1f} min in the stages, {wall:.1f} min since the first began.\n"
    )


def build_report(cfg: AblationConfig, g: Grid, stages: list[Stage], state: dict) -> dict[str, str]:
    """Write the study's report; return the paths of report.md and report.html."""
    label = chain_config(cfg).task.upper() if cfg.glue_dir else "next-sentence task"
    metric = f"dev {get_task(chain_config(cfg).task).metrics[0]}"
    results, p = collect(cfg, g), cfg.preset
    points, picture = figure5(results, f"{label} {metric}")
    reference = "all-MiniLM-L6-v2" if cfg.reference == installed_reference() else cfg.reference
    intro = (
        f"{p.note}. Base model {p.model} (L/H/A), {p.steps:,} steps of {p.batch_size} x {p.max_seq_length} tokens, "
        f"lr {p.lr:g}; seeds per cell: {p.pretrain_seeds} pre-training, {p.finetune_seeds} fine-tuning, {p.ner_seeds} "
        f"NER. Ours: dev metrics in percent on the {label}"
        f" ({'GLUE folder' if cfg.glue_dir else 'derived from held-out documents, MRPC layout'}) and CoNLL-2003's "
        f"valid.txt. Table 7's reference column: the same rows from {reference or 'no reference checkpoint'}, a "
        "model pre-trained at full scale, which shows what the method gives when the encoder is good. "
        "The paper's numbers are BERT at full size: for reference, not comparison.\n\n" + NOTES
    )
    sections = [(intro + "\n\n" + _times(state), "md")]

    def add(title: str, header: list[str], rows: list[list], after: str = "") -> None:
        sections.append((f"## {title}\n\n{table(header, rows)}\n{after}", "md"))

    acc, f1 = f"ours: {label} {metric}", {"ner": "ours: dev F1", "reference": f"{reference}: dev F1"}
    ner = {"ner": "ours: NER fine-tune", "ner-features": "ours: NER features"}
    tables = {
        "5": ("pre-training tasks", {"task": acc}, ["pre-training"]),
        "6": ("model size", {"ppl": "ours: MLM ppl (held-out)", "task": acc}, ["#L", "#H", "#A"]),
        "7": ("CoNLL-2003 NER", f1, ["system"]),
        "8": ("masking mixes", {"task": acc, **ner}, ["MASK / SAME / RND"]),
    }
    for number, (title, columns, first) in tables.items():
        missing = "".join(f"\nNot run: {m}.\n" for m in g.missing.get(number, []))
        add(f"Table {number}: {title}", *_table(results, number, columns, first, {"ppl": 2}), missing)
    rows = [
        [q["run"], q["step"], "not run" if q["mean"] is None else round(q["mean"], 1), q["n"]] for q in points
    ]
    add("Figure 5: training length", ["run", "step", metric, "n"], rows)
    sections += [(f"Figure 5: {metric} against pre-training steps", "figure5.png")] if picture else []
    ours = [s for s in stages if s.name.startswith("ablate/")]
    rows = [
        [s.name[7:], state.get(s.name, {}).get("seconds", "not run"), f"`{shown(s.command)}`"] for s in ours
    ]
    add("Runs and their commands", ["run", "seconds", "command"], rows)
    csv = "".join(",".join(map(str, q.values())).replace("None", "") + "\n" for q in points)
    extra = {"figure5.json": json.dumps(points), "figure5.csv": "run,step,mean,std,n\n" + csv}
    extra["results.json"] = json.dumps(results, indent=1)
    images = {"figure5.png": picture} if picture else {}
    return write(
        cfg.url(), "chain ablate report", f"BERT ablations: preset `{p.name}`", sections, images, extra
    )
