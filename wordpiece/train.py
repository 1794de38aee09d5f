"""``wordpiece train``: learn a BERT-layout WordPiece vocabulary from a corpus, at any size: the
``tokenizers`` trainer learns from the word counts of ``pipelines/wordcount.py``, never the text (each distinct
word fed as whitespace-joined repeats to a trainer that splits on whitespace only).
"""

from __future__ import annotations

import hashlib
import heapq
import resource
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from schemas import (
    COMPLETED_FILE,
    MANIFEST_FILE,
    STATS_FILE,
    WORD_COUNTS,
    Manifest,
    ShardEntry,
    absolute_reference,
    completed_marker,
    storage,
)
from schemas.commands import InputError
from wordpiece.tokenizer import WordPieceTokenizer, num_reserved, reserve_problem, vocab_txt_bytes

FEED_REPEATS = 4_096
RELEASED_NUM_UNUSED = 994
"""The released BERT vocabularies hold [unused0] … [unused993]."""
UNUSED_BEFORE_UNK = 99
"""In the released layout, [unused0..98] sit between [PAD] and [UNK]; the rest follow [MASK]."""
SPLITS = ("train", "validation", "test")
OUTPUT_FILES = (MANIFEST_FILE, STATS_FILE, "vocab.txt", "tokenizer.json")
LEARN, MEASURE = "learn", "measure"
COUNTS_FOLDER = "word_counts"
"""Where the counting job (``pipelines/wordcount.py``) leaves the counts: ``GROUP-*.arrow`` per group."""
MAX_VOCAB_SIZE = 2**32
MAX_COUNT = 2**63 - 1
"""A word count (int64 in ``word_counts``), and so the highest ``--min-frequency``."""
MAX_COUNT_SHARDS = 1_000_000
MAX_WORDS = 4_000_000
"""Distinct words learned from by default (the most frequent): the trainer holds about 1 KB each."""


@dataclass(frozen=True)
class VocabConfig:
    """Options of ``wordpiece train``, validated on creation (``ValueError`` lists every problem)."""

    corpus: str
    output: str
    vocab_size: int = 30_522
    cased: bool = False
    min_frequency: int = 2
    limit_alphabet: int = 1_000
    num_unused: int = RELEASED_NUM_UNUSED
    splits: tuple[str, ...] = ("train",)
    measure_split: str = "validation"
    num_count_shards: int = 8
    max_words: int = MAX_WORDS
    overwrite: bool = False
    params_version: int = field(default=1)

    def problems(self) -> list[str]:
        """Every problem with the options, as sentences naming the flag."""
        problems = []
        if not self.corpus:
            problems.append("--corpus is required (a completed `pipelines corpus` output)")
        if not self.output:
            problems.append("--output is required")
        if problem := reserve_problem(self.vocab_size, self.num_unused):
            problems.append(problem)
        if self.vocab_size > MAX_VOCAB_SIZE:
            problems.append(
                f"--vocab-size must be at most {MAX_VOCAB_SIZE:,} (ids are uint32), got {self.vocab_size}"
            )
        if not 1 <= self.min_frequency <= MAX_COUNT:
            problems.append(f"--min-frequency must be between 1 and {MAX_COUNT:,}, got {self.min_frequency}")
        if self.limit_alphabet < 1:
            problems.append(f"--limit-alphabet must be at least 1, got {self.limit_alphabet}")
        if self.num_unused < 0:
            problems.append(f"--num-unused must be 0 or more, got {self.num_unused}")
        unknown = [s for s in (*self.splits, self.measure_split) if s not in SPLITS]
        if unknown or not self.splits:
            problems.append(f"--split takes {', '.join(SPLITS)}; got {', '.join(unknown) or 'none'}")
        if self.max_words < 1:
            problems.append(f"--max-words must be at least 1, got {self.max_words}")
        if not 1 <= self.num_count_shards <= MAX_COUNT_SHARDS:
            problems.append(
                f"--num-count-shards must be between 1 and {MAX_COUNT_SHARDS:,}, got {self.num_count_shards}"
            )
        return problems

    def __post_init__(self) -> None:
        if problems := self.problems():
            raise ValueError("invalid settings: " + "; ".join(problems))

    def params(self) -> dict[str, Any]:
        """Parameters recorded in the manifest."""
        data = asdict(self)
        for key in ("output", "overwrite"):
            data.pop(key)
        data["corpus"] = absolute_reference(self.corpus)
        data["splits"] = list(self.splits)
        return data


