"""Tests for pipelines.books.clean: invented inputs with exact expectations, real Gutenberg books.

The real books are read at run time from ../shared/data (never copied into the project); tests
that need them skip where that folder is absent.
"""

from __future__ import annotations

import functools
import random
import re
import textwrap
from pathlib import Path

import pytest

from pipelines.books.clean import (
    CleanBook,
    clean_book,
    decode_book,
    drop_table_of_contents,
    is_boilerplate,
    is_heading,
    normalize_newlines,
    split_blocks,
    strip_gutenberg,
    unwrap_lines,
)
from schemas.rejects import Rejection
from tests.conftest import SHARED_DATA, require

GUTENBERG = SHARED_DATA / "books" / "gutenberg"
BOTCHAN = SHARED_DATA / "books" / "sentencepiece_botchan.txt"

# --------------------------------------------------------------------------- decoding

SAMPLE = "Grüße from the café — “quoted” text.\r\nSecond line, naïve and façade.\r\n"


def test_utf8_with_bom_and_crlf() -> None:
    text, encoding, _ = decode_book("\ufeffFirst line.\r\nSecond line.\r\n".encode())
    assert (text, encoding) == ("First line.\r\nSecond line.\r\n", "utf-8-sig")
    assert normalize_newlines(text) == "First line.\nSecond line.\n"


def test_utf8_without_bom() -> None:
    assert decode_book(SAMPLE.encode("utf-8")) == (SAMPLE, "utf-8", 0)


@pytest.mark.parametrize(
    ("bom", "codec"),
    [
        (b"\xff\xfe", "utf-16-le"),
        (b"\xfe\xff", "utf-16-be"),
        (b"\xff\xfe\x00\x00", "utf-32-le"),
        (b"\x00\x00\xfe\xff", "utf-32-be"),
    ],
)
def test_utf16_and_utf32_with_bom(bom: bytes, codec: str) -> None:
    assert decode_book(bom + SAMPLE.encode(codec)) == (SAMPLE, codec, 0)


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_without_bom_is_recognised_by_its_nul_bytes(codec: str) -> None:
    assert decode_book(SAMPLE.encode(codec)) == (SAMPLE, codec, 0)


def test_cp1252_curly_quotes_and_dashes() -> None:
    data = b"\x93Come in,\x94 she said \x96 and he did\x85\r\n"
    assert decode_book(data) == ("“Come in,” she said – and he did…\r\n", "cp1252", 0)


def test_latin1_accents() -> None:
    assert decode_book(b"The caf\xe9 served cr\xe8me br\xfbl\xe9e.") == (
        "The café served crème brûlée.",
        "latin-1",
        0,
    )


def test_bytes_unassigned_in_cp1252_fall_back_to_latin1() -> None:
    data = b"\x93Quoted\x94 " + b"plain words " * 40 + b"\x81"
    text, encoding, _ = decode_book(data)
    assert encoding == "latin-1"
    assert text.startswith("Quoted plain words") and "\x81" not in text and "\x93" not in text


def test_non_latin_legacy_encoding_is_detected() -> None:
    russian = "Это небольшой тест кодировки. Мы проверяем, что русский текст правильно декодируется."
    text, encoding, _ = decode_book(russian.encode("cp1251"))
    assert text == russian
    assert encoding not in {"latin-1", "cp1252", "utf-8"}


BINARIES = {
    "png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00\x00\x00\x01\x00\x08\x06\x00\x00\x00",
    "png_signature_only": b"\x89PNG\r\n\x1a\n",
    "zip": b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + bytes(20) + b"book.txt",
    "elf": b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x02\x00\x3e\x00",
    "random": random.Random(7).randbytes(4096),
    "nul_rich_text": b"Hello world\x00" * 50,
    "one_nul_in_text": b"Plain text. " * 100 + b"\x00",
    "control_characters": bytes(range(1, 32)) * 20 + b"some text",
}


@pytest.mark.parametrize("kind", sorted(BINARIES))
def test_binary_files_are_rejected(kind: str) -> None:
    rejection = clean_book(BINARIES[kind], f"{kind}.bin")
    assert rejection.reason == "binary"
    assert f"{kind}.bin" in rejection.detail


