"""The chunk cache gives exactly the tokenizer's ids, on real books and on text built to break it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tests.conftest import GUTENBERG, SHARED_DATA, require
from wordpiece.chunk_cache import ChunkCache, ragged_arange, ragged_gather
from wordpiece.tokenizer import WordPieceTokenizer

VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"

# Every way the text between two spaces could fail to be independent: whitespace other than a
# space, control characters that BERT deletes (joining what they separate), accents and
# combining marks after a space, CJK, literal special tokens, words past 100 characters.
TRICKY = [
    "",
    " ",
    "   two  spaces   ",
    "Hello, World! It's 3.14 -- isn't it?",
    "tab\tnew\nline\rcarriage",
    "ctrl\x0bvertical\x0cform\x85next\x1cfile\x7fdel\x00nul",
    "no\u00a0break\u2028line\u3000ideographic\u200bzero-width",
    "Café naïve ÉCOLE \u0301acute-after-space e\u0301",
    "中文字符 mixed中文text 日本語",
    "literal [SEP] and [MASK] and [CLS][PAD] [UNK] tokens",
    "a" * 101 + " " + "b" * 100 + " " + "x" * 250,
    "emoji 🙂 and ﬁ ligature and ΣΑΣ final sigma Straße",
    "under_score back\\slash tilde~ caret^ pipe| brace{} `tick`",
    "\ufffdreplacement \u200dzwj \ufeffbom",
    "\u201cCurly,\u201d she said\u2014\u2018twice\u2019\u2026 \u2013 \u201cA\u2019s\u201d\u2014\u2014end\u2026",
    "\u2019\u2019 \u201c\u201d \u2013\u2014 Caf\u00e9\u2019s \u201c\u00c9cole\u201d",
]


def _tokenizer(path, cased):
    tokenizer = WordPieceTokenizer.load(str(require(path)), cased=cased)
    tokenizer.tokenizer.encode_special_tokens = True  # as pipelines examples uses it
    return tokenizer


def _assert_same(tokenizer, cache, sentences):
    expected = tokenizer.encode_batch(sentences)
    ids, lengths = cache.encode(sentences)
    assert lengths.tolist() == [len(e) for e in expected]
    assert ids.tolist() == [i for e in expected for i in e]


@pytest.mark.parametrize("cased", [False, True])
def test_tricky_text_gives_the_tokenizers_ids(cased):
    tokenizer = _tokenizer(VOCAB, cased)
    cache = ChunkCache(tokenizer.tokenizer)
    _assert_same(tokenizer, cache, TRICKY)
    _assert_same(tokenizer, cache, TRICKY[::-1])  # now from the cache


def test_a_real_book_gives_the_tokenizers_ids_and_the_cache_stays_bounded():
    tokenizer = _tokenizer(VOCAB, False)
    text = require(GUTENBERG / "Frankenstein_84.txt").read_text(encoding="utf-8")
    lines = text.splitlines()[:4000]
    bounded = ChunkCache(tokenizer.tokenizer, max_entries=2000)
    restarts = 0
    for first in range(0, len(lines), 500):
        batch = lines[first : first + 500]
        before = len(bounded)
        _assert_same(tokenizer, bounded, batch)
        restarts += len(bounded) < before
        # At most the bound, or one batch's own distinct chunks when those alone exceed it.
        assert len(bounded) <= max(2000, len({c for line in batch for c in line.split(" ")}))
    assert restarts
    unbounded = ChunkCache(tokenizer.tokenizer)
    _assert_same(tokenizer, unbounded, lines)
    assert len(unbounded) < sum(len(line.split(" ")) for line in lines) / 3  # Zipf: few are distinct


def test_ragged_helpers():
    assert ragged_arange(np.array([2, 0, 3])).tolist() == [0, 1, 0, 1, 2]
    values = np.arange(10) * 10
    assert ragged_gather(values, np.array([1, 5, 0]), np.array([2, 0, 3])).tolist() == [10, 20, 0, 10, 20]
    with pytest.raises(ValueError, match="max_entries"):
        ChunkCache(None, max_entries=0)


def test_arrow_input_slices_and_chunked_arrays_give_the_same_ids():
    """A sliced Arrow array (offsets not starting at zero) and a chunked one are read as the
    strings they hold, the same as the Python list."""
    tokenizer = _tokenizer(VOCAB, False)
    cache = ChunkCache(tokenizer.tokenizer)
    sentences = ["skip me", *TRICKY, "and the end"]
    sliced = pa.array(sentences, type=pa.string()).slice(1, len(TRICKY))
    _assert_same(tokenizer, cache, TRICKY)
    ids, lengths = cache.encode(sliced)
    expected = tokenizer.encode_batch(TRICKY)
    assert lengths.tolist() == [len(e) for e in expected] and ids.tolist() == [i for e in expected for i in e]
    chunked = pa.chunked_array([pa.array(TRICKY[:5]), pa.array(TRICKY[5:])])
    again, again_lengths = ChunkCache(tokenizer.tokenizer).encode(chunked)
    assert again.tolist() == ids.tolist() and again_lengths.tolist() == lengths.tolist()
    empty_ids, empty_lengths = cache.encode(pa.array([], type=pa.string()))
    assert len(empty_ids) == 0 and len(empty_lengths) == 0
