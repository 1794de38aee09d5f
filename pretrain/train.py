"""The pre-training loop: one process per device, DDP under torchrun, exact resume.

One optimizer step = ``accumulation`` micro batches per rank × ``world_size`` ranks =
``--global-batch-size`` examples, each rank reading its own streams of the shards
(:mod:`pretrain.data`). A checkpoint holds the model, optimizer, scheduler, grad scaler, every
rank's RNG states, the counters and the reader's position: on CPU a resumed run is bitwise equal
to one that never stopped (tested by SIGKILL).

No host sync inside a step: what a step counts from a batch is read from the host copy
(:mod:`pretrain.feed`); losses, counts, skipped steps and the divergence watch
(:class:`pretrain.optim.Health`) stay on the device until a metrics record or a checkpoint reads
them; with DDP the loss weights come from an all-reduce the host does not wait for, and the
ranks agree on a stop signal in a background gloo all-reduce read one step later.

Divergence stops the run at the first read after the bad step; no checkpoint after that step, nor
one holding a tensor that is not finite, is committed.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import math
import os
import random
import signal
import time
import warnings
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.distributed as dist

from pretrain import checkpoint as ckpt
from pretrain.attention import choose_kernel
from pretrain.batching import BatchLayout
from pretrain.collate import DynamicMasking, masking_from_params, validation_masking
from pretrain.config import PretrainConfig
from pretrain.data import ExampleShards, ShardLoader
from pretrain.feed import DeviceFeed, MicroBatch
from pretrain.hf import non_finite, save_hf
from pretrain.metrics import MetricsLog, peak_flops
from pretrain.model import (
    compile_for_training,
    left_to_right_batch,
    pretraining_loss,
    training_flops_per_token,
)
from pretrain.optim import Diverged, Health, build_optimizer, build_scheduler, step_unless
from pretrain.progress import Progress
from pretrain.runtime import autocast
from pretrain.startup import Processes, all_sum, barrier, check_output, init_processes, prepare
from schemas import storage
from schemas.commands import STOP_SIGNALS, InputError, OutputError, Stopped, UsageError

log = logging.getLogger("pretrain")


def train(
    cfg: PretrainConfig,
    procs: Processes | None = None,
    *,
    before_fit: Callable[[], None] | None = None,
    run_id: str | None = None,
    out: storage.Folder | None = None,
) -> dict:
    """Run (or continue) pre-training; return the last training metrics record. ``out``: the run
    folder rank 0 claimed (else the unclaimed ``--output``)."""
    if cfg.resume and not cfg.output:
        cfg = replace(cfg, output=cfg.resume)
    trainer = Trainer(cfg, procs or init_processes(), run_id=run_id, out=out)
    if before_fit is not None and trainer.procs.is_main:
        before_fit()
    return trainer.fit()


@dataclass
class Position:
    """Where a run is: optimizer steps, tokens trained on, skipped steps, the reader's place."""

    step: int = 0
    tokens_seen: int = 0
    skipped_steps: int = 0
    epoch: int = 0
    batches_done: int = 0


class _Stop:
    """A stop signal (pre-emption): the step ends, a checkpoint is saved, ``fit`` raises ``Stopped``
    (exit 128 + N); a second signal stops at once. Several ranks vote each step in a background
    gloo all-reduce and act on the vote of the step before, so every rank stops at the same step."""

    def __init__(self, procs: Processes) -> None:
        self.signum: int | None = None
        self.group = dist.new_group(backend="gloo") if procs.world_size > 1 else None
        self.pending: tuple[dist.Work, torch.Tensor] | None = None

    def __call__(self, signum, frame) -> None:
        if self.signum is not None:
            raise Stopped(signum, "the checkpoints committed before are complete")
        self.signum = signum

    def now(self) -> bool:
        """Whether every rank stops after this step."""
        if self.group is None:
            return self.signum is not None
        decided = False
        if self.pending is not None:
            work, votes = self.pending
            work.wait()
            decided = bool(votes[0] > 0)  # a host tensor
        votes = torch.tensor([float(self.signum is not None)])
        self.pending = (dist.all_reduce(votes, group=self.group, async_op=True), votes)
        return decided


