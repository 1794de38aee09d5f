"""The chain's report: ``report/report.md`` and a self-contained ``report/report.html`` with pictures.

Everything comes from the stages' own records (``stats.json``, ``metrics.jsonl``,
``metrics.json``, ``chain.json``); nothing is recomputed from the data.
"""

from __future__ import annotations

import base64
import html
import io
import json

import fsspec

from chain.run import read_json
from schemas.files import write_file
from schemas.outputs import OutputFolder


def _cat(url: str) -> bytes | None:
    fs, path = fsspec.core.url_to_fs(url)
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        return None


def _metrics(run: str) -> list[dict]:
    text = _cat(f"{run}/metrics.jsonl")
    return [json.loads(line) for line in text.decode().splitlines() if line.strip()] if text else []


def _png(figure) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def _bars(title: str, labels: list[str], values: list[float], xlabel: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 0.45 * len(labels) + 1.2))
    axis.barh(labels[::-1], values[::-1], color="#4c72b0")
    for y, v in enumerate(values[::-1]):
        axis.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
    axis.set_title(title)
    axis.set_xlabel(xlabel)
    return _png(figure)


def _table(header: list[str], rows: list[list]) -> str:
    def cell(v) -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


Sections = list[tuple[str, str]]
"""The report's parts in order: (markdown, "md") or (caption, image file name)."""


def build(outputs: dict[str, str], state: dict, workdir: str) -> dict[str, str]:
    """Write the report; return the paths of report.md and report.html."""
    sections: Sections = []
    images: dict[str, bytes] = {}
    for add in (_data_card, _vocabulary, _examples, _pretraining, _finetuning):
        add(outputs, sections, images)
    _stage_times(state, sections, images)
    return _write(workdir, sections, images)


def _data_card(outputs: dict[str, str], sections: Sections, images: dict[str, bytes]) -> None:
    """The documents in, out and dropped per corpus stage, sentence lengths and the split."""
    card_rows, card_labels, card_values = [], [], []
    for name in ("wiki", "books", "corpus"):
        stats = read_json(f"{outputs[name]}/stats.json") if outputs.get(name) else None
        if not stats:
            continue
        drops = {
            **stats.get("dropped", {}),
            **{f"rejected: {k}": v for k, v in stats.get("rejected", {}).items()},
        }
        card_rows.append([
            name, stats["records_in"], stats["documents_out"],
            ", ".join(f"{k} {v:,}" for k, v in sorted(drops.items())) or "—",
            stats.get("sentences", 0), stats.get("words", 0), "yes" if stats.get("reconciles") else "NO",
        ])  # fmt: skip
        card_labels += [f"{name}: in", f"{name}: out"] + [f"{name}: {k}" for k in sorted(drops)]
        card_values += [stats["records_in"], stats["documents_out"]] + [drops[k] for k in sorted(drops)]
    sections.append(("## Data card\n\n" + _table(
        ["stage", "records in", "documents out", "dropped / rejected by reason", "sentences", "words", "reconciles"],
        card_rows) + "\n", "md"))  # fmt: skip
    if card_values:
        images["data_card.png"] = _bars(
            "Documents in, out and dropped per stage", card_labels, card_values, "records"
        )
        sections.append(("Documents in, out and dropped per stage", "data_card.png"))
    corpus = read_json(f"{outputs['corpus']}/stats.json") or {}
    histogram = corpus.get("histograms", {}).get("sentence_words", {})
    if histogram:
        images["sentence_lengths.png"] = _bars(
            "Sentence lengths in the corpus (words)", list(histogram), list(histogram.values()), "sentences"
        )
        sections.append(("Sentence lengths (words per sentence)", "sentence_lengths.png"))
    if corpus.get("splits"):
        sections.append(
            (
                "Corpus split (documents): "
                + ", ".join(f"{k} {v:,}" for k, v in sorted(corpus["splits"].items()))
                + "\n",
                "md",
            )
        )


def _vocabulary(outputs: dict[str, str], sections: Sections, images: dict[str, bytes]) -> None:
    """The vocabulary's statistics."""
    vocab = read_json(f"{outputs['vocab']}/stats.json")
    if vocab:
        keys = ["vocab_size", "num_pieces_learned", "cased", "distinct_words", "measured_on", "pieces_per_word",
                "unk_word_rate", "learn_s", "peak_rss_mb"]  # fmt: skip
        sections.append(
            (
                "## Vocabulary\n\n"
                + _table(["statistic", "value"], [[k, vocab[k]] for k in keys if k in vocab])
                + "\n",
                "md",
            )
        )


def _examples(outputs: dict[str, str], sections: Sections, images: dict[str, bytes]) -> None:
    """The example shards' statistics and length histogram."""
    examples = read_json(f"{outputs['shards']}/stats.json")
    if examples:
        keys = ["examples", "documents_used", "tokens", "random_next_rate", "mask_rate", "masked_share_mask",
                "masked_share_random", "masked_share_unchanged", "truncation_rate", "unk_rate"]  # fmt: skip
        sections.append(
            (
                "## Pre-training examples\n\n"
                + _table(["statistic", "value"], [[k, examples[k]] for k in keys if k in examples])
                + "\n",
                "md",
            )
        )
        png = _cat(f"{outputs['shards']}/length_histogram.png")
        if png:
            images["example_lengths.png"] = png
            sections.append(("Example lengths (tokens)", "example_lengths.png"))


