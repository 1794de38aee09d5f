"""The model inputs of ``finetune ner``: a sentence that fits is one window with the paper's
"maximal document context" around it (neighbouring sentences, alternately right and left); a longer
one is read in windows over its own sub-tokens, each word labelled and predicted at its first
sub-token in the window where that has the most context: every word once, in linear time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from finetune.conll import Sentence, to_iob2
from finetune.encoder import Encoder
from finetune.heads import IGNORE
from finetune.sequences import doc_windows, max_context_windows


def default_doc_stride(max_seq_length: int) -> int:
    """Half a window: every sub-token but those near a sentence's ends is read with a quarter on each side."""
    return max(1, (max_seq_length - 2) // 2)


@dataclass
class Windows:
    """The windows of some sentences, and where each word's label and prediction sit."""

    features: list[dict[str, Any]] = field(default_factory=list)
    """Model inputs (``input_ids``, ``token_type_ids``, ``labels``; with spans, ``sentence_start``
    and ``sentence_end``: where the sentence's own sub-tokens lie in the window)."""
    words: list[list[tuple[int, int]]] = field(default_factory=list)
    """Per sentence, per word: ``(feature index, position)`` of its first sub-token in its window."""
    num_long: int = 0
    """Sentences longer than one window, read in several."""

    def summary(self) -> dict[str, int]:
        """``metrics.json``'s count: sentences, those longer than one window, windows."""
        return {
            "sentences": len(self.words),
            "longer_than_one_window": self.num_long,
            "windows": len(self.features),
        }

    def tags(
        self, best: Sequence[Sequence[int]], labels: Sequence[str], starts: Sequence[int] | None = None
    ) -> list[list[str]]:
        """Each sentence's IOB2 tags from ``best``, the label index at every position of every feature."""
        return [
            to_iob2([labels[best[f][p - (starts[f] if starts else 0)]] for f, p in words])
            for words in self.words
        ]


def _document_context(
    sentences: Sequence[Sentence], flat: Sequence[Sequence[int]], index: int, budget: int
) -> tuple[list[int], list[int]]:
    """Up to ``budget`` sub-tokens of the document around sentence ``index``, alternately right and left."""
    document = sentences[index].document
    left: list[list[int]] = []
    right: list[int] = []
    lo, hi = index - 1, index + 1
    while budget > 0:
        grew = False
        if hi < len(sentences) and sentences[hi].document == document:
            right.extend(flat[hi][:budget])
            budget -= len(flat[hi][:budget])
            hi, grew = hi + 1, True
        if budget > 0 and lo >= 0 and sentences[lo].document == document:
            left.append(flat[lo][-budget:])
            budget -= len(left[-1])
            lo, grew = lo - 1, True
        if not grew:
            break
    return [p for piece in reversed(left) for p in piece], right


def sentence_features(
    sentences: Sequence[Sentence],
    encoder: Encoder,
    labels: Sequence[str],
    max_seq_length: int,
    *,
    doc_stride: int | None = None,
    spans: bool = False,
) -> Windows:
    """The windows of ``sentences``; each word's label sits at its first sub-token in its window."""
    special = encoder.tokenizer.special_ids()
    cls_id, sep_id, unk_id = special["[CLS]"], special["[SEP]"], special["[UNK]"]
    label_id = {tag: i for i, tag in enumerate(labels)}
    pieces = encoder.tokenizer.encode_batch([w for s in sentences for w in s.words])
    flat, firsts, at = [], [], 0  # per sentence: its sub-tokens, each word's first sub-token
    for sentence in sentences:
        words = [p or [unk_id] for p in pieces[at : at + len(sentence.words)]]
        at += len(sentence.words)
        flat.append([p for word in words for p in word])
        firsts.append([0])
        for word in words[:-1]:
            firsts[-1].append(firsts[-1][-1] + len(word))
    room = max_seq_length - 2
    stride = doc_stride or default_doc_stride(max_seq_length)
    out = Windows()
    for index, sentence in enumerate(sentences):
        ids, starts = flat[index], firsts[index]
        if len(ids) <= room:
            left, right = _document_context(sentences, flat, index, room - len(ids))
            windows, owner = [(0, len(ids))], [0] * len(starts)
        else:
            left, right = [], []
            windows = doc_windows(len(ids), room, stride)
            best = max_context_windows(windows)
            owner = [best[s] for s in starts]
            out.num_long += 1
        owned: list[list[int]] = [[] for _ in windows]  # the words each window labels
        for word, window in enumerate(owner):
            owned[window].append(word)
        placed = [(-1, -1)] * len(starts)
        offset = 1 + len(left)
        for number, (start, length) in enumerate(windows):
            input_ids = [cls_id, *left, *ids[start : start + length], *right, sep_id]
            targets = [IGNORE] * len(input_ids)
            for word in owned[number]:
                position = offset + starts[word] - start
                placed[word] = (len(out.features), position)
                targets[position] = label_id.get(sentence.tags[word], IGNORE)
            feature = {"input_ids": input_ids, "token_type_ids": [0] * len(input_ids), "labels": targets}
            if spans:
                feature["sentence_start"], feature["sentence_end"] = offset, offset + max(length, 1)
            out.features.append(feature)
        out.words.append(placed)
    return out
