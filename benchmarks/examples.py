"""Example generation beside Google's own generator, per CPU-second, on the same input file.

    python benchmarks/examples.py [--books 8] [--dupe-factor 5] [--repeats 5]

The peer: google-research/bert's create_pretraining_data.py, unmodified, from bert-tensorflow 1.0.4
under tensorflow-cpu 2.21.0 in its own venv (``.venv-reference``, made here when absent) through
``reference_shim.py``. Ours: ``pipelines text`` + ``pipelines examples``, the whole commands. Input:
the Gutenberg books in the reference's format; seq 128, 20 predictions, dupe 5, seed 12345. CPU
seconds of each command are measured on the full input and on its first 20 lines (the start-up,
subtracted for the marginal rate); each repeat runs reference tiny, ours tiny, reference full, ours
full back to back, and the figure is the median over repeats, with each repeat's ratio and the
ratio from each command's least CPU time. Statistics compared: masked share and 80/10/10 split
(+-0.01), random-next share and examples within 3 sd of their spread over 40 seeds of our planner.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n, x

REF_VENV = harness.ROOT / ".venv-reference"
REF_PY = REF_VENV / "bin" / "python"
SHIM = harness.ROOT / "benchmarks" / "reference_shim.py"
TOLERANCE = 0.01
SPREAD_SEEDS = 40
REVISION = "google-research/bert create_pretraining_data.py from bert-tensorflow 1.0.4 (2020 release)"
SEED = 12345
REFERENCE_FLAGS = (
    f"--do_lower_case=True --max_seq_length=128 --max_predictions_per_seq=20 --masked_lm_prob=0.15 "
    f"--short_seq_prob=0.1 --random_seed={SEED}"
)


def ensure_reference_venv() -> None:
    """Create ``.venv-reference`` with tensorflow-cpu 2.21.0 and bert-tensorflow 1.0.4 when absent."""
    if not REF_PY.exists():
        harness.run([sys.executable, "-m", "venv", str(REF_VENV)])
        pip = [str(REF_PY), "-m", "pip", "install", "--quiet"]
        harness.run([*pip, "tensorflow-cpu==2.21.0", "bert-tensorflow==1.0.4"])


def write_input(folder: Path, num_books: int) -> tuple[Path, Path]:
    """The books in the reference's format, and a tiny file (its first 20 lines)."""
    from pipelines.books.pipeline import book_outcome

    docs = []
    for book in sorted(harness.BOOKS.glob("*.txt"))[:num_books]:
        outcome = book_outcome(str(book), book.read_bytes(), 100)
        if outcome.row is not None and "sentences" in outcome.row:
            docs.append("\n".join(outcome.row["sentences"]))
    full, tiny = folder / "books.txt", folder / "tiny.txt"
    full.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    lines = full.read_text(encoding="utf-8").splitlines()
    tiny.write_text("\n".join(lines[:10]) + "\n\n" + "\n".join(lines[10:20]) + "\n", encoding="utf-8")
    return full, tiny


def run_reference(text: Path, out: Path, dupe: int) -> None:
    paths = [f"--input_file={text}", f"--output_file={out}", f"--vocab_file={harness.VOCAB}"]
    harness.run([str(REF_PY), str(SHIM), *paths, *REFERENCE_FLAGS.split(), f"--dupe_factor={dupe}"])


def run_ours(text: Path, work: Path, dupe: int) -> None:
    harness.pipelines("text", input=text, output=work / "corpus", num_shards=1)
    sizes = {"max_seq_length": 128, "max_predictions_per_seq": 20, "dupe_factor": dupe}
    shards = {"seed": SEED, "num_shards": 8, "num_buckets": 64}
    harness.pipelines(
        "examples", corpus=work / "corpus", vocab=harness.VOCAB, output=work / "examples", **sizes, **shards
    )


