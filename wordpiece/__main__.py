"""``python -m wordpiece``: the ``wordpiece`` command."""

from wordpiece.cli import main

main()
