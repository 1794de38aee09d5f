"""The results table: our runs' ``metrics.json`` beside the paper's numbers, in the layout of the
BERT paper's Table 1 (GLUE, in its metrics), Table 2/3 (SQuAD v1.1/v2.0) and Table 4 (SWAG), in
percent; markdown and JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from finetune.common import input_json
from schemas import storage
from schemas.commands import InputError
from schemas.inputs import field
from schemas.outputs import OutputFolder

GLUE = {
    "mnli": ("MNLI-(m/mm)", ("matched_accuracy", "mismatched_accuracy")),
    "qqp": ("QQP", ("f1",)),
    "qnli": ("QNLI", ("accuracy",)),
    "sst2": ("SST-2", ("accuracy",)),
    "cola": ("CoLA", ("mcc",)),
    "stsb": ("STS-B", ("spearman",)),
    "mrpc": ("MRPC", ("f1",)),
    "rte": ("RTE", ("accuracy",)),
}
"""Table 1's columns in order: the header and the metric(s), as keys of our metrics.json's ``dev``."""
GLUE_METRIC = {task: metrics for task, (_, metrics) in GLUE.items()}
TABLE_1 = (*GLUE, "average")
# Devlin et al. (2019), Table 1: GLUE *test* set, scored by the GLUE evaluation server, in the
# columns above; "average" is the paper's Average column (it leaves out WNLI).
PAPER_GLUE_TEST: dict[str, dict[str, Any]] = {
    "BERT-BASE": dict(
        zip(TABLE_1, ((84.6, 83.4), 71.2, 90.5, 93.5, 52.1, 85.8, 88.9, 66.4, 79.6), strict=True)
    ),
    "BERT-LARGE": dict(
        zip(TABLE_1, ((86.7, 85.9), 72.1, 92.7, 94.9, 60.5, 86.5, 89.3, 70.1, 82.1), strict=True)
    ),
}
# The same paper's *dev* numbers for BERT-BASE: Table 5 (ablation, "BERT_BASE" row; MNLI-m, QNLI,
# MRPC and SST-2 accuracy: note MRPC is accuracy there, not F1) and BERT-LARGE from Table 6
# (model size, L=24 H=1024 A=16: MNLI-m, MRPC, SST-2 accuracy). Columns not reported are absent.
PAPER_GLUE_DEV: dict[str, dict[str, Any]] = {
    "BERT-BASE": {"mnli": 84.4, "qnli": 88.4, "mrpc": 86.7, "sst2": 92.7},
    "BERT-LARGE": {"mnli": 86.6, "mrpc": 87.8, "sst2": 93.7},
}
# Table 4 (SWAG accuracy): BERT-BASE dev 81.6; BERT-LARGE dev 86.6, test 86.3.
PAPER_SWAG = {"BERT-BASE": {"dev": 81.6}, "BERT-LARGE": {"dev": 86.6, "test": 86.3}}
# Table 2 (SQuAD v1.1, single model, dev EM/F1) and Table 3 (SQuAD v2.0, single model, dev EM/F1).
PAPER_SQUAD = {
    "1.1": {"BERT-BASE": {"exact_match": 80.8, "f1": 88.5}, "BERT-LARGE": {"exact_match": 84.1, "f1": 90.9}},
    "2.0": {"BERT-LARGE": {"exact_match": 78.7, "f1": 81.9}},
}


def read_metrics(paths: Sequence[str]) -> list[dict[str, Any]]:
    """The ``metrics.json`` of each run folder (or the file itself), checked to hold what the tables read."""
    found = []
    for path in paths:
        url = path if path.endswith(".json") else f"{path.rstrip('/')}/metrics.json"
        if not storage.exists(url):
            raise InputError(f"{path}: no metrics.json; give finished `finetune` run folders")
        try:
            found.append(_checked(input_json(url), url))
        except InputError as err:
            raise InputError(
                f"{err}; not a metrics.json of `finetune`: rerun that fine-tuning or leave it out"
            ) from None
    return found


def _checked(run: Any, url: str) -> dict[str, Any]:
    """``run`` with the fields the tables read typed (numbers are numbers, not strings)."""
    task = field(run, "task", str, url)
    dev = field(run, "dev", dict, url, default={})
    keys = {"swag": ("accuracy",), **GLUE_METRIC}.get(task, ())
    for key in keys:
        field(dev, key, (int, float), f"{url}: dev")
        field(field(run, "dev_sd", dict, url, default={}), key, (int, float), f"{url}: dev_sd", default=0)
    if task == "squad":
        field(run, "version", str, url)
        scores = field(run, "tuned_threshold", dict, url, default=run)
        for key in ("exact_match", "exact", "f1"):
            field(scores, key, (int, float), f"{url}: scores", default=None)
    return run


def _percent(value: float | None) -> float | None:
    """A fraction or (the official SQuAD scripts') a percentage, as a percentage."""
    return None if value is None else round(value if value > 1 else 100 * value, 1)


def _ours(run: dict[str, Any], keys: Sequence[str]) -> tuple[list[float], list[float]]:
    dev, sd = run.get("dev", {}), run.get("dev_sd", {})
    return [100 * dev[k] for k in keys], [100 * sd.get(k, 0.0) for k in keys]


def _cell(values: Any, sds: Sequence[float] | None = None) -> str:
    if values is None:
        return "–"
    if not isinstance(values, (list, tuple)):
        values = [values]
    parts = []
    for i, value in enumerate(values):
        text = f"{value:.1f}"
        if sds and sds[i] > 0:
            text += f" ± {sds[i]:.1f}"
        parts.append(text)
    return "/".join(parts)


def build_report(runs: Sequence[dict[str, Any]], label: str = "Ours") -> dict[str, Any]:
    """The tables as a JSON-ready dict of ``glue``, ``swag`` and ``squad`` rows (percentages)."""
    glue_rows: list[dict[str, Any]] = [
        {"system": name, "split": "test (paper, Table 1)", "values": dict(values)}
        for name, values in PAPER_GLUE_TEST.items()
    ]
    glue_rows += [
        {"system": name, "split": "dev (paper, Tables 5-6; MRPC accuracy)", "values": dict(values)}
        for name, values in PAPER_GLUE_DEV.items()
    ]
    ours: dict[str, Any] = {}
    sds: dict[str, Any] = {}
    swag_rows = [{"system": n, "split": "paper, Table 4", "values": v} for n, v in PAPER_SWAG.items()]
    squad_rows = [
        {"system": n, "version": version, "split": "dev (paper)", "values": v}
        for version, systems in PAPER_SQUAD.items()
        for n, v in systems.items()
    ]
    for run in runs:
        task = run["task"]
        if task in GLUE:
            values, deviations = _ours(run, GLUE_METRIC[task])
            ours[task] = values if len(values) > 1 else values[0]
            sds[task] = deviations if len(deviations) > 1 else deviations[0]
        elif task == "swag":
            swag_rows.append(
                {"system": label, "split": "dev", "values": {"dev": 100 * run["dev"]["accuracy"]}}
            )
        elif task == "squad":
            scores = run.get("tuned_threshold") or run
            em = _percent(scores.get("exact_match", scores.get("exact")))
            values = {"exact_match": em, "f1": _percent(scores.get("f1"))}
            squad_rows.append({"system": label, "version": run["version"], "split": "dev", "values": values})
    if ours:
        if all(t in ours for t in GLUE):
            flat = [v for t in GLUE for v in (ours[t] if isinstance(ours[t], list) else [ours[t]])]
            ours["average"] = sum(flat) / len(flat)
        glue_rows.append({"system": label, "split": "dev (ours)", "values": ours, "sd": sds})
    return {"glue": glue_rows, "swag": swag_rows, "squad": squad_rows}


def to_markdown(report: dict[str, Any]) -> str:
    """The report's tables in markdown, GLUE in Table 1's column order."""
    lines = [
        "## GLUE (layout of BERT Table 1)",
        "",
        "| System | Split | " + " | ".join(header for header, _ in GLUE.values()) + " | Average |",
        "|---|---|" + "---|" * (len(GLUE) + 1),
    ]
    for row in report["glue"]:
        sd = row.get("sd", {})
        cells = [_cell(row["values"].get(t), _as_list(sd.get(t))) for t in GLUE]
        cells.append(_cell(row["values"].get("average")))
        lines.append(f"| {row['system']} | {row['split']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## SWAG (layout of BERT Table 4, accuracy)",
        "",
        "| System | Dev | Test |",
        "|---|---|---|",
    ]
    for row in report["swag"]:
        lines.append(
            f"| {row['system']} | {_cell(row['values'].get('dev'))} | {_cell(row['values'].get('test'))} |"
        )
    lines += [
        "",
        "## SQuAD (layout of BERT Tables 2-3, dev)",
        "",
        "| System | Version | EM | F1 |",
        "|---|---|---|---|",
    ]
    for row in report["squad"]:
        values = row["values"]
        lines.append(
            f"| {row['system']} | {row['version']} | {_cell(values.get('exact_match'))} | {_cell(values.get('f1'))} |"
        )
    lines += [
        "",
        "Paper rows: Devlin et al. (2019). GLUE Table 1 numbers are from the GLUE test server; ours are "
        "dev-set numbers (mean ± sd over seeds), so the rows are not the same measurement.",
    ]
    return "\n".join(lines) + "\n"


def _as_list(value: Any) -> list[float] | None:
    if value is None:
        return None
    return list(value) if isinstance(value, (list, tuple)) else [value]


def write_report(
    run_folders: Sequence[str], output: str, label: str = "Ours", overwrite: bool = False
) -> dict[str, Any]:
    """Read each run's ``metrics.json`` and write ``results.md`` and ``results.json`` into ``output``."""
    with OutputFolder.open(output, "finetune report", overwrite=overwrite) as folder:
        report = build_report(read_metrics(run_folders), label)
        folder.begin()
        folder.write_json("results.json", report)
        folder.write("results.md", to_markdown(report))
    return report
