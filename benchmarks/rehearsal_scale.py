"""The Dataflow rehearsal on a generated scale input: each worker's peak memory, and the local runner's shards.

    python benchmarks/rehearsal_scale.py --input DIR [--workers 2] [--stage all|wikipedia|books|corpus|wordpiece|examples]
        [--local-outputs DIR] [--compare] [--timeout-s 14400]

(``make dataflow-rehearsal INPUT=DIR [LOCAL=DIR] [WORKERS=2]``.) ``--input`` is a folder that
``benchmarks/scale_corpus.py`` made (``wiki/``, ``books/``, ``scale_corpus.json``); its dump, index
and books go to the rehearsal's bucket (``benchmarks/rehearsal/rehearse.py``: a GCS emulator, a job
service, an isolated worker pool), and the stages ``wikipedia``, ``books``, ``corpus``, ``wordpiece``
and ``examples`` run there with ``benchmarks/scale.py``'s command lines (the defaults; examples at
seq 128, dupe 5, and ``--spill always``: the job service keeps a shuffle in memory), each reading
the rehearsal's output of the stage before it, with ``--sdk_worker_parallelism`` = ``--workers``.

Measured per stage: wall time of the submitting command; each SDK worker's peak RSS (every worker
the pool started during the stage: a child of the pool's process, its own descendants summed,
sampled from ``/proc`` every 0.25 s); the peak RSS of the job service (which, standing in for
Dataflow's service, holds the shuffle), of the GCS emulator (holding the bucket in memory) and of the
submitting command (``wordpiece train`` learns there). Then whether the output is the local
runner's: ``--local-outputs`` is ``benchmarks/scale.py``'s ``out/`` folder for the same input
(``wiki``, ``books``, ``corpus``, ``vocab``, ``shards``): the manifests' shards, rejects, index and
vocabulary copy (each path, rows, bytes and SHA-256; not the parameters, which name the inputs)
must be equal, and ``vocab.txt`` byte-identical; ``--compare`` also runs the stage on FnApiRunner
over the same bucket inputs and compares every byte, as the rehearsal does. Results go to
``results/rehearsal_scale.json``; docs/scale.md renders them.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n

STAGES = ("wikipedia", "books", "corpus", "wordpiece", "examples")
LOCAL_FOLDERS = {
    "wikipedia": "wiki",
    "books": "books",
    "corpus": "corpus",
    "wordpiece": "vocab",
    "examples": "shards",
}
SAMPLE_S = 0.25
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
FOLDER = "gs://rehearsal/scale"
EXAMPLES_SPILL = ("--spill", "always")
READ = ("manifest.json", "vocab.txt")
"""The files of an output :func:`output_content` reads."""


def process_table() -> tuple[dict[int, list[int]], dict[int, int]]:
    """Every process of this machine now: the children of each process id, and each one's RSS in
    bytes (processes gone while reading, and zombies, left out)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                state, parent = f.read().rsplit(b")", 1)[1].split()[:2]
            if state == b"Z":  # a worker that ended and was not yet reaped by the pool
                continue
            with open(f"/proc/{entry}/statm", "rb") as f:
                rss[int(entry)] = int(f.read().split()[1]) * PAGE_BYTES
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(int(parent), []).append(int(entry))
    return children, rss


def tree_rss(children: dict[int, list[int]], rss: dict[int, int], root: int) -> int:
    """The RSS of ``root`` and all its descendants, summed (0 for a process not in ``rss``)."""
    total, queue, seen = 0, [root], set()
    while queue:
        pid = queue.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += rss.get(pid, 0)
        queue.extend(children.get(pid, []))
    return total


def child_trees_rss(children: dict[int, list[int]], rss: dict[int, int], root: int) -> dict[int, int]:
    """For each child of ``root`` (a worker pool: each child is a worker), its own tree's RSS."""
    return {child: tree_rss(children, rss, child) for child in children.get(root, [])}


