"""Measure sentence segmenters: boundary accuracy on a hand-checked gold set, and throughput.

Usage::

    .venv/bin/python benchmarks/sentence_segmentation.py [--json OUT] [--budget SECONDS]
                                                         [--show-errors NAME]

The gold set (``benchmarks/data/sentence_gold.json``) holds no third-party text, only
locators into ``../shared/data``: a list of passages ``{"file", "start_line", "end_line",
"sentence_starts"}``. A passage's text is lines ``start_line..end_line`` (1-based, inclusive) of
the file decoded as UTF-8 (with or without BOM, falling back to cp1252) with CRs removed, each
line stripped, joined with single spaces and every whitespace run collapsed to one space.
``sentence_starts`` are the code-point offsets in that text where each gold sentence starts;
:func:`load_gold` rebuilds the passages and their gold sentences.

Accuracy is scored on sentence boundaries inside a passage (every sentence start but the first):
precision, recall and F1 over all passages, and the share of passages whose boundaries are
exactly the gold ones. Throughput is the UTF-8 input size over the time spent inside the
segmenter call, one paragraph per call (as the pipelines call it), pinned to one CPU core, on
about 2 MB of paragraphs from the Gutenberg novels. A slow segmenter stops after ``--budget``
seconds of segmenter time and its rate is the one measured on the part it got through (the
report says how much that was).

The data folder is ``../shared/data`` next to the project; the script exits with an error
message when it is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
GOLD_PATH = Path(__file__).resolve().parent / "data" / "sentence_gold.json"
GUTENBERG_DIR = "books/gutenberg"
THROUGHPUT_TARGET_BYTES = 2_000_000
DEFAULT_BUDGET_S = 10.0
DEFAULT_REPEATS = 3

_WHITESPACE_RE = re.compile(r"\s+")
_GUTENBERG_START_RE = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_GUTENBERG_END_RE = re.compile(r"^\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)

Segmenter = Callable[[str], list[str]]
"""A segmenter takes one paragraph and returns its sentences as strings, in order."""


# --------------------------------------------------------------------------------------------
# Gold set


def read_lines(path: Path) -> list[str]:
    """Lines of a text file decoded as UTF-8 (BOM optional), else cp1252, without CRs."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("cp1252")
    return text.replace("\r", "").split("\n")


def passage_text(lines: Sequence[str], start_line: int, end_line: int) -> str:
    """Lines ``start_line..end_line`` (1-based, inclusive) stripped, joined and space-collapsed."""
    joined = " ".join(line.strip() for line in lines[start_line - 1 : end_line])
    return _WHITESPACE_RE.sub(" ", joined).strip()


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
        """Which kind of text this is: ``bert-sample``, ``books`` or ``wiki``."""
        if self.file.endswith("bert_sample_text.txt"):
            return "bert-sample"
        return "wiki" if self.file.startswith("wiki/") else "books"

    @property
    def sentences(self) -> list[str]:
        """The gold sentences, without the separating spaces."""
        ends = [*self.sentence_starts[1:], len(self.text)]
        return [self.text[a:b].strip() for a, b in zip(self.sentence_starts, ends, strict=True)]

    @property
    def boundaries(self) -> frozenset[int]:
        """Gold sentence starts inside the passage (all but the one at offset 0)."""
        return frozenset(self.sentence_starts[1:])


def load_gold(data_dir: Path = DATA_DIR, gold_path: Path = GOLD_PATH) -> list[Passage]:
    """Rebuild the gold passages from their locators in ``gold_path`` and the files under ``data_dir``."""
    entries = json.loads(gold_path.read_text(encoding="utf-8"))
    lines_by_file: dict[str, list[str]] = {}
    passages = []
    for entry in entries:
        name = entry["file"]
        if name not in lines_by_file:
            lines_by_file[name] = read_lines(data_dir / name)
        text = passage_text(lines_by_file[name], entry["start_line"], entry["end_line"])
        passages.append(
            Passage(name, entry["start_line"], entry["end_line"], text, tuple(entry["sentence_starts"]))
        )
    return passages


