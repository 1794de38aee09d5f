"""What every fine-tuning task shares: its inputs, the pre-trained encoder, batching, the heads of
the paper's Figure 4 (a) and (b), the fit loop and prediction. A *feature* is a ``dict`` (token ids
and targets); every key of a batch of them (:func:`collate`) is a keyword argument of the task
model's ``forward``, which returns a :class:`TaskOutput`."""

from __future__ import annotations

import codecs
import contextlib
import logging
import math
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, NamedTuple

import safetensors.torch
import torch
import torch.nn.functional as F
from torch import nn

from pretrain import checkpoint as ckpt
from pretrain import hf, runtime
from pretrain.config import non_negative_finite, positive_finite, seed_in_range
from pretrain.model import BertForPreTraining, BertModel
from pretrain.optim import Diverged, build_scheduler, parameter_groups
from pretrain.progress import Progress
from pretrain.runtime import autocast, resolve_device, resolve_precision
from schemas import storage
from schemas.commands import InputError, UsageError
from schemas.inputs import MAX_JSON_BYTES, boolean, lines, loads, read_bytes
from wordpiece.tokenizer import WordPieceTokenizer

logger = logging.getLogger(__name__)

PRECISIONS = ("auto", *runtime.PRECISIONS)
SEQUENCE_KEYS = ("input_ids", "token_type_ids")
MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")  # what predict passes to a model
_STEP_DIR = re.compile(r"/checkpoints/step-\d+$")  # a checkpoint folder of a pretrain run


@contextlib.contextmanager
def open_input(url: str) -> Iterator[Any]:
    """``url`` (a path or bucket URL) opened in binary once it is known to be a file or bucket object."""
    storage.check_file(url)
    try:
        f = storage.open_binary(url)
    except FileNotFoundError:
        raise InputError(f"{url}: no such file") from None
    with f:
        yield f


def input_lines(url: str) -> Iterator[tuple[int, str]]:
    """The numbered lines of a UTF-8 text input (line ends kept, a leading BOM dropped), each bounded."""
    with open_input(url) as f:
        for number, line in enumerate(lines(f, url), 1):
            try:
                yield number, line.removeprefix(codecs.BOM_UTF8 if number == 1 else b"").decode("utf-8")
            except UnicodeDecodeError as err:
                raise InputError(f"{url}:{number}: not UTF-8 (byte {err.start + 1} of the line)") from None


def input_json(url: str) -> Any:
    """The JSON document in ``url``, read whole up to a bound and parsed strictly."""
    with open_input(url) as f:
        return loads(read_bytes(f, url, MAX_JSON_BYTES), url)


def check_examples(examples: Sequence[Any], what: str) -> None:
    """Refuse an empty split before any model is loaded: nothing to train on or score."""
    if not examples:
        raise InputError(f"{what}: no examples; give a file with at least one")


@dataclass
class Encoder:
    """A pre-trained BERT encoder, its tokenizer and the folder of its weights."""

    model: BertModel
    tokenizer: WordPieceTokenizer
    cased: bool
    source: str

    @property
    def max_positions(self) -> int:
        """The longest sequence the encoder accepts (``max_position_embeddings``)."""
        return self.model.config.max_position_embeddings


def _recorded_casing(folder: str) -> bool | None:
    """The casing ``trainer.json`` (ours) or ``tokenizer_config.json`` (HF) records, else None."""
    for name, key in ((f"{ckpt.TRAINER_STATE}.json", "cased"), (hf.TOKENIZER_CONFIG_FILE, "do_lower_case")):
        where = f"{folder}/{name}"
        value = boolean(input_json(where), key, where, default=None) if storage.exists(where) else None
        if value is not None:
            return value if key == "cased" else not value
    return None


