"""The task heads: the paper's Figure 4 classifier (:class:`Classifier`: GLUE, SWAG, NER fine-tuning),
and heads with a BiLSTM: the paper's feature-based NER (Table 7; docs/finetune.md) and "+ BiLSTM"
for SQuAD and GLUE (Table 5). Weights start from ``seed`` alone (under ``fork_rng``): the caller's
global RNG is left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from finetune.hidden import COMBINE, feature_layers, hidden_states, stack_layers
from finetune.sequences import pad_batch
from pretrain.model import BertModel
from pretrain.runtime import autocast

IGNORE = -100  # the label of tokens that are not scored: sub-tokens after a word's first, context, specials


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


def _seeded(seed: int, build: Any) -> Any:
    """``build()`` with the global RNG seeded from ``seed``, restored afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def _lengths(x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Each sequence's real tokens (at least 1): all of ``x``'s length without a mask."""
    if attention_mask is None:
        return torch.full((x.shape[0],), x.shape[1], dtype=torch.long)
    return attention_mask.sum(-1).clamp(min=1)


class BiLSTM(nn.Module):
    """``num_layers`` bidirectional LSTM layers (``units`` per direction) over each sequence's real
    tokens only, ``[batch, length, in_features]`` → ``[batch, length, 2 * units]``, zeros at padding."""

    def __init__(
        self, in_features: int, units: int, *, num_layers: int = 2, dropout: float = 0.1, seed: int = 0
    ):
        super().__init__()
        self.units = units
        dropout = dropout if num_layers > 1 else 0.0
        options = {"num_layers": num_layers, "bidirectional": True, "batch_first": True, "dropout": dropout}
        self.lstm = _seeded(seed, lambda: nn.LSTM(in_features, units, **options))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Run over each sequence's real tokens only (``attention_mask`` 1; all when None)."""
        length = x.shape[1]
        lengths = _lengths(x, attention_mask).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=length)
        return out

    def summary(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """One vector per sequence: the forward direction's output at the last real token and the backward's
        at the first."""
        out = self(x, attention_mask)
        last = _lengths(x, attention_mask).to(out.device) - 1
        forward = out[torch.arange(len(x), device=out.device), last, : self.units]
        return torch.cat([forward, out[:, 0, self.units :]], dim=-1)


class ScalarMix(nn.Module):
    """``gamma * sum_k softmax(w)_k * layer_k`` over ``[..., k, hidden]``; starts as the mean."""

    def __init__(self, num_layers: int) -> None:
        super().__init__()
        self.scalars = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: torch.Tensor) -> torch.Tensor:
        """``layers`` ``[..., k, hidden]`` -> ``[..., hidden]``."""
        weights = torch.softmax(self.scalars, dim=0).to(layers.dtype)
        return self.gamma * torch.einsum("...kh,k->...h", layers, weights)


