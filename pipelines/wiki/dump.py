"""Stream pages out of MediaWiki XML dumps, whole or as byte ranges of multistream dumps, in
bounded memory (64 KiB chunks into an ``XMLPullParser``, each finished ``<page>`` cleared). A
defect ends the pages with one :class:`~schemas.rejects.Rejection`, whose ``reason`` is one of
``truncated_input`` (compressed data or XML ends early), ``malformed_xml`` (XML syntax error, or a
page without a valid ``<id>``), ``not_a_dump`` (not compressed data/XML at all, not a
``<mediawiki>`` document, or a range not starting at a bz2 stream), ``corrupt_input`` (compressed
data damaged after a valid start) and ``malformed_index`` (an index line without a numeric
offset); a storage ``OSError`` propagates."""

from __future__ import annotations

import bz2
import gzip
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO
from xml.etree import ElementTree as ET
from xml.parsers import expat

from schemas.rejects import Rejection

_CHUNK = 64 * 1024


@dataclass(frozen=True)
class RawPage:
    """One ``<page>`` of a dump, with the text of its (last) revision; ``text`` is "" when absent."""

    title: str
    ns: int
    page_id: int
    revision_id: int | None
    redirect_title: str | None
    text: str


class _Chunks:
    """The decompressed chunks of a file, by the magic bytes of its start (bz2, gzip or none); a
    decompression failure ends them and is kept in ``damage``. Its own ``read`` is the raw source
    under the decompressor, remembering the storage error it raised (``error``)."""

    def __init__(self, fileobj: BinaryIO, limit: int | None = None, bz2_only: bool = False) -> None:
        head, want = b"", 3 if limit is None else min(3, limit)
        while len(head) < want and (data := fileobj.read(want - len(head))):
            head += data
        self._fileobj, self._prefix, self._left = fileobj, head, None if limit is None else limit - len(head)
        self.not_bz2 = bz2_only and not head.startswith(b"BZh")
        self._reader: Any = self
        self.kind = "uncompressed"  # what its first bytes say it is
        if head.startswith(b"BZh"):
            self._reader, self.kind = bz2.BZ2File(self), "bz2"
        elif head.startswith(b"\x1f\x8b"):
            self._reader, self.kind = gzip.GzipFile(fileobj=self, mode="rb"), "gzip"
        self.error: OSError | None = None
        self.damage: tuple[bool, bool, BaseException] | None = None

    def read(self, size: int = -1) -> bytes:
        size = _CHUNK if size < 0 else size
        if self._prefix:
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            return data
        if self._left is not None:
            size = min(size, self._left)
            if size == 0:
                return b""
        try:
            data = self._fileobj.read(size)
        except OSError as exc:
            self.error = exc
            raise
        if self._left is not None:
            self._left -= len(data)
        return data

    def __iter__(self) -> Iterator[bytes]:
        after_data = False
        while True:
            try:
                data = self._reader.read(_CHUNK)
            except EOFError as exc:
                self.damage = (True, after_data, exc)
                return
            except (OSError, zlib.error) as exc:
                if exc is self.error:
                    raise
                self.damage = (False, after_data, exc)
                return
            if not data:
                return
            after_data = True
            yield data

    def defect(self, done: int, unit: str) -> Rejection:
        """The :class:`Rejection` of ``damage``, after ``done`` ``unit`` were read."""
        truncated, after_data, cause = self.damage
        if truncated:
            detail = f"compressed data ended before the end-of-stream marker after {done} {unit}"
            return Rejection("truncated_input", detail)
        if after_data:
            return Rejection("corrupt_input", f"compressed data is damaged after {done} {unit} ({cause})")
        return Rejection("not_a_dump", f"input is not valid compressed data ({cause})")


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _page_from_element(page: ET.Element, number: int) -> RawPage | Rejection:
    fields: dict[str, ET.Element] = {_local(child.tag): child for child in page}
    revision = {_local(child.tag): child for child in fields.get("revision", ())}
    page_id = _int(fields["id"].text) if "id" in fields else None
    title = (fields["title"].text or "") if "title" in fields else ""
    if page_id is None:
        return Rejection("malformed_xml", f"page {number} ({title!r}) has no valid <id>")
    return RawPage(
        title=title,
        ns=(_int(fields["ns"].text) or 0) if "ns" in fields else 0,
        page_id=page_id,
        revision_id=_int(revision["id"].text) if "id" in revision else None,
        redirect_title=fields["redirect"].get("title", "") if "redirect" in fields else None,
        text=(revision["text"].text or "") if "text" in revision else "",
    )


