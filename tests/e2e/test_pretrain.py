"""`pretrain` on shards written by `pipelines examples` from the real enwiki excerpt.

A tiny BERT trains and its MLM loss falls; a run killed with SIGKILL and resumed ends bitwise equal
to one that never stopped; two DDP processes (gloo) keep identical weights on disjoint data;
bf16 and fp16 autocast run on CPU; export loads in transformers; bad inputs fail before step 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pretrain import checkpoint as ckpt
from pretrain.config import PretrainConfig
from pretrain.model import BertConfig, BertForPreTraining
from pretrain.train import train
from schemas.commands import InputError, OutputError, UsageError
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TINY = {"config": "tiny", "global_batch_size": 16, "precision": "fp32", "num_workers": 0, "log_steps": 5}


def _records(run: Path, split: str = "train") -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def test_tiny_bert_learns_and_writes_its_run(shards, validation_shards, tmp_path):
    run = tmp_path / "run"
    cfg = PretrainConfig(
        shards=str(shards),
        output=str(run),
        validation_shards=str(validation_shards),
        max_steps=60,
        lr=2e-3,
        warmup_steps=6,
        save_steps=30,
        eval_batches=4,
        eval_steps=30,
        **TINY,
    )
    train(cfg)
    records = _records(run)
    assert [r["step"] for r in records] == list(range(5, 61, 5))
    assert records[-1]["mlm_loss"] < records[0]["mlm_loss"] - 1.0
    seen = [r["tokens_seen"] for r in records]
    assert seen == sorted(seen) and seen[0] > 5 * 16 * 10  # five steps of 16 examples of 10+ tokens
    # tokens and masked_tokens count the window's own batches: their sum is tokens_seen
    assert [sum(r["tokens"] for r in records[: i + 1]) for i in range(len(records))] == seen
    assert all(0.1 < r["masked_tokens"] / r["tokens"] < 0.22 for r in records)
    for record in records:
        assert (
            0 <= record["data_wait_share"] <= 1 and record["grad_norm"] > 0 and record["skipped_steps"] == 0
        )
    # step 10 runs at schedule position 9: past the 6 warm-up steps, decaying linearly to 0 at 60
    assert records[1]["lr"] == pytest.approx(2e-3 * (60 - 9) / 54)
    validation = _records(run, "validation")
    assert [r["step"] for r in validation] == [30, 60]
    assert validation[-1]["mlm_perplexity"] < validation[0]["mlm_perplexity"]
    assert all(0 <= r["nsp_accuracy"] <= 1 for r in validation)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-00000030", "step-00000060"]
    assert (run / "plots" / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any(p.name.startswith("events.out.tfevents") for p in (run / "tensorboard").iterdir())


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "pretrain", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def _args(shards: Path, run: Path, *extra: str) -> list[str]:
    return [
        "--shards",
        str(shards),
        "--output",
        str(run),
        "--config",
        "tiny",
        "--global-batch-size",
        "8",
        "--max-steps",
        "40",
        "--save-steps",
        "4",
        "--keep-checkpoints",
        "20",
        "--log-steps",
        "4",
        "--precision",
        "fp32",
        "--num-workers",
        "1",
        "--lr",
        "1e-3",
        "--warmup-steps",
        "4",
        "--quiet",
        *extra,
    ]


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run / "checkpoints" / f"step-{step:08d}" / "model.safetensors")


def test_two_ddp_processes_share_weights_and_split_the_data(shards, tmp_path):
    """Observed from outside the trainer (tests/e2e/ddp_ranks.py): each rank's weights and examples."""
    run, report = tmp_path / "run", tmp_path / "report"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    args = _args(shards, run)
    args[args.index("--max-steps") + 1] = "6"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*torchrun, str(ROOT / "tests/e2e/ddp_ranks.py"), str(report), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ranks = [json.loads((report / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]
    assert len(ranks[0]["examples"]) == len(ranks[1]["examples"]) == 6 * 4  # 8 per step over 2 ranks
    assert not set(ranks[0]["examples"]) & set(ranks[1]["examples"])
    step = run / "checkpoints" / "step-00000006"
    assert (step / "rng-rank00001.json").exists() and (step / "rng-rank00001.safetensors").exists()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_on_cpu(shards, tmp_path, precision):
    cfg = PretrainConfig(
        shards=str(shards),
        output=str(tmp_path / precision),
        max_steps=4,
        save_steps=4,
        **{**TINY, "precision": precision, "global_batch_size": 8, "log_steps": 2},
    )
    record = train(cfg)
    assert record["step"] == 4 and torch.isfinite(torch.tensor(record["loss"]))
    if precision == "bf16":
        assert record["loss_scale"] == 1.0
    else:  # the scaler starts at 2**16 and halves on every step whose gradients overflow
        assert 1.0 <= record["loss_scale"] <= 65536.0


def test_export_loads_in_transformers_and_seeds_a_new_run(shards, tmp_path):
    from click.testing import CliRunner
    from transformers import BertForPreTraining as HFBert

    from pretrain.cli import main

    run = tmp_path / "run"
    train(PretrainConfig(shards=str(shards), output=str(run), max_steps=5, save_steps=5, **TINY))
    result = CliRunner().invoke(
        main, ["export", "--checkpoint", str(run), "--format", "hf", "--output", str(tmp_path / "hf")]
    )
    assert result.exit_code == 0, result.output
    ours = BertForPreTraining.from_pretrained(str(tmp_path / "hf")).eval()
    theirs, info = HFBert.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    assert not any(info.values())
    ids = torch.tensor([[101, 7592, 2088, 102, 2023, 2003, 102, 0]])
    mask = (ids != 0).long()
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 0]])
    with torch.no_grad():
        a = ours(ids, types, mask)
        b = theirs.eval()(input_ids=ids, token_type_ids=types, attention_mask=mask)
    assert torch.allclose(a.prediction_logits[0, :7], b.prediction_logits[0, :7], atol=1e-5)
    assert torch.allclose(a.seq_relationship_logits, b.seq_relationship_logits, atol=1e-5)
    # an exported folder is a starting point for a new run
    record = train(
        PretrainConfig(
            shards=str(shards),
            output=str(tmp_path / "again"),
            init_from=str(tmp_path / "hf"),
            max_steps=5,
            save_steps=5,
            **{**TINY, "config": None},
        )
    )
    assert record["step"] == 5


