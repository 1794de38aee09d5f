"""The peers' ratios again at scale, on an input of ``benchmarks/scale_corpus.py``, each peer watched.

    python benchmarks/peers_at_scale.py --scale-input /tmp/scale/200mb/input --peer wordpiece \\
        [--peer examples] [--peer wikipedia] [--work /tmp/peers] [--memory-limit-gb 10] [--time-limit-min 25]

A 5 MB input hides what decides a choice at scale: start-up costs weigh on the ratios, and the peers'
memory has not yet grown. Here each peer runs for real, as its users run it, on the input that
``scale.py`` measures every stage on (``--scale-input``: the folder ``scale_corpus.py`` wrote, with
wiki/, books/, text/ and scale_corpus.json), beside our whole command on the same files:

    wordpiece   ours: ``wordpiece train`` (counting + learning) on ``pipelines text``'s output of text/*.txt;
                peer: tokenizers' ``BertWordPieceTokenizer.train`` reading text/*.txt (its Rust trainer)
    examples    ours: ``pipelines text`` + ``pipelines examples`` (seq 128, 20 predictions, dupe 5);
                peer: google-research/bert's create_pretraining_data.py (bert-tensorflow 1.0.4, the
                ``.venv-reference`` of ``examples.py``) on text/*.txt; both with bert-base-uncased's vocab
    wikipedia   ours: ``pipelines wikipedia`` on wiki/*-multistream.xml.bz2; peer: WikiExtractor 3.1.0
                (``.venv-wikiextractor``, ``--processes 1``) on the same dump

Every command (ours too) is a child process watched every 0.5 s: the RSS of its whole process tree
(``/proc``, as ``scale.py``), killed with its process group past ``--memory-limit-gb`` or
``--time-limit-min``; a killed run is recorded as killed (at what RSS, after how long, how many bytes
it had read, and its log's last milestone), never retried with a smaller input. CPU seconds (user +
system of the child and the processes it waited for) are the primary figure, since the machine may
be shared: its load is recorded with each run. Each run goes into ``results/peers_at_scale.json``
beside those of earlier invocations (the same peer on the same input size is replaced).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n, x
from benchmarks.scale import tree_rss_bytes

PEERS = ("wordpiece", "examples", "wikipedia")
POLL_S = 0.5
VOCAB_SIZE = 30_522
SEED = 12345
CLI = [sys.executable, "-m", "pipelines.cli"]
WX_PY = harness.ROOT / ".venv-wikiextractor" / "bin" / "python"
MILESTONES = (
    ("*** Reading from input files ***", "reading, tokenizing and making instances in memory"),
    ("*** Writing to output files ***", "writing the instances"),
    ("total instances", "finished writing"),
)
"""create_pretraining_data.py's log lines, in order, and the phase each begins."""


@dataclass(frozen=True)
class Watched:
    """A watched child: ``finished``, ``failed`` (its own non-zero exit) or ``killed: memory`` /
    ``killed: time`` (by the watchdog); its wall and CPU seconds, the peak RSS of its process tree,
    the bytes it had read (``/proc/PID/io``'s rchar, its own reads only) and its exit status."""

    outcome: str
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    read_mb: float
    exit_status: int


