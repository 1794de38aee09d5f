"""Run every benchmark, then write ``benchmarks/summary.md``: one table of headline figures and ratios.

    python benchmarks/run_all.py [--only NAME ...] [--summary-only]

Each benchmark script runs as its own subprocess (its own interpreter, so timings and peak memory
are its own) from the repository root, and writes ``benchmarks/results/NAME.json``. Two scripts
print rather than write: ``sentence_segmentation.py`` is given ``--json``, and the two lines
``wikitext_speed.py`` prints are parsed into ``results/wikitext_speed.json`` here. A script that
does not exist yet (the fine-tuning step) is skipped with a note; one that fails is reported and
the others still run (exit status 1 at the end).

The summary is rendered from the JSON files only, so ``--summary-only`` rebuilds the same table
from existing results without running anything. Each row reads its figures from the keys that
script writes; a JSON without a renderer here gets a generic row (its top-level ``*ratio*`` and
``*speedup*`` keys).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
SUMMARY = BENCH_DIR / "summary.md"
WIKIEXTRACTOR_PYTHON = REPO_ROOT / ".venv-wikiextractor" / "bin" / "python"

Row = tuple[str, str, str, str]
"""(what, ours, peer, ratio) as Markdown cells."""


@dataclass(frozen=True)
class Benchmark:
    """One script of ``benchmarks/`` and the file its figures end up in."""

    name: str
    scripts: tuple[str, ...]
    """Candidate file names in ``benchmarks/``; the first that exists runs."""
    describe: str
    args: Callable[[], list[str]] = field(default=lambda: [])
    parse_stdout: Callable[[str], dict] | None = None
    """For scripts that only print: turn their output into the result JSON."""
    command: str = ""
    """The command line that reproduces the figures (shown in the summary); default the script."""

    @property
    def results(self) -> Path:
        return RESULTS_DIR / f"{self.name}.json"

    def command_line(self) -> str:
        """What a reader runs to get these figures again."""
        return self.command or f"python benchmarks/{self.scripts[0]}"

    def script(self) -> Path | None:
        """The script to run, or None when none of the candidates exists yet."""
        return next((BENCH_DIR / s for s in self.scripts if (BENCH_DIR / s).exists()), None)


def _corpus_args() -> list[str]:
    if WIKIEXTRACTOR_PYTHON.exists():
        return ["--wikiextractor", str(WIKIEXTRACTOR_PYTHON)]
    print(f"  note: {WIKIEXTRACTOR_PYTHON} missing ('make bench' installs it): no WikiExtractor ratio")
    return []


def parse_wikitext_speed(stdout: str) -> dict:
    """The figures ``wikitext_speed.py`` prints, as a dict."""
    head = re.search(r"(\d+) pages, ([\d.]+) MB of wikitext, median of (\d+) runs: ([\d.]+) s", stdout)
    rate = re.search(r"([\d.]+) MB/s, ([\d.]+) pages/s", stdout)
    if not head or not rate:
        raise ValueError(f"wikitext_speed.py printed no figures:\n{stdout}")
    return {
        "pages": int(head[1]),
        "wikitext_mb": float(head[2]),
        "repeats": int(head[3]),
        "median_s": float(head[4]),
        "mb_per_s": float(rate[1]),
        "pages_per_s": float(rate[2]),
    }


BENCHMARKS = (
    Benchmark(
        "corpus",
        ("corpus.py",),
        "corpus stages per core; WikiExtractor",
        _corpus_args,
        command="python benchmarks/corpus.py --wikiextractor .venv-wikiextractor/bin/python",
    ),
    Benchmark(
        "wikitext_speed", ("wikitext_speed.py",), "clean_wikitext alone", parse_stdout=parse_wikitext_speed
    ),
    Benchmark(
        "sentence_segmentation",
        ("sentence_segmentation.py",),
        "segmenter accuracy and speed",
        lambda: ["--json", str(RESULTS_DIR / "sentence_segmentation.json")],
        command="python benchmarks/sentence_segmentation.py --json benchmarks/results/sentence_segmentation.json",
    ),
    Benchmark("tokenization", ("tokenization.py",), "WordPiece tokenisation; BertTokenizerFast"),
    Benchmark("wordpiece_train", ("wordpiece_train.py",), "vocabulary learning; tokenizers' trainer"),
    Benchmark("examples", ("examples.py",), "example generation; Google's create_pretraining_data.py"),
    Benchmark(
        "examples_memory",
        ("examples_memory.py",),
        "peak memory of example generation; the same graph without spilling",
    ),
    Benchmark("reader", ("reader.py",), "the trainer's reader; a pyarrow scan"),
    Benchmark("train_step", ("train_step.py",), "pre-training step; transformers' BertForPreTraining"),
    Benchmark("batching", ("batching.py",), "bucketed and packed batches; padded (the HF collator)"),
    Benchmark(
        "finetune_step",
        ("finetune_step.py", "finetune.py"),
        "fine-tuning step; transformers' BertForSequenceClassification",
    ),
)


# -- running --------------------------------------------------------------------------------------


def run_one(bench: Benchmark) -> str:
    """Run one benchmark as a subprocess; return a one-line outcome."""
    script = bench.script()
    if script is None:
        return f"skipped: no {' or '.join(bench.scripts)} in benchmarks/ yet"
    command = [sys.executable, str(script), *bench.args()]
    print(f"== {bench.name}: {' '.join(command)}", flush=True)
    start = time.perf_counter()
    if bench.parse_stdout is None:
        status = subprocess.run(command, cwd=REPO_ROOT).returncode
        stdout = ""
    else:
        done = subprocess.run(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
        status, stdout = done.returncode, done.stdout
        print(stdout, end="")
    elapsed = time.perf_counter() - start
    if status != 0:
        return f"FAILED (exit status {status}) after {elapsed:.0f} s"
    if bench.parse_stdout is not None:
        RESULTS_DIR.mkdir(exist_ok=True)
        bench.results.write_text(json.dumps(bench.parse_stdout(stdout), indent=2) + "\n")
    return f"ok in {elapsed:.0f} s"


# -- the summary ----------------------------------------------------------------------------------


def _n(value: float, digits: int = 3) -> str:
    """A figure with ``digits`` significant digits and thousands separators."""
    if value >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _x(ratio: float) -> str:
    return f"**{ratio:.2f}x**"


def rows_corpus(r: dict) -> list[Row]:
    wiki, rows = r["wikipedia"], []
    peer, ratio = "— (no WikiExtractor in this run)", "—"
    if "wikiextractor" in r:
        peer_rate = wiki["wikitext_mb"] / r["wikiextractor"]["cpu_s"]
        peer = f"WikiExtractor 3.1.0 (`--processes 1`), same dump: {_n(peer_rate)} MB/s per core"
        ratio = _x(r["speed_ratio_vs_wikiextractor"])
    rows.append(
        (
            f"wikipedia: decompress, parse, clean, split sentences; enwiki excerpt ({wiki['pages']} pages, "
            f"{_n(wiki['wikitext_mb'])} MB of wikitext), 1 core",
            f"{_n(wiki['wikitext_mb_per_s_per_core'])} MB/s, {_n(wiki['pages_per_s_per_core'])} pages/s",
            peer,
            ratio,
        )
    )
    if "books" in r:
        books = r["books"]
        where = f"{books['books']} Gutenberg books ({_n(books['mb'])} MB), 1 core"
        rows.append(
            (
                f"books: decode, strip, unwrap, split; {where}",
                f"{_n(books['mb_per_s_per_core'])} MB/s",
                "—",
                "—",
            )
        )
        rows.append(
            (
                f"corpus: MinHash signatures; {where}",
                f"{_n(books['minhash_mb_per_s_per_core'])} MB/s",
                "—",
                "—",
            )
        )
    return rows


def rows_wikitext_speed(r: dict) -> list[Row]:
    return [
        (
            f"`clean_wikitext` alone; {r['pages']} pages, {_n(r['wikitext_mb'])} MB of wikitext, 1 core",
            f"{_n(r['mb_per_s'])} MB/s, {_n(r['pages_per_s'])} pages/s",
            "—",
            "—",
        )
    ]


def rows_sentence_segmentation(r: dict) -> list[Row]:
    candidates = r["candidates"]
    ours = candidates.get("project")
    if ours is None:
        return [("sentence segmentation", "no 'project' candidate in the results", "—", "—")]
    where = (
        f"F1 on {r['gold']['sentences']} hand-checked sentences, speed on "
        f"{_n(r['throughput_corpus_bytes'] / 1e6)} MB of text, 1 core"
    )
    figure = f"F1 {ours['scores']['all']['f1']:.3f}, {_n(ours['mb_per_s'])} MB/s"
    rows = []
    raw = candidates.get("blingfire")
    if raw is not None:  # the headline: what we wrap, the peer a user would otherwise call directly
        rows.append(
            (
                f"sentence segmentation against the raw library we wrap; {where}",
                figure,
                f"raw Bling Fire (text_to_sentences): F1 {raw['scores']['all']['f1']:.3f}, {_n(raw['mb_per_s'])} MB/s",
                _x(ours["mb_per_s"] / raw["mb_per_s"]),
            )
        )
    peers = {name: c for name, c in candidates.items() if name not in ("project", "blingfire")}
    if not peers:
        return rows or [(f"sentence segmentation; {where}", figure, "— (no peer installed)", "—")]
    name, best = max(peers.items(), key=lambda kv: kv[1]["scores"]["all"]["f1"])
    peer = (
        f"{name} (the most accurate of the other segmenters): F1 {best['scores']['all']['f1']:.3f}, "
        f"{_n(best['mb_per_s'])} MB/s"
    )
    rows.append(
        (f"sentence segmentation, speed; {where}", figure, peer, _x(ours["mb_per_s"] / best["mb_per_s"]))
    )
    return rows


def rows_tokenization(r: dict) -> list[Row]:
    runs, text = r["runs"], r["text"]
    where = f"{text['lines']:,} lines of Gutenberg books ({_n(text['mb_utf8'])} MB), bert-base-uncased vocab, 1 core"
    peers = {
        "tokenizers": (
            "raw tokenizers (BertWordPieceTokenizer, the library we build on)",
            "ratio_ours_vs_tokenizers",
        ),
        "transformers": ("transformers' BertTokenizerFast", "ratio_ours_vs_transformers"),
    }
    rows = []
    for who, (label, key) in peers.items():
        for mode, ratio in r.get(key, {}).items():
            rows.append(
                (
                    f"WordPiece tokenisation, {mode}; {where}",
                    f"{_n(runs[f'ours {mode}']['tokens_per_s'])} tokens/s",
                    f"{label}: {_n(runs[f'{who} {mode}']['tokens_per_s'])} tokens/s",
                    _x(ratio),
                )
            )
    return rows


def rows_wordpiece_train(r: dict) -> list[Row]:
    real = r["real_text"]
    where = f"{_n(real['text_mb'])} MB of Gutenberg books ({real['distinct_words']:,} distinct words)"
    peer = f"tokenizers' WordPieceTrainer reading the text: {real['tokenizers_trainer_on_text_s']:.2f} s"
    end_to_end = real["count_s"] + real["learn_from_counts_s"]
    rows = [
        (  # the headline: what a user runs, `wordpiece train`, against what they would run instead
            f"vocabulary learning end to end (counting + learning); {where}",
            f"{end_to_end:.2f} s",
            peer,
            _x(real["tokenizers_trainer_on_text_s"] / end_to_end),
        ),
        (
            f"vocabulary learning, the learning phase only (counting excluded: not what a user runs); {where}",
            f"{real['learn_from_counts_s']:.2f} s from counts (+ {real['count_s']:.1f} s counting, Beam)",
            peer,
            _x(real["learn_vs_peer_ratio"]),
        ),
    ]
    if r.get("sizes"):
        big = max(r["sizes"], key=lambda s: s["distinct_words"])
        rows.append(
            (
                f"vocabulary learning from counts, {big['distinct_words']:,} distinct synthetic words (Zipf)",
                f"{big['learn_s']:.0f} s, peak {_n(big['peak_rss_mb'])} MB",
                "—",
                "—",
            )
        )
    return rows


def rows_examples(r: dict) -> list[Row]:
    p = r["params"]
    outside = [
        f"{k} {v['ours']:.3f} vs {v['reference']:.3f}" for k, v in r["statistics"].items() if not v["within"]
    ]
    statistics = f"statistics within tolerance (±{r['tolerance']} for the masked shares)" + (
        f" except {', '.join(outside)}" if outside else ""
    )
    # The two figures that vary from seed to seed, each with its tolerance of 3 sd over the seeds.
    for label, key, fmt in (
        ("random-next share", "random_next_rate", ".3f"),
        ("examples", "examples", ",.0f"),
    ):
        spread = r.get(f"{key}_over_seeds")
        if spread:
            v = r["statistics"][key]
            statistics += (
                f"; {label} {v['ours']:{fmt}} vs {v['reference']:{fmt}}, tolerance ±{v['tolerance']:{fmt}} "
                f"(3 sd of its spread over {spread['seeds']} seeds on this input)"
            )
    return [
        (
            f"example generation, whole command per CPU-second: `pipelines text` + `pipelines examples`, "
            f"{r['input']}, seq {p['max_seq_length']}, dupe {p['dupe_factor']}",
            f"{_n(r['ours_examples_per_cpu_s'])} examples/CPU-s "
            f"({_n(r['ours_marginal_examples_per_cpu_s'])} with start-up subtracted)",
            f"{r['reference_revision']}: {_n(r['reference_examples_per_cpu_s'])} examples/CPU-s "
            f"({_n(r['reference_marginal_examples_per_cpu_s'])} with start-up subtracted); {statistics}",
            f"{_x(r['ratio_whole'])} whole, {_x(r['ratio_marginal'])} marginal" + _marginal_noise(r),
        )
    ]


def _marginal_noise(r: dict) -> str:
    """How far run-to-run noise moves the marginal ratio, when the run measured it."""
    noise = r.get("ratio_marginal_spread")
    if not noise or "least_of_runs" not in noise:
        return ""
    return (
        f" (median of {len(noise['per_repeat'])} repeats; each repeat alone "
        f"{noise['per_repeat_min']:.1f}-{noise['per_repeat_max']:.1f}x; least of runs "
        f"{noise['least_of_runs']:.1f}x)"
    )


def rows_examples_memory(r: dict) -> list[Row]:
    ours, peer = r["always"], r["never"]
    rows = []
    for key, what in (("input_size", "input sizes"), ("dupe_factor", "dupe factors")):
        runs = ours[f"by_{key}"]
        first, last = runs[0], runs[-1]
        span = (
            f"{first['input_mb']:.1f} to {last['input_mb']:.1f} MB of books, dupe {first['dupe_factor']}"
            if key == "input_size"
            else f"{last['input_mb']:.1f} MB of books, dupe {first['dupe_factor']} to {last['dupe_factor']}"
        )
        growth = ours[f"ratio_by_{key}"]["examples"]
        rows.append(
            (
                f"peak RSS of `pipelines examples` (FnApiRunner, 8 shards, 64 buckets) over {what}: {span} "
                f"({growth:.1f}x the examples); largest / smallest",
                f"--spill always: {first['peak_rss_mb']:,.0f} to {last['peak_rss_mb']:,.0f} MB, "
                f"**{ours[f'ratio_by_{key}']['peak_rss']:.2f}x**",
                f"--spill never (everything shuffled through the runner's memory): "
                f"{peer[f'by_{key}'][0]['peak_rss_mb']:,.0f} to {peer[f'by_{key}'][-1]['peak_rss_mb']:,.0f} MB, "
                f"{peer[f'ratio_by_{key}']['peak_rss']:.2f}x"
                + ("; same shards" if r["same_shards"] else "; SHARDS DIFFER"),
                _x(peer[f"by_{key}"][-1]["peak_rss_mb"] / runs[-1]["peak_rss_mb"]) + " less at the largest",
            )
        )
    return rows


def rows_reader(r: dict) -> list[Row]:
    peer = r["pyarrow_dataset_gcsfs"]
    peer_text = (
        f"pyarrow.dataset over gcsfs, one reader of every shard: {peer['build_requests']} requests to open, "
        f"{peer['bytes_fetched'] / r['dataset_bytes']:.2f}x the bytes, {_n(peer['examples_per_s'])} examples/s, "
        f"waiting {peer['wait_share']:.0%}"
    )
    rows = []
    for world_size, run in r["ranks"].items():
        ranks = run["per_rank"]
        rate = sum(x["examples_per_s"] for x in ranks) / len(ranks)
        wait = sum(x["wait_share"] for x in ranks) / len(ranks)
        rows.append(
            (
                f"reader, gs:// (GCS emulator), {world_size} rank(s) x {r['workers_per_rank']} workers"
                + (f" x {r['streams_per_rank']} streams, " if "streams_per_rank" in r else ", ")
                + f"{r['shards']} shards of {r['examples']:,} examples ({_n(r['dataset_bytes'] / 1e6)} MB), batch {r['batch_size']}, {r['step_ms']:.0f} ms simulated step",
                f"{max(x['build_requests'] for x in ranks)} requests to build a rank's reader; ranks together "
                f"fetch {run['bytes_fetched_over_dataset']:.2f}x the dataset's bytes; {_n(rate)} examples/s "
                f"per rank, waiting {wait:.0%}",
                peer_text,
                _x(rate / peer["examples_per_s"]),
            )
        )
    if "one_rank_no_workers" in r:
        alone = r["one_rank_no_workers"]
        rows.append(
            (
                f"reader, gs:// (GCS emulator), 1 rank, no workers (in process), batch {r['batch_size']}, "
                f"{r['step_ms']:.0f} ms simulated step",
                f"{_n(alone['examples_per_s'])} examples/s, waiting {alone['wait_share']:.0%}",
                peer_text,
                _x(alone["examples_per_s"] / peer["examples_per_s"]),
            )
        )
    return rows


def rows_train_step(r: dict) -> list[Row]:
    rows = []
    for run in r["runs"]:
        layers, hidden, heads = run["layers_hidden_heads"]
        variants = run["variants"]
        what = (
            f"pre-training step, config {run['config']} ({layers}/{hidden}/{heads}), batch {run['batch_size']}, "
            f"real enwiki shards at seq {r['max_seq_length']} ({_n(run['mean_real_tokens_per_batch'])} real "
            f"tokens/batch), fp32 CPU, {r['threads']} threads; ours `--batching padded`"
        )
        ours = f"{_n(variants['ours']['tokens_per_s'])} tokens/s"
        peers = {
            "transformers_collator": "BertForPreTraining fed by DataCollatorForLanguageModeling (padded to the batch's longest)",
            "transformers_pad128": "BertForPreTraining, every row padded to 128 (as the reference's TFRecords)",
        }
        for name, label in peers.items():
            rows.append(
                (
                    what,
                    ours,
                    f"{label}: {_n(variants[name]['tokens_per_s'])} tokens/s",
                    f"{_x(run[f'speedup_vs_{name}'])} ({run[f'cpu_speedup_vs_{name}']:.2f}x per CPU-s)",
                )
            )
    return rows


def rows_batching(r: dict) -> list[Row]:
    rows = []
    for run in r["runs"]:
        modes, padded = run["modes"], run["modes"]["padded"]
        for mode in ("bucketed", "packed"):
            rows.append(
                (
                    f"pre-training, ours `--batching {mode}` against ours `padded` (a layout ratio, not a peer); "
                    f"real enwiki shards, seq {run['max_seq_length']}, {run['batches']} batches of "
                    f"{run['batch_size']}, config {r['config']}, fp32 CPU, {r['threads']} threads",
                    f"{_n(modes[mode]['tokens_per_s'])} tokens/s, padding {modes[mode]['padding_share']:.1%}",
                    f"ours `--batching padded` (pads as transformers' collator): {_n(padded['tokens_per_s'])} tokens/s, "
                    f"padding {padded['padding_share']:.1%}",
                    _x(run[f"{mode}_speedup_vs_padded"]),
                )
            )
    return rows


def rows_finetune_step(r: dict) -> list[Row]:
    variants = r["variants"]
    what = (
        f"fine-tuning step, all-MiniLM-L6-v2 (6/384) classifier, real MRPC training pairs, batch {r['batch']} "
        f"({_n(r['mean_real_tokens_per_batch'])} real tokens/batch), fp32 CPU, {r['threads']} threads"
    )
    peers = {
        "transformers_collator": "BertForSequenceClassification fed by DataCollatorWithPadding (padded to the batch's longest)",
        "transformers_pad128": "BertForSequenceClassification, every pair padded to 128 (as run_classifier.py)",
    }
    return [
        (
            what,
            f"{variants['ours']['examples_per_s']:.1f} examples/s",
            f"{label}: {variants[name]['examples_per_s']:.1f} examples/s",
            _x(r[f"speedup_vs_{name}"]),
        )
        for name, label in peers.items()
    ]


def rows_generic(name: str, r: dict) -> list[Row]:
    """Top-level ratio and speed-up keys of a results file this script has no renderer for."""
    ratios = {k: v for k, v in r.items() if isinstance(v, (int, float)) and ("ratio" in k or "speedup" in k)}
    if not ratios:
        return [(name, "see the JSON", "—", "—")]
    return [(name, f"`{k}`", "—", _x(v)) for k, v in ratios.items()]


RENDERERS: dict[str, Callable[[dict], list[Row]]] = {
    "corpus": rows_corpus,
    "wikitext_speed": rows_wikitext_speed,
    "sentence_segmentation": rows_sentence_segmentation,
    "tokenization": rows_tokenization,
    "wordpiece_train": rows_wordpiece_train,
    "examples": rows_examples,
    "examples_memory": rows_examples_memory,
    "reader": rows_reader,
    "train_step": rows_train_step,
    "batching": rows_batching,
    "finetune_step": rows_finetune_step,
}


NOT_MEASURED: list[str] = []
"""Comparisons a user would ask for that no script measures yet: listed, not left out silently."""

GPU_RESULTS = RESULTS_DIR / "gpu_check.json"
"""``benchmarks/gpu_check.sh``'s figures (its ``OUT/gpu_check.json``, copied here after a GPU run)."""
GPU_COMMAND = "bash benchmarks/gpu_check.sh"
GPU_NOT_MEASURED = (
    "* pre-training on a GPU (`pretrain` BERT-base at seq 128 and 512, every `--batching` layout, bf16 and "
    "fp16, compiled and eager, CUDA graphs; one step against transformers' BertForPreTraining on the same "
    "batches): **not measured** (no `results/gpu_check.json` yet). `make gpu-data` here, then "
    f"`{GPU_COMMAND}` on a GPU machine (docs/pretrain.md), and copy its `gpu_check.json` into `benchmarks/results/`."
)


