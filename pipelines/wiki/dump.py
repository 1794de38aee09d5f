"""Stream pages out of MediaWiki XML dumps: whole files, or byte ranges of multistream dumps.

Pure Python on binary file objects, so the Beam layer can pass files opened with
``FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)`` (local or ``gs://``;
without that type Beam decompresses ``.bz2`` itself and byte ranges no longer match the index).

Memory is bounded: input is read and decompressed in 64 KiB chunks and fed to an incremental
``xml.etree.ElementTree.XMLPullParser``; each finished ``<page>`` is cleared from the tree. A defect
in the data raises :class:`DumpError` after the pages before it have been yielded; an ``OSError``
raised by the file object itself (storage trouble, not a bad dump) propagates unchanged.
"""

from __future__ import annotations

import bz2
import gzip
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol
from xml.etree import ElementTree as ET
from xml.parsers import expat

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


class DumpError(Exception):
    """A dump (or index) that cannot be read to the end; ``str()`` is ``"reason: detail"``.

    ``reason`` is one of ``truncated_input`` (compressed data or XML ends early),
    ``malformed_xml`` (XML syntax error, or a page without a valid ``<id>``), ``not_a_dump`` (not
    compressed data/XML at all, not a ``<mediawiki>`` document, or a range not starting at a bz2
    stream), ``corrupt_input`` (compressed data damaged after a valid start) and
    ``malformed_index`` (an index line without a numeric offset). ``detail`` is one sentence.
    """

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = " ".join(detail.split())
        super().__init__(f"{reason}: {self.detail}")


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _Source:
    """Reads ``prefix``, then at most ``limit`` bytes of ``fileobj``; remembers the errors it raised."""

    def __init__(self, fileobj: BinaryIO, prefix: bytes, limit: int | None) -> None:
        self._fileobj, self._prefix, self._left = fileobj, prefix, limit
        self.error: OSError | None = None

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


def _open(fileobj: BinaryIO, limit: int | None = None, bz2_only: bool = False) -> tuple[_Readable, _Source]:
    """Return a reader that decompresses according to the magic bytes, and the raw source under it."""
    head, want = b"", 3 if limit is None else min(3, limit)
    while len(head) < want:
        data = fileobj.read(want - len(head))
        if not data:
            break
        head += data
    source = _Source(fileobj, head, None if limit is None else limit - len(head))
    if head.startswith(b"BZh"):
        return bz2.BZ2File(source), source
    if bz2_only:
        raise DumpError("not_a_dump", "the byte range does not start with a bz2 stream header")
    if head.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=source, mode="rb"), source  # type: ignore[arg-type]
    return source, source


class _InputDamage(Exception):
    """Decompression failed: ``truncated`` (an early end) or invalid data, maybe ``after_data``."""

    def __init__(self, truncated: bool, after_data: bool) -> None:
        super().__init__("truncated" if truncated else "corrupt")
        self.truncated, self.after_data = truncated, after_data

    def to_dump_error(self, done: int, unit: str) -> DumpError:
        if self.truncated:
            detail = f"compressed data ended before the end-of-stream marker after {done} {unit}"
            return DumpError("truncated_input", detail)
        if self.after_data:
            return DumpError(
                "corrupt_input", f"compressed data is damaged after {done} {unit} ({self.__cause__})"
            )
        return DumpError("not_a_dump", f"input is not valid compressed data ({self.__cause__})")


