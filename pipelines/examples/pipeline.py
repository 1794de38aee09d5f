"""``pipelines examples``: corpus documents + a vocabulary → masked, NSP-paired example shards.
Random next sentences meet their documents by bucket (docs/examples.md); with ``--spill`` only
references to temporary files go through the shuffles.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import apache_beam as beam

from pipelines import files
from pipelines.config import check_count
from pipelines.examples.dofns import FulfilBucket, PackGroup, PlanBatch, TokenizeShard
from pipelines.examples.packing import FORMATS
from pipelines.examples.pairs import PairConfig
from pipelines.examples.spill import run_folder
from pipelines.examples.write import WriteExampleShards
from pipelines.jobs import LOCAL_RUNNERS
from pipelines.shuffle import GroupOnDisk
from pipelines.stage import write_completion, write_stats
from pipelines.stats import sum_tallies
from schemas import VOCAB_FILE, Manifest, RecordFormat, ShardEntry, VocabFile, absolute_reference, storage
from schemas.commands import OutputError, seed_problems
from schemas.examples import EXAMPLES_VERSION, examples_format
from schemas.index import INDEX_FILE, ShardIndex, index_reference
from schemas.manifest import COMPLETED_FILE, MANIFEST_FILE, STATS_FILE
from wordpiece.masking import MaskingConfig
from wordpiece.tokenizer import vocab_sha256, vocab_txt_bytes

LENGTH_HISTOGRAM_FILE = "length_histogram.png"
MAX_DUPE_FACTOR = 32_767
"""``dupe_index`` is an int16 column (schemas/examples.py)."""
SPILL_MODES = ("auto", "always", "never")


@dataclass(frozen=True)
class ExamplesConfig:
    """Options of ``pipelines examples``, validated on creation."""

    corpus: str
    vocab: str
    output: str
    split: str = "train"
    cased: bool = False
    dupe_factor: int = 5
    seed: int = 12345
    num_shards: int = 256
    num_buckets: int = 1024
    pairs: PairConfig = PairConfig()
    masking: MaskingConfig = MaskingConfig()
    random_token_from_whole_vocab: bool = False
    apply_masking: bool = True
    """False (``--no-masking``): input_ids are the original tokens and no position is chosen,
    for trainers that mask dynamically."""
    overwrite: bool = False
    format: str = "pairs"
    """``pairs``: NSP pairs (BERT); ``packed``: full sentences packed without NSP (packing.py)."""
    spill: str = "auto"
    """``--spill``: write documents, requests and examples to temporary files and shuffle only
    references to them (``always``), never, or on the local runners only (``auto``)."""
    temp_location: str = ""
    """Where the run's temporary files go (``--temp-location``); empty: ``OUTPUT/.temp``."""

    def __post_init__(self) -> None:
        problems = []
        if self.format not in FORMATS:
            problems.append(f"--format takes {', '.join(FORMATS)}, got {self.format}")
        for name in ("corpus", "vocab", "output"):
            if not getattr(self, name):
                problems.append(f"--{name} is required")
        if self.spill not in SPILL_MODES:
            problems.append(f"--spill takes {', '.join(SPILL_MODES)}, got {self.spill}")
        elif self.spill == "never" and self.temp_location:
            problems.append("--temp-location is where spilled files go; --spill never writes none, drop one")
        if self.split not in files.SPLITS:
            problems.append(f"--split takes {', '.join(files.SPLITS)}, got {self.split}")
        check_count("--dupe-factor", self.dupe_factor, problems, most=MAX_DUPE_FACTOR)
        check_count("--num-shards", self.num_shards, problems)
        check_count("--num-buckets", self.num_buckets, problems)
        problems += seed_problems(self.seed)
        if self.masking.max_predictions_per_seq > self.pairs.max_seq_length:
            problems.append(
                f"--max-predictions-per-seq {self.masking.max_predictions_per_seq} is more than the "
                f"--max-seq-length {self.pairs.max_seq_length} positions there are"
            )
        if problems:
            raise ValueError("invalid settings: " + "; ".join(problems))

    def params(self) -> dict[str, Any]:
        """Generation parameters for the manifest."""
        data = asdict(self)
        for key in ("output", "overwrite", "apply_masking", "spill", "temp_location"):
            data.pop(key)
        # What dynamic masking in ``pretrain`` re-applies unless its flags override it.
        data["masking_settings"] = asdict(self.masking)
        data["corpus"], data["vocab"] = absolute_reference(self.corpus), absolute_reference(self.vocab)
        if not self.apply_masking:
            data["masking"] = False  # these shards carry no masks
        return data


def spill_folder(config: ExamplesConfig, runner: str) -> str | None:
    """The folder for this run's temporary files, or None when the run does not spill."""
    if config.spill == "never" or (config.spill == "auto" and runner not in LOCAL_RUNNERS):
        return None
    if config.temp_location:
        return run_folder(config.temp_location)
    return files.join(config.output, files.TEMP_DIR)


