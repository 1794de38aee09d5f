"""The chain's report, ``WORKDIR/report/report.md`` and a self-contained ``report.html``: every
figure read from the stages' own records (``stats.json``, ``metrics.jsonl``, ``metrics.json``,
``chain.json``), each checked as it is read (a damaged one is one line naming it)."""

from __future__ import annotations

import base64
import html
import io
from typing import Any

import markdown

from chain.checks import DERIVED_TASK
from finetune.glue_tasks import TASKS
from schemas import inputs, storage
from schemas.commands import InputError
from schemas.outputs import OutputFolder

MAX_RECORD_BYTES = 256 << 20
Sections = list[tuple[str, str]]  # in order: (markdown, "md") or (caption, image file name)


def read_bytes(url: str) -> bytes | None:
    """A file a stage wrote, whole (None when it is not there)."""
    try:
        return storage.read_bytes(url, MAX_RECORD_BYTES)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def read_json(url: str, lines: bool = False) -> Any:
    """A JSON object a stage wrote (with ``lines``: a JSON-lines file's objects); None (or []) when
    absent. Damage is an InputError naming the file."""
    data = read_bytes(url) or b""
    try:
        docs = [inputs.loads(line, url) for line in data.splitlines() if line.strip()] if lines else []
        docs = docs if lines or not data else [inputs.loads(data, url)]
        if bad := next((d for d in docs if not isinstance(d, dict)), None):
            raise InputError(f"{url}: a JSON {type(bad).__name__} where an object is expected")
    except InputError as err:
        raise InputError(f"{err}; delete that stage's output and run the chain again to redo it") from None
    return docs if lines else (docs or [None])[0]


def get(record: Any, url: str, *keys: str, kinds: tuple = (int, float)) -> Any:
    """``record[k1][k2]...`` of ``kinds`` (None where a key is missing); a wrong type names ``url``."""
    for key in keys[:-1]:
        record = inputs.field(record, key, dict, url, None) if record is not None else None
    return None if record is None else inputs.field(record, keys[-1], kinds, url, None)


def png(figure) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def bars(title: str, labels: list[str], values: list[float], xlabel: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 0.45 * len(labels) + 1.2))
    axis.barh(labels[::-1], values[::-1], color="#4c72b0")
    for y, v in enumerate(values[::-1]):
        axis.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
    axis.set(title=title, xlabel=xlabel)
    return png(figure)


def table(header: list[str], rows: list[list]) -> str:
    def cell(v) -> str:
        if isinstance(v, bool) or v is None:
            return {True: "yes", False: "no", None: "—"}[v]
        if isinstance(v, float):
            return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
        return f"{v:,}" if isinstance(v, int) else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows])


STATISTICS = {  # section: the stage and the figures of its stats.json
    "Vocabulary": (
        "vocab",
        "vocab_size num_pieces_learned cased distinct_words pieces_per_word unk_word_rate",
    ),
    "Pre-training examples": (
        "shards",
        "examples tokens random_next_rate mask_rate truncation_rate unk_rate",
    ),
}


def build(outputs: dict[str, str], state: dict, workdir: str) -> dict[str, str]:
    """Write the demo's report; return the paths of report.md and report.html."""
    sections: Sections = []
    images: dict[str, bytes] = {}
    _data_card(outputs, sections, images)
    for title, (key, names) in STATISTICS.items():
        url = f"{outputs[key]}/stats.json"
        stats = read_json(url) or {}
        rows = [[k, get(stats, url, k, kinds=(int, float, str, bool))] for k in names.split() if k in stats]
        sections.append((f"## {title}\n\n{table(['statistic', 'value'], rows)}\n", "md"))
    _picture(f"{outputs['shards']}/length_histogram.png", "Example lengths (tokens)", sections, images)
    _pretraining(outputs["run"], sections, images)
    url = f"{outputs['finetune']}/metrics.json"
    metrics = read_json(url) or {}
    rows = [[k, get(metrics, url, "dev", k)] for k in get(metrics, url, "dev", kinds=(dict,)) or {}]
    task = TASKS.get(get(metrics, url, "task", kinds=(str,)), TASKS[DERIVED_TASK])
    baseline = get(metrics, url, "majority_baseline", task.main_split, task.metrics[0])
    text = (
        table(["dev metric", "value"], rows)
        + f"\n\nMajority-class baseline ({task.main_metric}): {baseline}\n"
    )
    sections.append(("## Fine-tuning\n\n" + text, "md"))
    timed = [[name, s["seconds"], s.get("peak_rss_mb")] for name, s in state.items() if "seconds" in s]
    text = table(["stage", "seconds", "peak memory (MB)"], timed)
    sections.append(
        (f"## Time and peak memory per stage\n\n{text}\n\nTotal: {sum(t[1] for t in timed):,.0f} s.\n", "md")
    )
    title = "BERT pre-training: the whole chain on real text"
    intro = f"Work folder: `{workdir}`; every figure is read from the stages' own outputs.\n"
    return write(f"{workdir.rstrip('/')}/report", "chain report", title, [(intro, "md"), *sections], images)


