"""BERT-exact WordPiece tokenisation, built from the ``tokenizers`` library's components.

The pipeline is BERT's (Devlin et al., 2018; google-research/bert ``tokenization.py``):

1. **normalise** (``BertNormalizer``): drop NUL, U+FFFD and control/format characters
   (``clean_text``), map every whitespace character to a space, put spaces around CJK
   ideographs (``handle_chinese_chars``); uncased vocabularies also lower-case and strip
   accents (NFD, then drop combining marks), cased ones do neither;
2. **pre-tokenise** (``BertPreTokenizer``): split on whitespace and around every punctuation
   character (ASCII symbols count as punctuation, as in BERT), giving the *words*;
3. **WordPiece** (greedy longest match first, continuation pieces prefixed ``##``): a word with
   no segmentation, or longer than :data:`MAX_INPUT_CHARS_PER_WORD` characters, becomes one
   ``[UNK]``.

The ids are those of transformers' ``BertTokenizerFast`` for the same vocabulary and casing,
including its treatment of literal special-token strings: ``[CLS]``, ``[SEP]``, ``[MASK]``,
``[PAD]`` and ``[UNK]`` written in the text are matched before normalisation and become their
special ids (google-research/bert splits them into ``[``, ``mask``, ``]``). See
``docs/wordpiece.md`` for the choices and the parity figures.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import warnings
from collections.abc import Iterable, Sequence

import fsspec
from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""Tokens every vocabulary must contain (each exactly once)."""

UNK_TOKEN = "[UNK]"
CONTINUING_SUBWORD_PREFIX = "##"

MAX_INPUT_CHARS_PER_WORD = 100
"""Words longer than this (in Unicode code points, after normalisation) become one ``[UNK]``.

google-research/bert's ``tokenization.py`` uses 200; ``tokenizers`` and transformers use 100.
We take 100 so that ids equal transformers' ``BertTokenizerFast`` exactly. The only difference
from the original: a word of 101-200 characters is ``[UNK]`` here and WordPiece pieces there.
"""

_WHITESPACE = re.compile(r"\s")


class VocabError(ValueError):
    """A vocabulary (vocab.txt or tokenizer.json) that cannot be used.

    ``str()`` is one line naming the file (and line, where there is one) and what to do.
    """


# ---------------------------------------------------------------------------------------------
# Vocabulary files


def validate_vocab(tokens: Sequence[str], source: str) -> None:
    """Raise :class:`VocabError` unless ``tokens`` (in id order) is a usable BERT vocabulary.

    Checks, reporting the first problem found: no empty entries (blank lines), no token
    containing whitespace (it could never be produced: whitespace separates words), no token
    listed twice (naming both line numbers), and every one of :data:`SPECIAL_TOKENS` present
    (naming the missing ones). Line ``N`` is id ``N - 1``. ``source`` names the vocabulary in
    the messages (a path, usually).
    """
    seen: dict[str, int] = {}
    for index, token in enumerate(tokens):
        line = index + 1
        if not token:
            raise VocabError(
                f"{source}: line {line} (id {index}) is empty: a vocabulary has one token per line "
                "and no blank lines; remove it (the ids of the following tokens shift by one)"
            )
        if _WHITESPACE.search(token):
            raise VocabError(
                f"{source}: line {line} (id {index}) token {token!r} contains whitespace, which "
                "BERT never leaves inside a word; fix or remove that line"
            )
        first = seen.get(token)
        if first is not None:
            raise VocabError(
                f"{source}: duplicate token {token!r} on lines {first} and {line} (ids {first - 1} "
                f"and {index}): each token must appear once; remove one of them"
            )
        seen[token] = line
    missing = [token for token in SPECIAL_TOKENS if token not in seen]
    if missing:
        raise VocabError(
            f"{source}: missing special token{'s' if len(missing) > 1 else ''} {', '.join(missing)}: "
            f"a BERT vocabulary needs all of {' '.join(SPECIAL_TOKENS)}, each on its own line "
            "(the released ones have [PAD] on line 1)"
        )


def _read_bytes(path: str) -> bytes:
    try:
        with fsspec.open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise VocabError(f"{path}: no such file: check the path (local or a bucket URL)") from None
    except IsADirectoryError:
        raise VocabError(
            f"{path}: is a folder: name the vocab.txt or tokenizer.json file inside it"
        ) from None
    except (OSError, ValueError, ImportError) as err:
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise VocabError(f"{path}: cannot read ({detail}): check the path and access rights") from None


