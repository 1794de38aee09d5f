"""Every stage of the data path at three input sizes spanning 100x, on one machine with the defaults.

    python benchmarks/scale.py [--sizes 20 200 2000] [--work /tmp/scale] [--stages NAME ...]
    python benchmarks/scale.py --plot-only     # docs/scale.png again from results/scale.json

For each size (MB of text) ``benchmarks/scale_corpus.py`` makes the input under ``--work`` (not
timed; kept there and reused by a later run with the same size and seed), then each stage runs as a
user would run it on one machine: the commands' defaults, Beam's local runner, one after the other:

    pipelines wikipedia --input wiki/*-multistream.xml.bz2 --output wiki    (3/4 of the text)
    pipelines books --input 'books/*.txt' --output books                    (1/4 of the text)
    pipelines corpus --input wiki --input books --output corpus
    pipelines text --input 'text/*.txt' --output text                       (the same text, reference format)
    wordpiece train --corpus corpus --output vocab
    pipelines examples --corpus corpus --vocab vocab/vocab.txt --output shards \\
        --max-seq-length 128 --max-predictions-per-seq 20 --dupe-factor 5
    reader: pretrain.data.ExampleShards over the shards, every batch of one epoch (batch 256)

Each command is a child process with ``TMPDIR`` set to its own folder. Measured: wall time; CPU
time (user + system, the kernel's figure for the child and the processes it waited for); peak RSS of
the whole process tree (the RSS of the child and all its descendants, summed, sampled from ``/proc``
every 0.2 s; Beam's local runner may start worker processes); peak temporary disk (``TMPDIR`` and
the output's ``.temp`` folder, sampled every second); output bytes. Per MB of the stage's input text,
and the ratios: peak memory largest / smallest size, time per MB largest / middle. For the corpus
stage its ``stats.json``'s largest groups (documents sharing an id, documents in one MinHash band
bucket). Results go to ``results/scale.json`` and ``docs/scale.png`` (memory and time against input
size); ``docs/scale.md`` renders them with the full-size estimate.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n

SIZES_MB = (20, 200, 1000)
SAMPLE_S = 0.2
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
PLOT = harness.ROOT / "docs" / "scale.png"
FULL_TEXT_MB = {"wiki": 14_000, "books": 5_000, "all": 19_000}
"""The full BERT corpus, MB of clean text: English Wikipedia about 14 GB, a BooksCorpus-size
collection about 5 GB (docs/scale.md)."""
DATAFLOW_VCPUS = {"wikipedia": 128, "books": 32, "corpus": 64, "wordpiece": 64, "examples": 128}
"""The vCPUs of each stage's Dataflow job in docs/scale.md (n1-standard-4 workers)."""
ALTERNATIVES = {"text": "instead of wikipedia, books and corpus, for text in the reference format"}
STARTUP_H, PRICE = 0.1, 0.07
"""Assumed: a Dataflow job's worker start-up and shut-down (hours), and dollars per vCPU-hour."""
CLI = [sys.executable, "-m", "pipelines.cli"]


@dataclass(frozen=True)
class Stage:
    """One measured command: its name, the text it reads (``wiki``, ``books`` or ``all``), its
    command line from the size's folder, and the output folder it writes (relative)."""

    name: str
    reads: str
    output: str
    argv: tuple[str, ...]

    def command(self, folder: Path) -> list[str]:
        return [a.format(folder=folder) for a in self.argv]