def _picture(url: str, caption: str, sections: Sections, images: dict[str, bytes]) -> None:
    if data := read_bytes(url):
        images[url.rsplit("/", 1)[-1]] = data
        sections.append((caption, url.rsplit("/", 1)[-1]))


def _data_card(outputs: dict[str, str], sections: Sections, images: dict[str, bytes]) -> None:
    """Documents in, out and dropped per corpus stage, sentence lengths and the split."""
    rows = []
    for name in ("wiki", "books", "documents", "corpus"):
        url = f"{outputs[name]}/stats.json"
        if outputs[name] and (stats := read_json(url)):
            drops = {
                **(get(stats, url, "dropped", kinds=(dict,)) or {}),
                **(get(stats, url, "rejected", kinds=(dict,)) or {}),
            }
            counts = [get(stats, url, k) for k in ("records_in", "documents_out", "sentences", "words")]
            reasons = ", ".join(f"{k} {v}" for k, v in sorted(drops.items())) or "—"
            rows.append(
                [name, *counts[:2], reasons, *counts[2:], get(stats, url, "reconciles", kinds=(bool,))]
            )
    header = "stage|records in|documents out|dropped / rejected by reason|sentences|words|reconciles".split(
        "|"
    )
    url = f"{outputs['corpus']}/stats.json"
    corpus = read_json(url) or {}
    split = ", ".join(
        f"{k} {v}" for k, v in sorted((get(corpus, url, "splits", kinds=(dict,)) or {}).items())
    )
    sections.append((f"## Data card\n\n{table(header, rows)}\n\nCorpus split (documents): {split}\n", "md"))
    histogram = get(corpus, url, "histograms", "sentence_words", kinds=(dict,)) or {}
    if histogram and all(isinstance(v, int) for v in histogram.values()):
        labels, values = list(histogram), list(histogram.values())
        images["sentence_lengths.png"] = bars(
            "Sentence lengths in the corpus (words)", labels, values, "sentences"
        )
        sections.append(("Sentence lengths (words per sentence)", "sentence_lengths.png"))


def _pretraining(run: str, sections: Sections, images: dict[str, bytes]) -> None:
    """First and last training metrics, held-out evaluations and the curves."""
    records = read_json(f"{run}/metrics.jsonl", lines=True)
    train = [r for r in records if r.get("split") == "train"]
    if not train:
        return
    first, last = train[0], train[-1]
    keys = ("loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy", "tokens_per_s")
    steps = [get(r, run, "step") for r in (first, last)]
    seen = get(last, run, "tokens_seen", kinds=(int,))
    text = f"## Pre-training\n\nSteps {steps[0]} → {steps[1]}, {'—' if seen is None else f'{seen:,}'} tokens seen.\n\n"
    text += table(
        ["metric", *(f"step {s}" for s in steps)], [[k, get(first, run, k), get(last, run, k)] for k in keys]
    )
    keys = ["step", "mlm_accuracy", "mlm_perplexity", "nsp_accuracy"]
    valid = [[get(r, run, k) for k in keys] for r in records if r.get("split") == "validation"]
    text += f"\n\nEvaluation on the held-out shards:\n\n{table(keys, valid)}" if valid else ""
    sections.append((text + "\n", "md"))
    _picture(f"{run}/plots/curves.png", "Pre-training curves", sections, images)


STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}img{max-width:100%}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
)


def write(
    url: str, command: str, title: str, sections: Sections, images: dict, extra: dict | None = None
) -> dict:
    """report.md, the self-contained report.html, the images and ``extra`` files (name: text) into
    the folder ``url``, claimed for ``command``; the two reports' paths."""
    markdown = f"# {title}\n\n" + "\n".join(
        text if kind == "md" else f"![{text}]({kind})\n" for text, kind in sections
    )
    body = [f"<!doctype html><html><head><meta charset='utf-8'><style>{STYLE}</style></head><body>"]
    for text, kind in [(f"# {title}", "md"), *sections]:
        data, caption = kind != "md" and base64.b64encode(images[kind]).decode(), html.escape(text)
        figure = f'<figure><img src="data:image/png;base64,{data}" alt="{caption}"><figcaption>{caption}</figcaption></figure>'
        body.append(markdown_to_html(text) if kind == "md" else figure)
    with OutputFolder.open(url, command, continuing=True, option="") as folder:
        folder.begin()
        for name, data in {**images, **(extra or {}), "report.md": markdown}.items():
            folder.write(name, data)
        folder.write("report.html", "".join(body) + "</body></html>")
    return {"markdown": f"{url}/report.md", "html": f"{url}/report.html"}


def markdown_to_html(text: str) -> str:
    return markdown.markdown(text, extensions=["tables"])
