"""pretrain/optim.py: the reference's polynomial decay, and LAMB's exclusions and foreach step."""

from __future__ import annotations

import pytest
import torch

from pretrain.config import PretrainConfig
from pretrain.model import BertConfig, BertForPreTraining
from pretrain.optim import (
    Lamb,
    build_optimizer,
    build_scheduler,
    parameter_groups,
    step_unless,
)
from pretrain.schedules import reference_decay


def test_reference_decay_is_bert_optimization_py():
    # init_lr * (1 - step / num_train_steps) ** power, overridden by init_lr * step / warmup
    warmup, total = 4, 20
    values = [reference_decay(s, warmup, total) for s in range(23)]
    assert values[:4] == [0.0, 0.25, 0.5, 0.75]
    assert values[4:21] == pytest.approx([1 - s / total for s in range(4, 21)])
    assert values[20:] == [0.0, 0.0, 0.0]
    assert reference_decay(10, 0, 20, power=2.0) == pytest.approx(0.25)
    assert reference_decay(0, 0, 20) == 1.0


def test_scheduler_follows_the_chosen_schedule():
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    scheduler = build_scheduler(optimizer, 2.0, 2, 10, schedule="reference", start_step=5)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2.0 * (1 - 5 / 10))
    optimizer.step()
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2.0 * (1 - 6 / 10))
    assert any(
        "--lr-schedule" in p for p in PretrainConfig(shards="s", output="o", lr_schedule="x").problems()
    )


def _lamb_by_hand(weights, grads_seq, lr, wd, adapt, eps=1e-6, betas=(0.9, 0.999)):
    """The per-tensor loop the foreach step must equal."""
    out = []
    for w in weights:
        w = w.clone()
        m, v = torch.zeros_like(w), torch.zeros_like(w)
        for t, grads in enumerate(grads_seq, start=1):
            g = grads[len(out)]
            m = betas[0] * m + (1 - betas[0]) * g
            v = betas[1] * v + (1 - betas[1]) * g * g
            u = (m / (1 - betas[0] ** t)) / ((v / (1 - betas[1] ** t)).sqrt() + eps)
            if adapt:
                u = u + wd * w
                wn, un = w.norm(), u.norm()
                u = u * (wn / un if wn > 0 and un > 0 else 1.0)
            w = w - lr * u
        out.append(w)
    return out


def test_lamb_foreach_step_equals_the_per_tensor_loop_and_skips_bias_and_layer_norm():
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.dense = torch.nn.Linear(5, 4)
    model.LayerNorm = torch.nn.LayerNorm(4)  # named as in the BERT model
    model.out = torch.nn.Linear(4, 3)
    groups = parameter_groups(model, 0.1)
    named = dict(model.named_parameters())
    no_decay_names = sorted(n for n, p in named.items() if any(p is q for q in groups[1]["params"]))
    assert no_decay_names == ["LayerNorm.bias", "LayerNorm.weight", "dense.bias", "out.bias"]
    assert [g["trust_ratio"] for g in groups] == [True, False]
    before = [[p.detach().clone() for p in g["params"]] for g in groups]
    optimizer = Lamb(groups, lr=0.05, weight_decay=0.1)
    grads_seq = [[torch.randn_like(p) for p in model.parameters()] for _ in range(3)]
    order = list(model.parameters())
    for grads in grads_seq:
        for p, g in zip(order, grads, strict=True):
            p.grad = g.clone()
        optimizer.step()
    for group, start, adapt in zip(groups, before, (True, False), strict=True):
        index = [next(i for i, q in enumerate(order) if q is p) for p in group["params"]]
        seq = [[grads[i] for i in index] for grads in grads_seq]
        wd = group["weight_decay"]
        expected = _lamb_by_hand(start, seq, 0.05, wd, adapt)
        for p, e in zip(group["params"], expected, strict=True):
            torch.testing.assert_close(p.detach(), e, rtol=1e-5, atol=1e-6)
    # a bias's first step is plain Adam: lr * sign(g), not scaled by any trust ratio
    bias = torch.nn.Parameter(torch.tensor([0.0, 0.0]))
    opt = Lamb([{"params": [bias], "weight_decay": 0.0, "trust_ratio": False}], lr=0.1, eps=0.0)
    bias.grad = torch.tensor([3.0, -0.5])
    opt.step()
    assert bias.detach().tolist() == pytest.approx([-0.1, 0.1])


def _tiny_steps(
    make_optimizer, flags=None, steps: int = 3
) -> tuple[list[torch.Tensor], torch.optim.Optimizer]:
    """A tiny BERT's weights after ``steps`` updates with seeded gradients; ``flags``: the
    ``found_inf`` given to each step (None: a plain ``step()``)."""
    model = BertForPreTraining(BertConfig.preset("tiny", 300), seed=0)
    optimizer = make_optimizer(model)
    generator = torch.Generator().manual_seed(1)
    for index in range(steps):
        for param in model.parameters():
            param.grad = torch.randn(param.shape, generator=generator)
        if flags is None:
            optimizer.step()
        else:
            step_unless(optimizer, torch.tensor(flags[index]))
    return [p.detach().clone() for p in model.parameters()], optimizer


def test_adamw_on_cpu_is_bitwise_the_per_tensor_loop_it_was():
    built, optimizer = _tiny_steps(lambda m: build_optimizer("adamw", m, 1e-2, 0.01))
    assert optimizer.defaults["foreach"] and not optimizer.defaults["fused"]  # fused only on CUDA
    loop, _ = _tiny_steps(
        lambda m: torch.optim.AdamW(parameter_groups(m, 0.01), lr=1e-2, eps=1e-6, foreach=False)
    )
    assert all(torch.equal(a, b) for a, b in zip(built, loop, strict=True))


def test_lamb_with_the_skip_flag_unset_is_bitwise_lamb_without_it():
    plain, _ = _tiny_steps(lambda m: build_optimizer("lamb", m, 1e-2, 0.01))
    flagged, optimizer = _tiny_steps(lambda m: build_optimizer("lamb", m, 1e-2, 0.01), flags=[0.0, 0.0, 0.0])
    assert all(torch.equal(a, b) for a, b in zip(plain, flagged, strict=True))
    assert [float(g["step"]) for g in optimizer.param_groups] == [3.0, 3.0]
    # a skipped step changes nothing: weights, moments and count are those of the step before it
    skipped, optimizer = _tiny_steps(
        lambda m: build_optimizer("lamb", m, 1e-2, 0.01), flags=[0.0, 1.0], steps=2
    )
    one, before = _tiny_steps(lambda m: build_optimizer("lamb", m, 1e-2, 0.01), steps=1)
    assert all(torch.equal(a, b) for a, b in zip(skipped, one, strict=True))
    assert [float(g["step"]) for g in optimizer.param_groups] == [1.0, 1.0]
    moments = [s["exp_avg_sq"] for s in optimizer.state.values()]
    assert all(torch.equal(a, b["exp_avg_sq"]) for a, b in zip(moments, before.state.values(), strict=True))
