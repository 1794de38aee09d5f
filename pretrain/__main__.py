"""``python -m pretrain`` / ``torchrun -m pretrain``: the ``pretrain`` command."""

from pretrain.cli import main

main()