def test_bad_inputs_fail_before_the_first_step(shards, tmp_path):
    def fails(match: str, **overrides):
        cfg = PretrainConfig(
            **{"shards": str(shards), "output": str(tmp_path / "out"), "max_steps": 2, **TINY, **overrides}
        )
        with pytest.raises((InputError, OutputError, UsageError, ValueError), match=match):
            train(cfg)
        assert not (tmp_path / "out" / "metrics.jsonl").exists()

    empty = tmp_path / "empty"
    empty.mkdir()
    fails("no manifest.json", shards=str(empty))
    incomplete = tmp_path / "incomplete"
    incomplete.mkdir()
    (incomplete / "manifest.json").write_text((shards / "manifest.json").read_text())
    fails("COMPLETED", shards=str(incomplete))
    fails("made with 64", max_seq_length=128)
    other_vocab = tmp_path / "vocab.txt"
    tokens = (Path(str(SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"))).read_text().splitlines()
    other_vocab.write_text("\n".join(tokens[:-10]) + "\n")
    fails("not the vocabulary the shards", vocab=str(other_vocab))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    fails("not writable", output=str(blocker / "run"))
    # a model whose vocabulary or positions do not fit the shards
    small = BertForPreTraining(BertConfig.preset("tiny", 1000))
    small.save_pretrained(str(tmp_path / "small-vocab"))
    fails("vocabulary of 1000 tokens", init_from=str(tmp_path / "small-vocab"), config=None)
    short = BertForPreTraining(BertConfig.preset("tiny", len(tokens), max_position_embeddings=32))
    short.save_pretrained(str(tmp_path / "short"))
    fails("32 positions", init_from=str(tmp_path / "short"), config=None)
    # a checkpoint of another size
    train(PretrainConfig(shards=str(shards), output=str(tmp_path / "run"), max_steps=2, save_steps=2, **TINY))
    fails("not --config mini", resume=str(tmp_path / "run"), output=None, config="mini", max_steps=4)
    fails("already at step 2", resume=str(tmp_path / "run"), output=None, config=None, max_steps=2)


@pytest.mark.emulator
def test_train_from_and_checkpoint_to_a_bucket(gcs_emulator, shards, tmp_path):
    import fsspec

    fs = fsspec.filesystem("gs")
    fs.put(str(shards), "bert-bucket/shards/seq64", recursive=True)  # with the vocab.txt they carry
    common = {**TINY, "save_steps": 3, "log_steps": 3}
    train(
        PretrainConfig(
            shards="gs://bert-bucket/shards/seq64", output="gs://bert-bucket/runs/t", max_steps=3, **common
        )
    )
    names = set(fs.find("bert-bucket/runs/t"))
    assert {
        "bert-bucket/runs/t/checkpoints/step-00000003/COMMITTED",
        "bert-bucket/runs/t/checkpoints/step-00000003/model.safetensors",
        "bert-bucket/runs/t/metrics.jsonl",
        "bert-bucket/runs/t/plots/curves.png",
    } <= names
    assert any("/tensorboard/events.out.tfevents" in n for n in names)
    record = train(
        PretrainConfig(
            shards="gs://bert-bucket/shards/seq64",
            resume="gs://bert-bucket/runs/t",
            output=None,
            max_steps=6,
            **common,
        )
    )
    assert record["step"] == 6
    lines = fs.cat_file("bert-bucket/runs/t/metrics.jsonl").decode().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [3, 6]
    from click.testing import CliRunner

    from pretrain.cli import main

    out = tmp_path / "hf"
    result = CliRunner().invoke(
        main, ["export", "--checkpoint", "gs://bert-bucket/runs/t", "--output", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "step 6" in result.output and (out / "vocab.txt").exists() and (out / "model.safetensors").exists()


def test_gradient_accumulation_matches_one_big_batch(shards, tmp_path):
    """4 micro batches of 4 and one batch of 16 take the same steps: the step's loss is the mean
    over all its masked tokens, however the batch is split. No dropout; a large Adam epsilon, so
    that float noise in near-zero gradients is not blown up to whole steps by Adam's division."""
    # one stream: step k takes examples 16k..16k+15 of the epoch's sequence either way
    common = {
        **TINY,
        "dropout": 0.0,
        "max_steps": 3,
        "save_steps": 3,
        "lr": 1e-3,
        "streams": 1,
        "adam_eps": 1e-3,
    }
    train(PretrainConfig(shards=str(shards), output=str(tmp_path / "big"), **common))
    train(PretrainConfig(shards=str(shards), output=str(tmp_path / "acc"), micro_batch_size=4, **common))
    big, acc = _weights(tmp_path / "big", 3), _weights(tmp_path / "acc", 3)
    assert max(float((big[k] - acc[k]).abs().max()) for k in big) < 1e-6
    fresh = BertForPreTraining(BertConfig.preset("tiny", 30522), seed=12345).state_dict()
    assert not torch.allclose(fresh["bert.pooler.dense.weight"], big["bert.pooler.dense.weight"])


def test_phase_two_continues_the_model_on_other_shards(shards, validation_shards, tmp_path):
    run = tmp_path / "run"
    train(PretrainConfig(shards=str(shards), output=str(run), max_steps=4, save_steps=4, **TINY))
    record = train(
        PretrainConfig(
            shards=str(validation_shards),
            resume=str(run),
            output=None,
            max_steps=8,
            save_steps=4,
            warmup_steps=0,
            **{**TINY, "config": None},
        )
    )
    assert record["step"] == 8
    state = ckpt.load_state(str(run / "checkpoints" / "step-00000008" / "trainer"))
    assert state["data"]["shards"] == str(validation_shards)
    assert state["data"]["reader"]["batches_done"] == 4  # the new shards were read from their start
    assert state["optimizer"]["state"]  # the optimizer's moments came along


def test_dynamic_masking_takes_the_shards_settings_and_flags_override_them(shards, tmp_path):
    run = tmp_path / "dyn"
    base = {**TINY, "log_steps": 1}
    train(PretrainConfig(shards=str(shards), output=str(run), max_steps=2, dynamic_masking=True, **base))
    share = [r["masked_tokens"] / r["tokens"] for r in _records(run)]
    assert all(0.1 < s < 0.22 for s in share)  # the shards' 0.15
    run2 = tmp_path / "dyn2"
    train(
        PretrainConfig(
            shards=str(shards),
            output=str(run2),
            max_steps=2,
            dynamic_masking=True,
            masked_lm_prob=0.4,
            max_predictions_per_seq=40,
            **base,
        )
    )
    assert all(r["masked_tokens"] / r["tokens"] > 0.3 for r in _records(run2))
