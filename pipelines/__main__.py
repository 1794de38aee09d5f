"""``python -m pipelines``: the ``pipelines`` command."""

from pipelines.cli import main

main()