def vocab_layout(pieces: Iterable[str], num_unused: int) -> list[str]:
    """The released BERT layout: [PAD], [unused0..98], [UNK], [CLS], [SEP], [MASK], the rest, the pieces."""
    unused = [f"[unused{i}]" for i in range(num_unused)]
    head = [
        "[PAD]",
        *unused[:UNUSED_BEFORE_UNK],
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *unused[UNUSED_BEFORE_UNK:],
    ]
    taken = set(head)
    return head + [p for p in pieces if p not in taken]


def read_counts(output: str, group: str) -> Iterator[tuple[str, int]]:
    """All ``(word, count)`` pairs of one group, in word order (a merge of the sorted shards)."""
    paths = storage.glob(storage.join(output, COUNTS_FOLDER, f"{group}-*.arrow"))

    def shard_rows(path: str) -> Iterator[tuple[str, int]]:
        for table in WORD_COUNTS.read_ipc_batches(storage.read_bytes(path), source=path):
            yield from zip(table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True)

    return heapq.merge(*(shard_rows(p) for p in paths))


class Cutoff(NamedTuple):
    """Which counted words are learned from: those counted more than ``least`` times and the first
    ``at_least`` (in word order) counted ``least`` times; and what that leaves out."""

    least: int
    at_least: int
    distinct: int
    learned: int
    occurrences: int
    occurrences_left_out: int

    def kept(self, counts: Iterable[tuple[str, int]]) -> Iterator[tuple[str, int]]:
        """The counts learned from, in their order."""
        at_least = self.at_least
        for word, count in counts:
            if count > self.least or (count == self.least and at_least > 0):
                at_least -= count == self.least
                yield word, count


def cutoff_of(counts: Iterable[tuple[str, int]], max_words: int) -> Cutoff:
    """The :class:`Cutoff` of the ``max_words`` most frequent words (ties: the first in word order),
    from a histogram of the counts: memory for the distinct counts, not the words."""
    histogram: Counter = Counter(count for _, count in counts)
    total, learned, occurrences = sum(c * n for c, n in histogram.items()), 0, 0
    for count in sorted(histogram, reverse=True):
        taken = min(histogram[count], max_words - learned)
        learned, occurrences = learned + taken, occurrences + count * taken
        if taken < histogram[count]:
            return Cutoff(count, taken, histogram.total(), learned, total, total - occurrences)
    return Cutoff(0, 0, learned, learned, total, 0)


@dataclass(frozen=True)
class Alphabet:
    """The characters the vocabulary keeps, chosen deterministically from the counts."""

    kept: tuple[str, ...]
    """At most ``limit_alphabet`` characters: the most frequent, ties broken by code point."""
    continuing: tuple[str, ...]
    """Kept characters that occur inside a word (they get a ``##`` piece), by code point."""
    num_distinct: int


def alphabet_of(counts: Iterable[tuple[str, int]], limit: int) -> Alphabet:
    """Choose the alphabet from word counts (the trainer's own choice breaks ties at random)."""
    frequency: dict[str, int] = {}
    inside: set[str] = set()
    for word, count in counts:
        for position, ch in enumerate(word):
            frequency[ch] = frequency.get(ch, 0) + count
            if position:
                inside.add(ch)
    kept = sorted(sorted(frequency, key=lambda ch: (-frequency[ch], ch))[:limit])
    return Alphabet(tuple(kept), tuple(ch for ch in kept if ch in inside), len(frequency))


def _feed(counts: Iterable[tuple[str, int]]) -> Iterator[str]:
    for word, count in counts:
        while count > 0:
            repeats = min(count, FEED_REPEATS)
            yield " ".join([word] * repeats)
            count -= repeats


def learn_pieces(
    counts: Iterable[tuple[str, int]], alphabet: Alphabet, config: VocabConfig, num_pieces: int
) -> list[str]:
    """WordPiece characters and pieces learned from word counts, deterministically: the trainer
    numbers symbols as it meets them and breaks ties between merges by those numbers, so every symbol
    is declared up front (the kept characters and their ``##`` forms), which fixes every merge."""
    learner = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    learner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordPieceTrainer(
        vocab_size=num_pieces,
        min_frequency=config.min_frequency,
        limit_alphabet=len(alphabet.kept),
        initial_alphabet=list(alphabet.kept),
        special_tokens=[f"##{ch}" for ch in alphabet.continuing],
        continuing_subword_prefix="##",
        show_progress=False,
    )
    learner.train_from_iterator(_feed(counts), trainer=trainer)
    vocab = learner.get_vocab()
    ordered = sorted(vocab, key=vocab.__getitem__)
    # Characters first, then their ## forms, then the learned pieces in merge order.
    continuing = ordered[: len(alphabet.continuing)]
    rest = ordered[len(alphabet.continuing) :]
    chars = [p for p in rest if p in set(alphabet.kept)]
    return chars + continuing + [p for p in rest if p not in set(alphabet.kept)]