def _chunks(reader: _Readable, source: _Source) -> Iterator[bytes]:
    """Yield decompressed chunks; a decompression failure becomes :class:`_InputDamage`."""
    after_data = False
    while True:
        try:
            data = reader.read(_CHUNK)
        except EOFError as exc:
            raise _InputDamage(True, after_data) from exc
        except (OSError, zlib.error) as exc:
            if exc is source.error:
                raise
            raise _InputDamage(False, after_data) from exc
        if not data:
            return
        after_data = True
        yield data


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _page_from_element(page: ET.Element, number: int) -> RawPage:
    fields: dict[str, ET.Element] = {_local(child.tag): child for child in page}
    revision = {_local(child.tag): child for child in fields.get("revision", ())}
    page_id = _int(fields["id"].text) if "id" in fields else None
    title = (fields["title"].text or "") if "title" in fields else ""
    if page_id is None:
        raise DumpError("malformed_xml", f"page {number} ({title!r}) has no valid <id>")
    return RawPage(
        title=title,
        ns=(_int(fields["ns"].text) or 0) if "ns" in fields else 0,
        page_id=page_id,
        revision_id=_int(revision["id"].text) if "id" in revision else None,
        redirect_title=fields["redirect"].get("title", "") if "redirect" in fields else None,
        text=(revision["text"].text or "") if "text" in revision else "",
    )


class _PageParser:
    """Incremental parser yielding each top-level ``<page>`` and then dropping it from the tree.

    With ``fragment=True`` the input is a run of ``<page>`` elements without a document element (a
    byte range of a multistream dump): a ``<mediawiki>`` root is put around it unless the fragment
    starts with the dump header itself, and the fragment may end with the real ``</mediawiki>``.
    """

    def __init__(self, fragment: bool) -> None:
        self._parser = ET.XMLPullParser(events=("start", "end"))
        self._fragment = fragment
        self._pending: bytes | None = b"" if fragment else None  # fragment bytes before the first tag
        self._root: ET.Element | None = None
        self._depth = 0
        self.count = 0

    def feed(self, data: bytes) -> Iterator[RawPage]:
        if self._pending is not None:
            self._pending += data
            if not self._pending.strip():
                return
            data, self._pending = self._pending, None
            if not data.lstrip().startswith((b"<?xml", b"<mediawiki")):
                self._parser.feed(b"<mediawiki>")
        self._parser.feed(data)
        yield from self._drain(at_end=False)

    def close(self) -> Iterator[RawPage]:
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
            raise self._syntax_error(exc, at_end=True) from exc
        yield from self._drain(at_end=True)

    def _drain(self, at_end: bool) -> Iterator[RawPage]:
        try:
            for event, elem in self._parser.read_events():
                if event == "start":
                    if self._root is None:
                        self._root = elem
                        if _local(elem.tag) != "mediawiki":
                            raise DumpError("not_a_dump", f"the document element is <{_local(elem.tag)}>")
                    self._depth += 1
                    continue
                self._depth -= 1
                if self._depth == 1 and _local(elem.tag) == "page":
                    page = _page_from_element(elem, self.count + 1)
                    self._root.clear()  # forget the finished page (and the siteinfo before it)
                    self.count += 1
                    yield page
        except ET.ParseError as exc:
            raise self._syntax_error(exc, at_end) from exc

    def _syntax_error(self, exc: ET.ParseError, at_end: bool) -> DumpError:
        line, column = exc.position
        message = expat.ErrorString(exc.code) if exc.code else str(exc)
        if self._root is None:
            return DumpError("not_a_dump", f"input is empty or not XML ({message} at line {line})")
        if at_end:
            detail = f"XML ended inside an open element after {self.count} pages ({message})"
            return DumpError("truncated_input", detail)
        detail = f"XML syntax error ({message}) at line {line}, column {column} after {self.count} pages"
        return DumpError("malformed_xml", detail)


def _parse(reader: _Readable, source: _Source, fragment: bool) -> Iterator[RawPage]:
    pages = _PageParser(fragment)
    try:
        for data in _chunks(reader, source):
            yield from pages.feed(data)
    except _InputDamage as damage:
        raise damage.to_dump_error(pages.count, "pages") from damage.__cause__
    yield from pages.close()


