"""Packed sentences without NSP: the input format of BERT's successors (``--format packed``).

RoBERTa's FULL-SENTENCES input (Liu et al., 2019, Section 4.2): each example is contiguous full
sentences, packed up to the maximum length; when a document ends, the next document's sentences
follow after an extra ``[SEP]``; there is no second segment and no next-sentence label::

    [CLS] d1 s1 d1 s2 [SEP] d2 s1 d2 s2 d2 s3 [SEP]

A sentence that does not fit in what is left of an example starts the next one; a sentence
longer than a whole example (``max_seq_length - 2`` tokens) is cut into pieces of that length,
so every token of the input appears exactly once per dupe pass.

Documents are packed within groups (the ``--num-buckets`` buckets of the pairs format): a group
is one worker's stream, its documents in an order drawn per dupe pass from (seed, pass,
document), so each pass packs different neighbours. A group's last example of a pass may be
short. Each example's masking key comes from a generator seeded by (seed, group, pass).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np

from pipelines.examples.pairs import TokenizedDocument, seeded_generator
from pipelines.stats import bucket_label
from wordpiece.masking import MaskingConfig, MaskingVocab, mask_batch

FORMATS = ("pairs", "packed")
"""``pipelines examples --format``: NSP pairs (BERT) or packed sentences without NSP."""

PACKED_NEXT_SENTENCE_LABEL = 0
"""``next_sentence_labels`` of every packed example: a constant, there are no pairs."""


class PackingVocab(Protocol):
    """The ids packing needs (``pipeline.ExampleVocab`` has them)."""

    cls_id: int
    sep_id: int
    unk_id: int
    masking: MaskingVocab


class PackedSequence(NamedTuple):
    """One packed example before ``[CLS]`` and the final ``[SEP]`` are added."""

    doc_id: str
    """The document the example's first token comes from."""
    tokens: np.ndarray
    """Sentence tokens, with a ``[SEP]`` between documents."""
    num_documents: int
    """How many documents the example draws on."""
    num_split_sentences: int
    """Sentences longer than an example, cut into pieces, that start in this example."""


def pack_documents(
    documents: Sequence[TokenizedDocument], max_seq_length: int, sep_id: int
) -> list[PackedSequence]:
    """Pack the sentences of ``documents`` (in the given order) into examples of at most
    ``max_seq_length`` tokens once ``[CLS]`` and the final ``[SEP]`` are added.

    Sentences are never split unless one alone is longer than ``max_seq_length - 2`` tokens;
    documents that share an example are separated by ``sep_id``.
    """
    room = max_seq_length - 2
    if room < 1:
        raise ValueError(f"--max-seq-length must be at least 3 for packed examples, got {max_seq_length}")
    separator = np.array([sep_id], dtype=np.int32)
    packed: list[PackedSequence] = []
    pieces: list[np.ndarray] = []
    used, first_doc, num_docs, num_split = 0, "", 0, 0

    def flush() -> None:
        nonlocal pieces, used, num_docs, num_split
        if used:
            packed.append(PackedSequence(first_doc, np.concatenate(pieces), num_docs, num_split))
        pieces, used, num_docs, num_split = [], 0, 0, 0

    for document in documents:
        offsets = document.offsets.tolist()
        in_example = False  # whether this document has tokens in the current example
        for start, end in zip(offsets[:-1], offsets[1:], strict=True):
            for piece_start in range(start, end, room):
                piece = document.tokens[piece_start : min(piece_start + room, end)]
                joins = used > 0 and not in_example  # a new document inside this example
                if used + len(piece) + joins > room:
                    flush()
                    joins = in_example = False
                if not used:
                    first_doc = document.doc_id
                if joins:
                    pieces.append(separator)
                    used += 1
                if not in_example:
                    num_docs += 1
                    in_example = True
                pieces.append(piece)
                used += len(piece)
                num_split += end - start > room and piece_start == start
    flush()
    return packed