def measure(tokenizer: Tokenizer, counts: Iterable[tuple[str, int]]) -> dict[str, Any]:
    """[UNK] rate and pieces per word of a vocabulary over counted words (each word tokenised once)."""
    unk_id = tokenizer.token_to_id("[UNK]")
    words = pieces = unknown_pieces = unknown_words = 0
    for word, count in counts:
        ids = [t.id for t in tokenizer.model.tokenize(word)]
        words += count
        pieces += count * len(ids)
        unknown = ids.count(unk_id)
        unknown_pieces += count * unknown
        unknown_words += count * bool(unknown)
    return {
        "words": words,
        "pieces_per_word": pieces / words if words else None,
        "unk_piece_rate": unknown_pieces / pieces if pieces else None,
        "unk_word_rate": unknown_words / words if words else None,
    }


def learn_vocabulary(config: VocabConfig, corpus_manifest_sha256: str, out: storage.Folder) -> dict[str, Any]:
    """Learn from the counts already in ``config.output``; write vocab.txt, tokenizer.json, stats and
    manifest into ``out``."""
    start = time.perf_counter()
    cutoff = cutoff_of(read_counts(config.output, LEARN), config.max_words)
    alphabet = alphabet_of(cutoff.kept(read_counts(config.output, LEARN)), config.limit_alphabet)
    if not alphabet.kept:
        raise InputError(f"--corpus {config.corpus}: the {'+'.join(config.splits)} split has no words")
    reserved = num_reserved(config.num_unused)
    num_pieces, kept_alphabet = config.vocab_size - reserved, len(alphabet.kept) + len(alphabet.continuing)
    if num_pieces < kept_alphabet:
        raise InputError(
            f"--vocab-size {config.vocab_size} is smaller than the alphabet: {kept_alphabet} characters and "
            f"## forms plus {reserved} special and unused tokens need at least {kept_alphabet + reserved}; "
            "raise --vocab-size or lower --limit-alphabet/--num-unused"
        )
    pieces = learn_pieces(cutoff.kept(read_counts(config.output, LEARN)), alphabet, config, num_pieces)
    vocab = vocab_layout(pieces, config.num_unused)
    tokenizer = WordPieceTokenizer(vocab, config.cased, "learned vocabulary").tokenizer
    train_s = time.perf_counter() - start

    vocab_bytes = vocab_txt_bytes(vocab)
    tokenizer_bytes = tokenizer.to_str(pretty=True).encode("utf-8")
    stats = {
        "vocab_size": len(vocab),
        "num_pieces_learned": len(pieces),
        "cased": config.cased,
        "learned_from": list(config.splits),
        "distinct_words": cutoff.distinct,
        "distinct_words_learned": cutoff.learned,  # at most --max-words, the most frequent
        "word_occurrences_left_out": cutoff.occurrences_left_out,
        "word_occurrences": cutoff.occurrences,
        "alphabet_size": len(alphabet.kept),
        "distinct_characters": alphabet.num_distinct,
        "measured_on": config.measure_split,
        **measure(tokenizer, read_counts(config.output, MEASURE)),
        "learn_s": round(train_s, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    files = {
        "vocab.txt": (vocab_bytes, "vocab", len(vocab)),
        "tokenizer.json": (tokenizer_bytes, "tokenizer", len(vocab)),
    }
    entries = []
    for name, (data, fmt, rows) in files.items():
        out.write(name, data)
        entries.append(ShardEntry(name, fmt, "", rows, len(data), hashlib.sha256(data).hexdigest()))
    params = {**config.params(), "corpus_manifest_sha256": corpus_manifest_sha256}
    manifest = Manifest("wordpiece", 1, "wordpiece train", params, tuple(entries))
    manifest_json = manifest.to_json()
    out.write_json(STATS_FILE, stats)
    out.write(MANIFEST_FILE, manifest_json)
    out.write(COMPLETED_FILE, completed_marker(manifest_json))
    return stats
