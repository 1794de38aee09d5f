"""wordpiece.tokenizer and ``wordpiece encode``: vocabulary checks, casing, BERT-exact ids.

Hand-made hard cases are compared with transformers' ``BertTokenizerFast`` on the released
BERT-Base uncased vocabulary (../shared/data; skipped with the reason where absent).
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import fsspec
import pytest
from click.testing import CliRunner
from tokenizers import Tokenizer

from schemas.commands import InputError
from tests.conftest import SHARED_DATA, require
from wordpiece.cli import main
from wordpiece.tokenizer import (
    MAX_INPUT_CHARS_PER_WORD,
    SPECIAL_TOKENS,
    WordPieceTokenizer,
    pre_tokenize,
    read_vocab_file,
    validate_vocab,
)

RELEASED_VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"


def _built(vocab, cased):
    return WordPieceTokenizer(vocab, cased).tokenizer


TINY = [*SPECIAL_TOKENS, "hello", "world", "##s", "the", "a", "##b", "b", "c", "##c", "d", "##d", ",", "."]


def write_vocab(path: Path, tokens: list[str]) -> str:
    path.write_text("".join(f"{token}\n" for token in tokens), encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------------------------------------
# Vocabulary validation


@pytest.mark.parametrize("missing", SPECIAL_TOKENS)
def test_each_missing_special_token_is_named(missing):
    tokens = [t for t in TINY if t != missing]
    with pytest.raises(InputError) as caught:
        validate_vocab(tokens, "v.txt")
    message = str(caught.value)
    assert message.startswith("v.txt: missing special token ")
    assert missing in message.split(":")[1]
    assert "\n" not in message


def test_all_missing_special_tokens_are_named_together():
    with pytest.raises(
        InputError, match=r"missing special tokens \[PAD\], \[UNK\], \[CLS\], \[SEP\], \[MASK\]"
    ):
        validate_vocab(["hello"], "v.txt")


def test_duplicate_names_token_and_both_lines():
    tokens = [*TINY, "world"]
    with pytest.raises(InputError) as caught:
        validate_vocab(tokens, "v.txt")
    assert str(caught.value).startswith(
        f"v.txt: duplicate token 'world' on lines {TINY.index('world') + 1} and {len(tokens)} "
    )


@pytest.mark.parametrize("bad", ["two words", "tab\there", "nbsp\u00a0x", "ideo\u3000space", "cr\r"])
def test_token_with_whitespace(bad):
    with pytest.raises(
        InputError, match=rf"v.txt: line {len(TINY) + 1} \(id {len(TINY)}\) token .* whitespace"
    ):
        validate_vocab([*TINY, bad], "v.txt")


def test_empty_line_in_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}: line 3 \(id 2\) is empty"):
        read_vocab_file(str(path))


def test_non_utf8_file_names_byte_offset(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\n[UNK]\ncaf\xe9\n[CLS]\n[SEP]\n[MASK]\n")
    with pytest.raises(InputError) as caught:
        read_vocab_file(str(path))
    assert str(caught.value) == (
        f"{path}: not UTF-8: invalid byte 0xe9 at byte offset 15 (line 3): re-save the vocabulary as UTF-8"
    )


def test_bom_is_refused(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(TINY).encode())
    with pytest.raises(InputError, match="byte-order mark"):
        read_vocab_file(str(path))


def test_reader_strips_only_line_endings(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes("\r\n".join(TINY).encode())  # CRLF, and no final newline
    assert read_vocab_file(str(path)) == TINY
    path.write_bytes(("\n".join(TINY) + "\n\n").encode())  # a trailing blank line is an empty entry
    with pytest.raises(InputError, match=f"line {len(TINY) + 1} .* is empty"):
        read_vocab_file(str(path))


def test_missing_path_and_folder(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_vocab_file(str(tmp_path / "nope.txt"))
    with pytest.raises(InputError, match="is a folder"):
        WordPieceTokenizer.load(str(tmp_path), cased=False)


def test_reads_fsspec_urls():
    with fsspec.open("memory://wordpiece-test/vocab.txt", "wb") as handle:
        handle.write("\n".join(TINY).encode())
    tokenizer = WordPieceTokenizer.load("memory://wordpiece-test/vocab.txt", cased=False)
    assert tokenizer.encode("Hello, worlds.") == [5, 16, 6, 7, 17]


def test_build_tokenizer_validates():
    with pytest.raises(InputError, match="missing special token"):
        _built(["hello"], cased=False)


# ---------------------------------------------------------------------------------------------
# Casing


@pytest.mark.parametrize(
    ("extra", "cased"),
    [
        ([], False),  # [PAD] and friends do not count
        (["The"], True),
        (["##É"], True),
        (["\u211d"], False),  # upper-case letter without a lower-case form
        (["[UNUSED1]"], False),
    ],
)
def test_casing_is_inferred_from_the_tokens(tmp_path, extra, cased):
    with pytest.warns(UserWarning, match="inferred"):
        assert WordPieceTokenizer.load(write_vocab(tmp_path / "v.txt", [*TINY, *extra])).cased is cased


def test_load_warns_which_casing_was_inferred(tmp_path):
    uncased = write_vocab(tmp_path / "uncased.txt", TINY)
    with pytest.warns(
        UserWarning, match=r"inferred uncased because no token has an upper-case letter.*cased=True/False"
    ):
        assert WordPieceTokenizer.load(uncased).cased is False
    cased = write_vocab(tmp_path / "cased.txt", [*TINY, "Hello"])
    with pytest.warns(
        UserWarning, match=r"inferred cased because it has tokens with upper-case letters, e.g. 'Hello'"
    ):
        assert WordPieceTokenizer.load(cased).cased is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert WordPieceTokenizer.load(cased, cased=False).cased is False


def test_casing_behaviour():
    assert pre_tokenize("Héllo, Wörld!", cased=False) == ["hello", ",", "world", "!"]
    assert pre_tokenize("Héllo, Wörld!", cased=True) == ["Héllo", ",", "Wörld", "!"]


# ---------------------------------------------------------------------------------------------
# tokenizer.json


def test_saved_tokenizer_json_loads_back_with_casing_from_normalizer(tmp_path):
    for cased in (False, True):
        path = tmp_path / f"tokenizer-{cased}.json"
        _built([*TINY, "Hello"], cased).save(str(path))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loaded = WordPieceTokenizer.load(str(path))
        assert loaded.cased is cased
        assert loaded.vocab == [*TINY, "Hello"]
        assert loaded.encode("Hello") == ([len(TINY)] if cased else [5])
        with pytest.warns(UserWarning, match="was asked for"):
            assert WordPieceTokenizer.load(str(path), cased=not cased).cased is (not cased)


def _tokenizer_json(tmp_path: Path, edit) -> str:
    obj = json.loads(_built(TINY, cased=False).to_str())
    edit(obj)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(obj), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda o: o["model"].update(type="BPE"), "model is 'BPE', not 'WordPiece'"),
        (lambda o: o["model"].update(max_input_chars_per_word=200), "max_input_chars_per_word is 200"),
        (lambda o: o["model"]["vocab"].update({"extra": 99}), "ids are not exactly 0..18"),
        (lambda o: o["model"]["vocab"].pop("[MASK]"), r"ids are not exactly|missing special token \[MASK\]"),
        (lambda o: o.update(normalizer={"type": "Lowercase"}), "normalizer is not BERT's"),
        (lambda o: o["normalizer"].update(strip_accents=False), "normalizer is not BERT's"),
        (lambda o: o.update(pre_tokenizer={"type": "Whitespace"}), "pre_tokenizer is 'Whitespace'"),
    ],
)
def test_tokenizer_json_that_is_not_bert_is_refused(tmp_path, edit, message):
    path = _tokenizer_json(tmp_path, edit)
    with pytest.raises(InputError, match=message):
        WordPieceTokenizer.load(path, cased=False)


def test_tokenizer_json_duplicate_is_reported_by_id(tmp_path):
    def duplicate(obj):
        vocab = obj["model"]["vocab"]
        vocab["hello"] = vocab.pop("world")  # 'world's id now belongs to no token

    with pytest.raises(InputError, match="ids are not exactly"):
        WordPieceTokenizer.load(_tokenizer_json(tmp_path, duplicate), cased=False)


def test_invalid_json(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match=r"not valid JSON .* line 1, column 2"):
        WordPieceTokenizer.load(str(path))


# ---------------------------------------------------------------------------------------------
# Tokenisation: the tiny vocabulary


def test_tiny_vocab_encode_and_specials():
    tokenizer = WordPieceTokenizer(TINY, cased=False)
    assert tokenizer.tokens("Hello worlds, ab bcc ddd zzz.") == [
        "hello",
        "world",
        "##s",
        ",",
        "a",
        "##b",
        "b",
        "##c",
        "##c",
        "d",
        "##d",
        "##d",
        "[UNK]",
        ".",
    ]
    assert tokenizer.special_ids() == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    assert tokenizer.vocab_size == len(TINY)
    assert tokenizer.token_to_id("world") == 6 and tokenizer.token_to_id("nope") is None
    assert tokenizer.encode_batch(["hello", "", "world"]) == [[5], [], [6]]
    assert tokenizer.tokens_batch(["hello worlds"]) == [["hello", "world", "##s"]]
    pair = tokenizer.tokenizer.encode("hello", "world")
    assert pair.ids == [2, 5, 3, 6, 3] and pair.type_ids == [0, 0, 0, 1, 1]
    assert tokenizer.tokenizer.decode(tokenizer.encode("hello worlds")) == "hello worlds"


def test_pre_tokenize_is_what_wordpiece_sees():
    tokenizer = WordPieceTokenizer(TINY, cased=False)
    model = tokenizer.tokenizer.model
    for text in ["Hello, worlds!", "  a\u200bb \u4e2d\u6587 ...", "na\u00efve\tcaf\u00e9\u3000x"]:
        pieces = [token.value for word in pre_tokenize(text, False) for token in model.tokenize(word)]
        assert pieces == tokenizer.tokens(text)


# ---------------------------------------------------------------------------------------------
# Tokenisation: hard cases against transformers on the released vocabulary

HARD_CASES = [
    "Hello, world! This is BERT.",
    "中文字符测试 and 日本語のテキスト、한국어 텍스트",
    "Café naïve résumé Ångström Straße Ærøskøbing Ελληνικά ΣΊΣΥΦΟΣ İstanbul",
    "control\x00chars\x07here\x1b[0m and\ttabs\r\nand\x0bvertical\x0cfeed\x85nel",
    "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom\u00adsoft\u2060word\u2028line\u2029para",
    "",
    "   \t  \u3000\u00a0 ",
    "I \u2764\ufe0f emoji \U0001f917\U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1fa\U0001f1f8 \u263a",
    "Москва Athens Αθήνα القاهرة मुंबई ตัวอย่าง Tiếng Việt עברית",
    "wait...!!! ?!?! --- (((x))) «quoted» „low“ — – … ¿Qué? ¡Olé! $%&*@#^~`|\\/<>{}[]",
    "3.14159 1,000,000 2024-01-01 1st 42nd ½ ² ① ٣٤٥ 10^9 0x1F",
    "[CLS] literal [SEP] tokens [MASK] and [mask] [UNK][PAD]x",
    "\u0301combining first, e\u0301 decomposed, ﬁ ligature, ＦＵＬＬ width",
    "e-mail@example.com https://en.wikipedia.org/wiki/BERT_(language_model)?a=b&c=d",
    "\ufffd replacement \ufffdchar",
    "a" * 99,
    "a" * 100,
    "a" * 101,
    "a" * 250,
    "x" * 101 + " fits " + "é" * 100,
]


@pytest.fixture(scope="module")
def released_vocab() -> str:
    return str(require(RELEASED_VOCAB))


def reference(vocab_path: str, cased: bool):
    """transformers' BertTokenizerFast for a vocab.txt, checked to really hold that vocabulary.

    (In transformers 5.x, ``BertTokenizerFast(vocab_file=...)`` ignores the file and keeps a
    five-token vocabulary, mapping every word to [UNK]; ``vocab=`` takes the token -> id dict.)
    """
    transformers = pytest.importorskip("transformers")
    from transformers.models.bert.tokenization_bert import load_vocab

    peer = transformers.BertTokenizerFast(vocab=load_vocab(vocab_path), do_lower_case=not cased)
    assert peer("hello", add_special_tokens=False)["input_ids"] == [7592]
    assert peer.vocab_size == 30522
    return peer


@pytest.mark.parametrize("cased", [False, True], ids=["uncased", "cased"])
def test_hard_cases_match_transformers(released_vocab, cased):
    ours = WordPieceTokenizer.load(released_vocab, cased=cased)
    peer = reference(released_vocab, cased)
    expected = peer(HARD_CASES, add_special_tokens=False)["input_ids"]
    for text, want in zip(HARD_CASES, expected, strict=True):
        assert ours.encode(text) == want, text
    assert ours.encode_batch(HARD_CASES) == expected
    with_specials = peer(HARD_CASES[:3])["input_ids"]
    assert [ours.tokenizer.encode(text).ids for text in HARD_CASES[:3]] == with_specials


def test_hard_cases_behaviour(released_vocab):
    uncased = WordPieceTokenizer.load(released_vocab, cased=False)
    cased = WordPieceTokenizer.load(released_vocab, cased=True)
    unk = uncased.special_ids()["[UNK]"]
    assert uncased.tokens("Café naïve") == ["cafe", "naive"]  # uncased strips accents
    assert pre_tokenize("Café naïve", cased=True) == ["Café", "naïve"]  # cased keeps them
    assert cased.encode("Café") == [unk]  # (the released vocabulary has no 'Café')
    assert uncased.tokens("中文") == ["中", "文"]  # CJK ideographs are words of their own
    assert pre_tokenize("a\x00b\u200bc\ufffdd", cased=False) == ["abcd"]  # removed, not word breaks
    assert uncased.encode("") == [] and uncased.encode(" \t\u3000\u00a0\n") == []
    assert len(uncased.tokens("a" * 99)) > 1 and unk not in uncased.encode("a" * 99)
    assert unk not in uncased.encode("a" * MAX_INPUT_CHARS_PER_WORD)
    assert uncased.encode("a" * (MAX_INPUT_CHARS_PER_WORD + 1)) == [unk]
    assert uncased.encode("a" * 250) == [unk]
    assert uncased.tokens("wait...!!") == ["wait", ".", ".", ".", "!", "!"]
    assert uncased.tokens("[MASK] [mask]") == ["[MASK]", "[", "mask", "]"]


def test_saved_file_gives_same_ids_in_tokenizers_and_transformers(released_vocab, tmp_path):
    transformers = pytest.importorskip("transformers")
    vocab = read_vocab_file(released_vocab)
    for cased in (False, True):
        path = str(tmp_path / f"tokenizer-{cased}.json")
        _built(vocab, cased).save(path)
        raw = Tokenizer.from_file(path)
        want = reference(released_vocab, cased)(HARD_CASES)["input_ids"]
        assert [e.ids for e in raw.encode_batch(HARD_CASES)] == want
        for cls in (transformers.BertTokenizerFast, transformers.PreTrainedTokenizerFast):
            loaded = cls(tokenizer_file=path)
            assert loaded(HARD_CASES)["input_ids"] == want, cls.__name__
            pair = loaded("Hello there", "General Kenobi", return_token_type_ids=True)
            assert pair["input_ids"] == raw.encode("Hello there", "General Kenobi").ids
            assert pair["token_type_ids"] == raw.encode("Hello there", "General Kenobi").type_ids


# ---------------------------------------------------------------------------------------------
# wordpiece encode


def run_encode(args: list[str], stdin: bytes, expect: int = 0):
    result = CliRunner().invoke(main, ["encode", *args], input=stdin, catch_exceptions=False)
    assert result.exit_code == expect, f"exit {result.exit_code}\n{result.output}"
    return result


def test_cli_ids_tokens_and_empty_lines(tmp_path):
    vocab = write_vocab(tmp_path / "vocab.txt", TINY)
    stdin = b"Hello worlds.\n\n   \nab\r\nzzz"  # empty, blank, CRLF, no final newline
    ids = run_encode(["--vocab", vocab, "--uncased"], stdin)
    assert ids.stdout == "5 6 7 17\n\n\n9 10\n1\n"
    assert ids.stderr == ""
    tokens = run_encode(["--vocab", vocab, "--uncased", "--tokens", "--batch-size", "2"], stdin)
    assert tokens.stdout == "hello world ##s .\n\n\na ##b\n[UNK]\n"


def test_cli_batches_do_not_change_output(tmp_path):
    vocab = write_vocab(tmp_path / "vocab.txt", TINY)
    stdin = "".join(f"hello {'world ' * (i % 5)}ab\n" if i % 7 else "\n" for i in range(2500)).encode()
    one = run_encode(["--vocab", vocab, "--uncased", "--batch-size", "1"], stdin).stdout
    many = run_encode(["--vocab", vocab, "--uncased"], stdin).stdout
    assert one == many and one.count("\n") == 2500


def test_cli_unicode_line_separators_stay_inside_the_line(tmp_path):
    vocab = write_vocab(tmp_path / "vocab.txt", TINY)
    # U+2028 and U+2029 are spaces to BERT; form feed, vertical tab and NEL are control
    # characters, which it deletes. Only \n ends an input line.
    stdin = "hello\u2028world\x0cd\u2029a\x0b\x85b\n".encode()
    assert run_encode(["--vocab", vocab, "--uncased", "--tokens"], stdin).stdout == "hello world ##d a ##b\n"


def test_cli_invalid_utf8_bytes_vanish(released_vocab):
    stdin = b"caf\xe9 au lait\nab\xffcd \xc3\n"
    result = run_encode(["--vocab", released_vocab, "--uncased", "--tokens"], stdin)
    ours = WordPieceTokenizer.load(released_vocab, cased=False)
    # Each invalid byte decodes to U+FFFD, which BERT's clean_text deletes: no [UNK], and the
    # characters either side join into one word.
    assert result.stdout.splitlines() == [" ".join(ours.tokens("caf au lait")), " ".join(ours.tokens("abcd"))]
    assert "[UNK]" not in result.stdout


def test_cli_warns_inferred_casing_in_one_line(tmp_path):
    vocab = write_vocab(tmp_path / "vocab.txt", TINY)
    result = run_encode(["--vocab", vocab], b"Hello\n")
    assert result.stdout == "5\n"
    assert result.stderr.startswith("warning: ") and "inferred uncased" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n", r"missing special token \[MASK\]"),
        (
            b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n\xff\n",
            r"not UTF-8: invalid byte 0xff at byte offset 31 \(line 6\)",
        ),
    ],
)
def test_cli_bad_vocab_is_one_error_line(tmp_path, content, message):
    path = tmp_path / "vocab.txt"
    if content is not None:
        path.write_bytes(content)
    result = run_encode(["--vocab", str(path), "--uncased"], b"hello\n", expect=1)
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {path}: ") and result.stderr.count("\n") == 1
    assert re.search(message, result.stderr)
    assert "Traceback" not in result.output