def document_order_key(seed: int, dupe_index: int, doc_id: str) -> bytes:
    """Where a document goes in its group's stream on one dupe pass."""
    return hashlib.sha256(f"pack\x1f{seed}\x1f{dupe_index}\x1f{doc_id}".encode()).digest()


def finish_packed(
    sequences: Sequence[PackedSequence],
    keys: np.ndarray,
    dupe_index: int,
    first_index: int,
    masking: MaskingConfig | None,
    vocab: PackingVocab,
) -> tuple[list[dict], Counter]:
    """``[CLS] ... [SEP]`` rows of packed sequences, masked (unless ``masking`` is None) by the
    rule of :func:`wordpiece.masking.mask_batch` with each sequence's key.

    ``first_index`` numbers the rows within their (group, pass), for the shard key.
    """
    n = len(sequences)
    cls_, sep = np.array([vocab.cls_id], np.int32), np.array([vocab.sep_id], np.int32)
    pieces = []
    for sequence in sequences:
        pieces += (cls_, sequence.tokens, sep)
    ids = np.concatenate(pieces).astype(np.int32) if pieces else np.zeros(0, np.int32)
    lengths = np.fromiter((len(s.tokens) + 2 for s in sequences), np.int64, n)
    starts = np.cumsum(lengths) - lengths
    tally = Counter(
        examples=n,
        tokens=int(lengths.sum()),
        unk_tokens=int(np.count_nonzero(ids == vocab.unk_id)),
        document_separators=sum(s.num_documents - 1 for s in sequences),
        split_sentences=sum(s.num_split_sentences for s in sequences),
    )
    values, counts = np.unique(lengths, return_counts=True)
    for value, count in zip(values.tolist(), counts.tolist(), strict=True):
        tally[f"hist/{bucket_label(value)}"] += count
    if masking is not None:
        masked = mask_batch(ids, starts, lengths, keys, masking, vocab.masking)
        output, positions, labels = masked.input_ids, masked.positions, masked.labels
        prediction_ends = np.cumsum(masked.num_predictions).tolist()
        tally.update(
            predictions=len(positions),
            masked_to_mask=int(masked.num_to_mask.sum()),
            masked_unchanged=int(masked.num_unchanged.sum()),
        )
    else:
        output, positions, labels, prediction_ends = ids, ids[:0], ids[:0], [0] * n
    rows = []
    prediction_start = 0
    for index, (sequence, start, length, prediction_end) in enumerate(
        zip(sequences, starts.tolist(), lengths.tolist(), prediction_ends, strict=True)
    ):
        rows.append(
            {
                "input_ids": output[start : start + length],
                "masked_lm_positions": positions[prediction_start:prediction_end],
                "masked_lm_ids": labels[prediction_start:prediction_end],
                "next_sentence_labels": PACKED_NEXT_SENTENCE_LABEL,
                "num_tokens_a": length,  # one segment: token type 0 throughout
                "num_tokens": length,
                "doc_id": sequence.doc_id,
                "dupe_index": dupe_index,
                "_pair": first_index + index,
            }
        )
        prediction_start = prediction_end
    return rows, tally


def pack_group(
    group: int,
    documents: Sequence[TokenizedDocument],
    *,
    seed: int,
    dupe_factor: int,
    max_seq_length: int,
    masking: MaskingConfig | None,
    vocab: PackingVocab,
    batch_size: int = 4096,
):
    """Every dupe pass of one group's documents, packed and masked: yields ``(rows, tally)`` in
    batches. The rows do not depend on the order ``documents`` come in."""
    for dupe in range(dupe_factor):
        ordered = sorted(documents, key=lambda d: document_order_key(seed, dupe, d.doc_id))
        sequences = pack_documents(ordered, max_seq_length, vocab.sep_id)
        rng = seeded_generator(seed, "packed", group, dupe)
        keys = rng.integers(0, 1 << 64, size=len(sequences), dtype=np.uint64, endpoint=False)
        for first in range(0, len(sequences), batch_size):
            batch = slice(first, first + batch_size)
            yield finish_packed(sequences[batch], keys[batch], dupe, first, masking, vocab)
