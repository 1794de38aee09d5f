"""Clean one plain-text book (Gutenberg style) into prose paragraphs: decode, strip the Gutenberg
header and footer, split into blocks, drop contents lists, unwrap lines, drop headings and
boilerplate. Every heuristic errs toward keeping text; an unusable book is a :class:`Rejection`."""

from __future__ import annotations

import itertools
import re
import unicodedata
from typing import NamedTuple

import charset_normalizer

from schemas.rejects import Rejection


class CleanBook(NamedTuple):
    """A cleaned book: title, prose paragraphs (a line each), encoding and the bytes replaced by U+FFFD."""

    title: str | None
    paragraphs: list[str]
    encoding: str
    replaced_characters: int = 0


MAX_CONTROL_SHARE = 0.01
"""Decoded text with more than this share of control characters is taken for binary data."""
MAX_REPLACED_SHARE = 0.001
"""At most this share of a book's characters may be undecodable bytes (replaced by U+FFFD)."""

_CONTROL_RE = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
_BOMS = [
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
]


def _sniff_utf16(data: bytes) -> str:
    """BOM-less UTF-16: NUL bytes in (almost) only the odd (LE) or only the even (BE) positions."""
    sample = data[: 1 << 14]
    pairs = max(len(sample) // 2, 1)
    even, odd = sample[0 : 2 * pairs : 2].count(0), sample[1 : 2 * pairs : 2].count(0)
    if odd >= 0.3 * pairs and even <= 0.02 * pairs:
        return "utf-16-le"
    return "utf-16-be" if even >= 0.3 * pairs and odd <= 0.02 * pairs else ""


def _decode_legacy(data: bytes) -> tuple[str, str]:
    """Decode bytes that are not UTF-8: cp1252 when bytes 0x80-0x9F occur, else latin-1, unless
    charset-normalizer's guess decodes to mostly non-Latin letters (Cyrillic, Greek, CJK): between
    Latin code pages its guesses on mostly-ASCII text are unreliable."""
    western = "cp1252" if re.search(rb"[\x80-\x9f]", data) else "latin-1"
    try:
        western_text = data.decode(western)
    except UnicodeDecodeError:  # 0x81, 0x8D, 0x8F, 0x90 and 0x9D are unassigned in cp1252
        western, western_text = "latin-1", data.decode("latin-1")
    try:
        match = charset_normalizer.from_bytes(data).best()
        guess = match.encoding if match is not None and not match.encoding.startswith("utf") else None
        text = data.decode(guess) if guess else ""
    except Exception:  # noqa: BLE001 - a third-party detector must never make a book crash
        return western_text, western
    letters = [c for c in text if ord(c) > 127 and c.isalpha()]
    non_latin = sum(not unicodedata.name(c, "").startswith("LATIN") for c in letters)
    return (text, guess) if guess and non_latin > len(letters) / 2 else (western_text, western)


class DecodedBook(NamedTuple):
    """A decoded book: its text, the encoding and how many undecodable bytes became U+FFFD."""

    text: str
    encoding: str
    replaced: int = 0


def _decode_replacing(data: bytes, encoding: str) -> tuple[str, int] | None:
    """``data`` decoded with U+FFFD for undecodable bytes, and how many were replaced; None when
    more than ``MAX_REPLACED_SHARE`` of the characters would be replacements."""
    text = data.decode(encoding, errors="replace")
    replaced = text.count("\ufffd") - data.decode(encoding, errors="ignore").count("\ufffd")
    return (text, replaced) if replaced <= MAX_REPLACED_SHARE * max(len(text), 1) else None


def decode_book(data: bytes, name: str = "<book>") -> DecodedBook | Rejection:
    """Decode a book's bytes by the rule of docs/corpus.md, or say why it is not a book. A BOM's
    encoding or UTF-8 tolerates up to ``MAX_REPLACED_SHARE`` undecodable bytes (U+FFFD, counted);
    beyond it a BOM'd book is ``undecodable``, a BOM-less one legacy-decoded."""
    if not data.strip():
        return Rejection("empty", f"{name}: no bytes or only whitespace")
    bom, encoding = next(((b, e) for b, e in _BOMS if data.startswith(b)), (b"", ""))
    if not bom and b"\x00" in data and not (encoding := _sniff_utf16(data)):
        return Rejection("binary", f"{name}: NUL bytes and not UTF-16")
    codec = encoding.removesuffix("-sig") or "utf-8"
    replaced = 0
    try:
        text = data[len(bom) :].decode(codec)
    except UnicodeDecodeError as exc:
        if not bom and b"\x00" in data:
            return Rejection("binary", f"{name}: NUL bytes and not UTF-16")
        tolerated = _decode_replacing(data[len(bom) :], codec)
        if bom and tolerated is None:
            return Rejection(
                "undecodable", f"{name}: {encoding} BOM but {exc.reason} (beyond the tolerated share)"
            )
        if bom or (tolerated is not None and re.search(r"[^\x00-\x7f\ufffd]", tolerated[0])):
            text, replaced = tolerated
        else:
            text, encoding = _decode_legacy(data)
    controls = len(_CONTROL_RE.findall(text))
    if controls > MAX_CONTROL_SHARE * len(text):
        return Rejection("binary", f"{name}: {controls} control characters in {len(text)}")
    text = _CONTROL_RE.sub("", text).lstrip("\ufeff")
    if not text.strip():
        return Rejection("empty", f"{name}: no text after decoding as {encoding or 'utf-8'}")
    return DecodedBook(text, encoding or "utf-8", replaced)


def normalize_newlines(text: str) -> str:
    """CRLF, CR, form and vertical feeds and U+2028 become ``\\n``; U+2029 a blank line."""
    return re.sub(r"[\r\f\v\u2028]", "\n", text.replace("\r\n", "\n").replace("\u2029", "\n\n"))


_I = re.IGNORECASE
_START_RE = re.compile(
    r"^\s*(\*{3}\s*START\s+OF\s+(THE|THIS)\s+PROJECT\s+GUTENBERG|\*?END\*?\s*THE\s+SMALL\s+PRINT)", _I
)
_END_RE = re.compile(r"^\s*(\*{3}\s*)?END\s+OF\s+(THE\s+|THIS\s+)?PROJECT\s+GUTENBERG", _I)
_TITLE_RE = re.compile(r"^\s*Title:\s*(\S.*?)\s*$", _I)
_CREDITS_RE = re.compile(
    r"^\s*((e-?text|e-?book|html\s+version)\s+)?(produced|prepared|transcribed)\s+by\b", _I
)
MAX_CREDIT_LINES = 6
"""A "Produced by" paragraph longer than this (blank lines lost) loses only its first line."""


def strip_gutenberg(text: str) -> tuple[str, str | None]:
    """``(body, title)``: ``text`` without the Project Gutenberg header (to the last ``*** START OF``
    or ``*END*THE SMALL PRINT!`` line, "Produced by" paragraphs included), footer and licence (from
    ``*** END OF`` or ``End of the Project Gutenberg``), and the header's ``Title:``."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if _START_RE.match(line)]
    ends = [i for i, line in enumerate(lines) if _END_RE.match(line) and i > (starts or [-1])[0]]
    footer = ends[0] if ends else len(lines)
    header_end = max((i for i in starts if i < footer), default=-1)
    title = None
    for i, line in enumerate(lines[: max(header_end, 0)]):
        if match := _TITLE_RE.match(line):
            more = itertools.takewhile(lambda s: re.match(r"\s+\S", s), lines[i + 1 : header_end])
            title = " ".join([match.group(1), *(s.strip() for s in more)])
            break
    start = header_end + 1
    while 0 < start < footer:
        while start < footer and not lines[start].strip():
            start += 1
        if start >= footer or not _CREDITS_RE.match(lines[start]):
            break
        end = next((j for j in range(start, footer) if not lines[j].strip()), footer)
        start = end if end - start <= MAX_CREDIT_LINES else start + 1
    return "\n".join(lines[start:footer]), title


REFLOW_MIN_LINES = 30
"""Text whose blocks average this many lines or more has lost its blank lines between paragraphs."""


def _split_reflowed(block: list[str]) -> list[list[str]]:
    """Split a block of a text without blank lines where a paragraph evidently ended: a line that
    left room for the next line's first word (width: the 90th percentile of line lengths) and ends
    a sentence or is under half the width."""
    width = sorted(map(len, block))[int(0.9 * (len(block) - 1))]
    out: list[list[str]] = [[]]
    for line, following in zip(block, [*block[1:], ""], strict=True):
        out[-1].append(line)
        fits = bool(following) and len(line) + 1 + len(following.split()[0]) <= width
        if fits and (re.search(r"[.!?:][\"'”’)]*$", line) or len(line) <= width / 2):
            out.append([])
    return [b for b in out if b]


def split_blocks(text: str) -> list[list[str]]:
    """Split text into blocks of stripped, non-blank lines separated by blank lines (by
    ``_split_reflowed`` when they average ``REFLOW_MIN_LINES`` lines: the blank lines were lost)."""
    chunks = re.split(r"\n[ \t]*(?:\n[ \t]*)+", text)
    blocks = [b for b in ([s.strip() for s in c.split("\n") if s.strip()] for c in chunks) if b]
    if blocks and sum(map(len, blocks)) >= REFLOW_MIN_LINES * len(blocks):
        return [part for block in blocks for part in _split_reflowed(block)]
    return blocks


_ILLUSTRATION_RE = re.compile(r"\[Illustrations?\b[^\]]*\]", _I)


def unwrap_lines(lines: list[str]) -> str:
    """Join a block's lines into one paragraph, whitespace collapsed, ``[Illustration]`` removed;
    ``word-`` + ``word`` gives ``word-word`` (line-end hyphens here are mostly real compounds)."""
    parts = lines[:1]
    for previous, line in itertools.pairwise(lines):
        glued = previous.endswith(("-", "–", "—")) and previous[-2:-1].strip() and line[:1].isalnum()
        parts.append(line if glued else " " + line)
    return " ".join(_ILLUSTRATION_RE.sub(" ", "".join(parts)).split())


_CONTENTS_RE = re.compile(r"^(table\s+of\s+)?contents\W*$", _I)
_KEYWORDS = r"(?i:chapter|book|part|volume|vol\.|letter|stave|canto|section|adventure|act|scene)"
_NUMBER = r"([IVXLCDM]+|[ivxlcdm]+|\d+|(?i:the\s+\w+|one|two|three|four|five|six|seven|eight|nine|ten|last))"
_TOC_ENTRY_RE = re.compile(rf"^({_KEYWORDS}\b|[IVXLCDM]+\.(\s|$)|\d{{1,3}}\.(\s|$))")
_HEADING_RE = re.compile(rf"^{_KEYWORDS}\s+{_NUMBER}\b(?=$|\s*[.:–—-]|\s+[A-Z\"'(_“‘])")
_ROMAN_RE = re.compile(r"^[IVXLCDM]+(\.\s|\.?$)")


def _ends_sentence(text: str) -> bool:
    """Ends (before closing quotes, brackets, ``_``, ``*``) with ``. ! ? … : ,`` or a dash (not a
    semicolon, which ends split titles, ``Frankenstein;``, more often than prose)."""
    return text.rstrip("\"'”’»)]_* ").endswith(tuple(".!?…:,-–—"))


def _upper_share(text: str) -> float:
    letters = [c for c in text if c.isalpha()]
    return sum(c.isupper() for c in letters) / len(letters) if len(letters) >= 2 else 0.0


def _is_toc_block(block: list[str]) -> bool:
    """Contents entries: lines like ``CHAPTER ...``, ``IV. ...``, ``Title ... 123``, short titles
    (at most 60 characters, no sentence end or upper-case); or a wrapped entry (up to 4 lines,
    the first an entry)."""

    def entry(line: str) -> bool:
        if len(line) > 100:
            return False
        if _TOC_ENTRY_RE.match(line) or re.search(r"\S\s+\d{1,4}$", line):
            return True
        return len(line) <= 60 and (not _ends_sentence(line) or _upper_share(line) >= 0.8)

    wrapped = len(block) <= 4 and _TOC_ENTRY_RE.match(block[0]) and max(map(len, block)) <= 100
    return bool(wrapped) or all(map(entry, block))


FRONT_MATTER_MAX_WORDS = 150
"""Fewer words than this before a book's contents list are its title page (publisher, dedication)."""


def _is_short_line(block: list[str]) -> bool:
    return len(block) == 1 and len(block[0]) <= 60


def drop_table_of_contents(blocks: list[list[str]]) -> list[list[str]]:
    """The blocks without their tables of contents: a ``CONTENTS`` heading and at least two entry
    blocks (short single lines in between), or a block of three ``CHAPTER ...``/``IV. ...`` lines;
    fewer than ``FRONT_MATTER_MAX_WORDS`` words before a list are a title page, dropped with it."""
    out: list[list[str]] = []
    i = 0
    while i < len(blocks):
        block, end = blocks[i], i
        if _CONTENTS_RE.match(block[0]) and (len(block) == 1 or _is_toc_block(block[1:])):
            j = end = i + 1
            while j < len(blocks) and (_is_toc_block(blocks[j]) or _is_short_line(blocks[j])):
                j += 1
                end = j if _is_toc_block(blocks[j - 1]) else end
            end = end if len(block) + end - i >= 4 else i
        elif len(block) >= 3 and all(map(_TOC_ENTRY_RE.match, block)):
            end = i + 1
        if end > i:
            if sum(len(" ".join(b).split()) for b in out) < FRONT_MATTER_MAX_WORDS:
                out = []  # a title page before the list goes with it
            i = end
        else:
            out.append(block)
            i += 1
    return out


def is_heading(paragraph: str) -> bool:
    """True for a heading or other non-prose paragraph: no letters; mostly upper-case, unquoted,
    at most 20 words (8 if it ends a sentence); or of at most 12 words, ``[...]``, a numbered heading
    (``CHAPTER IV.``, ``II. A Title``) or not ending a sentence (a heading in any case: Wikipedia's
    are in sentence case)."""
    words = paragraph.split()
    if not any(c.isalpha() for c in paragraph):
        return True
    limit = 8 if _ends_sentence(paragraph) else 20
    if len(words) <= limit and not re.search('["“”‘]', paragraph) and _upper_share(paragraph) >= 0.8:
        return not paragraph.rstrip("_*").endswith(("!", "?"))
    if len(words) > 12 or len(paragraph) > 100:
        return False
    if (paragraph.startswith("[") and paragraph.endswith("]")) or _HEADING_RE.match(paragraph):
        return True
    if _ROMAN_RE.match(paragraph) and (len(words) == 1 or not _ends_sentence(paragraph)):
        return True
    return not _ends_sentence(paragraph)


_BOILERPLATE_RE = re.compile(
    r"project\s+gutenberg|gutenberg-tm|gutenberg\.(org|net)|pglaf|distributed\s+proofread|\be-?texts?\b"
    r"|transcriber['’]?s\s+notes?\b|corrected\s+by\s+the\s+(e-?text\s+)?transcriber",
    _I,
)
_COPYRIGHT_RE = re.compile(r"^\W*(copyright\b|all\s+rights\s+reserved)", _I)
TAIL_SHARE = 0.05
"""In this last share of the blocks, ``THE END`` or boilerplate drops everything from there on."""
_THE_END_RE = re.compile(r"^\W*(the\s+end|finis)\W*$", _I)


def is_boilerplate(paragraph: str) -> bool:
    """True for Project Gutenberg or transcriber text left in the body, or a short copyright line."""
    if _COPYRIGHT_RE.match(paragraph) and len(paragraph.split()) <= 40:
        return True
    return bool(_BOILERPLATE_RE.search(paragraph))


def clean_book(data: bytes, name: str) -> CleanBook | Rejection:
    """Clean one book file into prose paragraphs, or the :class:`Rejection` saying why it cannot be used."""
    decoded = decode_book(data, name)
    if isinstance(decoded, Rejection):
        return decoded
    return clean_text(decoded.text, name, decoded.encoding, decoded.replaced)


def clean_text(text: str, name: str, encoding: str = "utf-8", replaced: int = 0) -> CleanBook | Rejection:
    """Text decoded from ``encoding`` (``replaced`` characters by U+FFFD) cleaned into prose paragraphs
    by the rules for books (Gutenberg header and footer, contents lists, headings and boilerplate
    dropped, lines unwrapped); ``empty`` when none is left."""
    body, title = strip_gutenberg(normalize_newlines(text))
    blocks = drop_table_of_contents(split_blocks(body))
    paragraphs: list[str] = []
    for index, paragraph in enumerate(map(unwrap_lines, blocks)):
        if index >= (1 - TAIL_SHARE) * len(blocks) and (
            _THE_END_RE.match(paragraph) or is_boilerplate(paragraph)
        ):
            break  # what follows THE END or a final transcriber's note is boilerplate
        if paragraph and not is_boilerplate(paragraph) and not is_heading(paragraph):
            paragraphs.append(paragraph)
    if not paragraphs:
        return Rejection("empty", f"{name}: no prose paragraphs left after cleaning")
    return CleanBook(title, paragraphs, encoding, replaced)
