"""``pretrain``: command-line entry point of the ``pretrain`` package."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Pre-train BERT (MLM + NSP) from example shards on local or bucket paths.

    Its commands are built in the pretrain issue; this release ships none yet.
    """


if __name__ == "__main__":
    main()
