"""``pipelines``: the corpus and example pipelines (Apache Beam).

Each command parses and validates its flags into a typed config and calls one stage. Any
option the command does not know is handed to Beam unchanged (``--runner``, ``--project``,
``--region``, ``--temp_location``, ``--setup_file``, ``--direct_num_workers``, ...).
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

import click

from pipelines import io
from pipelines.config import BooksConfig, CorpusConfig, TextConfig, WikipediaConfig
from pipelines.runner import StageFailed, run_stage, runner_name, summary_lines
from pipelines.stage import incomplete_reason
from schemas.commands import InputError, OneLineGroup, UsageError
from schemas.paths import check_apart

if TYPE_CHECKING:
    from pipelines.examples.pipeline import ExamplesConfig

_PASS_THROUGH = {
    "ignore_unknown_options": True,
    "allow_extra_args": True,
    "help_option_names": ["-h", "--help"],
}


def _fail(message: str) -> None:
    """The command line is wrong (a flag's value or a combination the settings refuse): one line,
    exit 2, nothing read or written."""
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _fail_run(message: str) -> None:
    """The command ran and failed: an input missing, incomplete or damaged, an output in the way, a
    pipeline that failed or wrote nothing usable. One line, exit 1 (no ``COMPLETED`` written)."""
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def _apart(outputs: dict, inputs: dict) -> None:
    """Refuse an output that is, holds or lies inside an input (exit 2: the command line is wrong,
    found before any input is read), even with --overwrite."""
    try:
        check_apart(outputs, inputs)
    except UsageError as err:
        _fail(str(err))


def _stage_command() -> str:
    """The stage's command as the output's claim and record name it (``pipelines corpus``)."""
    return f"pipelines {click.get_current_context().info_name}"


def _run(build, config, inputs, beam_args: list[str], record_name: str) -> None:
    try:
        stats = run_stage(build, config, inputs, beam_args, command=_stage_command())
    except (StageFailed, io.InputError, io.OutputError) as err:
        _fail_run(str(err))
    if stats is None:
        click.echo("dry run: the job was built and not submitted; nothing was written")
        return
    for line in summary_lines(stats, config.output, record_name):
        click.echo(line)
    allowed = getattr(config, "allow_file_errors", False)
    for reason, count in stats["file_errors"].items() if allowed else ():
        click.echo(
            f"warning: {count} input file(s) ended early ({reason}); see {config.output}/rejects",
            err=True,
        )
    reason = incomplete_reason(stats, allowed)
    if reason is not None:
        _fail_run(f"--output {config.output}: not marked COMPLETED: {reason}")


def _config(cls, **kwargs):
    io.use_beam_options(click.get_current_context().args)  # before any input or output is looked at
    try:
        return cls(**kwargs)
    except ValueError as err:
        _fail(str(err))


def _expand(patterns: tuple[str, ...], output: str) -> list[str]:
    """The files ``--input`` names, none of them over ``--output`` (the patterns are checked
    before they are expanded, the files after: a link into the output counts)."""
    _apart({"--output": output}, {"--input": patterns})
    try:
        files = io.expand_inputs(patterns)
    except io.InputError as err:
        _fail_run(str(err))
    _apart({"--output": output}, {"--input": files})
    return files


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="bert-pretraining", message="%(prog)s %(version)s")
@click.option("-v", "--verbose", is_flag=True, help="Log Beam's progress and full tracebacks.")
def main(verbose: bool) -> None:
    """Corpus pipelines: raw Wikipedia dumps and books into clean, split, de-duplicated documents.

    \b
    pipelines wikipedia --input 'dumps/enwiki-*-pages-articles-multistream*.xml.bz2' --output out/corpus/wiki
    pipelines books --input 'books/*.txt' --output out/corpus/books
    pipelines corpus --input out/corpus/wiki --input out/corpus/books --output out/corpus/all

    Paths may be local or bucket URLs (gs://, s3:// with the aws extra: AWS_ENDPOINT_URL or Beam's
    --s3_endpoint_url for a non-AWS server). Unknown options go to Beam, so the same
    command runs on Dataflow with --runner DataflowRunner --project P --region R
    --temp_location gs://b/tmp --setup_file ./setup.py.
    """
    logging.basicConfig(
        level=logging.INFO if verbose else logging.ERROR, format="%(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("schemas").setLevel(logging.WARNING)  # a stale claim taken over is said
    # Beam logs a failed step's traceback at ERROR; our one `error:` line carries its message.
    logging.getLogger("apache_beam").setLevel(logging.NOTSET if verbose else logging.CRITICAL)
    io.use_beam_options([])  # s3:// from the AWS_* environment (`show`); each stage adds its own flags


def _source_options(func):
    func = click.option(
        "--allow-file-errors",
        is_flag=True,
        help="Mark the output COMPLETED although input files had errors (truncated, undecodable, "
        "unreadable), keeping what was read before each; without it such a run exits 1, is not "
        "COMPLETED, and stats.json names the files.",
    )(func)
    func = click.option("--overwrite", is_flag=True, help="Replace a completed output at --output.")(func)
    func = click.option(
        "--num-shards",
        type=int,
        default=16,
        show_default=True,
        help="Arrow files to write; aim for 100-500 MB each at scale.",
    )(func)
    func = click.option("--output", required=True, help="Folder or bucket URL for the documents.")(func)
    func = click.option(
        "--input",
        "inputs",
        multiple=True,
        required=True,
        help="File, glob or bucket URL; repeat for several.",
    )(func)
    return func


@main.command(context_settings=_PASS_THROUGH)
@_source_options
@click.option(
    "--streams-per-range",
    type=int,
    default=20,
    show_default=True,
    help="Multistream dumps: bz2 streams (100 pages each) per parallel read task.",
)
@click.option(
    "--min-document-words",
    type=int,
    default=8,
    show_default=True,
    help="Drop articles with fewer words after cleaning (counted as too_short).",
)
@click.pass_context
def wikipedia(
    ctx, inputs, output, num_shards, overwrite, allow_file_errors, streams_per_range, min_document_words
):
    """Clean pages-articles dumps (.xml.bz2, multistream or not, or plain .xml) into documents.

    Keeps namespace-0 articles, skips redirects and disambiguation pages, and keeps only prose
    paragraphs split into sentences. A multistream dump whose -index.txt.bz2 lies beside it is
    read in parallel by byte ranges of bz2 streams.
    """
    from pipelines.wiki.pipeline import build

    config = _config(
        WikipediaConfig,
        inputs=inputs,
        output=output,
        num_shards=num_shards,
        overwrite=overwrite,
        allow_file_errors=allow_file_errors,
        streams_per_range=streams_per_range,
        min_document_words=min_document_words,
    )
    _run(build, config, _expand(inputs, config.output), ctx.args, "pages")


@main.command(context_settings=_PASS_THROUGH)
@_source_options
@click.option(
    "--min-document-words",
    type=int,
    default=100,
    show_default=True,
    help="Drop books with fewer words after cleaning (counted as too_short).",
)
@click.pass_context
def books(ctx, inputs, output, num_shards, overwrite, allow_file_errors, min_document_words):
    """Clean plain-text books (one book per file) into documents, one document per book.

    Detects the encoding, strips Project Gutenberg headers, footers and licence, unwraps
    hard-wrapped lines and drops tables of contents and headings.
    """
    from pipelines.books.pipeline import build

    config = _config(
        BooksConfig,
        inputs=inputs,
        output=output,
        num_shards=num_shards,
        overwrite=overwrite,
        allow_file_errors=allow_file_errors,
        min_document_words=min_document_words,
    )
    _run(build, config, _expand(inputs, config.output), ctx.args, "books")


@main.command(context_settings=_PASS_THROUGH)
@_source_options
@click.option("--min-document-words", type=int, default=0, show_default=True)
@click.option(
    "--validation-fraction", type=float, default=0.0, show_default=True, help="Documents for validation/."
)
@click.option("--test-fraction", type=float, default=0.0, show_default=True, help="Documents for test/.")
@click.pass_context
def text(
    ctx,
    inputs,
    output,
    num_shards,
    overwrite,
    allow_file_errors,
    min_document_words,
    validation_fraction,
    test_fraction,
):
    """Read files in create_pretraining_data.py's input format into a corpus output.

    One sentence per line, a blank line between documents (UTF-8). The output has the
    train/validation/test layout of `pipelines corpus` (by default everything in train), so
    `pipelines examples --corpus OUTPUT` takes it. Empty files are rejects; a file that is not
    UTF-8 text (an invalid byte, a NUL byte) fails the run, naming the file, byte and line, unless
    --allow-file-errors, which keeps the documents before that byte.
    """
    from pipelines.plaintext.pipeline import build

    config = _config(
        TextConfig,
        inputs=inputs,
        output=output,
        num_shards=num_shards,
        overwrite=overwrite,
        allow_file_errors=allow_file_errors,
        min_document_words=min_document_words,
        validation_fraction=validation_fraction,
        test_fraction=test_fraction,
    )
    _run(build, config, _expand(inputs, config.output), ctx.args, "records (documents and rejected files)")


@main.command(context_settings=_PASS_THROUGH)
@click.option(
    "--input",
    "inputs",
    multiple=True,
    required=True,
    help="A completed `pipelines wikipedia` or `pipelines books` output; repeat for several.",
)
@click.option("--output", required=True, help="Folder or bucket URL for train/, validation/, test/.")
@click.option("--validation-fraction", type=float, default=0.01, show_default=True)
@click.option("--test-fraction", type=float, default=0.01, show_default=True)
@click.option(
    "--near-duplicate-threshold",
    type=float,
    default=0.8,
    show_default=True,
    help="Estimated Jaccard similarity of word 5-gram sets above which a document is a near duplicate.",
)
@click.option("--num-shards", type=int, default=16, show_default=True, help="Arrow files per split.")
@click.option("--overwrite", is_flag=True, help="Replace a completed output at --output.")
@click.pass_context
def corpus(
    ctx, inputs, output, validation_fraction, test_fraction, near_duplicate_threshold, num_shards, overwrite
):
    """Merge document outputs, remove exact and near duplicates, and split by document-id hash."""
    from pipelines.corpus.pipeline import build
    from schemas import DOCUMENTS

    config = _config(
        CorpusConfig,
        inputs=inputs,
        output=output,
        validation_fraction=validation_fraction,
        test_fraction=test_fraction,
        near_duplicate_threshold=near_duplicate_threshold,
        num_shards=num_shards,
        overwrite=overwrite,
    )
    _apart({"--output": output}, {"--input": inputs})
    try:
        manifests = [(folder, io.load_manifest(folder, DOCUMENTS.name)) for folder in inputs]
    except io.InputError as err:
        _fail_run(str(err))
    _run(build, config, manifests, ctx.args, "documents")


@main.command(context_settings=_PASS_THROUGH)
@click.option("--corpus", required=True, help="A completed `pipelines corpus` output.")
@click.option("--vocab", required=True, help="vocab.txt or tokenizer.json (local or bucket URL).")
@click.option("--output", required=True, help="Folder or bucket URL for the example shards.")
@click.option(
    "--split", default="train", show_default=True, type=click.Choice(["train", "validation", "test"])
)
@click.option("--cased/--uncased", default=False, show_default=True)
@click.option("--max-seq-length", type=int, default=128, show_default=True)
@click.option("--max-predictions-per-seq", type=int, default=20, show_default=True)
@click.option("--masked-lm-prob", type=float, default=0.15, show_default=True)
@click.option("--short-seq-prob", type=float, default=0.1, show_default=True)
@click.option("--dupe-factor", type=int, default=5, show_default=True)
@click.option("--whole-word-masking", is_flag=True, help="Mask whole words (a word's ## pieces together).")
@click.option(
    "--mask-share", type=float, default=0.8, show_default=True, help="Of predictions, share -> [MASK]."
)
@click.option("--keep-share", type=float, default=0.1, show_default=True, help="Share kept unchanged.")
@click.option("--random-share", type=float, default=0.1, show_default=True, help="Share -> a random token.")
@click.option(
    "--random-token-from-whole-vocab",
    is_flag=True,
    help="As the reference: the 10% random replacement may be any token, [PAD] and [unusedN] included.",
)
@click.option(
    "--no-masking",
    is_flag=True,
    help="Write unmasked pairs (empty masked_lm_* columns) for trainers that mask dynamically.",
)
@click.option(
    "--format",
    "format_",
    type=click.Choice(["pairs", "packed"]),
    default="pairs",
    show_default=True,
    help="pairs: [CLS] A [SEP] B [SEP] with NSP labels (BERT); packed: full sentences packed to "
    "--max-seq-length across documents, [SEP] between documents, no NSP (pretrain needs --no-nsp).",
)
@click.option("--num-shards", type=int, default=256, show_default=True)
@click.option(
    "--num-buckets",
    type=int,
    default=1024,
    show_default=True,
    help="Document buckets for random-next lookups (packed: the packing groups); a bucket's "
    "documents meet on one worker.",
)
@click.option("--seed", type=int, default=12345, show_default=True)
@click.option(
    "--spill",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Write documents, requests and examples to temporary files and shuffle only references, "
    "so memory does not grow with the input: auto does on Beam's local runners (which hold what "
    "crosses a stage in memory), not on Dataflow, Flink or Spark (whose shuffles spill themselves).",
)
@click.option(
    "--temp-location",
    default="",
    help="Folder or bucket URL for the run's temporary files (documents, requests and examples "
    "on their way to the shards; every worker must reach it) [default: OUTPUT/.temp]; removed "
    "when the run ends.",
)
@click.option("--overwrite", is_flag=True, help="Replace a completed output at --output.")
@click.pass_context
def examples(ctx, **flags):
    """Write masked, NSP-paired BERT pre-training examples as sharded Arrow files
    (or, with --format packed, packed full sentences without NSP).

    Semantics of the reference generator (create_pretraining_data.py); every random choice is
    seeded by (seed, document, dupe pass, pair), so the shards do not depend on the runner.
    """
    from pipelines.examples.pipeline import build, spill_folder
    from pipelines.examples.spill import remove_folder
    from schemas import DOCUMENTS
    from wordpiece.tokenizer import WordPieceTokenizer

    io.use_beam_options(ctx.args)
    try:
        config = _examples_config(flags)
    except ValueError as err:  # the settings: the command line is wrong
        _fail(str(err))
    _apart(
        {"--output": config.output, "--temp-location": config.temp_location},
        {"--corpus": config.corpus, "--vocab": config.vocab},
    )
    try:
        tokenizer = WordPieceTokenizer.load(config.vocab, cased=config.cased)
        manifest = io.load_manifest(config.corpus, DOCUMENTS.name)
    except ValueError as err:  # the vocabulary or the corpus (VocabError, io.InputError)
        _fail_run(str(err))
    folder = spill_folder(config, runner_name(ctx.args))
    try:
        stats = run_stage(
            lambda p, c, _: build(p, c, manifest, tokenizer.vocab, folder),
            config,
            None,
            ctx.args,
            cleanup=None if folder is None else lambda: remove_folder(folder),
            command=_stage_command(),
        )
    except (StageFailed, io.InputError, io.OutputError) as err:
        _fail_run(str(err))
    if stats is None:
        click.echo("dry run: the job was built and not submitted; nothing was written")
        return
    _report_examples(config, stats)


def _examples_config(flags: dict) -> ExamplesConfig:
    """`pipelines examples`' flags as its typed config (``ValueError`` lists every problem)."""
    from pipelines.examples.pairs import PairConfig
    from pipelines.examples.pipeline import ExamplesConfig
    from wordpiece.masking import MaskingConfig

    return ExamplesConfig(
        corpus=flags["corpus"],
        vocab=flags["vocab"],
        output=flags["output"],
        split=flags["split"],
        cased=flags["cased"],
        dupe_factor=flags["dupe_factor"],
        seed=flags["seed"],
        num_shards=flags["num_shards"],
        num_buckets=flags["num_buckets"],
        pairs=PairConfig(max_seq_length=flags["max_seq_length"], short_seq_prob=flags["short_seq_prob"]),
        masking=MaskingConfig(
            masked_lm_prob=flags["masked_lm_prob"],
            max_predictions_per_seq=flags["max_predictions_per_seq"],
            whole_word_masking=flags["whole_word_masking"],
            mask_share=flags["mask_share"],
            keep_share=flags["keep_share"],
            random_share=flags["random_share"],
        ),
        random_token_from_whole_vocab=flags["random_token_from_whole_vocab"],
        apply_masking=not flags["no_masking"],
        overwrite=flags["overwrite"],
        format=flags["format_"],
        spill=flags["spill"],
        temp_location=flags["temp_location"],
    )


def _report_examples(config: ExamplesConfig, stats: dict) -> None:
    """The run's summary lines; exit 1 (no ``COMPLETED``) when the split gave no examples."""
    if not stats["examples"]:
        _fail_run(
            f"--split {config.split} of {config.corpus}: no examples ({stats['documents_used']:,} documents "
            f"with tokens); {config.output} is not marked COMPLETED"
        )
    masked = f"masked {stats['mask_rate']:.3f} of tokens" if stats["masking"] else "not masked"
    if stats["random_next_rate"] is None:
        pairing = f"packed, {stats['document_separators']:,} document separators"
    else:
        pairing = f"random next {stats['random_next_rate']:.3f}"
    click.echo(f"examples: {stats['examples']:,} ({stats['tokens']:,} tokens); {pairing}, {masked}")
    click.echo(f"output: {config.output}")


@main.command()
@click.argument("folder")
@click.option(
    "--samples", type=click.IntRange(min=0), default=3, show_default=True, help="Documents to show."
)
def show(folder, samples):
    """Summarise a completed documents output and print the first sentences of a few documents."""
    from pipelines.show import describe

    try:
        lines = describe(folder, num_samples=samples)
    except (io.InputError, InputError) as err:
        _fail_run(str(err))
    for line in lines:
        click.echo(line)


if __name__ == "__main__":
    main()
