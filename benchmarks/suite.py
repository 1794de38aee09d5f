"""How long the README's commands take on this machine: ``make test``, ``make test-all``, ``make demo``,
``make ablate`` (the paper's ablations, preset quick), and the ablation study's Table 7.

    python benchmarks/suite.py [--what test test-all demo ablate]

Run in a fresh clone (so that each command's own set-up, the virtual environment and pinned
installs, is timed too when ``.venv`` is absent); each command's wall time, and for the test tiers
the number of tests that passed, go to ``results/suite.json``, which the README's figures block
renders, and for ``make ablate`` the Table 7 cells of its ``results.json`` (docs/ablations.md renders
them). No peer: these are the figures a newcomer waits for.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row

WHAT = {
    "test": "the fast tier: unit, Beam-transform and fault tests",
    "test-all": "everything: the fast tier, end-to-end runs on real data, emulators (what CI runs)",
    "demo": "every stage on the Wikipedia excerpt and the Gutenberg books, ending with the report",
    "ablate": "the paper's ablations, preset quick: every row of Tables 5-8 and Figure 5",
}
ABLATIONS = harness.ROOT / "out" / "ablate" / "ablations" / "results.json"


def main() -> None:
    parser = harness.parser(__doc__, "suite")
    parser.add_argument("--what", nargs="+", choices=list(WHAT), default=list(WHAT))
    args = parser.parse_args()
    previous = harness.RESULTS / "suite.json"
    found = {}
    if args.json == previous and previous.exists():  # keep the commands not rerun
        found = {k: v for k, v in json.loads(previous.read_text())["commands"].items() if k not in args.what}
    for target in args.what:
        start = time.perf_counter()
        done = subprocess.run(["make", target], cwd=harness.ROOT, capture_output=True, text=True, check=False)
        wall_s = time.perf_counter() - start
        if done.returncode:
            sys.exit(
                f"make {target} failed (exit status {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
            )
        passed = re.findall(r"(\d+) passed", done.stdout)
        found[target] = {"wall_s": round(wall_s, 1), "tests_passed": int(passed[-1]) if passed else None}
        if target == "ablate":
            cells = json.loads(ABLATIONS.read_text())
            found[target]["table7"] = [
                {k: c[k] for k in ("row", "column", "summary")} for c in cells if c["table"] == "7"
            ]
    harness.write(args.json, {"commands": found}, rows=rows)


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def rows(r: dict) -> list[Row]:
    shown = []
    for target, figures in r["commands"].items():
        tests = f", {figures['tests_passed']:,} tests" if figures.get("tests_passed") else ""
        shown.append((f"`make {target}`: {WHAT[target]}{tests}", minutes(figures["wall_s"]), "—", "—"))
    return shown


def table7(r: dict) -> list[str]:
    """Table 7 of the quick study: dev F1 on CoNLL-2003, our model and the reference checkpoint."""
    cells = r["commands"]["ablate"]["table7"]
    columns = {"ner": "ours", "reference": "all-MiniLM-L6-v2"}
    lines = ["| system | " + " | ".join(columns.values()) + " |", "|---|" + "---|" * len(columns)]
    for row in dict.fromkeys(c["row"] for c in cells):
        shown = []
        for column in columns:
            s = next((c["summary"] for c in cells if (c["row"], c["column"]) == (row, column)), None)
            if s is None or not s["n"]:
                shown.append("—")
            else:
                spread = "" if s["std"] is None else f" ± {s['std']:.1f}"
                shown.append(f"{s['mean']:.1f}{spread} (n={s['n']})")
        lines.append(f"| {row} | " + " | ".join(shown) + " |")
    return lines


TABLES = {
    "table7": table7,
    "times": lambda r: [
        "| command | what it runs | wall time |",
        "|---|---|---|",
        *(
            f"| `make {target}` | {WHAT[target]} | {minutes(f['wall_s'])} |"
            for target, f in r["commands"].items()
        ),
    ],
}

if __name__ == "__main__":
    main()