STAGES = (
    Stage(
        "wikipedia",
        "wiki",
        "out/wiki",
        (
            *CLI,
            "wikipedia",
            "--input",
            "{folder}/input/wiki/*-multistream.xml.bz2",
            "--output",
            "{folder}/out/wiki",
        ),
    ),
    Stage(
        "books",
        "books",
        "out/books",
        (*CLI, "books", "--input", "{folder}/input/books/*.txt", "--output", "{folder}/out/books"),
    ),
    Stage(
        "corpus",
        "all",
        "out/corpus",
        (
            *CLI,
            "corpus",
            "--input",
            "{folder}/out/wiki",
            "--input",
            "{folder}/out/books",
            "--output",
            "{folder}/out/corpus",
        ),
    ),
    Stage(
        "text",
        "all",
        "out/text",
        (*CLI, "text", "--input", "{folder}/input/text/*.txt", "--output", "{folder}/out/text"),
    ),
    Stage(
        "wordpiece",
        "all",
        "out/vocab",
        (
            sys.executable,
            "-m",
            "wordpiece.cli",
            "train",
            "--corpus",
            "{folder}/out/corpus",
            "--output",
            "{folder}/out/vocab",
        ),
    ),
    Stage(
        "examples",
        "all",
        "out/shards",
        (
            *CLI,
            "examples",
            "--corpus",
            "{folder}/out/corpus",
            "--vocab",
            "{folder}/out/vocab/vocab.txt",
            "--output",
            "{folder}/out/shards",
            "--max-seq-length",
            "128",
            "--max-predictions-per-seq",
            "20",
            "--dupe-factor",
            "5",
        ),
    ),
    Stage(
        "reader", "all", "", (sys.executable, str(Path(__file__).resolve()), "--read", "{folder}/out/shards")
    ),
)