# --------------------------------------------------------------------------------------------
# Scoring


def sentence_starts(text: str, sentences: Iterable[str]) -> list[int]:
    """Offsets in ``text`` where each of ``sentences`` starts, found in order.

    Matching ignores whitespace, so segmenters that trim or collapse spaces still align; a
    sentence whose other characters are not found next in ``text`` raises ``ValueError``.
    """
    starts: list[int] = []
    cursor = 0
    for sentence in sentences:
        chars = [re.escape(ch) for ch in sentence if not ch.isspace()]
        if not chars:
            continue
        match = re.compile(r"\s*".join(chars)).search(text, cursor)
        if match is None:
            raise ValueError(f"segment not found in passage after offset {cursor}: {sentence[:60]!r}")
        starts.append(match.start())
        cursor = match.end()
    return starts


@dataclass
class Scores:
    """Boundary counts over a set of passages, and the precision/recall/F1 they give."""

    true_positives: int = 0
    false_positives: int = 0
    false_negatives: int = 0
    exact_passages: int = 0
    passages: int = 0

    def add(self, gold: frozenset[int], predicted: frozenset[int]) -> None:
        """Count one passage's gold and predicted boundaries."""
        self.true_positives += len(gold & predicted)
        self.false_positives += len(predicted - gold)
        self.false_negatives += len(gold - predicted)
        self.exact_passages += gold == predicted
        self.passages += 1

    @property
    def precision(self) -> float:
        """Share of predicted boundaries that are gold boundaries (1.0 when none predicted)."""
        predicted = self.true_positives + self.false_positives
        return self.true_positives / predicted if predicted else 1.0

    @property
    def recall(self) -> float:
        """Share of gold boundaries that were predicted (1.0 when there are none)."""
        gold = self.true_positives + self.false_negatives
        return self.true_positives / gold if gold else 1.0

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def exact_share(self) -> float:
        """Share of passages whose predicted boundaries are exactly the gold ones."""
        return self.exact_passages / self.passages if self.passages else 1.0

    def as_dict(self) -> dict[str, float | int]:
        """Return the rates and the counts behind them, for the JSON report."""
        return {
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "exact_share": self.exact_share,
            "true_positives": self.true_positives,
            "false_positives": self.false_positives,
            "false_negatives": self.false_negatives,
            "exact_passages": self.exact_passages,
            "passages": self.passages,
        }


def predicted_boundaries(segment: Segmenter, passage: Passage) -> frozenset[int]:
    """Sentence starts inside ``passage`` (not offset 0) according to ``segment``."""
    return frozenset(sentence_starts(passage.text, segment(passage.text))) - {0}


def evaluate(segment: Segmenter, passages: Iterable[Passage]) -> dict[str, Scores]:
    """Scores of ``segment`` against the gold, overall (key ``all``) and per source."""
    scores: dict[str, Scores] = {"all": Scores()}
    for passage in passages:
        gold, predicted = passage.boundaries, predicted_boundaries(segment, passage)
        scores["all"].add(gold, predicted)
        scores.setdefault(passage.source, Scores()).add(gold, predicted)
    return scores


# --------------------------------------------------------------------------------------------
# Throughput


def gutenberg_paragraphs(data_dir: Path = DATA_DIR) -> list[list[str]]:
    """Per Gutenberg novel, its body paragraphs (blank-line separated, whitespace collapsed)."""
    books = []
    for path in sorted((data_dir / GUTENBERG_DIR).glob("*.txt")):
        lines = read_lines(path)
        start = next((i for i, line in enumerate(lines) if _GUTENBERG_START_RE.match(line)), -1) + 1
        end = next((i for i, line in enumerate(lines) if _GUTENBERG_END_RE.match(line)), len(lines))
        paragraphs, block = [], []
        for line in [*lines[start:end], ""]:
            if line.strip():
                block.append(line.strip())
            elif block:
                paragraphs.append(_WHITESPACE_RE.sub(" ", " ".join(block)))
                block = []
        books.append(paragraphs)
    return books


