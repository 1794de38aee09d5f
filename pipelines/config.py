"""Typed configurations of the corpus stages, the source of every flag's default, checked when made."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from schemas import absolute_reference

MAX_SHARDS = 1_000_000
"""The most files (or buckets) a flag may ask for: each is an element before any data flows."""


def check_count(flag: str, value: int, problems: list[str], most: int = MAX_SHARDS) -> None:
    """Append ``"<flag> must be between 1 and <most>, got <value>"`` unless it is."""
    if not 1 <= value <= most:
        problems.append(f"{flag} must be between 1 and {most:,}, got {value}")


def _check_fractions(validation: float, test: float, problems: list[str]) -> None:
    for flag, value in (("--validation-fraction", validation), ("--test-fraction", test)):
        if not 0.0 <= value < 1.0:
            problems.append(f"{flag} must be in [0, 1), got {value}")
    if validation + test >= 1.0:
        problems.append("--validation-fraction plus --test-fraction must leave some training data")


@dataclass(frozen=True)
class _Stage:
    """What every corpus stage has: inputs, an output, its shards; validated on creation."""

    inputs: tuple[str, ...]
    output: str
    num_shards: int = 16
    overwrite: bool = False

    def problems(self) -> list[str]:
        """Every problem with the options, as sentences naming the flag."""
        problems = [] if self.inputs else ["--input is required (repeatable)"]
        if not self.output:
            problems.append("--output is required")
        check_count("--num-shards", self.num_shards, problems)
        return problems

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("invalid settings: " + "; ".join(problems))

    def params(self) -> dict[str, Any]:
        """The parameters recorded in the manifest (inputs as absolute paths or URLs)."""
        data = asdict(self)
        data.pop("overwrite")
        data.pop("output")
        data["inputs"] = [absolute_reference(path) for path in self.inputs]
        return data


@dataclass(frozen=True)
class SourceConfig(_Stage):
    """Options shared by ``pipelines wikipedia``, ``books`` and ``text``."""

    min_document_words: int = 8
    allow_file_errors: bool = False
    """Mark the output COMPLETED although input files ended early (``--allow-file-errors``)."""

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.min_document_words < 0:
            problems.append(f"--min-document-words must be 0 or more, got {self.min_document_words}")
        return problems


@dataclass(frozen=True)
class WikipediaConfig(SourceConfig):
    """``pipelines wikipedia``: pages-articles dumps to documents."""

    streams_per_range: int = 20

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.streams_per_range < 1:
            problems.append(f"--streams-per-range must be at least 1, got {self.streams_per_range}")
        return problems


@dataclass(frozen=True)
class BooksConfig(SourceConfig):
    """``pipelines books``: plain-text books to documents."""

    min_document_words: int = 100


@dataclass(frozen=True)
class DocumentsConfig(SourceConfig):
    """``pipelines documents``: JSON Lines, Parquet and ``datasets`` Arrow files to documents."""

    text_field: str = "text"
    id_field: str | None = None
    title_field: str | None = None
    group_field: str | None = None
    group_rows: int | None = None
    bytes_per_read: int = 64 << 20

    def fields(self) -> dict[str, str]:
        """The fields read, name -> flag, the text's first."""
        flags = ("--text-field", "--id-field", "--title-field", "--group-field")
        names = (self.text_field, self.id_field, self.title_field, self.group_field)
        return {name: flag for flag, name in zip(flags, names, strict=True) if name is not None}

    def problems(self) -> list[str]:
        problems = super().problems()
        named = [self.text_field, self.id_field, self.title_field, self.group_field]
        if "" in named or len(self.fields()) < sum(name is not None for name in named):
            problems.append(
                "--text-field, --id-field, --title-field and --group-field must name different fields"
            )
        if self.group_field and self.group_rows is not None:
            problems.append("give --group-field or --group-rows, not both")
        if self.group_rows is not None:
            check_count("--group-rows", self.group_rows, problems)
        check_count("--bytes-per-read", self.bytes_per_read, problems, 1 << 40)
        return problems


@dataclass(frozen=True)
class TextConfig(SourceConfig):
    """``pipelines text``: files in the reference generator's format to a corpus output."""

    min_document_words: int = 0
    validation_fraction: float = 0.0
    test_fraction: float = 0.0
    split_seed: str = field(default="corpus-split-v1")

    def problems(self) -> list[str]:
        problems = super().problems()
        _check_fractions(self.validation_fraction, self.test_fraction, problems)
        return problems


@dataclass(frozen=True)
class CorpusConfig(_Stage):
    """``pipelines corpus``: merge, de-duplicate and split document outputs."""

    validation_fraction: float = 0.01
    test_fraction: float = 0.01
    near_duplicate_threshold: float = 0.8
    shingle_words: int = 5
    minhash_bands: int = 20
    minhash_rows: int = 6
    split_seed: str = field(default="corpus-split-v1")

    def problems(self) -> list[str]:
        problems = super().problems()
        _check_fractions(self.validation_fraction, self.test_fraction, problems)
        if not 0.0 < self.near_duplicate_threshold <= 1.0:
            problems.append(
                f"--near-duplicate-threshold must be in (0, 1], got {self.near_duplicate_threshold}"
            )
        if not 1 <= self.shingle_words <= 64:
            problems.append(f"--shingle-words must be between 1 and 64, got {self.shingle_words}")
        if self.minhash_bands < 1 or self.minhash_rows < 1:
            problems.append("--minhash-bands and --minhash-rows must be at least 1")
        return problems

    @property
    def num_permutations(self) -> int:
        """MinHash signature length: bands × rows."""
        return self.minhash_bands * self.minhash_rows
