"""``wordpiece``: ``train`` (learn a vocabulary from a corpus) and ``encode`` (tokenise stdin)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from itertools import islice
from typing import BinaryIO

import click

from schemas.buckets import probe
from schemas.commands import CommandError, OneLineGroup, UsageError, warnings_as_lines
from schemas.commands import config_option as option
from schemas.inputs import MAX_LINE_BYTES, lines
from wordpiece.tokenizer import WordPieceTokenizer
from wordpiece.train import VocabConfig

_HELP = {"help_option_names": ["-h", "--help"]}
_PASS_ON = {"ignore_unknown_options": True, "allow_extra_args": True, **_HELP}  # Beam's options


def _load_tokenizer(path: str, cased: bool | None) -> WordPieceTokenizer:
    """Load a vocabulary (a file or a bucket object); an inferred casing is a one-line ``warning:``."""
    probe(reads={"--vocab": path})
    with warnings_as_lines():
        return WordPieceTokenizer.load(path, cased=cased)


def _batches(stream: BinaryIO, size: int) -> Iterator[list[str]]:
    """Lines of a byte stream, ``size`` at a time, decoded as UTF-8 (invalid bytes U+FFFD) without
    their ``\\n`` or ``\\r\\n``; only ``\\n`` ends a line (U+2028 and form feed stay inside it),
    and a line over ``MAX_LINE_BYTES`` is one error naming its number."""
    bounded = lines(stream, "standard input", MAX_LINE_BYTES)
    while batch := list(islice(bounded, size)):
        texts = []
        for raw in batch:
            if raw.endswith(b"\n"):
                raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
            texts.append(raw.decode("utf-8", errors="replace"))
        yield texts


class _OneLineFormatter(logging.Formatter):
    """Libraries' log records (gcsfs retrying, say) as one line each, never a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage().splitlines()
        return f"{record.levelname.lower()}: {record.name}: {message[0] if message else ''}"


@click.group(cls=OneLineGroup, context_settings=_HELP, epilog="Docs: docs/wordpiece.md")
@click.version_option(package_name="bert-pretraining", message="%(prog)s %(version)s")
def main() -> None:
    """Train a WordPiece vocabulary from corpus documents and tokenise exactly as BERT does.

    \b
    train    learn vocab.txt + tokenizer.json from corpus documents
    encode   tokenise lines of standard input with a vocabulary
    """
    # Our own ``error:`` lines carry the cause; libraries' logs (gcsfs retries) would repeat it
    # with tracebacks, so only critical records get through, one line each.
    handler = logging.StreamHandler()
    handler.setFormatter(_OneLineFormatter())
    logging.basicConfig(level=logging.CRITICAL, handlers=[handler])
    logging.getLogger("schemas").setLevel(logging.WARNING)  # a stale claim taken over is said


@main.command("encode", epilog="Docs: docs/wordpiece.md")
@click.option(
    "--vocab",
    "vocab_path",
    required=True,
    metavar="PATH",
    help="vocab.txt (one token per line) or tokenizer.json; local path or bucket URL.",
)
@click.option(
    "--cased/--uncased",
    default=None,
    help="Keep case and accents, or lower-case and strip them. Default: from tokenizer.json's "
    "normalizer, else inferred from the vocabulary (with a warning).",
)
@click.option("--tokens", "as_tokens", is_flag=True, help="Write WordPiece strings instead of ids.")
@click.option(
    "--batch-size",
    type=click.IntRange(1, 1_000_000),
    default=1000,
    show_default=True,
    help="Lines tokenised together; memory is bounded by this many lines.",
)
def encode(vocab_path: str, cased: bool | None, as_tokens: bool, batch_size: int) -> None:
    """Tokenise each line of standard input; write one line of output per line of input.

    Output: the space-separated ids without [CLS]/[SEP], or with --tokens the WordPiece strings
    (continuations start with ##). An empty or whitespace-only input line gives an empty output
    line. Input is UTF-8; an invalid byte becomes U+FFFD, which BERT's normaliser deletes: the
    byte vanishes and the characters on either side of it join.
    """
    tokenizer = _load_tokenizer(vocab_path, cased)
    stdin = click.get_binary_stream("stdin")
    stdout = click.get_binary_stream("stdout")
    try:
        for texts in _batches(stdin, batch_size):
            if as_tokens:
                rows = [" ".join(tokens) for tokens in tokenizer.tokens_batch(texts)]
            else:
                rows = [" ".join(map(str, ids)) for ids in tokenizer.encode_batch(texts)]
            stdout.write(("\n".join(rows) + "\n").encode("utf-8"))
        stdout.flush()
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as line-oriented tools do, and keep
        # Python's exit-time flush of stdout from reporting the broken pipe again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        sys.exit(1)


