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

Non-finite gradients. A step whose gradient norm is not finite is not applied (the GradScaler
does this for fp16; for bf16/fp32 we check): it is counted in ``skipped_steps``, the data it used
is consumed and the schedule moves on.

Phase 2. ``--resume RUN --shards OTHER``: the model, optimizer and step continue; the reader
starts at the beginning of the new shards (its saved position belongs to the old ones), and the
learning-rate schedule is re-evaluated with the new ``--max-steps``/``--warmup-steps``.
"""

from __future__ import annotations

import contextlib
import hashlib
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

from pretrain import checkpoint as ckpt
from pretrain.batching import (
    BatchLayout,
    batch_shape,
    example_tokens,
    model_inputs,
    num_real_tokens,
    to_device,
)
from pretrain.collate import DynamicMasking, masking_from_params, validation_masking
from pretrain.config import TrainConfig
from pretrain.data import ExampleShards, ShardError, ShardLoader
from pretrain.metrics import MetricsLog, peak_flops
from pretrain.model import compile_model, left_to_right_batch, pretraining_loss, training_flops_per_token
from pretrain.optim import build_optimizer, build_scheduler
from pretrain.outputs import run_scratch
from pretrain.progress import Progress
from pretrain.runtime import autocast
from pretrain.startup import Processes, TrainingError, all_sum, barrier, check_output, init_processes, prepare
from schemas.commands import Stopped
from schemas.files import write_file, write_json

log = logging.getLogger("pretrain")

__all__ = ["Processes", "Trainer", "TrainingError", "apply_gradients", "inherit_settings", "train"]


def train(
    cfg: TrainConfig, procs: Processes | None = None, *, before_fit: Callable[[], None] | None = None
) -> dict:
    """Run (or continue) pre-training; return the last training metrics record. Temporary files
    live in one folder for the run, removed at the end on success and on failure. ``before_fit``
    runs on rank 0 once every check has passed, just before step 1 (``--overwrite``'s clean-up)."""
    with run_scratch("pretrain-run-") as scratch:
        trainer = Trainer(resume_config(cfg), procs or init_processes(), scratch=scratch)
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


class _Window:
    """This rank's sums since the last metrics record: losses and accuracy counts (on the device),
    real tokens / samples / micro batches / padded widths (on the host), time waiting for data."""

    def __init__(self, device: torch.device) -> None:
        self.losses = torch.zeros(7, dtype=torch.float64, device=device)
        self.counts = np.zeros(4)
        self.pending_tokens = 0  # not yet in Position.tokens_seen (added at a record or a save)
        self.reset()

    def reset(self) -> None:
        """Start a new window (``pending_tokens`` is reset where it is counted)."""
        self.losses.zero_()
        self.counts[:], self.wait_s, self.start = 0, 0.0, time.perf_counter()

    def add(self, loss, shape: tuple[int, int], cpu_tokens: int) -> None:
        """Count one micro batch (``shape``: its examples and padded width)."""
        parts = (loss.total, loss.mlm_loss, loss.nsp_loss)
        counts = (loss.mlm_correct, loss.mlm_count, loss.nsp_correct, loss.nsp_count)
        self.losses += torch.stack([p.detach().double() for p in parts] + [c.double() for c in counts])
        self.counts += [cpu_tokens, shape[0], 1, shape[1]]
        self.pending_tokens += cpu_tokens


def _forward_loss(forward, batch: dict, device: torch.device):
    """The model's pre-training loss on a host batch (any layout; see :mod:`pretrain.batching`)."""
    outputs = forward(**to_device(model_inputs(batch), device))
    batch = to_device(
        {k: batch[k] for k in ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")}, device
    )
    return pretraining_loss(
        outputs, batch["masked_lm_ids"], batch["masked_lm_weights"], batch["next_sentence_labels"]
    )


class Trainer:
    """One process's pre-training: built from the settings (data, model, optimizer, scheduler,
    scaler, resume state), then :meth:`fit` runs :meth:`step` until ``--max-steps``, with
    :meth:`log`, :meth:`evaluate` and :meth:`checkpoint` at their intervals."""

    def __init__(self, cfg: TrainConfig, procs: Processes, scratch: str | None = None) -> None:
        self.cfg, self.procs = cfg, procs
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
        except (ValueError, OSError) as err:
            raise TrainingError(f"{option} {url}: {err}") from None

    def _build_data(self) -> None:
        """The training reader (with dynamic masking when asked), the model and vocabulary it
        fits (:func:`pretrain.startup.prepare`), the validation reader and the worker count."""
        cfg = self.cfg
        self.reader = self._open_shards("--shards", cfg.shards, streams=cfg.streams)
        self.layout = BatchLayout(cfg.batching, cfg.bucket_window, cfg.seed, self.procs.rank)
        self.setup = prepare(cfg, self.reader)
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
                vocab_sha256=self.setup.vocab.vocab_sha256,
            )  # fmt: skip
            self.validation.masking = validation_masking(self.validation.params, self.setup.vocab.vocab)

    def _build_optimization(self) -> None:
        """The model on its device, the optimizer and the grad scaler (enabled for fp16)."""
        cfg = self.cfg
        self.model = self.setup.model.to(self.procs.device)
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
        """DDP around the model when there are several ranks; ``torch.compile`` when asked."""
        procs = self.procs
        self.ddp_model = self.model
        if procs.world_size > 1:
            self.ddp_model = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[procs.local_rank] if procs.device.type == "cuda" else None
            )
        self.forward = compile_model(self.ddp_model) if self.cfg.compile else self.ddp_model

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
        """The micro batches from the current position on, epoch after epoch, in --batching's
        layout (which may re-read a bucketing window from its start: see pretrain/batching.py)."""
        position = self.position
        while True:
            if position.batches_done >= len(self.reader):
                position.epoch, position.batches_done = position.epoch + 1, 0
            for batch in self.layout.epoch_batches(self._read, position.batches_done, position.epoch):
                position.batches_done += 1
                yield batch

    def _read(self, first: int):
        """The reader's batches of the current epoch from batch ``first`` on, from DataLoader
        workers started once per run (``ShardLoader``: persistent, told the epoch each time)."""
        if self.loader is None:
            self.loader = ShardLoader(self.reader, self.workers, pin_memory=self.procs.device.type == "cuda")
        return self.loader.epoch(self.position.epoch, first)

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
        data = self.batches()
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
                stop_now = (
                    all_sum(procs, [float(stop.requested)])[0] > 0 if procs.world_size > 1 else stop.requested
                )
                if step % cfg.save_steps == 0 or step == cfg.max_steps or stop_now:
                    self.checkpoint()
                if stop_now:
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
                f"continue with --resume {self.output} once the data is reachable"
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

    def step(self, data) -> tuple[torch.Tensor, float]:
        """One optimizer step: ``accumulation`` micro batches forward and backward, then the update
        (skipped when the gradients are not finite). Returns the gradient norm and the step's lr."""
        cfg, procs = self.cfg, self.procs
        waited = time.perf_counter()
        step_batches = [next(data) for _ in range(self.accumulation)]
        if cfg.objective == "ltr":
            step_batches = [left_to_right_batch(b) for b in step_batches]
        self.window.wait_s += time.perf_counter() - waited
        # the step's loss is the mean over every masked token (and every pair) of the global
        # batch, however it is split into ranks and micro batches: weigh each micro batch's means
        masked = [float(b["masked_lm_weights"].sum()) for b in step_batches]
        pairs = [float(b["next_sentence_labels"].numel() * cfg.uses_nsp) for b in step_batches]
        total_masked, total_pairs = all_sum(procs, [sum(masked), sum(pairs)])
        share = procs.world_size / max(total_masked, 1.0)  # DDP averages over ranks
        for index, batch in enumerate(step_batches):
            sync = index == self.accumulation - 1 or procs.world_size == 1
            weights = masked[index] * share, pairs[index] * procs.world_size / max(total_pairs, 1.0)
            self._micro_step(batch, sync, weights)
        grad_norm, applied = apply_gradients(self.model, self.optimizer, self.scaler, cfg.max_grad_norm)
        self.position.skipped_steps += not applied
        lr_used = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.position.step += 1
        if self.progress is not None:
            self.progress.update(1)
        return grad_norm, lr_used

    def _micro_step(self, batch: dict, sync: bool, weights: tuple[float, float]) -> None:
        """Forward and backward of one micro batch, its MLM and NSP means weighted by ``weights``;
        DDP's gradient all-reduce only when ``sync`` (the step's last micro batch)."""
        cpu_tokens = num_real_tokens(batch)  # on the host: no device sync
        if self.seen is not None:
            self.seen.extend(_example_keys(batch))
        with (
            contextlib.nullcontext() if sync else self.ddp_model.no_sync(),
            autocast(self.procs.device, self.cfg.precision),
        ):
            loss = _forward_loss(self.forward, batch, self.procs.device)
            objective = loss.mlm_loss * weights[0] + loss.nsp_loss * weights[1]
            self.scaler.scale(objective).backward()
        self.window.add(loss, batch_shape(batch), cpu_tokens)

    # -- log, evaluate, checkpoint ----------------------------------------------------------------

    def log(self, grad_norm: torch.Tensor, lr_used: float) -> dict:
        """The training record of the window since the last one, summed over ranks; rank 0 writes
        it to the metrics and the progress bar (or the log). Starts a new window."""
        procs, window, position = self.procs, self.window, self.position
        totals = all_sum(
            procs, [*window.losses.tolist(), *window.counts.tolist(), window.wait_s, window.pending_tokens]
        )
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
            "grad_norm": float(grad_norm),
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
        }
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
        sums = np.zeros(5)  # mlm loss × count, mlm correct, mlm count, nsp correct, nsp count
        self.validation.set_epoch(0)
        loader = torch.utils.data.DataLoader(
            self.validation, batch_size=None, num_workers=0, generator=torch.Generator()
        )
        for index, batch in enumerate(loader):
            if index >= cfg.eval_batches:
                break
            batch = self.layout.single(batch)
            if cfg.objective == "ltr":
                batch = left_to_right_batch(batch)
            with autocast(procs.device, cfg.precision):
                loss = _forward_loss(self.forward, batch, procs.device)
            count = float(loss.mlm_count)
            sums += [float(loss.mlm_loss) * count, float(loss.mlm_correct), count, float(loss.nsp_correct),
                     float(loss.nsp_count)]  # fmt: skip
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
        url = ckpt.step_url(self.output, step)
        fs, root = fsspec.core.url_to_fs(url)
        fs.makedirs(root, exist_ok=True)
        barrier(procs)
        ckpt.save_state(ckpt.rng_state(), f"{url}/{ckpt.rng_file(procs.rank)}")
        if procs.is_main:
            self.model.save_pretrained(url)
            write_file(f"{root}/vocab.txt", "\n".join(self.setup.vocab.vocab) + "\n", fs)
            ckpt.save_state(self.state_dict(), f"{url}/{ckpt.TRAINER_STATE}")
        barrier(procs)
        if procs.is_main:
            ckpt.commit(url, step)
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


def apply_gradients(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    max_grad_norm: float,
) -> tuple[torch.Tensor, bool]:
    """Unscale, clip and apply the accumulated gradients unless their norm is not finite.

    Returns the gradient norm (before clipping) and whether the update was applied. With fp16 the
    scaler also lowers its scale after a skipped step; with bf16/fp32 its ``update`` is a no-op.
    """
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm or float("inf"))
    applied = math.isfinite(float(grad_norm))
    if scaler.is_enabled():
        scaler.step(optimizer)  # skips the update itself when the gradients are not finite
    elif applied:
        optimizer.step()
    scaler.update()
    return grad_norm, applied


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
