"""Normalisation, sentence splitting and content ids."""

from __future__ import annotations

from pipelines.text import content_hash, normalize_text, paragraphs_to_sentences, split_sentences


def test_normalize_text_nfc_controls_and_whitespace():
    assert normalize_text("Cafe\u0301\u00a0 au\tlait\r\n ") == "Café au lait"
    assert normalize_text("soft\u00adhy\u200bphen\x07 and\ufeff bom") == "softhyphen and bom"
    assert normalize_text("\x00\x1f") == ""


def test_split_sentences_keeps_abbreviations_together():
    text = "Mr. Smith went to Washington on Jan. 5. He said hi! Then he left."
    assert split_sentences(text) == [
        "Mr. Smith went to Washington on Jan. 5.",
        "He said hi!",
        "Then he left.",
    ]


def test_paragraphs_to_sentences_drops_stray_punctuation():
    assert paragraphs_to_sentences(["  One.  Two?", "", ".", "Three"]) == ["One.", "Two?", "Three"]


def test_content_hash_is_stable_and_order_sensitive():
    assert content_hash(["a", "b"]) == content_hash(["a", "b"])
    assert content_hash(["a", "b"]) != content_hash(["b", "a"])
    assert content_hash(["a b"]) != content_hash(["a", "b"])
    assert len(content_hash(["x"])) == 32


def test_repairs_title_and_speech_tag_splits():
    assert split_sentences('"Oh!" said Ann. The shop was closed. Mr. Gray walked home.') == [
        '"Oh!" said Ann.',
        "The shop was closed.",
        "Mr. Gray walked home.",
    ]