class Peaks:
    """Samples, while the block runs, the peak RSS of each child tree of ``pool`` that started in the
    block (a worker of this stage's job) and of the trees of ``named`` processes; ``submitter``: the
    other children of this process (the stage's command)."""

    def __init__(self, pool: int, named: dict[str, int]):
        self.pool, self.named = pool, named
        self.workers: dict[int, int] = {}
        self.earlier: set[int] = set()  # workers of an earlier job, still ending when this one starts
        self.found = dict.fromkeys([*named, "submitter"], 0)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        children, rss = process_table()
        for pid, value in child_trees_rss(children, rss, self.pool).items():
            if pid not in self.earlier:
                self.workers[pid] = max(self.workers.get(pid, 0), value)
        for name, pid in self.named.items():
            self.found[name] = max(self.found[name], tree_rss(children, rss, pid))
        ours = set(self.named.values()) | {self.pool}
        submitter = sum(tree_rss(children, rss, c) for c in children.get(os.getpid(), []) if c not in ours)
        self.found["submitter"] = max(self.found["submitter"], submitter)

    def _run(self) -> None:
        while not self._done.wait(SAMPLE_S):
            self.sample()

    def __enter__(self) -> Peaks:
        self.earlier = set(process_table()[0].get(self.pool, []))
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def figures(self) -> dict:
        """Peaks in MB: ``workers`` (one per worker, in the order they started), then the named trees."""
        mb = lambda b: round(b / 1e6, 1)  # noqa: E731
        found = {"workers_peak_rss_mb": [mb(self.workers[pid]) for pid in sorted(self.workers)]}
        return found | {f"{name}_peak_rss_mb": mb(value) for name, value in self.found.items()}


def output_content(files: dict[str, bytes], source: str) -> dict:
    """What must be equal between two runners' outputs of one stage: a vocabulary's ``vocab.txt``
    bytes, or the manifest's shards, rejects, index and vocabulary copy (paths, rows, sizes, SHA-256;
    the parameters name the inputs and differ), by name."""
    from schemas.manifest import MANIFEST_FILE, Manifest

    if MANIFEST_FILE not in files:
        return {"vocab.txt": files.get("vocab.txt")}
    manifest = Manifest.from_json(files[MANIFEST_FILE].decode(), source)
    found = {"format": manifest.format, "index": manifest.index, "vocab_file": manifest.vocab_file}
    return found | {entry.path: entry for entry in (*manifest.shards, *manifest.rejects)}


def differing(ours: dict, theirs: dict) -> list[str]:
    """The parts of :func:`output_content` that differ, by name."""
    return [name for name in sorted(ours.keys() | theirs.keys()) if ours.get(name) != theirs.get(name)]


def same_rows(ours: bytes, theirs: bytes, origins: dict[str, str]) -> bool:
    """Whether two Arrow shards hold the same rows once ``theirs``' ``origin`` column (the input
    file a row came from, as the command was given it) has each prefix in ``origins`` replaced."""
    import pyarrow as pa

    tables = [pa.ipc.open_file(pa.BufferReader(data)).read_all() for data in (ours, theirs)]
    if tables[0].schema != tables[1].schema or "origin" not in tables[1].schema.names:
        return False

    def moved(origin: str | None) -> str | None:
        prefix = next((p for p in origins if origin and origin.startswith(p)), None)
        return origins[prefix] + origin[len(prefix) :] if prefix else origin

    index = tables[1].schema.get_field_index("origin")
    field = tables[1].schema.field(index)  # its type and nullability kept
    column = pa.array([moved(o) for o in tables[1]["origin"].to_pylist()], field.type)
    theirs_moved = tables[1].set_column(index, field, column)
    return tables[0].equals(theirs_moved)


def compare_local(rehearsal, output: str, folder: Path, origins: dict[str, str]) -> dict:
    """``same_as_local`` for the rehearsal's ``output`` and the local ``folder``: equal parts, or
    shards whose rows are the same once their ``origin`` names the same input (``origin_only``
    counts those); else ``local_difference`` says which parts differ."""
    bucket = output.removeprefix("gs://")
    kept = {
        name: rehearsal.fs.cat_file(f"{bucket}/{name}")
        for name in READ
        if rehearsal.fs.exists(f"{bucket}/{name}")
    }
    ours, theirs = output_content(kept, output), output_content(local_files(folder), str(folder))
    parts, origin_only = differing(ours, theirs), []
    for part in parts:
        mine, local = ours.get(part), theirs.get(part)
        if hasattr(mine, "split") and hasattr(local, "split") and mine.num_rows == local.num_rows:
            data = rehearsal.fs.cat_file(f"{bucket}/{part}")
            if same_rows(data, (folder / part).read_bytes(), origins):
                origin_only.append(part)
    left = [p for p in parts if p not in origin_only]
    found = {"same_as_local": not left, "origin_only_shards": len(origin_only)}
    if left:
        more = f" and {len(left) - 3:,} more" if len(left) > 3 else ""
        found["local_difference"] = (
            f"{len(left):,} of {len(ours | theirs):,} parts differ: {', '.join(left[:3])}{more}"
        )
    return found


