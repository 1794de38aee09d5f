"""``wordpiece``: command-line entry point of the ``wordpiece`` package.

Commands: ``train`` (learn a vocabulary from a corpus) and ``encode`` (tokenise standard input
with a vocabulary). Library code lives in
``wordpiece.tokenizer``; each command here only parses flags, loads, and reports errors as one
``error:`` line: exit 1 when it ran and failed, 2 when a setting is refused before anything is
read (``schemas.commands``: 130/143 for SIGINT/SIGTERM).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Iterator
from itertools import islice
from typing import BinaryIO, NoReturn

import click

from schemas.commands import InputError, OneLineGroup
from wordpiece.tokenizer import WordPieceTokenizer


def _fail(message: str, exit_code: int = 1) -> NoReturn:
    """One ``error:`` line and exit: 1 when the command ran and failed (a missing or bad corpus or
    vocabulary, an output in the way), 2 when its settings are refused before anything is read."""
    click.echo(f"error: {message}", err=True)
    sys.exit(exit_code)


def _load_tokenizer(path: str, cased: bool | None) -> WordPieceTokenizer:
    """Load a vocabulary, turning a VocabError into ``error:`` and an inferred casing into a
    one-line ``warning:`` on standard error."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            tokenizer = WordPieceTokenizer.load(path, cased=cased)
        except InputError as err:
            _fail(str(err))
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    return tokenizer


def _batches(stream: BinaryIO, size: int) -> Iterator[list[str]]:
    """Lines of a byte stream, ``size`` at a time, decoded as UTF-8 with invalid bytes replaced
    by U+FFFD and without their line ending (``\\n`` or ``\\r\\n``).

    Lines end at ``\\n`` only, so characters such as U+2028 or form feed stay inside their line
    (BERT's normaliser turns U+2028 into a space and deletes form feed).
    """
    lines = iter(stream)
    while batch := list(islice(lines, size)):
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


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
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


@main.command("encode")
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


_PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True}


@main.command("train", context_settings=_PASS_THROUGH)
@click.option("--corpus", required=True, help="A completed `pipelines corpus` output (local or bucket URL).")
@click.option(
    "--output", required=True, help="Folder for vocab.txt, tokenizer.json, stats.json, word_counts/."
)
@click.option(
    "--vocab-size",
    type=int,
    default=30_522,
    show_default=True,
    help="Total size, special and [unusedN] tokens included (30,522 as released BERT).",
)
@click.option(
    "--cased/--uncased",
    default=False,
    show_default=True,
    help="Keep case and accents, or lower-case and strip them (BERT-Base uncased).",
)
@click.option(
    "--min-frequency",
    type=int,
    default=2,
    show_default=True,
    help="A pair must occur this often to be merged into a piece.",
)
@click.option(
    "--limit-alphabet",
    type=int,
    default=1_000,
    show_default=True,
    help="Keep at most this many characters (the most frequent); the rest become [UNK].",
)
@click.option(
    "--num-unused",
    type=int,
    default=994,
    show_default=True,
    help="[unusedN] slots; 994 gives the released layout ([UNK]=100 ... [MASK]=103).",
)
@click.option(
    "--split",
    "splits",
    multiple=True,
    default=("train",),
    show_default=True,
    help="Corpus split(s) to learn from; repeat for several.",
)
@click.option(
    "--measure-split",
    default="validation",
    show_default=True,
    help="Split on which stats.json reports the [UNK] rate and pieces per word.",
)
@click.option(
    "--num-count-shards", type=int, default=8, show_default=True, help="Files of word counts to write."
)
@click.option("--overwrite", is_flag=True, help="Replace a completed vocabulary at --output.")
@click.pass_context
def train(
    ctx,
    corpus,
    output,
    vocab_size,
    cased,
    min_frequency,
    limit_alphabet,
    num_unused,
    splits,
    measure_split,
    num_count_shards,
    overwrite,
) -> None:
    """Learn a BERT-layout WordPiece vocabulary from corpus documents, at any corpus size.

    A Beam pipeline counts pre-tokenised words (any runner: Beam options such as --runner pass
    through); the vocabulary is then learned from the counts with the tokenizers WordPiece
    trainer, never from the text. Writes vocab.txt, tokenizer.json and stats.json ([UNK] rate and
    pieces per word on --measure-split). The same corpus and options give a byte-identical
    vocab.txt whatever the runner or number of workers.
    """
    from schemas.commands import CommandError, UsageError
    from schemas.paths import check_apart
    from wordpiece.beam_jobs import explain_failure
    from wordpiece.count import CorpusError
    from wordpiece.train import VocabConfig, train_vocabulary

    try:
        config = VocabConfig(
            corpus=corpus,
            output=output,
            vocab_size=vocab_size,
            cased=cased,
            min_frequency=min_frequency,
            limit_alphabet=limit_alphabet,
            num_unused=num_unused,
            splits=tuple(splits),
            measure_split=measure_split,
            num_count_shards=num_count_shards,
            overwrite=overwrite,
        )
        check_apart({"--output": output}, {"--corpus": corpus})  # exit 2, before the corpus is read
    except (ValueError, UsageError) as err:  # the settings, or --output over --corpus: exit 2
        _fail(str(err), exit_code=2)
    try:
        stats = train_vocabulary(config, ctx.args)
    # it ran and failed: the corpus, the vocabulary, an output in the way (ValueError), a full disk
    except (CorpusError, ValueError, OSError, CommandError) as err:
        _fail(str(err))
    except Exception as err:  # Beam wraps worker errors; show the line that says what happened.
        _fail(explain_failure(err))
    if stats is None:
        click.echo("dry run: the counting job was built and not submitted; nothing was written")
        return
    click.echo(
        f"vocabulary: {stats['vocab_size']:,} tokens ({stats['num_pieces_learned']:,} learned from "
        f"{stats['distinct_words']:,} distinct words of {'+'.join(stats['learned_from'])})"
    )
    if stats["pieces_per_word"] is not None:
        click.echo(
            f"on {stats['measured_on']}: {stats['pieces_per_word']:.3f} pieces per word, "
            f"[UNK] {100 * stats['unk_piece_rate']:.3f}% of pieces"
        )
    click.echo(f"output: {output}/vocab.txt, {output}/tokenizer.json, {output}/stats.json")


if __name__ == "__main__":
    main()
