"""What every fine-tuning task shares: loading a pre-trained encoder, tokenising, batching, the
training loop and prediction.

- :func:`load_encoder` takes ``--checkpoint``: a ``pretrain`` run folder (its newest complete
  checkpoint), one checkpoint folder ``RUN/checkpoints/step-N``, or any HF-format BERT folder
  (``config.json`` + weights + ``vocab.txt``). It returns an :class:`Encoder`: the ``BertModel``,
  our :class:`~wordpiece.tokenizer.WordPieceTokenizer` (whose ``.tokenizer`` is a
  ``tokenizers.Tokenizer`` with character offsets) and the casing.
- :func:`encode_pair` turns one or two texts into ``[CLS] A [SEP] B [SEP]`` ids, truncating the
  longer side first as the reference ``_truncate_seq_pair`` does.
- A *feature* is a ``dict``: ``input_ids`` and ``token_type_ids`` (``list[int]``, or one list per
  choice for multiple choice) and scalar targets such as ``labels``. :func:`collate` pads to the
  longest sequence in the batch and adds ``attention_mask``; every key of the batch becomes a
  keyword argument of the task model's ``forward``, which returns a :class:`TaskOutput`.
- :class:`SequenceClassifier` (classification, or regression when ``num_labels == 1``) and
  :class:`MultipleChoice` are the heads of the paper's Figure 4 (a), (b).
- :func:`fit` trains with AdamW (no decay on biases and LayerNorm), linear warm-up and decay,
  gradient clipping, AMP on GPU, and data order and dropout seeded from ``TrainConfig.seed``;
  :func:`predict` runs a model over features in length-sorted batches and returns outputs in the
  features' order.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import fsspec
import safetensors.torch
import torch
import torch.nn.functional as F
from torch import nn

from pretrain import checkpoint as ckpt
from pretrain import hf, runtime
from pretrain.model import BertForPreTraining, BertModel
from pretrain.optim import build_scheduler, parameter_groups
from pretrain.progress import Progress
from pretrain.runtime import autocast, resolve_device, resolve_precision
from schemas.commands import InputError
from schemas.files import write_file
from wordpiece.tokenizer import WordPieceTokenizer

logger = logging.getLogger(__name__)

PRECISIONS = ("auto", *runtime.PRECISIONS)
SEQUENCE_KEYS = ("input_ids", "token_type_ids")
_STEP_DIR = re.compile(r"/checkpoints/step-\d+$")  # a checkpoint folder of a pretrain run
MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")  # what predict passes to a model


class FinetuneError(ValueError):
    """A problem with the user's input (checkpoint, data file, settings); the message names it."""


class SettingsError(FinetuneError):
    """Settings refused before anything is read: the command line is wrong (the CLIs exit 2)."""


# --- the pre-trained encoder -----------------------------------------------------------------------


@dataclass
class Encoder:
    """A pre-trained BERT encoder and the tokenizer it was trained with."""

    model: BertModel
    tokenizer: WordPieceTokenizer
    cased: bool
    source: str  # the folder the weights came from (a run folder resolves to its checkpoint)

    @property
    def max_positions(self) -> int:
        """The longest sequence the encoder accepts (``max_position_embeddings``)."""
        return self.model.config.max_position_embeddings


def _is_pretrain_output(url: str) -> bool:
    fs, path = fsspec.core.url_to_fs(url)
    path = path.rstrip("/")
    return _STEP_DIR.search(path) is not None or fs.exists(f"{path}/checkpoints")