def seed_spread(corpus: Path, dupe: int, seeds: int = SPREAD_SEEDS) -> dict:
    """How much the random-next share and the number of examples move from seed to seed on this
    input (our planner alone, seeds 0 to ``seeds`` - 1). With a few long documents both are
    decided mostly by which target lengths come out short (10% of them; a short target makes many
    more chunks, and its one-sentence chunks are always random next), so one seed's figures are a
    noisy sample: the tolerance for comparing either with the reference's is three of its sd."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from pipelines.examples.batches import tokenize_documents
    from pipelines.examples.pairs import PairConfig, plan_cuts, seeded_generator
    from wordpiece.chunk_cache import ChunkCache
    from wordpiece.tokenizer import WordPieceTokenizer

    tokenizer = WordPieceTokenizer.load(str(harness.VOCAB), cased=False).tokenizer
    tokenizer.encode_special_tokens = True
    table = pa.concat_tables(
        ipc.open_file(shard).read_all().select(["doc_id", "sentences"])
        for shard in sorted((corpus / "train").glob("*.arrow"))
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
        sd = statistics.stdev(values)
        return {
            "seeds": seeds,
            "mean": statistics.mean(values),
            "sd": sd,
            "min": min(values),
            "max": max(values),
        }

    return {"random_next_rate": summary(shares), "examples": summary(counts)}


def marginal_ratio(cpu: dict[str, list[float]], pick, ours_examples: int, ref_examples: int) -> float:
    """Ours over the reference in examples per marginal CPU-second, each command's CPU time chosen
    from its runs by ``pick``."""

    def rate(side: str, examples: int) -> float:
        return examples / max(1e-9, pick(cpu[f"{side}_full"]) - pick(cpu[f"{side}_tiny"]))

    return rate("ours", ours_examples) / rate("reference", ref_examples)


def compare(ours: dict, ref: dict, spread: dict) -> dict:
    """Each statistic beside the reference's, with its tolerance and whether it is within it."""
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
    parser = harness.parser(__doc__, "examples")
    parser.add_argument("--books", type=int, default=8)
    parser.add_argument("--dupe-factor", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5, help="runs of each command, tiny and full")
    args = parser.parse_args()
    harness.require(harness.BOOKS, harness.VOCAB)
    ensure_reference_venv()
    dupe = args.dupe_factor
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        full, tiny = write_input(work, args.books)
        commands = {
            "reference_tiny": lambda k: run_reference(tiny, work / f"ref-tiny-{k}.tfrecord", dupe),
            "ours_tiny": lambda k: run_ours(tiny, work / f"tiny-{k}", dupe),
            "reference_full": lambda k: run_reference(full, work / f"ref-full-{k}.tfrecord", dupe),
            "ours_full": lambda k: run_ours(full, work / f"full-{k}", dupe),
        }
        runs = {name: t["cpu_s"] for name, t in harness.interleave(commands, args.repeats).items()}
        stats = harness.run(
            [str(REF_PY), str(SHIM), "stats", str(work / "ref-full-0.tfrecord"), str(harness.VOCAB)]
        )
        ref = json.loads(stats.stdout.strip().splitlines()[-1])
        ours = json.loads((work / "full-0" / "examples" / "stats.json").read_text())
        spread = seed_spread(work / "full-0" / "corpus", dupe)
        input_mb = full.stat().st_size / 1e6
    result = {
        "reference_revision": REVISION,
        "input": f"{args.books} Gutenberg books in the reference format ({input_mb:.2f} MB), one file",
        "params": {
            "max_seq_length": 128,
            "max_predictions_per_seq": 20,
            "dupe_factor": dupe,
            "seed": SEED,
            "vocab": harness.VOCAB.name,
        },
        "cpu_s": {key: statistics.median(values) for key, values in runs.items()},
        "cpu_s_runs": runs,
        "reference_examples": ref["examples"],
        "ours_examples": ours["examples"],
    }
    for side, count in (("reference", ref["examples"]), ("ours", ours["examples"])):
        marginal = statistics.median(
            f - t for f, t in zip(runs[f"{side}_full"], runs[f"{side}_tiny"], strict=True)
        )
        result[f"{side}_marginal_cpu_s"] = marginal
        result[f"{side}_examples_per_cpu_s"] = count / result["cpu_s"][f"{side}_full"]
        result[f"{side}_marginal_examples_per_cpu_s"] = count / max(1e-9, marginal)
    result["ratio_whole"] = result["ours_examples_per_cpu_s"] / result["reference_examples_per_cpu_s"]
    result["ratio_marginal"] = (
        result["ours_marginal_examples_per_cpu_s"] / result["reference_marginal_examples_per_cpu_s"]
    )
    per_repeat = [
        marginal_ratio(runs, lambda values, k=k: values[k], ours["examples"], ref["examples"])
        for k in range(args.repeats)
    ]
    result["ratio_marginal_spread"] = {
        "per_repeat": per_repeat,
        "per_repeat_min": min(per_repeat),
        "per_repeat_max": max(per_repeat),
        "least_of_runs": marginal_ratio(runs, min, ours["examples"], ref["examples"]),
    }
    result["statistics"] = compare(ours, ref, spread)
    result["random_next_rate_over_seeds"] = spread["random_next_rate"]
    result["examples_over_seeds"] = spread["examples"]
    result["tolerance"] = TOLERANCE
    harness.write(args.json, result, rows=rows)


def rows(r: dict) -> list[Row]:
    p = r["params"]
    outside = [
        f"{k} {v['ours']:.3f} vs {v['reference']:.3f}" for k, v in r["statistics"].items() if not v["within"]
    ]
    statistics_text = f"statistics within tolerance (±{r['tolerance']} for the masked shares)" + (
        f" except {', '.join(outside)}" if outside else ""
    )
    for label, key, fmt in (
        ("random-next share", "random_next_rate", ".3f"),
        ("examples", "examples", ",.0f"),
    ):
        v, seeds = r["statistics"][key], r[f"{key}_over_seeds"]["seeds"]
        statistics_text += (
            f"; {label} {v['ours']:{fmt}} vs {v['reference']:{fmt}}, tolerance ±{v['tolerance']:{fmt}} "
            f"(3 sd of its spread over {seeds} seeds on this input)"
        )
    noise = r["ratio_marginal_spread"]
    return [
        (
            f"example generation, whole command per CPU-second: `pipelines text` + `pipelines examples`, "
            f"{r['input']}, seq {p['max_seq_length']}, dupe {p['dupe_factor']}",
            f"{n(r['ours_examples_per_cpu_s'])} examples/CPU-s "
            f"({n(r['ours_marginal_examples_per_cpu_s'])} with start-up subtracted)",
            f"{r['reference_revision']}: {n(r['reference_examples_per_cpu_s'])} examples/CPU-s "
            f"({n(r['reference_marginal_examples_per_cpu_s'])} with start-up subtracted); {statistics_text}",
            f"{x(r['ratio_whole'])} whole, {x(r['ratio_marginal'])} marginal (median of {len(noise['per_repeat'])} "
            f"repeats; each repeat alone {noise['per_repeat_min']:.1f}-{noise['per_repeat_max']:.1f}x; least of runs "
            f"{noise['least_of_runs']:.1f}x)",
        )
    ]


if __name__ == "__main__":
    main()
