"""One page in, exactly one outcome out: documents, drops and rejects of `pipelines wikipedia`."""

from __future__ import annotations

from pipelines.wiki import pipeline as wiki
from pipelines.wiki.dump import RawPage


def _page(text: str, **overrides) -> RawPage:
    fields = {"title": "T", "ns": 0, "page_id": 7, "revision_id": 70, "redirect_title": None, "text": text}
    fields.update(overrides)
    return RawPage(**fields)


def test_a_parser_failure_becomes_a_reject_with_the_page(monkeypatch):
    def explode(text, title):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(wiki, "clean_wikitext", explode)
    outcome = wiki.page_outcome(_page("Some '''text'''."), "dump.xml.bz2", 8)
    assert (outcome.kind, outcome.reason) == ("rejected", "parse_error")
    assert outcome.row["record_id"] == "7" and outcome.row["origin"] == "dump.xml.bz2"
    assert outcome.row["detail"] == "RecursionError: maximum recursion depth exceeded"
    assert outcome.row["excerpt"] == "Some '''text'''."


def test_drop_reasons_in_order():
    assert wiki.page_outcome(_page("#REDIRECT [[X]]", redirect_title="X", ns=4), "d", 8).reason == "redirect"
    assert wiki.page_outcome(_page("Talk text.", ns=1), "d", 8).reason == "not_article_namespace"
    assert wiki.page_outcome(_page("* only\n* a list"), "d", 8).reason == "empty_after_cleaning"
    assert wiki.page_outcome(_page("Too short here."), "d", 8).reason == "too_short"


def test_a_document_carries_its_page_and_template_counts():
    outcome = wiki.page_outcome(
        _page("Alpha is {{convert|10|km|mi}} long.{{Infobox x|a=b}} It has many words in it today."), "d", 8
    )
    assert outcome.kind == "document"
    assert outcome.row["sentences"] == ["Alpha is 10 km long.", "It has many words in it today."]
    assert (outcome.row["page_id"], outcome.row["revision_id"], outcome.row["title"]) == (7, 70, "T")
    assert outcome.counts == {"templates_rendered": 1, "templates_dropped": 1}


def test_binary_and_undecodable_page_text_is_rejected_not_cleaned():
    prose = "Alpha is a long river in the north of the country, and many people live near it. " * 4
    binary = "".join(chr(b) for b in range(0x20, 0x100)) * 4  # bytes read as Latin-1: C1 controls
    outcome = wiki.page_outcome(_page(binary), "d", 8)
    assert (outcome.kind, outcome.reason) == ("rejected", "binary")
    assert outcome.row["record_id"] == "7" and outcome.row["detail"].startswith(
        "132 control characters in 896"
    )
    undecodable = prose.replace("i", "\ufffd")  # invalid UTF-8 replaced on the way into the dump
    outcome = wiki.page_outcome(_page(undecodable), "d", 8)
    assert (outcome.kind, outcome.reason) == ("rejected", "undecodable")
    assert outcome.row["excerpt"] == undecodable
    # A few stray characters (at most 1%) are not garbage: the page is cleaned, controls removed.
    stray = prose[:100] + "\x85" + prose[100:200] + "\ufffd" + prose[200:]
    outcome = wiki.page_outcome(_page(stray), "d", 8)
    assert outcome.kind == "document" and not any("\x85" in s for s in outcome.row["sentences"])
    # Redirects and other namespaces are dropped before the text is looked at.
    assert wiki.page_outcome(_page(binary, ns=1), "d", 8).reason == "not_article_namespace"


def test_a_damaged_multistream_index_is_a_file_error_and_the_dump_is_read_whole(tmp_path):
    dump = tmp_path / "xwiki-20260101-pages-articles-multistream.xml.bz2"
    dump.write_bytes(b"")
    index = tmp_path / "xwiki-20260101-pages-articles-multistream-index.txt.bz2"
    index.write_bytes(b"600:12:Alpha\nnot an index line\n")
    whole, broken = wiki.plan_reads(str(dump), 20)
    assert (whole.path, whole.start, whole.defect) == (str(dump), None, None)
    (error,) = wiki.read_task(broken)
    assert (error.kind, error.reason, error.row["origin"]) == ("file_error", "malformed_index", str(index))
    assert error.row["detail"] == "index line 2 does not start with OFFSET:; the dump is read whole"