def load_encoder(checkpoint: str, *, cased: bool | None = None, seed: int = 0) -> Encoder:
    """Load ``--checkpoint``: a ``pretrain`` run folder (newest complete checkpoint), a checkpoint
    folder ``RUN/checkpoints/step-N``, or an HF-format BERT folder (``config.json``, weights,
    ``vocab.txt``); local or a bucket URL. ``cased=None`` takes the casing the checkpoint records,
    else infers it from the vocabulary. A missing pooler is initialised from ``seed``."""
    url = checkpoint.rstrip("/")
    if _STEP_DIR.search(url) is not None or storage.exists(f"{url}/checkpoints"):
        url = ckpt.resolve(url).url
    try:
        hf.check_vocab_rows(url)
        model = BertForPreTraining.from_pretrained(url, seed=seed)
    except ValueError as err:
        raise InputError(f"--checkpoint {checkpoint}: {err}") from None
    vocab_url = f"{url}/{hf.VOCAB_FILE}"
    if not storage.exists(vocab_url):
        raise InputError(
            f"{vocab_url} not found: --checkpoint needs the vocabulary the model was trained with "
            "(a pretrain checkpoint or an HF BERT folder with vocab.txt)"
        )
    tokenizer = WordPieceTokenizer.load(vocab_url, cased=_recorded_casing(url) if cased is None else cased)
    if tokenizer.vocab_size != model.config.vocab_size:
        raise InputError(
            f"{vocab_url} has {tokenizer.vocab_size} tokens but {url}/config.json says vocab_size "
            f"{model.config.vocab_size}: the vocabulary is not the one this model was trained with"
        )
    return Encoder(model.bert, tokenizer, tokenizer.cased, url)


