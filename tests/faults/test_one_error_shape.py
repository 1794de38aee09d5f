"""One seed range and one error shape across the commands, each error said once (issue 37): a file
named like a dump that is not one says what it holds, an HF weights file missing or adding a tensor
is not blamed on config.json, a stop inside a `chain` stage is the chain's one line, and torch's
DataLoader worker warning is the trainer's one log line."""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import signal
import subprocess
import sys
import warnings

import pytest
from click.testing import CliRunner

from chain.run import run_process
from pretrain.data import ExampleShards, ShardLoader
from pretrain.train import worker_count
from schemas.commands import CHAIN_STAGE
from tests.clis import CLIS
from tests.conftest import require
from tests.faults.finetune_inputs import QUICK, RTE
from tests.unit.test_finetune_common import hf_folder

SEED = "--seed must be between 0 and 4,294,967,295, got {}"


def _run(tool: str, *args: str):
    return CliRunner().invoke(CLIS[tool], list(args), prog_name=tool)


@pytest.mark.parametrize("seed", ["-1", str(10**30), "4294967296"])
def test_every_command_takes_one_seed_range_with_one_message(seed, tmp_path):
    t = str(tmp_path)
    lines = {
        "pipelines": ["examples", "--corpus", t, "--vocab", t, "--output", f"{t}/o"],
        "pretrain": ["--shards", t, "--output", f"{t}/o"],
        "chain": ["--wiki-dump", t, "--workdir", f"{t}/o"],
        "finetune": ["glue", "--task", "mrpc", "--data-dir", t, "--checkpoint", t, "--output", f"{t}/o"],
    }
    for tool, args in lines.items():
        result = _run(tool, *args, "--seed", seed)
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert SEED.format(f"{int(seed):,}") in result.output


@pytest.mark.parametrize(
    ("kind", "data"),
    [("uncompressed", b"plain text\n"), ("gzip", gzip.compress(b"plain text\n", mtime=0))],
    ids=["uncompressed", "gzip"],
)
def test_a_file_named_as_a_dump_that_is_not_one_says_what_it_holds_once(kind, data, tmp_path):
    (tmp_path / "dump.xml.bz2").write_bytes(data)
    args = [
        "wikipedia",
        "--input",
        str(tmp_path / "dump.xml.bz2"),
        "--output",
        str(tmp_path / "o"),
        "--runner",
        "FnApiRunner",
    ]
    result = _run("pipelines", *args)
    assert result.exit_code == 1
    errors = [
        line for line in result.output.splitlines() if tmp_path.name in line and "dump.xml.bz2:" in line
    ]
    assert errors == [
        f"error: --output {tmp_path}/o: not marked COMPLETED: {tmp_path}/dump.xml.bz2: input is empty or not XML "
        f"(syntax error at line 1); the file holds {kind} data"
    ]


@pytest.mark.parametrize("change", ["stray", "missing"])
def test_a_weights_file_missing_or_adding_a_tensor_is_named_as_the_damaged_file(change, tmp_path):
    from safetensors.numpy import load_file, save_file

    bert = hf_folder(tmp_path / "bert")
    weights = load_file(bert / "model.safetensors")
    name = "bert.encoder.layer.0.attention.self.query.weight"
    if change == "stray":
        name = "bert.extra.weight"
        weights[name] = weights["bert.pooler.dense.bias"]
    else:
        weights.pop(name)
    save_file(weights, bert / "model.safetensors")
    (tmp_path / "rte").mkdir()
    for split in ("train.tsv", "dev.tsv"):
        shutil.copy(require(RTE / split), tmp_path / "rte" / split)
    args = ["glue", "--task", "rte", "--data-dir", str(tmp_path / "rte"), "--checkpoint", str(bert)]
    result = _run("finetune", *args, "--output", str(tmp_path / "o"), *QUICK)
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"error: --checkpoint {bert}: {bert}/model.safetensors: {'unexpected' if change == 'stray' else 'missing'} "
        f"tensor {name}, though its sizes are those of {bert}/config.json: the weights file is damaged or was "
        "edited; save or export the model again"
    )


STOPPED = """import time, click
from schemas.commands import OneLineCommand

@click.command(cls=OneLineCommand)
def main():
    print("ready", flush=True)
    time.sleep(60)

main()
"""


def test_a_stop_inside_a_chain_stage_is_the_chains_to_say():
    said = {}
    for name, env in (("alone", os.environ), ("stage", {**os.environ, CHAIN_STAGE: "1"})):
        process = subprocess.Popen(
            [sys.executable, "-c", STOPPED],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert process.stdout.readline() == "ready\n"  # in the command, its handlers set
        process.send_signal(signal.SIGINT)
        said[name] = (process.wait(timeout=30), process.stderr.read())
    assert said == {"alone": (130, "error: interrupted by SIGINT\n"), "stage": (130, "")}
    check = f"import os, sys; sys.exit(0 if os.environ.get({CHAIN_STAGE!r}) else 3)"
    assert run_process([sys.executable, "-c", check])[0] == 0  # what chain runs is told it is a stage


def test_more_dataloader_workers_than_cpus_is_one_log_line_not_torchs_warnings(shards, monkeypatch, caplog):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    with caplog.at_level(logging.WARNING, logger="pretrain"):
        assert worker_count(64, 8) == 8
    assert [r.getMessage() for r in caplog.records] == [
        "--num-workers 64: 8 DataLoader workers (a divisor of the shards' 8 streams) on 2 CPU(s); more workers "
        "than CPUs slow the run down: give --num-workers 2 or fewer"
    ]
    monkeypatch.undo()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with warnings.catch_warnings(record=True) as caught:  # the trainer's filter is on (worker_count above)
        ShardLoader(ExampleShards(str(shards), batch_size=2, streams=2), num_workers=cpus + 2)
    assert [str(w.message) for w in caught] == []