@pytest.mark.parametrize("data", [b"", b"  \r\n\t ", b"\xef\xbb\xbf", b"\xff\xfe", b"\xef\xbb\xbf \r\n"])
def test_empty_files_are_rejected(data: bytes) -> None:
    assert clean_book(data, "empty.txt").reason == "empty"


@pytest.mark.parametrize("data", [b"\xef\xbb\xbfok \xff\xfe", b"\xff\xfeA", b"\xfe\xff\xd8\x00\x00A"])
def test_text_that_breaks_its_bom_is_undecodable(data: bytes) -> None:
    rejection = decode_book(data, "broken.txt")
    assert rejection.reason == "undecodable" and rejection.detail.startswith("broken.txt: ")


def test_never_crashes_on_any_bytes() -> None:
    rng = random.Random(1234)
    seeds = [
        INVENTED_BOOK,
        INVENTED_BOOK.decode("utf-8-sig").encode("utf-16"),
        b"\xff\xfe",
        b"\xef\xbb\xbf",
        b"",
    ]
    reasons = set()
    for _ in range(300):
        data = bytearray(rng.choice(seeds))
        if rng.random() < 0.5 and data:
            for _ in range(rng.randrange(1, 10)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            data += bytes(
                rng.choice(b"\x00\r\n \t*-abcIVX.\x93\x94\xe9\xc3\xff") for _ in range(rng.randrange(200))
            )
        book = clean_book(bytes(data), "fuzz.txt")
        if isinstance(book, Rejection):
            reasons.add(book.reason)
        else:
            assert all(
                p and "\n" not in p and "\r" not in p and p == " ".join(p.split()) for p in book.paragraphs
            )
    assert reasons <= {"binary", "undecodable", "empty"}


def test_normalize_newlines() -> None:
    assert normalize_newlines("a\r\nb\rc\nd\fe\u2028f\u2029g") == "a\nb\nc\nd\ne\nf\n\ng"


# --------------------------------------------------------------------------- Gutenberg header and footer

INVENTED_HEADER = [
    "The Project Gutenberg EBook of The Lantern Keeper, by Ada Fenwick",
    "",
    "An invented licence sentence stands in for the real one here.",
    "",
    "Title: The Lantern Keeper",
    "       and Other Stories",
    "",
    "Author: Ada Fenwick",
    "",
    "*** START OF THIS PROJECT GUTENBERG EBOOK THE LANTERN KEEPER ***",
    "",
    "",
    "Produced by Jane Volunteer and the Invented",
    "Proofreading Circle",
    "",
]
INVENTED_FOOTER = [
    "End of the Project Gutenberg EBook of The Lantern Keeper, by Ada Fenwick",
    "",
    "*** END OF THIS PROJECT GUTENBERG EBOOK THE LANTERN KEEPER ***",
    "An invented licence line that must not survive.",
]


def test_strip_gutenberg_header_credits_and_footer() -> None:
    body = ["The keeper climbed the tower at dusk.", ""]
    assert strip_gutenberg("\n".join(INVENTED_HEADER + body + INVENTED_FOOTER)) == (
        "The keeper climbed the tower at dusk.\n",
        "The Lantern Keeper and Other Stories",
    )


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (
            "***START OF THE PROJECT GUTENBERG EBOOK THE CLOCK***",
            "***END OF THE PROJECT GUTENBERG EBOOK THE CLOCK***",
        ),
        (
            "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*",
            "End of Project Gutenberg's The Clock, by Somebody",
        ),
        (
            "*** START OF THE PROJECT GUTENBERG EBOOK THE CLOCK ***",
            "End of The Project Gutenberg Etext of The Clock",
        ),
    ],
)
def test_strip_gutenberg_marker_variants(start: str, end: str) -> None:
    text = f"Invented header.\nTitle: The Clock\n{start}\nThe clock struck nine.\n{end}\nInvented licence.\n"
    assert strip_gutenberg(text) == ("The clock struck nine.", "The Clock")


def test_small_print_after_the_start_marker_ends_the_header() -> None:
    text = (
        "*** START OF THE PROJECT GUTENBERG EBOOK X ***\nInvented small print.\n"
        "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN EBOOKS*END*\nThe story begins.\n"
    )
    assert strip_gutenberg(text)[0] == "The story begins.\n"


