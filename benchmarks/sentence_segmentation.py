"""Sentence segmenters: boundary accuracy on a hand-checked gold set, and throughput on one core.

    python benchmarks/sentence_segmentation.py [--budget SECONDS] [--show-errors NAME]

The gold set (``data/sentence_gold.json``, docs/sentence-segmentation.md) holds locators into
``../shared/data`` and the offsets where each gold sentence starts. Scored: precision, recall and F1
of the boundaries inside a passage, and the share of passages split exactly. Throughput: UTF-8 input
over the time inside the segmenter, one paragraph per call, pinned to one core, on 2 MB of the
novels' paragraphs; a segmenter slower than ``--budget`` seconds is rated on the part it got
through. Ours is ``pipelines.text.split_sentences``; the peers raw Bling Fire (what it wraps),
pysbd, syntok and NLTK Punkt (untrained, and trained on the throughput text).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n, x

DATA_DIR = harness.DATA
GOLD_PATH = harness.ROOT / "benchmarks" / "data" / "sentence_gold.json"
_SPACES = re.compile(r"\s+")
_GUTENBERG_START = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_GUTENBERG_END = re.compile(r"^\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)

Segmenter = Callable[[str], list[str]]
"""One paragraph in, its sentences out, in order."""


def read_lines(path: Path) -> list[str]:
    """Lines of a text file decoded as UTF-8 (BOM optional), else cp1252, without CRs."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("cp1252")
    return text.replace("\r", "").split("\n")


@dataclass(frozen=True)
class Passage:
    """One gold passage: its locator, its text and the offsets where its sentences start."""

    file: str
    start_line: int
    end_line: int
    text: str
    sentence_starts: tuple[int, ...]

    @property
    def source(self) -> str:
        """``bert-sample``, ``books`` or ``wiki``."""
        if self.file.endswith("bert_sample_text.txt"):
            return "bert-sample"
        return "wiki" if self.file.startswith("wiki/") else "books"

    @property
    def sentences(self) -> list[str]:
        ends = [*self.sentence_starts[1:], len(self.text)]
        return [self.text[a:b].strip() for a, b in zip(self.sentence_starts, ends, strict=True)]

    @property
    def boundaries(self) -> frozenset[int]:
        """Gold sentence starts inside the passage (all but the one at offset 0)."""
        return frozenset(self.sentence_starts[1:])


def load_gold(data_dir: Path = DATA_DIR, gold_path: Path = GOLD_PATH) -> list[Passage]:
    """The gold passages, rebuilt from their locators and the files under ``data_dir``."""
    lines: dict[str, list[str]] = {}
    passages = []
    for entry in json.loads(gold_path.read_text(encoding="utf-8")):
        name, first, last = entry["file"], entry["start_line"], entry["end_line"]
        if name not in lines:
            lines[name] = read_lines(data_dir / name)
        text = _SPACES.sub(" ", " ".join(line.strip() for line in lines[name][first - 1 : last])).strip()
        passages.append(Passage(name, first, last, text, tuple(entry["sentence_starts"])))
    return passages


def predicted_boundaries(segment: Segmenter, passage: Passage) -> frozenset[int]:
    """Where ``segment``'s sentences start inside the passage, matched ignoring whitespace (so a
    segmenter that trims or collapses spaces still aligns); ``ValueError`` when one is not found."""
    starts, cursor = set(), 0
    for sentence in segment(passage.text):
        chars = [re.escape(ch) for ch in sentence if not ch.isspace()]
        if not chars:
            continue
        match = re.compile(r"\s*".join(chars)).search(passage.text, cursor)
        if match is None:
            raise ValueError(f"segment not found after offset {cursor}: {sentence[:60]!r}")
        starts.add(match.start())
        cursor = match.end()
    return frozenset(starts - {0})


def evaluate(segment: Segmenter, passages: Iterable[Passage]) -> dict[str, dict]:
    """Boundary precision, recall and F1 of ``segment`` against the gold, and the share of passages
    it splits exactly, overall (key ``all``) and per source, with the counts behind them."""
    counts: dict[str, Counter] = {}
    for passage in passages:
        gold, predicted = passage.boundaries, predicted_boundaries(segment, passage)
        for key in ("all", passage.source):
            c = counts.setdefault(key, Counter())
            c.update(true_positives=len(gold & predicted), false_positives=len(predicted - gold))
            c.update(false_negatives=len(gold - predicted), exact_passages=gold == predicted, passages=1)
    scores = {}
    for key, c in counts.items():
        tp, fp, fn = c["true_positives"], c["false_positives"], c["false_negatives"]
        precision, recall = tp / (tp + fp) if tp + fp else 1.0, tp / (tp + fn) if tp + fn else 1.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        exact = c["exact_passages"] / c["passages"]
        scores[key] = {"precision": precision, "recall": recall, "f1": f1, "exact_share": exact, **c}
    return scores


