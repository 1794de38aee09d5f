"""Example generation side by side with Google's own generator, per CPU-second, same input file.

    python benchmarks/examples.py [--books N] [--dupe-factor 5]

The reference: google-research/bert's create_pretraining_data.py and tokenization.py, unmodified,
as bert-tensorflow 1.0.4 ships them (Google's 2020 release; no whole-word option), under
tensorflow-cpu 2.21.0 (pinned) in a separate venv (``.venv-reference``, created here when absent) through a
one-line shim (``benchmarks/reference_shim.py``: ``tensorflow`` -> ``tensorflow.compat.v1``).
Ours: ``pipelines text`` + ``pipelines examples`` (FnApiRunner), the whole commands.

Input: the Gutenberg books under ../shared/data, cleaned by our books cleaner and written in the
reference's format (one sentence per line, a blank line between books) to a temp folder; both
systems read that same file. Parameters: seq 128, max predictions 20, masked LM prob 0.15,
short-seq prob 0.1, dupe factor 5, seed 12345, bert-base-uncased's vocab.txt.

CPU seconds of each whole command (user + system, child processes included) are measured on
the full input and on a tiny input (the first 20 lines): the tiny run's CPU time is the fixed
start-up, subtracted to give the marginal rate. The machine's speed drifts by several percent
over minutes, and our marginal work is about a fifth of our start-up, so each repeat
(``--repeats``, 5 by default) runs the tiny and the full input back to back on both systems
(reference tiny, ours tiny, reference full, ours full): each repeat's marginal time (full less
tiny, a minute apart at most) has the drift mostly cancelled, and the figure is the median over
the repeats. The output also gives the ratio of each repeat alone (its least and greatest are
its spread) and the ratio from the least CPU time of each command over the runs.
Statistics compared, with the tolerances stated in the output: masked share of tokens (+-0.01),
the 80/10/10 split of masked positions (+-0.01 each), and the random-next share and the number
of examples, each within three standard deviations of its spread over 40 seeds of our planner
on this input (the share's at least 0.01). Results: ``benchmarks/results/examples.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pipelines.books.pipeline import book_outcome

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
REF_VENV = ROOT / ".venv-reference"
REF_PY = REF_VENV / "bin" / "python"
RESULTS = ROOT / "benchmarks" / "results" / "examples.json"
VOCAB = SHARED / "vocab" / "bert-base-uncased_vocab.txt"
TOLERANCE = 0.01
SPREAD_SEEDS = 40
REVISION = "google-research/bert create_pretraining_data.py from bert-tensorflow 1.0.4 (2020 release)"


def ensure_reference_venv() -> None:
    """Create ``.venv-reference`` with tensorflow-cpu 2.21.0 and bert-tensorflow 1.0.4 when absent."""
    if REF_PY.exists():
        return
    subprocess.run([sys.executable, "-m", "venv", str(REF_VENV)], check=True)
    pip = [str(REF_PY), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "tensorflow-cpu==2.21.0", "bert-tensorflow==1.0.4"], check=True)


def child_cpu(command: list[str]) -> float:
    """Run ``command``; its CPU seconds (user + system, with its own children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def write_input(folder: Path, num_books: int) -> tuple[Path, Path]:
    """The books in the reference's format, and a tiny file (its first 20 lines)."""
    docs = []
    for book in sorted((SHARED / "books" / "gutenberg").glob("*.txt"))[:num_books]:
        outcome = book_outcome(str(book), book.read_bytes(), 100)
        if outcome.row is not None and "sentences" in outcome.row:
            docs.append("\n".join(outcome.row["sentences"]))
    full, tiny = folder / "books.txt", folder / "tiny.txt"
    full.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    lines = full.read_text(encoding="utf-8").splitlines()
    tiny.write_text("\n".join(lines[:10]) + "\n\n" + "\n".join(lines[10:20]) + "\n", encoding="utf-8")
    return full, tiny


def run_reference(text: Path, out: Path, dupe: int) -> float:
    return child_cpu(
        [
            str(REF_PY),
            str(ROOT / "benchmarks" / "reference_shim.py"),
            f"--input_file={text}",
            f"--output_file={out}",
            f"--vocab_file={VOCAB}",
            "--do_lower_case=True",
            "--max_seq_length=128",
            "--max_predictions_per_seq=20",
            "--masked_lm_prob=0.15",
            "--short_seq_prob=0.1",
            "--random_seed=12345",
            f"--dupe_factor={dupe}",
        ]
    )


def run_ours(text: Path, work: Path, dupe: int) -> float:
    env_py = [sys.executable, "-m", "pipelines.cli"]
    corpus, examples = work / "corpus", work / "examples"
    runner = ["--runner", "FnApiRunner"]
    cpu = child_cpu(
        [*env_py, "text", "--input", str(text), "--output", str(corpus), "--num-shards", "1", *runner]
    )
    cpu += child_cpu(
        [*env_py, "examples", "--corpus", str(corpus), "--vocab", str(VOCAB), "--output", str(examples),
         "--max-seq-length", "128", "--max-predictions-per-seq", "20", "--dupe-factor", str(dupe),
         "--seed", "12345", "--num-shards", "8", "--num-buckets", "64", *runner]
    )  # fmt: skip
    return cpu


def seed_spread(corpus: Path, dupe: int, seeds: int = SPREAD_SEEDS) -> dict:
    """How much the random-next share and the number of examples move from seed to seed on this
    input (our planner alone, seeds 0 to ``seeds`` - 1).

    With a few long documents both are decided mostly by which of the (document, pass) target
    lengths come out short (10% of them; a short target makes many more chunks, and its
    one-sentence chunks are always random next), so one seed's figures are a noisy sample: the
    tolerance for comparing either with the reference's is three of its standard deviations.
    """
    import glob

    import pyarrow as pa
    import pyarrow.ipc as ipc

    from pipelines.examples.batches import tokenize_documents
    from pipelines.examples.pairs import PairConfig, plan_cuts, seeded_generator
    from wordpiece.chunk_cache import ChunkCache
    from wordpiece.tokenizer import WordPieceTokenizer

    tokenizer = WordPieceTokenizer.load(str(VOCAB), cased=False).tokenizer
    tokenizer.encode_special_tokens = True
    table = pa.concat_tables(
        ipc.open_file(shard).read_all().select(["doc_id", "sentences"])
        for shard in sorted(glob.glob(str(corpus / "train" / "*.arrow")))
    )
    documents, _ = tokenize_documents(ChunkCache(tokenizer), table)
    shares, counts = [], []
    for seed in range(seeds):
        cuts = [
            plan_cuts(d, PairConfig(), seeded_generator(seed, d.doc_id, k))
            for d in documents
            for k in range(dupe)
        ]
        counts.append(sum(len(c.keys) for c in cuts))
        shares.append(sum(int((c.random_b_length > 0).sum()) for c in cuts) / counts[-1])

    def summary(values: list[float]) -> dict:
        return {
            "seeds": seeds,
            "mean": statistics.mean(values),
            "sd": statistics.stdev(values),
            "min": min(values),
            "max": max(values),
        }

    return {"random_next_rate": summary(shares), "examples": summary(counts)}


def marginal_ratio(runs: dict[str, list[float]], pick, ours_examples: int, ref_examples: int) -> float:
    """Ours over the reference in examples per marginal CPU-second, each side's full and tiny CPU
    time chosen from its runs by ``pick``."""

    def rate(side: str, examples: int) -> float:
        return examples / max(1e-9, pick(runs[f"{side}_full"]) - pick(runs[f"{side}_tiny"]))

    return rate("ours", ours_examples) / rate("reference", ref_examples)


def marginal_spread(runs: dict[str, list[float]], ours_examples: int, ref_examples: int) -> dict:
    """The marginal ratio of each repeat alone (its full run less its tiny run, both systems),
    and from the least CPU time of each command over the runs: how far noise moves it."""
    per_repeat = [
        marginal_ratio(runs, lambda values, k=k: values[k], ours_examples, ref_examples)
        for k in range(len(runs["ours_full"]))
    ]
    return {
        "per_repeat": per_repeat,
        "per_repeat_min": min(per_repeat),
        "per_repeat_max": max(per_repeat),
        "least_of_runs": marginal_ratio(runs, min, ours_examples, ref_examples),
    }


def compare(ours: dict, ref: dict, spread: dict) -> dict:
    """Each statistic side by side with its tolerance, and whether it is within it; the
    random-next share and the number of examples within three sd of their seed-to-seed spread."""
    tolerances = {
        "examples": 3 * spread["examples"]["sd"],
        "random_next_rate": max(TOLERANCE, 3 * spread["random_next_rate"]["sd"]),
        "mask_rate": TOLERANCE,
        "masked_share_mask": TOLERANCE,
        "masked_share_random": TOLERANCE,
        "masked_share_unchanged": TOLERANCE,
    }
    return {
        k: {"ours": ours[k], "reference": ref[k], "tolerance": t, "within": abs(ours[k] - ref[k]) <= t}
        for k, t in tolerances.items()
    }


def main() -> None:
    """Run both systems on the tiny and full inputs, print and save the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--books", type=int, default=8)
    parser.add_argument("--dupe-factor", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5, help="runs of each command, tiny and full")
    args = parser.parse_args()
    ensure_reference_venv()
    os.environ["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        full, tiny = write_input(work, args.books)
        runs: dict[str, list[float]] = {}
        # Tiny then full, the two systems alternating, in every repeat (see the docstring).
        for k in range(args.repeats):
            for name, text in (("tiny", tiny), ("full", full)):
                ref_out = work / f"ref-{name}-{k}.tfrecord"
                runs.setdefault(f"reference_{name}", []).append(
                    run_reference(text, ref_out, args.dupe_factor)
                )
                (work / f"{name}-{k}").mkdir()
                runs.setdefault(f"ours_{name}", []).append(
                    run_ours(text, work / f"{name}-{k}", args.dupe_factor)
                )
        cpu = {key: statistics.median(values) for key, values in runs.items()}
        ref = json.loads(
            subprocess.run(
                [str(REF_PY), str(ROOT / "benchmarks" / "reference_shim.py"), "stats",
                 str(work / "ref-full-0.tfrecord"), str(VOCAB)],
                check=True, capture_output=True, text=True,
            ).stdout.strip().splitlines()[-1]
        )  # fmt: skip
        ours = json.loads((work / "full-0" / "examples" / "stats.json").read_text())
        spread = seed_spread(work / "full-0" / "corpus", args.dupe_factor)
        input_mb = full.stat().st_size / 1e6
    result = {
        "reference_revision": REVISION,
        "input": f"{args.books} Gutenberg books in the reference format ({input_mb:.2f} MB), one file",
        "params": {"max_seq_length": 128, "max_predictions_per_seq": 20, "dupe_factor": args.dupe_factor,
                   "seed": 12345, "vocab": VOCAB.name},
        "cpu_s": cpu,
        "cpu_s_runs": runs,
        "reference_examples": ref["examples"],
        "ours_examples": ours["examples"],
    }  # fmt: skip
    for side, n in (("reference", ref["examples"]), ("ours", ours["examples"])):
        marginal = statistics.median(
            full - tiny for full, tiny in zip(runs[f"{side}_full"], runs[f"{side}_tiny"], strict=True)
        )
        result[f"{side}_marginal_cpu_s"] = marginal
        result[f"{side}_examples_per_cpu_s"] = n / cpu[f"{side}_full"]
        result[f"{side}_marginal_examples_per_cpu_s"] = n / max(1e-9, marginal)
    result["ratio_whole"] = result["ours_examples_per_cpu_s"] / result["reference_examples_per_cpu_s"]
    result["ratio_marginal"] = (
        result["ours_marginal_examples_per_cpu_s"] / result["reference_marginal_examples_per_cpu_s"]
    )
    result["ratio_marginal_spread"] = marginal_spread(runs, ours["examples"], ref["examples"])
    result["statistics"] = compare(ours, ref, spread)
    result["random_next_rate_over_seeds"] = spread["random_next_rate"]
    result["examples_over_seeds"] = spread["examples"]
    result["tolerance"] = TOLERANCE
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    noise = result["ratio_marginal_spread"]
    print(
        f"ours / reference per CPU-second: {result['ratio_marginal']:.1f}x marginal (median of "
        f"{len(noise['per_repeat'])} repeats; each repeat {noise['per_repeat_min']:.1f}-"
        f"{noise['per_repeat_max']:.1f}x; least of runs {noise['least_of_runs']:.1f}x), "
        f"{result['ratio_whole']:.2f}x whole command",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
