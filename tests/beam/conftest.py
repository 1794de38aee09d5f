"""Helpers for TestPipeline tests: a fast in-process runner and tiny inputs made in code."""

from __future__ import annotations

import bz2
from xml.sax.saxutils import escape

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline


@pytest.fixture
def pipeline():
    """A TestPipeline on the in-process FnApiRunner (no Prism download attempt)."""
    return TestPipeline(runner="FnApiRunner", options=PipelineOptions([]))


def page_xml(page_id: int, title: str, text: str, ns: int = 0, redirect: str | None = None) -> str:
    """One <page> element in the pages-articles layout."""
    redirect_line = f'    <redirect title="{escape(redirect)}" />\n' if redirect else ""
    return (
        f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{ns}</ns>\n    <id>{page_id}</id>\n{redirect_line}"
        f"    <revision>\n      <id>{page_id * 10}</id>\n      <model>wikitext</model>\n"
        f'      <text xml:space="preserve">{escape(text)}</text>\n    </revision>\n  </page>\n'
    )


def dump_bytes(pages: list[str]) -> bytes:
    """A bz2 pages-articles dump holding ``pages``."""
    xml = (
        '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n'
        "  <siteinfo>\n    <sitename>Test</sitename>\n  </siteinfo>\n" + "".join(pages) + "</mediawiki>\n"
    )
    return bz2.compress(xml.encode("utf-8"))


ARTICLE = (
    "'''Alpha''' is a [[Greek alphabet|letter]] of the Greek alphabet.<ref>A source.</ref> "
    "It is used in many places and has a long history of use in science.\n\n== History ==\n"
    "It came from the Phoenician letter aleph. {{Citation needed}}\n* a list item\n[[Category:Letters]]"
)
DISAMBIGUATION = "'''Beta''' may refer to:\n* [[Beta (letter)]]\n* [[Beta (finance)]]\n{{disambiguation}}"


@pytest.fixture
def small_dump() -> bytes:
    """Five pages: an article, a redirect, a talk-namespace page, a disambiguation page, a stub."""
    return dump_bytes(
        [
            page_xml(1, "Alpha", ARTICLE),
            page_xml(2, "Alfa", "#REDIRECT [[Alpha]]", redirect="Alpha"),
            page_xml(3, "Talk:Alpha", "Some discussion of the article that is long enough to keep.", ns=1),
            page_xml(4, "Beta", DISAMBIGUATION),
            page_xml(5, "Gamma", "Gamma is."),
        ]
    )
