"""``python -m chain``."""

from chain.cli import main

main()