def rows_gpu_check(r: dict) -> list[Row]:
    """One row per ``pretrain`` run of the GPU check (no peer), and the one-step pairing's ratios."""
    gpu = (r.get("machine") or {}).get("gpu") or "no GPU named"
    rows = []
    for run in r["runs"]:
        what = (
            f"pre-training on {gpu}, `{run['name']}` (BERT-base, steady state after the first metrics window)"
        )
        if "tokens_per_s" not in run:
            rows.append((what, run["status"], "—", "—"))
            continue
        mfu = f", MFU {run['mfu']:.3f}" if "mfu" in run else ""
        ours = (
            f"{_n(run['tokens_per_s'])} tokens/s{mfu}, data wait {run['data_wait_share']:.1%}, "
            f"peak {run.get('peak_memory_gb', 0):.1f} GiB"
        )
        rows.append((what, ours, "—", "—"))
    for step in r["steps"]:
        for run in (step.get("result") or {}).get("runs", []):
            variants = run["variants"]
            what = (
                f"one training step on {gpu}, config {run['config']}, batch {run['batch_size']} of real enwiki "
                f"shards at seq 128, bf16 autocast, AdamW, clipping; the same batches for every variant"
            )
            peer = variants["transformers_collator"]
            for ours in [v for v in ("ours", "ours_compiled") if v in variants]:
                prefix = "" if ours == "ours" else "compiled_"
                rows.append(
                    (
                        what,
                        f"{ours}: {_n(variants[ours]['tokens_per_s'])} tokens/s",
                        "BertForPreTraining (SDPA) fed by DataCollatorForLanguageModeling: "
                        f"{_n(peer['tokens_per_s'])} tokens/s",
                        _x(run[f"{prefix}speedup_vs_transformers_collator"]),
                    )
                )
        if step["status"] != "ok":
            rows.append((f"one training step on {gpu}", step["status"], "—", "—"))
    return rows