def throughput_corpus(data_dir: Path = DATA_DIR, target_bytes: int = THROUGHPUT_TARGET_BYTES) -> list[str]:
    """About ``target_bytes`` of UTF-8 paragraphs, taken from the novels in turn (round robin)."""
    books = gutenberg_paragraphs(data_dir)
    corpus: list[str] = []
    size = 0
    for index in range(max(len(book) for book in books)):
        for book in books:
            if index < len(book):
                corpus.append(book[index])
                size += len(book[index].encode("utf-8"))
                if size >= target_bytes:
                    return corpus
    return corpus


@dataclass
class Throughput:
    """Megabytes (10**6 bytes of UTF-8 input) per second of segmenter time."""

    mb_per_s: float
    bytes_timed: int
    corpus_bytes: int
    runs: list[float] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether the timed runs covered the whole corpus (else the rate is extrapolated)."""
        return self.bytes_timed >= self.corpus_bytes


def measure_throughput(
    segment: Segmenter, paragraphs: Sequence[str], budget_s: float, repeats: int = DEFAULT_REPEATS
) -> Throughput:
    """Time ``segment`` over ``paragraphs``, one call each, counting only time inside the calls.

    A run stops once ``budget_s`` seconds of segmenter time are spent; runs are repeated (up to
    ``repeats``) only while a run covers the whole corpus, and the median rate is reported.
    """
    sizes = [len(p.encode("utf-8")) for p in paragraphs]
    corpus_bytes = sum(sizes)
    segment(paragraphs[0])  # warm up: model loading, regex compilation
    rates: list[float] = []
    bytes_timed = corpus_bytes
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
        if done < corpus_bytes:
            break
    return Throughput(statistics.median(rates), bytes_timed, corpus_bytes, rates)


def pin_to_one_core() -> str:
    """Restrict this process to one CPU where the OS allows it; says what was done."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no sched_setaffinity)"
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return f"pinned to CPU {cpu}"


# --------------------------------------------------------------------------------------------
# Candidates


@dataclass
class Candidate:
    """A segmenter under test."""

    name: str
    description: str
    segment: Segmenter


def _blingfire() -> Segmenter:
    import blingfire

    return lambda text: blingfire.text_to_sentences(text).split("\n")


def _project() -> Segmenter:
    try:
        from pipelines.text import split_sentences
    except ImportError:
        sys.path.insert(0, str(REPO_ROOT))
        from pipelines.text import split_sentences
    return split_sentences


def _pysbd() -> Segmenter:
    import pysbd

    segmenter = pysbd.Segmenter(language="en", clean=False)
    return segmenter.segment


def _syntok() -> Segmenter:
    from syntok import segmenter

    def segment(text: str) -> list[str]:
        return [
            "".join(token.spacing + token.value for token in sentence)
            for paragraph in segmenter.analyze(text)
            for sentence in paragraph
        ]

    return segment


def _punkt_untrained() -> Segmenter:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer().tokenize


def _punkt_trained(train_text: str) -> Segmenter:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer(train_text).tokenize


def build_candidates(train_text: str) -> tuple[list[Candidate], list[str]]:
    """Build the candidates whose package is installed; also return one line per candidate skipped."""
    factories: list[tuple[str, str, Callable[[], Segmenter]]] = [
        ("blingfire", "blingfire.text_to_sentences", _blingfire),
        ("project", "pipelines.text.split_sentences (the pipelines' wrapper)", _project),
        ("pysbd", 'pysbd.Segmenter(language="en", clean=False)', _pysbd),
        ("syntok", "syntok.segmenter.analyze", _syntok),
        ("punkt", "nltk PunktSentenceTokenizer(), untrained", _punkt_untrained),
        (
            "punkt-trained",
            "nltk PunktSentenceTokenizer trained on the throughput corpus",
            lambda: _punkt_trained(train_text),
        ),
    ]
    candidates, skipped = [], []
    for name, description, factory in factories:
        try:
            candidates.append(Candidate(name, description, factory()))
        except ImportError as error:
            skipped.append(f"skipped {name}: {error.name or error} is not installed")
    return candidates, skipped


