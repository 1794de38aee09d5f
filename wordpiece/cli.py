"""``wordpiece``: command-line entry point of the ``wordpiece`` package."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Train a WordPiece vocabulary from corpus documents and tokenise exactly as BERT does.

    Its commands are built in the WordPiece issue; this release ships none yet.
    """


if __name__ == "__main__":
    main()
