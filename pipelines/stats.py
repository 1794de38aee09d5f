"""Counting what a stage did: flat ``Counter`` tallies that sum across workers, in any order, into
``stats.json``, where every record read is written, dropped or rejected, with a reason."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

HISTOGRAMS = ("sentence_words", "document_sentences", "document_words")


def bucket_label(value: int) -> str:
    """Power-of-two bucket of a non-negative count: ``0``, ``1``, ``2-3``, ``4-7``, ..."""
    if value <= 1:
        return str(max(value, 0))
    low = 1 << (value.bit_length() - 1)
    return f"{low}-{2 * low - 1}"


def document_tally(sentences: list[str], split: str | None = None, words: list[int] | None = None) -> Counter:
    """The tally of one written document (``words``: its words per sentence, when already counted)."""
    if words is None:
        words = [len(s.split()) for s in sentences]
    tally: Counter = Counter(
        documents_out=1,
        sentences=len(sentences),
        words=sum(words),
        characters=sum(len(s) for s in sentences),
    )
    tally[f"hist/document_sentences/{bucket_label(len(sentences))}"] += 1
    tally[f"hist/document_words/{bucket_label(sum(words))}"] += 1
    for n, count in Counter(words).items():  # a label per distinct length, not per sentence
        tally[f"hist/sentence_words/{bucket_label(n)}"] += count
    if split is not None:
        tally[f"splits/{split}"] += 1
    return tally


def sum_tallies(tallies) -> Counter:
    """Sum an iterable of tallies (the combiner behind ``stats.json``); ``largest_*`` keys keep the largest."""
    total: Counter = Counter()
    for tally in tallies:
        largest = {key: max(value, total[key]) for key, value in tally.items() if key.startswith("largest_")}
        total.update(tally)
        total.update({key: value - total[key] for key, value in largest.items()})
    return total


def build_stats(tally: Mapping[str, int]) -> dict[str, Any]:
    """A summed tally as ``stats.json``; ``reconciles``: every record read is written, dropped or rejected."""
    nested: dict[str, dict[str, int]] = {"dropped": {}, "rejected": {}, "file_errors": {}, "splits": {}}
    histograms: dict[str, dict[str, int]] = {name: {} for name in HISTOGRAMS}
    flat: dict[str, int] = {}
    for key, value in tally.items():
        head, _, rest = key.partition("/")
        if head == "hist":
            name, _, label = rest.partition("/")
            histograms[name][label] = value
        elif head in nested:
            nested[head][rest] = value
        else:
            flat[key] = value
    stats: dict[str, Any] = {
        "records_in": flat.pop("records_in", 0),
        "documents_out": flat.pop("documents_out", 0),
        "dropped": dict(sorted(nested["dropped"].items())),
        "rejected": dict(sorted(nested["rejected"].items())),
        "file_errors": dict(sorted(nested["file_errors"].items())),
        "sentences": flat.pop("sentences", 0),
        "words": flat.pop("words", 0),
        "characters": flat.pop("characters", 0),
        "histograms": {
            name: dict(sorted(h.items(), key=lambda kv: int(kv[0].split("-")[0])))
            for name, h in histograms.items()
        },
    }
    if nested["splits"]:
        stats["splits"] = dict(sorted(nested["splits"].items()))
    stats.update(sorted(flat.items()))
    accounted = stats["documents_out"] + sum(stats["dropped"].values()) + sum(stats["rejected"].values())
    stats["reconciles"] = accounted == stats["records_in"]
    return stats
