"""``pipelines``: the corpus and example pipelines (Apache Beam).

Each command parses its flags into a typed config (defaults declared there) and calls one stage
(:func:`pipelines.runner.run_stage`). Other options go to Beam (``--runner``, ``--project``,
``--temp_location``, ...) once :class:`pipelines.beam_options.BeamCommand` found them Beam's own.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import click
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import files
from pipelines.beam_options import PASS_ON, BeamCommand
from pipelines.config import (
    BooksConfig,
    CorpusConfig,
    DocumentsConfig,
    SourceConfig,
    TextConfig,
    WikipediaConfig,
)
from pipelines.examples.batches import random_next_warning
from pipelines.examples.pipeline import ExamplesConfig
from pipelines.runner import run_stage, summary_lines
from pipelines.stage import incomplete_reason
from schemas import DOCUMENTS
from schemas.commands import InputError, OneLineGroup, UsageError, warnings_as_lines
from schemas.commands import config_option as option
from schemas.outputs import CLAIM_FILE, RECORD_FILE
from schemas.paths import check_apart
from wordpiece.tokenizer import unknown_share_warning

_HELP = {"help_option_names": ["-h", "--help"], "terminal_width": 100, "max_content_width": 100}
DRY_RUN = "dry run: the job was built and not submitted; nothing was written"


def _command(doc: str):
    """A stage's subcommand: other options go to Beam; ``--help`` ends with its doc page."""
    return main.command(cls=BeamCommand, context_settings={**_HELP, **PASS_ON}, epilog=f"Docs: docs/{doc}.md")


def _config(make, *args, **kwargs):
    try:
        return make(*args, **kwargs)
    except ValueError as err:  # every problem with the settings, found before anything is read
        raise UsageError(str(err)) from None


def _stage(build, config, load_inputs, reads: dict, **kwargs) -> tuple[dict, str] | None:
    """Run the current subcommand's stage (``pipelines <name>``); None for a dry run."""
    ctx = click.get_current_context()
    result = run_stage(build, config, load_inputs, ctx.args, f"pipelines {ctx.info_name}", reads, **kwargs)
    if result is None:
        click.echo(DRY_RUN)
        return None
    if warning := result[2]:
        click.echo(f"warning: {warning}", err=True)
    return result[:2]


def _run_documents(build, config: SourceConfig | CorpusConfig, load_inputs, record_name: str) -> None:
    """A documents stage: run it, print its summary; exit 1 when it may not be marked COMPLETED."""
    result = _stage(build, config, load_inputs, {"--input": config.inputs})
    if result is None:
        return
    stats, holds = result
    for line in summary_lines(stats, record_name):
        click.echo(line)
    allowed = getattr(config, "allow_file_errors", False)
    for reason, count in stats["file_errors"].items() if allowed else ():
        click.echo(
            f"warning: {count} input file(s) ended early ({reason}); see {config.output}/rejects", err=True
        )
    click.echo(holds)
    reason = incomplete_reason(stats, allowed)
    if reason is not None:
        raise InputError(f"--output {config.output}: not marked COMPLETED: {reason}")


def _files(config: SourceConfig, expand: Callable[[tuple[str, ...]], list[str]] = files.expand_inputs):
    """The files ``--input`` names (by ``expand``), none over ``--output`` (patterns checked, then
    the files)."""
    check_apart({"--output": config.output}, {"--input": config.inputs})

    def load() -> list[str]:
        paths = expand(config.inputs)
        check_apart({"--output": config.output}, {"--input": paths})
        _refuse_outputs_files(config.inputs, paths)
        return paths

    return load


def _refuse_outputs_files(patterns: tuple[str, ...], paths: list[str]) -> None:
    """InputError when a pattern matched a file of an output (a folder, at or below the pattern's
    fixed part, that holds an output record or claim): never an output's manifest taken as a book."""
    outputs: dict[str, bool] = {}  # folder: whether it is an output
    for pattern in (p for p in patterns if any(c in p for c in "*?[")):
        base = re.split(r"[*?[]", pattern, maxsplit=1)[0].rpartition("/")[0]
        for path in (p for p in paths if p.startswith(base)):
            folder = path
            while (folder := folder.rpartition("/")[0]) and len(folder) >= len(base):
                if folder not in outputs:
                    outputs[folder] = any(files.exists(f"{folder}/{n}") for n in (RECORD_FILE, CLAIM_FILE))
                if outputs[folder]:
                    raise InputError(
                        f"--input {pattern}: matches {path}, a file of the output at {folder}; an input never "
                        "takes an output's own files: give a pattern that matches only the input files"
                    )