def render_summary() -> str:
    """The Markdown of ``summary.md`` from ``results/*.json`` (no times or dates: same JSON, same text)."""
    lines = [
        "# Benchmark summary",
        "",
        "Generated by `python benchmarks/run_all.py` from `benchmarks/results/*.json`",
        "(`--summary-only` re-renders it without running anything). Ratios are ours / the peer,",
        "measured in the same run of the same script (above 1: ours is faster). The conditions of each",
        "figure (machine, cores, inputs) are in the script's docstring and in [README.md](README.md);",
        "each row names its input and size, and the command that measured it.",
        "",
        "| benchmark | measured (input, size) | ours | peer | ratio | command → results |",
        "|---|---|---|---|---|---|",
    ]
    notes, known = [], set()
    for bench in BENCHMARKS:
        known.add(bench.results.name)
        if not bench.results.exists():
            if bench.script() is None:
                notes.append(f"* {bench.name}: no benchmark script yet ({' or '.join(bench.scripts)}).")
            else:
                notes.append(
                    f"* {bench.name}: no results yet; run `python benchmarks/run_all.py --only {bench.name}`."
                )
            continue
        data = json.loads(bench.results.read_text())
        renderer = RENDERERS.get(bench.name)
        try:
            rows = renderer(data) if renderer else rows_generic(bench.name, data)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as err:
            rows = [(f"unreadable results ({type(err).__name__}: {err})", "—", "—", "—")]
        for what, ours, peer, ratio in rows:
            lines.append(
                f"| {bench.name} | {what} | {ours} | {peer} | {ratio} "
                f"| `{bench.command_line()}` → `results/{bench.results.name}` |"
            )
    if GPU_RESULTS.exists():
        try:
            gpu_rows = rows_gpu_check(json.loads(GPU_RESULTS.read_text()))
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as err:
            gpu_rows = [(f"unreadable results ({type(err).__name__}: {err})", "—", "—", "—")]
        for what, ours, peer, ratio in gpu_rows:
            lines.append(
                f"| gpu_check | {what} | {ours} | {peer} | {ratio} | `{GPU_COMMAND}` → `results/gpu_check.json` |"
            )
    else:
        notes.append(GPU_NOT_MEASURED)
    known.add(GPU_RESULTS.name)
    for extra in sorted(RESULTS_DIR.glob("*.json")):
        if extra.name not in known:
            for what, ours, peer, ratio in rows_generic(extra.stem, json.loads(extra.read_text())):
                lines.append(
                    f"| {extra.stem} | {what} | {ours} | {peer} | {ratio} | `results/{extra.name}` |"
                )
    notes += NOT_MEASURED
    if notes:
        lines += ["", "Not in the table:", "", *notes]
    return "\n".join(lines) + "\n"


def main() -> int:
    names = [b.name for b in BENCHMARKS]
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="benchmarks: " + ", ".join(names)
    )
    parser.add_argument(
        "--only", action="append", choices=names, metavar="NAME", help="run only this one (repeatable)"
    )
    parser.add_argument(
        "--summary-only", action="store_true", help="re-render summary.md from the existing JSON"
    )
    args = parser.parse_args()
    outcomes = {}
    if not args.summary_only:
        for bench in BENCHMARKS:
            if args.only and bench.name not in args.only:
                continue
            outcomes[bench.name] = run_one(bench)
            print(f"-- {bench.name}: {outcomes[bench.name]}", flush=True)
    SUMMARY.write_text(render_summary())
    print(f"wrote {SUMMARY.relative_to(REPO_ROOT)}")
    for name, outcome in outcomes.items():
        print(f"  {name}: {outcome}")
    return 1 if any(o.startswith("FAILED") for o in outcomes.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
