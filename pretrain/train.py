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
import signal
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.distributed as dist

from pretrain import checkpoint as ckpt
from pretrain.collate import DynamicMasking, masking_from_params
from pretrain.config import TrainConfig
from pretrain.data import ExampleShards, ShardError
from pretrain.metrics import MetricsLog, peak_flops
from pretrain.model import (
    BertConfig,
    BertForPreTraining,
    compile_model,
    left_to_right_batch,
    pretraining_loss,
    training_flops_per_token,
)
from pretrain.optim import build_optimizer, build_scheduler
from pretrain.runtime import autocast
from wordpiece.tokenizer import VocabError, WordPieceTokenizer

log = logging.getLogger("pretrain")


class TrainingError(ValueError):
    """A problem found before the first step (bad shards, vocabulary, checkpoint or settings)."""


# -- processes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Processes:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_processes() -> Processes:
    """Join the torchrun group when there is one (nccl on GPU, gloo on CPU)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Processes(rank, world_size, local_rank, device)


def _barrier(procs: Processes) -> None:
    if procs.world_size > 1:
        dist.barrier()


def _sum(procs: Processes, values: list[float]) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=procs.device)
    if procs.world_size > 1:
        dist.all_reduce(tensor)
    return tensor.tolist()


# -- set-up -----------------------------------------------------------------------------------------


@dataclass
class Setup:
    model: BertForPreTraining
    vocab: WordPieceTokenizer
    max_seq_length: int
    trainer_state: dict | None
    resumed_from: ckpt.Checkpoint | None


def _shard_params(reader: ExampleShards) -> tuple[int, bool, bool]:
    params = reader.params
    pairs = params.get("pairs") or {}
    max_len = int(pairs.get("max_seq_length") or params.get("max_seq_length") or 0)
    return max_len, bool(params.get("cased", False)), params.get("masking", True) is not False


def _load_vocab(url: str, cased: bool) -> WordPieceTokenizer:
    try:
        return WordPieceTokenizer.load(url, cased=cased)
    except (VocabError, OSError) as err:
        raise TrainingError(f"cannot load the vocabulary: {err}") from None


def prepare(cfg: TrainConfig, probe: ExampleShards) -> Setup:
    """Model, vocabulary and resume state, with every check that can fail before training."""
    max_len, cased, masked = _shard_params(probe)
    if not max_len:
        raise TrainingError(f"{cfg.shards}/manifest.json: no max_seq_length in the generation parameters")
    if cfg.max_seq_length is not None and cfg.max_seq_length != max_len:
        raise TrainingError(
            f"--max-seq-length {cfg.max_seq_length} but the shards at {cfg.shards} were made with {max_len}"
        )
    if not masked and not cfg.dynamic_masking:
        raise TrainingError(f"{cfg.shards}: the shards are unmasked (--no-masking); add --dynamic-masking")
    vocab_url = cfg.vocab or probe.params.get("vocab")
    if not vocab_url:
        raise TrainingError(f"{cfg.shards}/manifest.json names no vocabulary; pass --vocab")
    vocab = _load_vocab(vocab_url, cased)
    recorded = probe.params.get("vocab_sha256")
    if recorded and recorded != vocab.vocab_sha256:
        raise TrainingError(
            f"{vocab_url} is not the vocabulary the shards at {cfg.shards} were made with "
            f"(SHA-256 {vocab.vocab_sha256[:12]}… vs {recorded[:12]}… in the manifest)"
        )

    trainer_state, resumed_from = None, None
    if cfg.resume:
        try:
            resumed_from = ckpt.resolve(cfg.resume)
        except ckpt.CheckpointError as err:
            raise TrainingError(str(err)) from None
        model = BertForPreTraining.from_pretrained(resumed_from.url)
        if (model.config.nsp, model.config.causal) != (cfg.uses_nsp, cfg.objective == "ltr"):
            raise TrainingError(
                f"{resumed_from.url} was trained with nsp={model.config.nsp}, causal="
                f"{model.config.causal}; --resume must keep --objective and --no-nsp as they were"
            )
        trainer_state = ckpt.load_state(f"{resumed_from.url}/{ckpt.TRAINER_STATE}")
        if cfg.config is not None:
            wanted = BertConfig.preset(cfg.config, vocab.vocab_size)
            got = model.config
            shape = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
            if any(getattr(wanted, k) != getattr(got, k) for k in shape):
                raise TrainingError(
                    f"{resumed_from.url} holds a {got.num_hidden_layers}-layer, {got.hidden_size}-wide model, "
                    f"not --config {cfg.config}; leave --config out when resuming"
                )
    elif cfg.init_from:
        source = cfg.init_from
        with contextlib.suppress(ckpt.CheckpointError):
            source = ckpt.resolve(cfg.init_from).url  # a run folder: its newest checkpoint
        try:
            model = BertForPreTraining.from_pretrained(source, seed=cfg.seed, **_objective_fields(cfg))
        except (OSError, ValueError) as err:
            raise TrainingError(f"--init-from {cfg.init_from}: {err}") from None
    else:
        overrides = _objective_fields(cfg)
        if cfg.dropout is not None:
            overrides |= {"hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.dropout}
        config = BertConfig.preset(cfg.config or "base", vocab.vocab_size, **overrides)
        model = BertForPreTraining(config, seed=cfg.seed)

    if model.config.vocab_size != vocab.vocab_size:
        raise TrainingError(
            f"the model has a vocabulary of {model.config.vocab_size} tokens but {vocab_url} has "
            f"{vocab.vocab_size}: token ids would fall outside the model's embeddings"
        )
    if max_len > model.config.max_position_embeddings:
        raise TrainingError(
            f"the shards hold sequences of up to {max_len} tokens; the model has "
            f"{model.config.max_position_embeddings} positions"
        )
    return Setup(model, vocab, max_len, trainer_state, resumed_from)


def _objective_fields(cfg: TrainConfig) -> dict:
    """The model-config fields the objective sets: the NSP head, causal attention."""
    return {"nsp": cfg.uses_nsp, "causal": cfg.objective == "ltr"}


def _check_output(output: str) -> None:
    import fsspec

    fs, root = fsspec.core.url_to_fs(output)
    probe = f"{root.rstrip('/')}/.write-test-{os.getpid()}"
    try:
        fs.makedirs(root, exist_ok=True)
        fs.pipe_file(probe, b"ok")
        fs.rm(probe)
    except (OSError, PermissionError) as err:
        raise TrainingError(f"--output {output} is not writable: {err}") from None


# -- the loop ---------------------------------------------------------------------------------------


class _Stop:
    """SIGTERM/SIGINT (pre-emption): finish the step, save a checkpoint, stop."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum, frame) -> None:
        self.requested = True


