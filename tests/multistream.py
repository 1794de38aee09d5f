"""Build a multistream dump and its index out of an ordinary single-stream dump, for tests.

Works on the decompressed text, line by line (a dump writes ``<page>`` and ``</page>`` on lines of
their own), so the page bytes are exactly those of the source: nothing is re-serialised.
"""

from __future__ import annotations

import bz2
import html
import re
from pathlib import Path

_TITLE = re.compile(r"<title>(.*?)</title>")
_ID = re.compile(r"<id>(\d+)</id>")


def _split_dump(text: str) -> tuple[str, list[str], str]:
    """Split a dump into header (through ``</siteinfo>``), the pages, and the closing footer."""
    lines = text.splitlines(keepends=True)
    stripped = [line.strip() for line in lines]
    if "</siteinfo>" in stripped:
        header_end = stripped.index("</siteinfo>") + 1
    else:  # some excerpts have no <siteinfo>: the header is the <mediawiki> line
        header_end = stripped.index("<page>")
    pages: list[str] = []
    start: int | None = None
    position = header_end
    for i in range(header_end, len(lines)):
        if stripped[i] == "<page>":
            assert start is None and not "".join(lines[position:i]).strip(), f"text between pages, line {i}"
            start = i
        elif stripped[i] == "</page>":
            assert start is not None, f"</page> without <page> at line {i + 1}"
            pages.append("".join(lines[start : i + 1]))
            start, position = None, i + 1
    assert start is None, "unclosed <page> at the end"
    header, footer = "".join(lines[:header_end]), "".join(lines[position:])
    assert header + "".join(pages) + footer == text
    return header, pages, footer


def multistream_name(source: Path) -> str:
    """Return ``<name>-multistream.xml.bz2`` for ``source`` (``<name>`` is its name up to the first dot)."""
    return f"{source.name.split('.', 1)[0]}-multistream.xml.bz2"


def build_multistream(source_bz2: Path, out_dir: Path, pages_per_stream: int = 100) -> tuple[Path, Path]:
    """Regroup a single-stream ``.bz2`` dump into a multistream dump; return (dump, index) paths.

    The dump is the concatenation of one bz2 stream for the header (through ``</siteinfo>``), one
    per ``pages_per_stream`` pages and one for the closing ``</mediawiki>``. The index
    (``...-multistream-index.txt.bz2``) has one ``OFFSET:PAGE_ID:TITLE`` line per page, OFFSET being
    where the page's stream starts.
    """
    if pages_per_stream < 1:
        raise ValueError("pages_per_stream must be at least 1")
    text = bz2.decompress(source_bz2.read_bytes()).decode("utf-8")
    header, pages, footer = _split_dump(text)
    streams = [bz2.compress(header.encode("utf-8"))]
    index_lines: list[str] = []
    offset = len(streams[0])
    for first in range(0, len(pages), pages_per_stream):
        group = pages[first : first + pages_per_stream]
        for page in group:
            title, page_id = _TITLE.search(page), _ID.search(page)
            assert title is not None and page_id is not None, "page without <title> or <id>"
            index_lines.append(f"{offset}:{page_id.group(1)}:{html.unescape(title.group(1))}\n")
        streams.append(bz2.compress("".join(group).encode("utf-8")))
        offset += len(streams[-1])
    streams.append(bz2.compress(footer.encode("utf-8")))

    out_dir.mkdir(parents=True, exist_ok=True)
    dump_path = out_dir / multistream_name(source_bz2)
    index_path = out_dir / dump_path.name.replace("-multistream.xml.bz2", "-multistream-index.txt.bz2")
    dump_path.write_bytes(b"".join(streams))
    index_path.write_bytes(bz2.compress("".join(index_lines).encode("utf-8")))
    return dump_path, index_path