class _PageParser:
    """Incremental parser yielding each top-level ``<page>`` (then dropped from the tree), or one
    :class:`Rejection`. With ``fragment=True`` the input is a run of ``<page>`` elements (a byte range of
    a multistream dump): a ``<mediawiki>`` root is put around it unless it starts with the header."""

    def __init__(self, fragment: bool) -> None:
        self._parser = ET.XMLPullParser(events=("start", "end"))
        self._fragment = fragment
        self._pending: bytes | None = b"" if fragment else None  # fragment bytes before the first tag
        self._root: ET.Element | None = None
        self._depth = 0
        self.count = 0

    def feed(self, data: bytes) -> Iterator[RawPage | Rejection]:
        if self._pending is not None:
            self._pending += data
            if not self._pending.strip():
                return
            data, self._pending = self._pending, None
            if not data.lstrip().startswith((b"<?xml", b"<mediawiki")):
                self._parser.feed(b"<mediawiki>")
        self._parser.feed(data)
        yield from self._drain(at_end=False)

    def close(self) -> Iterator[RawPage | Rejection]:
        if self._pending is not None:  # an empty fragment
            self._parser.feed(self._pending + b"<mediawiki>")
            self._pending = None
            yield from self._drain(at_end=True)
        if self._fragment and self._depth == 1:
            self._parser.feed(b"</mediawiki>")
        yield from self._drain(at_end=True)
        try:
            self._parser.close()
        except ET.ParseError as exc:
            yield self._syntax_error(exc, at_end=True)
            return
        yield from self._drain(at_end=True)

    def _drain(self, at_end: bool) -> Iterator[RawPage | Rejection]:
        try:
            for event, elem in self._parser.read_events():
                if event == "start":
                    if self._root is None:
                        self._root = elem
                        if _local(elem.tag) != "mediawiki":
                            yield Rejection("not_a_dump", f"the document element is <{_local(elem.tag)}>")
                            return
                    self._depth += 1
                    continue
                self._depth -= 1
                if self._depth == 1 and _local(elem.tag) == "page":
                    page = _page_from_element(elem, self.count + 1)
                    self._root.clear()  # forget the finished page (and the siteinfo before it)
                    self.count += isinstance(page, RawPage)
                    yield page
        except ET.ParseError as exc:
            yield self._syntax_error(exc, at_end)

    def _syntax_error(self, exc: ET.ParseError, at_end: bool) -> Rejection:
        line, column = exc.position
        message = expat.ErrorString(exc.code) if exc.code else str(exc)
        if self._root is None:
            return Rejection("not_a_dump", f"input is empty or not XML ({message} at line {line})")
        if at_end:
            return Rejection(
                "truncated_input", f"XML ended inside an open element after {self.count} pages ({message})"
            )
        detail = f"XML syntax error ({message}) at line {line}, column {column} after {self.count} pages"
        return Rejection("malformed_xml", detail)


def _parse(chunks: _Chunks, fragment: bool) -> Iterator[RawPage | Rejection]:
    """The pages of ``chunks``, ending at the first :class:`Rejection`."""
    pages = _PageParser(fragment)
    for data in chunks:
        for item in pages.feed(data):
            if isinstance(item, Rejection):
                what = f"; the file holds {chunks.kind} data" if item.reason == "not_a_dump" else ""
                yield item._replace(detail=item.detail + what)
                return
            yield item
    if chunks.damage is not None:
        yield chunks.defect(pages.count, "pages")
        return
    for item in pages.close():
        yield item
        if isinstance(item, Rejection):
            return


def iter_pages(fileobj: BinaryIO) -> Iterator[RawPage | Rejection]:
    """Every page of a whole dump (bz2, gzip or plain XML) in bounded memory; a defect ends them."""
    return _parse(_Chunks(fileobj), fragment=False)


def iter_range_pages(fileobj: BinaryIO, start: int, end: int) -> Iterator[RawPage | Rejection]:
    """The pages of the bz2 streams in bytes ``[start, end)`` of a multistream dump, as :func:`iter_pages`."""
    if not 0 <= start <= end:
        raise ValueError(f"invalid byte range [{start}, {end})")
    fileobj.seek(start)
    chunks = _Chunks(fileobj, end - start, bz2_only=start < end)
    if chunks.not_bz2:
        return iter([Rejection("not_a_dump", "the byte range does not start with a bz2 stream header")])
    return _parse(chunks, fragment=True)


_MULTISTREAM_NAME = re.compile(r"^(?P<stem>.*-multistream)(?P<part>\d*)\.xml(?P<pages>-p\d+p\d+)?\.bz2$")


def index_path_for(dump_path: str) -> str | None:
    """The index path of a multistream dump (``X-multistream1.xml-p1p41242.bz2`` gives
    ``X-multistream-index1.txt-p1p41242.bz2``); None for a name that is not a multistream dump's."""
    directory, slash, name = dump_path.rpartition("/")
    match = _MULTISTREAM_NAME.match(name)
    if match is None:
        return None
    stem, part, pages = match.group("stem", "part", "pages")
    return f"{directory}{slash}{stem}-index{part}.txt{pages or ''}.bz2"


def read_stream_offsets(index_fileobj: BinaryIO) -> list[int] | Rejection:
    """The sorted unique stream offsets of an index of ``OFFSET:PAGE_ID:TITLE`` lines (bz2, gzip
    or plain; blank lines ignored), or the :class:`Rejection` that keeps it from being read."""
    chunks = _Chunks(index_fileobj)
    offsets: set[int] = set()
    number = 0
    for number, line in enumerate(_lines(chunks), 1):
        head, colon, _ = line.partition(b":")
        if colon and head.strip().isdigit():
            offsets.add(int(head))
        elif line.strip():
            return Rejection("malformed_index", f"index line {number} does not start with OFFSET:")
    if chunks.damage is not None:
        return chunks.defect(number, "index lines")
    return sorted(offsets)


def _lines(chunks: _Chunks) -> Iterator[bytes]:
    """The lines of the decompressed chunks (the last one only when they end undamaged)."""
    carry = b""
    for data in chunks:
        *lines, carry = (carry + data).split(b"\n")
        yield from lines
    if chunks.damage is None:
        yield carry


def plan_stream_ranges(offsets: list[int], file_size: int, streams_per_range: int) -> list[tuple[int, int]]:
    """Contiguous byte ranges ``[start, end)`` of a multistream dump for parallel reading, each at
    a stream offset, ``streams_per_range`` streams long; the last ends at ``file_size``."""
    if streams_per_range < 1:
        raise ValueError("streams_per_range must be at least 1")
    offsets = sorted(set(offsets))
    if not offsets:
        return []
    if offsets[0] < 0 or offsets[-1] >= file_size:
        raise ValueError(f"stream offsets must lie in [0, {file_size})")
    starts = offsets[::streams_per_range]
    return list(zip(starts, [*starts[1:], file_size], strict=True))