def read_head(source: str, prefixes: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The tensors of a task head saved in ``source`` (named ``prefixes``); empty for an encoder alone."""
    try:
        names = hf.tensor_names(source)
        if names is not None and not any(n.startswith(prefixes) for n in names):
            return {}
        weights, _ = hf.read_weights(source)
    except ValueError as err:
        raise InputError(str(err)) from None
    return {k: v for k, v in weights.items() if k.startswith(prefixes)}


CASING_SAMPLE = 200  # the first texts of the training data check_casing tokenises
UNK_WARN_SHARE = 0.01  # above this share of [UNK], and twice the other casing's, the casing is wrong


def unknown_share(tokenizer: WordPieceTokenizer, texts: Sequence[str]) -> float:
    """The share of ``[UNK]`` among the tokens of ``texts`` (0 without tokens)."""
    ids = [i for row in tokenizer.encode_batch(list(texts)) for i in row]
    return ids.count(tokenizer.token_to_id("[UNK]")) / len(ids) if ids else 0.0


def check_casing(encoder: Encoder, texts: Sequence[str]) -> float:
    """Warn, with both figures, when the encoder's casing gives over :data:`UNK_WARN_SHARE` ``[UNK]`` on
    the first texts and twice the other casing's. Returns the share."""
    sample = [t for t in texts[:CASING_SAMPLE] if t]
    tokenizer = encoder.tokenizer
    share = unknown_share(tokenizer, sample)
    if share > UNK_WARN_SHARE:
        other = unknown_share(WordPieceTokenizer(tokenizer.vocab, not tokenizer.cased), sample)
        if share >= 2 * other:
            chosen, flip = ("--cased", "--uncased") if tokenizer.cased else ("--uncased", "--cased")
            logger.warning(
                "%s: %.1f%% of the tokens of %d training texts are [UNK] with the vocabulary of %s, "
                "%.1f%% with %s: the casing does not fit the vocabulary; check --cased/--uncased",
                *(chosen, 100 * share, len(sample), encoder.source, 100 * other, flip),
            )
    return share


def prepare_encoder(checkpoint: str, config: FitConfig, texts: Sequence[str]) -> Encoder:
    """:func:`load_encoder` for a run, checked against its ``max_seq_length`` and its training ``texts``."""
    encoder = load_encoder(checkpoint, cased=config.cased, seed=config.seed)
    if config.max_seq_length > encoder.max_positions:
        raise InputError(
            f"--max-seq-length {config.max_seq_length} is more than the model's "
            f"max_position_embeddings ({encoder.max_positions}); lower it"
        )
    check_casing(encoder, texts)
    return encoder


def truncate_pair(a: list[int], b: list[int], max_tokens: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer side until both fit, as the reference ``_truncate_seq_pair``."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max_tokens:
        (a if len(a) > len(b) else b).pop()
    return a, b


def encode_pair(
    tokenizer: WordPieceTokenizer, text_a: str, text_b: str | None, max_seq_length: int
) -> dict[str, list[int]]:
    """``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` as ``input_ids`` and ``token_type_ids`` (0 for
    ``[CLS] A [SEP]``, 1 for ``B [SEP]``), truncated to ``max_seq_length`` tokens."""
    special = tokenizer.special_ids()
    cls_id, sep_id = special["[CLS]"], special["[SEP]"]
    a = tokenizer.encode(text_a)
    if text_b is None:
        a = a[: max_seq_length - 2]
        return {"input_ids": [cls_id, *a, sep_id], "token_type_ids": [0] * (len(a) + 2)}
    a, b = truncate_pair(a, tokenizer.encode(text_b), max_seq_length - 3)
    return {
        "input_ids": [cls_id, *a, sep_id, *b, sep_id],
        "token_type_ids": [0] * (len(a) + 2) + [1] * (len(b) + 1),
    }


def doc_windows(num_tokens: int, size: int, stride: int) -> list[tuple[int, int]]:
    """``(start, length)`` windows of at most ``size`` over ``num_tokens`` tokens, each starting
    ``stride`` after the previous one (or right after it ends, when shorter), the last one reaching
    the end; no tokens still give one empty window."""
    if size < 1 or stride < 1:
        raise ValueError(f"window size {size} and stride {stride} must be positive")
    windows, start = [], 0
    while True:
        length = min(num_tokens - start, size)
        windows.append((start, length))
        if start + length >= num_tokens:
            return windows
        start += min(length, stride)


def max_context_windows(windows: Sequence[tuple[int, int]]) -> list[int]:
    """For each token the windows of :func:`doc_windows` cover, the window where it has the most
    context: the largest min(left, right) + 0.01 * window length, the first on ties (the reference
    ``_check_is_max_context``). Linear in the tokens the windows hold."""
    if not windows:
        return []
    best: list[int] = [0] * (windows[-1][0] + windows[-1][1])
    scores = [-1.0] * len(best)
    for index, (start, length) in enumerate(windows):
        end = start + length - 1
        for position in range(start, start + length):
            score = min(position - start, end - position) + 0.01 * length
            if score > scores[position]:
                scores[position], best[position] = score, index
    return best


def _pad(rows: Sequence[Sequence[int]], length: int, value: int) -> list[list[int]]:
    return [list(row) + [value] * (length - len(row)) for row in rows]


def collate(
    features: Sequence[dict[str, Any]], pad_id: int = 0, *, token_pads: Mapping[str, int] | None = None
) -> dict[str, torch.Tensor]:
    """Stack features into tensors: ids and types (a list, or one per choice) padded to the batch's
    longest, ``attention_mask`` added, other per-token keys padded with ``token_pads``, scalars stacked."""
    first = features[0]
    nested = isinstance(first["input_ids"][0], (list, tuple))
    rows = [c for f in features for c in f["input_ids"]] if nested else [f["input_ids"] for f in features]
    length = max(len(row) for row in rows)
    pads = {key: pad_id if key == "input_ids" else 0 for key in SEQUENCE_KEYS} | dict(token_pads or {})
    batch: dict[str, torch.Tensor] = {}
    for key, value in pads.items():
        if key in first:
            seqs = [c for f in features for c in f[key]] if nested else [f[key] for f in features]
            batch[key] = torch.tensor(_pad(seqs, length, value))
    batch["attention_mask"] = torch.tensor(_pad([[1] * len(row) for row in rows], length, 0))
    if nested:
        batch = {k: v.view(len(features), len(first["input_ids"]), length) for k, v in batch.items()}
    for key in first.keys() - pads.keys():
        values = [f[key] for f in features]
        dtype = torch.float32 if any(isinstance(v, float) for v in values) else torch.long
        batch[key] = torch.tensor(values, dtype=dtype)
    return batch


class TaskOutput(NamedTuple):
    """What a task model returns: ``logits`` (a tensor, or a tuple such as SQuAD's) and ``loss``."""

    logits: torch.Tensor | tuple[torch.Tensor, ...]
    loss: torch.Tensor | None = None


def seeded_linear(in_features: int, out_features: int, std: float, seed: int) -> nn.Linear:
    """A linear layer initialised as BERT's from ``seed`` alone; the global RNG is left as it was."""
    with torch.random.fork_rng(devices=[]):
        layer = nn.Linear(in_features, out_features)
    with torch.no_grad():
        layer.weight.normal_(0.0, std, generator=torch.Generator().manual_seed(seed))
        layer.bias.zero_()
    return layer


class Classifier(nn.Module):
    """Dropout and a linear layer on the encoder's output (the paper's Figure 4): on the pooled
    ``[CLS]`` (``per="sequence"``: GLUE; one output is STS-B's regression), on each choice's
    (``"choice"``: SWAG, ``[batch, choices, length]`` ids), or on every token (``"token"``: NER).
    With ``bilstm`` (Table 5) it reads the BiLSTM's :meth:`~finetune.heads.BiLSTM.summary`."""

    def __init__(
        self, encoder: BertModel, outputs: int, *, per: str = "sequence", seed: int = 0, bilstm: Any = None
    ) -> None:
        super().__init__()
        config = encoder.config
        self.bert, self.outputs, self.per, self.bilstm = encoder, outputs, per, bilstm
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        in_features = config.hidden_size if bilstm is None else 2 * bilstm.units
        self.classifier = seeded_linear(in_features, outputs, config.initializer_range, seed)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None) -> TaskOutput:
        """Logits (``[batch]`` for one output) and, with ``labels``, the loss."""
        length = input_ids.shape[-1]
        flat = [
            None if t is None else t.reshape(-1, length) for t in (input_ids, token_type_ids, attention_mask)
        ]
        sequence, pooled = self.bert(*flat)
        if self.per == "token":
            pooled = sequence
        elif self.bilstm is not None:
            pooled = self.bilstm.summary(sequence, flat[2])
        logits = self.classifier(self.dropout(pooled)).float()
        if self.per == "choice":
            logits = logits.view(input_ids.shape[:2])
        elif self.outputs == 1:
            logits = logits.squeeze(-1)
            return TaskOutput(logits, None if labels is None else F.mse_loss(logits, labels.float()))
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, -2), labels.flatten())
        return TaskOutput(logits, loss)