def test_text_without_markers_is_kept_whole() -> None:
    text = "Title: Not a header\n\nA story without any markers.\n"
    assert strip_gutenberg(text) == (text, None)


def test_only_a_footer_marker_strips_the_footer() -> None:
    text = "Story text.\n\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\nInvented licence."
    assert strip_gutenberg(text) == ("Story text.\n", None)


def test_produced_by_in_a_file_without_blank_lines_drops_only_that_line() -> None:
    prose = [f"Line {i} of a story whose blank lines were lost." for i in range(10)]
    text = "\n".join(["*** START OF THE PROJECT GUTENBERG EBOOK X ***", "Produced by Someone Kind", *prose])
    assert strip_gutenberg(text)[0] == "\n".join(prose)


# --------------------------------------------------------------------------- paragraphs


def _paragraphs(text: str) -> list[str]:
    return [p for p in map(unwrap_lines, split_blocks(text)) if p]


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["a well-", "known fact"], "a well-known fact"),
        (["a long--", "dash"], "a long--dash"),
        (["an em\u2014", "dash"], "an em\u2014dash"),
        (["a spaced -", "hyphen"], "a spaced - hyphen"),
        (["hyphen-", "\u201cquoted\u201d"], "hyphen- \u201cquoted\u201d"),
        (["  lots   of", "\tspace  "], "lots of space"),
        (["Before [Illustration: a small", "boat] after."], "Before after."),
        (["[Illustration]"], ""),
    ],
)
def test_unwrap_lines(lines: list[str], expected: str) -> None:
    assert unwrap_lines(lines) == expected


def test_split_blocks_and_paragraphs() -> None:
    text = "  First line\nsecond line\n   \n\n\nThird  one\n\n"
    assert split_blocks(text) == [["First line", "second line"], ["Third  one"]]
    assert _paragraphs(text) == ["First line second line", "Third one"]


def test_paragraphs_are_recovered_when_blank_lines_were_lost() -> None:
    paragraphs = [
        " ".join(
            f"Sentence {j} of paragraph {i} tells of the harbour, the gulls and the tide." for j in range(4)
        )
        for i in range(6)
    ]
    lines = ["CHAPTER ONE"] + [line for p in paragraphs for line in textwrap.wrap(p, width=64)]
    assert len(lines) >= 30
    assert _paragraphs("\n".join(lines)) == ["CHAPTER ONE", *paragraphs]


def test_hand_wrapped_paragraphs_are_not_split() -> None:
    # Short lines that end sentences inside ordinary blank-line separated paragraphs.
    block = ["The sea was calm.", "The boat was small.", "Nobody came."] * 12
    assert _paragraphs("\n".join(block) + "\n\nAnother paragraph.") == [
        " ".join(block),
        "Another paragraph.",
    ]


# --------------------------------------------------------------------------- tables of contents

PROSE = [
    "The keeper climbed the tower at dusk, counting the steps as he always did,",
    "and reached the lamp room before the last of the light had gone from the sea.",
]


@pytest.mark.parametrize(
    ("blocks", "removed"),
    [
        # A heading and one entry per block; the first chapter heading runs on from the list.
        ([["CONTENTS"], ["CHAPTER I. The Tower"], ["CHAPTER II. The Storm"], ["CHAPTER I. The Tower"]], 4),
        # Entries with page numbers, blank lines between them.
        (
            [
                ["Contents"],
                ["CHAPTER I", "Page"],
                ["The Tower at Dusk      1"],
                ["CHAPTER II"],
                ["The Storm  14"],
            ],
            6,
        ),
        # One indented block of entries, and a heading inside the block.
        (
            [
                [
                    "TABLE OF CONTENTS",
                    "Chapter I      The Tower",
                    "Chapter II     The Storm",
                    "Chapter III    Dawn",
                ]
            ],
            4,
        ),
        # No heading: a block whose every line is a numbered entry.
        ([["I. The Tower", "II. The Storm", "III. Dawn"]], 3),
        # Entries wrapped over two lines, with sentence punctuation.
        ([["CONTENTS."], ["CHAPTER I. The Tower.--A Long Climb.--The", "Lamp."], ["CHAPTER II. Storm."]], 4),
    ],
)
def test_drop_table_of_contents(blocks: list[list[str]], removed: int) -> None:
    assert drop_table_of_contents([*blocks, PROSE]) == [PROSE]