def _decode_utf8(data: bytes, path: str) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        raise VocabError(
            f"{path}: starts with a UTF-8 byte-order mark, which would become part of the first "
            "token: re-save the file as UTF-8 without BOM"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise VocabError(
            f"{path}: not UTF-8: invalid byte 0x{data[err.start]:02x} at byte offset {err.start} "
            f"(line {line}): re-save the vocabulary as UTF-8"
        ) from None


def read_vocab_file(path: str) -> list[str]:
    """Read and validate a ``vocab.txt`` (one token per line, id = line number - 1).

    ``path`` is local or any fsspec URL (``gs://``, ``s3://``, ``memory://``). The bytes must be
    strict UTF-8 without BOM; only the line ending (``\\n`` or ``\\r\\n``) is stripped from each
    line, and one final newline is optional. Raises :class:`VocabError`.
    """
    return parse_vocab_txt(_read_bytes(path), path)


def parse_vocab_txt(data: bytes, source: str) -> list[str]:
    """The validated tokens of a ``vocab.txt`` already read (``source`` names it in errors); the
    rules of :func:`read_vocab_file`. Raises :class:`VocabError`."""
    text = _decode_utf8(data, source)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # The final newline ends the last line; it does not start an empty one.
    tokens = [line[:-1] if line.endswith("\r") else line for line in lines]
    validate_vocab(tokens, source)
    return tokens


def vocab_txt_bytes(tokens: Sequence[str]) -> bytes:
    """A vocabulary as ``vocab.txt`` bytes: one token per line in id order, UTF-8, a final newline
    (what ``wordpiece train`` writes, and the layout of the released BERT vocabularies)."""
    return ("\n".join(tokens) + "\n").encode("utf-8")


def vocab_sha256(tokens: Sequence[str]) -> str:
    """SHA-256 of the tokens in id order joined by newlines: a vocabulary's identity, the same for a
    ``vocab.txt`` and its ``tokenizer.json`` (what example manifests record as ``params.vocab_sha256``)."""
    return hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()


def replacement_ids(tokens: Sequence[str], whole_vocab: bool = False) -> list[int]:
    """Ids a masked-LM "random token" may take: every id when ``whole_vocab`` (as the reference
    generator), else the real tokens only (no :data:`SPECIAL_TOKENS`, no ``[unusedN]``)."""
    if whole_vocab:
        return list(range(len(tokens)))
    special = frozenset(SPECIAL_TOKENS)
    return [i for i, t in enumerate(tokens) if t not in special and not t.startswith("[unused")]


def _vocab_and_casing(path: str) -> tuple[list[str], bool | None]:
    """The validated vocabulary of a ``vocab.txt`` or ``tokenizer.json`` (by its ``.json``
    suffix), and the casing a tokenizer.json records (None for a vocab.txt)."""
    if not path.lower().endswith(".json"):
        return read_vocab_file(path), None
    text = _decode_utf8(_read_bytes(path), path)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise VocabError(
            f"{path}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno}): "
            "give a tokenizer.json, or a vocab.txt (any name not ending in .json)"
        ) from None
    if not isinstance(obj, dict):
        raise VocabError(f"{path}: not a tokenizer.json (the top level is not an object)")
    return _json_vocab(obj, path)


def load_vocab(path: str) -> list[str]:
    """The validated tokens (in id order) of a ``vocab.txt`` or ``tokenizer.json``, local or a
    URL, without building a tokenizer (for code that needs the ids of tokens, not tokenisation).
    Raises :class:`VocabError`."""
    return _vocab_and_casing(path)[0]


def _is_reserved(token: str) -> bool:
    """Bracketed control tokens ([PAD], [unused7], ...) say nothing about casing."""
    return token.startswith("[") and token.endswith("]") and len(token) > 2


def _upper_case_example(tokens: Iterable[str]) -> str | None:
    for token in tokens:
        # ``!= lower()`` rather than ``isupper()``: letters such as U+211D (double-struck R) are
        # upper-case but have no lower-case form, and occur in uncased vocabularies.
        if token != token.lower() and not _is_reserved(token):
            return token
    return None


def infer_casing(tokens: Iterable[str]) -> bool:
    """True (cased) when some token other than the bracketed control tokens has a letter that
    lower-casing changes; False (uncased) otherwise."""
    return _upper_case_example(tokens) is not None


# ---------------------------------------------------------------------------------------------
# The tokenizer


def _make_components(cased: bool) -> tuple[normalizers.Normalizer, pre_tokenizers.PreTokenizer]:
    """BERT's normaliser and pre-tokeniser for a casing; the one definition of both.

    Uncased: lower-case and strip accents, as transformers' ``BertTokenizerFast`` with
    ``do_lower_case=True`` (its ``strip_accents=None`` follows ``lowercase``) and the original
    ``do_lower_case=True``. Cased: neither.
    """
    normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=not cased, lowercase=not cased
    )
    return normalizer, pre_tokenizers.BertPreTokenizer()