def read_bytes(pid: int) -> int:
    """``rchar`` of ``/proc/PID/io``: bytes the process has read so far (0 when unreadable)."""
    try:
        with open(f"/proc/{pid}/io", "rb") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(b"rchar:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return 0


def watch(command: list[str], log: Path, memory_limit_mb: float, time_limit_s: float) -> Watched:
    """Run ``command`` from the repository root in its own process group (standard output and
    error to ``log``), sampling its process tree's RSS every :data:`POLL_S`; kill the group past
    ``memory_limit_mb`` or ``time_limit_s``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(harness.ROOT), os.environ.get("PYTHONPATH")])),
    }
    log.parent.mkdir(parents=True, exist_ok=True)
    peak = read = 0
    outcome = ""
    with open(log, "wb") as out:
        start = time.perf_counter()
        process = subprocess.Popen(
            command, cwd=harness.ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            rss, read = tree_rss_bytes(process.pid), max(read, read_bytes(process.pid))
            peak = max(peak, rss)
            if not outcome and rss > memory_limit_mb * 1e6:
                outcome = "killed: memory"
            elif not outcome and time.perf_counter() - start > time_limit_s:
                outcome = "killed: time"
            if outcome:
                os.killpg(process.pid, signal.SIGKILL)
            time.sleep(POLL_S)
        wall_s = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    outcome = outcome or ("failed" if process.returncode else "finished")
    cpu_s = usage.ru_utime + usage.ru_stime
    peak = max(peak, usage.ru_maxrss * 1024)
    return Watched(
        outcome,
        round(wall_s, 2),
        round(cpu_s, 2),
        round(peak / 1e6, 1),
        round(read / 1e6, 1),
        process.returncode,
    )


def milestone(log_text: str) -> str:
    """The phase create_pretraining_data.py had reached, from its log (:data:`MILESTONES`)."""
    reached = "starting (TensorFlow imported, no input read yet)"
    for line, phase in MILESTONES:
        if line in log_text:
            reached = phase
    return reached


@dataclass(frozen=True)
class Job:
    """Where one invocation works and what it allows each command."""

    work: Path
    memory_limit_mb: float
    time_limit_s: float

    def run(self, name: str, command: list[str]) -> dict:
        """:func:`watch` ``command`` (log ``work/logs/NAME.log``), with the machine's load at its start."""
        load = round(os.getloadavg()[0], 2)
        print(f"{name}: {' '.join(command)}", flush=True)
        found = asdict(
            watch(command, self.work / "logs" / f"{name}.log", self.memory_limit_mb, self.time_limit_s)
        )
        found |= {
            "command": " ".join(command),
            "load_1m_start": load,
            "load_1m_end": round(os.getloadavg()[0], 2),
        }
        print(
            f"{name}: {found['outcome']}, {found['wall_s']:,.1f} s wall, {found['cpu_s']:,.1f} s CPU, "
            f"peak RSS {found['peak_rss_mb']:,.0f} MB",
            flush=True,
        )
        return found

    def fresh(self, name: str) -> Path:
        """``work/NAME``, emptied (the invocation's own folder: nothing else writes there)."""
        folder = self.work / name
        shutil.rmtree(folder, ignore_errors=True)
        return folder


def text_files(scale_input: Path) -> list[Path]:
    return sorted((scale_input / "text").glob("*.txt"))


def ours_text(scale_input: Path, job: Job) -> dict:
    """``pipelines text`` on text/*.txt into ``work/text`` (the corpus ``wordpiece`` and ``examples`` read)."""
    output = job.fresh("text")
    found = job.run(
        "ours-text", [*CLI, "text", "--input", f"{scale_input}/text/*.txt", "--output", str(output)]
    )
    return found | {"output": str(output)}


def train_peer(files: list[str], output: str) -> None:
    """The tokenizers trainer as its users run it (the child of :func:`wordpiece`): learn a
    30,522-token BERT vocabulary from the text files, save it, print its size as JSON."""
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(lowercase=True)
    tokenizer.train(files, vocab_size=VOCAB_SIZE, show_progress=False)
    Path(output).mkdir(parents=True, exist_ok=True)
    tokenizer.save_model(output)
    print(json.dumps({"vocab_size": tokenizer.get_vocab_size()}))


def vocab_lines(path: Path) -> int:
    return sum(1 for _ in open(path, encoding="utf-8")) if path.exists() else 0


def wordpiece(scale_input: Path, job: Job, text: dict) -> dict:
    """``wordpiece train`` on ``pipelines text``'s output against the tokenizers trainer on the text."""
    vocab, peer_vocab = job.fresh("vocab"), job.fresh("peer-vocab")
    train = [
        sys.executable,
        "-m",
        "wordpiece.cli",
        "train",
        "--corpus",
        text["output"],
        "--output",
        str(vocab),
    ]
    ours = job.run("ours-wordpiece", [*train, "--vocab-size", str(VOCAB_SIZE)])
    files = [str(f) for f in text_files(scale_input)]
    call = f"from benchmarks.peers_at_scale import train_peer; train_peer({files!r}, {str(peer_vocab)!r})"
    peer = job.run("peer-wordpiece", [sys.executable, "-c", call])
    ours["vocab_size"], peer["vocab_size"] = (
        vocab_lines(vocab / "vocab.txt"),
        vocab_lines(peer_vocab / "vocab.txt"),
    )
    if ours["outcome"] == "finished":
        stats = json.loads((vocab / "stats.json").read_text())
        ours["distinct_words"] = stats.get("distinct_words")
    return {"ours": ours, "ours_text": text, "peer": peer}


def reference_instances(log_text: str) -> int | None:
    """The instances create_pretraining_data.py says it wrote (None before it says so)."""
    found = re.search(r"Wrote (\d+) total instances", log_text)
    return int(found[1]) if found else None


def examples(scale_input: Path, job: Job, text: dict) -> dict:
    """``pipelines examples`` on ``pipelines text``'s output against google's generator on the text."""
    from benchmarks.examples import REF_PY, REFERENCE_FLAGS, SHIM, ensure_reference_venv

    ensure_reference_venv()
    shards, record = job.fresh("shards"), job.fresh("reference") / "examples.tfrecord"
    sizes = ["--max-seq-length", "128", "--max-predictions-per-seq", "20", "--dupe-factor", "5"]
    flags = [
        "--corpus",
        text["output"],
        "--vocab",
        str(harness.VOCAB),
        "--output",
        str(shards),
        "--seed",
        str(SEED),
    ]
    ours = job.run("ours-examples", [*CLI, "examples", *flags, *sizes])
    if ours["outcome"] == "finished":
        ours["examples"] = json.loads((shards / "stats.json").read_text())["examples"]
    shutil.rmtree(shards, ignore_errors=True)
    record.parent.mkdir(parents=True)
    paths = [
        f"--input_file={scale_input}/text/*.txt",
        f"--output_file={record}",
        f"--vocab_file={harness.VOCAB}",
    ]
    peer = job.run(
        "peer-examples", [str(REF_PY), str(SHIM), *paths, *REFERENCE_FLAGS.split(), "--dupe_factor=5"]
    )
    log_text = (job.work / "logs" / "peer-examples.log").read_text(errors="replace")
    peer |= {"reached": milestone(log_text), "examples": reference_instances(log_text)}
    shutil.rmtree(record.parent, ignore_errors=True)
    return {"ours": ours, "ours_text": text, "peer": peer}


def wikipedia(scale_input: Path, job: Job) -> dict:
    """``pipelines wikipedia`` against WikiExtractor (one extraction process) on the same dump."""
    if not WX_PY.exists():
        sys.exit(
            f"no {WX_PY}: `make {WX_PY.parent.parent.name}/.installed` installs WikiExtractor 3.1.0 in its own venv"
        )
    dump = next((scale_input / "wiki").glob("*-multistream.xml.bz2"))
    output, peer_output = job.fresh("wiki"), job.fresh("wikiextractor")
    ours = job.run("ours-wikipedia", [*CLI, "wikipedia", "--input", str(dump), "--output", str(output)])
    if ours["outcome"] == "finished":
        ours["documents"] = json.loads((output / "stats.json").read_text())["documents_out"]
    wx = [
        str(WX_PY),
        "-m",
        "wikiextractor.WikiExtractor",
        str(dump),
        "-o",
        str(peer_output),
        "--processes",
        "1",
        "-q",
    ]
    peer = job.run("peer-wikipedia", wx)
    peer["documents"] = sum(
        1
        for path in peer_output.rglob("wiki_*")
        for line in open(path, encoding="utf-8")
        if line.startswith("<doc ")
    )
    shutil.rmtree(output, ignore_errors=True)
    shutil.rmtree(peer_output, ignore_errors=True)
    return {"ours": ours, "peer": peer, "dump_mb": round(dump.stat().st_size / 1e6, 2)}


def describe(scale_input: Path) -> dict:
    """The generated input, from its scale_corpus.json (checked: the folder is what scale.py reads)."""
    made_path = scale_input / "scale_corpus.json"
    if not made_path.is_file() or not text_files(scale_input):
        sys.exit(
            f"--scale-input {scale_input}: no scale_corpus.json and text/*.txt (made by benchmarks/scale_corpus.py)"
        )
    made = json.loads(made_path.read_text())
    return {
        "folder": str(scale_input),
        "mb": made["mb"],
        "text_mb": round(sum(f.stat().st_size for f in text_files(scale_input)) / 1e6, 2),
        "wiki_text_mb": round(made["text_bytes"]["wiki"] / 1e6, 2),
        "documents": made["documents"],
        "pages": made["pages"],
        "distinct_words": made["heaps"]["generated"]["distinct"],
    }


def merged(path: Path, runs: list[dict]) -> list[dict]:
    """The runs already in ``path`` with ``runs`` added, one per (peer, input size), in :data:`PEERS` order."""
    earlier = json.loads(path.read_text())["runs"] if path.exists() else []
    found = {(r["peer_name"], r["input"]["mb"]): r for r in [*earlier, *runs]}
    return sorted(found.values(), key=lambda r: (PEERS.index(r["peer_name"]), r["input"]["mb"]))


def main() -> None:
    parser = harness.parser(__doc__, "peers_at_scale")
    parser.add_argument("--scale-input", type=Path, required=True, help="a folder scale_corpus.py made")
    parser.add_argument("--peer", action="append", choices=PEERS, required=True, help="repeatable")
    parser.add_argument(
        "--work", type=Path, default=Path("/tmp/peers"), help="outputs and logs (emptied per run)"
    )
    parser.add_argument(
        "--memory-limit-gb", type=float, default=10.0, help="kill a process tree past this RSS"
    )
    parser.add_argument("--time-limit-min", type=float, default=25.0, help="kill a command running longer")
    args = parser.parse_args()
    if args.work.resolve().is_relative_to(harness.ROOT):
        sys.exit(f"--work {args.work}: inside the repository; give a folder under /tmp")
    made = describe(args.scale_input)
    job = Job(args.work / f"{made['mb']:g}mb", args.memory_limit_gb * 1000, args.time_limit_min * 60)
    limits = {"memory_limit_mb": job.memory_limit_mb, "time_limit_s": job.time_limit_s}
    text = ours_text(args.scale_input, job) if {"wordpiece", "examples"} & set(args.peer) else {}
    for name in PEERS:  # each peer's run is written as soon as it is measured
        if name in args.peer:
            measure = {"wordpiece": wordpiece, "examples": examples, "wikipedia": wikipedia}[name]
            found = (
                measure(args.scale_input, job, text)
                if name != "wikipedia"
                else measure(args.scale_input, job)
            )
            run = {"peer_name": name, "input": made, "limits": limits, "machine": harness.machine(), **found}
            harness.write(args.json, {"runs": merged(args.json, [run])}, "tokenizers", rows=rows)


def _mb(value: float) -> str:
    return f"{value / 1000:,.2f} GB" if value >= 1000 else f"{n(value)} MB"


def _side(run: dict, limits: dict) -> str:
    """One command's figures, or how it was stopped."""
    said = f"{run['cpu_s']:,.0f} CPU-s, {run['wall_s']:,.0f} s wall, peak RSS {_mb(run['peak_rss_mb'])}"
    if run["outcome"] == "finished":
        return said
    return (
        f"**{run['outcome']}** after {said}, having read {_mb(run['read_mb'])} (all its reads, libraries included; watchdog limits "
        f"{_mb(limits['memory_limit_mb'])}, {limits['time_limit_s'] / 60:.0f} min)"
    )


def _where(r: dict) -> str:
    i = r["input"]
    return (
        f"at scale: {_mb(i['text_mb'])} of text generated by scale_corpus.py ({i['documents']:,} "
        f"documents, {i['distinct_words']:,} distinct words), load {r['ours']['load_1m_start']:.1f}-"
        f"{r['peer']['load_1m_end']:.1f}"
    )


def _done(*runs: dict) -> bool:
    return all(run["outcome"] == "finished" for run in runs)


def wordpiece_row(r: dict) -> Row:
    ours, text, peer, limits = r["ours"], r["ours_text"], r["peer"], r["limits"]
    ratio = "—"
    if _done(ours, peer, text):
        ratio = (
            f"{x(peer['cpu_s'] / ours['cpu_s'])} per CPU-s ({peer['cpu_s'] / (ours['cpu_s'] + text['cpu_s']):.2f}x with "
            f"`pipelines text`), {peer['wall_s'] / ours['wall_s']:.2f}x wall"
        )
    return (
        f"vocabulary learning end to end (counting + learning), vocab {VOCAB_SIZE:,}; {_where(r)}",
        f"`wordpiece train` on `pipelines text`'s output: {_side(ours, limits)}; {ours['vocab_size']:,} tokens "
        f"(`pipelines text` before it: {_side(text, limits)})",
        f"tokenizers' BertWordPieceTokenizer.train reading the text files: {_side(peer, limits)}; "
        f"{peer['vocab_size']:,} tokens",
        ratio,
    )


def examples_row(r: dict) -> Row:
    ours, text, peer, limits = r["ours"], r["ours_text"], r["peer"], r["limits"]
    ours_cpu, ratio = ours["cpu_s"] + text["cpu_s"], "—"
    said = f"{_side(peer, limits)}"
    if _done(peer):
        said = f"{n(peer['examples'] / peer['cpu_s'])} examples/CPU-s ({peer['examples']:,}); {said}"
    else:
        said += f"; it was {peer['reached']}, no example written"
    ours_said = f"`pipelines examples` {_side(ours, limits)}; `pipelines text` {_side(text, limits)}"
    if _done(ours, text):
        ours_said = f"{n(ours['examples'] / ours_cpu)} examples/CPU-s ({ours['examples']:,}); {ours_said}"
    if _done(ours, text, peer):
        ratio = f"{x(ours['examples'] / ours_cpu / (peer['examples'] / peer['cpu_s']))} whole, per CPU-s"
    elif _done(ours, text):  # a bound: the CPU time it had spent when stopped, for as many examples as ours
        ratio = (
            f"above {peer['cpu_s'] / ours_cpu:.2f}x per CPU-s, had it finished with as many examples as ours"
        )
    return (
        f"example generation, whole commands, seq 128, 20 predictions, dupe 5, bert-base-uncased vocab; {_where(r)}",
        ours_said,
        f"google-research/bert create_pretraining_data.py (bert-tensorflow 1.0.4): {said}",
        ratio,
    )


def wikipedia_row(r: dict) -> Row:
    ours, peer, limits = r["ours"], r["peer"], r["limits"]
    ratio = "—"
    if _done(ours, peer):
        ratio = f"{x(peer['cpu_s'] / ours['cpu_s'])} per CPU-s, {peer['wall_s'] / ours['wall_s']:.2f}x wall"
    return (
        f"wikipedia, whole commands; the multistream dump ({_mb(r['dump_mb'])}, {r['input']['pages']:,} pages, "
        f"{_mb(r['input']['wiki_text_mb'])} of clean text) of the {_where(r).removeprefix('at scale: ')}",
        f"`pipelines wikipedia` (defaults): {_side(ours, limits)}; {ours.get('documents', 0):,} documents",
        f"WikiExtractor 3.1.0 `--processes 1`: {_side(peer, limits)}; {peer['documents']:,} documents",
        ratio,
    )


def rows(result: dict) -> list[Row]:
    render = {"wordpiece": wordpiece_row, "examples": examples_row, "wikipedia": wikipedia_row}
    return [render[r["peer_name"]](r) for r in result["runs"]]


if __name__ == "__main__":
    main()