@click.group(cls=OneLineGroup, context_settings=_HELP, epilog="Docs: docs/corpus.md")
@click.version_option(package_name="bert-pretraining", message="%(prog)s %(version)s")
@click.option("-v", "--verbose", is_flag=True, help="Log Beam's progress and full tracebacks.")
def main(verbose: bool) -> None:
    """Corpus pipelines: raw Wikipedia dumps and books into clean, split, de-duplicated documents.

    \b
    pipelines wikipedia --input 'dumps/enwiki-*-pages-articles-multistream*.xml.bz2' --output out/corpus/wiki
    pipelines books --input 'books/*.txt' --output out/corpus/books
    pipelines documents --input 'hub/wikipedia/*.parquet' --output out/corpus/hub --title-field title
    pipelines corpus --input out/corpus/wiki --input out/corpus/books --output out/corpus/all

    Paths may be local or bucket URLs (gs://, s3:// with the aws extra). Beam's own options go to
    Beam: the same command runs on Dataflow with --runner DataflowRunner --project P --region R
    --temp_location gs://b/tmp --setup_file ./setup.py (docs/scale.md); --dry_run checks it.
    """
    logging.basicConfig(
        level=logging.INFO if verbose else logging.ERROR, format="%(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("schemas").setLevel(logging.WARNING)  # a stale claim taken over is said
    # Beam logs a failed step's traceback at ERROR; our one `error:` line carries its message.
    logging.getLogger("apache_beam").setLevel(logging.NOTSET if verbose else logging.CRITICAL)
    files.use_beam_options(
        PipelineOptions([])
    )  # `show`: s3:// from the AWS_* environment; a stage adds its flags


def _source_options(config: type):
    def decorate(func):
        for decorator in reversed(
            [
                click.option(
                    "--input",
                    "inputs",
                    multiple=True,
                    required=True,
                    help="File, glob or bucket URL; repeatable.",
                ),
                click.option("--output", required=True, help="Folder or bucket URL for the documents."),
                option(config, "num_shards", help="Arrow files to write (100-500 MB each at scale)."),
                option(config, "min_document_words", help="Drop documents with fewer words (too_short)."),
                click.option("--overwrite", is_flag=True, help="Replace an earlier run's output."),
                click.option(
                    "--allow-file-errors",
                    is_flag=True,
                    help="Mark COMPLETED although input files had errors (truncated, undecodable, unreadable).",
                ),
            ]
        ):
            func = decorator(func)
        return func

    return decorate


@_command("corpus")
@_source_options(WikipediaConfig)
@option(WikipediaConfig, "streams_per_range", help="Multistream: bz2 streams (100 pages each) per read task.")
def wikipedia(**flags):
    """Clean pages-articles dumps (.xml.bz2, multistream or not, or .xml) into documents.

    Keeps namespace-0 prose articles (no redirects or disambiguation pages), split into
    sentences. A multistream dump with its -index.txt.bz2 beside it is read in parallel.
    """
    from pipelines.wiki.pipeline import build

    config = _config(WikipediaConfig, **flags)
    _run_documents(build, config, _files(config), "pages")


@_command("corpus")
@_source_options(BooksConfig)
def books(**flags):
    """Clean plain-text books (one book per file) into documents, one document per book.

    Detects the encoding, strips Project Gutenberg headers and licence, unwraps hard-wrapped lines
    and drops tables of contents and headings.
    """
    from pipelines.books.pipeline import build

    config = _config(BooksConfig, **flags)
    _run_documents(build, config, _files(config), "books")


@_command("corpus")
@_source_options(DocumentsConfig)
@option(DocumentsConfig, "text_field", help="The field (column) holding each record's text.")
@option(DocumentsConfig, "id_field", help="A field naming each record (an integer one is kept as page_id).")
@option(DocumentsConfig, "title_field", help="A field holding each record's title.")
@option(DocumentsConfig, "group_field", help="Rows are sentences: the field naming each one's document.")
@option(DocumentsConfig, "group_rows", type=click.IntRange(min=1), help="Rows are sentences: N a document.")
@option(DocumentsConfig, "bytes_per_read", help="Plain JSON Lines: bytes per read task.")
def documents(**flags):
    """Read JSON Lines (.jsonl, .json; plain, .gz, .zst, .bz2), Parquet and datasets' save_to_disk
    folders into documents, one a row, cleaned as books are.

    For wikimedia/wikipedia, bookcorpusopen, Dolma-style JSON Lines and the like. Rows that are
    sentences (bookcorpus) need --group-field or --group-rows: next-sentence prediction needs
    document boundaries.
    """
    from pipelines.documents.pipeline import build, check_sample, expand_documents

    config = _config(DocumentsConfig, **flags)
    load = _files(config, lambda inputs: check_sample(expand_documents(inputs), config))
    _run_documents(build, config, load, "records")


@_command("corpus")
@_source_options(TextConfig)
@option(TextConfig, "validation_fraction", help="Documents for validation/.")
@option(TextConfig, "test_fraction", help="Documents for test/.")
def text(**flags):
    """Read files in create_pretraining_data.py's input format into a corpus output.

    One sentence per line, a blank line between documents (UTF-8); the layout of `pipelines
    corpus` (by default all in train). Empty files are rejects; a file that is not UTF-8 fails the
    run, naming the file, byte and line, unless --allow-file-errors.
    """
    from pipelines.plaintext.pipeline import build

    config = _config(TextConfig, **flags)
    _run_documents(build, config, _files(config), "records (documents and rejected files)")


@_command("corpus")
@click.option(
    "--input", "inputs", multiple=True, required=True, help="A completed wikipedia/books output; repeatable."
)
@click.option("--output", required=True, help="Folder or bucket URL for train/, validation/, test/.")
@option(CorpusConfig, "validation_fraction")
@option(CorpusConfig, "test_fraction")
@option(CorpusConfig, "near_duplicate_threshold", help="Estimated Jaccard similarity of word 5-grams.")
@option(CorpusConfig, "num_shards", help="Arrow files per split.")
@click.option("--overwrite", is_flag=True, help="Replace an earlier run's output.")
def corpus(**flags):
    """Merge document outputs, remove exact and near duplicates, and split by document-id hash."""
    from pipelines.corpus.pipeline import build

    config = _config(CorpusConfig, **flags)
    check_apart({"--output": config.output}, {"--input": config.inputs})
    _run_documents(
        build,
        config,
        lambda: [(f, files.load_manifest(f, DOCUMENTS.name)) for f in config.inputs],
        "documents",
    )


@_command("examples")
@click.option("--corpus", required=True, help="A completed `pipelines corpus` output.")
@click.option("--vocab", required=True, help="vocab.txt or tokenizer.json (local or bucket URL).")
@click.option("--output", required=True, help="Folder or bucket URL for the example shards.")
@option(ExamplesConfig, "split", type=click.Choice(files.SPLITS))
@option(ExamplesConfig, "cased", "--cased/--uncased")
@option(ExamplesConfig, "pairs.max_seq_length")
@option(ExamplesConfig, "masking.max_predictions_per_seq")
@option(ExamplesConfig, "masking.masked_lm_prob")
@option(ExamplesConfig, "pairs.short_seq_prob")
@option(ExamplesConfig, "dupe_factor")
@click.option("--whole-word-masking", is_flag=True, help="Mask a word's ## pieces together.")
@option(ExamplesConfig, "masking.mask_share", help="Of predictions, share -> [MASK].")
@option(ExamplesConfig, "masking.keep_share", help="Share kept unchanged.")
@option(ExamplesConfig, "masking.random_share", help="Share -> a random token.")
@click.option(
    "--random-token-from-whole-vocab", is_flag=True, help="Random tokens from all ids, as the reference."
)
@click.option("--no-masking", is_flag=True, help="Unmasked pairs, for trainers that mask dynamically.")
@option(
    ExamplesConfig,
    "format",
    type=click.Choice(["pairs", "packed"]),
    help="packed: no NSP (pretrain --no-nsp).",
)
@option(ExamplesConfig, "num_shards")
@option(ExamplesConfig, "num_buckets", help="Document buckets for random-next lookups (packed: groups).")
@option(ExamplesConfig, "seed")
@option(
    ExamplesConfig, "spill", type=click.Choice(["auto", "always", "never"]), help="Shuffle references only."
)
@option(
    ExamplesConfig,
    "temp_location",
    show_default=False,
    help="Folder or bucket for spilled files [OUTPUT/.temp].",
)
@click.option("--overwrite", is_flag=True, help="Replace an earlier run's output.")
def examples(**flags):
    """Write masked, NSP-paired BERT pre-training examples as sharded Arrow files (or, with
    --format packed, packed full sentences without NSP).

    As the reference generator (create_pretraining_data.py), seeded by (seed, document, dupe pass,
    pair): the shards do not depend on the runner. The vocabulary travels inside the job.
    """
    from pipelines.examples.pipeline import build, spill_folder
    from pipelines.jobs import job_options, runner_name
    from wordpiece.tokenizer import WordPieceTokenizer

    config = _config(_examples_config, flags)
    check_apart(
        {"--output": config.output, "--temp-location": config.temp_location},
        {"--corpus": config.corpus, "--vocab": config.vocab},
    )
    folder = spill_folder(config, runner_name(job_options(click.get_current_context().args)))

    def load() -> tuple[Any, list[str]]:
        with warnings_as_lines():
            vocab = WordPieceTokenizer.load(config.vocab, cased=config.cased).vocab
        return files.load_manifest(config.corpus, DOCUMENTS.name), vocab

    result = _stage(
        lambda pipeline, c, inputs, out: build(pipeline, c, *inputs, folder, out),
        config,
        load,
        {"--corpus": config.corpus},
        writes={"--temp-location": config.temp_location if folder else ()},  # else OUTPUT/.temp
        submitter_reads={"--vocab": config.vocab},
        cleanup=None if folder is None else lambda: files.remove_tree(folder),
        fmt="examples",
    )
    if result is None:
        return
    stats, holds = result
    if not stats["examples"]:
        raise InputError(
            f"--split {config.split} of {config.corpus}: no examples ({stats['documents_used']:,} documents "
            f"with tokens); {config.output} is not marked COMPLETED"
        )
    masked = f"masked {stats['mask_rate']:.3f} of tokens" if stats["masking"] else "not masked"
    if stats["random_next_rate"] is None:
        pairing = f"packed, {stats['document_separators']:,} document separators"
    else:
        pairing = f"random next {stats['random_next_rate']:.3f}"
    click.echo(f"examples: {stats['examples']:,} ({stats['tokens']:,} tokens); {pairing}, {masked}")
    for warning in (random_next_warning(stats), unknown_share_warning(stats["unk_rate"], config.cased)):
        if warning:
            click.echo(f"warning: {warning}", err=True)
    click.echo(holds)


def _examples_config(flags: dict) -> ExamplesConfig:
    """`pipelines examples`' flags as its typed config (``ValueError`` lists every problem)."""
    from pipelines.examples.pairs import PairConfig
    from wordpiece.masking import MaskingConfig

    pairs = {k: flags.pop(k) for k in ("max_seq_length", "short_seq_prob")}
    masking = {
        k: flags.pop(k)
        for k in ("masked_lm_prob", "max_predictions_per_seq", "whole_word_masking")
        + ("mask_share", "keep_share", "random_share")
    }
    apply_masking = not flags.pop("no_masking")
    found: list[str] = []  # every part's problems, each part made with defaults where refused

    def made(make, **settings):
        try:
            return make(**settings)
        except ValueError as err:
            found.append(str(err).removeprefix("invalid settings: "))
            return None if "corpus" in settings else make()

    parts = {"pairs": made(PairConfig, **pairs), "masking": made(MaskingConfig, **masking)}
    config = made(ExamplesConfig, **flags, **parts, apply_masking=apply_masking)
    if found:
        raise ValueError("invalid settings: " + "; ".join(found))
    return config


@main.command(epilog="Docs: docs/corpus.md")
@click.argument("folder")
@click.option(
    "--samples", type=click.IntRange(min=0), default=3, show_default=True, help="Documents to show."
)
def show(folder, samples):
    """Summarise a completed documents output and print the first sentences of a few documents."""
    from pipelines.show import describe
    from schemas.buckets import probe

    probe(reads={"FOLDER": folder})
    for line in describe(folder, num_samples=samples):
        click.echo(line)


if __name__ == "__main__":
    main()
