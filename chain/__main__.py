"""``python -m chain`` (the demo chain) and ``python -m chain ablate`` (the ablation study)."""

import sys

if sys.argv[1:2] == ["ablate"]:
    from chain.ablate_cli import main as ablate

    ablate(args=sys.argv[2:], prog_name="python -m chain ablate")
else:
    from chain.cli import main

    main()