def save_model(model: nn.Module, encoder: Encoder, folder: storage.Folder, **config_updates: Any) -> None:
    """Write a fine-tuned ``model`` into ``folder`` as a BERT folder, its config with ``config_updates``."""
    config, _ = hf.read_config(encoder.source)
    vocab_size = model.bert.config.vocab_size
    state = {}
    for name, tensor in model.state_dict().items():
        if name == "bert.embeddings.word_embeddings.weight":
            tensor = tensor[:vocab_size]
        state[name] = tensor.detach().to("cpu", copy=True).contiguous()
    folder.write(hf.VOCAB_FILE, storage.read_bytes(f"{encoder.source.rstrip('/')}/{hf.VOCAB_FILE}"))
    folder.write(hf.SAFETENSORS_FILE, safetensors.torch.save(state, metadata={"format": "pt"}))
    folder.write_json(hf.CONFIG_FILE, {**config, **config_updates}, sort_keys=True)
    folder.write_json(hf.TOKENIZER_CONFIG_FILE, {"do_lower_case": not encoder.cased}, sort_keys=True)


MIN_SEQ_LENGTH = 8
MAX_LR = 1.0  # fine-tuning uses 1e-5 .. 1e-3; AdamW diverges long before 1
MAX_EPOCHS = 1000
MAX_COUNT = 2**31 - 1  # the largest batch size, sequence length or example count a flag takes


