"""The training step never waits for the device: counted on the CPU, on real shards.

On a GPU a read of a device value (``.item()``, ``bool()``, ``float()``, ``.tolist()``,
``.cpu()``, a tensor made from host values directly on the device, an op whose output size
depends on the data) makes the host wait until every queued kernel has run. On the CPU nothing
waits, so :class:`SyncCounter` tells device values from host ones itself: the tensors of the
batches the trainer reads (the host side) and whatever is computed from them alone are host
tensors; everything else (parameters, gradients, optimizer state, the batch's copy that the feed
puts "on the device", anything computed from them) is a device tensor. It counts every read of a
device tensor while the steps run, and none is allowed between two metrics records. The trainer
runs as on CUDA: fused AdamW (``FUSED_DEVICES`` widened to the CPU), and the feed's copy to the
device is a real copy (a clone, marked as a device tensor).
"""

from __future__ import annotations

import contextlib
import traceback
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from pretrain import optim
from pretrain.config import PretrainConfig
from pretrain.feed import DeviceFeed
from pretrain.startup import Processes
from pretrain.train import Trainer

pytestmark = pytest.mark.slow

aten = torch.ops.aten
READS = {aten._local_scalar_dense.default, aten.equal.default}
"""Ops that hand a device value to the host (``item``, ``bool``, ``float``, ``int`` end in the first)."""
DATA_DEPENDENT = {aten.nonzero.default, aten.masked_select.default, aten._unique2.default}
"""Ops whose output size the host must read from the device (boolean indexing ends in nonzero)."""
HOST_COPIES = {"tolist", "numpy", "cpu", "__array__"}
"""Tensor methods that copy a device tensor to the host."""


class SyncCounter:
    """Track host and device tensors (see the module docstring) and count device reads."""

    def __init__(self) -> None:
        self.host = WeakIdKeyDictionary()
        self.counting = False
        self.found: list[str] = []

    def is_host(self, tensor: torch.Tensor) -> bool:
        return tensor in self.host

    def mark_host(self, batch: dict) -> dict:
        for value in batch.values():
            if isinstance(value, torch.Tensor):
                self.host[value] = True
        return batch

    def record(self, what: str) -> None:
        if self.counting:
            where = [
                f"{f.filename}:{f.lineno}"
                for f in traceback.extract_stack()[:-3]
                if "/pretrain/" in f.filename
            ]
            self.found.append(f"{what} at {' < '.join(reversed(where[-3:]))}")

    def source(self, batches):
        """The trainer's host batches, read with counting paused (reading data is host work), each
        batch's tensors marked as host tensors."""
        batches = iter(batches)
        while True:
            counting, self.counting = self.counting, False
            try:
                batch, position = next(batches)
            except StopIteration:
                return
            finally:
                self.counting = counting
            yield self.mark_host(batch), position

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """The feed's copy to the device: a new tensor, not a host one."""
        copy = tensor.clone()
        self.host.pop(copy, None)
        return copy

    @contextlib.contextmanager
    def watching(self):
        with _Functions(self), _Dispatch(self):
            yield


class _Dispatch(TorchDispatchMode):
    def __init__(self, counter: SyncCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        host = bool(inputs) and all(self.counter.is_host(t) for t in inputs)
        if not host and (func in READS or func in DATA_DEPENDENT):
            self.counter.record(str(func))
        out = func(*args, **kwargs)
        for tensor in pytree.tree_leaves(out):  # in place: a host tensor written from the device is not
            if isinstance(tensor, torch.Tensor):
                if host:
                    self.counter.host[tensor] = True
                else:
                    self.counter.host.pop(tensor, None)
        return out


class _Functions(TorchFunctionMode):
    def __init__(self, counter: SyncCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in HOST_COPIES and args and not self.counter.is_host(args[0]):
            self.counter.record(f"Tensor.{name}")
        if name in ("tensor", "as_tensor") and kwargs.get("device") is not None:
            self.counter.record(f"torch.{name}(..., device=...): a blocking copy to the device")
        return func(*args, **kwargs)


def _trainer(shards: Path, tmp_path: Path, procs: Processes, **settings) -> Trainer:
    settings = {"precision": "fp32", **settings}
    cfg = PretrainConfig(
        shards=str(shards),
        output=str(tmp_path / "run"),
        config="tiny",
        global_batch_size=8,
        micro_batch_size=4,
        num_workers=0,
        max_steps=10,
        **settings,
    )
    return Trainer(cfg, procs)


def _count_steps(trainer: Trainer, counter: SyncCounter, steps: int) -> list[str]:
    """Run ``steps`` training steps as :meth:`Trainer.fit` does between two records, counting."""
    feed = DeviceFeed(counter.source(trainer.batches()), trainer.procs.device)
    trainer.model.train()
    try:
        with counter.watching():
            counter.counting = True
            for _ in range(steps):
                grad_norm, _ = trainer.step(feed)
            counter.counting = False
            record = trainer.log(grad_norm, 0.0)  # the record's reads are allowed: it is a log step
    finally:
        feed.close()
    assert record["step"] == steps and record["loss"] > 0
    return counter.found


@pytest.fixture
def like_cuda(monkeypatch):
    """The trainer as on CUDA: fused AdamW, and a feed that copies to the device."""
    counter = SyncCounter()
    monkeypatch.setattr(optim, "FUSED_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(DeviceFeed, "_copy", lambda self, tensor: counter.to_device(tensor))
    return counter


CPU = Processes(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


@pytest.mark.parametrize(
    "settings",
    [
        {"optimizer": "adamw", "batching": "padded"},
        {"optimizer": "lamb", "batching": "packed", "precision": "fp16"},
        {"optimizer": "adamw", "batching": "bucketed", "bucket_window": 2, "precision": "bf16"},
    ],
    ids=["adamw-padded-fp32", "lamb-packed-fp16", "adamw-bucketed-bf16"],
)
def test_steps_between_two_records_never_read_the_device(shards, tmp_path, like_cuda, settings):
    found = _count_steps(_trainer(shards, tmp_path, CPU, **settings), like_cuda, steps=2)
    assert found == [], "\n".join(found)


def test_the_counter_sees_a_read_of_a_device_value(shards, tmp_path, like_cuda):
    """The control: the same steps with one ``float()`` of a device loss are caught."""
    trainer = _trainer(shards, tmp_path, CPU)
    add = trainer.window.add

    def add_and_read(loss, batch):
        add(loss, batch)
        float(loss.mlm_loss.detach())  # what a careless metrics line would do

    trainer.window.add = add_and_read
    found = _count_steps(trainer, like_cuda, steps=2)
    assert len(found) == 4 and all("_local_scalar_dense" in f for f in found)  # 2 steps x 2 micro batches


def test_ddp_loss_weights_and_stop_votes_do_not_wait_either(shards, tmp_path, like_cuda):
    """Under DDP the loss weights come from an all-reduce on the device and the stop vote from a
    background one on the host: no read of a device value either (a one-process gloo group
    standing in for two ranks)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        trainer = _trainer(shards, tmp_path, Processes(rank=0, world_size=2, local_rank=0, device=CPU.device))
        found = _count_steps(trainer, like_cuda, steps=2)
        assert found == [], "\n".join(found)
        weights = trainer._loss_weights([next(DeviceFeed(trainer.batches(), CPU.device))])
        assert all(isinstance(w, torch.Tensor) for w in weights[0])  # device scalars, not floats
    finally:
        dist.destroy_process_group()