def _stats(tally: Counter, apply_masking: bool, packed: bool = False) -> dict[str, Any]:
    examples = tally["examples"]
    predictions = tally["predictions"]
    histogram = {k.split("/", 1)[1]: v for k, v in tally.items() if k.startswith("hist/")}

    def share(count: int) -> float | None:
        return count / predictions if predictions else None

    return {
        "documents_used": tally["documents_used"],
        "skipped": {
            "documents_without_tokens": tally["documents_without_tokens"],
            "pairs_without_other_document": tally["pairs_without_other_document"],
        },
        "examples": examples,
        "format": "packed" if packed else "pairs",
        # Packed examples have no pairs: no random-next rate, no truncation (long sentences split).
        "random_next_rate": tally["random_next"] / examples if examples and not packed else None,
        # random next sentences drawn from a copy of A's own document's text (duplicates)
        "random_next_same_text_share": (
            tally["random_next_same_text"] / tally["random_next"] if tally["random_next"] else None
        ),
        "masking": apply_masking,
        "mask_rate": predictions / tally["tokens"] if tally["tokens"] else None,
        # Without masking there is no 80/10/10 split to report: null, not made-up numbers.
        "masked_share_mask": share(tally["masked_to_mask"]),
        "masked_share_unchanged": share(tally["masked_unchanged"]),
        "masked_share_random": share(predictions - tally["masked_to_mask"] - tally["masked_unchanged"]),
        "truncation_rate": tally["truncated"] / examples if examples and not packed else None,
        "unk_rate": tally["unk_tokens"] / tally["tokens"] if tally["tokens"] else None,
        "tokens": tally["tokens"],
        "length_histogram": dict(sorted(histogram.items(), key=lambda kv: int(kv[0].split("-")[0]))),
    }


def length_histogram_png(histogram: dict[str, int], max_seq_length: int) -> bytes:
    """The ``length_histogram`` of ``stats.json`` as a bar chart (PNG bytes, the same for the same data)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 3.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    labels = list(histogram)
    axes.bar(range(len(labels)), [histogram[k] for k in labels], color="#4c72b0")
    axes.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
    axes.set_xlabel("tokens per example ([CLS] A [SEP] B [SEP])")
    axes.set_ylabel("examples")
    axes.set_title(f"Example lengths (max_seq_length {max_seq_length})")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


@dataclass(frozen=True)
class CarriedVocabulary:
    """The vocabulary an examples output carries: ``vocab.txt``'s bytes, manifest entry and identity."""

    data: bytes
    file: VocabFile
    sha256: str
    """:func:`wordpiece.tokenizer.vocab_sha256`: the manifest's ``params.vocab_sha256``."""
    size: int

    @classmethod
    def of(cls, tokens: Sequence[str]) -> CarriedVocabulary:
        """The copy of ``tokens`` (in id order), as :data:`schemas.VOCAB_FILE` in the output folder."""
        data = vocab_txt_bytes(tokens)
        return cls(
            data, VocabFile(VOCAB_FILE, len(data), files.sha256_hex(data)), vocab_sha256(tokens), len(tokens)
        )


def _finish_output(
    _,
    config: ExamplesConfig,
    fmt: RecordFormat,
    vocab: CarriedVocabulary,
    folder: str | None,
    entries: list[dict],
    tally: Counter,
) -> dict:
    # Every shard is written (``entries``): the temporary files go before anything is marked done.
    if folder is not None:
        files.remove_tree(folder)
    stats = _stats(tally, config.apply_masking, config.format == "packed")
    if config.format == "packed":
        stats["document_separators"] = tally["document_separators"]
        stats["split_sentences"] = tally["split_sentences"]
    if not stats["examples"]:
        write_stats(config.output, stats)  # Empty is an error: stats.json explains, no COMPLETED.
        return stats
    written = sum(e["num_rows"] for e in entries)
    if written != stats["examples"]:  # a piece lost on its way to the shards: never COMPLETED
        write_stats(config.output, stats)
        raise OutputError(
            f"--output {config.output}: the shards hold {written:,} examples but {stats['examples']:,} "
            "were made (see stats.json); not marked COMPLETED, run again with --overwrite"
        )
    entries = [dict(e) for e in entries]
    index = ShardIndex(fmt.name, fmt.version, fmt.schema, tuple(e.pop("index") for e in entries))
    shards = tuple(ShardEntry(**e) for e in entries)
    params = {
        **config.params(),
        "vocab_sha256": vocab.sha256,
        "corpus_manifest_sha256": files.manifest_sha256(config.corpus),
    }
    png = length_histogram_png(stats["length_histogram"], config.pairs.max_seq_length)
    files.write_bytes(files.join(config.output, LENGTH_HISTOGRAM_FILE), png)
    index_json = index.to_json()
    files.write_bytes(files.join(config.output, INDEX_FILE), index_json.encode("utf-8"))
    files.write_bytes(files.join(config.output, vocab.file.path), vocab.data)
    manifest = Manifest(
        "examples",
        EXAMPLES_VERSION,
        "pipelines examples",
        params,
        shards,
        index=index_reference(index_json),
        vocab_file=vocab.file,
    )
    write_completion(config.output, stats, manifest)
    return stats