Sums = namedtuple(  # a metrics window's sums over every rank
    "Sums",
    "loss mlm_loss nsp_loss mlm_correct mlm_count nsp_correct nsp_count tokens examples micro_batches widths "
    "wait_s pending_tokens",
)


class _Window:
    """This rank's sums since the last metrics record, and the counts not yet in :class:`Position`."""

    def __init__(self, device: torch.device) -> None:
        self.losses = torch.zeros(7, dtype=torch.float64, device=device)
        self.skipped = torch.zeros((), dtype=torch.float64, device=device)
        self.counts = np.zeros(4)
        self.pending_tokens = 0
        self.reset()

    def reset(self) -> None:
        self.losses.zero_()
        self.counts[:], self.wait_s, self.start = 0, 0.0, time.perf_counter()

    def add(self, loss, batch: MicroBatch) -> None:
        """Count one micro batch: its losses on the device, its sizes from the host."""
        parts = (loss.total, loss.mlm_loss, loss.nsp_loss)
        counts = (loss.mlm_correct, loss.mlm_count, loss.nsp_correct, loss.nsp_count)
        # one stack in float32 (exact for these counts), then float64: three kernels, not nine
        self.losses += torch.stack([p.detach() for p in parts] + list(counts)).double()
        self.counts += [batch.num_tokens, batch.shape[0], 1, batch.shape[1]]
        self.pending_tokens += batch.num_tokens


def _made_from(shards: ExampleShards) -> tuple:
    return shards.params.get("corpus_manifest_sha256"), shards.params.get("split")


def worker_count(num_workers: int, streams: int) -> int:
    """The DataLoader workers of a rank: the most (up to ``--num-workers``) that divide the reader's
    ``streams`` evenly; more than the CPUs this process may use is warned of, once."""
    workers = max(w for w in range(1, max(1, num_workers) + 1) if streams % w == 0) if num_workers else 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if workers > cpus:
        log.warning(
            "--num-workers %d: %d DataLoader workers (a divisor of the shards' %d streams) on %d CPU(s); more "
            "workers than CPUs slow the run down: give --num-workers %d or fewer",
            *(num_workers, workers, streams, cpus, cpus),
        )
        warnings.filterwarnings("ignore", "This DataLoader will create")  # torch's, at every epoch
    return workers