def _data_position(state: dict | None, cfg: TrainConfig) -> dict | None:
    """The saved reader position, when it belongs to these shards."""
    if state is None:
        return None
    data = state.get("data") or {}
    if data.get("shards", "").rstrip("/") != cfg.shards.rstrip("/"):
        return None  # phase 2: new shards start from their beginning
    return data


def train(cfg: TrainConfig, procs: Processes | None = None) -> dict:
    """Run (or continue) pre-training; return the last training metrics record."""
    procs = procs or init_processes()
    cfg = resume_config(cfg)
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
        _check_output(output)

    torch.manual_seed(cfg.seed + procs.rank)
    np.random.seed((cfg.seed + procs.rank) % 2**32)
    import random

    random.seed(cfg.seed + procs.rank)
    if procs.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    def open_shards(option: str, url: str, **settings) -> ExampleShards:
        try:
            return ExampleShards(
                url, batch_size=micro, seed=cfg.seed, rank=procs.rank, world_size=procs.world_size, **settings
            )
        except (ValueError, OSError) as err:
            raise TrainingError(f"{option} {url}: {err}") from None

    reader = open_shards("--shards", cfg.shards, streams=cfg.streams)
    setup = prepare(cfg, reader)
    if cfg.dynamic_masking:
        try:
            settings = masking_from_params(reader.params, **cfg.masking_overrides())
        except (TypeError, ValueError) as err:
            raise TrainingError(f"--dynamic-masking with the settings of {cfg.shards}: {err}") from None
        reader.masking = DynamicMasking.from_vocab(setup.vocab.vocab, settings)
        log.info("dynamic masking: %s", settings)
    workers = max(w for w in range(1, max(1, cfg.num_workers) + 1) if reader.streams % w == 0)
    workers = workers if cfg.num_workers else 0
    validation = None
    if cfg.validation_shards:
        validation = open_shards(
            "--validation-shards", cfg.validation_shards, shuffle=False, streams=1,
            vocab_sha256=setup.vocab.vocab_sha256,
        )  # fmt: skip

    model = setup.model.to(procs.device)
    optimizer = build_optimizer(
        cfg.optimizer, model, cfg.lr, cfg.weight_decay, (cfg.adam_beta1, cfg.adam_beta2), cfg.adam_eps
    )
    scaler = torch.amp.GradScaler(procs.device.type, enabled=cfg.precision == "fp16")
    state = setup.trainer_state
    step, tokens_seen, skipped = 0, 0, 0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        if state.get("scaler") and cfg.precision == "fp16":
            scaler.load_state_dict(state["scaler"])
        step, tokens_seen, skipped = state["step"], state["tokens_seen"], state["skipped_steps"]
        rng_url = f"{setup.resumed_from.url}/{ckpt.rng_file(procs.rank)}"
        try:
            ckpt.set_rng_state(ckpt.load_state(rng_url))
        except FileNotFoundError:
            log.warning("%s missing (resuming with a different number of ranks?); RNG not restored", rng_url)
    scheduler = build_scheduler(
        optimizer,
        cfg.lr,
        cfg.warmup_steps,
        cfg.schedule_steps or cfg.max_steps,
        cfg.decay_power,
        step,
        schedule=cfg.lr_schedule,
    )
    if step >= cfg.max_steps:
        raise TrainingError(f"the run is already at step {step}; raise --max-steps above it to continue")

    position = _data_position(state, cfg)
    epoch, batches_done = 0, 0
    if position is not None:
        try:
            reader.load_state_dict(position["reader"])
        except ValueError as err:
            raise TrainingError(
                f"cannot continue the data order of {setup.resumed_from.url}: {err}"
            ) from None
        epoch, batches_done = position["reader"]["epoch"], position["reader"]["batches_done"]

    ddp_model = model
    if procs.world_size > 1:
        ddp_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[procs.local_rank] if procs.device.type == "cuda" else None
        )
    forward = compile_model(ddp_model) if cfg.compile else ddp_model

    metrics = MetricsLog(output, step if state is not None else None) if procs.is_main else None
    if procs.is_main:
        log.info(
            "training %s (%.1fM parameters) on %s: %d examples, %d rank(s) × %d × %d micro batch; "
            "from step %d to %d",
            "x".join(map(str, (model.config.num_hidden_layers, model.config.hidden_size))),
            sum(p.numel() for p in model.parameters()) / 1e6,
            cfg.shards,
            reader.num_examples,
            procs.world_size,
            accumulation,
            micro,
            step,
            cfg.max_steps,
        )
    peak = (
        peak_flops(torch.cuda.get_device_name(procs.device), cfg.precision)
        if procs.device.type == "cuda"
        else None
    )

    def batches():
        nonlocal epoch, batches_done
        while True:
            if batches_done >= len(reader):
                epoch, batches_done = epoch + 1, 0
            reader.load_state_dict(reader.state_at(batches_done, epoch))
            loader = torch.utils.data.DataLoader(
                reader,
                batch_size=None,
                num_workers=workers,
                pin_memory=procs.device.type == "cuda",
                generator=torch.Generator(),
            )
            for batch in loader:
                batches_done += 1
                yield batch

    stop = _Stop()
    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    progress = None
    if procs.is_main and sys.stderr.isatty():
        from tqdm import tqdm

        progress = tqdm(total=cfg.max_steps, initial=step, unit="step", dynamic_ncols=True)

    def save(at: int) -> None:
        nonlocal tokens_seen, pending_tokens
        tokens_seen += int(_sum(procs, [pending_tokens])[0])
        pending_tokens = 0
        url = ckpt.step_url(output, at)
        import fsspec

        fs, root = fsspec.core.url_to_fs(url)
        fs.makedirs(root, exist_ok=True)
        _barrier(procs)
        ckpt.save_state(ckpt.rng_state(), f"{url}/{ckpt.rng_file(procs.rank)}")
        if procs.is_main:
            model.save_pretrained(url)
            fs.pipe_file(f"{root}/vocab.txt", ("\n".join(setup.vocab.vocab) + "\n").encode("utf-8"))
            ckpt.save_state(
                {
                    "step": at,
                    "tokens_seen": tokens_seen,
                    "skipped_steps": skipped,
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "scaler": scaler.state_dict() if scaler.is_enabled() else None,
                    "data": {"shards": cfg.shards, "reader": reader.state_at(batches_done, epoch)},
                    "train_config": cfg.to_dict(),
                    "model_config": model.config.to_dict(),
                    "world_size": procs.world_size,
                    "cased": setup.vocab.cased,
                    "vocab_sha256": setup.vocab.vocab_sha256,
                },
                f"{url}/{ckpt.TRAINER_STATE}",
            )
        _barrier(procs)
        if procs.is_main:
            ckpt.commit(url, at)
            ckpt.prune(output, cfg.keep_checkpoints)
            metrics.flush()
            log.info("checkpoint %s", url)

    data = batches()
    seen: list[str] | None = [] if cfg.rank_report else None
    losses = torch.zeros(7, dtype=torch.float64, device=procs.device)  # summed over micro batches
    counts = np.zeros(4)  # real tokens, samples, micro batches, padded width (summed)
    wait_s, window_start, pending_tokens = 0.0, time.perf_counter(), 0
    record: dict = {}
    model.train()
    try:
        while step < cfg.max_steps:
            waited = time.perf_counter()
            step_batches = [next(data) for _ in range(accumulation)]
            if cfg.objective == "ltr":
                step_batches = [left_to_right_batch(b) for b in step_batches]
            wait_s += time.perf_counter() - waited
            # the step's loss is the mean over every masked token (and every pair) of the global
            # batch, however it is split into ranks and micro batches: weigh each micro batch's means
            masked = [float(b["masked_lm_weights"].sum()) for b in step_batches]
            pairs = [float(b["next_sentence_labels"].numel() * cfg.uses_nsp) for b in step_batches]
            total_masked, total_pairs = _sum(procs, [sum(masked), sum(pairs)])
            for index, batch in enumerate(step_batches):
                cpu_tokens = int(batch["attention_mask"].sum())  # on the host: no device sync
                if seen is not None:
                    seen.extend(_example_keys(batch))
                batch = {k: v.to(procs.device, non_blocking=True) for k, v in batch.items()}
                sync = index == accumulation - 1 or procs.world_size == 1
                with (
                    contextlib.nullcontext() if sync else ddp_model.no_sync(),
                    autocast(procs.device, cfg.precision),
                ):
                    outputs = forward(
                        batch["input_ids"],
                        batch["token_type_ids"],
                        batch["attention_mask"],
                        batch.get("masked_lm_positions"),
                    )
                    loss = pretraining_loss(
                        outputs,
                        batch["masked_lm_ids"],
                        batch["masked_lm_weights"],
                        batch["next_sentence_labels"],
                    )
                    share = procs.world_size / max(total_masked, 1.0)  # DDP averages over ranks
                    objective = loss.mlm_loss * (masked[index] * share) + loss.nsp_loss * (
                        pairs[index] * procs.world_size / max(total_pairs, 1.0)
                    )
                    scaler.scale(objective).backward()
                losses += torch.stack(
                    [
                        loss.total.detach().double(),
                        loss.mlm_loss.detach().double(),
                        loss.nsp_loss.detach().double(),
                        loss.mlm_correct.double(),
                        loss.mlm_count.double(),
                        loss.nsp_correct.double(),
                        loss.nsp_count.double(),
                    ]
                )
                counts += [cpu_tokens, batch["input_ids"].shape[0], 1, batch["input_ids"].shape[1]]
                pending_tokens += cpu_tokens
            grad_norm, applied = apply_gradients(model, optimizer, scaler, cfg.max_grad_norm)
            skipped += not applied
            lr_used = optimizer.param_groups[0]["lr"]
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if progress is not None:
                progress.update(1)

            if step % cfg.log_steps == 0 or step == cfg.max_steps:
                totals = _sum(procs, [*losses.tolist(), *counts.tolist(), wait_s, pending_tokens])
                tokens_seen += int(totals[12])
                pending_tokens = 0
                elapsed = time.perf_counter() - window_start
                micro_steps = max(1.0, totals[9])
                tokens = totals[7]
                record = {
                    "step": step,
                    "split": "train",
                    "loss": totals[0] / micro_steps,
                    "mlm_loss": totals[1] / micro_steps,
                    "nsp_loss": totals[2] / micro_steps,
                    "mlm_accuracy": totals[3] / max(1.0, totals[4]),
                    "nsp_accuracy": totals[5] / max(1.0, totals[6]),
                    "lr": lr_used,
                    "grad_norm": float(grad_norm),
                    "loss_scale": float(scaler.get_scale()) if scaler.is_enabled() else 1.0,
                    "tokens_per_s": tokens / elapsed,
                    "samples_per_s": totals[8] / elapsed,
                    "data_wait_share": totals[11] / procs.world_size / elapsed,
                    "tokens_seen": tokens_seen,
                    # Since the last record (the step's own batches with --log-steps 1), all ranks:
                    "tokens": int(tokens),  # non-padding tokens
                    "masked_tokens": int(totals[4]),  # positions predicted
                    "skipped_steps": skipped,
                    "epoch": epoch,
                }
                if procs.device.type == "cuda":
                    record["peak_memory_gb"] = torch.cuda.max_memory_allocated(procs.device) / 2**30
                if peak is not None:
                    width = totals[10] / micro_steps
                    flops = training_flops_per_token(model.config, int(round(width)))
                    record["mfu"] = flops * tokens / elapsed / (peak * procs.world_size)
                if procs.is_main:
                    metrics.log(record)
                    if metrics.local:
                        metrics.flush()
                    if progress is not None:
                        progress.set_postfix(
                            loss=f"{record['loss']:.3f}", mlm=f"{record['mlm_accuracy']:.3f}"
                        )
                    else:
                        log.info(
                            "step %d loss %.4f mlm_acc %.4f nsp_acc %.4f lr %.3g %.0f tokens/s",
                            step,
                            record["loss"],
                            record["mlm_accuracy"],
                            record["nsp_accuracy"],
                            record["lr"],
                            record["tokens_per_s"],
                        )
                losses.zero_()
                counts[:], wait_s, window_start = 0, 0.0, time.perf_counter()

            if (
                validation is not None
                and cfg.eval_steps
                and step % cfg.eval_steps == 0
                and step < cfg.max_steps
            ):
                _evaluate(forward, model, validation, cfg, procs, metrics, step)
            stop_now = _sum(procs, [float(stop.requested)])[0] > 0 if procs.world_size > 1 else stop.requested
            if step % cfg.save_steps == 0 or step == cfg.max_steps or stop_now:
                try:
                    save(step)
                except OSError as err:
                    raise TrainingError(
                        f"writing the checkpoint of step {step} to {output} failed ({err}); the checkpoints "
                        f"committed before it are complete: continue with --resume {output}"
                    ) from None
            if stop_now:
                if procs.is_main:
                    log.warning("stopped by a signal at step %d; resume with --resume %s", step, output)
                break
        if validation is not None and step == cfg.max_steps:
            _evaluate(forward, model, validation, cfg, procs, metrics, step)
        if procs.is_main:
            metrics.close()
            metrics.plot()
        if cfg.rank_report:
            _write_rank_report(cfg.rank_report, procs, model, seen, step)
    except ShardError as err:
        raise TrainingError(
            f"{err}\nStopped at step {step}; the checkpoints written so far are complete: continue with "
            f"--resume {output} once the data is reachable"
        ) from None
    finally:
        data.close()  # shuts the DataLoader's worker processes down
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if progress is not None:
            progress.close()
    return record


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
    for ids, mask, positions in zip(
        batch["input_ids"],
        batch["attention_mask"],
        batch.get("masked_lm_positions", batch["masked_lm_ids"]),  # LTR batches have no positions
        strict=True,
    ):
        data = ids[mask.bool()].numpy().tobytes() + positions.numpy().tobytes()
        keys.append(hashlib.sha256(data).hexdigest()[:16])
    return keys


