"""A model's input sequences: a text pair as BERT's ids, windows over a document longer than the
model reads, and a batch of *features* (``dict``s of token ids and targets) padded into tensors
(:func:`pad_batch`), every key a keyword argument of the task model's ``forward``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from wordpiece.tokenizer import WordPieceTokenizer

SEQUENCE_KEYS = ("input_ids", "token_type_ids")


def truncate_pair(a: list[int], b: list[int], max_tokens: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer side until both fit, as the reference ``_truncate_seq_pair``."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max_tokens:
        (a if len(a) > len(b) else b).pop()
    return a, b


def encode_pair(
    tokenizer: WordPieceTokenizer, text_a: str, text_b: str | None, max_seq_length: int
) -> dict[str, list[int]]:
    """``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` as ``input_ids`` and ``token_type_ids`` (0 for
    ``[CLS] A [SEP]``, 1 for ``B [SEP]``), truncated to ``max_seq_length`` tokens."""
    special = tokenizer.special_ids()
    cls_id, sep_id = special["[CLS]"], special["[SEP]"]
    a = tokenizer.encode(text_a)
    if text_b is None:
        a = a[: max_seq_length - 2]
        return {"input_ids": [cls_id, *a, sep_id], "token_type_ids": [0] * (len(a) + 2)}
    a, b = truncate_pair(a, tokenizer.encode(text_b), max_seq_length - 3)
    return {
        "input_ids": [cls_id, *a, sep_id, *b, sep_id],
        "token_type_ids": [0] * (len(a) + 2) + [1] * (len(b) + 1),
    }


def doc_windows(num_tokens: int, size: int, stride: int) -> list[tuple[int, int]]:
    """``(start, length)`` windows of at most ``size`` over ``num_tokens`` tokens, each starting
    ``stride`` after the previous one (or right after it ends, when shorter), the last one reaching
    the end; no tokens still give one empty window."""
    if size < 1 or stride < 1:
        raise ValueError(f"window size {size} and stride {stride} must be positive")
    windows, start = [], 0
    while True:
        length = min(num_tokens - start, size)
        windows.append((start, length))
        if start + length >= num_tokens:
            return windows
        start += min(length, stride)


def max_context_windows(windows: Sequence[tuple[int, int]]) -> list[int]:
    """For each token the windows of :func:`doc_windows` cover, the window where it has the most
    context: the largest min(left, right) + 0.01 * window length, the first on ties (the reference
    ``_check_is_max_context``). Linear in the tokens the windows hold."""
    if not windows:
        return []
    best: list[int] = [0] * (windows[-1][0] + windows[-1][1])
    scores = [-1.0] * len(best)
    for index, (start, length) in enumerate(windows):
        end = start + length - 1
        for position in range(start, start + length):
            score = min(position - start, end - position) + 0.01 * length
            if score > scores[position]:
                scores[position], best[position] = score, index
    return best


def _pad(rows: Sequence[Sequence[int]], length: int, value: int) -> list[list[int]]:
    return [list(row) + [value] * (length - len(row)) for row in rows]


def pad_batch(
    features: Sequence[dict[str, Any]], pad_id: int = 0, *, token_pads: Mapping[str, int] | None = None
) -> dict[str, torch.Tensor]:
    """Stack features into tensors: ids and types (a list, or one per choice) padded to the batch's
    longest, ``attention_mask`` added, other per-token keys padded with ``token_pads``, scalars stacked."""
    first = features[0]
    nested = isinstance(first["input_ids"][0], (list, tuple))
    rows = [c for f in features for c in f["input_ids"]] if nested else [f["input_ids"] for f in features]
    length = max(len(row) for row in rows)
    pads = {key: pad_id if key == "input_ids" else 0 for key in SEQUENCE_KEYS} | dict(token_pads or {})
    batch: dict[str, torch.Tensor] = {}
    for key, value in pads.items():
        if key in first:
            seqs = [c for f in features for c in f[key]] if nested else [f[key] for f in features]
            batch[key] = torch.tensor(_pad(seqs, length, value))
    batch["attention_mask"] = torch.tensor(_pad([[1] * len(row) for row in rows], length, 0))
    if nested:
        batch = {k: v.view(len(features), len(first["input_ids"]), length) for k, v in batch.items()}
    for key in first.keys() - pads.keys():
        values = [f[key] for f in features]
        dtype = torch.float32 if any(isinstance(v, float) for v in values) else torch.long
        batch[key] = torch.tensor(values, dtype=dtype)
    return batch
