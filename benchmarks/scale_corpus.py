"""Make N MB of realistic input for the pipelines from the real data in ../shared/data, deterministically.

    python benchmarks/scale_corpus.py --mb 200 --output /tmp/scale/200 [--seed 1]

Writes, under ``--output`` (a new folder), about ``--mb`` MB of text in three forms:

* ``wiki/``: a multistream ``enwiki-…-pages-articles-multistream.xml.bz2`` with its index (100 pages a
  bz2 stream), about 3/4 of the text (English Wikipedia's 2,500 M words against BooksCorpus's 800 M):
  the enwiki excerpt's 206 pages (articles and redirects) again and again, each copy with a new title,
  page id and revision id, and its wikitext varied as below;
* ``books/``: Gutenberg-style book files (header, ``*** START OF`` and ``*** END OF`` lines, lines
  wrapped at 70 columns, CRLF) of about 0.5 MB of text each, about 1/4 of the text: groups of 40
  paragraphs of the 8 real Gutenberg novels (as ``pipelines books`` cleans them) drawn at random;
* ``text/``: the same documents in the reference one-sentence-a-line format (a blank line between
  documents; files of at most 64 MB), their sentences as the cleaning stages split them, for
  ``pipelines text``.

How copies differ: in each copy (a page, or a book) a random 30% of the content word types (words of 4
letters or more, names too, not among the real text's 300 most frequent, not a name the wikitext needs:
template, parameter, namespace, tag) are replaced, the same way throughout the copy (capitalised or in
capitals as the word was), by another word, so that copies share few
5-word shingles and ``pipelines corpus``'s near-duplicate removal keeps them. New words are minted
(from syllables, deterministically) at the rate Heaps' law fitted on the real text predicts for the
words written so far (V = K n^beta), and replacements otherwise reuse earlier words, frequent ones
more often: the number of distinct words keeps growing as in real text, so vocabulary learning meets a
realistic number of them. ``scale_corpus.json`` records what was made, the time taken and the Heaps
fits (lower-cased runs of word characters): of the real text (the pages and book groups interleaved as written,
from 10,000 words on), and of the output's ``text/`` words past the real text's length (where the
output goes beyond the real data) and from 10,000 words on.

Every choice comes from a generator seeded by (``--seed``, what is made, its number): the same
arguments give the same bytes. Writing streams (a bz2 stream, a book, a text document at a time);
memory holds the real data and the set of distinct words written.
"""

from __future__ import annotations

import bz2
import functools
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness

WIKI_SHARE = 0.75
PAGES_PER_STREAM = 100
REPLACED_SHARE = 0.3
COMMON_WORDS = 300
PARAGRAPHS_PER_GROUP = 40
BOOK_TEXT_BYTES = 500_000
TEXT_FILE_BYTES = 64 << 20
DUMP_NAME = "enwiki-20991231-pages-articles-multistream"
_WORD = re.compile(r"\b([A-Za-z][a-z]{3,}|[A-Z]{4,})\b")
"""A replaceable word: 4 letters or more, lower-case, capitalised or upper-case (``_`` joins none)."""
_LOWER_WORD = re.compile(r"[a-z]{4,}")
_WORDS = re.compile(r"\w+")
_MARKUP_NAMES = re.compile(r"\{\{\s*([^|{}]+)|(\w+)\s*=|\[\[\s*([^\]|:]+):|</?\s*(\w+)|#(\w+)")
"""Names wikitext needs as they are: templates, parameters and attributes, namespaces, tags, #REDIRECT."""
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def mint(number: int) -> str:
    """The ``number``-th new word: three or more syllables, a different word for each number."""
    number += len(_SYLLABLES) ** 2
    letters = []
    while number:
        number, rest = divmod(number, len(_SYLLABLES))
        letters.append(_SYLLABLES[rest])
    return "".join(letters)


def replace_words(text: str, mapping: dict[str, str]) -> str:
    """``text`` with each replaceable word found in ``mapping`` replaced."""
    if not mapping:
        return text
    parts = _WORD.split(text)
    parts[1::2] = [mapping.get(w, w) for w in parts[1::2]]
    return "".join(parts)


@dataclass
class Source:
    """A real document to copy: a page (``page``) or a group of book paragraphs, its cleaned sentences
    and the word types a copy may replace."""

    sentences: list[str]
    candidates: list[str]
    page: object = None
    paragraphs: list[str] = field(default_factory=list)

    @property
    def text_bytes(self) -> int:
        return sum(len(s.encode("utf-8")) + 1 for s in self.sentences)


def fit_heaps(points: list[tuple[int, int]]) -> dict:
    """Least-squares fit of log V = log K + beta log n over ``(n words, V distinct)`` points."""
    n, v = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    beta, log_k = np.polyfit(n, v, 1)
    return {"K": round(float(math.exp(log_k)), 3), "beta": round(float(beta), 4), "points": len(points)}