def tree_rss_bytes(root: int) -> int:
    """The RSS of ``root`` and all its descendants, summed (0 for processes gone meanwhile)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    parents.setdefault(int(f.read().rsplit(b")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    total, queue = 0, [root]
    while queue:
        pid = queue.pop()
        queue.extend(parents.get(pid, []))
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE_BYTES
        except (OSError, IndexError, ValueError):
            continue
    return total


def folder_bytes(*folders: Path) -> int:
    """Bytes of the files under ``folders`` (those gone meanwhile not counted)."""
    total = 0
    for folder in folders:
        for root, _, files in os.walk(folder):
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    continue
    return total


def measure(command: list[str], temp: Path, output: Path | None, log: Path) -> dict:
    """Run ``command`` (``TMPDIR`` = ``temp``, its output to ``log``.out and .err) and sample it: wall
    and CPU seconds, peak RSS of its process tree, peak temporary bytes, output bytes; exit with its
    standard error's tail if it fails."""
    temp.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "TMPDIR": str(temp),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(harness.ROOT), os.environ.get("PYTHONPATH")])),
    }
    peaks, done = {"rss": 0, "temp": 0}, threading.Event()
    temp_folders = [temp, *([output / ".temp"] if output else [])]
    log.parent.mkdir(parents=True, exist_ok=True)
    stdout, stderr = log.with_suffix(".out"), log.with_suffix(".err")
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=harness.ROOT, env=env, stdout=out, stderr=err)

        def sample() -> None:
            ticks = 0
            while not done.wait(SAMPLE_S):
                peaks["rss"] = max(peaks["rss"], tree_rss_bytes(process.pid))
                if ticks % 5 == 0:
                    peaks["temp"] = max(peaks["temp"], folder_bytes(*temp_folders))
                ticks += 1

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        wall_s = time.perf_counter() - start
        done.set()
        sampler.join()
    if os.waitstatus_to_exitcode(status):
        tail = stderr.read_text(errors="replace")[-3000:]
        sys.exit(f"{' '.join(command)} failed (exit status {os.waitstatus_to_exitcode(status)}):\n{tail}")
    return {
        "wall_s": round(wall_s, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mb": round(max(peaks["rss"], usage.ru_maxrss * 1024) / 1e6, 1),
        "peak_temp_mb": round(peaks["temp"] / 1e6, 1),
        "output_mb": round(folder_bytes(output) / 1e6, 2) if output else 0.0,
        "stdout": stdout.read_text(errors="replace")[-2000:],
    }


def make_input(folder: Path, mb: float, seed: int) -> dict:
    """The size's generated input (made now unless ``folder/input`` holds it for ``mb`` and ``seed``)."""
    made = folder / "input" / "scale_corpus.json"
    if made.exists():
        found = json.loads(made.read_text())
        if (found["mb"], found["seed"]) == (mb, seed):
            return found
    shutil.rmtree(folder / "input", ignore_errors=True)
    generator = [sys.executable, str(Path(__file__).with_name("scale_corpus.py")), "--mb", str(mb)]
    harness.run([*generator, "--output", str(folder / "input"), "--seed", str(seed)])
    return json.loads(made.read_text())


def stage_figures(stage: Stage, folder: Path, stdout: str) -> dict:
    """What the stage made, from its ``stats.json`` (the reader: from its standard output)."""
    if stage.name == "reader":
        return json.loads(stdout.strip().splitlines()[-1])
    stats = json.loads((folder / stage.output / "stats.json").read_text())
    if stage.name == "examples":
        return {"examples": stats["examples"], "tokens": stats["tokens"]}
    if stage.name == "wordpiece":
        return {key: stats[key] for key in ("distinct_words", "words", "words_kept") if key in stats}
    found = {
        "records_in": stats["records_in"],
        "documents_out": stats["documents_out"],
        "words": stats["words"],
    }
    for key in ("dropped", "rejected"):
        found[key] = stats[key]
    for key in ("largest_id_group", "largest_band_bucket"):
        if key in stats:
            found[key] = stats[key]
    return found


def run_size(folder: Path, mb: float, seed: int, stages: list[str]) -> dict:
    """Every stage of ``stages`` on the size's input, in order; their figures."""
    made = make_input(folder, mb, seed)
    text_mb = {"wiki": made["text_bytes"]["wiki"] / 1e6, "books": made["text_bytes"]["books"] / 1e6}
    text_mb["all"] = text_mb["wiki"] + text_mb["books"]
    found = {}
    for stage in STAGES:
        if stage.name not in stages:
            continue
        output = folder / stage.output if stage.output else None
        if output is not None:
            shutil.rmtree(output, ignore_errors=True)
        temp = folder / "tmp" / stage.name
        shutil.rmtree(temp, ignore_errors=True)
        figures = measure(stage.command(folder), temp, output, folder / "logs" / stage.name)
        shutil.rmtree(temp, ignore_errors=True)
        figures["input_mb"] = round(text_mb[stage.reads], 2)
        figures.update(stage_figures(stage, folder, figures.pop("stdout")))
        found[stage.name] = figures
        print(
            f"{mb:g} MB: {stage.name}: {figures['wall_s']:,.1f} s wall, {figures['cpu_s']:,.1f} s CPU, "
            f"peak RSS {figures['peak_rss_mb']:,.0f} MB, temporary {figures['peak_temp_mb']:,.0f} MB",
            flush=True,
        )
    return {"mb": mb, "input": made, "stages": found}


def ratios(sizes: list[dict]) -> dict:
    """Per stage: peak RSS largest / smallest size, wall and CPU seconds per MB largest / middle."""
    found = {}
    for name in sizes[0]["stages"]:
        runs = [s["stages"][name] for s in sizes if name in s["stages"]]
        if len(runs) < 2:
            continue
        last, before = runs[-1], runs[-2]
        found[name] = {
            "memory": round(last["peak_rss_mb"] / runs[0]["peak_rss_mb"], 3),
            "wall_per_mb": round(
                (last["wall_s"] / last["input_mb"]) / (before["wall_s"] / before["input_mb"]), 3
            ),
            "cpu_per_mb": round(
                (last["cpu_s"] / last["input_mb"]) / (before["cpu_s"] / before["input_mb"]), 3
            ),
        }
    return found


def read_shards(url: str) -> None:
    """The reader stage: one epoch of the shards through ``pretrain.data.ExampleShards`` (batch 256)."""
    from pretrain.data import ExampleShards

    batches = examples = 0
    for batch in ExampleShards(url, batch_size=256, seed=0, drop_last=False):
        batches += 1
        examples += int(batch["input_ids"].shape[0])
    print(json.dumps({"batches": batches, "examples": examples}))


def main() -> None:
    parser = harness.parser(__doc__, "scale")
    parser.add_argument("--sizes", type=float, nargs="+", default=list(SIZES_MB), help="MB of text")
    parser.add_argument("--work", type=Path, default=Path("/tmp/scale"), help="inputs and outputs (kept)")
    parser.add_argument(
        "--stages", nargs="+", choices=[s.name for s in STAGES], default=[s.name for s in STAGES]
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plot-only", action="store_true", help="draw docs/scale.png from the results")
    parser.add_argument("--read", help=argparse_hidden())
    args = parser.parse_args()
    if args.read:
        return read_shards(args.read)
    plot_path = PLOT if args.json == harness.RESULTS / "scale.json" else args.json.with_suffix(".png")
    if args.plot_only:
        return plot(json.loads(args.json.read_text()), plot_path)
    if args.work.resolve().is_relative_to(harness.ROOT):
        sys.exit(f"--work {args.work}: inside the repository; give a folder under /tmp")
    sizes = [run_size(args.work / f"{mb:g}mb", mb, args.seed, args.stages) for mb in sorted(args.sizes)]
    result = {"stages": args.stages, "sizes": sizes, "ratios": ratios(sizes)}
    harness.write(args.json, result, rows=rows)
    plot(result, plot_path)


def _runs(r: dict, name: str) -> list[tuple[dict, dict]]:
    return [(size, size["stages"][name]) for size in r["sizes"] if name in size["stages"]]


def _mb(value: float) -> str:
    return f"{value / 1000:,.2f} GB" if value >= 1000 else f"{n(value)} MB"


def rows(r: dict) -> list[Row]:
    """One row per stage: peak memory and time at each size, the ratios."""
    found = []
    for name, ratio in r["ratios"].items():
        runs = _runs(r, name)
        sizes = " / ".join(_mb(run["input_mb"]) for _, run in runs)
        memory = " / ".join(f"{run['peak_rss_mb']:,.0f}" for _, run in runs)
        wall = " / ".join(f"{run['wall_s']:,.0f}" for _, run in runs)
        per_mb = " / ".join(f"{run['cpu_s'] / run['input_mb']:.2f}" for _, run in runs)
        found.append(
            (
                f"`{name}` at {len(runs)} sizes, {sizes} of text, one machine, the defaults (local runner)",
                f"peak RSS {memory} MB; wall {wall} s; {per_mb} CPU-s per MB",
                "—",
                f"memory **{ratio['memory']:.2f}x** largest / smallest; time per MB **{ratio['wall_per_mb']:.2f}x** "
                f"wall, {ratio['cpu_per_mb']:.2f}x CPU largest / middle",
            )
        )
    return found


def stages_table(r: dict) -> list[str]:
    """Every stage at every size."""
    lines = [
        "| stage | text | wall | CPU | peak RSS | peak temporary disk | output | wall per MB | CPU per MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in r["stages"]:
        for _, run in _runs(r, name):
            mb = run["input_mb"]
            lines.append(
                f"| {name} | {_mb(mb)} | {run['wall_s']:,.1f} s | {run['cpu_s']:,.1f} s | {run['peak_rss_mb']:,.0f} MB "
                f"| {run['peak_temp_mb']:,.0f} MB | {run['output_mb']:,.1f} MB | {run['wall_s'] / mb:.3f} s "
                f"| {run['cpu_s'] / mb:.3f} s |"
            )
    return lines


def inputs_table(r: dict) -> list[str]:
    """What the generator made at each size, and what `pipelines corpus` kept of it."""
    lines = [
        "| text | pages (articles) | books | words | distinct words | Heaps K, beta past the real text | "
        "corpus: documents in, exact / near duplicates dropped | largest id group, band bucket |",
        "|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for size in r["sizes"]:
        made, heaps = size["input"], size["input"]["heaps"]["generated"]
        corpus = size["stages"].get("corpus", {})
        dropped = corpus.get("dropped", {})
        kept = (
            f"{corpus['records_in']:,}, {dropped.get('exact_duplicate', 0):,} / {dropped.get('near_duplicate', 0):,}"
            if corpus
            else "—"
        )
        # stats.json counts an id group only when it dropped exact duplicates: otherwise each holds one.
        groups = (
            f"{corpus.get('largest_id_group', 1)}, {corpus.get('largest_band_bucket', '—')}"
            if corpus
            else "—"
        )
        lines.append(
            f"| {_mb(sum(made['text_bytes'].values()) / 1e6)} | {made['pages']:,} ({made['articles']:,}) "
            f"| {made['books']:,} | {heaps['words']:,} | {heaps['distinct']:,} | {heaps['K']}, {heaps['beta']} "
            f"| {kept} | {groups} |"
        )
    real = r["sizes"][0]["input"]["heaps"]["real"]
    lines.append(
        f"| the real excerpt | 206 (106) | 8 | {real['words']:,} | {real['distinct']:,} | {real['K']}, {real['beta']} | | |"
    )
    return lines


def estimate_table(r: dict) -> list[str]:
    """The full BERT corpus on this machine and on Dataflow, from the largest size's rates."""
    lines = [
        "| stage | text | CPU per MB at the largest size | core-hours | this machine, wall per MB x MB "
        "| peak RSS | Dataflow: vCPUs, wall | Dataflow workers' cost |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    totals = [0.0, 0.0, 0.0]  # core-hours, hours here, dollars
    for stage in STAGES:
        runs = _runs(r, stage.name)
        if not runs:
            continue
        run, full = runs[-1][1], FULL_TEXT_MB[stage.reads]
        cpu, wall = run["cpu_s"] / run["input_mb"], run["wall_s"] / run["input_mb"]
        core_h, wall_h = full * cpu / 3600, full * wall / 3600
        vcpus = DATAFLOW_VCPUS.get(stage.name)
        dataflow, cost = ALTERNATIVES.get(stage.name, "— (on the trainer's machines)"), 0.0
        if vcpus:
            cost = (core_h + STARTUP_H * vcpus) * PRICE
            dataflow = f"{vcpus}: {core_h:,.1f} / {vcpus} + {STARTUP_H} = {core_h / vcpus + STARTUP_H:,.2f} h"
        if stage.name not in ALTERNATIVES:
            totals = [totals[0] + core_h, totals[1] + wall_h, totals[2] + cost]
        lines.append(
            f"| {stage.name} | {full:,} MB | {cpu:.3f} s | {full:,} x {cpu:.3f} / 3600 = **{core_h:,.1f}** "
            f"| {full:,} x {wall:.3f} / 3600 = **{wall_h:,.1f} h** | {run['peak_rss_mb']:,.0f} MB | {dataflow} "
            + (f"| ({core_h:,.1f} + {STARTUP_H} x {vcpus}) x {PRICE} = ${cost:,.2f} |" if vcpus else "| — |")
        )
    lines.append(
        f"| **all** (but `text`) | | | **{totals[0]:,.1f}** | **{totals[1]:,.1f} h** ({totals[1] / 24:,.1f} days) | | "
        f"| **${totals[2]:,.2f}** |"
    )
    return lines


TABLES = {"stages": stages_table, "inputs": inputs_table, "estimate": estimate_table}


def plot(r: dict, path: Path) -> None:
    """Peak RSS and CPU seconds per MB of every stage against the input size (log x), as a PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4), dpi=100)
    FigureCanvasAgg(figure)
    memory, time_axes = figure.subplots(1, 2)
    for name in r["stages"]:
        runs = [run for _, run in _runs(r, name)]
        sizes = [run["input_mb"] for run in runs]
        memory.plot(sizes, [run["peak_rss_mb"] for run in runs], marker="o", label=name)
        time_axes.plot(sizes, [run["cpu_s"] / run["input_mb"] for run in runs], marker="o", label=name)
    for axes, label in (
        (memory, "peak RSS of the process tree (MB)"),
        (time_axes, "CPU seconds per MB of text"),
    ):
        axes.set_xscale("log")
        axes.set_xlabel("input (MB of text)")
        axes.set_ylabel(label)
        axes.set_ylim(bottom=0)
        axes.grid(True, alpha=0.3)
    memory.legend(fontsize=8)
    figure.suptitle("Every stage on one machine, the defaults (benchmarks/results/scale.json)")
    figure.tight_layout()
    figure.savefig(path, format="png", metadata={"Software": None})
    print(f"wrote {path}")


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