def test_contents_list_runs_over_captions_and_gives_back_dialogue() -> None:
    toc = [
        ["CONTENTS."],
        ["CHAPTER I. The Tower"],
        ["LIST OF PLATES."],
        ["The Old Inn"],
        ["\u201cWho Goes There?\u201d"],
    ]
    toc += [["\u201cStop!\u201d"], ["The Lantern"], ["CHAPTER I."]]
    dialogue = [["\u201cHello!\u201d"], ["\u201cWho is it?\u201d"]]
    assert drop_table_of_contents([*toc, *dialogue, PROSE]) == [*dialogue, PROSE]


def test_title_page_before_contents_goes_with_it_but_a_preface_stays() -> None:
    title_page = [["THE LANTERN KEEPER"], ["By Ada Fenwick"], ["LONDON", "Invented & Sons"]]
    contents = [["CONTENTS"], ["CHAPTER I. The Tower"], ["CHAPTER II. The Storm"]]
    assert drop_table_of_contents([*title_page, *contents, PROSE]) == [PROSE]
    preface = [PROSE * 6]  # 12 lines, about 180 words
    assert drop_table_of_contents([*preface, *contents, PROSE]) == [*preface, PROSE]


@pytest.mark.parametrize(
    "blocks",
    [
        [["Contents"], PROSE, ["CHAPTER I. The Tower"]],  # a heading, then prose: no list
        [
            [
                "I am the keeper of this light,",
                "I am the one who climbs the stair,",
                "I am awake when others sleep.",
            ]
        ],
        [["Chapter and verse were quoted", "at him all evening long; he", "listened and said nothing."]],
    ],
)
def test_no_table_of_contents(blocks: list[list[str]]) -> None:
    assert drop_table_of_contents(blocks) == blocks


# --------------------------------------------------------------------------- headings and boilerplate


@pytest.mark.parametrize(
    "paragraph",
    [
        "CHAPTER IV.",
        "Chapter 12",
        "CHAPTER XI. The Lantern Goes Out",
        "BOOK THE FIRST",
        "Book the Second--The Return",
        "PART II",
        "Volume three: Winter",
        "Letter 4",
        "STAVE ONE.",
        "II. A Winter Journey",
        "XII.",
        "IX",
        "* * * * *",
        "-----",
        "1919",
        "[Illustration: A ship at sea]",
        "[_Reprinted by arrangement with the author._]",
        "THE END",
        "PREFACE.",
        "THE LANTERN KEEPER AND OTHER STORIES",
        "By Ada Fenwick",
        "by",
        "The Keeper's Log",
        "_Harbour Notes_",
        "Seaward;",
    ],
)
def test_is_heading(paragraph: str) -> None:
    assert is_heading(paragraph)


@pytest.mark.parametrize(
    "paragraph",
    [
        "He said nothing.",
        "I am here.",
        "He says:",
        "My dear Sister,",
        "Part of me wanted to stay, but the train was already leaving.",
        "Chapter and verse were quoted at him all evening.",
        "Book me a room by the sea.",
        "Letter by letter, the message appeared.",
        "\u201cHELP!\u201d",
        "\u201cWho goes there?\u201d",
        "STOP THAT AT ONCE!",
        "WHERE ARE YOU GOING?",
        "THE KEEPER'S ADDRESS WAS SIMPLE: TOWER, ROCK, NEAR THE HARBOUR, BY THE SEA.",
        "I. e. the second lamp was brighter than the first.",
        "Yes.",
        "The drama was over--",
        " ".join(["The tide came in and went out again, as it always had."] * 3),
    ],
)
def test_is_not_heading(paragraph: str) -> None:
    assert not is_heading(paragraph)


@pytest.mark.parametrize(
    ("paragraph", "expected"),
    [
        ("This invented note mentions Project Gutenberg and its licence.", True),
        ("Transcriber's Note: obvious printing errors have been fixed.", True),
        ("Transcriber\u2019s notes on this edition:", True),
        ("This etext was checked twice.", True),
        ("Copyright, 1901, by Ada Fenwick.", True),
        ("The keeper copied the gutenberg bible by candlelight.", False),
        ("Copyright law was the last thing on his mind as he " + "climbed the stair again " * 10, False),
    ],
)
def test_is_boilerplate(paragraph: str, expected: bool) -> None:
    assert is_boilerplate(paragraph) is expected