def sentence_rows(
    layers: torch.Tensor, start: torch.Tensor, end: torch.Tensor, labels: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Cut each row's sentence ``[start, end)`` out of window activations ``[batch, length, k,
    hidden]``: returns them left-aligned ``[batch, longest sentence, k, hidden]`` (zeros after each
    sentence), the matching attention mask, and the labels cut the same way (:data:`IGNORE` after)."""
    lengths = (end - start).clamp(min=0)
    width = max(int(lengths.max()), 1) if len(lengths) else 1
    steps = torch.arange(width, device=layers.device)
    mask = steps[None] < lengths[:, None].to(layers.device)
    index = (start[:, None].to(layers.device) + steps[None]).clamp(max=layers.size(1) - 1)
    rows = torch.arange(layers.size(0), device=layers.device)[:, None]
    cut = layers[rows, index] * mask[:, :, None, None].to(layers.dtype)
    if labels is not None:
        labels = torch.where(mask, labels[rows, index], torch.full_like(index, IGNORE))
    return cut, mask.long(), labels


class FeatureTagger(nn.Module):
    """Frozen encoder -> Table 7's layer choice -> two-layer BiLSTM -> dropout -> linear, per token;
    cross-entropy over the labelled tokens (labels :data:`IGNORE` elsewhere)."""

    def __init__(
        self,
        encoder: BertModel,
        num_labels: int,
        features: str,
        *,
        lstm_units: int | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        config = encoder.config
        self.bert = encoder.requires_grad_(False).eval()
        self.features = features
        self.layers = feature_layers(features, config.num_hidden_layers)
        self.combine = COMBINE[features]
        in_features = config.hidden_size * (len(self.layers) if self.combine == "concat" else 1)
        self.lstm_units = lstm_units or config.hidden_size
        self.mix = ScalarMix(len(self.layers)) if self.combine == "sum" else None
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.bilstm = BiLSTM(in_features, self.lstm_units, dropout=config.hidden_dropout_prob, seed=seed)
        self.classifier = seeded_linear(2 * self.lstm_units, num_labels, config.initializer_range, seed + 1)

    def train(self, mode: bool = True) -> FeatureTagger:
        """Train the head; the frozen encoder stays in eval mode (no dropout)."""
        super().train(mode)
        self.bert.eval()
        return self

    def encoder_layers(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        which: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """The chosen (or ``which``) layers of the frozen encoder, ``[batch, length, layers, hidden]``."""
        with torch.no_grad():
            states = hidden_states(self.bert, input_ids, token_type_ids, attention_mask)
            return stack_layers(states, self.layers if which is None else which)

    def head_inputs(self, layers: torch.Tensor) -> torch.Tensor:
        """The BiLSTM's input from the chosen layers: one layer, their weighted sum, or their concatenation."""
        if self.combine == "single":
            return layers[:, :, 0]
        if self.combine == "sum":
            return self.mix(layers)
        return layers.flatten(2)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        layers: torch.Tensor | None = None,
        sentence_start: torch.Tensor | None = None,
        sentence_end: torch.Tensor | None = None,
    ) -> TaskOutput:
        """Logits ``[batch, length, num_labels]`` and the loss when ``labels``. ``layers``: the
        chosen layers precomputed (:func:`cache_layers`), instead of running the encoder. With
        ``sentence_start``/``sentence_end`` the head runs over each row's sentence only and the
        logits are ``[batch, longest sentence, num_labels]``, position 0 = the sentence's first token."""
        if layers is None:
            layers = self.encoder_layers(input_ids, token_type_ids, attention_mask)
        if sentence_start is not None and sentence_end is not None:
            layers, attention_mask, labels = sentence_rows(layers, sentence_start, sentence_end, labels)
        x = self.dropout(self.head_inputs(layers.to(self.classifier.weight.dtype)))
        logits = self.classifier(self.dropout(self.bilstm(x, attention_mask))).float()
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, -2), labels.flatten())
        return TaskOutput(logits, loss)


@torch.no_grad()
def cache_layers(
    model: FeatureTagger,
    features: Sequence[dict[str, Any]],
    collate_fn: Any,
    *,
    batch_size: int,
    device: torch.device,
    precision: str,
    which: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """Each feature with its encoder layers (the model's chosen ones, or ``which``) added under
    ``layers`` (CPU float32 ``[length, len(layers), hidden]``): the frozen encoder runs once over
    the training set instead of once per epoch. A feature with a sentence span keeps only the
    sentence (:func:`sentence_only`), which trains exactly as the window with the span would."""
    model.bert.to(device).eval()
    out = [dict(f) for f in features]
    order = sorted(range(len(features)), key=lambda i: len(features[i]["input_ids"]))
    for first in range(0, len(order), batch_size):
        chosen = order[first : first + batch_size]
        batch = collate_fn([_window(features[i]) for i in chosen])
        inputs = {k: batch[k].to(device) for k in ("input_ids", "token_type_ids", "attention_mask")}
        with autocast(device, precision):
            layers = model.encoder_layers(**inputs, which=which).float().cpu()
        for row, index in enumerate(chosen):
            start, end = _span(features[index])
            out[index]["layers"] = layers[row, start:end].clone()
            if "sentence_start" in out[index]:
                out[index] = sentence_only(out[index], start, end)
    return out


def _window(feature: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in feature.items() if k not in ("sentence_start", "sentence_end", "layers")}


def _span(feature: dict[str, Any]) -> tuple[int, int]:
    """A feature's sentence span, or its whole length when it has none."""
    return feature.get("sentence_start", 0), feature.get("sentence_end", len(feature["input_ids"]))


def sentence_only(feature: dict[str, Any], start: int, end: int) -> dict[str, Any]:
    """``feature`` cut to ``[start, end)``: its per-token lists sliced, the span keys dropped."""
    out = {k: v for k, v in feature.items() if k not in ("sentence_start", "sentence_end")}
    for key in ("input_ids", "token_type_ids", "labels"):
        if key in out:
            out[key] = list(out[key][start:end])
    return out


def collate_with_layers(base_collate: Any) -> Any:
    """A collate function that also pads the cached ``layers`` of :func:`cache_layers` with zeros."""

    def collate(features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = base_collate([{k: v for k, v in f.items() if k != "layers"} for f in features])
        if "layers" in features[0]:
            batch["layers"] = nn.utils.rnn.pad_sequence([f["layers"] for f in features], batch_first=True)
        return batch

    return collate


def collate_tokens(features: Sequence[dict[str, Any]], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Pad ids, types and per-token labels (with :data:`IGNORE`) to the batch's longest feature."""
    return pad_batch(features, pad_id, token_pads={"labels": IGNORE})
