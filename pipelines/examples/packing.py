"""Packed sentences without NSP (``--format packed``), RoBERTa's FULL-SENTENCES input, packed
within groups (the ``--num-buckets`` buckets) as docs/examples.md describes."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from pipelines.examples.finish import ExampleColumns, ExampleVocab, mask_and_count
from pipelines.examples.pairs import TokenizedDocument, seeded_generator
from wordpiece.masking import MaskingConfig

FORMATS = ("pairs", "packed")
"""``pipelines examples --format``: NSP pairs (BERT) or packed sentences without NSP."""

PACKED_NEXT_SENTENCE_LABEL = 0
"""``next_sentence_labels`` of every packed example: a constant, there are no pairs."""


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
    """Pack the sentences of ``documents`` (in order) into examples of at most ``max_seq_length``
    tokens with ``[CLS]`` and ``[SEP]``, ``sep_id`` between documents; a sentence is cut only when it
    alone is longer than an example."""
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
    vocab: ExampleVocab,
) -> tuple[ExampleColumns, Counter]:
    """``[CLS] ... [SEP]`` examples of packed sequences, masked with each sequence's key."""
    n = len(sequences)
    cls_, sep = np.array([vocab.cls_id], np.int32), np.array([vocab.sep_id], np.int32)
    ids = np.concatenate(
        [part for s in sequences for part in (cls_, s.tokens, sep)] or [np.zeros(0, np.int32)]
    )
    lengths = np.fromiter((len(s.tokens) + 2 for s in sequences), np.int64, n)
    tally = Counter(
        examples=n,
        document_separators=sum(s.num_documents - 1 for s in sequences),
        split_sentences=sum(s.num_split_sentences for s in sequences),
    )
    output, positions, labels, num_predictions = mask_and_count(ids, lengths, keys, masking, vocab, tally)
    columns = ExampleColumns(
        input_ids=output,
        num_tokens=lengths,
        positions=positions,
        labels=labels,
        num_predictions=num_predictions,
        num_tokens_a=lengths,  # one segment: token type 0 throughout
        next_sentence_labels=np.full(n, PACKED_NEXT_SENTENCE_LABEL, np.int8),
        doc_ids=np.array([s.doc_id for s in sequences], dtype=object),
        dupe_index=np.full(n, dupe_index, np.int64),
        pair_index=first_index + np.arange(n, dtype=np.int64),
    )
    return columns, tally


def pack_group(
    group: int,
    documents: Sequence[TokenizedDocument],
    *,
    seed: int,
    dupe_factor: int,
    max_seq_length: int,
    masking: MaskingConfig | None,
    vocab: ExampleVocab,
    batch_size: int = 4096,
):
    """Every dupe pass of one group's documents, packed and masked: ``(columns, tally)`` in batches."""
    for dupe in range(dupe_factor):
        ordered = sorted(documents, key=lambda d: document_order_key(seed, dupe, d.doc_id))
        sequences = pack_documents(ordered, max_seq_length, vocab.sep_id)
        rng = seeded_generator(seed, "packed", group, dupe)
        keys = rng.integers(0, 1 << 64, size=len(sequences), dtype=np.uint64, endpoint=False)
        for first in range(0, len(sequences), batch_size):
            batch = slice(first, first + batch_size)
            yield finish_packed(sequences[batch], keys[batch], dupe, first, masking, vocab)
