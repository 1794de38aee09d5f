"""The trainer's parts: schedule, weight-decay groups, LAMB, skipped steps, checkpoints, metrics."""

from __future__ import annotations

import json

import pytest
import torch

from pretrain import checkpoint as ckpt
from pretrain.config import PretrainConfig
from pretrain.metrics import MetricsLog, peak_flops
from pretrain.model import BertConfig, BertForPreTraining
from pretrain.optim import (
    Lamb,
    build_optimizer,
    build_scheduler,
    parameter_groups,
    step_unless,
)
from pretrain.schedules import warmup_decay
from schemas import storage
from schemas.commands import InputError, UsageError


def test_warmup_then_linear_decay():
    values = [warmup_decay(s, 4, 12) for s in range(14)]
    assert values[:4] == [0.25, 0.5, 0.75, 1.0]
    assert values[4:13] == pytest.approx([1 - k / 8 for k in range(9)])
    assert values[13] == 0.0
    assert warmup_decay(8, 4, 12, power=2.0) == pytest.approx(0.25)


def test_scheduler_started_mid_run_equals_one_that_ran():
    def lrs(start: int) -> list[float]:
        param = torch.nn.Parameter(torch.zeros(1))
        optimizer = torch.optim.SGD([param], lr=0.5)
        scheduler = build_scheduler(optimizer, 0.5, 3, 10, start_step=start)
        out = []
        for _ in range(start, 10):
            out.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        return out

    assert lrs(0)[4:] == lrs(4)


def test_no_weight_decay_on_biases_and_layer_norms():
    model = BertForPreTraining(BertConfig.preset("tiny", 100))
    decay, no_decay = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(not names[id(p)].endswith("bias") and "LayerNorm" not in names[id(p)] for p in decay["params"])
    assert any("LayerNorm" in names[id(p)] for p in no_decay["params"])
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.01
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_lamb_step_by_hand():
    weight = torch.nn.Parameter(torch.tensor([3.0, 4.0]))  # norm 5
    optimizer = Lamb([weight], lr=0.1, betas=(0.9, 0.999), eps=0.0, weight_decay=0.0)
    weight.grad = torch.tensor([1.0, -2.0])
    optimizer.step()
    # first step: bias-corrected m = g, v = g^2, so the update is sign(g) with norm sqrt(2);
    # the trust ratio is 5 / sqrt(2), so each coordinate moves by 0.1 * 5 / sqrt(2)
    step = 0.1 * 5 / 2**0.5
    assert weight.detach().tolist() == pytest.approx([3.0 - step, 4.0 + step])
    assert isinstance(build_optimizer("lamb", torch.nn.Linear(2, 2), 1e-3, 0.01), Lamb)


OPTIMIZERS = {
    "adamw": lambda params: torch.optim.AdamW(params, lr=0.1, foreach=True),  # skips on the host
    "adamw-fused": lambda params: torch.optim.AdamW(params, lr=0.1, fused=True),  # on the device
    "lamb": lambda params: Lamb(params, lr=0.1),  # on the device
}


def apply_gradients(params, optimizer, scaler) -> tuple[torch.Tensor, torch.Tensor]:
    """The update half of ``Trainer.step``: unscale, clip, the update unless not finite, the scaler."""
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
    skipped = (~torch.isfinite(norm)).float()
    step_unless(optimizer, skipped)
    scaler.update()
    return norm, skipped


@pytest.mark.parametrize("kind", OPTIMIZERS)
@pytest.mark.parametrize("fp16", [False, True])
def test_non_finite_gradients_are_skipped_and_never_applied(fp16, kind):
    model = torch.nn.Linear(3, 1)
    params = list(model.parameters())
    optimizer = OPTIMIZERS[kind](params)
    scaler = torch.amp.GradScaler("cpu", enabled=fp16)
    for _ in range(2):  # moments to keep
        scaler.scale(model(torch.ones(2, 3)).sum()).backward()
        apply_gradients(params, optimizer, scaler)
        optimizer.zero_grad()
    before = [p.detach().clone() for p in params]
    state = [{k: v.clone() for k, v in optimizer.state[p].items()} for p in params]
    steps = [g["step"].clone() for g in optimizer.param_groups if "step" in g]  # LAMB's count
    scale = scaler.get_scale()
    scaler.scale(model(torch.ones(2, 3)).sum()).backward()
    model.weight.grad[0, 1] = float("nan")
    norm, skipped = apply_gradients(params, optimizer, scaler)
    assert skipped.item() == 1.0 and not torch.isfinite(norm)
    assert all(torch.equal(a, b) for a, b in zip(before, params, strict=True))
    for saved, param in zip(state, params, strict=True):  # moments and step counts too
        assert all(torch.equal(value, optimizer.state[param][key]) for key, value in saved.items())
    assert steps == [g["step"] for g in optimizer.param_groups if "step" in g]
    if fp16:
        assert scaler.get_scale() == scale / 2  # the scale backs off after an overflow
    optimizer.zero_grad()
    scaler.scale(model(torch.ones(2, 3)).sum()).backward()
    norm, skipped = apply_gradients(params, optimizer, scaler)
    assert skipped.item() == 0.0 and not torch.equal(before[0], model.weight)


