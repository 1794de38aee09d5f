"""The results table: our runs' ``metrics.json`` beside the paper's numbers, in the layout of the
BERT paper's Table 1 (GLUE, in its metrics), Table 2/3 (SQuAD v1.1/v2.0) and Table 4 (SWAG), in
percent; markdown and JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from finetune.glue_tasks import TASKS
from finetune.inputs import input_json
from finetune.paper import GLUE_DEV, SQUAD, SWAG, TABLE_1, TABLE_1_COLUMNS
from schemas import storage
from schemas.commands import InputError
from schemas.inputs import field
from schemas.outputs import OutputFolder

GLUE = [task for task in TABLE_1_COLUMNS if task != "average"]
"""Table 1's GLUE columns in order; each task's paper metrics (its row of the task table) key our ``dev``."""


def read_metrics(paths: Sequence[str]) -> list[dict[str, Any]]:
    """The ``metrics.json`` of each run folder (or the file itself), checked to hold what the tables read;
    two runs of one GLUE task (one cell in the table) refused, naming both."""
    found, glue = [], {}
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
        if (task := found[-1]["task"]) in glue:
            raise InputError(
                f"{glue[task]} and {path} are both {task} runs, and the table has one {task} cell: give one "
                "of them (a run with --seeds N reports their mean and spread)"
            )
        glue.update({task: path} if task in GLUE else {})
    return found


def _checked(run: Any, url: str) -> dict[str, Any]:
    """``run`` with the fields the tables read typed (numbers are numbers, not strings)."""
    task = field(run, "task", str, url)
    dev = field(run, "dev", dict, url, default={})
    keys = TASKS[task].paper_metrics if task in GLUE else ("accuracy",) if task == "swag" else ()
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


def _cell(values: Any, sds: Any = None) -> str:
    """``values`` (one, or several joined by ``/``) at one decimal, each ± its sd where above 0."""
    if values is None:
        return "–"
    values = values if isinstance(values, (list, tuple)) else [values]
    sds = sds if isinstance(sds, (list, tuple)) else [sds or 0.0] * len(values)
    return "/".join(f"{v:.1f}" + (f" ± {s:.1f}" if s > 0 else "") for v, s in zip(values, sds, strict=True))


def build_report(runs: Sequence[dict[str, Any]], label: str = "Ours") -> dict[str, Any]:
    """The tables as a JSON-ready dict of ``glue``, ``swag`` and ``squad`` rows (percentages)."""
    glue_rows: list[dict[str, Any]] = [
        {"system": name, "split": "test (paper, Table 1)", "values": dict(values)}
        for name, values in TABLE_1.items()
    ]
    glue_rows += [
        {"system": name, "split": "dev (paper, Tables 5-6; MRPC accuracy)", "values": dict(values)}
        for name, values in GLUE_DEV.items()
    ]
    ours: dict[str, Any] = {}
    sds: dict[str, Any] = {}
    swag_rows = [{"system": n, "split": "paper, Table 4", "values": v} for n, v in SWAG.items()]
    squad_rows = [
        {"system": n, "version": version, "split": "dev (paper)", "values": v}
        for version, systems in SQUAD.items()
        for n, v in systems.items()
    ]
    for run in runs:
        task = run["task"]
        if task in GLUE:
            values, deviations = _ours(run, TASKS[task].paper_metrics)
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
    glue = [[row["system"], row["split"], *_cells(row, TABLE_1_COLUMNS)] for row in report["glue"]]
    swag = [[row["system"], *_cells(row, ("dev", "test"))] for row in report["swag"]]
    squad = [[row["system"], row["version"], *_cells(row, ("exact_match", "f1"))] for row in report["squad"]]
    lines = [
        *_table("GLUE (layout of BERT Table 1)", ["System", "Split", *TABLE_1_COLUMNS.values()], glue),
        *_table("SWAG (layout of BERT Table 4, accuracy)", ["System", "Dev", "Test"], swag),
        *_table("SQuAD (layout of BERT Tables 2-3, dev)", ["System", "Version", "EM", "F1"], squad),
        "",
        "Paper rows: Devlin et al. (2019). GLUE Table 1 numbers are from the GLUE test server; ours are "
        "dev-set numbers (mean ± sd over seeds), so the rows are not the same measurement.",
    ]
    return "\n".join(lines[1:]) + "\n"


def _table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table under its heading, after a blank line."""
    body = ["| " + " | ".join(row) + " |" for row in [header, *rows]]
    return ["", f"## {title}", "", body[0], "|" + "---|" * len(header), *body[1:]]


def _cells(row: dict[str, Any], keys: Sequence[str]) -> list[str]:
    """A row's cells under ``keys``."""
    return [_cell(row["values"].get(k), row.get("sd", {}).get(k)) for k in keys]


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