class Words:
    """The words written so far: how many, the distinct ones, the Heaps curve at geometric steps."""

    def __init__(self, common: set[str]) -> None:
        self.total, self.distinct, self.curve, self._next, self._common = 0, set(), [], 1000, common
        self.replaceable: list[str] = []
        """The replaceable words written so far (not ``common``), in the order they first appeared."""

    def add(self, text: str) -> None:
        words = _WORDS.findall(text.lower())
        self.total += len(words)
        new = set(words) - self.distinct
        self.distinct.update(new)
        self.replaceable.extend(sorted(w for w in new if _LOWER_WORD.fullmatch(w) and w not in self._common))
        if self.total >= self._next:
            self.curve.append((self.total, len(self.distinct)))
            self._next = int(self._next * 1.25) + 1


@functools.cache
def real_sources() -> tuple[list[Source], list[Source], str, set[str], dict]:
    """The enwiki excerpt's pages and the books' paragraph groups as sources, the dump's header, the
    real text's most frequent words (never replaced, nor replacements) and its Heaps fit."""
    from pipelines.books.clean import clean_book
    from pipelines.text import paragraphs_to_sentences
    from pipelines.wiki.dump import iter_pages
    from pipelines.wiki.pipeline import page_outcome

    harness.require(harness.WIKI_DUMP, harness.BOOKS)
    with open(harness.WIKI_DUMP, "rb") as f:
        pages = list(iter_pages(f))
    header = bz2.decompress(harness.WIKI_DUMP.read_bytes()).decode("utf-8").split("<page>", 1)[0]
    wiki = []
    for page in pages:
        outcome = page_outcome(page, "real", 8)
        sentences = outcome.row["sentences"] if outcome.row else []
        wiki.append(Source(sentences, [], page=page))
    books = []
    for path in sorted(harness.BOOKS.glob("*.txt")):
        paragraphs = clean_book(path.read_bytes(), path.name).paragraphs
        for first in range(0, len(paragraphs), PARAGRAPHS_PER_GROUP):
            group = paragraphs[first : first + PARAGRAPHS_PER_GROUP]
            books.append(Source(paragraphs_to_sentences(group), [], paragraphs=group))
    order, counts, real = interleave(wiki, books), {}, Words(set())
    for source in order:
        text = "\n".join(source.sentences)
        real.add(text)
        for word in _WORD.findall(text):
            counts[word.lower()] = counts.get(word.lower(), 0) + 1
    lexicon = sorted(counts, key=lambda w: (-counts[w], w))
    common = set(lexicon[:COMMON_WORDS])
    for source in wiki + books:
        protected = set()
        if source.page is not None:
            for found in _MARKUP_NAMES.findall(source.page.text):
                protected.update(_WORDS.findall(" ".join(found).lower()))
        words = dict.fromkeys(w.lower() for w in _WORD.findall("\n".join(source.sentences)))
        source.candidates = [w for w in words if w not in common and w not in protected]
    heaps = fit_heaps([p for p in real.curve if p[0] >= 10_000])
    heaps.update(words=real.total, distinct=len(real.distinct))
    return wiki, books, header, common, heaps


def interleave(wiki: list[Source], books: list[Source]) -> list[Source]:
    """Pages and book groups in turn, the text of each kind in the WIKI_SHARE proportion."""
    order, sizes, i, j = [], [0, 0], 0, 0
    while i < len(wiki) or j < len(books):
        if j >= len(books) or (i < len(wiki) and sizes[0] * (1 - WIKI_SHARE) <= sizes[1] * WIKI_SHARE):
            order.append(wiki[i])
            sizes[0] += wiki[i].text_bytes
            i += 1
        else:
            order.append(books[j])
            sizes[1] += books[j].text_bytes
            j += 1
    return order


class Replacer:
    """Each copy's replacements: new words at the rate Heaps' law asks for, otherwise earlier ones."""

    def __init__(self, seed: int, heaps: dict, common: set[str]) -> None:
        self.seed, self.heaps, self.minted, self.words = seed, heaps, 0, Words(common)

    def mapping(self, candidates: list[str], stream: int, number: int, num_words: int) -> dict[str, str]:
        """The replacements of copy ``number`` of ``stream`` (0 pages, 1 books), about ``num_words`` long."""
        rng = np.random.default_rng([self.seed, stream, number])
        draws = rng.random(len(candidates))
        chosen = [w for w, u in zip(candidates, draws.tolist(), strict=True) if u < REPLACED_SHARE]
        wanted = self.heaps["K"] * (self.words.total + num_words) ** self.heaps["beta"]
        new = max(0, round(wanted) - len(self.words.distinct))
        if new > len(chosen):
            chosen = candidates
        mapping = {}
        for k, (word, u) in enumerate(zip(chosen, rng.random(len(chosen)).tolist(), strict=True)):
            pool = self.words.replaceable
            if k < new:
                mapping[word] = mint(self.minted)
                self.minted += 1
            elif pool:
                mapping[word] = pool[int(len(pool) * u * u)]
        for word, new in list(mapping.items()):  # the same word capitalised or in capitals
            mapping[word.capitalize()], mapping[word.upper()] = new.capitalize(), new.upper()
        return mapping


