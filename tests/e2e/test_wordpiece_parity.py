"""Parity with transformers' BertTokenizerFast on every line of the real text in ../shared/data.

Texts: the enwiki excerpt (raw wikitext lines of every page, and the sentences our Wikipedia
cleaner makes of its articles), every line of the eight Gutenberg novels and of the other
books. Vocabulary: the released BERT-Base uncased one, tokenised uncased (the released model's
setting) and cased (same file, ``do_lower_case=False``: the cased pipeline, with more [UNK]s).
Ids must be equal line by line; the counts compared are printed (``pytest -s``) and recorded as
test properties.
"""

from __future__ import annotations

import bz2
import time

import pytest

from tests.conftest import ENWIKI_EXCERPT, GUTENBERG, SHARED_DATA, require
from wordpiece.tokenizer import WordPieceTokenizer

pytestmark = pytest.mark.slow

VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"
BOOKS = SHARED_DATA / "books"


def _decode_book(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")  # Two of the Gutenberg files are ISO-8859-1.


@pytest.fixture(scope="module")
def corpora() -> dict[str, list[str]]:
    """Name -> lines (every line, empty ones included)."""
    from pipelines.text import paragraphs_to_sentences
    from pipelines.wiki.dump import iter_pages
    from pipelines.wiki.wikitext import clean_wikitext

    raw: list[str] = []
    sentences: list[str] = []
    with bz2.open(require(ENWIKI_EXCERPT)) as dump:
        for page in iter_pages(dump):
            raw.extend(page.text.split("\n"))
            if page.ns == 0 and page.redirect_title is None and page.text:
                sentences.extend(paragraphs_to_sentences(clean_wikitext(page.text, page.title).paragraphs))
    books = [*sorted(require(GUTENBERG).glob("*.txt")), *sorted(BOOKS.glob("*.txt"))]
    book_lines = [line for book in books for line in _decode_book(book.read_bytes()).split("\n")]
    return {"enwiki raw wikitext lines": raw, "enwiki cleaned sentences": sentences, "book lines": book_lines}


@pytest.mark.parametrize("cased", [False, True], ids=["uncased", "cased"])
def test_every_line_matches_transformers(corpora, cased, record_property):
    transformers = pytest.importorskip("transformers")
    from transformers.models.bert.tokenization_bert import load_vocab

    vocab = str(require(VOCAB))
    ours = WordPieceTokenizer.load(vocab, cased=cased)
    # vocab= (a dict), not vocab_file=: transformers 5.x ignores vocab_file and keeps 5 tokens.
    peer = transformers.BertTokenizerFast(vocab=load_vocab(vocab), do_lower_case=not cased)
    assert peer("hello", add_special_tokens=False)["input_ids"] == [7592]

    start = time.perf_counter()
    summary = []
    for name, lines in corpora.items():
        got = ours.encode_batch(lines)
        want = peer(
            lines, add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False
        )["input_ids"]
        assert len(got) == len(want) == len(lines)
        mismatches = [i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b]
        assert not mismatches, (
            f"{name}: {len(mismatches)} of {len(lines)} lines differ; first, line {mismatches[0]}: "
            f"{lines[mismatches[0]]!r}: ours {got[mismatches[0]]}, transformers {want[mismatches[0]]}"
        )
        tokens = sum(map(len, got))
        unk = sum(ids.count(ours.special_ids()["[UNK]"]) for ids in got)
        characters = sum(map(len, lines))
        assert tokens > 0
        summary.append((name, len(lines), characters, tokens, unk))
        record_property(f"{name} lines", len(lines))
    total = sum(row[1] for row in summary)
    record_property("lines compared", total)
    print(
        f"\n{'cased' if cased else 'uncased'}: {total:,} lines identical in {time.perf_counter() - start:.1f} s"
    )
    for name, count, characters, tokens, unk in summary:
        print(f"  {name}: {count:,} lines, {characters:,} characters, {tokens:,} tokens, {unk:,} [UNK]")
