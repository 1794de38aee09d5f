"""BERT-exact WordPiece tokenisation from the ``tokenizers`` library's components: BERT's
normaliser (uncased: lower-case, strip accents), pre-tokeniser and WordPiece (a word over
:data:`MAX_INPUT_CHARS_PER_WORD` characters is ``[UNK]``), giving the ids of transformers'
``BertTokenizerFast``, literal special tokens included (``docs/wordpiece.md``).
"""

from __future__ import annotations

import functools
import hashlib
import re
import warnings
from collections.abc import Iterable, Sequence

from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

from schemas import storage
from schemas.commands import InputError
from schemas.inputs import field, loads

SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""Tokens every vocabulary must contain (each exactly once)."""


def num_reserved(num_unused: int) -> int:
    """Ids a vocabulary holds besides its word pieces: :data:`SPECIAL_TOKENS` and ``num_unused`` [unusedN]."""
    return len(SPECIAL_TOKENS) + num_unused


def reserve_problem(vocab_size: int, num_unused: int) -> str | None:
    """Why ``vocab_size`` leaves no room for word pieces after the :func:`num_reserved` ids, or None."""
    reserved = num_reserved(num_unused)
    if vocab_size > reserved:
        return None
    return (
        f"--vocab-size {vocab_size} leaves no room for word pieces after {len(SPECIAL_TOKENS)} special "
        f"tokens and {num_unused} [unused] slots: give at least {reserved + 1}"
    )


MAX_INPUT_CHARS_PER_WORD = 100
"""Longer words become one ``[UNK]``, as in ``tokenizers`` and transformers (google-research/bert: 200)."""
UNK_WARN_SHARE = 0.01
"""A share of ``[UNK]`` tokens above this is warned of (the shards' ``stats.json`` ``unk_rate``, a
fine-tuning run's first texts): the casing or the vocabulary does not fit the text."""


def unknown_share_warning(share: float | None, cased: bool) -> str | None:
    """The warning for shards whose tokens are over :data:`UNK_WARN_SHARE` ``[UNK]``; None if not."""
    if share is None or share <= UNK_WARN_SHARE:
        return None
    return (
        f"{100 * share:.1f}% of the tokens are [UNK] (stats.json unk_rate) in these {'cased' if cased else 'uncased'} "
        "shards: the casing does not fit the vocabulary? (pipelines examples --cased/--uncased)"
    )


MAX_TEXT_CHARS = 1_000_000
"""The longest text one tokenizer call takes (the Rust library aborts when an allocation fails)."""

MAX_VOCAB_BYTES = 256 << 20
"""The largest vocab.txt or tokenizer.json read."""

_WHITESPACE = re.compile(r"\s")


def validate_vocab(tokens: Sequence[str], source: str) -> None:
    """Raise :class:`InputError` unless ``tokens`` (in id order) is a usable BERT vocabulary: no empty,
    whitespace or repeated token, all of :data:`SPECIAL_TOKENS`."""
    seen: dict[str, int] = {}
    for index, token in enumerate(tokens):
        line = index + 1
        if not token:
            raise InputError(
                f"{source}: line {line} (id {index}) is empty: a vocabulary has one token per line "
                "and no blank lines; remove it (the ids of the following tokens shift by one)"
            )
        if _WHITESPACE.search(token):
            raise InputError(
                f"{source}: line {line} (id {index}) token {token!r} contains whitespace, which "
                "BERT never leaves inside a word; fix or remove that line"
            )
        first = seen.get(token)
        if first is not None:
            raise InputError(
                f"{source}: duplicate token {token!r} on lines {first} and {line} (ids {first - 1} "
                f"and {index}): each token must appear once; remove one of them"
            )
        seen[token] = line
    missing = [token for token in SPECIAL_TOKENS if token not in seen]
    if missing:
        raise InputError(
            f"{source}: missing special token{'s' if len(missing) > 1 else ''} {', '.join(missing)}: "
            f"a BERT vocabulary needs all of {' '.join(SPECIAL_TOKENS)}, each on its own line "
            "(the released ones have [PAD] on line 1)"
        )


def _read_text(path: str) -> str:
    """A vocabulary file's text, at most ``MAX_VOCAB_BYTES``, strict UTF-8 without a byte-order mark."""
    try:
        storage.check_file(path)
        data = storage.read_bytes(path, MAX_VOCAB_BYTES)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file: check the path (local or a bucket URL)") from None
    except (OSError, ValueError, ImportError) as err:
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise InputError(f"{path}: cannot read ({detail}): check the path and access rights") from None
    return _decode_utf8(data, path)


def _decode_utf8(data: bytes, path: str) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        raise InputError(
            f"{path}: starts with a UTF-8 byte-order mark, which would become part of the first "
            "token: re-save the file as UTF-8 without BOM"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise InputError(
            f"{path}: not UTF-8: invalid byte 0x{data[err.start]:02x} at byte offset {err.start} "
            f"(line {line}): re-save the vocabulary as UTF-8"
        ) from None


def read_vocab_file(path: str) -> list[str]:
    """The validated tokens of a ``vocab.txt`` (line ``N`` is id ``N - 1``), local or a bucket URL."""
    return _tokens(_read_text(path), path)


def parse_vocab_txt(data: bytes, source: str) -> list[str]:
    """The validated tokens of a ``vocab.txt`` already read: strict UTF-8 without BOM, only the
    line ending (``\\n`` or ``\\r\\n``) stripped from each line, one final newline optional."""
    return _tokens(_decode_utf8(data, source), source)


def _tokens(text: str, source: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # The final newline ends the last line; it does not start an empty one.
    tokens = [line[:-1] if line.endswith("\r") else line for line in lines]
    validate_vocab(tokens, source)
    return tokens


def vocab_txt_bytes(tokens: Sequence[str]) -> bytes:
    """A vocabulary as ``vocab.txt`` bytes: one token per line in id order, UTF-8, a final newline."""
    return ("\n".join(tokens) + "\n").encode("utf-8")


def vocab_sha256(tokens: Sequence[str]) -> str:
    """SHA-256 of the tokens in id order joined by newlines: a vocabulary's identity, whatever its file."""
    return hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()


def replacement_ids(tokens: Sequence[str], whole_vocab: bool = False) -> list[int]:
    """Ids a masked-LM "random token" may take: every id, or the real tokens only (no specials, unused)."""
    if whole_vocab:
        return list(range(len(tokens)))
    special = frozenset(SPECIAL_TOKENS)
    return [i for i, t in enumerate(tokens) if t not in special and not t.startswith("[unused")]


def _vocab_and_casing(path: str) -> tuple[list[str], bool | None]:
    """The validated vocabulary of a ``vocab.txt`` or ``tokenizer.json``, and the casing the JSON records."""
    if not path.lower().endswith(".json"):
        return read_vocab_file(path), None
    return _json_vocab(loads(_read_text(path), path), path)


def _upper_case_token(tokens: Iterable[str]) -> str | None:
    """A token (other than bracketed control tokens) with a letter that lower-casing changes: the
    vocabulary is cased; None: uncased. (``!= lower()``, not ``isupper()``: letters such as
    U+211D are upper-case without a lower-case form and occur in uncased vocabularies.)"""
    for token in tokens:
        reserved = token.startswith("[") and token.endswith("]") and len(token) > 2
        if token != token.lower() and not reserved:
            return token
    return None


def _components(cased: bool) -> tuple[normalizers.Normalizer, pre_tokenizers.PreTokenizer]:
    """BERT's normaliser and pre-tokeniser for a casing, as ``BertTokenizerFast``'s: the one definition."""
    normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=not cased, lowercase=not cased
    )
    return normalizer, pre_tokenizers.BertPreTokenizer()


@functools.lru_cache(maxsize=2)
def _cached_components(cased: bool) -> tuple[normalizers.Normalizer, pre_tokenizers.PreTokenizer]:
    return _components(cased)


def pre_tokenize(text: str, cased: bool) -> list[str]:
    """The words of ``text`` that WordPiece sees (and the vocabulary trainer counts)."""
    normalizer, pre_tokenizer = _cached_components(cased)
    return [word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))]


