"""Tokenising many sentences fast: each distinct space-separated chunk is tokenised once.

BERT's tokenisation (``wordpiece.tokenizer``) is local to the text between two spaces: the
normaliser works character by character (control characters dropped, whitespace mapped to a
space, CJK ideographs spaced, lower-casing and accent stripping per character), the
pre-tokeniser splits at every whitespace character, and WordPiece works on one word at a time.
A space is always a boundary, never removed, merged or matched as part of a special token
(``encode_special_tokens`` is on where this cache is used, so literal ``[SEP]`` is text). So the
ids of a sentence are the concatenation of the ids of its ``" "``-separated chunks, each
tokenised by the very same ``tokenizers.Tokenizer``: exact, not an approximation
(``tests/unit/test_chunk_cache.py`` compares both on real books and on adversarial text).

On natural text a few percent of the chunks are distinct (Zipf), so a batch costs one
``str.split`` per batch of sentences, one dict lookup per chunk, tokenising the chunks not yet seen, and a
numpy gather. A new chunk of printable ASCII (no whitespace or control character) under BERT's
normaliser and pre-tokeniser is normalised and pre-tokenised here, which for such text is
lower-casing (when the normaliser lower-cases) and splitting into runs of letters and digits and
single punctuation characters (every other printable ASCII character is punctuation to BERT),
and its words go to the WordPiece model directly (a word cache again); every other new chunk
goes through the whole ``Tokenizer``, which costs a few microseconds per chunk.

The cache holds at most ``max_entries`` chunks (or one batch's distinct chunks, when those alone
are more) and starts afresh when full, so its memory is bounded whatever the corpus.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import numpy as np
from tokenizers import Tokenizer, normalizers, pre_tokenizers

DEFAULT_MAX_ENTRIES = 500_000

_PRINTABLE_ASCII = re.compile(r"[\x21-\x7e]*")
_ASCII_WORDS = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9]")


def ragged_arange(lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(n) for n in lengths])`` without a Python loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)


def ragged_gather(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([values[s:s + n] for s, n in zip(starts, lengths)])`` without a Python loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return values[np.repeat(np.asarray(starts, dtype=np.int64), lengths) + ragged_arange(lengths)]


class ChunkCache:
    """Ids of sentences through a cache of chunk -> ids; results equal ``tokenizer`` on each sentence.

    ``tokenizer`` is the ``tokenizers.Tokenizer`` to reproduce (special tokens are not added).
    """

    def __init__(self, tokenizer: Tokenizer, max_entries: int = DEFAULT_MAX_ENTRIES):
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self._tokenizer = tokenizer
        self._max_entries = max_entries
        normalizer, pre_tokenizer = tokenizer.normalizer, tokenizer.pre_tokenizer
        bert = isinstance(normalizer, normalizers.BertNormalizer) and isinstance(
            pre_tokenizer, pre_tokenizers.BertPreTokenizer
        )
        self._plain_path = bert
        self._lowercase = bool(bert and normalizer.lowercase)
        self._clear()

    def _clear(self) -> None:
        self._words: dict[str, list[int]] = {}
        self._index: dict[str, int] = {}
        self._starts = np.zeros(0, dtype=np.int64)
        self._lengths = np.zeros(0, dtype=np.int64)
        self._ids = np.zeros(0, dtype=np.int32)

    def __len__(self) -> int:
        return len(self._index)

    def _plain_ids(self, chunk: str) -> list[int]:
        """The ids of a chunk of printable ASCII: BERT's words, each through the WordPiece model."""
        words, ids = self._words, []
        for word in _ASCII_WORDS.findall(chunk.lower() if self._lowercase else chunk):
            word_ids = words.get(word)
            if word_ids is None:
                word_ids = words[word] = [t.id for t in self._tokenizer.model.tokenize(word)]
            ids += word_ids
        return ids

    def _add(self, chunks: list[str]) -> None:
        plain = _PRINTABLE_ASCII.fullmatch if self._plain_path else lambda _: None
        ids: list[list[int] | None] = [self._plain_ids(c) if plain(c) else None for c in chunks]
        others = [c for c, i in zip(chunks, ids, strict=True) if i is None]
        if others:
            # One at a time: the batch call's thread pool spins for longer than these take.
            encode = self._tokenizer.encode
            encoded = iter([encode(c, add_special_tokens=False).ids for c in others])
            ids = [next(encoded) if i is None else i for i in ids]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum()))
        first = len(self._index)
        self._index.update(zip(chunks, range(first, first + len(chunks)), strict=True))
        self._starts = np.concatenate((self._starts, len(self._ids) + np.cumsum(lengths) - lengths))
        self._lengths = np.concatenate((self._lengths, lengths))
        self._ids = np.concatenate((self._ids, flat))

    def encode(self, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, lengths)``: every sentence's ids, flat (int32), and how many belong to each."""
        if not sentences:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        # The sentences' chunks in one split: joining with a space adds exactly the boundaries.
        num_chunks = np.fromiter((s.count(" ") + 1 for s in sentences), dtype=np.int64, count=len(sentences))
        chunks = " ".join(sentences).split(" ")
        index = np.fromiter(
            map(self._index.get, chunks, itertools.repeat(-1)), dtype=np.int64, count=len(chunks)
        )
        misses = np.flatnonzero(index < 0)
        if len(misses):
            missed = [chunks[i] for i in misses.tolist()]
            new = set(missed)
            if len(self._index) + len(new) > self._max_entries:
                self._clear()
                missed, misses, new = chunks, np.arange(len(chunks)), set(chunks)
            self._add(list(new))
            index[misses] = np.fromiter(
                map(self._index.__getitem__, missed), dtype=np.int64, count=len(missed)
            )
        lengths = self._lengths[index]
        ids = ragged_gather(self._ids, self._starts[index], lengths)
        ends = np.concatenate(([0], np.cumsum(lengths)))[np.cumsum(num_chunks)]
        return ids, np.diff(np.concatenate(([0], ends)))
