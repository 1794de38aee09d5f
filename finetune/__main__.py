"""``python -m finetune``: the ``finetune`` command."""

from finetune.cli import main

main()