class Output:
    """The three forms being written: the dump and its index, the books, the text files."""

    def __init__(self, folder: Path, header: str) -> None:
        for name in ("wiki", "books", "text"):
            (folder / name).mkdir(parents=True)
        self.folder, self.pending, self.text, self.text_files = folder, [], None, 0
        self.dump = open(folder / "wiki" / f"{DUMP_NAME}.xml.bz2", "wb")
        self.index = bz2.BZ2File(folder / "wiki" / f"{DUMP_NAME}-index.txt.bz2", "wb")
        first = bz2.compress(header.encode("utf-8"))
        self.dump.write(first)
        self.offset, self.books = len(first), 0

    def page(self, page_id: int, title: str, xml: str) -> None:
        self.pending.append((page_id, title, xml))
        if len(self.pending) == PAGES_PER_STREAM:
            self._stream()

    def _stream(self) -> None:
        data = bz2.compress("".join(xml for _, _, xml in self.pending).encode("utf-8"))
        lines = "".join(f"{self.offset}:{page_id}:{title}\n" for page_id, title, _ in self.pending)
        self.index.write(lines.encode("utf-8"))
        self.dump.write(data)
        self.offset, self.pending = self.offset + len(data), []

    def book(self, title: str, paragraphs: list[str]) -> None:
        body = "\r\n\r\n".join(_WRAP.sub("\\1\r\n", p).rstrip("\r\n") for p in paragraphs)
        text = (
            f"The Project Gutenberg eBook of {title}\r\n\r\nTitle: {title}\r\n\r\n"
            f"*** START OF THE PROJECT GUTENBERG EBOOK {title.upper()} ***\r\n\r\n\r\n{body}\r\n\r\n\r\n"
            f"*** END OF THE PROJECT GUTENBERG EBOOK {title.upper()} ***\r\n"
        )
        (self.folder / "books" / f"book-{self.books:05d}.txt").write_bytes(text.encode("utf-8"))
        self.books += 1

    def document(self, sentences: list[str]) -> None:
        if self.text is None or self.text.tell() >= TEXT_FILE_BYTES:
            if self.text is not None:
                self.text.close()
            self.text = open(self.folder / "text" / f"part-{self.text_files:05d}.txt", "wb")
            self.text_files += 1
        self.text.write(("\n".join(sentences) + "\n\n").encode("utf-8"))

    def close(self) -> None:
        if self.pending:
            self._stream()
        self.dump.write(bz2.compress(b"</mediawiki>\n"))
        for f in (self.dump, self.index, self.text):
            if f is not None:
                f.close()


_WRAP = re.compile(r"(.{1,70})(?:\s+|$)")


def page_xml(page, title: str, page_id: int, revision_id: int, text: str, redirect: str | None) -> str:
    """A ``<page>`` element as the dumps write it."""
    redirect_line = f"    <redirect title={quoteattr(redirect)} />\n" if redirect else ""
    return (
        f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{page.ns}</ns>\n    <id>{page_id}</id>\n"
        f"{redirect_line}    <revision>\n      <id>{revision_id}</id>\n"
        "      <timestamp>2099-12-31T00:00:00Z</timestamp>\n      <model>wikitext</model>\n"
        f'      <format>text/x-wiki</format>\n      <text bytes="{len(text.encode("utf-8"))}" '
        f'xml:space="preserve">{escape(text)}</text>\n    </revision>\n  </page>\n'
    )