# --------------------------------------------------------------------------- whole books

INVENTED_BOOK = "\r\n".join(
    [
        *INVENTED_HEADER,
        "",
        "THE LANTERN KEEPER",
        "",
        "By Ada Fenwick",
        "",
        "",
        "CONTENTS",
        "",
        "CHAPTER I. The Tower",
        "",
        "CHAPTER II. The Storm",
        "",
        "",
        "CHAPTER I. The Tower",
        "",
        *PROSE,
        "",
        "[Illustration: The tower at dusk]",
        "",
        "He trimmed the wick, wiped the well-",
        "known brass fittings and waited.",
        "",
        "       *       *       *       *       *",
        "",
        "CHAPTER II. The Storm",
        "",
        "\u201cIs anyone there?\u201d called a voice from the rocks below.",
        "",
        "He says:",
        "",
        *INVENTED_FOOTER,
        "",
    ]
).encode("utf-8-sig")


def test_clean_invented_book() -> None:
    book = clean_book(INVENTED_BOOK, "lantern.txt")
    assert book == CleanBook(
        title="The Lantern Keeper and Other Stories",
        paragraphs=[
            " ".join(PROSE),
            "He trimmed the wick, wiped the well-known brass fittings and waited.",
            "\u201cIs anyone there?\u201d called a voice from the rocks below.",
            "He says:",
        ],
        encoding="utf-8-sig",
    )


def test_the_end_near_the_end_drops_what_follows() -> None:
    prose = [f"Paragraph {i} is plain prose about the harbour and the gulls." for i in range(60)]
    advert = [
        "THE END",
        "More Tales by the Same Hand",
        "Ask your bookseller for the complete list of our novels.",
    ]
    book = clean_book("\n\n".join(prose + advert).encode(), "tale.txt")
    assert book.paragraphs == prose


def test_book_without_markers_keeps_all_prose() -> None:
    book = clean_book(b"Just one paragraph of prose here.\n\nAnd another one.", "plain.txt")
    assert (book.title, book.paragraphs) == (None, ["Just one paragraph of prose here.", "And another one."])


def test_book_with_no_prose_left_is_empty() -> None:
    assert clean_book(b"CHAPTER I\n\n* * *\n\nTHE END\n", "headings.txt").reason == "empty"


# --------------------------------------------------------------------------- real Gutenberg books

REAL_BOOKS = [
    "A-Tale-of-Two-Cities_98",
    "Adventures-of-Huckleberry-Finn_76",
    "Alice-s-Adventures-in-Wonderland_11",
    "Dracula_345",
    "Frankenstein_84",
    "Moby-Dick--Or-The-Whale_2701",
    "Pride-and-Prejudice_1342",
    "The-Adventures-of-Sherlock-Holmes_1661",
]
LATIN1_BOOKS = {"Dracula_345", "The-Adventures-of-Sherlock-Holmes_1661"}
SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)_]*$")
TOC_ENTRY = re.compile(r"^(CHAPTER|Chapter|LETTER|Letter|BOOK|Book)\s+[IVXLC\d]+\b|\s\d{1,3}$")


@functools.cache
def _real(path: Path) -> tuple[CleanBook, str]:
    """The cleaned book and its decoded text with all whitespace collapsed."""
    data = path.read_bytes()
    return clean_book(data, path.name), " ".join(decode_book(data)[0].split())


def _key(text: str) -> str:
    return re.sub(r"\W+", "", text.lower())


@pytest.mark.parametrize("stem", REAL_BOOKS)
def test_real_book_encoding_and_title(stem: str) -> None:
    book, _ = _real(require(GUTENBERG / f"{stem}.txt"))
    assert book.encoding == ("latin-1" if stem in LATIN1_BOOKS else "utf-8-sig")
    assert book.title is not None and _key(book.title).startswith(_key(stem.split("_")[0]))


