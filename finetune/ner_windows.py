"""The model inputs of ``finetune ner``: each sentence in a window of sub-tokens, a long sentence in
several.

A sentence whose sub-tokens fit in ``max_seq_length - 2`` is one window, ``[CLS] left context,
sentence, right context [SEP]``, the context taken alternately from the neighbouring sentences of
the same document (nearest first) until the window is full: the paper's "maximal document
context". A longer sentence is read in overlapping windows over its own sub-tokens, each starting
``doc_stride`` sub-tokens after the previous one, as ``finetune squad`` reads a long context
(:func:`finetune.squad.doc_windows`); each word is labelled and predicted at its first sub-token
in the one window where that sub-token has the most context (:func:`finetune.squad.is_max_context`:
the largest min(left, right) context, the first window on ties). So every word of every sentence
is trained on and predicted exactly once, whatever its length; before, the words past the first
window were never trained on and always predicted ``O``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from finetune.common import Encoder
from finetune.conll import Sentence, to_iob2
from finetune.heads import IGNORE
from finetune.squad import doc_windows, is_max_context


def default_doc_stride(max_seq_length: int) -> int:
    """Half a window: consecutive windows of a long sentence overlap by half, so every sub-token
    but those near the sentence's ends is read with at least a quarter window on each side."""
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
        """Each sentence's IOB2 tags from ``best``, the label index at every position of every
        feature (counted from ``starts[feature]`` when given: logits over the sentence span only)."""
        return [
            to_iob2([labels[best[f][p - (starts[f] if starts else 0)]] for f, p in words])
            for words in self.words
        ]


def _word_pieces(encoder: Encoder, sentences: Sequence[Sentence]) -> list[list[list[int]]]:
    """Each sentence's words as sub-token ids (an empty encoding becomes ``[UNK]``)."""
    unk = encoder.tokenizer.special_ids()["[UNK]"]
    flat = [w for s in sentences for w in s.words]
    pieces = encoder.tokenizer.encode_batch(flat)
    out, at = [], 0
    for s in sentences:
        out.append([p or [unk] for p in pieces[at : at + len(s.words)]])
        at += len(s.words)
    return out


def _document_context(
    sentences: Sequence[Sentence], flat: Sequence[Sequence[int]], index: int, budget: int
) -> tuple[list[int], list[int]]:
    """Up to ``budget`` sub-tokens of the sentences around ``index`` in its document, taken
    alternately from the right and the left, nearest first."""
    document = sentences[index].document
    left: list[int] = []
    right: list[int] = []
    lo, hi = index - 1, index + 1
    while budget > 0:
        grew = False
        if hi < len(sentences) and sentences[hi].document == document:
            take = flat[hi][:budget]
            right.extend(take)
            budget -= len(take)
            hi, grew = hi + 1, True
        if budget > 0 and lo >= 0 and sentences[lo].document == document:
            take = flat[lo][-budget:]
            left[:0] = take
            budget -= len(take)
            lo, grew = lo - 1, True
        if not grew:
            break
    return left, right


def sentence_features(
    sentences: Sequence[Sentence],
    encoder: Encoder,
    labels: Sequence[str],
    max_seq_length: int,
    *,
    doc_stride: int | None = None,
    spans: bool = False,
) -> Windows:
    """The windows of ``sentences`` (module docstring); ``doc_stride`` defaults to
    :func:`default_doc_stride`. Only each word's first sub-token, in its window, carries its label."""
    special = encoder.tokenizer.special_ids()
    cls_id, sep_id = special["[CLS]"], special["[SEP]"]
    label_id = {tag: i for i, tag in enumerate(labels)}
    pieces = _word_pieces(encoder, sentences)
    flat = [[p for word in words for p in word] for words in pieces]
    room = max_seq_length - 2
    stride = doc_stride or default_doc_stride(max_seq_length)
    out = Windows()
    for index, sentence in enumerate(sentences):
        ids = flat[index]
        starts = [0]
        for word in pieces[index][:-1]:
            starts.append(starts[-1] + len(word))
        if len(ids) <= room:
            left, right = _document_context(sentences, flat, index, room - len(ids))
            windows = [(0, len(ids))]
            owner = [0] * len(starts)
        else:
            left, right = [], []
            windows = doc_windows(len(ids), room, stride)
            owner = [next(w for w in range(len(windows)) if is_max_context(windows, w, s)) for s in starts]
            out.num_long += 1
        placed = [(-1, -1)] * len(starts)
        for number, (start, length) in enumerate(windows):
            offset = 1 + len(left)
            input_ids = [cls_id, *left, *ids[start : start + length], *right, sep_id]
            targets = [IGNORE] * len(input_ids)
            for word, (tag, first) in enumerate(zip(sentence.tags, starts, strict=True)):
                if owner[word] == number:
                    placed[word] = (len(out.features), offset + first - start)
                    targets[offset + first - start] = label_id.get(tag, IGNORE)
            feature = {"input_ids": input_ids, "token_type_ids": [0] * len(input_ids), "labels": targets}
            if spans:
                feature["sentence_start"], feature["sentence_end"] = offset, offset + max(length, 1)
            out.features.append(feature)
        out.words.append(placed)
    return out
