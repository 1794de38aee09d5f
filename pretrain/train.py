"""The pre-training loop: one process per device, DDP under torchrun, exact resume.

One optimizer step = ``accumulation`` micro batches per rank × ``world_size`` ranks =
``--global-batch-size`` examples. Every rank reads its own disjoint streams of the shards
(:class:`pretrain.data.ExampleShards`), so a step's examples do not depend on the number of
DataLoader workers, and the reader's position is part of every checkpoint.

Exact resume. A checkpoint holds the model, optimizer, scheduler, grad scaler, every rank's RNG
states (Python, NumPy, torch CPU/CUDA), the step, tokens seen and the reader's position (epoch,
batches consumed). The DataLoader gets its own generator, so creating an iterator on resume does
not shift the global RNG that dropout draws from. On CPU a resumed run is bitwise equal to one
that never stopped (tested by SIGKILL); on GPU, kernels that are not deterministic can make the
two differ in the last bits.

Non-finite gradients. A step whose gradient norm is not finite is not applied: it is counted in
``skipped_steps``, the data it used is consumed and the schedule moves on. With fp16 the grad
scaler also lowers its scale.

No host sync inside a step. Everything the step counts from a batch (tokens, masked positions,
pairs) is read from the host copy (:mod:`pretrain.feed`, which also copies the next batch to the
GPU ahead of use); losses, accuracy counts and skipped steps accumulate on the device and are read
once per metrics record (``--log-steps``) and at checkpoints; a non-finite gradient norm skips the
update on the device (fused AdamW and LAMB take the flag as the grad scaler gives it); with DDP the
loss weights come from an all-reduce on the device that the host does not wait for, and the ranks
agree on a stop signal over a host (gloo) all-reduce that runs in the background, read one step
later (so a signal stops every rank at the same step, one step after it arrived).

``torch.compile`` is on by default on CUDA (``--no-compile`` turns it off), off elsewhere;
``--compile-mode reduce-overhead`` adds CUDA graphs, one per batch shape (``--batching bucketed``
gives few). When compiling was not asked for by name, a model that fails to compile runs eagerly.
The first metrics record of a process includes start-up and compilation (``startup_window``).

Phase 2. ``--resume RUN --shards OTHER``: the model, optimizer and step continue; the reader
starts at the beginning of the new shards (its saved position belongs to the old ones), and the
learning-rate schedule is re-evaluated with the new ``--max-steps``/``--warmup-steps``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import logging
import math
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.distributed as dist

from pretrain import checkpoint as ckpt
from pretrain.batching import BatchLayout, example_tokens
from pretrain.collate import DynamicMasking, masking_from_params, validation_masking
from pretrain.config import TrainConfig
from pretrain.data import ExampleShards, ShardError, ShardLoader
from pretrain.feed import DeviceFeed, MicroBatch
from pretrain.metrics import MetricsLog, peak_flops
from pretrain.model import left_to_right_batch, pretraining_loss, training_flops_per_token
from pretrain.optim import build_optimizer, build_scheduler, step_unless
from pretrain.outputs import run_scratch
from pretrain.progress import Progress
from pretrain.runtime import autocast
from pretrain.startup import Processes, TrainingError, all_sum, barrier, check_output, init_processes, prepare
from schemas.commands import InputError, Stopped
from schemas.files import write_file, write_json
from schemas.outputs import journal

log = logging.getLogger("pretrain")

__all__ = ["Processes", "Trainer", "TrainingError", "apply_gradients", "inherit_settings", "train"]


def train(
    cfg: TrainConfig,
    procs: Processes | None = None,
    *,
    before_fit: Callable[[], None] | None = None,
    run_id: str | None = None,
) -> dict:
    """Run (or continue) pre-training; return the last training metrics record. Temporary files
    live in one folder for the run, removed at the end on success and on failure. ``before_fit``
    runs on rank 0 once every check has passed, just before step 1 (``--overwrite``'s clean-up).
    ``run_id`` (rank 0's; the run folder's) goes into every checkpoint file; None: a new one."""
    with run_scratch("pretrain-run-") as scratch:
        trainer = Trainer(resume_config(cfg), procs or init_processes(), scratch=scratch, run_id=run_id)
        if before_fit is not None and trainer.procs.is_main:
            before_fit()
        return trainer.fit()


class _Stop:
    """SIGTERM/SIGINT (pre-emption): finish the step, save a checkpoint, stop (``fit`` then raises
    ``Stopped``: exit 130/143). A second signal stops at once; the checkpoints committed before
    stay complete."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __call__(self, signum, frame) -> None:
        if self.signum is not None:
            raise Stopped(signum, "the checkpoints committed before are complete")
        self.signum = signum


@dataclass
class Position:
    """Where a run is: optimizer steps, tokens trained on, skipped steps, the reader's place."""

    step: int = 0
    tokens_seen: int = 0
    skipped_steps: int = 0
    epoch: int = 0
    batches_done: int = 0


class _StopVote:
    """Whether every rank stops now (see the module docstring): one rank reads its own signal;
    several cast their vote each step in a background all-reduce over gloo (the host) and act on
    the vote of the step before, which every rank reads alike."""

    def __init__(self, procs: Processes, stop: _Stop) -> None:
        self.stop, self.several = stop, procs.world_size > 1
        self.group = dist.new_group(backend="gloo") if self.several else None
        self.pending: tuple[dist.Work, torch.Tensor] | None = None

    def __call__(self) -> bool:
        if not self.several:
            return self.stop.requested
        decided = False
        if self.pending is not None:
            work, votes = self.pending
            work.wait()
            decided = bool(votes[0] > 0)  # a host tensor
        votes = torch.tensor([float(self.stop.requested)])
        self.pending = (dist.all_reduce(votes, group=self.group, async_op=True), votes)
        return decided


class _Window:
    """This rank's sums since the last metrics record: losses and accuracy counts (on the device),
    real tokens / samples / micro batches / padded widths (on the host), time waiting for data;
    and the counts not yet in :class:`Position`: tokens (host) and skipped steps (device)."""

    def __init__(self, device: torch.device) -> None:
        self.losses = torch.zeros(7, dtype=torch.float64, device=device)
        self.skipped = torch.zeros((), dtype=torch.float64, device=device)
        self.counts = np.zeros(4)
        self.pending_tokens = 0  # not yet in Position.tokens_seen (added at a record or a save)
        self.reset()

    def reset(self) -> None:
        """Start a new window (the pending counts are reset where they are counted)."""
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

    def take_skipped(self) -> int:
        """The steps skipped since the last call (or record), read from the device; then zero."""
        skipped = int(self.skipped.item())
        self.skipped.zero_()
        return skipped


class Trainer:
    """One process's pre-training: built from the settings (data, model, optimizer, scheduler,
    scaler, resume state), then :meth:`fit` runs :meth:`step` until ``--max-steps``, with
    :meth:`log`, :meth:`evaluate` and :meth:`checkpoint` at their intervals."""

    def __init__(
        self, cfg: TrainConfig, procs: Processes, scratch: str | None = None, run_id: str | None = None
    ) -> None:
        self.cfg, self.procs = cfg, procs
        self.run_id = ckpt.shared_run_id(procs.world_size, run_id)  # rank 0's, on every rank
        self.micro, self.accumulation, self.output = _checked_settings(cfg, procs)
        _seed(cfg.seed + procs.rank)
        if procs.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        self._build_data()
        self._build_optimization()
        self._restore_position()
        self._build_forward()
        self.metrics = (
            MetricsLog(self.output, self.position.step if self.resumed else None, scratch)
            if procs.is_main
            else None
        )
        self._log_start()
        self.peak = (
            peak_flops(torch.cuda.get_device_name(procs.device), cfg.precision)
            if procs.device.type == "cuda"
            else None
        )
        self.window = _Window(procs.device)
        self.first_record = True  # this process's first metrics record includes start-up
        self.seen: list[str] | None = [] if cfg.rank_report else None  # example digests, for the rank report
        self.progress = None

    # -- build ------------------------------------------------------------------------------------

    def _open_shards(self, option: str, url: str, **settings) -> ExampleShards:
        cfg, procs = self.cfg, self.procs
        try:
            return ExampleShards(
                url,
                batch_size=self.micro,
                seed=cfg.seed,
                rank=procs.rank,
                world_size=procs.world_size,
                **settings,
            )
        except (ValueError, OSError, InputError) as err:
            raise TrainingError(f"{option} {url}: {err}") from None

    def _build_data(self) -> None:
        """The training reader (with dynamic masking when asked), the model and vocabulary it
        fits (:func:`pretrain.startup.prepare`), the validation reader and the worker count."""
        cfg = self.cfg
        self.reader = self._open_shards("--shards", cfg.shards, streams=cfg.streams)
        self.setup = prepare(cfg, self.reader, self.procs.device)
        # packed batches take a few static shapes, cut at the shards' length
        length = self.setup.max_seq_length
        self.layout = BatchLayout(
            cfg.batching, cfg.bucket_window, cfg.seed, self.procs.rank, max_seq_length=length
        )
        self.reader.vocab_size = self.setup.vocab.vocab_size  # token ids beyond it are a ShardError
        if cfg.dynamic_masking:
            try:
                settings = masking_from_params(self.reader.params, **cfg.masking_overrides())
            except (TypeError, ValueError) as err:
                raise TrainingError(f"--dynamic-masking with the settings of {cfg.shards}: {err}") from None
            self.reader.masking = DynamicMasking.from_vocab(self.setup.vocab.vocab, settings)
            log.info("dynamic masking: %s", settings)
        # the most workers (up to --num-workers) that divide the reader's streams evenly
        workers = max(w for w in range(1, max(1, cfg.num_workers) + 1) if self.reader.streams % w == 0)
        self.workers = workers if cfg.num_workers else 0
        self.loader: ShardLoader | None = None  # made on first read, its workers kept for the run
        self.validation = None
        if cfg.validation_shards:
            self.validation = self._open_shards(
                "--validation-shards", cfg.validation_shards, shuffle=False, streams=1,
                vocab_sha256=self.setup.vocab.vocab_sha256, vocab_size=self.setup.vocab.vocab_size,
            )  # fmt: skip
            self.validation.masking = validation_masking(self.validation.params, self.setup.vocab.vocab)

    def _build_optimization(self) -> None:
        """The model on its device, the optimizer and the grad scaler (enabled for fp16)."""
        cfg = self.cfg
        self.model = self.setup.model.to(self.procs.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(
            cfg.optimizer,
            self.model,
            cfg.lr,
            cfg.weight_decay,
            (cfg.adam_beta1, cfg.adam_beta2),
            cfg.adam_eps,
        )
        self.scaler = torch.amp.GradScaler(self.procs.device.type, enabled=cfg.precision == "fp16")

    def _restore_position(self) -> None:
        """On resume: optimizer, scaler, counters and this rank's RNG from the checkpoint, the
        reader's place when the shards are the same; then the schedule from the step reached."""
        cfg, state = self.cfg, self.setup.trainer_state
        self.resumed = state is not None
        self.position = Position()
        if state is not None:
            self.optimizer.load_state_dict(state["optimizer"])
            if state.get("scaler") and cfg.precision == "fp16":
                self.scaler.load_state_dict(state["scaler"])
            self.position = Position(state["step"], state["tokens_seen"], state["skipped_steps"])
            rng_url = f"{self.setup.resumed_from.url}/{ckpt.rng_file(self.procs.rank)}"
            try:
                ckpt.set_rng_state(ckpt.load_state(rng_url))
            except FileNotFoundError:
                log.warning(
                    "%s missing (resuming with a different number of ranks?); RNG not restored", rng_url
                )
        step = self.position.step
        self.scheduler = build_scheduler(
            self.optimizer, cfg.lr, cfg.warmup_steps, cfg.schedule_steps or cfg.max_steps, cfg.decay_power,
            step, schedule=cfg.lr_schedule,
        )  # fmt: skip
        if step >= cfg.max_steps:
            raise TrainingError(f"the run is already at step {step}; raise --max-steps above it to continue")
        saved = _data_position(state, cfg)
        if saved is not None:
            try:
                self.reader.load_state_dict(saved["reader"])
            except ValueError as err:
                raise TrainingError(
                    f"cannot continue the data order of {self.setup.resumed_from.url}: {err}"
                ) from None
            self.position.epoch, self.position.batches_done = (
                saved["reader"]["epoch"],
                saved["reader"]["batches_done"],
            )

    def _build_forward(self) -> None:
        """DDP around the model when there are several ranks; ``torch.compile`` when asked, or by
        default on CUDA (where a model that fails to compile then runs eagerly, with a warning)."""
        cfg, procs = self.cfg, self.procs
        self.ddp_model = self.model
        if procs.world_size > 1:
            self.ddp_model = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[procs.local_rank] if procs.device.type == "cuda" else None
            )
        self.compiled = cfg.compile if cfg.compile is not None else procs.device.type == "cuda"
        self.forward, self.loss = self.ddp_model, pretraining_loss
        if self.compiled:
            if cfg.compile is None:
                from torch import _dynamo

                _dynamo.config.suppress_errors = True  # the default may fall back to eager
            mode = None if cfg.compile_mode == "default" else cfg.compile_mode
            dynamic = None if cfg.batching == "padded" else True  # bucketed, packed: shapes vary by design
            compile_regions(self.model, mode, dynamic)
            self.loss = torch.compile(pretraining_loss, mode=mode, dynamic=dynamic)
            if procs.is_main:
                log.info("torch.compile (mode %s): the first steps compile the model", cfg.compile_mode)

    def _log_start(self) -> None:
        if not self.procs.is_main:
            return
        config = self.model.config
        log.info(
            "training %s (%.1fM parameters) on %s: %d examples, %d rank(s) × %d × %d micro batch; "
            "from step %d to %d",
            "x".join(map(str, (config.num_hidden_layers, config.hidden_size))),
            sum(p.numel() for p in self.model.parameters()) / 1e6,
            self.cfg.shards, self.reader.num_examples, self.procs.world_size, self.accumulation, self.micro,
            self.position.step, self.cfg.max_steps,
        )  # fmt: skip

    def batches(self):
        """``(micro batch, the reader's (epoch, batches done) after it)`` from the current
        position on, epoch after epoch, in --batching's layout (which may re-read a bucketing
        window from its start: see pretrain/batching.py); LTR batches for --objective ltr."""
        epoch, done = self.position.epoch, self.position.batches_done
        while True:
            if done >= len(self.reader):
                epoch, done = epoch + 1, 0
            for batch in self.layout.epoch_batches(functools.partial(self._read, epoch), done, epoch):
                done += 1
                if self.cfg.objective == "ltr":
                    batch = left_to_right_batch(batch)
                yield batch, (epoch, done)

    def _read(self, epoch: int, first: int):
        """The reader's batches of ``epoch`` from batch ``first`` on, from DataLoader workers
        started once per run (``ShardLoader``: persistent, told the epoch each time). Batches are
        pinned there for the GPU when the layout passes them on as they are (padded)."""
        if self.loader is None:
            pin = self.procs.device.type == "cuda" and self.cfg.batching == "padded"
            self.loader = ShardLoader(self.reader, self.workers, pin_memory=pin)
        return self.loader.epoch(epoch, first)

    # -- the loop ---------------------------------------------------------------------------------

    def fit(self) -> dict:
        """Train from the current position to ``--max-steps`` (or a stop signal); return the last
        training metrics record."""
        cfg, procs, position = self.cfg, self.procs, self.position
        stop = _Stop()
        previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
        if procs.is_main:  # a bar on a terminal; elsewhere the log lines below carry steps/s and ETA
            shown = None if log.isEnabledFor(logging.INFO) else False  # --quiet: no bar, no lines
            self.progress = Progress(
                cfg.max_steps, desc="pretrain", initial=position.step, enabled=shown, interval_s=None
            )
        data, stop_now = DeviceFeed(self.batches(), procs.device), _StopVote(procs, stop)
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
                if (
                    self.validation is not None
                    and cfg.eval_steps
                    and step % cfg.eval_steps == 0
                    and step < cfg.max_steps
                ):
                    self.evaluate()
                stopping = stop_now()
                if step % cfg.save_steps == 0 or step == cfg.max_steps or stopping:
                    self.checkpoint()
                if stopping:
                    raise Stopped(
                        stop.signum or signal.SIGTERM,  # another rank's signal stops this one too
                        f"stopped at step {step}, its checkpoint saved: continue with --resume {self.output}",
                    )
            self._finish()
            finished = True
        except (ShardError, RuntimeError, ConnectionError) as err:
            if not isinstance(err, ShardError):  # torch's report of a dead worker, raised anywhere
                if self.loader is None or not self.loader.is_worker_failure(err):
                    raise
                err = self.loader.failure(err)
            raise TrainingError(
                f"{err}; stopped at step {position.step}; the checkpoints written so far are complete: "
                f"continue with --resume {self.output} once the data is reachable and whole"
            ) from None
        finally:
            data.close()
            if self.loader is not None:
                self.loader.close()  # shuts the DataLoader's worker processes down
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if self.progress is not None:
                self.progress.close(finished)
            if self.metrics is not None:
                self.metrics.close()  # a failed run keeps its records; TensorBoard's writer stops
        return record

    def step(self, data: DeviceFeed) -> tuple[torch.Tensor, float]:
        """One optimizer step: ``accumulation`` micro batches forward and backward, then the update
        (skipped on the device when the gradients are not finite). Returns the gradient norm (on
        the device) and the step's lr. Nothing here waits for the device."""
        cfg, procs, position = self.cfg, self.procs, self.position
        waited = time.perf_counter()
        micro = [next(data) for _ in range(self.accumulation)]
        self.window.wait_s += time.perf_counter() - waited
        position.epoch, position.batches_done = micro[-1].position
        for index, (batch, weights) in enumerate(zip(micro, self._loss_weights(micro), strict=True)):
            self._micro_step(batch, index == len(micro) - 1 or procs.world_size == 1, weights)
        grad_norm, skipped = apply_gradients(self.params, self.optimizer, self.scaler, cfg.max_grad_norm)
        self.window.skipped += skipped
        lr_used = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        position.step += 1
        if self.progress is not None:
            self.progress.update(1)
        return grad_norm, lr_used

    def _loss_weights(self, micro: list[MicroBatch]) -> list[tuple]:
        """Each micro batch's (MLM, NSP) weight. The step's loss is the mean over every masked
        token (and every pair) of the global batch, however it is split into ranks and micro
        batches, so each micro batch's means are weighed by its share of the totals (times the
        ranks: DDP averages over them). One rank: host numbers. Several: the totals are summed by
        an all-reduce on the device, which the host does not wait for, and the weights are device
        scalars (the same float64 arithmetic, so the same values)."""
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

    def _micro_step(self, batch: MicroBatch, sync: bool, weights: tuple) -> None:
        """Forward and backward of one micro batch, its MLM and NSP means weighted by ``weights``;
        DDP's gradient all-reduce only when ``sync`` (the step's last micro batch)."""
        if self.seen is not None:
            self.seen.extend(_example_keys(batch.host))
        with (
            contextlib.nullcontext() if sync else self.ddp_model.no_sync(),
            autocast(self.procs.device, self.cfg.precision),
        ):
            loss = self._loss_of(batch)
            objective = loss.mlm_loss * weights[0] + loss.nsp_loss * weights[1]
            self.scaler.scale(objective).backward()
        self.window.add(loss, batch)

    def _loss_of(self, batch: MicroBatch):
        """The model's pre-training loss on a micro batch (under the caller's autocast)."""
        if self.compiled and self.cfg.compile_mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # the outputs of the last run are done with
        return self.loss(self.forward(**batch.inputs), **batch.targets)

    # -- log, evaluate, checkpoint ----------------------------------------------------------------

    def log(self, grad_norm: torch.Tensor, lr_used: float) -> dict:
        """The training record of the window since the last one, summed over ranks; rank 0 writes
        it to the metrics and the progress bar (or the log). Starts a new window."""
        procs, window, position = self.procs, self.window, self.position
        # the window's one read of the device: it waits for the steps queued so far, so the time
        # taken after it covers the window's computation
        *losses, skipped, norm = torch.cat(
            [window.losses, window.skipped.view(1), grad_norm.detach().double().view(1)]
        ).tolist()
        window.skipped.zero_()
        position.skipped_steps += int(skipped)
        totals = all_sum(procs, [*losses, *window.counts.tolist(), window.wait_s, window.pending_tokens])
        position.tokens_seen += int(totals[12])
        window.pending_tokens = 0
        elapsed = time.perf_counter() - window.start
        micro_steps, tokens = max(1.0, totals[9]), totals[7]
        record = {
            "step": position.step,
            "split": "train",
            "loss": totals[0] / micro_steps,
            "mlm_loss": totals[1] / micro_steps,
            "nsp_loss": totals[2] / micro_steps,
            "mlm_accuracy": totals[3] / max(1.0, totals[4]),
            "nsp_accuracy": totals[5] / max(1.0, totals[6]),
            "lr": lr_used,
            "grad_norm": norm,
            "loss_scale": float(self.scaler.get_scale()) if self.scaler.is_enabled() else 1.0,
            "tokens_per_s": tokens / elapsed,
            "samples_per_s": totals[8] / elapsed,
            "data_wait_share": totals[11] / procs.world_size / elapsed,
            "tokens_seen": position.tokens_seen,
            # Since the last record (the step's own batches with --log-steps 1), all ranks:
            "tokens": int(tokens),  # non-padding tokens
            "masked_tokens": int(totals[4]),  # positions predicted
            "skipped_steps": position.skipped_steps,
            "epoch": position.epoch,
            "startup_window": self.first_record,  # includes start-up (and compilation): not steady
        }
        self.first_record = False
        if procs.device.type == "cuda":
            record["peak_memory_gb"] = torch.cuda.max_memory_allocated(procs.device) / 2**30
        if self.peak is not None:
            flops = training_flops_per_token(self.model.config, int(round(totals[10] / micro_steps)))
            record["mfu"] = flops * tokens / elapsed / (self.peak * procs.world_size)
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
            log.info(
                "step %d loss %.4f mlm_acc %.4f nsp_acc %.4f lr %.3g %.0f tokens/s (%s)",
                record["step"], record["loss"], record["mlm_accuracy"], record["nsp_accuracy"], record["lr"],
                record["tokens_per_s"], self.progress.status() if self.progress is not None else "",
            )  # fmt: skip

    @torch.no_grad()
    def evaluate(self) -> dict:
        """MLM accuracy and perplexity, NSP accuracy on up to ``eval_batches`` validation batches
        per rank, summed over ranks; rank 0 logs the record."""
        cfg, procs = self.cfg, self.procs
        self.model.eval()
        # mlm loss × count, mlm correct, mlm count, nsp correct, nsp count: summed on the device
        sums = torch.zeros(5, dtype=torch.float64, device=procs.device)
        self.validation.set_epoch(0)
        loader = torch.utils.data.DataLoader(
            self.validation, batch_size=None, num_workers=0, generator=torch.Generator()
        )
        batches = (self.layout.single(b) for b in itertools.islice(loader, cfg.eval_batches))
        if cfg.objective == "ltr":
            batches = (left_to_right_batch(b) for b in batches)
        for batch in DeviceFeed(((b, None) for b in batches), procs.device):
            with autocast(procs.device, cfg.precision):
                loss = self._loss_of(batch)
            count = loss.mlm_count.double()
            sums += torch.stack([loss.mlm_loss.double() * count, loss.mlm_correct.double(), count,
                                 loss.nsp_correct.double(), loss.nsp_count.double()])  # fmt: skip
        self.model.train()
        totals = all_sum(procs, sums.tolist())
        mlm_loss = totals[0] / max(1.0, totals[2])
        record = {
            "step": self.position.step,
            "split": "validation",
            "mlm_loss": mlm_loss,
            "mlm_perplexity": math.exp(min(mlm_loss, 50.0)),
            "mlm_accuracy": totals[1] / max(1.0, totals[2]),
            "nsp_accuracy": totals[3] / max(1.0, totals[4]),
            "examples": int(totals[4]),
        }
        if self.metrics is not None:
            self.metrics.log(record)
            log.info(
                "validation at step %d: MLM accuracy %.4f, perplexity %.2f, NSP accuracy %.4f",
                record["step"], record["mlm_accuracy"], record["mlm_perplexity"], record["nsp_accuracy"],
            )  # fmt: skip
        return record

    def checkpoint(self) -> None:
        """Save and commit the checkpoint of the current step (every rank's RNG; rank 0 the model,
        vocabulary and trainer state), then prune old ones. A failed write says how to continue."""
        step = self.position.step
        try:
            self._save(step)
        except OSError as err:
            raise TrainingError(
                f"writing the checkpoint of step {step} to {self.output} failed ({err}); the checkpoints "
                f"committed before it are complete: continue with --resume {self.output}"
            ) from None

    def _save(self, step: int) -> None:
        import fsspec

        procs = self.procs
        self.position.tokens_seen += int(all_sum(procs, [self.window.pending_tokens])[0])
        self.window.pending_tokens = 0
        self.position.skipped_steps += self.window.take_skipped()
        url = ckpt.step_url(self.output, step)
        fs, root = fsspec.core.url_to_fs(url)
        fs.makedirs(root, exist_ok=True)
        if procs.is_main:  # rank 0 holds the run folder: it journals every rank's files first
            ranks = (f"{url}/{ckpt.rng_file(r)}" for r in range(procs.world_size))
            journal(*(f"{name}.{suffix}" for name in ranks for suffix in ("safetensors", "json")))
        barrier(procs)
        stamp = ckpt.Stamp(self.run_id, step)
        ckpt.save_state(ckpt.rng_state(), f"{url}/{ckpt.rng_file(procs.rank)}", stamp)
        if procs.is_main:
            ckpt.save_model(self.model, url, stamp)
            write_file(f"{root}/vocab.txt", "\n".join(self.setup.vocab.vocab) + "\n", fs)
            ckpt.save_state(self.state_dict(), f"{url}/{ckpt.TRAINER_STATE}", stamp)
        barrier(procs)
        if procs.is_main:
            ckpt.commit(url, step, self.run_id)
            ckpt.prune(self.output, self.cfg.keep_checkpoints)
            self.metrics.flush()
            log.info("checkpoint %s", url)

    def state_dict(self) -> dict:
        """The trainer state a checkpoint holds besides the model and the ranks' RNG."""
        position, vocab = self.position, self.setup.vocab
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
        """After the last step: the final evaluation, the metrics closed and plotted, the rank report."""
        if self.validation is not None and self.position.step == self.cfg.max_steps:
            self.evaluate()
        if self.procs.is_main:
            self.metrics.close()
            self.metrics.plot()
        if self.cfg.rank_report:
            _write_rank_report(self.cfg.rank_report, self.procs, self.model, self.seen, self.position.step)


# -- helpers ----------------------------------------------------------------------------------------


def _checked_settings(cfg: TrainConfig, procs: Processes) -> tuple[int, int, str]:
    """Every problem with the settings at once; the micro batch, accumulation and output folder
    (checked writable on rank 0)."""
    problems = cfg.problems()
    if problems:
        raise TrainingError("invalid settings: " + "; ".join(problems))
    try:
        micro, accumulation = cfg.accumulation(procs.world_size)
    except ValueError as err:
        raise TrainingError(str(err)) from None
    output = (cfg.output or cfg.resume or "").rstrip("/")
    if not output:
        raise TrainingError("--output is required (or --resume RUN, which continues writing into RUN)")
    if procs.is_main:
        check_output(output)
    return micro, accumulation, output


def _seed(seed: int) -> None:
    """The global RNGs dropout and the rest draw from (Python, NumPy, torch), per rank."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def _data_position(state: dict | None, cfg: TrainConfig) -> dict | None:
    """The saved reader position, when it belongs to these shards."""
    if state is None:
        return None
    data = state.get("data") or {}
    if data.get("shards", "").rstrip("/") != cfg.shards.rstrip("/"):
        return None  # phase 2: new shards start from their beginning
    return data


def compile_regions(model: torch.nn.Module, mode: str | None, dynamic: bool | None) -> None:
    """``torch.compile`` a BERT region by region, in place: every encoder layer (the same code,
    so one compilation serves all of them, several times faster to compile than the whole model
    and within a few percent of its speed), the embeddings and the heads. The compiled regions
    run inside the eager model, so DDP and the checkpoints see the same module."""
    for region in (*model.bert.encoder.layer, model.bert.embeddings, model.cls):
        region.compile(mode=mode, dynamic=dynamic)


def apply_gradients(
    params: list[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    max_grad_norm: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unscale, clip and apply the accumulated gradients unless their norm is not finite.

    Returns the gradient norm (before clipping) and a 0-d float tensor, 1 when the update was
    skipped, both on the device: with fused AdamW or LAMB the decision is made there, and nothing
    here waits for it (see :func:`pretrain.optim.step_unless`). With fp16 the scaler lowers its
    scale after a step whose gradients overflowed; with bf16/fp32 its calls are no-ops.
    """
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm or float("inf"), foreach=True)
    skipped = (~torch.isfinite(grad_norm)).float()
    step_unless(optimizer, skipped)
    scaler.update()
    return grad_norm, skipped


