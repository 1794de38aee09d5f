"""``python -m chain``: the ``chain`` command."""

from chain.cli import main

main(prog_name="python -m chain")
