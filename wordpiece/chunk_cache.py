"""Tokenising many sentences fast: BERT's tokenisation never crosses a space, so each distinct chunk is
tokenised once and a sentence's ids are its chunks' ids back to back."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer

DEFAULT_MAX_ENTRIES = 200_000
"""Chunks held (about 300 bytes each with their ids) before the cache starts afresh: English text
has millions of distinct chunks (a word with its punctuation), so this trades tokenisation time
for memory (docs/scale.md, "What bounds each stage's memory")."""

# Printable ASCII and the commonest non-ASCII punctuation of English prose (curly quotes, en and
# em dashes, the ellipsis): characters BERT's normaliser leaves as they are (no canonical
# decomposition, no case) and its pre-tokeniser splits off one by one, as punctuation.
_PLAIN_PUNCTUATION = "\u2013\u2014\u2018\u2019\u201c\u201d\u2026"
_PLAIN_CHUNK = re.compile(rf"[\x21-\x7e{_PLAIN_PUNCTUATION}]*")
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
    # Output position p of run i reads values[p + starts[i] - (where run i starts in the output)].
    shift = np.asarray(starts, dtype=np.int64) - (np.cumsum(lengths) - lengths)
    return values[np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(shift, lengths)]


class ChunkCache:
    """Ids of sentences through a cache of chunk -> ids, equal to ``tokenizer``'s without special tokens."""

    def __init__(self, tokenizer: Tokenizer, max_entries: int = DEFAULT_MAX_ENTRIES):
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self._tokenizer, self._max_entries = tokenizer, max_entries
        self._lowercase = tokenizer.normalizer.lowercase
        # Vocabulary tokens that a whole word can be (not "##" pieces, not past WordPiece's limit).
        model = tokenizer.model
        self._whole_words = {
            token: i
            for token, i in tokenizer.get_vocab(with_added_tokens=False).items()
            if not token.startswith(model.continuing_subword_prefix)
            and len(token) <= model.max_input_chars_per_word
        }
        self._clear()

    def _clear(self) -> None:
        self._index = _Table()
        self._starts, self._lengths = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        self._ids = np.zeros(0, dtype=np.int32)
        # The word table of the plain path, laid out as the chunk table; " " (the boundary
        # between two chunks in one call) is a word of no ids.
        self._word_index = _Table()
        self._word_index.update({" ": 0})
        self._word_starts, self._word_lengths = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        self._word_ids = np.zeros(0, dtype=np.int32)

    def __len__(self) -> int:
        return len(self._index)

    def _add_words(self, words: list[str]) -> None:
        """Put ``words`` (the word table's newest rows, in order) through the WordPiece model."""
        tokenize, whole = self._tokenizer.model.tokenize, self._whole_words.get
        # A word that is itself in the vocabulary is that one token (WordPiece matches longest
        # first, from the word's start); only the others go through the model.
        ids = [[i] if (i := whole(word)) is not None else [t.id for t in tokenize(word)] for word in words]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum()))
        self._word_starts = np.concatenate(
            (self._word_starts, len(self._word_ids) + np.cumsum(lengths) - lengths)
        )
        self._word_lengths = np.concatenate((self._word_lengths, lengths))
        self._word_ids = np.concatenate((self._word_ids, flat))

    def _plain_ids(self, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, lengths)`` of plain chunks (``_PLAIN_CHUNK``), all in one pass: lower-cased (when the
        normaliser lower-cases) and split into BERT's words with one regex over the chunks joined
        by spaces, each distinct word through the WordPiece model once."""
        text = " ".join(chunks)
        words = _ASCII_WORDS.findall(text.lower() if self._lowercase else text)
        table = self._word_index
        index = np.fromiter(map(table.__getitem__, words), dtype=np.int64, count=len(words))
        if table.new:
            self._add_words(table.take_new())
        word_lengths = self._word_lengths[index]
        chunk_of_word = np.cumsum(index == 0)  # " " (word 0) ends a chunk
        lengths = np.bincount(chunk_of_word, weights=word_lengths, minlength=len(chunks)).astype(np.int64)
        return ragged_gather(self._word_ids, self._word_starts[index], word_lengths), lengths

    def _tokenizer_ids(self, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, lengths)`` of any chunks through the whole ``Tokenizer``, in one call: as
        pre-tokenised input, each chunk is normalised, pre-tokenised and tokenised on its own,
        exactly as ``encode(chunk)`` does, and ``word_ids`` says which chunk each id is of."""
        if not chunks:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        encoding = self._tokenizer.encode(chunks, is_pretokenized=True, add_special_tokens=False)
        chunk_of_id = np.fromiter(encoding.word_ids, dtype=np.int64, count=len(encoding.ids))
        lengths = np.bincount(chunk_of_id, minlength=len(chunks)).astype(np.int64)
        return np.asarray(encoding.ids, dtype=np.int32), lengths

    def _add(self, chunks: list[str]) -> None:
        """Tokenise ``chunks`` (the chunk table's newest rows, in order) into the table."""
        plain = _PLAIN_CHUNK.fullmatch
        is_plain = np.fromiter((plain(c) is not None for c in chunks), dtype=bool, count=len(chunks))
        plain_ids, plain_lengths = self._plain_ids(list(itertools.compress(chunks, is_plain)))
        other_ids, other_lengths = self._tokenizer_ids(list(itertools.compress(chunks, ~is_plain)))
        lengths = np.empty(len(chunks), dtype=np.int64)
        lengths[is_plain], lengths[~is_plain] = plain_lengths, other_lengths
        # Each chunk's ids lie in the plain chunks' ids, in order, then the others'.
        order = np.concatenate((np.flatnonzero(is_plain), np.flatnonzero(~is_plain)))
        starts = np.empty(len(chunks), dtype=np.int64)
        starts[order] = np.cumsum(lengths[order]) - lengths[order]
        self._starts = np.concatenate((self._starts, len(self._ids) + starts))
        self._lengths = np.concatenate((self._lengths, lengths))
        self._ids = np.concatenate((self._ids, plain_ids, other_ids))

    def encode(self, sentences: Sequence[str] | pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, lengths)``: every sentence's ids (int32, flat) and how many each has; ``sentences``
        is an Arrow string array (or ``str``s), whose distinct chunks Arrow finds."""
        if isinstance(sentences, pa.ChunkedArray):
            sentences = sentences.combine_chunks()
        elif not isinstance(sentences, pa.Array):
            sentences = pa.array(sentences, type=pa.string())
        if not len(sentences):
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        # Split at exactly " ", as str.split(" "): empty chunks kept, so boundaries are exact.
        chunks = pc.split_pattern(sentences, pattern=" ")
        num_chunks = np.asarray(pc.list_value_length(chunks), dtype=np.int64)
        encoded = pc.dictionary_encode(pc.list_flatten(chunks))
        distinct = encoded.dictionary.to_pylist()
        had = len(self._index)
        # One lookup per distinct chunk; a chunk not yet seen gets the next row as it is looked up.
        rows = np.fromiter(map(self._index.__getitem__, distinct), dtype=np.int64, count=len(distinct))
        if self._index.new:
            if had and len(self._index) > self._max_entries:
                self._clear()  # full: start afresh with this batch's chunks alone
                return self.encode(sentences)
            self._add(self._index.take_new())
        index = rows[np.asarray(encoded.indices, dtype=np.int64)]
        lengths = self._lengths[index]
        ids = ragged_gather(self._ids, self._starts[index], lengths)
        ends = np.concatenate(([0], np.cumsum(lengths)))[np.cumsum(num_chunks)]
        return ids, np.diff(np.concatenate(([0], ends)))


class _Table(dict):
    """A key -> row table: a key not in it gets the next row as it is looked up, and ``take_new``
    hands over the keys added since, in row order (a hit stays a plain dict lookup)."""

    def __init__(self):
        super().__init__()
        self.new: list[str] = []

    def __missing__(self, key: str) -> int:
        row = len(self)
        self[key] = row
        self.new.append(key)
        return row

    def take_new(self) -> list[str]:
        new, self.new = self.new, []
        return new
