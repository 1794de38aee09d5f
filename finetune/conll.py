"""The CoNLL-2003 layout (IOB1 or IOB2 tags, read as IOB2) and conlleval's scoring."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from finetune.inputs import input_lines
from schemas import storage
from schemas.commands import InputError

SPLIT_FILES = {"train": "train.txt", "valid": "valid.txt", "test": "test.txt"}


@dataclass(frozen=True)
class Sentence:
    """One sentence: its words and their NER tags (IOB2), and where it came from."""

    words: tuple[str, ...]
    tags: tuple[str, ...]
    document: int
    line: int


def to_iob2(tags: Sequence[str]) -> list[str]:
    """IOB1 (``I-X`` everywhere, ``B-X`` only between two adjacent entities of one type) or IOB2 to
    IOB2: an ``I-X`` that does not continue an ``X`` entity starts one (``B-X``)."""
    out: list[str] = []
    for index, tag in enumerate(tags):
        if tag.startswith("I-"):
            previous = out[index - 1] if index else "O"
            if previous == "O" or previous[2:] != tag[2:]:
                tag = "B-" + tag[2:]
        out.append(tag)
    return out


def entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """Entities of a tag sequence as conlleval finds them: ``(type, first, last)``."""
    found, start, kind = set(), None, None
    for index, tag in enumerate([*to_iob2(tags), "O"]):
        if tag == "O" or tag.startswith("B-") or (kind is not None and tag[2:] != kind):
            if kind is not None:
                found.add((kind, start, index - 1))
            start, kind = (index, tag[2:]) if tag != "O" else (None, None)
    return found


def score(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Entity-level precision, recall, F1 and gold count per type and overall (micro), as conlleval."""
    correct, guessed, truth = Counter(), Counter(), Counter()
    for gold_tags, pred_tags in zip(gold, predicted, strict=True):
        g, p = entities(gold_tags), entities(pred_tags)
        correct.update(kind for kind, *_ in g & p)
        guessed.update(kind for kind, *_ in p)
        truth.update(kind for kind, *_ in g)

    def prf(correct: int, n_pred: int, n_gold: int) -> dict[str, float | int]:
        precision = correct / n_pred if n_pred else 0.0
        recall = correct / n_gold if n_gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1, "support": n_gold}

    per_type = {kind: prf(correct[kind], guessed[kind], truth[kind]) for kind in sorted(guessed | truth)}
    overall = prf(sum(correct.values()), sum(guessed.values()), sum(truth.values()))
    return {**overall, "per_type": per_type}


def read_conll(path: str) -> list[Sentence]:
    """Read a CoNLL-2003 file; a bad line or tag is an :class:`InputError` naming ``file:line``."""
    if not storage.exists(path):
        raise InputError(f"{path} not found (CoNLL-2003 layout: train.txt, valid.txt, test.txt)")
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []
    document, first = 0, 0
    for number, line in itertools.chain(
        input_lines(path), [(0, "")]
    ):  # a last blank line closes the last sentence
        columns = line.split()
        if (not columns or columns[0] == "-DOCSTART-") and words:
            sentences.append(Sentence(tuple(words), tuple(to_iob2(tags)), document, first))
            words, tags = [], []
        if not columns:
            continue
        if columns[0] == "-DOCSTART-":
            document += 1
            continue
        if len(columns) != 4:
            raise InputError(f"{path}:{number}: expected 4 columns (token POS chunk NER), got {len(columns)}")
        if columns[3] != "O" and not (columns[3][:2] in ("B-", "I-") and len(columns[3]) > 2):
            raise InputError(f"{path}:{number}: NER tag {columns[3]!r} is not O, B-TYPE or I-TYPE")
        if not words:
            first = number
        words.append(columns[0])
        tags.append(columns[3])
    if not sentences:
        raise InputError(f"{path}: no sentences")
    return sentences