@functools.lru_cache(maxsize=2)
def _cached_components(cased: bool) -> tuple[normalizers.Normalizer, pre_tokenizers.PreTokenizer]:
    return _make_components(cased)


def pre_tokenize(text: str, cased: bool) -> list[str]:
    """The words of ``text`` that WordPiece sees (and the vocabulary trainer counts).

    Exactly the normaliser and pre-tokeniser of :func:`build_tokenizer` for this casing (the same
    definition, built once per casing). Literal special-token strings are not treated specially
    here: ``"[MASK]"`` gives ``["[", "mask", "]"]`` (uncased).
    """
    normalizer, pre_tokenizer = _cached_components(cased)
    return [word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))]


def _build(vocab: Sequence[str], cased: bool) -> Tokenizer:
    ids = {token: index for index, token in enumerate(vocab)}
    tokenizer = Tokenizer(
        WordPiece(
            ids,
            unk_token=UNK_TOKEN,
            continuing_subword_prefix=CONTINUING_SUBWORD_PREFIX,
            max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
        )
    )
    # Fresh component objects (same definition as pre_tokenize's cached ones), so that nobody
    # changing one tokenizer's normaliser settings changes another's.
    tokenizer.normalizer, tokenizer.pre_tokenizer = _make_components(cased)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUING_SUBWORD_PREFIX)
    # As in transformers: the special tokens keep their vocabulary ids and, written literally in
    # the text, are matched before normalisation.
    tokenizer.add_special_tokens(
        [AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS]
    )
    return tokenizer


