"""benchmarks/gpu_check.py (the GPU check's figures) and their row in benchmarks/summary.md."""

from __future__ import annotations

import json

import pytest

from benchmarks import run_all
from benchmarks.gpu_check import NOT_MEASURED, main, run_record, steady_figures


def _record(step: int, tokens: int, seconds: float, **extra) -> dict:
    return {
        "step": step,
        "split": "train",
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "samples_per_s": 10 / seconds,
        "data_wait_share": 0.1,
        "loss": 9.0 - step / 10,
        "skipped_steps": 0,
        **extra,
    }


def test_steady_state_leaves_out_the_startup_window_and_weighs_windows_by_time():
    records = [
        _record(10, 1000, 50.0, startup_window=True, mfu=0.01, peak_memory_gb=30.0),  # compiling
        _record(20, 1000, 1.0, startup_window=False, mfu=0.4, peak_memory_gb=31.0),
        _record(30, 3000, 3.0, startup_window=False, mfu=0.2, peak_memory_gb=31.5),
        {"step": 30, "split": "validation", "mlm_loss": 3.0},
    ]
    figures = steady_figures(records)
    assert figures["tokens_per_s"] == pytest.approx(4000 / 4.0)
    assert figures["mfu"] == pytest.approx((0.4 * 1 + 0.2 * 3) / 4)
    assert figures["samples_per_s"] == pytest.approx(20 / 4)
    assert figures["steady_steps"] == 20 and figures["steps"] == 30 and figures["peak_memory_gb"] == 31.5
    # records written before the flag existed: the first window is the start-up one
    old = [{k: v for k, v in r.items() if k != "startup_window"} for r in records]
    assert steady_figures(old)["tokens_per_s"] == figures["tokens_per_s"]
    assert "tokens_per_s" not in steady_figures(records[:1])  # nothing steady: no figure made up


def test_a_failed_run_keeps_its_exit_status_and_log_tail(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("\n".join(f"line {i}" for i in range(40)) + "\nRuntimeError: CUDA out of memory\n")
    record = run_record("seq512-padded", tmp_path / "missing", 1, 12.0, log, ["python3", "-m", "pretrain"])
    assert record["status"] == "failed" and record["rc"] == 1 and "tokens_per_s" not in record
    assert record["log_tail"][-1] == "RuntimeError: CUDA out of memory" and len(record["log_tail"]) == 15
    assert run_record("x", tmp_path, 124, 150.0, log, [])["status"] == "timed out"


def test_collected_figures_render_into_the_summary_with_the_gpu_named(tmp_path):
    out = tmp_path / "out"
    run = tmp_path / "run"
    run.mkdir()
    metrics = [
        _record(10, 1000, 9.0, startup_window=True),
        _record(20, 2000, 1.0, startup_window=False, mfu=0.3),
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    log = tmp_path / "log"
    log.write_text("")
    assert (
        main(
            ["run", str(out), "seq128-padded-bf16-compiled", str(run), "0", "40", str(log), "--", "pretrain"]
        )
        == 0
    )
    assert main(["skipped", str(out), "seq512-packed-bf16-eager", "not run: the time budget was spent"]) == 0
    variants = {
        "ours": {"tokens_per_s": 400_000.0},
        "ours_compiled": {"tokens_per_s": 700_000.0},
        "transformers_collator": {"tokens_per_s": 300_000.0},
    }
    ratios = {"speedup_vs_transformers_collator": 4 / 3, "compiled_speedup_vs_transformers_collator": 7 / 3}
    step = {"runs": [{"config": "base", "batch_size": 256, "variants": variants, **ratios}]}
    (tmp_path / "step.json").write_text(json.dumps(step))
    assert (
        main(["step", str(out), "train_step_pairing", "0", "60", str(log), str(tmp_path / "step.json")]) == 0
    )
    (out / "machine.json").write_text(json.dumps({"gpu": "NVIDIA H200"}))
    assert main(["collect", str(out)]) == 0
    collected = json.loads((out / "gpu_check.json").read_text())
    assert [r["name"] for r in collected["runs"]] == [
        "seq128-padded-bf16-compiled",
        "seq512-packed-bf16-eager",
    ]
    assert collected["runs"][0]["tokens_per_s"] == 2000.0 and collected["runs"][0]["mfu"] == 0.3

    assert NOT_MEASURED in run_all.render_summary(tmp_path / "no-results")
    results = tmp_path / "results"
    results.mkdir()
    (results / "gpu_check.json").write_text((out / "gpu_check.json").read_text())
    summary = run_all.render_summary(results)
    assert NOT_MEASURED not in summary
    rows = [line for line in summary.splitlines() if line.startswith("| gpu_check |")]
    assert len(rows) == 4 and all("NVIDIA H200" in row for row in rows)
    assert "2,000 tokens/s, MFU 0.300" in rows[0] and "not run: the time budget was spent" in rows[1]
    assert "**2.33x**" in rows[3] and "700,000 tokens/s" in rows[3]
    assert "* gpu_check: `bash benchmarks/gpu_check.sh` on " in summary