def _pretraining(outputs: dict[str, str], sections: Sections, images: dict[str, bytes]) -> None:
    """First and last training metrics, held-out evaluations and the curves."""
    records = _metrics(outputs["run"])
    train = [r for r in records if r.get("split") == "train"]
    valid = [r for r in records if r.get("split") == "validation"]
    if train:
        first, last = train[0], train[-1]
        rows = [
            [k, first.get(k), last.get(k)]
            for k in ("loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy", "tokens_per_s")
        ]
        text = f"## Pre-training\n\nSteps {first['step']} → {last['step']}, {last.get('tokens_seen', 0):,} tokens seen.\n\n"
        text += _table(["metric", f"step {first['step']}", f"step {last['step']}"], rows) + "\n"
        if valid:
            text += (
                "\nEvaluation on the held-out shards:\n\n"
                + _table(
                    ["step", "MLM accuracy", "MLM perplexity", "NSP accuracy"],
                    [[r["step"], r["mlm_accuracy"], r["mlm_perplexity"], r["nsp_accuracy"]] for r in valid],
                )
                + "\n"
            )
        sections.append((text, "md"))
        png = _cat(f"{outputs['run']}/plots/curves.png")
        if png:
            images["pretraining_curves.png"] = png
            sections.append(("Pre-training curves", "pretraining_curves.png"))


def _finetuning(outputs: dict[str, str], sections: Sections, images: dict[str, bytes]) -> None:
    """The fine-tuned task's dev metrics and majority-class baseline."""
    finetune = read_json(f"{outputs['finetune']}/metrics.json")
    if finetune:
        dev = finetune.get("dev", {})
        rows = [[k, v] for k, v in dev.items() if isinstance(v, (int, float))]
        text = (
            f"## Fine-tuning: {finetune.get('task', '?')}\n\n" + _table(["dev metric", "value"], rows) + "\n"
        )
        baseline = finetune.get("majority_baseline") or finetune.get("baseline")
        if baseline:
            text += f"\nMajority-class baseline: {json.dumps(baseline)}\n"
        sections.append((text, "md"))


def _stage_times(state: dict, sections: Sections, images: dict[str, bytes]) -> None:
    """Wall time and peak memory per stage, from the chain's state."""
    timed = [(name, s) for name, s in state.items() if isinstance(s, dict) and "seconds" in s]
    if timed:
        sections.append(("## Time and peak memory per stage\n\n" + _table(
            ["stage", "seconds", "peak memory (MB)"],
            [[name, s["seconds"], s.get("peak_rss_mb") or "—"] for name, s in timed],
        ) + f"\n\nTotal: {sum(s['seconds'] for _, s in timed):,.0f} s.\n", "md"))  # fmt: skip
        images["stage_times.png"] = _bars(
            "Wall time per stage", [n for n, _ in timed], [s["seconds"] for _, s in timed], "seconds"
        )
        sections.append(("Wall time per stage", "stage_times.png"))


def _write(workdir: str, sections: Sections, images: dict[str, bytes]) -> dict[str, str]:
    """Write report.md, the self-contained report.html and the images under ``workdir/report``."""
    title = "# BERT pre-training: the whole chain on real text\n\n"
    title += f"Work folder: `{workdir}`. Every figure below is read from the stages' own outputs.\n"
    markdown = title + "\n" + "\n".join(
        text if kind == "md" else f"![{text}]({kind})\n" for text, kind in sections
    )  # fmt: skip
    body = []
    for text, kind in sections:
        if kind == "md":
            body.append(_markdown_to_html(text))
        else:
            data = base64.b64encode(images[kind]).decode()
            body.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(text)}"><figcaption>{html.escape(text)}</figcaption></figure>'
            )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>BERT pre-training report</title><style>"
        "body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
        "th{background:#f3f3f3}img{max-width:100%}figure{margin:1em 0}figcaption{color:#666;font-size:90%}"
        "</style></head><body>" + _markdown_to_html(title) + "".join(body) + "</body></html>"
    )
    base = f"{workdir.rstrip('/')}/report"
    with OutputFolder.open(base, "chain report", overwrite=True, option="") as folder:
        folder.begin()  # an earlier report's own files go; anything else there refuses the report
        fs, root = folder.fs, folder.root
        for name, data in images.items():
            write_file(f"{root}/{name}", data, fs)
        write_file(f"{root}/report.md", markdown, fs)
        write_file(f"{root}/report.html", page, fs)
    return {"markdown": f"{base}/report.md", "html": f"{base}/report.html"}


def _markdown_to_html(text: str) -> str:
    """The small subset of Markdown the report uses: headings, tables, paragraphs, `code`."""
    out, table = [], []

    def inline(s: str) -> str:
        parts = html.escape(s).split("`")
        return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))

    def flush_table() -> None:
        if table:
            rows = [r for r in table if not set(r.replace("|", "").strip()) <= {"-"}]
            cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
            head = "".join(f"<th>{inline(c)}</th>" for c in cells[0])
            rest = "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in cells[1:])
            out.append(f"<table><tr>{head}</tr>{rest}</table>")
            table.clear()

    for line in text.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush_table()
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{inline(line[level:].strip())}</h{level}>")
        elif line.strip():
            out.append(f"<p>{inline(line)}</p>")
    flush_table()
    return "\n".join(out)