def local_files(folder: Path) -> dict[str, bytes]:
    """The files :func:`output_content` reads of a local output folder."""
    return {
        name: (folder / name).read_bytes()
        for name in ("manifest.json", "vocab.txt")
        if (folder / name).is_file()
    }


def stage_args(name: str, output: str) -> list[str]:
    """``benchmarks/scale.py``'s command line of stage ``name`` over the bucket's copy of the input,
    the stage before's rehearsal output, writing ``output`` (the command's arguments, not the tool)."""
    from benchmarks import scale

    stage = next(s for s in scale.STAGES if s.name == name)
    args = stage.command(FOLDER)[3:]  # after `python -m pipelines.cli` / `wordpiece.cli`
    args[args.index("--output") + 1] = output
    # The job service standing in for Dataflow's shuffle holds every grouped value in memory: the
    # examples' documents and examples would not fit this machine, their references do.
    return [*args, *EXAMPLES_SPILL] if name == "examples" else args


def check_folders(input_dir: Path, local: Path | None, stages: list[str]) -> str | None:
    """What is missing from the input or the local outputs (one line), or None."""
    for needed in ("scale_corpus.json", "wiki", "books"):
        if not (input_dir / needed).exists():
            return f"--input {input_dir}: no {needed} (give a folder benchmarks/scale_corpus.py made)"
    if not list((input_dir / "wiki").glob("*-multistream.xml.bz2")):
        return f"--input {input_dir}: no wiki/*-multistream.xml.bz2"
    for stage in stages if local else []:
        folder = local / LOCAL_FOLDERS[stage]
        if not (folder / ("vocab.txt" if stage == "wordpiece" else "COMPLETED")).is_file():
            return f"--local-outputs {local}: {folder} is not a completed output (benchmarks/scale.py's out/ folder)"
    return None


def upload_input(rehearsal, input_dir: Path) -> None:
    """The dump, its index and the books into ``FOLDER/input/`` (as ``gcloud storage cp`` would)."""
    for part, pattern in (("wiki", "*.bz2"), ("books", "*.txt")):
        rehearsal.upload(sorted((input_dir / part).glob(pattern)), f"scale/input/{part}")


def run_stage(
    rehearsal, name: str, local: Path | None, origins: dict[str, str], compare: bool, timeout_s: float
) -> dict:
    """One stage on the rehearsal, its peaks sampled; compared with the local output and FnApiRunner."""
    output = f"{FOLDER}/out/{LOCAL_FOLDERS[name]}"
    named = {"job_service": rehearsal.job_service.pid, "emulator": rehearsal.emulator.pid}
    with Peaks(rehearsal.pool.pid, named) as peaks:
        result = rehearsal.run(name, stage_args(name, output), timeout_s=timeout_s)
    found = {"exit_code": result.exit_code, "wall_s": round(result.seconds, 1), **peaks.figures()}
    found["line"] = result.line()
    if result.exit_code:
        found["output_tail"] = result.output[-3000:]
        return found
    if local is not None:
        found |= compare_local(rehearsal, output, local / LOCAL_FOLDERS[name], origins)
    if compare:
        reference = f"gs://rehearsal/fnapi/{name}"
        expected = rehearsal.run(name, stage_args(name, reference), runner="FnApiRunner", timeout_s=timeout_s)
        found["same_as_fnapi"] = expected.exit_code == 0 and rehearsal.files(output) == rehearsal.files(
            reference
        )
    return found


def report_line(name: str, s: dict) -> str:
    verdict = "ok" if s["exit_code"] == 0 else f"exit {s['exit_code']}"
    workers = " / ".join(f"{mb:,.0f}" for mb in s["workers_peak_rss_mb"]) or "none seen"
    same = [
        f"{'same as' if s[key] else 'DIFFERS from'} {what}"
        for key, what in (("same_as_local", "the local runner"), ("same_as_fnapi", "FnApiRunner"))
        if key in s
    ]
    return (
        f"{name:10s} {verdict:7s} {s['wall_s']:7.1f} s; workers' peak RSS {workers} MB; job service "
        f"{s['job_service_peak_rss_mb']:,.0f} MB{''.join('; ' + x for x in same)}"
        f"{' (' + s['local_difference'] + ')' if 'local_difference' in s else ''}: {s['line']}"
    )


