"""The figures of ``benchmarks/gpu_check.sh``: each run summarised as JSON, and all of them in one file.

    python3 benchmarks/gpu_check.py machine OUT                   OUT/machine.json
    python3 benchmarks/gpu_check.py run OUT NAME RUN_DIR RC WALL_S LOG -- COMMAND...
    python3 benchmarks/gpu_check.py skipped OUT NAME REASON -- COMMAND...
    python3 benchmarks/gpu_check.py step OUT NAME RC WALL_S LOG RESULT_JSON
    python3 benchmarks/gpu_check.py collect OUT                   OUT/gpu_check.json

A ``pretrain`` run's figures come from its metrics records after the start-up window
(``startup_window``), weighted by each window's time: real tokens/s, samples/s, MFU, the share of
time waiting for data, peak GPU memory. A run that failed or timed out keeps its exit status and log
tail. Standard library only (a bare GPU image).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n, x

LOG_TAIL_LINES = 15
NOT_MEASURED = (
    "pre-training on a GPU (`pretrain` BERT-base at seq 128 and 512, every `--batching` layout, bf16 and "
    "fp16, compiled and eager, CUDA graphs; one step against transformers' BertForPreTraining on the same "
    "batches): **not measured** (no `results/gpu_check.json` yet). `make gpu-data` here, then "
    "`bash benchmarks/gpu_check.sh` on a GPU machine, and copy its `gpu_check.json` into `benchmarks/results/`."
)


def steady_figures(records: list[dict]) -> dict:
    """Time-weighted figures of the training records that are not a start-up window."""
    train = [r for r in records if r.get("split", "train") == "train"]
    steady = [r for r in train if not r.get("startup_window", r is train[0])]
    out: dict = {"records": len(train), "steady_records": len(steady)}
    if train:
        last = train[-1]
        out |= {"steps": last["step"], "loss": last["loss"], "skipped_steps": last["skipped_steps"]}
        memory = [r["peak_memory_gb"] for r in train if "peak_memory_gb" in r]
        if memory:
            out["peak_memory_gb"] = max(memory)
    seconds = [r["tokens"] / r["tokens_per_s"] for r in steady if r["tokens_per_s"] > 0]
    total_s = sum(seconds)
    if not steady or total_s <= 0:
        return out
    start = train.index(steady[0])

    def weighted(key: str) -> float:
        return sum(r[key] * s for r, s in zip(steady, seconds, strict=True)) / total_s

    out["steady_steps"] = steady[-1]["step"] - (train[start - 1]["step"] if start else 0)
    out["steady_s"] = total_s
    out["tokens_per_s"] = sum(r["tokens"] for r in steady) / total_s
    out["samples_per_s"] = weighted("samples_per_s")
    out["data_wait_share"] = weighted("data_wait_share")
    if all("mfu" in r for r in steady):
        out["mfu"] = weighted("mfu")
    return out


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of a log (empty when there is none)."""
    return path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []


def run_record(name: str, run_dir: Path, rc: int, wall_s: float, log: Path, command: list[str]) -> dict:
    """One ``pretrain`` run: its settings as given, exit status, wall time, steady-state figures."""
    record = {"name": name, "command": " ".join(command), "rc": rc, "wall_s": wall_s}
    record["status"] = "ok" if rc == 0 else ("timed out" if rc in (124, 137) else "failed")
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        record |= steady_figures(
            [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        )
    if rc != 0:
        record["log_tail"] = log_tail(log)
    warnings = [line for line in log_tail(log, 10**6) if "WARNING" in line or "fall back" in line.lower()]
    if warnings:
        record["warnings"] = warnings[:5]
    return record


def step_record(name: str, rc: int, wall_s: float, log: Path, result: Path) -> dict:
    """The one-step pairing (``train_step.py --device cuda``): its own JSON, with exit status."""
    record = {"name": name, "rc": rc, "wall_s": wall_s, "status": "ok" if rc == 0 else "failed"}
    if result.exists():
        record["result"] = json.loads(result.read_text())
    if rc != 0:
        record["log_tail"] = log_tail(log)
    return record


def machine_record() -> dict:
    """The machine (:func:`harness.machine`), and the GPU, torch and transformers as found."""
    record = harness.machine()
    try:
        import torch

        record["torch"] = torch.__version__
        record["gpu"] = None
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            record |= {
                "gpu": props.name,
                "gpu_memory_gb": props.total_memory / 2**30,
                "cuda": torch.version.cuda,
            }
        import transformers

        record["transformers"] = transformers.__version__
    except ImportError as err:
        record["import_error"] = str(err)
    return record


def collect(out: Path) -> dict:
    """Everything under ``out`` in one record: the machine, every run, the pairing, the SDPA check."""
    result: dict = {"machine": _read(out / "machine.json"), "runs": [], "steps": []}
    for path in sorted((out / "runs").glob("*.json"), key=lambda p: _read(p).get("order", 0)):
        record = _read(path)
        result["steps" if record.get("kind") == "step" else "runs"].append(record)
    if (out / "sdpa_check.json").exists():
        result["sdpa_check"] = _read(out / "sdpa_check.json")
    result["conditions"] = harness.measured("bash benchmarks/gpu_check.sh", result["machine"])
    return result


def step_rows(step: dict, gpu: str) -> list[Row]:
    """The one-step pairing's ratios (ours, and ours compiled, against transformers fed by its collator)."""
    found, result = [], step.get("result") or {}
    peer = "BertForPreTraining (SDPA) fed by DataCollatorForLanguageModeling"
    for run in result.get("runs", []):
        what = (
            f"one training step on {gpu}, config {run['config']}, batch {run['batch_size']} of real enwiki "
            f"shards at seq 128, {result.get('precision', '?')}, AdamW, clipping; the same batches for every variant"
        )
        v = run["variants"]
        for ours, prefix in (("ours", ""), ("ours_compiled", "compiled_")):
            if ours in v:
                ratio = x(run[f"{prefix}speedup_vs_transformers_collator"])
                peer_figure = f"{peer}: {n(v['transformers_collator']['tokens_per_s'])} tokens/s"
                found.append((what, f"{ours}: {n(v[ours]['tokens_per_s'])} tokens/s", peer_figure, ratio))
    if step["status"] != "ok":
        found.append((f"one training step on {gpu}", step["status"], "—", "—"))
    return found


def rows(r: dict) -> list[Row]:
    """One row per ``pretrain`` run of the GPU check (no peer), and the one-step pairing's ratios."""
    gpu, found = (r.get("machine") or {}).get("gpu") or "no GPU named", []
    for run in r["runs"]:
        config = re.search(r"--config (\S+)", run.get("command", ""))
        what = f"pre-training on {gpu}, `{run['name']}`, config {config[1] if config else '?'}, steady state"
        if "tokens_per_s" not in run:
            found.append((what, run["status"], "—", "—"))
            continue
        mfu = f", MFU {run['mfu']:.3f}" if "mfu" in run else ""
        wait, peak = run["data_wait_share"], run.get("peak_memory_gb", 0)
        found.append(
            (
                what,
                f"{n(run['tokens_per_s'])} tokens/s{mfu}, data wait {wait:.1%}, peak {peak:.1f} GiB",
                "—",
                "—",
            )
        )
    return found + [row for step in r["steps"] for row in step_rows(step, gpu)]


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")


def main(argv: list[str]) -> int:
    command, out, *rest = argv
    out = Path(out)
    given = rest[rest.index("--") + 1 :] if "--" in rest else []
    rest = rest[: rest.index("--")] if "--" in rest else rest
    order = len(list((out / "runs").glob("*.json")))
    if command == "machine":
        _write(out / "machine.json", machine_record())
    elif command == "run":
        name, run_dir, rc, wall_s, log = rest
        record = run_record(name, Path(run_dir), int(rc), float(wall_s), Path(log), given)
        _write(out / "runs" / f"{name}.json", record | {"order": order})
        print(
            " | ".join(rows({"runs": [record], "steps": []})[0][1:]) + f"  ({record['status']}, {wall_s} s)"
        )
    elif command == "skipped":
        name, reason = rest
        record = {"name": name, "status": reason, "command": " ".join(given), "order": order}
        _write(out / "runs" / f"{name}.json", record)
    elif command == "step":
        name, rc, wall_s, log, result = rest
        record = step_record(name, int(rc), float(wall_s), Path(log), Path(result))
        _write(out / "runs" / f"{name}.json", record | {"kind": "step", "order": order})
    elif command == "collect":
        result = collect(out)
        _write(out / "gpu_check.json", result)
        print("\n".join(" | ".join(row) for row in rows(result)))
    else:
        print(f"unknown command {command!r}: machine, run, skipped, step or collect", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
