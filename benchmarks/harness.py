"""What every benchmark script shares: inputs, timing, subprocesses, the machine, results, rendering.

A benchmark is a script ``benchmarks/NAME.py`` run from the repository root (``python
benchmarks/NAME.py``). It parses its flags with :func:`parser`, times with :func:`interleave` (ours
and the peer in turn, so machine noise hits both alike) or :func:`run` (a command as a subprocess:
wall and CPU seconds, peak RSS), writes ``benchmarks/results/NAME.json`` with :func:`write` (the
figures and the conditions: command line, machine, load, date) and renders its own summary rows
from that JSON with ``rows(result)``. Heavy imports (torch, transformers, Beam) stay inside the
scripts' functions, so rendering reads the JSON files with the standard library alone. This module
is standard library only: ``gpu_check.py`` uses it on a bare GPU image.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT.parent / "shared" / "data"
WIKI_DUMP = DATA / "wiki" / "gensim_enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
BOOKS = DATA / "books" / "gutenberg"
VOCAB = DATA / "vocab" / "bert-base-uncased_vocab.txt"

Row = tuple[str, str, str, str]
"""One summary row: (what is measured, on which input; ours; the peer; the ratio), Markdown cells."""


def parser(doc: str, name: str | None) -> argparse.ArgumentParser:
    """The script's flags: its docstring as ``--help`` and, for a script with results (``name``),
    ``--json`` (default ``results/NAME.json``)."""
    parsed = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if name:
        parsed.add_argument(
            "--json",
            type=Path,
            default=RESULTS / f"{name}.json",
            help="where the figures go (default: %(default)s)",
        )
    return parsed


def require(*paths: Path) -> None:
    """Exit with one line naming the first input that is missing."""
    for path in paths:
        if not path.exists():
            sys.exit(f"benchmark input missing: {path} (the ../shared/data checkout next to the repository)")


# -- timing ---------------------------------------------------------------------------------------


def cpu_s() -> float:
    """CPU seconds (user + system) of this process and of the children it has waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def interleave(
    variants: dict[str, Callable[[int], object]],
    rounds: int,
    warmup: int = 0,
    sync: Callable[[], None] | None = None,
) -> dict[str, dict[str, list[float]]]:
    """Call ``variant(i)`` of every variant in turn, for ``i`` in ``range(warmup + rounds)``: the
    wall and CPU seconds (:func:`cpu_s`, children included) of each call after the warm-up, as
    ``{name: {"wall_s": [...], "cpu_s": [...]}}``. ``sync`` runs before and after each timed call
    (a device synchronisation)."""
    times = {name: {"wall_s": [], "cpu_s": []} for name in variants}
    for index in range(warmup + rounds):
        for name, call in variants.items():
            if sync:
                sync()
            wall, cpu = time.perf_counter(), cpu_s()
            call(index)
            if sync:
                sync()
            if index >= warmup:
                times[name]["wall_s"].append(time.perf_counter() - wall)
                times[name]["cpu_s"].append(cpu_s() - cpu)
    return times


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    """``{"wall_s": [...], "cpu_s": [...]}`` as their medians, under the keys ``median_*``."""
    return {f"median_{key}": statistics.median(values) for key, values in times.items()}


@dataclass(frozen=True)
class Run:
    """A finished subprocess: wall and CPU seconds (its descendants included), peak RSS, output."""

    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    stdout: str


def run(command: list[str], env: dict[str, str] | None = None) -> Run:
    """Run ``command`` from the repository root (on ``PYTHONPATH``); exit with its stderr's tail if it
    fails. Its CPU time and peak RSS are the kernel's (``os.wait4``: the child and every descendant
    it waited for), what ``/usr/bin/time -v`` reports."""
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        wall_s = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode:
            tail = err.read().decode(errors="replace")[-2000:]
            sys.exit(f"{' '.join(command)} failed (exit status {process.returncode}):\n{tail}")
        stdout = out.read().decode(errors="replace")
    return Run(wall_s, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, stdout)


def make_shards(folder: Path, lengths: list[int]) -> list[Path]:
    """Real ``pipelines examples`` shards (train split, dupe factor 2) of the enwiki excerpt with the
    released bert-base-uncased vocabulary, one output per sequence length (about a minute each)."""
    require(WIKI_DUMP, VOCAB)
    cli, runner = [sys.executable, "-m", "pipelines.cli"], ["--runner", "FnApiRunner"]
    wiki, corpus = ["--output", str(folder / "wiki")], ["--output", str(folder / "corpus")]
    run([*cli, "wikipedia", "--input", str(WIKI_DUMP), *wiki, "--num-shards", "4", *runner])
    run([*cli, "corpus", "--input", str(folder / "wiki"), *corpus, "--num-shards", "2", *runner])
    outputs = [folder / f"seq{length}" for length in lengths]
    for length, out in zip(lengths, outputs, strict=True):
        inputs = [
            "--corpus",
            str(folder / "corpus"),
            "--vocab",
            str(VOCAB),
            "--output",
            str(out),
            "--split",
            "train",
        ]
        sizes = [
            "--max-seq-length",
            str(length),
            "--dupe-factor",
            "2",
            "--num-shards",
            "4",
            "--num-buckets",
            "8",
        ]
        run([*cli, "examples", *inputs, *sizes, *runner])
    return outputs


# -- the machine and the results ------------------------------------------------------------------


def machine() -> dict:
    """The CPU model, its cores (all, and those this process may use), the load, Python's version."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [
            line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if "model name" in line
        ]
        model = names[0] if names else model
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "load_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
    }


def versions(*packages: str) -> dict[str, str]:
    """The installed version of each package (``"absent"`` when it is not installed)."""
    found = {}
    for package in packages:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "absent"
    return found


def measured(command: str, machine_figures: dict, *packages: str) -> dict:
    """The ``conditions`` of a result: the command line, the machine, the UTC date, ``packages``' versions."""
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    return {"command": command, "machine": machine_figures, "date": today, "versions": versions(*packages)}


def write(path: Path, result: dict, *packages: str) -> None:
    """Write ``result`` to ``path`` (JSON) with its ``conditions``: the command line that produced it,
    the machine as it was at the end of the run, the UTC date and the versions of ``packages``."""
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    conditions = measured(" ".join(["python", str(shown), *sys.argv[1:]]), machine(), *packages)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**result, "conditions": conditions}, indent=2) + "\n")
    print(f"wrote {path}")


# -- rendering ------------------------------------------------------------------------------------


def n(value: float, digits: int = 3) -> str:
    """A figure to ``digits`` significant digits, with thousands separators."""
    if value >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def x(ratio: float) -> str:
    """A ratio as the summary shows it, in bold."""
    return f"**{ratio:.2f}x**"


def conditions(result: dict) -> str:
    """One line on how a result was measured, from its recorded ``conditions`` (or says none are)."""
    recorded = result.get("conditions")
    if not recorded:
        return "machine and load not recorded in the results file"
    m = recorded["machine"]
    where = [f"`{recorded['command']}` on {recorded['date']}"]
    if "cpu" in m:
        where.append(f"{m['cpu']}, {m['usable_cores']} of {m['cores']} cores usable, load {m['load_1m']}")
    if m.get("gpu"):
        where.append(m["gpu"])
    return ": ".join(where[:2]) + "".join(f", {w}" for w in where[2:])
