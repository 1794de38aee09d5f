"""What every benchmark script shares: inputs, timing, subprocesses, the machine, results, rendering.

A benchmark is a script ``benchmarks/NAME.py`` run from the repository root. It parses its flags
with :func:`parser`, times with :func:`interleave` (ours and the peer in turn, so machine noise hits
both alike) or :func:`run` (a command as a subprocess: wall and CPU seconds, peak RSS), writes
``benchmarks/results/NAME.json`` with :func:`write` (the figures and the conditions they were
measured under) and renders its summary rows from that JSON with its ``rows(result)``. Heavy imports
stay inside the scripts' functions, so rendering needs the standard library alone, as this module
does (``gpu_check.py`` uses it on a bare GPU image).
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
LOAD_AT_START = round(os.getloadavg()[0], 2)
"""The machine's 1-minute load when the benchmark started (before its own work)."""

Row = tuple[str, str, str, str]
"""One summary row: (what is measured, on which input; ours; the peer; the ratio), Markdown cells."""


def parser(doc: str, name: str | None) -> argparse.ArgumentParser:
    """The script's flags: its docstring as ``--help``; for a script with results (``name``),
    ``--json`` (default ``results/NAME.json``)."""
    parsed = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if name:
        parsed.add_argument(
            "--json", type=Path, default=RESULTS / f"{name}.json", help="where the figures go"
        )
    return parsed


def require(*paths: Path) -> None:
    """Exit with one line naming the first input that is missing."""
    for path in paths:
        if not path.exists():
            sys.exit(f"benchmark input missing: {path} (the ../shared/data checkout next to the repository)")


def cpu_s() -> float:
    """CPU seconds (user + system) of this process and of the children it has waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def interleave(variants: dict[str, Callable[[int], object]], rounds: int, warmup: int = 0, sync=None) -> dict:
    """Call ``variant(i)`` of every variant in turn, for ``i`` in ``range(warmup + rounds)``; the wall
    and CPU seconds (children included) of each call after the warm-up, as ``{name: {"wall_s": [...],
    "cpu_s": [...]}}``. ``sync`` runs before and after each call (a device synchronisation)."""
    times, sync = {name: {"wall_s": [], "cpu_s": []} for name in variants}, sync or (lambda: None)
    for index in range(warmup + rounds):
        for name, call in variants.items():
            sync()
            wall, cpu = time.perf_counter(), cpu_s()
            call(index)
            sync()
            if index >= warmup:
                times[name]["wall_s"].append(time.perf_counter() - wall)
                times[name]["cpu_s"].append(cpu_s() - cpu)
    return times


def step_medians(times: dict, tokens: float) -> dict:
    """Per variant of :func:`interleave`'s ``times``: the median wall and CPU seconds of its steps,
    ``tokens`` (real tokens per step) over each, and every step's wall seconds."""
    found = {}
    for name, t in times.items():
        wall, cpu = statistics.median(t["wall_s"]), statistics.median(t["cpu_s"])
        found[name] = {"median_step_s": wall, "tokens_per_s": tokens / wall, "median_step_cpu_s": cpu}
        found[name] |= {"tokens_per_cpu_s": tokens / cpu, "step_s": t["wall_s"]}
    return found


@dataclass(frozen=True)
class Run:
    """A finished subprocess: wall and CPU seconds (its descendants included), peak RSS, output."""

    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    stdout: str


def run(command: list[str]) -> Run:
    """Run ``command`` from the repository root (on ``PYTHONPATH``); exit with its stderr's tail if it
    fails. CPU time and peak RSS are the kernel's (``os.wait4``: the child and the descendants it
    waited for), what ``/usr/bin/time -v`` reports."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
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
        return Run(wall_s, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.read().decode())


def pipelines(command: str, *extra: str, runner: str = "FnApiRunner", **flags) -> Run:
    """:func:`run` ``pipelines COMMAND`` with ``flags`` (``max_seq_length=128`` gives ``--max-seq-length
    128``; a list repeats the flag) and ``extra`` arguments."""
    args = [sys.executable, "-m", "pipelines.cli", command, "--runner", runner, *extra]
    for key, value in flags.items():
        for item in value if isinstance(value, list) else [value]:
            args += [f"--{key.replace('_', '-')}", str(item)]
    return run(args)


def make_shards(folder: Path, lengths: list[int]) -> list[Path]:
    """Real ``pipelines examples`` shards (train split, dupe factor 2) of the enwiki excerpt with the
    released bert-base-uncased vocabulary, one output per sequence length (about a minute each)."""
    require(WIKI_DUMP, VOCAB)
    pipelines("wikipedia", input=WIKI_DUMP, output=folder / "wiki", num_shards=4)
    pipelines("corpus", input=folder / "wiki", output=folder / "corpus", num_shards=2)
    for length in lengths:
        sizes = {"max_seq_length": length, "dupe_factor": 2, "num_shards": 4, "num_buckets": 8}
        pipelines(
            "examples",
            corpus=folder / "corpus",
            vocab=VOCAB,
            output=folder / f"seq{length}",
            split="train",
            **sizes,
        )
    return [folder / f"seq{length}" for length in lengths]


def machine() -> dict:
    """The CPU model, its cores (all, and those this process may use), the load at the start and now
    (the benchmark's own work included), Python's version."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    models = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
    return {
        "cpu": models[0] if models else platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "load_1m_start": LOAD_AT_START,
        "load_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
    }


def measured(command: str, machine_figures: dict, *packages: str) -> dict:
    """The ``conditions`` of a result: the command, the machine, the UTC date, ``packages``' versions."""
    versions = {}
    for package in packages:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "absent"
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    return {"command": command, "machine": machine_figures, "date": today, "versions": versions}


def write(path: Path, result: dict, *packages: str, rows: Callable[[dict], list[Row]] | None = None) -> None:
    """Print ``rows(result)`` and write ``result`` to ``path`` (JSON) with its conditions (:func:`measured`:
    the command line of this process, the machine at the end of the run, ``packages``' versions)."""
    print("\n".join(" | ".join(row) for row in (rows(result) if rows else [])))
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    conditions = measured(" ".join(["python", str(shown), *sys.argv[1:]]), machine(), *packages)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**result, "conditions": conditions}, indent=2) + "\n")
    print(f"wrote {path}")


def n(value: float, digits: int = 3) -> str:
    """A figure to ``digits`` significant digits, with thousands separators."""
    return f"{value:,.0f}" if value >= 10 ** (digits - 1) else f"{value:#.{digits}g}"


def x(ratio: float) -> str:
    """A ratio as the summary shows it, in bold."""
    return f"**{ratio:.2f}x**"


def conditions(result: dict) -> str:
    """How a result was measured, in words, from its recorded ``conditions``."""
    recorded = result.get("conditions")
    if not recorded:
        return "machine and load not recorded in the results file"
    m, said = recorded["machine"], f"`{recorded['command']}` on {recorded['date']}"
    if "cpu" in m:
        load = (
            f"load {m['load_1m_start']} at the start, {m['load_1m']} at the end"
            if "load_1m_start" in m
            else f"load {m['load_1m']}"
        )
        said += f": {m['cpu']}, {m['usable_cores']} of {m['cores']} cores usable, {load}"
    return said + (f", {m['gpu']}" if m.get("gpu") else "")