@pytest.mark.parametrize("stem", REAL_BOOKS)
def test_real_book_has_no_licence_or_markup(stem: str) -> None:
    book, _ = _real(require(GUTENBERG / f"{stem}.txt"))
    assert len(book.paragraphs) > 500
    for paragraph in book.paragraphs:
        assert "project gutenberg" not in paragraph.lower()
        assert "*** START" not in paragraph and "*** END" not in paragraph
        assert paragraph == " ".join(paragraph.split())  # one line, no \r or \n
        assert not is_heading(paragraph) and not is_boilerplate(paragraph)


@pytest.mark.parametrize("stem", REAL_BOOKS)
def test_real_book_starts_and_ends_with_the_novel(stem: str) -> None:
    book, flat = _real(require(GUTENBERG / f"{stem}.txt"))
    first, last = book.paragraphs[0], book.paragraphs[-1]
    assert not re.search(r"licen[cs]e|ebook|produced by|gutenberg", first, re.IGNORECASE)
    assert any(len(p.split()) >= 20 and SENTENCE_END.search(p) for p in book.paragraphs[:3])
    start = re.search(r"\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG", flat)
    end = re.search(r"End of (the )?Project Gutenberg", flat, re.IGNORECASE)
    assert start and end
    assert start.end() < flat.index(first[:80]) and flat.rindex(last[:80]) < end.start()
    contents = re.search(r"\bCONTENTS\b", flat[start.end() :])
    if contents:  # the novel starts after its contents list
        assert start.end() + contents.end() < flat.index(first[:80])


@pytest.mark.parametrize("stem", REAL_BOOKS)
def test_real_book_contents_and_headings_are_removed(stem: str) -> None:
    book, _ = _real(require(GUTENBERG / f"{stem}.txt"))
    short = [p for p in book.paragraphs if len(p.split()) <= 12]
    assert not [p for p in short if TOC_ENTRY.search(p)]


def test_dracula_and_alice_contents() -> None:
    dracula, _ = _real(require(GUTENBERG / "Dracula_345.txt"))
    alice, _ = _real(require(GUTENBERG / "Alice-s-Adventures-in-Wonderland_11.txt"))
    # Dracula lists 27 chapters, each a "CHAPTER n" block and a "title ... page" block: the novel
    # starts after them, with the journal's first entry.
    assert dracula.paragraphs[1].startswith("_3 May. Bistritz._")
    # This edition of Alice has no contents list: nothing is taken for one.
    assert alice.paragraphs[0].startswith("Alice was beginning to get very tired of sitting by her sister")


def test_botchan_without_blank_lines() -> None:
    book = clean_book(require(BOTCHAN).read_bytes(), BOTCHAN.name)
    assert book.title is not None and "botchan" in book.title.lower()
    assert book.encoding == "utf-8-sig"
    # The file has no blank lines: paragraphs are recovered from the line lengths.
    assert len(book.paragraphs) > 300 and max(map(len, book.paragraphs)) < 10_000
    assert not any("gutenberg" in p.lower() or "produced by" in p.lower() for p in book.paragraphs)
    assert SENTENCE_END.search(book.paragraphs[0]) and len(book.paragraphs[0].split()) >= 20


def test_a_utf8_book_with_a_few_bad_bytes_is_decoded_with_replacement() -> None:
    good = ("\ufeffCafé society met every evening. " * 200).encode("utf-8")
    damaged = good[:3000] + b"\xff" + good[3000:]  # one stray byte in 6,000 characters
    text, encoding, replaced = decode_book(damaged)
    assert encoding == "utf-8-sig" and replaced == 1 and text.count("\ufffd") == 1
    assert text.replace("\ufffd", "") == good.decode("utf-8-sig")
    no_bom = decode_book(damaged[3:])
    assert no_bom.encoding == "utf-8" and no_bom.replaced == 1  # not mis-read as cp1252
    book = clean_book(damaged, "damaged.txt")
    assert book.replaced_characters == 1


def test_a_book_beyond_the_replacement_share_is_rejected() -> None:
    good = ("\ufeffCafé society met every evening. " * 20).encode("utf-8")
    damaged = b"\xef\xbb\xbf" + b"\xff".join(good[3:][i : i + 100] for i in range(0, len(good) - 3, 100))
    rejection = decode_book(damaged, "bad.txt")
    assert rejection.reason == "undecodable" and "beyond the tolerated share" in rejection.detail
