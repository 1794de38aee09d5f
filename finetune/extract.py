"""``finetune features``: per-token hidden states of a pre-trained encoder, written as Arrow (the
equivalent of google-research/bert's ``extract_features.py``). Each line of a text file is tokenised
(``[CLS] pieces [SEP]``) and the states of the layers asked for (``--layers -1,-2``: negative from the
end, 0 the embeddings) are written one row per (line, token, layer) in the ``features`` format, with
manifest.json, stats.json and, last, COMPLETED. A line too long for one window is read in windows
``stride`` pieces apart, each piece from the window where it has the most context; ``word_index``
maps each piece to its whitespace-separated word. docs/finetune.md
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from finetune.config import runtime_problems
from finetune.encoder import Encoder, load_encoder
from finetune.hidden import hidden_states, parse_layers, stack_layers
from finetune.inputs import open_input
from finetune.sequences import doc_windows, max_context_windows
from pretrain.runtime import autocast, resolve_device, resolve_precision
from schemas import (
    COMPLETED_FILE,
    MANIFEST_FILE,
    STATS_FILE,
    Manifest,
    ShardEntry,
    completed_marker,
    inputs,
    storage,
)
from schemas.commands import InputError, UsageError
from schemas.features import FEATURES_NAME, features_format
from schemas.formats import RecordFormat
from schemas.manifest import bytes_match, load_completed
from schemas.outputs import OutputFolder

logger = logging.getLogger(__name__)

PRODUCER = "finetune features"
SHARD_PATTERN = "features-{:05d}.arrow"
LINES_PER_CHUNK = 256  # lines tokenised and encoded together
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class ExtractSettings:
    """The settings of one extraction; validated on creation (every problem at once)."""

    layers: str = "-1,-2,-3,-4"
    max_seq_length: int = 128
    batch_size: int = 32
    stride: int | None = None  # None: half a window
    precision: str = "fp32"
    device: str = "auto"
    max_shard_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        problems = []
        if self.max_seq_length < 3:
            problems.append(
                f"--max-seq-length must be at least 3 ([CLS], a piece, [SEP]), got {self.max_seq_length}"
            )
        if self.batch_size < 1:
            problems.append(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.stride is not None and not 1 <= self.stride <= max(self.max_seq_length - 2, 1):
            problems.append(f"--stride must be between 1 and --max-seq-length - 2, got {self.stride}")
        problems += runtime_problems(self.precision, self.device)
        if self.max_shard_bytes < 1:
            problems.append(f"max_shard_bytes must be positive, got {self.max_shard_bytes}")
        if problems:
            raise UsageError("; ".join(problems))

    @property
    def window(self) -> int:  # pieces per window: max_seq_length less [CLS] and [SEP]
        return self.max_seq_length - 2

    @property
    def step(self) -> int:  # pieces between the starts of two windows of one long line
        return self.stride or max(self.window // 2, 1)


@dataclass
class LinePlan:
    """One line tokenised: its pieces (ids, strings, word of each) and its windows ``(start, length)``."""

    line: int
    ids: list[int]
    tokens: list[str]
    word_index: list[int]
    windows: list[tuple[int, int]]


def word_indices(text: str, offsets: Sequence[tuple[int, int]]) -> list[int]:
    """For each piece (its character offsets in ``text``), the index of the whitespace-separated
    word of ``text`` it lies in."""
    starts = [m.start() for m in _WORD.finditer(text)]
    return [max(bisect.bisect_right(starts, start) - 1, 0) for start, _ in offsets]


def plan_lines(
    encoder: Encoder, lines: Sequence[str], first_line: int, settings: ExtractSettings
) -> list[LinePlan]:
    """Tokenise ``lines`` (numbered from ``first_line``) and cut each into windows."""
    encodings = encoder.tokenizer.tokenizer.encode_batch(list(lines), add_special_tokens=False)
    plans = []
    for number, (text, encoding) in enumerate(zip(lines, encodings, strict=True), first_line):
        windows = doc_windows(len(encoding.ids), settings.window, settings.step)
        words = word_indices(text, encoding.offsets)
        plans.append(LinePlan(number, list(encoding.ids), list(encoding.tokens), words, windows))
    return plans


def _encode_windows(
    encoder: Encoder, plans: Sequence[LinePlan], layers: Sequence[int], settings: ExtractSettings, device
) -> list[list[np.ndarray]]:
    """Each line's windows through the encoder: per line, per window, ``[len + 2, layers, hidden]``."""
    special = encoder.tokenizer.special_ids()
    inputs = [
        (i, w, [special["[CLS]"], *plan.ids[start : start + length], special["[SEP]"]])
        for i, plan in enumerate(plans)
        for w, (start, length) in enumerate(plan.windows)
    ]
    inputs.sort(key=lambda item: len(item[2]))
    out: list[list[Any]] = [[None] * len(plan.windows) for plan in plans]
    precision = resolve_precision(settings.precision, device)
    for first in range(0, len(inputs), settings.batch_size):
        chunk = inputs[first : first + settings.batch_size]
        length = max(len(ids) for *_, ids in chunk)
        ids = torch.tensor([row + [0] * (length - len(row)) for *_, row in chunk], device=device)
        mask = torch.tensor([[1] * len(row) + [0] * (length - len(row)) for *_, row in chunk], device=device)
        with torch.no_grad(), autocast(device, precision):
            states = stack_layers(hidden_states(encoder.model, ids, torch.zeros_like(ids), mask), layers)
        states = states.float().cpu().numpy()
        for row, (i, w, window_ids) in enumerate(chunk):
            out[i][w] = states[row, : len(window_ids)]
    return out