# --------------------------------------------------------------------------------------------
# Report


def _context(text: str, offset: int, width: int = 40) -> str:
    return f"...{text[max(0, offset - width) : offset]}<|>{text[offset : offset + width]}..."


def show_errors(candidate: Candidate, passages: Iterable[Passage]) -> None:
    """Print every missed (FN) and spurious (FP) boundary of ``candidate`` with context."""
    for passage in passages:
        predicted = predicted_boundaries(candidate.segment, passage)
        for offset in sorted(passage.boundaries - predicted):
            print(f"FN {passage.file}:{passage.start_line}  {_context(passage.text, offset)}")
        for offset in sorted(predicted - passage.boundaries):
            print(f"FP {passage.file}:{passage.start_line}  {_context(passage.text, offset)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its tables; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument(
        "--budget", type=float, default=DEFAULT_BUDGET_S, help="segmenter seconds per throughput run"
    )
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="throughput runs (median)")
    parser.add_argument("--show-errors", metavar="NAME", help="list the boundary errors of one candidate")
    args = parser.parse_args(argv)

    if not DATA_DIR.is_dir():
        sys.exit(f"error: shared data folder {DATA_DIR} not found; this benchmark needs ../shared/data")

    passages = load_gold()
    by_source: dict[str, list[int]] = {}
    for passage in passages:
        by_source.setdefault(passage.source, []).append(len(passage.sentence_starts))
    sentences = sum(sum(counts) for counts in by_source.values())
    print(f"gold: {len(passages)} passages, {sentences} sentences")
    for source, counts in sorted(by_source.items()):
        print(f"  {source}: {len(counts)} passages, {sum(counts)} sentences")

    corpus = throughput_corpus()
    corpus_bytes = sum(len(p.encode("utf-8")) for p in corpus)
    print(f"throughput corpus: {len(corpus)} paragraphs, {corpus_bytes / 1e6:.2f} MB; {pin_to_one_core()}")

    candidates, skipped = build_candidates(" ".join(corpus))
    for line in skipped:
        print(line)
    if args.show_errors:
        chosen = [c for c in candidates if c.name == args.show_errors]
        if not chosen:
            sys.exit(f"error: no candidate named {args.show_errors!r}")
        show_errors(chosen[0], passages)
        return 0

    results = []
    for candidate in candidates:
        scores = evaluate(candidate.segment, passages)
        speed = measure_throughput(candidate.segment, corpus, args.budget, args.repeats)
        results.append((candidate, scores, speed))

    print()
    print("| segmenter | precision | recall | F1 | passages exact | MB/s (1 core) |")
    print("|---|---|---|---|---|---|")
    for candidate, scores, speed in results:
        total = scores["all"]
        timed = "" if speed.complete else f" (timed on {speed.bytes_timed / 1e6:.2f} MB, extrapolated)"
        exact = f"{total.exact_share:.1%} ({total.exact_passages}/{total.passages})"
        print(
            f"| {candidate.name} | {total.precision:.3f} | {total.recall:.3f} | {total.f1:.3f} | "
            f"{exact} | {speed.mb_per_s:.3g}{timed} |"
        )
    sources = sorted(by_source)
    print()
    print("| segmenter | " + " | ".join(f"F1 {s}" for s in sources) + " |")
    print("|---|" + "---|" * len(sources))
    for candidate, scores, _ in results:
        print(f"| {candidate.name} | " + " | ".join(f"{scores[s].f1:.3f}" for s in sources) + " |")

    if args.json:
        report = {
            "gold": {"passages": len(passages), "sentences": sentences},
            "throughput_corpus_bytes": corpus_bytes,
            "skipped": skipped,
            "candidates": {
                candidate.name: {
                    "description": candidate.description,
                    "scores": {source: s.as_dict() for source, s in scores.items()},
                    "mb_per_s": speed.mb_per_s,
                    "throughput_runs_mb_per_s": speed.runs,
                    "bytes_timed": speed.bytes_timed,
                    "throughput_extrapolated": not speed.complete,
                }
                for candidate, scores, speed in results
            },
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