def main() -> int:
    parser = harness.parser(__doc__, "rehearsal_scale")
    parser.add_argument("--input", type=Path, required=True, help="a folder benchmarks/scale_corpus.py made")
    parser.add_argument("--workers", type=int, default=2, help="SDK worker processes in the pool")
    parser.add_argument("--stage", default="all", choices=("all", *STAGES), help="run up to this stage")
    parser.add_argument(
        "--local-outputs", type=Path, help="benchmarks/scale.py's out/ folder for the same input"
    )
    parser.add_argument(
        "--compare", action="store_true", help="also run on FnApiRunner and compare the bytes"
    )
    parser.add_argument(
        "--timeout-s", type=float, default=4 * 3600, help="the most one stage's command may take"
    )
    args = parser.parse_args()
    stages = list(STAGES if args.stage == "all" else STAGES[: STAGES.index(args.stage) + 1])
    problem = check_folders(args.input, args.local_outputs, stages)
    if problem or args.workers < 1:
        parser.exit(2, f"error: {problem or f'--workers {args.workers}: at least 1'}\n")
    from benchmarks.rehearsal.rehearse import Rehearsal

    made = json.loads((args.input / "scale_corpus.json").read_text())
    origins = {f"{args.input.resolve()}/": f"{FOLDER}/input/"}  # where the local run read the same files
    result = {
        "input": {k: made[k] for k in ("mb", "seed", "text_bytes")},
        "workers": args.workers,
        "stages": {},
    }
    try:
        with Rehearsal(args.workers) as rehearsal:
            upload_input(rehearsal, args.input)
            for name in stages:
                found = run_stage(rehearsal, name, args.local_outputs, origins, args.compare, args.timeout_s)
                result["stages"][name] = found
                print(report_line(name, found), flush=True)
                if found["exit_code"]:
                    print(found["output_tail"], file=sys.stderr)
                    break
    except RuntimeError as err:
        parser.exit(1, f"error: {err}\n")
    harness.write(args.json, result, rows=rows)
    failed = [
        s
        for s in result["stages"].values()
        if s["exit_code"] or False in (s.get("same_as_local"), s.get("same_as_fnapi"))
    ]
    return 1 if failed or len(result["stages"]) < len(stages) else 0


def local(name: str, s: dict) -> str:
    """The comparison with the local runner's output of the same input, in words."""
    peer = "the local runner's (`benchmarks/scale.py`, same input)"
    if name == "wordpiece":
        return f"vocab.txt {'the same as' if s['same_as_local'] else '**differs** from'} {peer}"
    if not s["same_as_local"]:
        return f"**differs** from {peer}: {s['local_difference']}"
    count = s.get("origin_only_shards")
    moved = f"; {count} of them differ in bytes only by `origin`, the input file's location (here the bucket's copy)"
    return f"the same shards as {peer}{moved if count else ''}"


COMMANDS = {"wordpiece": "wordpiece train", **{s: f"pipelines {s}" for s in STAGES if s != "wordpiece"}}


def rows(r: dict) -> list[Row]:
    """One row per stage: wall time and each worker's peak RSS; whether the output is the local runner's."""
    mb = sum(r["input"]["text_bytes"].values()) / 1e6
    found = []
    for name, s in r["stages"].items():
        workers = " / ".join(f"{x:,.0f}" for x in s["workers_peak_rss_mb"]) or "none seen:"
        ours = (
            f"{'wall ' + n(s['wall_s']) + ' s' if not s['exit_code'] else '**failed**: ' + s['line']}; peak RSS of "
            f"each worker {workers} MB (job service {s['job_service_peak_rss_mb']:,.0f} MB, submitting command "
            f"{s['submitter_peak_rss_mb']:,.0f} MB)"
        )
        same = [local(name, s)] if "same_as_local" in s else []
        if "same_as_fnapi" in s:
            same.append(
                "the same bytes as FnApiRunner's" if s["same_as_fnapi"] else "**differs** from FnApiRunner's"
            )
        found.append(
            (
                f"`{COMMANDS[name]}` on the Dataflow rehearsal, {r['workers']} isolated workers, {n(mb)} MB of "
                "generated text",
                ours,
                "; ".join(same) or "output not compared",
                "—",
            )
        )
    return found


if __name__ == "__main__":
    sys.exit(main())