def _build(vocab: Sequence[str], cased: bool) -> Tokenizer:
    ids = {token: index for index, token in enumerate(vocab)}
    tokenizer = Tokenizer(
        WordPiece(
            ids,
            unk_token="[UNK]",
            continuing_subword_prefix="##",
            max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
        )
    )
    # Fresh components, so that changing one tokenizer's settings changes no other's.
    tokenizer.normalizer, tokenizer.pre_tokenizer = _components(cased)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    # As in transformers: special tokens written in the text are matched before normalisation.
    tokenizer.add_special_tokens(
        [AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS]
    )
    return tokenizer


_BERT_WORDPIECE = {
    "unk_token": "[UNK]",
    "continuing_subword_prefix": "##",
    "max_input_chars_per_word": MAX_INPUT_CHARS_PER_WORD,
}


def _json_vocab(obj: object, path: str) -> tuple[list[str], bool | None]:
    """The vocabulary and casing (None: no normaliser) of a tokenizer.json that tokenises as BERT does."""
    model = field(obj, "model", dict, path, None)
    kind = model.get("type") if model is not None else None
    if kind != "WordPiece":
        raise InputError(
            f"{path}: its model is {kind!r}, not 'WordPiece': give a BERT tokenizer.json or vocab.txt"
        )
    for key, value in _BERT_WORDPIECE.items():
        if key in model and model[key] != value:
            raise InputError(
                f"{path}: WordPiece {key} is {model[key]!r}, but BERT tokenisation here uses {value!r}: "
                "give a tokenizer.json with BERT's settings, or its vocab.txt"
            )
    mapping = model.get("vocab")
    if not isinstance(mapping, dict) or not all(type(i) is int for i in mapping.values()):
        raise InputError(f"{path}: model.vocab is not a token -> id object: the file is damaged")
    by_id = sorted(mapping, key=mapping.__getitem__)
    if [mapping[token] for token in by_id] != list(range(len(by_id))):
        raise InputError(
            f"{path}: model.vocab ids are not exactly 0..{len(by_id) - 1}, one token each: the file is damaged"
        )
    validate_vocab(by_id, f"{path} (model.vocab)")
    pre_tokenizer = field(obj, "pre_tokenizer", dict, path, None)
    if pre_tokenizer is not None and pre_tokenizer.get("type") != "BertPreTokenizer":
        raise InputError(
            f"{path}: its pre_tokenizer is {pre_tokenizer.get('type')!r}, not BERT's 'BertPreTokenizer': "
            "give a BERT tokenizer.json or its vocab.txt"
        )
    normalizer = field(obj, "normalizer", dict, path, None)
    if normalizer is None:
        return by_id, None
    lowercase = normalizer.get("lowercase")
    if (
        normalizer.get("type") != "BertNormalizer"
        or normalizer.get("clean_text") is not True
        or normalizer.get("handle_chinese_chars") is not True
        or not isinstance(lowercase, bool)
        or normalizer.get("strip_accents") not in (None, lowercase)
    ):
        raise InputError(
            f"{path}: its normalizer is not BERT's (BertNormalizer with clean_text, handle_chinese_chars, "
            "and accents stripped exactly when lower-casing): give a BERT tokenizer.json or its vocab.txt"
        )
    return by_id, not lowercase