def build_tokenizer(vocab: Sequence[str], cased: bool) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` that tokenises exactly as BERT does with this vocabulary.

    ``vocab`` lists the tokens in id order (it is validated with :func:`validate_vocab`);
    ``cased=False`` lower-cases and strips accents. ``encode(text)`` adds ``[CLS]``/``[SEP]``
    (pairs: ``[CLS] A [SEP] B [SEP]`` with type id 1 for ``B [SEP]``) unless called with
    ``add_special_tokens=False``. Its ``.save(path)`` file loads with
    ``tokenizers.Tokenizer.from_file`` and transformers' ``BertTokenizerFast(tokenizer_file=...)``
    and ``PreTrainedTokenizerFast(tokenizer_file=...)``, all three giving the same ids.
    """
    validate_vocab(vocab, "vocabulary")
    return _build(vocab, cased)


def _json_vocab(obj: dict, path: str) -> tuple[list[str], bool | None]:
    """The vocabulary (id order) and casing (None: no normaliser) of a tokenizer.json object,
    refusing any setting under which it would not tokenise as BERT does."""
    model = obj.get("model")
    kind = model.get("type") if isinstance(model, dict) else None
    if kind != "WordPiece":
        raise VocabError(
            f"{path}: its model is {kind!r}, not 'WordPiece': give a BERT tokenizer.json or vocab.txt"
        )
    expected = {
        "unk_token": UNK_TOKEN,
        "continuing_subword_prefix": CONTINUING_SUBWORD_PREFIX,
        "max_input_chars_per_word": MAX_INPUT_CHARS_PER_WORD,
    }
    for key, value in expected.items():
        if key in model and model[key] != value:
            raise VocabError(
                f"{path}: WordPiece {key} is {model[key]!r}, but BERT tokenisation here uses {value!r}: "
                "give a tokenizer.json with BERT's settings, or its vocab.txt"
            )
    mapping = model.get("vocab")
    if not isinstance(mapping, dict) or not all(isinstance(i, int) for i in mapping.values()):
        raise VocabError(f"{path}: model.vocab is not a token -> id object: the file is damaged")
    by_id = sorted(mapping, key=mapping.__getitem__)
    if [mapping[token] for token in by_id] != list(range(len(by_id))):
        raise VocabError(
            f"{path}: model.vocab ids are not exactly 0..{len(by_id) - 1}, one token each: the file is damaged"
        )
    validate_vocab(by_id, f"{path} (model.vocab)")

    pre_tokenizer = obj.get("pre_tokenizer")
    if pre_tokenizer is not None and pre_tokenizer.get("type") != "BertPreTokenizer":
        raise VocabError(
            f"{path}: its pre_tokenizer is {pre_tokenizer.get('type')!r}, not BERT's 'BertPreTokenizer': "
            "give a BERT tokenizer.json or its vocab.txt"
        )
    normalizer = obj.get("normalizer")
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
        raise VocabError(
            f"{path}: its normalizer {json.dumps(normalizer, sort_keys=True)} is not BERT's (BertNormalizer "
            "with clean_text, handle_chinese_chars, and accents stripped exactly when lower-casing): "
            "give a BERT tokenizer.json or its vocab.txt"
        )
    return by_id, not lowercase


class WordPieceTokenizer:
    """BERT tokenisation with one vocabulary: ids (no ``[CLS]``/``[SEP]``) or WordPiece strings.

    Attributes: ``cased`` (False: lower-case and strip accents), ``vocab`` (tokens in id order)
    and ``tokenizer`` (the underlying ``tokenizers.Tokenizer``, from :func:`build_tokenizer`,
    which adds ``[CLS]``/``[SEP]`` when asked to).
    """

    def __init__(self, vocab: Sequence[str], cased: bool, source: str = "vocabulary") -> None:
        """Validate ``vocab`` (tokens in id order; ``source`` names it in errors) and build."""
        validate_vocab(vocab, source)
        self.cased: bool = cased
        self.vocab: list[str] = list(vocab)
        self.tokenizer: Tokenizer = _build(self.vocab, cased)

    @classmethod
    def load(cls, path: str, cased: bool | None = None) -> WordPieceTokenizer:
        """Load a ``vocab.txt`` or a ``tokenizer.json`` (by its ``.json`` suffix), local or a URL.

        ``cased=None`` takes the casing from a tokenizer.json's normaliser, or else infers it from
        the vocabulary (:func:`infer_casing`) and warns which was inferred. A tokenizer.json's
        vocabulary is read from its WordPiece model and validated as a vocab.txt is; the
        tokenizer is rebuilt with :func:`build_tokenizer`, so settings other than BERT's are
        refused rather than silently dropped. Raises :class:`VocabError`.
        """
        vocab, recorded = _vocab_and_casing(path)
        if cased is None and recorded is not None:
            cased = recorded
        elif cased is None:
            example = _upper_case_example(vocab)
            cased = example is not None
            reason = (
                f"it has tokens with upper-case letters, e.g. {example!r}"
                if cased
                else "no token has an upper-case letter"
            )
            warnings.warn(
                f"{path}: casing not given; inferred {'cased' if cased else 'uncased'} because {reason}. "
                "Set it with cased=True/False (wordpiece encode --cased/--uncased).",
                UserWarning,
                stacklevel=2,
            )
        elif recorded is not None and cased != recorded:
            warnings.warn(
                f"{path}: its normalizer is {'cased' if recorded else 'uncased'}, but "
                f"{'cased' if cased else 'uncased'} was asked for; tokenising {'cased' if cased else 'uncased'}.",
                UserWarning,
                stacklevel=2,
            )
        loaded = cls.__new__(cls)  # the vocabulary is validated already: not twice
        loaded.cased, loaded.vocab, loaded.tokenizer = cased, vocab, _build(vocab, cased)
        return loaded

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``, without ``[CLS]``/``[SEP]``."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` for many texts at once (in Rust, in parallel unless
        ``TOKENIZERS_PARALLELISM=false`` or ``RAYON_NUM_THREADS=1``)."""
        return [e.ids for e in self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)]

    def tokens(self, text: str) -> list[str]:
        """The WordPiece strings of ``text`` (``##`` marks a continuation), without ``[CLS]``/``[SEP]``."""
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    def tokens_batch(self, texts: Sequence[str]) -> list[list[str]]:
        """:meth:`tokens` for many texts at once."""
        vocab = self.vocab
        return [[vocab[i] for i in ids] for ids in self.encode_batch(texts)]

    def token_to_id(self, token: str) -> int | None:
        """The id of a vocabulary token, or None when it is not in the vocabulary."""
        return self.tokenizer.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        """The number of tokens in the vocabulary."""
        return len(self.vocab)

    @property
    def vocab_sha256(self) -> str:
        """:func:`vocab_sha256` of this vocabulary: the identity that example manifests record
        (``params.vocab_sha256``), equal for a vocab.txt and its tokenizer.json."""
        return vocab_sha256(self.vocab)

    def replacement_ids(self, whole_vocab: bool = False) -> list[int]:
        """:func:`replacement_ids` of this vocabulary."""
        return replacement_ids(self.vocab, whole_vocab)

    def special_ids(self) -> dict[str, int]:
        """Each of :data:`SPECIAL_TOKENS` with its id, e.g. ``{"[PAD]": 0, "[UNK]": 100, ...}``."""
        return {token: self.tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}

    def __repr__(self) -> str:
        return f"WordPieceTokenizer(vocab_size={self.vocab_size}, cased={self.cased})"