class Trainer:
    """One process's pre-training: :meth:`fit` runs :meth:`step` to ``--max-steps``, logging, evaluating
    and checkpointing between."""

    def __init__(
        self,
        cfg: PretrainConfig,
        procs: Processes,
        run_id: str | None = None,
        out: storage.Folder | None = None,
    ) -> None:
        self.cfg, self.procs = cfg, procs
        self.run_id = ckpt.shared_run_id(procs.world_size, run_id)  # rank 0's, on every rank
        self.micro, self.accumulation = cfg.accumulation(procs.world_size)
        self.output = (cfg.output or cfg.resume).rstrip("/")
        self.out = (
            out if out is not None and procs.is_main else storage.Folder(self.output)
        )  # rank 0's journals
        if procs.is_main:
            check_output(self.out)
        seed = cfg.seed + procs.rank  # the global RNGs dropout and the rest draw from, per rank
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
        if procs.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        self._build_data()
        self._build_optimization()
        self._restore_position()
        self._build_forward()
        resumed = self.position.step if self.setup.trainer_state is not None else None
        self.metrics = MetricsLog(self.out, resumed) if procs.is_main else None
        self.last_saved = resumed
        if procs.is_main:
            self._log_start()
        on_gpu = procs.device.type == "cuda"
        self.peak = peak_flops(torch.cuda.get_device_name(procs.device), cfg.precision) if on_gpu else None
        self.window = _Window(procs.device)
        self.health = Health(procs.device, cfg.precision)
        self.first_record = True  # this process's first metrics record includes start-up
        self.progress = None

    def _open_shards(self, option: str, url: str, **settings) -> ExampleShards:
        cfg, procs = self.cfg, self.procs
        settings |= {
            "batch_size": self.micro,
            "seed": cfg.seed,
            "rank": procs.rank,
            "world_size": procs.world_size,
        }
        try:
            return ExampleShards(url, **settings)
        except InputError as err:
            raise InputError(f"{option} {url}: {err}") from None

    def _build_data(self) -> None:
        """The readers, the model and its vocabulary (:func:`pretrain.startup.prepare`)."""
        cfg = self.cfg
        self.reader = self._open_shards("--shards", cfg.shards, streams=cfg.streams)
        self.setup = prepare(cfg, self.reader, self.procs.device)
        vocab = self.setup.vocab
        rank, length = self.procs.rank, self.setup.max_seq_length
        self.layout = BatchLayout(cfg.batching, cfg.bucket_window, cfg.seed, rank, max_seq_length=length)
        self.reader.vocab_size = vocab.vocab_size  # token ids at or beyond it are refused
        if cfg.dynamic_masking:
            try:
                settings = masking_from_params(self.reader.params, **cfg.masking_overrides())
            except (TypeError, ValueError) as err:
                raise UsageError(f"--dynamic-masking with the settings of {cfg.shards}: {err}") from None
            self.reader.masking = DynamicMasking.from_vocab(vocab.vocab, settings)
            log.info("dynamic masking: %s", settings)
        self.workers = worker_count(cfg.num_workers, self.reader.streams)
        self.validation = None
        if cfg.validation_shards:
            fixed = {
                "shuffle": False,
                "streams": 1,
                "vocab_size": vocab.vocab_size,
                "vocab_sha256": vocab.vocab_sha256,
            }
            self.validation = self._open_shards("--validation-shards", cfg.validation_shards, **fixed)
            if (made := _made_from(self.reader)) == _made_from(self.validation):
                raise InputError(
                    f"--validation-shards {cfg.validation_shards}: made from the same corpus split ({made[1]} of "
                    f"{self.reader.params.get('corpus')}) as --shards {cfg.shards}: its figures would be training "
                    "figures; make held-out shards with `pipelines examples --split validation`"
                )
            self.validation.masking = validation_masking(self.validation.params, vocab.vocab)

    def _build_optimization(self) -> None:
        """The model on its device, the optimizer and the grad scaler (enabled for fp16)."""
        cfg = self.cfg
        self.model = self.setup.model.to(self.procs.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        betas = (cfg.adam_beta1, cfg.adam_beta2)
        self.optimizer = build_optimizer(
            cfg.optimizer, self.model, cfg.lr, cfg.weight_decay, betas, cfg.adam_eps
        )
        self.scaler = torch.amp.GradScaler(self.procs.device.type, enabled=cfg.precision == "fp16")

    def _restore_position(self) -> None:
        """On resume: optimizer, scaler, counters, RNG and (same shards) the reader's place; the schedule."""
        cfg, state = self.cfg, self.setup.trainer_state
        self.position = Position()
        if state is not None:
            url = self.setup.resumed_from.url
            try:
                self.optimizer.load_state_dict(state["optimizer"])
                if state.get("scaler") and cfg.precision == "fp16":
                    self.scaler.load_state_dict(state["scaler"])
                self.position = Position(state["step"], state["tokens_seen"], state["skipped_steps"])
            except (KeyError, TypeError, ValueError) as err:
                raise InputError(
                    f"{url}/{ckpt.TRAINER_STATE}.json: damaged ({type(err).__name__}: {err})"
                ) from None
            rng = ckpt.load_state(f"{url}/{ckpt.rng_file(self.procs.rank)}", missing_ok=True)
            if rng is None:
                log.warning("%s: no RNG state for rank %d (another number of ranks?)", url, self.procs.rank)
            else:
                ckpt.set_rng_state(rng)
        step = self.position.step
        schedule_steps = cfg.schedule_steps or cfg.max_steps
        schedule = (cfg.lr, cfg.warmup_steps, schedule_steps, cfg.decay_power, step, cfg.lr_schedule)
        self.scheduler = build_scheduler(self.optimizer, *schedule)
        if step >= cfg.max_steps:
            raise UsageError(f"the run is already at step {step}; raise --max-steps above it to continue")
        data = (state or {}).get("data")
        if isinstance(data, dict) and str(data.get("shards", "")).rstrip("/") == cfg.shards.rstrip("/"):
            try:
                self.reader.load_state_dict(data["reader"])
                self.position.epoch, self.position.batches_done = self.reader.epoch, self.reader.batches_done
            except (KeyError, TypeError, ValueError) as err:
                url = self.setup.resumed_from.url
                raise InputError(f"cannot continue the data order of {url}: {err}") from None

    def _build_forward(self) -> None:
        """DDP, the packed-attention kernel, and ``torch.compile`` (by default on CUDA; eager if it fails)."""
        cfg, procs = self.cfg, self.procs
        self.ddp_model = self.model
        if procs.world_size > 1:
            self.ddp_model = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[procs.local_rank] if procs.device.type == "cuda" else None
            )
        self.compiled = cfg.compile if cfg.compile is not None else procs.device.type == "cuda"
        self.loss = pretraining_loss
        if cfg.batching == "packed":  # the attention kernel, decided once, before compiling
            heads = self.model.config.num_attention_heads
            dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.precision]
            kernel = choose_kernel(procs.device, dtype, heads, self.model.config.hidden_size // heads)
            log.info("packed attention on %s: %s", procs.device, kernel)
        if self.compiled:
            if cfg.compile is None:
                from torch import _dynamo

                _dynamo.config.suppress_errors = True  # the default may fall back to eager
            mode = None if cfg.compile_mode == "default" else cfg.compile_mode
            dynamic = None if cfg.batching == "padded" else True  # bucketed, packed: shapes vary by design
            self.loss = compile_for_training(self.model, mode=mode, dynamic=dynamic)
            if procs.is_main:
                log.info("torch.compile (mode %s): the first steps compile the model", cfg.compile_mode)

    def _log_start(self) -> None:
        config, cfg, params = self.model.config, self.cfg, sum(p.numel() for p in self.model.parameters())
        split = f"{self.procs.world_size} rank(s) × {self.accumulation} × {self.micro} micro batch"
        where = (cfg.shards, self.reader.num_examples, split, self.position.step, cfg.max_steps)
        size = f"{config.num_hidden_layers}x{config.hidden_size} ({params / 1e6:.1f}M parameters)"
        log.info("training %s on %s: %d examples, %s; from step %d to %d", size, *where)

    def batches(self):
        """``(batch, the reader's (epoch, batches done) after it)`` from the current position on."""
        pin = self.procs.device.type == "cuda" and self.cfg.batching == "padded"
        loader = ShardLoader(self.reader, self.workers, pin_memory=pin)
        epoch, done = self.position.epoch, self.position.batches_done
        while True:
            if done >= len(self.reader):
                epoch, done = epoch + 1, 0
            for batch in self.layout.epoch_batches(functools.partial(loader.epoch, epoch), done, epoch):
                done += 1
                if self.cfg.objective == "ltr":
                    batch = left_to_right_batch(batch)
                yield batch, (epoch, done)

    def fit(self) -> dict:
        """Train to ``--max-steps`` (or a stop signal); return the last training metrics record."""
        cfg, procs, position = self.cfg, self.procs, self.position
        stop = _Stop(procs)
        previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
        if procs.is_main:  # a bar on a terminal; elsewhere the log lines carry steps/s and ETA
            shown = None if log.isEnabledFor(logging.INFO) else False  # --quiet: no bar, no lines
            self.progress = Progress(
                cfg.max_steps, desc="pretrain", initial=position.step, enabled=shown, interval_s=None
            )
        data = DeviceFeed(self.batches(), procs.device)
        record: dict = {}
        finished = False
        self.window.reset()
        self.model.train()
        try:
            while position.step < cfg.max_steps:
                grad_norm, lr_used = self.step(data)
                step = position.step
                if step % cfg.log_steps == 0 or step == cfg.max_steps:
                    record = self.log(grad_norm, lr_used)
                if self.validation is not None and cfg.eval_steps and step % cfg.eval_steps == 0:
                    if step < cfg.max_steps:
                        self.evaluate()
                stopping = stop.now()
                if step % cfg.save_steps == 0 or step == cfg.max_steps or stopping:
                    self.checkpoint()
                if stopping:
                    raise Stopped(
                        stop.signum or signal.SIGTERM,  # another rank's signal stops this one too
                        f"stopped at step {step}, its checkpoint saved: continue with --resume {self.output}",
                    )
            self._finish()
            finished = True
        except (InputError, RuntimeError, ConnectionError) as err:
            if not isinstance(err, InputError):  # torch's report of a dead worker, raised anywhere
                if not (self.workers and is_worker_failure(err)):
                    raise
                err = worker_failure(self.reader.url, err)
            raise InputError(
                f"{err}; stopped at step {position.step}; the checkpoints written so far are complete: "
                f"continue with --resume {self.output} once the data is reachable and whole"
            ) from None
        finally:
            data.close()  # closes the reader's iterator, whose workers then shut down
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if self.progress is not None:
                self.progress.close(finished)
            if self.metrics is not None:
                self.metrics.close()  # a failed run keeps its records; TensorBoard's writer stops
        return record

    def step(self, data: DeviceFeed) -> tuple[torch.Tensor, float]:
        """One optimizer step, in order: each micro batch's forward, loss and backward (DDP's
        all-reduce on the last); then unscale, clip, the update (skipped on the device when the
        gradients are not finite), the divergence watch and the schedule. Returns the gradient norm
        (on the device) and the lr, waiting for nothing: no host sync."""
        cfg, procs, position = self.cfg, self.procs, self.position
        waited = time.perf_counter()
        micro = [next(data) for _ in range(self.accumulation)]
        self.window.wait_s += time.perf_counter() - waited
        position.epoch, position.batches_done = micro[-1].position
        weights = self._loss_weights(micro)  # each micro batch's share of the global batch's loss
        for index, (batch, (mlm_weight, nsp_weight)) in enumerate(zip(micro, weights, strict=True)):
            sync = index == len(micro) - 1 or procs.world_size == 1  # DDP all-reduces with the last only
            with (
                contextlib.nullcontext() if sync else self.ddp_model.no_sync(),
                autocast(procs.device, cfg.precision),
            ):
                loss = self.loss(self._forward(batch), **batch.targets)
                self.scaler.scale(loss.mlm_loss * mlm_weight + loss.nsp_loss * nsp_weight).backward()
            self.window.add(loss, batch)
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm or math.inf, foreach=True)
        skipped = (~torch.isfinite(grad_norm)).float()
        step_unless(self.optimizer, skipped)
        self.scaler.update()
        self.window.skipped += skipped
        self.health.update(position.step + 1, self.window.losses[0], skipped)
        lr_used = self.optimizer.param_groups[0]["lr"]
        with warnings.catch_warnings():  # torch warns when the first step was skipped
            warnings.simplefilter("ignore", UserWarning)
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        position.step += 1
        if self.progress is not None:
            self.progress.update(1)
        return grad_norm, lr_used

    def _loss_weights(self, micro: list[MicroBatch]) -> list[tuple]:
        """Each micro batch's (MLM, NSP) weight, its share of the global batch's masked tokens and
        pairs (times the ranks, which DDP averages over): the step's loss is the global mean
        however the batch is split. Several ranks: totals from a device all-reduce."""
        procs, world = self.procs, self.procs.world_size
        masked = [b.num_masked for b in micro]
        pairs = [float(b.num_pairs * self.cfg.uses_nsp) for b in micro]
        if world == 1:
            total_masked, total_pairs = max(sum(masked), 1.0), max(sum(pairs), 1.0)
        else:
            totals = torch.tensor([sum(masked), sum(pairs)], dtype=torch.float64)
            if procs.device.type == "cuda":
                totals = totals.pin_memory()
            totals = totals.to(procs.device, non_blocking=True)
            dist.all_reduce(totals, async_op=True).wait()  # NCCL: the stream waits, not the host
            total_masked, total_pairs = totals.clamp(min=1.0).unbind()
        share = world / total_masked
        return [(m * share, p * world / total_pairs) for m, p in zip(masked, pairs, strict=True)]

    def _forward(self, batch: MicroBatch):
        """The model's outputs on a micro batch (under the caller's autocast)."""
        if self.compiled and self.cfg.compile_mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # the outputs of the last run are done with
        return self.ddp_model(**batch.inputs)

    def _saved(self) -> str:
        """What a divergence leaves: the newest checkpoint, and how to go on from it."""
        if self.last_saved:
            return (
                f"step {self.last_saved} is the newest checkpoint: --resume {self.output} with a lower --lr"
            )
        return "no checkpoint was saved"

    def log(self, grad_norm: torch.Tensor, lr_used: float) -> dict:
        """The training record of the window since the last one, over all ranks; starts a new one."""
        procs, window, position = self.procs, self.window, self.position
        # the window's one read of the device: it waits for the steps queued so far, so the time
        # taken after it covers the window's computation
        *losses, skipped, norm = torch.cat(
            [window.losses, window.skipped.view(1), grad_norm.detach().double().view(1)]
        ).tolist()
        self.health.check(self.cfg.lr, self._saved())  # Diverged when a step so far diverged
        window.skipped.zero_()
        position.skipped_steps += int(skipped)
        sums = Sums(*all_sum(procs, [*losses, *window.counts.tolist(), window.wait_s, window.pending_tokens]))
        position.tokens_seen += int(sums.pending_tokens)
        window.pending_tokens = 0
        elapsed = time.perf_counter() - window.start
        micro_steps = max(1.0, sums.micro_batches)
        record = {
            "step": position.step,
            "split": "train",
            "loss": sums.loss / micro_steps,
            "mlm_loss": sums.mlm_loss / micro_steps,
            "nsp_loss": sums.nsp_loss / micro_steps,
            "mlm_accuracy": sums.mlm_correct / max(1.0, sums.mlm_count),
            "nsp_accuracy": sums.nsp_correct / max(1.0, sums.nsp_count),
            "lr": lr_used,
            "grad_norm": norm,
            "loss_scale": float(self.scaler.get_scale()) if self.scaler.is_enabled() else 1.0,
            "tokens_per_s": sums.tokens / elapsed,
            "samples_per_s": sums.examples / elapsed,
            "data_wait_share": sums.wait_s / procs.world_size / elapsed,
            "tokens_seen": position.tokens_seen,
            "tokens": int(sums.tokens),  # non-padding tokens since the last record, all ranks
            "masked_tokens": int(sums.mlm_count),  # positions predicted since the last record
            "skipped_steps": position.skipped_steps,
            "epoch": position.epoch,
            "startup_window": self.first_record,  # includes start-up (and compilation): not steady
        }
        self.first_record = False
        if procs.device.type == "cuda":
            record["peak_memory_gb"] = torch.cuda.max_memory_allocated(procs.device) / 2**30
        if self.peak is not None:
            flops = training_flops_per_token(self.model.config, int(round(sums.widths / micro_steps)))
            record["mfu"] = flops * sums.tokens / elapsed / (self.peak * procs.world_size)
        if procs.is_main:
            self._report(record)
        window.reset()
        return record

    def _report(self, record: dict) -> None:
        """Rank 0: the record into the metrics, and onto the progress bar or into the log."""
        self.metrics.log(record)
        if self.metrics.local:
            self.metrics.flush()
        if self.progress is not None and self.progress.mode == "bar":
            self.progress.set_postfix(loss=f"{record['loss']:.3f}", mlm=f"{record['mlm_accuracy']:.3f}")
        else:
            status = self.progress.status() if self.progress is not None else ""
            log.info(
                "step %d loss %.4f mlm_acc %.4f nsp_acc %.4f lr %.3g %.0f tokens/s (%s)",
                *(record[k] for k in ("step", "loss", "mlm_accuracy", "nsp_accuracy", "lr", "tokens_per_s")),
                status,
            )

    @torch.no_grad()
    def evaluate(self) -> dict:
        """MLM accuracy and perplexity, NSP accuracy on ``eval_batches`` validation batches a rank."""
        cfg, procs = self.cfg, self.procs
        self.model.eval()
        sums = torch.zeros(5, dtype=torch.float64, device=procs.device)
        self.validation.set_epoch(0)
        batches = (self.layout.single(b) for b in itertools.islice(self.validation, cfg.eval_batches))
        if cfg.objective == "ltr":
            batches = (left_to_right_batch(b) for b in batches)
        for batch in DeviceFeed(((b, None) for b in batches), procs.device):
            with autocast(procs.device, cfg.precision):
                loss = self.loss(self._forward(batch), **batch.targets)
            count = loss.mlm_count.double()
            parts = [
                loss.mlm_loss.double() * count,
                loss.mlm_correct,
                count,
                loss.nsp_correct,
                loss.nsp_count,
            ]
            sums += torch.stack([p.double() for p in parts])
        self.model.train()
        loss_sum, correct, count, nsp_correct, nsp_count = all_sum(procs, sums.tolist())
        mlm_loss = loss_sum / max(1.0, count)
        record = {
            "step": self.position.step,
            "split": "validation",
            "mlm_loss": mlm_loss,
            "mlm_perplexity": math.exp(min(mlm_loss, 50.0)),
            "mlm_accuracy": correct / max(1.0, count),
            "nsp_accuracy": nsp_correct / max(1.0, nsp_count),
            "examples": int(nsp_count),
        }
        if self.metrics is not None:
            self.metrics.log(record)
            log.info(
                "validation at step %d: MLM accuracy %.4f, perplexity %.2f, NSP accuracy %.4f",
                *(record[k] for k in ("step", "mlm_accuracy", "mlm_perplexity", "nsp_accuracy")),
            )
        return record

    def checkpoint(self) -> None:
        """Save, commit and prune: never after a divergence, never with a tensor that is not finite."""
        step = self.position.step
        self.health.check(self.cfg.lr, self._saved())
        state = self.state_dict()
        bad = non_finite(self.model.state_dict()) or non_finite(state["optimizer"], "optimizer")
        if bad is not None:
            raise Diverged(
                f"training diverged by step {step}: {bad} holds NaN or infinity; the checkpoint of step {step} "
                f"was not saved; {self._saved()}"
            )
        try:
            self._save(step, state)
        except OSError as err:
            raise OutputError(
                f"writing the checkpoint of step {step} to {self.output} failed ({err}); the checkpoints "
                f"committed before it are complete: continue with --resume {self.output}"
            ) from None
        self.last_saved = step

    def _save(self, step: int, state: dict) -> None:
        procs = self.procs
        folder = self.out.sub(ckpt.step_name(step))
        if procs.is_main:  # rank 0 holds the run folder: it journals every rank's files first
            ranks = (ckpt.rng_file(r) for r in range(procs.world_size))
            folder.journal(*(f"{name}.{suffix}" for name in ranks for suffix in ("safetensors", "json")))
        barrier(procs)
        stamp = ckpt.Stamp(self.run_id, step)
        ckpt.save_state(ckpt.rng_state(), folder, ckpt.rng_file(procs.rank), stamp)
        if procs.is_main:
            save_hf(self.model, folder, metadata=stamp.metadata())
            folder.write("vocab.txt", "\n".join(self.setup.vocab.vocab) + "\n")
            ckpt.save_state(state, folder, ckpt.TRAINER_STATE, stamp)
        barrier(procs)
        if procs.is_main:
            ckpt.commit(folder, step, self.run_id)
            ckpt.prune(self.output, self.cfg.keep_checkpoints)
            self.metrics.flush()
            log.info("checkpoint %s", folder.url)

    def state_dict(self) -> dict:
        """The trainer state of a checkpoint (the pending counts are counted first)."""
        position, vocab = self.position, self.setup.vocab
        position.tokens_seen += int(all_sum(self.procs, [self.window.pending_tokens])[0])
        self.window.pending_tokens = 0
        position.skipped_steps += int(self.window.skipped.item())
        self.window.skipped.zero_()
        return {
            "step": position.step,
            "tokens_seen": position.tokens_seen,
            "skipped_steps": position.skipped_steps,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
            "data": {
                "shards": self.cfg.shards,
                "reader": self.reader.state_at(position.batches_done, position.epoch),
            },
            "train_config": self.cfg.to_dict(),
            "model_config": self.model.config.to_dict(),
            "world_size": self.procs.world_size,
            "cased": vocab.cased,
            "vocab_sha256": vocab.vocab_sha256,
        }

    def _finish(self) -> None:
        """After the last step: the final evaluation, the metrics closed and plotted."""
        if self.validation is not None and self.position.step == self.cfg.max_steps:
            self.evaluate()
        if self.procs.is_main:
            self.metrics.close()
            self.metrics.plot()