def test_checkpoints_count_only_when_committed_and_prune_keeps_the_newest(tmp_path):
    run = str(tmp_path / "run")
    for step in (2, 4, 6):
        url = ckpt.step_url(run, step)
        ckpt.save_state({"step": step}, storage.Folder(url), ckpt.TRAINER_STATE)
        if step != 6:
            ckpt.commit(storage.Folder(url), step)
    assert ckpt.latest(run).step == 4  # 6 has no COMMITTED: a crash while writing it
    assert ckpt.resolve(run).url.endswith("step-00000004")
    with pytest.raises(InputError, match="not a complete checkpoint"):
        ckpt.resolve(ckpt.step_url(run, 6))
    # a file that shrank after the commit makes the checkpoint incomplete
    (tmp_path / "run/checkpoints/step-00000004/trainer.json").write_bytes(b"x")
    assert ckpt.latest(run).step == 2
    ckpt.commit(storage.Folder(ckpt.step_url(run, 4)), 4)
    ckpt.commit(storage.Folder(ckpt.step_url(run, 6)), 6)
    removed = ckpt.prune(run, keep=2)
    assert [r.rsplit("/", 1)[-1] for r in removed] == ["step-00000002"]
    assert ckpt.load_state(f"{ckpt.step_url(run, 6)}/{ckpt.TRAINER_STATE}") == {"step": 6}
    with pytest.raises(InputError, match="no complete checkpoint"):
        ckpt.resolve(str(tmp_path / "elsewhere"))


def test_rng_state_round_trip():
    state = ckpt.rng_state()
    first = (torch.rand(3), __import__("numpy").random.rand(), __import__("random").random())
    ckpt.set_rng_state(state)
    again = (torch.rand(3), __import__("numpy").random.rand(), __import__("random").random())
    assert torch.equal(first[0], again[0]) and first[1:] == again[1:]


def test_metrics_on_resume_drop_records_after_the_checkpoint(tmp_path):
    log = MetricsLog(storage.Folder(tmp_path), None)
    for step in (5, 10, 15):
        log.log({"step": step, "split": "train", "loss": 1.0 / step})
    log.close()
    resumed = MetricsLog(storage.Folder(tmp_path), resume_step=10)
    resumed.log({"step": 15, "split": "train", "loss": 0.5})
    resumed.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in lines] == [(5, 0.2), (10, 0.1), (15, 0.5)]
    assert resumed.plot()[0].endswith("plots/curves.png")


def test_settings_are_checked_all_at_once():
    cfg = PretrainConfig(
        shards="s", output="o", precision="fp8", global_batch_size=0, resume="r", init_from="i"
    )
    problems = cfg.problems()
    assert len(problems) == 3 and any("fp8" in p for p in problems) and any("--resume" in p for p in problems)
    assert PretrainConfig(shards="s", output="o", global_batch_size=256).accumulation(4) == (64, 1)
    assert PretrainConfig(shards="s", output="o", global_batch_size=256, micro_batch_size=16).accumulation(
        4
    ) == (16, 4)
    with pytest.raises(UsageError, match="not divisible by the 3 ranks"):
        PretrainConfig(shards="s", output="o", global_batch_size=256).accumulation(3)


def test_peak_flops_of_known_gpus():
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16") == 989e12
    assert peak_flops("NVIDIA A100-SXM4-40GB", "fp32") == 156e12
    assert peak_flops("Some Other GPU", "bf16") is None