def _runs(folder: str | None) -> storage.Folder | None:
    """Where a grouping of this run writes its sorted runs (under the run's folder of temporary files)."""
    return None if folder is None else storage.Folder(folder)


def _pair_pieces(batches, config: ExamplesConfig, fmt: RecordFormat, folder: str | None, tokens: tuple):
    """NSP pairs: plan per batch of documents, random B by bucket; the pieces and the tallies."""
    bucketed = batches | "Bucket" >> beam.FlatMap(lambda batch: [(b, ref) for b, ref, _ in batch])
    bucket_sizes = (
        batches
        | "Bucket counts" >> beam.FlatMap(lambda batch: [(b, n) for b, _, n in batch])
        | "Bucket sizes" >> beam.CombinePerKey(sum)
    )
    planned = batches | "Plan pairs" >> beam.ParDo(
        PlanBatch(config, fmt, folder, tokens), beam.pvalue.AsDict(bucket_sizes)
    ).with_outputs("pieces", "tallies", main="requests")
    tagged = (
        bucketed | "Tag documents" >> beam.MapTuple(lambda b, ref: (b, ["documents", ref])),
        planned.requests | "Tag requests" >> beam.MapTuple(lambda b, ref: (b, ["requests", ref])),
    )
    fulfilled = (
        tagged
        | "Meet by bucket" >> GroupOnDisk(lambda bucket, refs: [(bucket, list(refs))], _runs(folder))
        | "Random B"
        >> beam.ParDo(FulfilBucket(config, fmt, folder, tokens)).with_outputs("pieces", "tallies")
    )
    pieces = (planned.pieces, fulfilled.pieces) | "All pieces" >> beam.Flatten()
    return pieces, (planned.tallies, fulfilled.tallies)


def _packed_pieces(batches, config: ExamplesConfig, fmt: RecordFormat, folder: str | None, tokens: tuple):
    """Packed sentences: a group's documents meet on one worker and are packed there."""
    packed = (
        batches
        | "Group" >> beam.FlatMap(lambda batch: [(b, ref) for b, ref, _ in batch])
        | "Meet by group" >> GroupOnDisk(lambda group, refs: [(group, list(refs))], _runs(folder))
        | "Pack" >> beam.ParDo(PackGroup(config, fmt, folder, tokens)).with_outputs("pieces", "tallies")
    )
    return packed.pieces, (packed.tallies,)


def build(
    pipeline: beam.Pipeline,
    config: ExamplesConfig,
    manifest: Manifest,
    vocab: Sequence[str],
    folder: str | None,
    out: storage.Folder,
):
    """Add the examples stage to ``pipeline``, written into ``out``; temporary files go under ``folder``
    (None: no spilling)."""
    shards = sorted((files.join(config.corpus, s.path), s.sha256) for s in manifest.shards_for(config.split))
    carried = CarriedVocabulary.of(vocab)
    # recorded in the output's journal before workers write them
    names = [LENGTH_HISTOGRAM_FILE, INDEX_FILE, carried.file.path, STATS_FILE, MANIFEST_FILE, COMPLETED_FILE]
    inside = folder is not None and folder.startswith(f"{out.url}/")
    out.journal(*names, *([f"{folder[len(out.url) + 1 :]}/"] if inside else []))
    fmt = examples_format(carried.size)
    tokens = tuple(vocab)  # travels inside the DoFns: no worker opens the vocabulary file
    tokenize = TokenizeShard(tokens, config.cased, config.num_buckets, folder)
    documents = (
        pipeline
        | "Corpus shards" >> beam.Create(shards)
        | "Spread shards" >> beam.Reshuffle()
        | "Tokenise" >> beam.ParDo(tokenize).with_outputs("tallies", main="batches")
    )
    if config.format == "packed":
        pieces, tallies = _packed_pieces(documents.batches, config, fmt, folder, tokens)
    else:
        pieces, tallies = _pair_pieces(documents.batches, config, fmt, folder, tokens)
    entries = pieces | "Write" >> WriteExampleShards(out, "examples", config.num_shards, fmt, folder)
    tally = (
        (documents.tallies, *tallies)
        | "All tallies" >> beam.Flatten()
        | "Sum" >> beam.CombineGlobally(sum_tallies)
    )
    _ = (
        pipeline
        | "Finish output" >> beam.Create([None])
        | "Manifest"
        >> beam.Map(
            _finish_output,
            config,
            fmt,
            carried,
            folder,
            beam.pvalue.AsList(entries),
            beam.pvalue.AsSingleton(tally),
        )
    )