def line_vectors(plan: LinePlan, window_states: Sequence[np.ndarray]) -> np.ndarray:
    """The line's ``[num_pieces + 2, layers, hidden]`` vectors: ``[CLS]`` from the first window,
    ``[SEP]`` from the last, each piece from the window where it has the most context."""
    if len(window_states) == 1:
        return window_states[0]
    first = window_states[0]
    out = np.empty((len(plan.ids) + 2, *first.shape[1:]), dtype=np.float32)
    out[0], out[-1] = first[0], window_states[-1][-1]
    for position, w in enumerate(max_context_windows(plan.windows)):
        out[1 + position] = window_states[w][1 + position - plan.windows[w][0]]
    return out


def rows_table(
    fmt: RecordFormat, plans: Sequence[LinePlan], vectors: Sequence[np.ndarray], layers_given: Sequence[int]
) -> pa.Table:
    """The ``features`` rows of some lines: token-major, layer-minor, built column by column."""
    k = len(layers_given)
    tokens, words, lines, positions = [], [], [], []
    for plan in plans:
        n = len(plan.ids) + 2
        tokens.extend(["[CLS]", *plan.tokens, "[SEP]"])
        words.extend([-1, *plan.word_index, -1])
        lines.append(np.full(n, plan.line, dtype=np.int64))
        positions.append(np.arange(n, dtype=np.int32))
    flat = np.concatenate([v.reshape(-1) for v in vectors]).astype(np.float32, copy=False)
    hidden = vectors[0].shape[-1]
    columns = {
        "line": np.repeat(np.concatenate(lines), k),
        "token": pa.array(tokens, pa.string()).take(np.repeat(np.arange(len(tokens)), k)),
        "token_index": np.repeat(np.concatenate(positions), k),
        "word_index": np.repeat(np.array(words, dtype=np.int32), k),
        "layer": np.tile(np.array(layers_given, dtype=np.int16), len(tokens)),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), hidden),
    }
    return pa.table(columns, schema=fmt.schema)


def _read_lines(url: str, digest: Any) -> Iterator[tuple[int, list[str]]]:
    """The input's lines in chunks ``(first_line, lines)``, its bytes fed to ``digest`` (a
    ``hashlib`` object) on the way; errors name the file and line."""
    with open_input(url) as f:
        chunk: list[str] = []
        first = 0
        for number, raw in enumerate(inputs.lines(f, url)):
            digest.update(raw)
            if number == 0:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark is not text
            try:
                chunk.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as err:
                raise InputError(f"--input {url}:{number + 1}: not UTF-8 text ({err.reason})") from None
            if len(chunk) == LINES_PER_CHUNK:
                yield first, chunk
                first, chunk = first + len(chunk), []
        if chunk:
            yield first, chunk


class _ShardWriter:
    """Accumulates tables and writes a shard once ``max_bytes`` of rows are buffered."""

    def __init__(self, out: storage.Folder, fmt: RecordFormat, max_bytes: int) -> None:
        self.out, self.fmt, self.max_bytes = out, fmt, max_bytes
        self.pending: list[pa.Table] = []
        self.entries: list[ShardEntry] = []

    def add(self, table: pa.Table) -> None:
        self.pending.append(table)
        if sum(t.nbytes for t in self.pending) >= self.max_bytes:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        name = SHARD_PATTERN.format(len(self.entries))
        table = pa.concat_tables(self.pending)
        data = self.fmt.to_ipc_bytes(table, self.out.path(name))
        self.out.write(name, data)
        digest = hashlib.sha256(data).hexdigest()
        self.entries.append(ShardEntry(name, FEATURES_NAME, "all", len(table), len(data), digest))
        self.pending = []