def _read_text(url: str) -> str | None:
    try:
        with fsspec.open(url, "r", encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _recorded_casing(folder: str) -> bool | None:
    """The casing a checkpoint records: ``trainer.json``'s ``cased`` (ours; JSON, never trainer
    state), else ``tokenizer_config.json``'s ``do_lower_case`` (HF folders), else None."""
    text = _read_text(f"{folder}/{ckpt.TRAINER_STATE}.json")
    if text is not None:
        try:
            state = json.loads(text)
        except ValueError:
            raise FinetuneError(
                f"{folder}/{ckpt.TRAINER_STATE}.json: not valid JSON; the checkpoint is damaged"
            ) from None
        if isinstance(state, dict) and "cased" in state:
            return bool(state["cased"])
    fs, root = fsspec.core.url_to_fs(folder)
    path = f"{root.rstrip('/')}/{hf.TOKENIZER_CONFIG_FILE}"
    if fs.exists(path):
        try:
            config = hf.read_json_object(fs, path, f"{folder}/{hf.TOKENIZER_CONFIG_FILE}")
        except ValueError as err:
            raise FinetuneError(str(err)) from None
        if "do_lower_case" in config:
            return not bool(config["do_lower_case"])
    return None


def load_encoder(checkpoint: str, *, cased: bool | None = None, seed: int = 0) -> Encoder:
    """Load ``--checkpoint``: a ``pretrain`` run folder (newest complete checkpoint), a checkpoint
    folder ``RUN/checkpoints/step-N``, or an HF-format BERT folder; local or an fsspec URL.

    The folder must hold ``config.json``, ``model.safetensors`` (or ``pytorch_model.bin``) and
    ``vocab.txt``. ``cased=None`` takes the casing the checkpoint records (``trainer.json`` or
    ``tokenizer_config.json``'s ``do_lower_case``), else infers it from the vocabulary. A missing
    pooler (encoder-only checkpoints) is initialised from ``seed``. Raises :class:`FinetuneError`
    when the folder is incomplete or its ``vocab.txt`` does not match ``config.vocab_size``.
    """
    url = checkpoint.rstrip("/")
    if _is_pretrain_output(url):
        try:
            url = ckpt.resolve(url).url
        except InputError as err:
            raise FinetuneError(str(err)) from None
    try:
        hf.check_vocab_rows(url)
        model = BertForPreTraining.from_pretrained(url, seed=seed)
    except ValueError as err:
        raise FinetuneError(f"--checkpoint {checkpoint}: {err}") from None
    vocab_url = f"{url}/{hf.VOCAB_FILE}"
    if _read_text(vocab_url) is None:
        raise FinetuneError(
            f"{vocab_url} not found: --checkpoint needs the vocabulary the model was trained with "
            "(a pretrain checkpoint or an HF BERT folder with vocab.txt)"
        )
    if cased is None:
        cased = _recorded_casing(url)
    tokenizer = WordPieceTokenizer.load(vocab_url, cased=cased)
    config = model.config
    if tokenizer.vocab_size != config.vocab_size:
        raise FinetuneError(
            f"{vocab_url} has {tokenizer.vocab_size} tokens but {url}/config.json says vocab_size "
            f"{config.vocab_size}: the vocabulary is not the one this model was trained with"
        )
    return Encoder(model.bert, tokenizer, tokenizer.cased, url)


CASING_SAMPLE = 200
"""Texts of the training data :func:`check_casing` tokenises (the first ones)."""
UNK_WARN_SHARE = 0.01
"""Above this share of ``[UNK]`` tokens, and at least twice the share of the other casing,
:func:`check_casing` warns that the casing does not fit the vocabulary."""


def unknown_share(tokenizer: WordPieceTokenizer, texts: Sequence[str]) -> float:
    """The share of ``[UNK]`` among the tokens of ``texts`` (0 without tokens)."""
    unk = tokenizer.token_to_id("[UNK]")
    ids = [i for row in tokenizer.encode_batch(list(texts)) for i in row]
    return sum(i == unk for i in ids) / len(ids) if ids else 0.0


def check_casing(encoder: Encoder, texts: Sequence[str]) -> float:
    """Tokenise the first :data:`CASING_SAMPLE` of ``texts`` with the encoder's casing and with the
    other one; warn (with both figures) when the chosen casing gives more than
    :data:`UNK_WARN_SHARE` ``[UNK]`` and at least twice the other's (``--cased`` on an uncased
    vocabulary, or the reverse). Returns the measured share."""
    sample = [t for t in texts[:CASING_SAMPLE] if t]
    tokenizer = encoder.tokenizer
    share = unknown_share(tokenizer, sample)
    if share > UNK_WARN_SHARE:
        other = WordPieceTokenizer(tokenizer.vocab, not tokenizer.cased, source="the other casing")
        other_share = unknown_share(other, sample)
        if share >= 2 * other_share:
            chosen, flip = ("--cased", "--uncased") if tokenizer.cased else ("--uncased", "--cased")
            logger.warning(
                "%s: %.1f%% of the tokens of %d training texts are [UNK] with the vocabulary of %s, "
                "%.1f%% with %s: the casing does not fit the vocabulary; check --cased/--uncased",
                chosen,
                100 * share,
                len(sample),
                encoder.source,
                100 * other_share,
                flip,
            )
    return share


# --- tokenisation ----------------------------------------------------------------------------------


def truncate_pair(a: list[int], b: list[int], max_tokens: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer of ``a`` and ``b`` (``b`` on ties) until both fit in
    ``max_tokens``, as the reference ``_truncate_seq_pair``; returns new lists."""
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


def check_max_seq_length(max_seq_length: int, encoder: Encoder) -> None:
    """Refuse a ``--max-seq-length`` the encoder cannot take."""
    if not 8 <= max_seq_length <= encoder.max_positions:
        raise FinetuneError(
            f"--max-seq-length {max_seq_length} must be between 8 and the model's "
            f"max_position_embeddings ({encoder.max_positions})"
        )


# --- batching --------------------------------------------------------------------------------------


def _pad(rows: Sequence[Sequence[int]], length: int, value: int) -> list[list[int]]:
    return [list(row) + [value] * (length - len(row)) for row in rows]


def collate(
    features: Sequence[dict[str, Any]], pad_id: int = 0, *, token_pads: Mapping[str, int] | None = None
) -> dict[str, torch.Tensor]:
    """Stack features into tensors, padding ``input_ids``/``token_type_ids`` only to the longest
    sequence in this batch and adding ``attention_mask`` (1 real, 0 padding).

    Sequences are ``list[int]`` (-> ``[batch, length]``) or one list per choice (-> ``[batch,
    choices, length]``). ``token_pads`` names further per-token keys and the value each is padded
    with (NER's ``{"labels": IGNORE}``). Other keys are scalars: floats give a float tensor, ints a
    long tensor.
    """
    if not features:
        raise ValueError("collate needs at least one feature")
    first = features[0]
    nested = isinstance(first["input_ids"][0], (list, tuple))
    rows = (
        [choice for f in features for choice in f["input_ids"]]
        if nested
        else [f["input_ids"] for f in features]
    )
    length = max(len(row) for row in rows)
    pads = {key: pad_id if key == "input_ids" else 0 for key in SEQUENCE_KEYS} | dict(token_pads or {})
    batch: dict[str, torch.Tensor] = {}
    for key, value in pads.items():
        if key not in first:
            continue
        seqs = [choice for f in features for choice in f[key]] if nested else [f[key] for f in features]
        batch[key] = torch.tensor(_pad(seqs, length, value))
    batch["attention_mask"] = torch.tensor(_pad([[1] * len(row) for row in rows], length, 0))
    if nested:
        num_choices = len(first["input_ids"])
        batch = {k: v.view(len(features), num_choices, length) for k, v in batch.items()}
    for key in first:
        if key in pads:
            continue
        values = [f[key] for f in features]
        dtype = torch.float32 if any(isinstance(v, float) for v in values) else torch.long
        batch[key] = torch.tensor(values, dtype=dtype)
    return batch


def _sequence_length(feature: dict[str, Any]) -> int:
    ids = feature["input_ids"]
    return max(len(c) for c in ids) if ids and isinstance(ids[0], (list, tuple)) else len(ids)


# --- task heads ------------------------------------------------------------------------------------


class TaskOutput(NamedTuple):
    """What a task model returns: ``logits`` (a tensor, or a tuple of tensors such as SQuAD's start
    and end logits) and ``loss`` (None without targets)."""

    logits: torch.Tensor | tuple[torch.Tensor, ...]
    loss: torch.Tensor | None = None


def _seeded_linear(in_features: int, out_features: int, std: float, seed: int) -> nn.Linear:
    """A linear layer initialised as BERT's (N(0, std) weights, zero bias) from ``seed`` alone; the
    global RNG, which ``nn.Linear``'s own initialisation draws from, is left as it was."""
    with torch.random.fork_rng(devices=[]):
        layer = nn.Linear(in_features, out_features)
    with torch.no_grad():
        layer.weight.normal_(0.0, std, generator=torch.Generator().manual_seed(seed))
        layer.bias.zero_()
    return layer


class SequenceClassifier(nn.Module):
    """Dropout and a linear layer on the pooled ``[CLS]``; cross-entropy over ``num_labels``, or
    mean squared error when ``num_labels == 1`` (regression, STS-B).

    ``bilstm`` (a :class:`finetune.heads.BiLSTM`, randomly initialised: the paper's "+ BiLSTM" of
    Table 5): the classifier reads the BiLSTM's :meth:`~finetune.heads.BiLSTM.summary` of the
    encoder's final hidden states instead of the pooled ``[CLS]`` (so it is ``Linear(2 * units,
    num_labels)``); the pooler is then unused.
    """

    def __init__(
        self, encoder: BertModel, num_labels: int, *, seed: int = 0, bilstm: nn.Module | None = None
    ) -> None:
        super().__init__()
        config = encoder.config
        self.bert = encoder
        self.num_labels = num_labels
        self.bilstm = bilstm
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        in_features = config.hidden_size if bilstm is None else 2 * bilstm.units
        self.classifier = _seeded_linear(in_features, num_labels, config.initializer_range, seed)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> TaskOutput:
        """Logits ``[batch, num_labels]`` (``[batch]`` for regression) and the loss when ``labels``."""
        sequence_output, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        if self.bilstm is not None:
            pooled = self.bilstm.summary(sequence_output, attention_mask)
        logits = self.classifier(self.dropout(pooled)).float()
        if self.num_labels == 1:
            logits = logits.squeeze(-1)
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.mse_loss(logits, labels.float())
            else:
                loss = F.cross_entropy(logits, labels)
        return TaskOutput(logits, loss)


class MultipleChoice(nn.Module):
    """A score per choice from dropout and a linear layer on each choice's pooled ``[CLS]``;
    softmax (cross-entropy) over the choices."""

    def __init__(self, encoder: BertModel, *, seed: int = 0) -> None:
        super().__init__()
        config = encoder.config
        self.bert = encoder
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = _seeded_linear(config.hidden_size, 1, config.initializer_range, seed)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> TaskOutput:
        """``input_ids`` is ``[batch, choices, length]``; logits are ``[batch, choices]``."""
        batch, choices, length = input_ids.shape

        def flat(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.reshape(batch * choices, length)

        _, pooled = self.bert(flat(input_ids), flat(token_type_ids), flat(attention_mask))
        logits = self.classifier(self.dropout(pooled)).float().view(batch, choices)
        loss = None if labels is None else F.cross_entropy(logits, labels)
        return TaskOutput(logits, loss)


def save_model(model: nn.Module, encoder: Encoder, folder: str, **config_updates: Any) -> None:
    """Write a fine-tuned ``model`` (an encoder under ``bert`` and a task head) into ``folder`` (a
    path or fsspec URL) as a BERT folder any ``--checkpoint`` accepts: ``config.json`` (the
    encoder's, updated with ``config_updates``, e.g. ``architectures``), ``model.safetensors``
    (every tensor of ``model.state_dict()``, the word embeddings cut to ``vocab_size`` rows),
    ``vocab.txt`` and ``tokenizer_config.json`` (the casing)."""
    config, _ = hf.read_config(encoder.source)
    vocab_size = model.bert.config.vocab_size
    state = {}
    for name, tensor in model.state_dict().items():
        if name == "bert.embeddings.word_embeddings.weight":
            tensor = tensor[:vocab_size]
        state[name] = tensor.detach().to("cpu", copy=True).contiguous()
    folder = folder.rstrip("/")
    fs, root = fsspec.core.url_to_fs(folder)
    fs.makedirs(root, exist_ok=True)
    with fsspec.open(f"{encoder.source.rstrip('/')}/{hf.VOCAB_FILE}", "rb") as f:
        vocab = f.read()
    write_file(f"{root}/{hf.VOCAB_FILE}", vocab, fs)
    write_file(f"{root}/{hf.SAFETENSORS_FILE}", safetensors.torch.save(state, metadata={"format": "pt"}), fs)
    runtime.write_json(f"{folder}/{hf.CONFIG_FILE}", {**config, **config_updates})
    runtime.write_json(f"{folder}/{hf.TOKENIZER_CONFIG_FILE}", {"do_lower_case": not encoder.cased})


# --- training --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """The settings of one fine-tuning run; validated on creation (every problem at once).

    ``precision``: ``auto`` is bf16 on a GPU that supports it, else fp16 (with a gradient scaler)
    on GPU, and fp32 on CPU. ``device``: ``auto`` is ``cuda`` when available.
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
    progress: bool | None = None  # None: a bar on a terminal, else a line every 30 s; False: none

    def __post_init__(self) -> None:
        problems = []
        runtime.positive_finite("--epochs", self.epochs, problems)
        runtime.positive_finite("--lr", self.lr, problems)
        if self.batch_size < 1:
            problems.append(f"--batch-size must be at least 1, got {self.batch_size}")
        runtime.seed_in_range("--seed", self.seed, problems)
        if self.eval_batch_size < 1:
            problems.append(f"the evaluation batch size must be at least 1, got {self.eval_batch_size}")
        if not 0 <= self.warmup_proportion < 1:
            problems.append(f"--warmup-proportion must be in [0, 1), got {self.warmup_proportion}")
        runtime.non_negative_finite("--weight-decay", self.weight_decay, problems)
        runtime.non_negative_finite("max_grad_norm", self.max_grad_norm, problems)
        if self.precision not in PRECISIONS:
            problems.append(f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if problems:
            raise SettingsError("; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict."""
        return asdict(self)


def epoch_order(num_features: int, seed: int, epoch: int) -> list[int]:
    """The shuffled order of epoch ``epoch``: a function of (seed, epoch) only."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_features, generator=generator).tolist()


@dataclass
class TrainResult:
    """What :func:`fit` reports: steps taken, the loss per epoch, throughput and per-epoch
    evaluations (when an ``eval_fn`` was given)."""

    steps: int
    epoch_losses: list[float]
    train_s: float
    examples_per_s: float
    precision: str
    device: str
    evaluations: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


@dataclass
class _Update:
    """One optimizer update from a loss: backward (scaled for fp16), clipping at
    ``max_grad_norm`` (none when 0), the step, the scaler's and the schedule's update. A loss that
    is not finite raises :class:`FinetuneError` instead."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    max_grad_norm: float

    @classmethod
    def for_run(
        cls, model: nn.Module, config: TrainConfig, max_steps: int, device: torch.device, precision: str
    ) -> _Update:
        """AdamW without decay on biases and LayerNorm, linear warm-up then decay to zero over
        ``max_steps``, a grad scaler enabled for fp16."""
        optimizer = torch.optim.AdamW(
            parameter_groups(model, config.weight_decay), lr=config.lr, betas=(0.9, 0.999), eps=1e-6
        )
        warmup_steps = int(max_steps * config.warmup_proportion)
        return cls(
            optimizer,
            build_scheduler(optimizer, config.lr, warmup_steps, max_steps),
            torch.amp.GradScaler(device.type, enabled=precision == "fp16"),
            config.max_grad_norm,
        )

    def __call__(self, model: nn.Module, loss: torch.Tensor | None, step: int) -> None:
        if loss is None or not torch.isfinite(loss):
            raise FinetuneError(
                f"the training loss is {loss} at step {step}: lower --lr, or use --precision bf16/fp32"
            )
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.max_grad_norm > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()


def fit(
    model: nn.Module,
    features: Sequence[dict[str, Any]],
    config: TrainConfig,
    *,
    collate_fn: Callable[[Sequence[dict[str, Any]]], dict[str, torch.Tensor]] = collate,
    eval_fn: Callable[[nn.Module], dict[str, Any]] | None = None,
) -> TrainResult:
    """Fine-tune ``model`` (all of it) on ``features`` for ``config.epochs`` epochs.

    AdamW over :func:`pretrain.optim.parameter_groups` (no decay on biases and LayerNorm), a
    linear warm-up over ``warmup_proportion`` of the steps then linear decay to zero, gradient
    clipping at ``max_grad_norm``, AMP on GPU (a ``GradScaler`` for fp16). The order of each epoch
    comes from :func:`epoch_order` and dropout from ``config.seed`` (under ``fork_rng``, so the
    caller's global RNG is left alone). A fractional ``epochs`` trains on that share of the last
    epoch. ``eval_fn(model)`` runs after each epoch when given; its dicts land in the result.
    ``model(**batch)`` must return a :class:`TaskOutput` with a loss. Raises :class:`FinetuneError`
    when the loss stops being finite.
    """
    if not features:
        raise FinetuneError("no training examples")
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
            if eval_fn is not None:
                result.evaluations.append({"epoch": epoch + 1, **eval_fn(model)})
            epoch += 1
        bar.close()
    result.train_s = time.perf_counter() - start
    result.examples_per_s = seen / result.train_s if result.train_s > 0 else 0.0
    return result


@torch.no_grad()
def predict(
    model: nn.Module,
    features: Sequence[dict[str, Any]],
    *,
    batch_size: int = 64,
    device: str = "auto",
    precision: str = "auto",
    collate_fn: Callable[[Sequence[dict[str, Any]]], dict[str, torch.Tensor]] = collate,
    progress: bool | None = None,
    inputs: Sequence[str] = MODEL_INPUTS,
) -> list[Any]:
    """Run ``model`` in eval mode over ``features``; return one output per feature, in order.

    Each output is that feature's row of ``TaskOutput.logits`` as a float32 CPU tensor (a tuple of
    rows when the logits are a tuple), still padded to its batch's longest sequence where the logits
    have a length dimension. Features are batched by length (less padding); only
    ``inputs`` (default :data:`MODEL_INPUTS`) reach the model (targets and bookkeeping keys stay out). Use :func:`stack` for fixed-size logits.
    """
    target = resolve_device(device)
    amp = resolve_precision(precision, target)
    model.to(target)
    model.eval()
    order = sorted(range(len(features)), key=lambda i: _sequence_length(features[i]))
    outputs: list[Any] = [None] * len(features)
    batches = range(0, len(order), batch_size)
    bar = Progress(len(batches), desc="predict", unit="batch", enabled=progress)
    for first in batches:
        chosen = order[first : first + batch_size]
        batch = collate_fn([features[i] for i in chosen])
        batch = {k: v for k, v in batch.items() if k in inputs}
        with autocast(target, amp):
            logits = model(**_to_device(batch, target)).logits
        if isinstance(logits, tuple):
            rows = list(zip(*(t.float().cpu() for t in logits), strict=True))
        else:
            rows = list(logits.float().cpu())
        for index, row in zip(chosen, rows, strict=True):
            outputs[index] = row
        bar.update(1)
    bar.close()
    return outputs


def stack(outputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """:func:`predict`'s per-feature rows as one tensor (fixed-size logits such as classification)."""
    return torch.stack(list(outputs)) if outputs else torch.empty(0)