def generate(folder: Path, mb: float, seed: int) -> dict:
    """Write about ``mb`` MB of text in the three forms under ``folder``; what was made."""
    started = time.perf_counter()
    wiki, books, header, common, real = real_sources()
    replacer, out = Replacer(seed, real, common), Output(folder, header)
    wanted = (WIKI_SHARE * mb * 1e6, (1 - WIKI_SHARE) * mb * 1e6)
    made, counts = [0, 0], {"pages": 0, "articles": 0, "redirects": 0, "books": 0, "documents": 0}
    while made[0] < wanted[0] or made[1] < wanted[1]:
        if made[1] >= wanted[1] or (made[0] < wanted[0] and made[0] * wanted[1] <= made[1] * wanted[0]):
            made[0] += write_page(out, replacer, wiki, counts)
        else:
            made[1] += write_book(out, replacer, books, counts)
    out.close()
    words = replacer.words
    generated = fit_heaps([p for p in words.curve if p[0] >= real["words"]] or words.curve[-2:])
    generated.update(words=words.total, distinct=len(words.distinct), fitted_from_words=real["words"])
    whole = fit_heaps([p for p in words.curve if p[0] >= 10_000])
    sizes = {
        name: sum(f.stat().st_size for f in (folder / name).iterdir()) for name in ("wiki", "books", "text")
    }
    return {
        "mb": mb,
        "seed": seed,
        **counts,
        "text_bytes": {"wiki": made[0], "books": made[1]},
        "file_bytes": sizes,
        "text_files": out.text_files,
        "minted_words": replacer.minted,
        "heaps": {"real": real, "generated": generated, "generated_from_10000_words": whole},
        "seconds": round(time.perf_counter() - started, 1),
    }


def write_page(out: Output, replacer: Replacer, wiki: list[Source], counts: dict) -> int:
    """The next page copy (the excerpt's pages in turn, round after round); its text bytes."""
    number = counts["pages"]
    rounds, source = divmod(number, len(wiki))
    source = wiki[source]
    page, suffix = source.page, f" ({rounds})" if rounds else ""
    num_words = sum(s.count(" ") + 1 for s in source.sentences)
    mapping = replacer.mapping(source.candidates, 0, number, num_words) if source.sentences else {}
    title = replace_words(page.title, mapping) + suffix
    redirect = page.redirect_title + suffix if page.redirect_title else None
    page_id, revision_id = 10 + number, 100_000_000 + number
    out.page(
        page_id,
        title,
        page_xml(page, title, page_id, revision_id, replace_words(page.text, mapping), redirect),
    )
    counts["pages"] += 1
    counts["redirects" if redirect else "articles"] += 1
    if not source.sentences:
        return 0
    sentences = [replace_words(s, mapping) for s in source.sentences]
    out.document(sentences)
    counts["documents"] += 1
    replacer.words.add("\n".join(sentences))
    return sum(len(s.encode("utf-8")) + 1 for s in sentences)


def write_book(out: Output, replacer: Replacer, books: list[Source], counts: dict) -> int:
    """The next book: paragraph groups drawn at random to about BOOK_TEXT_BYTES; its text bytes."""
    number = counts["books"]
    rng = np.random.default_rng([replacer.seed, 2, number])
    groups, size = [], 0
    while size < BOOK_TEXT_BYTES:
        groups.append(books[int(rng.integers(len(books)))])
        size += groups[-1].text_bytes
    candidates = list(dict.fromkeys(w for g in groups for w in g.candidates))
    num_words = sum(s.count(" ") + 1 for g in groups for s in g.sentences)
    mapping = replacer.mapping(candidates, 1, number, num_words)
    title = f"The {mint(number).capitalize()} {replace_words(groups[0].sentences[0].split()[-1], mapping)}"
    out.book(title, [replace_words(p, mapping) for g in groups for p in g.paragraphs])
    sentences = [replace_words(s, mapping) for g in groups for s in g.sentences]
    out.document(sentences)
    counts["documents"] += 1
    replacer.words.add("\n".join(sentences))
    counts["books"] += 1
    return sum(len(s.encode("utf-8")) + 1 for s in sentences)


def main() -> None:
    parser = harness.parser(__doc__, None)
    parser.add_argument("--mb", type=float, required=True, help="MB of text to make")
    parser.add_argument(
        "--output", type=Path, required=True, help="a new folder (never inside the repository)"
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    output = args.output.resolve()
    if output.is_relative_to(harness.ROOT):
        sys.exit(f"--output {args.output}: inside the repository; give a folder under /tmp")
    if output.exists() and any(output.iterdir()):
        sys.exit(f"--output {args.output}: not empty; give a new folder")
    if args.mb <= 0:
        sys.exit(f"--mb must be positive, got {args.mb}")
    made = generate(output, args.mb, args.seed)
    (output / "scale_corpus.json").write_text(json.dumps(made, indent=2) + "\n")
    real, generated = made["heaps"]["real"], made["heaps"]["generated"]
    print(
        f"{output}: {sum(made['text_bytes'].values()) / 1e6:,.1f} MB of text ({made['pages']:,} pages, "
        f"{made['books']:,} books) in {made['seconds']:,.1f} s; Heaps K {generated['K']}, beta "
        f"{generated['beta']} ({generated['distinct']:,} distinct of {generated['words']:,} words) against the "
        f"real excerpt's K {real['K']}, beta {real['beta']}"
    )


if __name__ == "__main__":
    main()