def extract_features(
    checkpoint: str, input_file: str, output: str, settings: ExtractSettings, *, cased=None, overwrite=False
) -> dict[str, Any]:
    """Write the hidden states of ``settings.layers`` for every token of every line of ``input_file``
    into ``output`` (claimed first: refused when it holds files, unless an earlier run's and
    ``overwrite``); return the stats. ``checkpoint``: any of :func:`finetune.encoder.load_encoder`'s."""
    with OutputFolder.open(output, PRODUCER, overwrite=overwrite) as folder:
        if not storage.exists(input_file):
            raise InputError(f"--input {input_file} not found")
        encoder = load_encoder(checkpoint, cased=cased)
        config = encoder.model.config
        if settings.max_seq_length > encoder.max_positions:
            raise InputError(
                f"--max-seq-length {settings.max_seq_length} exceeds the model's max_position_embeddings "
                f"({encoder.max_positions})"
            )
        try:
            layers = parse_layers(settings.layers, config.num_hidden_layers)
        except ValueError as err:
            raise InputError(str(err)) from None
        folder.begin()
        writer = _ShardWriter(folder, features_format(config.hidden_size), settings.max_shard_bytes)
        digest = hashlib.sha256()
        try:
            stats = _extract(encoder, input_file, layers, settings, writer, digest)
        except BaseException:  # the shards written so far are of no use without a manifest
            storage.remove(folder.path(entry.path) for entry in writer.entries)
            raise
        params = {
            "checkpoint": encoder.source,
            "input": input_file,
            "input_sha256": digest.hexdigest(),
            "layers": [int(part) for part in settings.layers.split(",") if part.strip()],
            "layers_absolute": list(layers),
            "hidden_size": config.hidden_size,
            "num_hidden_layers": config.num_hidden_layers,
            "cased": encoder.cased,
            "vocab_sha256": encoder.tokenizer.vocab_sha256,
            **{k: v for k, v in asdict(settings).items() if k not in ("layers", "device")},
            "stride": settings.step,
        }
        manifest = Manifest(
            FEATURES_NAME, writer.fmt.version, PRODUCER, params, tuple(writer.entries)
        ).to_json()
        folder.write_json(STATS_FILE, stats, sort_keys=True)
        folder.write(MANIFEST_FILE, manifest)
        folder.write(COMPLETED_FILE, completed_marker(manifest))
    return stats


def _extract(
    encoder: Encoder,
    input_file: str,
    layers: Sequence[int],
    settings: ExtractSettings,
    writer: _ShardWriter,
    digest: Any,
) -> dict[str, Any]:
    """Every line of ``input_file`` through the encoder into ``writer``'s shards; the counts."""
    device = resolve_device(settings.device)
    encoder.model.to(device).eval()
    given = [int(part) for part in settings.layers.split(",") if part.strip()]
    keys = "num_lines num_empty_lines num_pieces num_windows num_split_lines max_pieces_in_a_line"
    stats: dict[str, Any] = dict.fromkeys(keys.split(), 0)
    start = time.perf_counter()
    for first, lines in _read_lines(input_file, digest):
        plans = plan_lines(encoder, lines, first, settings)
        states = _encode_windows(encoder, plans, layers, settings, device)
        vectors = [line_vectors(plan, s) for plan, s in zip(plans, states, strict=True)]
        writer.add(rows_table(writer.fmt, plans, vectors, given))
        for plan in plans:
            stats["num_lines"] += 1
            stats["num_empty_lines"] += not plan.ids
            stats["num_pieces"] += len(plan.ids)
            stats["num_windows"] += len(plan.windows)
            stats["num_split_lines"] += len(plan.windows) > 1
            stats["max_pieces_in_a_line"] = max(stats["max_pieces_in_a_line"], len(plan.ids))
    writer.flush()
    if not stats["num_lines"]:
        raise InputError(f"--input {input_file} has no lines: nothing to extract")
    stats["extract_s"] = round(time.perf_counter() - start, 3)
    stats["pieces_per_s"] = round(stats["num_pieces"] / max(stats["extract_s"], 1e-9), 1)
    stats["num_rows"] = sum(e.num_rows for e in writer.entries)
    counts = [stats[k] for k in ("num_lines", "num_pieces", "num_rows", "extract_s")]
    logger.info("features: %d lines, %d pieces, %d rows in %.1f s", *counts)
    return stats


def read_manifest(output: str) -> Manifest:
    """The manifest of a completed ``finetune features`` output (``COMPLETED`` checked against it)."""
    if not storage.exists(storage.join(output, MANIFEST_FILE)):
        raise InputError(f"{output}: no {MANIFEST_FILE}; not a finetune features output")
    return load_completed(output, FEATURES_NAME)


def iter_features(output: str) -> Iterator[pa.Table]:
    """The rows of a completed ``finetune features`` output one shard at a time (bounded memory),
    each shard checked against the manifest's size and SHA-256 and the ``features`` schema."""
    manifest = read_manifest(output)
    fmt = features_format(int(manifest.params["hidden_size"]))
    for entry in manifest.shards:
        data = storage.read_bytes(storage.join(output, entry.path))
        if not bytes_match(data, entry):
            raise InputError(f"{output}/{entry.path}: does not match {MANIFEST_FILE} (size or SHA-256)")
        yield fmt.read_ipc(data, f"{output}/{entry.path}")


def read_features(output: str) -> tuple[Manifest, pa.Table]:
    """A completed ``finetune features`` output whole: its manifest and every row
    (:func:`iter_features`). ``vectors(table)`` gives the vectors as one NumPy array."""
    manifest = read_manifest(output)
    tables = list(iter_features(output))
    fmt = features_format(int(manifest.params["hidden_size"]))
    return manifest, pa.concat_tables(tables) if tables else fmt.schema.empty_table()


def vectors(table: pa.Table) -> np.ndarray:
    """The ``vector`` column of ``features`` rows as a float32 array ``[rows, hidden]`` (no copy
    per row)."""
    column = table.column("vector").combine_chunks()
    return column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), column.type.list_size)
