"""``finetune``: command-line entry point of the ``finetune`` package."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Fine-tune a pre-trained BERT on GLUE, SQuAD and SWAG.

    Its commands are built in the finetune issue; this release ships none yet.
    """


if __name__ == "__main__":
    main()