def throughput_corpus(target_bytes: int = 2_000_000) -> list[str]:
    """About ``target_bytes`` of the novels' body paragraphs (whitespace collapsed), taken from
    the novels in turn."""
    books = []
    for path in sorted(harness.BOOKS.glob("*.txt")):
        lines = read_lines(path)
        start = next((i for i, line in enumerate(lines) if _GUTENBERG_START.match(line)), -1) + 1
        end = next((i for i, line in enumerate(lines) if _GUTENBERG_END.match(line)), len(lines))
        paragraphs, block = [], []
        for line in [*lines[start:end], ""]:
            if line.strip():
                block.append(line.strip())
            elif block:
                paragraphs.append(_SPACES.sub(" ", " ".join(block)))
                block = []
        books.append(paragraphs)
    corpus, size = [], 0
    for index in range(max(map(len, books))):
        for book in books:
            if index < len(book) and size < target_bytes:
                corpus.append(book[index])
                size += len(book[index].encode("utf-8"))
    return corpus


def throughput(segment: Segmenter, paragraphs: Sequence[str], budget_s: float, repeats: int) -> dict:
    """MB/s of segmenter time over ``paragraphs``, one call each; a run stops after ``budget_s``,
    and runs repeat (up to ``repeats``, the median kept) only while one covers the whole corpus."""
    sizes = [len(p.encode("utf-8")) for p in paragraphs]
    segment(paragraphs[0])  # warm up: model loading, regex compilation
    rates, bytes_timed = [], sum(sizes)
    for _ in range(repeats):
        elapsed, done = 0.0, 0
        for paragraph, size in zip(paragraphs, sizes, strict=True):
            start = time.perf_counter()
            segment(paragraph)
            elapsed += time.perf_counter() - start
            done += size
            if elapsed >= budget_s:
                break
        rates.append(done / elapsed / 1e6)
        bytes_timed = min(bytes_timed, done)
        if done < sum(sizes):
            break
    return {
        "mb_per_s": statistics.median(rates),
        "throughput_runs_mb_per_s": rates,
        "bytes_timed": bytes_timed,
        "throughput_extrapolated": bytes_timed < sum(sizes),
    }


def candidates(train_text: str) -> dict[str, tuple[str, Callable[[], Segmenter]]]:
    """Name -> (description, factory) of every segmenter; a factory raises ImportError when its
    package is not installed."""

    def blingfire() -> Segmenter:
        import blingfire

        return lambda text: blingfire.text_to_sentences(text).split("\n")

    def project() -> Segmenter:
        from pipelines.text import split_sentences

        return split_sentences

    def pysbd() -> Segmenter:
        import pysbd

        return pysbd.Segmenter(language="en", clean=False).segment

    def syntok() -> Segmenter:
        from syntok import segmenter

        return lambda text: [
            "".join(token.spacing + token.value for token in sentence)
            for paragraph in segmenter.analyze(text)
            for sentence in paragraph
        ]

    def punkt(train: str | None = None) -> Segmenter:
        from nltk.tokenize.punkt import PunktSentenceTokenizer

        return (PunktSentenceTokenizer(train) if train else PunktSentenceTokenizer()).tokenize

    return {
        "blingfire": ("blingfire.text_to_sentences", blingfire),
        "project": ("pipelines.text.split_sentences (the pipelines' wrapper)", project),
        "pysbd": ('pysbd.Segmenter(language="en", clean=False)', pysbd),
        "syntok": ("syntok.segmenter.analyze", syntok),
        "punkt": ("nltk PunktSentenceTokenizer(), untrained", punkt),
        "punkt-trained": (
            "nltk PunktSentenceTokenizer trained on the throughput corpus",
            lambda: punkt(train_text),
        ),
    }


def show_errors(segment: Segmenter, passages: Iterable[Passage]) -> None:
    """Print every missed (FN) and spurious (FP) boundary with its context."""
    for passage in passages:
        predicted = predicted_boundaries(segment, passage)
        for kind, offsets in (("FN", passage.boundaries - predicted), ("FP", predicted - passage.boundaries)):
            for offset in sorted(offsets):
                context = f"...{passage.text[max(0, offset - 40) : offset]}<|>{passage.text[offset : offset + 40]}..."
                print(f"{kind} {passage.file}:{passage.start_line}  {context}")