def is_worker_failure(err: Exception) -> bool:
    """Whether ``err`` is torch's report of a DataLoader worker that died or timed out."""
    return isinstance(err, ConnectionError) or str(err).startswith(
        ("DataLoader worker", "DataLoader timed out")
    )


def worker_failure(url: str, err: Exception, timeout_s: float = 600.0) -> str:
    """One line for torch's report of a DataLoader worker that died or timed out."""
    first = (str(err).splitlines() or [type(err).__name__])[0].strip().rstrip(".")
    return (
        f"{url}: {first}: a DataLoader worker died or sent nothing for {timeout_s:.0f} s (out of memory? a "
        "hanging read?); fewer workers (--num-workers) or a retry may help"
    )


# Settings a resumed run takes from its checkpoint unless given again: everything but the data,
# the paths and what the machine a run continues on decides.
_NOT_INHERITED = frozenset(
    {"shards", "output", "resume", "init_from", "validation_shards", "vocab", "max_seq_length", "config"}
    | {"compile", "compile_mode"}
)


def inherit_settings(cfg: PretrainConfig, given: set[str]) -> PretrainConfig:
    """``cfg`` with the settings not ``given`` on the command line taken from the checkpoint it resumes."""
    found = ckpt.resolve(cfg.resume)
    saved = ckpt.trainer_json(found.url).get("train_config")
    if not isinstance(saved, dict):
        raise InputError(f"{found.url}/{ckpt.TRAINER_STATE}.json: no train_config; the checkpoint is damaged")
    known = set(PretrainConfig.__dataclass_fields__)
    inherited = {k: v for k, v in saved.items() if k in known and k not in given and k not in _NOT_INHERITED}
    try:
        inherited_cfg = replace(cfg, **inherited)
        inherited_cfg.problems()  # the saved values' types
    except TypeError as err:
        raise InputError(f"{found.url}/{ckpt.TRAINER_STATE}.json: damaged train_config ({err})") from None
    return inherited_cfg