@main.command("train", context_settings=_PASS_ON, epilog="Docs: docs/wordpiece.md")
@click.option("--corpus", required=True, help="A completed `pipelines corpus` output (local or bucket URL).")
@click.option(
    "--output", required=True, help="Folder for vocab.txt, tokenizer.json, stats.json, word_counts/."
)
@option(VocabConfig, "vocab_size", help="Total size, special and [unusedN] tokens included.")
@option(
    VocabConfig, "cased", "--cased/--uncased", help="Keep case and accents, or lower-case and strip them."
)
@option(VocabConfig, "min_frequency", help="A pair must occur this often to be merged into a piece.")
@option(VocabConfig, "limit_alphabet", help="Keep at most this many characters; the rest become [UNK].")
@option(VocabConfig, "num_unused", help="[unusedN] slots; 994 gives the released layout ([UNK]=100).")
@option(
    VocabConfig,
    "splits",
    "--split",
    "splits",
    multiple=True,
    help="Corpus split(s) to learn from; repeatable.",
)
@option(
    VocabConfig, "measure_split", help="Split on which stats.json reports [UNK] rate and pieces per word."
)
@option(VocabConfig, "num_count_shards", help="Files of word counts to write.")
@option(
    VocabConfig,
    "max_words",
    help="Learn from at most this many distinct words, the most frequent (memory: about 1 KB each).",
)
@click.option("--overwrite", is_flag=True, help="Replace a completed vocabulary at --output.")
@click.pass_context
def train(ctx, **flags) -> None:
    """Learn a BERT-layout WordPiece vocabulary from corpus documents, at any corpus size.

    A Beam pipeline counts pre-tokenised words (any runner: Beam options such as --runner pass
    through); the vocabulary is then learned here from the counts, never from the text. Writes
    vocab.txt, tokenizer.json and stats.json ([UNK] rate and pieces per word on --measure-split).
    The same corpus and options give a byte-identical vocab.txt on any runner and workers.
    """
    from pipelines.beam_options import refuse_unknown  # the one reach into pipelines
    from pipelines.jobs import check_job, explain_failure, job_options
    from pipelines.wordcount import train_vocabulary
    from schemas.paths import check_apart

    refuse_unknown(ctx)  # what goes to Beam: Beam's own options, before anything is read
    try:
        config = VocabConfig(**{**flags, "splits": tuple(flags["splits"])})
    except ValueError as err:  # the settings
        raise UsageError(str(err)) from None
    check_apart({"--output": config.output}, {"--corpus": config.corpus})  # exit 2
    check_job(job_options(ctx.args), {"--corpus": config.corpus}, {"--output": config.output})
    try:
        stats = train_vocabulary(config, ctx.args)
    except (CommandError, OSError):
        raise
    except ValueError as err:  # the corpus, the vocabulary, an output in the way
        raise CommandError(str(err)) from None
    except Exception as err:  # Beam wraps worker errors; show the line that says what happened.
        raise CommandError(explain_failure(err)) from None
    if stats is None:
        click.echo("dry run: the counting job was built and not submitted; nothing was written")
        return
    click.echo(
        f"vocabulary: {stats['vocab_size']:,} tokens ({stats['num_pieces_learned']:,} learned from "
        f"{stats['distinct_words_learned']:,} distinct words of {'+'.join(stats['learned_from'])})"
    )
    if left_out := stats["distinct_words"] - stats["distinct_words_learned"]:
        share = stats["word_occurrences_left_out"] / stats["word_occurrences"]
        click.echo(
            f"--max-words left out the {left_out:,} rarest distinct words ({share:.4%} of occurrences)"
        )
    if stats["pieces_per_word"] is not None:
        click.echo(
            f"on {stats['measured_on']}: {stats['pieces_per_word']:.3f} pieces per word, "
            f"[UNK] {100 * stats['unk_piece_rate']:.3f}% of pieces"
        )
    out = config.output
    click.echo(f"output: {out}/vocab.txt, {out}/tokenizer.json, {out}/stats.json")
    if stats["vocab_size"] < config.vocab_size:
        click.echo(
            f"warning: {stats['vocab_size']:,} tokens, not the --vocab-size {config.vocab_size:,} asked: the corpus "
            f"has no more pieces seen --min-frequency {config.min_frequency} times; give a larger corpus or a "
            "smaller --vocab-size",
            err=True,
        )


if __name__ == "__main__":
    main()