def iter_pages(fileobj: BinaryIO) -> Iterator[RawPage]:
    """Yield every page of a whole dump, in order, with bounded memory.

    ``fileobj`` is a binary file object (no seeking needed) holding bz2 (one stream or several
    concatenated), gzip or plain XML (UTF-8, or UTF-16 with a BOM). Pages before a defect are
    yielded, then :class:`DumpError` is raised.
    """
    reader, source = _open(fileobj)
    yield from _parse(reader, source, fragment=False)


def iter_range_pages(fileobj: BinaryIO, start: int, end: int) -> Iterator[RawPage]:
    """Yield the pages of the bz2 streams in bytes ``[start, end)`` of a multistream dump.

    ``start`` must be a stream offset from the index (see :func:`plan_stream_ranges`); ``fileobj``
    must be seekable. Only ``end - start`` bytes are read, in chunks. Errors are as for
    :func:`iter_pages`.
    """
    if not 0 <= start <= end:
        raise ValueError(f"invalid byte range [{start}, {end})")
    fileobj.seek(start)
    reader, source = _open(fileobj, end - start, bz2_only=start < end)
    yield from _parse(reader, source, fragment=True)


_MULTISTREAM_NAME = re.compile(r"^(?P<stem>.*-multistream)(?P<part>\d*)\.xml(?P<pages>-p\d+p\d+)?\.bz2$")


def index_path_for(dump_path: str) -> str:
    """Return the conventional index path of a multistream dump (a local path or a URL).

    ``X-multistream.xml.bz2`` gives ``X-multistream-index.txt.bz2`` and
    ``X-multistream1.xml-p1p41242.bz2`` gives ``X-multistream-index1.txt-p1p41242.bz2``; other
    names raise ``ValueError``.
    """
    directory, slash, name = dump_path.rpartition("/")
    match = _MULTISTREAM_NAME.match(name)
    if match is None:
        raise ValueError(f"not a multistream dump name: {name!r}")
    stem, part, pages = match.group("stem", "part", "pages")
    return f"{directory}{slash}{stem}-index{part}.txt{pages or ''}.bz2"


def read_stream_offsets(index_fileobj: BinaryIO) -> list[int]:
    """Return the sorted unique stream offsets of an index of ``OFFSET:PAGE_ID:TITLE`` lines.

    The index may be bz2-compressed, gzip-compressed or plain; blank lines are ignored.
    """
    reader, source = _open(index_fileobj)
    offsets: set[int] = set()
    carry, number = b"", 0
    try:
        for data in _chunks(reader, source):
            *lines, carry = (carry + data).split(b"\n")
            for line in lines:
                number += 1
                _add_offset(offsets, line, number)
    except _InputDamage as damage:
        raise damage.to_dump_error(number, "index lines") from damage.__cause__
    _add_offset(offsets, carry, number + 1)
    return sorted(offsets)


def _add_offset(offsets: set[int], line: bytes, number: int) -> None:
    if not line.strip():
        return
    head, colon, _ = line.partition(b":")
    if not colon or not head.strip().isdigit():
        raise DumpError("malformed_index", f"index line {number} does not start with OFFSET:")
    offsets.add(int(head))


def plan_stream_ranges(offsets: list[int], file_size: int, streams_per_range: int) -> list[tuple[int, int]]:
    """Split a multistream dump into contiguous byte ranges ``[start, end)`` for parallel reading.

    Each range starts at a stream offset and covers up to ``streams_per_range`` page streams; the
    last ends at ``file_size`` and so also holds the closing ``</mediawiki>`` stream.
    """
    if streams_per_range < 1:
        raise ValueError("streams_per_range must be at least 1")
    offsets = sorted(set(offsets))
    if not offsets:
        return []
    if offsets[0] < 0 or offsets[-1] >= file_size:
        raise ValueError(f"stream offsets must lie in [0, {file_size})")
    starts = offsets[::streams_per_range]
    return list(zip(starts, [*starts[1:], file_size], strict=True))