def check_lengths(texts: Iterable[str]) -> None:
    """Refuse a text over :data:`MAX_TEXT_CHARS` before the Rust library sees it (every call on user text)."""
    for text in texts:
        if len(text) > MAX_TEXT_CHARS:
            raise InputError(
                f"a text of {len(text):,} characters is longer than the {MAX_TEXT_CHARS:,} one tokenizer "
                "call takes: split it into lines or paragraphs"
            )


class WordPieceTokenizer:
    """BERT tokenisation with one vocabulary: ``cased``, ``vocab`` (tokens in id order) and ``tokenizer``
    (its ``save`` file gives the same ids in transformers' ``BertTokenizerFast``)."""

    def __init__(self, vocab: Sequence[str], cased: bool, source: str = "vocabulary") -> None:
        """Validate ``vocab`` (tokens in id order; ``source`` names it in errors) and build."""
        validate_vocab(vocab, source)
        self.cased: bool = cased
        self.vocab: list[str] = list(vocab)
        self.tokenizer: Tokenizer = _build(self.vocab, cased)

    @classmethod
    def load(cls, path: str, cased: bool | None = None) -> WordPieceTokenizer:
        """Load a ``vocab.txt`` or ``tokenizer.json``, local or a URL; ``cased=None`` takes a tokenizer.json's
        casing, or infers it from the vocabulary and warns."""
        vocab, recorded = _vocab_and_casing(path)
        name = {True: "cased", False: "uncased"}
        if cased is None and recorded is None:
            example = _upper_case_token(vocab)
            cased = example is not None
            why = (
                f"it has tokens with upper-case letters, e.g. {example!r}"
                if cased
                else "no token has an upper-case letter"
            )
            warnings.warn(
                f"{path}: casing not given; inferred {name[cased]} because {why}. "
                "Set it with cased=True/False (wordpiece encode --cased/--uncased).",
                stacklevel=2,
            )
        elif cased is None:
            cased = recorded
        elif recorded is not None and cased != recorded:
            message = f"{path}: its normalizer is {name[recorded]}, but {name[cased]} was asked for; tokenising {name[cased]}."
            warnings.warn(message, stacklevel=2)
        loaded = cls.__new__(cls)  # the vocabulary is validated already: not twice
        loaded.cased, loaded.vocab, loaded.tokenizer = cased, vocab, _build(vocab, cased)
        return loaded

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``, without ``[CLS]``/``[SEP]``."""
        check_lengths([text])
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` for many texts at once (in Rust, in parallel)."""
        check_lengths(texts)
        return [e.ids for e in self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)]

    def tokens(self, text: str) -> list[str]:
        """The WordPiece strings of ``text`` (``##`` marks a continuation)."""
        return [self.vocab[i] for i in self.encode(text)]

    def tokens_batch(self, texts: Sequence[str]) -> list[list[str]]:
        """:meth:`tokens` for many texts at once."""
        return [[self.vocab[i] for i in ids] for ids in self.encode_batch(texts)]

    def token_to_id(self, token: str) -> int | None:
        """The id of a vocabulary token, or None when it is not in the vocabulary."""
        return self.tokenizer.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        """The number of tokens in the vocabulary."""
        return len(self.vocab)

    @property
    def vocab_sha256(self) -> str:
        """:func:`vocab_sha256` of this vocabulary."""
        return vocab_sha256(self.vocab)

    def special_ids(self) -> dict[str, int]:
        """Each of :data:`SPECIAL_TOKENS` with its id, e.g. ``{"[PAD]": 0, "[UNK]": 100, ...}``."""
        return {token: self.tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