def _write_rank_report(
    folder: str, procs: Processes, model: torch.nn.Module, seen: list[str], step: int
) -> None:
    """Per rank: a digest of the weights and the examples it trained on (tests of DDP)."""
    import json

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"rank{procs.rank}.json"), "w") as f:
        json.dump(
            {"rank": procs.rank, "step": step, "weights_sha256": digest.hexdigest(), "examples": seen}, f
        )


@torch.no_grad()
def _evaluate(
    forward, model, reader: ExampleShards, cfg: TrainConfig, procs: Processes, metrics, step: int
) -> dict:
    """MLM accuracy and perplexity, NSP accuracy on up to ``eval_batches`` batches per rank."""
    model.eval()
    sums = np.zeros(5)  # mlm loss × count, mlm correct, mlm count, nsp correct, nsp count
    reader.set_epoch(0)
    loader = torch.utils.data.DataLoader(reader, batch_size=None, num_workers=0, generator=torch.Generator())
    for index, batch in enumerate(loader):
        if index >= cfg.eval_batches:
            break
        if cfg.objective == "ltr":
            batch = left_to_right_batch(batch)
        batch = {k: v.to(procs.device) for k, v in batch.items()}
        with autocast(procs.device, cfg.precision):
            outputs = forward(
                batch["input_ids"],
                batch["token_type_ids"],
                batch["attention_mask"],
                batch.get("masked_lm_positions"),
            )
            loss = pretraining_loss(
                outputs, batch["masked_lm_ids"], batch["masked_lm_weights"], batch["next_sentence_labels"]
            )
        count = float(loss.mlm_count)
        sums += [
            float(loss.mlm_loss) * count,
            float(loss.mlm_correct),
            count,
            float(loss.nsp_correct),
            float(loss.nsp_count),
        ]
    model.train()
    totals = _sum(procs, sums.tolist())
    mlm_loss = totals[0] / max(1.0, totals[2])
    record = {
        "step": step,
        "split": "validation",
        "mlm_loss": mlm_loss,
        "mlm_perplexity": math.exp(min(mlm_loss, 50.0)),
        "mlm_accuracy": totals[1] / max(1.0, totals[2]),
        "nsp_accuracy": totals[3] / max(1.0, totals[4]),
        "examples": int(totals[4]),
    }
    if metrics is not None:
        metrics.log(record)
        log.info(
            "validation at step %d: MLM accuracy %.4f, perplexity %.2f, NSP accuracy %.4f",
            step,
            record["mlm_accuracy"],
            record["mlm_perplexity"],
            record["nsp_accuracy"],
        )
    return record


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
    except ckpt.CheckpointError as err:
        raise TrainingError(str(err)) from None
    saved = ckpt.load_state(f"{found.url}/{ckpt.TRAINER_STATE}").get("train_config", {})
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