@dataclass(frozen=True)
class FitConfig:
    """The settings of one fine-tuning run; :meth:`problems` lists what is wrong, all at once.

    ``precision``: ``auto`` is bf16 on a GPU that supports it, else fp16 (with a gradient scaler)
    on GPU, and fp32 on CPU. ``device``: ``auto`` is ``cuda`` when available. ``cased``: None takes
    the casing the checkpoint records. ``max_*_examples``: the first N rows (quick runs).
    """

    epochs: float = 3.0
    lr: float = 2e-5
    batch_size: int = 32
    seed: int = 42
    warmup_proportion: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    eval_batch_size: int = 64
    precision: str = "auto"
    device: str = "auto"
    max_seq_length: int = 128
    max_train_examples: int | None = None
    max_eval_examples: int | None = None
    cased: bool | None = None
    progress: bool | None = None  # None: a bar on a terminal, else a line every 30 s; False: none
    eval_flag: ClassVar[str] = "--max-eval-examples"

    def problems(self) -> list[str]:
        """Every problem with the settings (one line each, naming the flag); empty when valid."""
        found: list[str] = []
        for flag, value, top in (("--epochs", self.epochs, MAX_EPOCHS), ("--lr", self.lr, MAX_LR)):
            if math.isfinite(value) and value > top:
                found.append(f"{flag} must be at most {top:g}, got {value:g}")
            else:
                positive_finite(flag, value, found)
        for flag, value, low in (
            ("--batch-size", self.batch_size, 1),
            ("the evaluation batch size", self.eval_batch_size, 1),
            ("--max-seq-length", self.max_seq_length, MIN_SEQ_LENGTH),
            ("--max-train-examples", self.max_train_examples, 1),
            (self.eval_flag, self.max_eval_examples, 1),
        ):
            if value is not None and not low <= value <= MAX_COUNT:
                found.append(f"{flag} must be between {low} and {MAX_COUNT:,}, got {value}")
        seed_in_range("--seed", self.seed, found)
        if not 0 <= self.warmup_proportion < 1:
            found.append(f"--warmup-proportion must be in [0, 1), got {self.warmup_proportion}")
        if not 0 <= self.weight_decay <= 1:
            found.append(f"--weight-decay must be in [0, 1], got {self.weight_decay}")
        non_negative_finite("max_grad_norm", self.max_grad_norm, found)
        if self.precision not in PRECISIONS:
            found.append(f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.device != "auto":
            try:
                torch.device(self.device)
            except RuntimeError:
                found.append(f"--device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        return found

    def checked(self) -> FitConfig:
        """The config itself, or :class:`UsageError` listing its :meth:`problems` (exit 2)."""
        problems = self.problems()
        if problems:
            raise UsageError("; ".join(problems))
        return self

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict."""
        return asdict(self)


def epoch_order(num_features: int, seed: int, epoch: int) -> list[int]:
    """The shuffled order of epoch ``epoch``: a function of (seed, epoch) only."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_features, generator=generator).tolist()


@dataclass
class TrainResult:
    """What :func:`fit` reports: steps taken, the loss per epoch, throughput."""

    steps: int
    epoch_losses: list[float]
    train_s: float
    examples_per_s: float
    precision: str
    device: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def diverged(step: int, what: str, config: FitConfig, precision: str) -> Diverged:
    """The error that stops a run whose loss or gradients stopped being finite (exit 1)."""
    advice = f"lower --lr (it is {config.lr:g})"
    if precision == "fp16":
        advice += " or use --precision bf16 or fp32"
    return Diverged(f"fine-tuning diverged at step {step + 1}: {what}; {advice}; no model was saved")


@dataclass
class _Update:
    """One optimizer update from a loss: backward, clipping at ``max_grad_norm`` (0: none), the step
    and the schedule. A loss or (outside fp16, whose scaler skips overflows) a gradient norm that
    is not finite stops the run (:func:`diverged`), as does an fp16 scale driven below 1."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    config: FitConfig
    precision: str

    @classmethod
    def for_run(
        cls, model: nn.Module, config: FitConfig, max_steps: int, device: torch.device, precision: str
    ) -> _Update:
        """AdamW without decay on biases and LayerNorm, linear warm-up then decay to zero."""
        optimizer = torch.optim.AdamW(
            parameter_groups(model, config.weight_decay), lr=config.lr, betas=(0.9, 0.999), eps=1e-6
        )
        warmup_steps = int(max_steps * config.warmup_proportion)
        return cls(
            optimizer,
            build_scheduler(optimizer, config.lr, warmup_steps, max_steps),
            torch.amp.GradScaler(device.type, enabled=precision == "fp16"),
            config,
            precision,
        )

    def __call__(self, model: nn.Module, loss: torch.Tensor, step: int) -> None:
        if not torch.isfinite(loss):
            raise diverged(step, f"the training loss is {float(loss.detach())}", self.config, self.precision)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.config.max_grad_norm or math.inf)
        if not self.scaler.is_enabled() and not torch.isfinite(norm):
            raise diverged(step, f"the gradient norm is {float(norm)}", self.config, self.precision)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scaler.is_enabled() and self.scaler.get_scale() < 1:
            raise diverged(step, "the fp16 gradients overflow at every step", self.config, self.precision)
        self.scheduler.step()


def fit(
    model: nn.Module,
    features: Sequence[dict[str, Any]],
    config: FitConfig,
    *,
    collate_fn: Callable[[Sequence[dict[str, Any]]], dict[str, torch.Tensor]] = collate,
) -> TrainResult:
    """Fine-tune all of ``model`` on ``features`` for ``config.epochs`` epochs, AMP on GPU, the order from
    :func:`epoch_order` and dropout from ``config.seed`` (the caller's global RNG is left alone)."""
    check_examples(features, "the training data")
    device = resolve_device(config.device)
    precision = resolve_precision(config.precision, device)
    model.to(device)
    steps_per_epoch = math.ceil(len(features) / config.batch_size)
    max_steps = max(1, math.ceil(steps_per_epoch * config.epochs))
    update = _Update.for_run(model, config, max_steps, device, precision)
    devices = [device.index or 0] if device.type == "cuda" else []
    result = TrainResult(0, [], 0.0, 0.0, precision, str(device))
    start, seen = time.perf_counter(), 0
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(config.seed)
        bar = Progress(max_steps, desc="fine-tune", enabled=config.progress)
        epoch = 0
        while result.steps < max_steps:
            model.train()
            order = epoch_order(len(features), config.seed, epoch)
            total, count = 0.0, 0
            for first in range(0, len(order), config.batch_size)[: max_steps - result.steps]:
                batch = collate_fn([features[i] for i in order[first : first + config.batch_size]])
                batch = _to_device(batch, device)
                with autocast(device, precision):
                    loss = model(**batch).loss
                update(model, loss, result.steps)
                result.steps += 1
                seen += len(batch["input_ids"])
                total, count = total + float(loss.detach()), count + 1
                bar.update(1)
                bar.set_postfix(loss=f"{total / count:.4f}", epoch=epoch + 1)
            result.epoch_losses.append(total / max(count, 1))
            logger.info("epoch %d: mean loss %.4f over %d steps", epoch + 1, result.epoch_losses[-1], count)
            epoch += 1
        bar.close()
    result.train_s = time.perf_counter() - start
    result.examples_per_s = seen / result.train_s if result.train_s > 0 else 0.0
    return result


@torch.no_grad()
def predict(
    model: nn.Module,
    features: Sequence[dict[str, Any]],
    config: FitConfig,
    *,
    collate_fn: Callable[[Sequence[dict[str, Any]]], dict[str, torch.Tensor]] = collate,
    inputs: Sequence[str] = MODEL_INPUTS,
) -> list[Any]:
    """Run ``model`` in eval mode over ``features`` in length-sorted batches of
    ``config.eval_batch_size``; return one output per feature, in order: its row of
    ``TaskOutput.logits`` as a float32 CPU tensor (a tuple of rows for tuple logits), still padded
    to its batch's longest sequence. Only ``inputs`` reach the model."""
    device = resolve_device(config.device)
    precision = resolve_precision(config.precision, device)
    model.to(device)
    model.eval()
    order = sorted(range(len(features)), key=lambda i: _sequence_length(features[i]))
    outputs: list[Any] = [None] * len(features)
    batches = range(0, len(order), config.eval_batch_size)
    bar = Progress(len(batches), desc="predict", unit="batch", enabled=config.progress)
    for first in batches:
        chosen = order[first : first + config.eval_batch_size]
        batch = collate_fn([features[i] for i in chosen])
        with autocast(device, precision):
            logits = model(**_to_device({k: v for k, v in batch.items() if k in inputs}, device)).logits
        if isinstance(logits, tuple):
            rows = list(zip(*(t.float().cpu() for t in logits), strict=True))
        else:
            rows = list(logits.float().cpu())
        for index, row in zip(chosen, rows, strict=True):
            outputs[index] = row
        bar.update(1)
    bar.close()
    return outputs


def _sequence_length(feature: dict[str, Any]) -> int:
    ids = feature["input_ids"]
    return max(len(c) for c in ids) if ids and isinstance(ids[0], (list, tuple)) else len(ids)


def predict_classes(model: nn.Module, features: Sequence[dict[str, Any]], config: FitConfig) -> torch.Tensor:
    """:func:`predict`'s rows stacked (fixed-size logits: classification, choices, regression)."""
    outputs = predict(model, features, config)
    return torch.stack(outputs) if outputs else torch.empty(0)