def _example_keys(batch: dict) -> list[str]:
    """A digest of each example of a batch (its tokens and masks), for the rank report."""
    keys = []
    for ids, positions in zip(
        example_tokens(batch),
        batch.get("masked_lm_positions", batch["masked_lm_ids"]),  # LTR batches have no positions
        strict=True,
    ):
        data = ids.numpy().tobytes() + positions.numpy().tobytes()
        keys.append(hashlib.sha256(data).hexdigest()[:16])
    return keys


def _write_rank_report(
    folder: str, procs: Processes, model: torch.nn.Module, seen: list[str], step: int
) -> None:
    """Per rank: a digest of the weights and the examples it trained on (tests of DDP)."""

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    write_json(
        os.path.join(folder, f"rank{procs.rank}.json"),
        {"rank": procs.rank, "step": step, "weights_sha256": digest.hexdigest(), "examples": seen},
        indent=None,
    )


# Settings a resumed run takes from its checkpoint unless given again: everything but the data,
# the paths and the per-invocation switches.
_NOT_INHERITED = frozenset(
    {"shards", "output", "resume", "init_from", "validation_shards", "vocab", "max_seq_length", "rank_report"}
    | {"compile", "compile_mode"}  # decided by the machine a run continues on
)


def inherit_settings(cfg: TrainConfig, given: set[str]) -> TrainConfig:
    """``cfg`` with the settings not ``given`` on the command line taken from the checkpoint that
    ``cfg.resume`` continues, so that ``--resume RUN`` alone continues the run as it was set up."""
    try:
        found = ckpt.resolve(cfg.resume)
        saved = ckpt.load_state(f"{found.url}/{ckpt.TRAINER_STATE}").get("train_config")
    except (ckpt.CheckpointError, OSError) as err:
        raise TrainingError(str(err)) from None
    if not isinstance(saved, dict):
        raise TrainingError(
            f"{found.url}/{ckpt.TRAINER_STATE}.json: no train_config; the checkpoint is damaged"
        )
    known = set(TrainConfig.__dataclass_fields__)
    inherited = {
        k: v
        for k, v in saved.items()
        if k in known and k not in given and k not in _NOT_INHERITED and k != "config"
    }
    return replace(cfg, **inherited)


def resume_config(cfg: TrainConfig) -> TrainConfig:
    """Defaults for ``--resume RUN``: output into RUN."""
    if cfg.resume and not cfg.output:
        return replace(cfg, output=cfg.resume)
    return cfg
