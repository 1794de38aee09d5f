"""Text normalisation, sentence segmentation and document ids shared by every source (pure)."""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence

import blingfire

# Characters removed outright: C0/C1 controls other than whitespace, and format characters
# (Unicode category Cf: soft hyphen, zero-width space/joiners, bidi marks, BOM) that carry no
# text and would otherwise become invisible [UNK]s or split words in two.

MIN_SENTENCE_CHARS = 2
"""Sentences shorter than this (after normalisation) are dropped: stray punctuation or bullets."""


def _is_removed_char(ch: str) -> bool:
    category = unicodedata.category(ch)
    if category == "Cc":
        return ch not in "\t\n\r\x0b\x0c"
    return category == "Cf"


@functools.cache
def _removed_translation() -> dict[int, None]:
    # Built on first use (a scan of every code point, about 0.4 CPU-s), not at import: most
    # commands that import this module never normalise text.
    return {cp: None for cp in range(0x110000) if _is_removed_char(chr(cp))}


def normalize_text(text: str) -> str:
    """``text`` NFC-normalised, without control/format characters, every run of whitespace one
    space, stripped: one paragraph or sentence on one line."""
    text = unicodedata.normalize("NFC", text)
    text = text.translate(_removed_translation())
    return " ".join(text.split())


_TITLES = frozenset(
    "mr. mrs. ms. mme. messrs. dr. prof. rev. st. capt. col. gen. lt. sgt. gov. sen. rep. jr. sr.".split()
)
_CLOSING_QUOTES = "\"'”’»)"


def _repair_splits(pieces: list[str]) -> list[str]:
    """Undo Bling Fire's two systematic false splits: after a title ("Mr.") and before a speech
    tag after "!" or "?" ('"Oh!" said Ann.'); docs/sentence-segmentation.md."""
    repaired: list[str] = []
    for piece in pieces:
        if repaired:
            previous = repaired[-1]
            ends_in_title = previous.rsplit(" ", 1)[-1].lower() in _TITLES
            speech_tag = piece[:1].islower() and previous.rstrip(_CLOSING_QUOTES)[-1:] in ("!", "?")
            if ends_in_title or speech_tag:
                repaired[-1] = f"{previous} {piece}"
                continue
        repaired.append(piece)
    return repaired


def split_sentences(paragraph: str) -> list[str]:
    """One normalised paragraph (``normalize_text``) as sentences: Bling Fire's rule-based model (no
    download, the most accurate and fastest measured, docs/sentence-segmentation.md) with two repair
    rules; sentences shorter than ``MIN_SENTENCE_CHARS`` are dropped."""
    if not paragraph:
        return []
    pieces = [s.strip() for s in blingfire.text_to_sentences(paragraph).split("\n")]
    return [s for s in _repair_splits([p for p in pieces if p]) if len(s) >= MIN_SENTENCE_CHARS]


def paragraphs_to_sentences(paragraphs: Iterable[str], normalized: bool = False) -> list[str]:
    """The paragraphs' sentences in order, each paragraph normalised first unless ``normalized``."""
    sentences: list[str] = []
    for paragraph in paragraphs:
        sentences.extend(split_sentences(paragraph if normalized else normalize_text(paragraph)))
    return sentences


MAX_GARBLED_SHARE = 0.01
"""Text with more than this share of control characters or U+FFFD is rejected, not cleaned."""
_CONTROL_RE = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")


def garbled_text(text: str) -> tuple[str, str] | None:
    """``(reason, detail)`` when a record's text is binary or decoded from invalid UTF-8; None otherwise."""
    limit = MAX_GARBLED_SHARE * len(text)
    if (controls := len(_CONTROL_RE.findall(text))) > limit:
        return "binary", f"{controls} control characters in {len(text)}: binary data, not text"
    if (replaced := text.count("\ufffd")) > limit:
        return "undecodable", f"{replaced} U+FFFD in {len(text)} characters: the text was not valid UTF-8"
    return None


def content_hash(sentences: Sequence[str]) -> str:
    """A document's id: 128 bits of the SHA-256 of its sentences, the same for the same text anywhere."""
    digest = hashlib.sha256("\n".join(sentences).encode("utf-8")).hexdigest()
    return digest[:32]