def main() -> None:
    parser = harness.parser(__doc__, "sentence_segmentation")
    parser.add_argument("--budget", type=float, default=10.0, help="segmenter seconds per throughput run")
    parser.add_argument("--repeats", type=int, default=3, help="throughput runs (median)")
    parser.add_argument("--show-errors", metavar="NAME", help="list the boundary errors of one candidate")
    args = parser.parse_args()
    harness.require(GOLD_PATH, harness.BOOKS)
    passages = load_gold()
    corpus = throughput_corpus()
    factories = candidates(" ".join(corpus))
    if args.show_errors:
        if args.show_errors not in factories:
            sys.exit(f"no candidate named {args.show_errors!r}: {', '.join(factories)}")
        show_errors(factories[args.show_errors][1](), passages)
        return
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    report: dict = {
        "gold": {"passages": len(passages), "sentences": sum(len(p.sentence_starts) for p in passages)},
        "throughput_corpus_bytes": sum(len(p.encode("utf-8")) for p in corpus),
        "pinned_cpu": cpu,
        "skipped": [],
        "candidates": {},
    }
    for name, (description, factory) in factories.items():
        try:
            segment = factory()
        except ImportError as error:
            report["skipped"].append(f"skipped {name}: {error.name or error} is not installed")
            continue
        scores = evaluate(segment, passages)
        speed = throughput(segment, corpus, args.budget, args.repeats)
        report["candidates"][name] = {"description": description, "scores": scores, **speed}
    print("\n".join(report["skipped"] + candidates_table(report) + [""] + sources_table(report)))
    harness.write(args.json, report, "blingfire", "pysbd", "syntok", "nltk")


def candidates_table(r: dict) -> list[str]:
    """Every segmenter's precision, recall, F1, exact passages and MB/s, as Markdown."""
    lines = [
        "| segmenter | precision | recall | F1 | passages exact | MB/s (1 core) |",
        "|---|---|---|---|---|---|",
    ]
    for name, c in r["candidates"].items():
        s = c["scores"]["all"]
        timed = f" (timed on {c['bytes_timed'] / 1e6:.2f} MB)" if c["throughput_extrapolated"] else ""
        exact = f"{s['exact_share']:.1%} ({s['exact_passages']}/{s['passages']})"
        lines.append(
            f"| {name} | {s['precision']:.3f} | {s['recall']:.3f} | {s['f1']:.3f} | {exact} | {n(c['mb_per_s'])}{timed} |"
        )
    return lines


def sources_table(r: dict) -> list[str]:
    """Every segmenter's F1 on each source of the gold, as Markdown."""
    sources = sorted(next(iter(r["candidates"].values()))["scores"].keys() - {"all"})
    lines = [
        "| segmenter | " + " | ".join(f"F1 {s}" for s in sources) + " |",
        "|---|" + "---|" * len(sources),
    ]
    for name, c in r["candidates"].items():
        lines.append(f"| {name} | " + " | ".join(f"{c['scores'][s]['f1']:.3f}" for s in sources) + " |")
    return lines


TABLES = {"candidates": candidates_table, "sources": sources_table}


def rows(r: dict) -> list[Row]:
    found, candidates = [], r["candidates"]
    ours = candidates["project"]
    where = (
        f"F1 on {r['gold']['sentences']} hand-checked sentences, speed on "
        f"{n(r['throughput_corpus_bytes'] / 1e6)} MB of text, 1 core"
    )
    figure = f"F1 {ours['scores']['all']['f1']:.3f}, {n(ours['mb_per_s'])} MB/s"

    def peer(label: str, c: dict) -> str:
        return f"{label}: F1 {c['scores']['all']['f1']:.3f}, {n(c['mb_per_s'])} MB/s"

    if "blingfire" in candidates:  # the library we wrap, what a user would otherwise call
        raw = candidates["blingfire"]
        found.append(
            (
                f"sentence segmentation against the raw library we wrap; {where}",
                figure,
                peer("raw Bling Fire (text_to_sentences)", raw),
                x(ours["mb_per_s"] / raw["mb_per_s"]),
            )
        )
    others = {k: c for k, c in candidates.items() if k not in ("project", "blingfire")}
    if others:
        name, best = max(others.items(), key=lambda kv: kv[1]["scores"]["all"]["f1"])
        label = f"{name} (the most accurate of the other segmenters)"
        found.append(
            (
                f"sentence segmentation, speed; {where}",
                figure,
                peer(label, best),
                x(ours["mb_per_s"] / best["mb_per_s"]),
            )
        )
    return found


if __name__ == "__main__":
    main()
