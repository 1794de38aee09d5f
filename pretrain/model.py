"""BERT (Devlin et al., 2019) for MLM + NSP pre-training, with transformers-compatible parameter names.

The module tree mirrors transformers' ``BertForPreTraining`` (``bert.embeddings.word_embeddings``,
``bert.encoder.layer.N.attention.self.query``, ..., ``cls.predictions.transform.dense``), so a
checkpoint converts both ways by renaming nothing (:mod:`pretrain.hf`). Differences from the
reference implementations, none of which changes the function computed:

- Attention is ``F.scaled_dot_product_attention``, without a mask for a batch that has no padding.
- A packed batch (:func:`pretrain.batching.pack`) is unpadded once, before the embeddings: every
  layer keeps ``[total_tokens, hidden]``, position ids restart in every segment of ``cu_seqlens``,
  and attention stays within each segment (:mod:`pretrain.attention`). Segments after the first
  ``num_examples`` only pad the batch to a static size: they are neither pooled nor predicted.
- The query, key and value projections run as one matmul against the three weights concatenated
  (:meth:`BertSelfAttention.projections`): one GEMM of width ``3 * hidden`` instead of three.
- The MLM head runs only at ``masked_lm_positions`` (sparse prediction, as google-research/bert).
- The vocabulary is padded to a multiple of ``pad_vocab_to_multiple`` inside the model; the padded
  rows stay zero, get no gradient, and their logits are sliced away; export trims them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from pretrain import checkpoint as ckpt
from pretrain import hf
from pretrain.attention import Packed, packed_attention
from pretrain.config import parse_model_size
from schemas import storage


@dataclass(frozen=True)
class BertConfig:
    """The shape and regularisation of a BERT model; validated on creation (every problem at once)."""

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_vocab_to_multiple: int = 64
    nsp: bool = True
    """Whether the model has the next-sentence head (``cls.seq_relationship``); False: MLM only."""
    causal: bool = False
    """Left-to-right attention (each position sees itself and earlier ones): the LTR ablation."""

    def __post_init__(self) -> None:
        problems = []
        for name in ("nsp", "causal"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
            "pad_vocab_to_multiple",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append(f"{name} must be a positive integer, got {value!r}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                problems.append(f"{name} must be in [0, 1), got {value!r}")
        for name in ("layer_norm_eps", "initializer_range"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= 0:
                problems.append(f"{name} must be positive, got {value!r}")
        heads, hidden = self.num_attention_heads, self.hidden_size
        if isinstance(heads, int) and isinstance(hidden, int) and heads > 0 and hidden % heads:
            problems.append(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
        if problems:
            raise ValueError("invalid BertConfig: " + "; ".join(problems))

    @property
    def padded_vocab_size(self) -> int:
        """``vocab_size`` rounded up to a multiple of ``pad_vocab_to_multiple`` (rows held inside)."""
        return -(-self.vocab_size // self.pad_vocab_to_multiple) * self.pad_vocab_to_multiple

    @classmethod
    def preset(cls, name: str, vocab_size: int, **overrides: Any) -> BertConfig:
        """A named size: ``tiny`` 2/128, ``mini`` 4/256, ``small`` 4/512, ``medium`` 8/512, ``base``
        12/768, ``large`` 24/1024 (layers/hidden; heads = hidden/64, intermediate = 4*hidden), or
        ``L/H/A`` (layers/hidden/heads, intermediate 4*H) as in the paper's Table 6."""
        layers, hidden, heads = parse_model_size(name)
        fields = {
            "vocab_size": vocab_size,
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "intermediate_size": 4 * hidden,
        }
        return cls(**{**fields, **overrides})

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready)."""
        return dataclasses.asdict(self)

    def to_hf_dict(self) -> dict[str, Any]:
        """A transformers ``config.json`` for ``BertForPreTraining`` (``pad_vocab_to_multiple`` rides
        along as an extra key, which transformers keeps and ignores)."""
        return {
            "architectures": ["BertForPreTraining"],
            "model_type": "bert",
            "hidden_act": "gelu",
            "position_embedding_type": "absolute",
            "pad_token_id": 0,
            "tie_word_embeddings": True,
            **self.to_dict(),
        }

    @classmethod
    def from_hf_dict(cls, data: dict[str, Any], source: str = "config.json") -> BertConfig:
        """Read a transformers BERT ``config.json`` dict; refuse what this model cannot compute."""
        problems = []
        if data.get("model_type", "bert") != "bert":
            problems.append(f"model_type is {data.get('model_type')!r}, not 'bert'")
        if data.get("hidden_act", "gelu") != "gelu":
            problems.append(f"hidden_act is {data.get('hidden_act')!r}; only 'gelu' (erf) is supported")
        if data.get("position_embedding_type", "absolute") != "absolute":
            problems.append("only absolute position embeddings are supported")
        if data.get("tie_word_embeddings", True) is not True:
            problems.append("the MLM decoder must be tied to the word embeddings")
        if data.get("is_decoder") or data.get("add_cross_attention"):
            problems.append("decoder / cross-attention BERT variants are not supported")
        known = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(
            {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"} - set(data)
        )
        if missing:
            problems.append(f"missing {', '.join(missing)}")
        if problems:
            raise ValueError(f"{source}: cannot load this BERT config: " + "; ".join(problems))
        fields = {k: v for k, v in data.items() if k in known}
        if isinstance(data["hidden_size"], int):
            fields.setdefault("intermediate_size", 4 * data["hidden_size"])
        try:
            return cls(**fields)
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None


# --- encoder ---------------------------------------------------------------------------------------


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.padded_vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if position_ids is None:
            position_ids = torch.arange(input_ids.size(-1), device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


Attention = torch.Tensor | Packed | None
"""What the encoder layers get: a boolean key mask (padded batch), None (no padding), or the
layout of a packed batch."""


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention (query/key/value projections; output is separate)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.dropout_p = config.attention_probs_dropout_prob
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def projections(self, x: torch.Tensor) -> torch.Tensor:
        """Query, key and value of ``x`` in one matmul: ``[..., 3, heads, head_dim]``."""
        weight = torch.cat([self.query.weight, self.key.weight, self.value.weight])
        bias = torch.cat([self.query.bias, self.key.bias, self.value.bias])
        return F.linear(x, weight, bias).unflatten(-1, (3, self.num_heads, -1))

    def forward(self, x: torch.Tensor, mask: Attention) -> torch.Tensor:
        dropout_p = self.dropout_p if self.training else 0.0
        qkv = self.projections(x)
        if isinstance(mask, Packed):  # x: [total_tokens, hidden]; q, k, v: [total_tokens, heads, dim]
            return packed_attention(*qkv.unbind(1), mask, dropout_p).flatten(1)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # [batch, heads, length, dim] each
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        return y.transpose(1, 2).flatten(2)


class BertResidualOutput(nn.Module):
    """Post-LN sub-layer end: dense, dropout, add the residual, LayerNorm."""

    def __init__(self, in_features: int, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    """Self-attention followed by its output projection and residual LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertResidualOutput(config.hidden_size, config)

    def forward(self, x: torch.Tensor, mask: Attention) -> torch.Tensor:
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    """The feed-forward up-projection with GELU (erf)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))


class BertLayer(nn.Module):
    """One post-LN transformer encoder layer."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertResidualOutput(config.intermediate_size, config)

    def forward(self, x: torch.Tensor, mask: Attention) -> torch.Tensor:
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    """The stack of encoder layers."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, x: torch.Tensor, mask: Attention) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x, mask)
        return x


class BertPooler(nn.Module):
    """Dense + tanh on the first ([CLS]) token."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, sequence_output: torch.Tensor) -> torch.Tensor:
        return self.pool(sequence_output[:, 0])

    def pool(self, first_tokens: torch.Tensor) -> torch.Tensor:
        """The pooled output of the examples' first tokens ``[batch, hidden]``."""
        return torch.tanh(self.dense(first_tokens))


class BertModel(nn.Module):
    """The BERT encoder: ``(input_ids, token_type_ids, attention_mask) -> (sequence, pooled)``."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        cu_seqlens: torch.Tensor | None = None,
        max_seqlen: int | None = None,
        num_examples: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode ``[batch, length]`` ids; ``attention_mask`` is 1 for real tokens, 0 for padding
        (None: no padding, and attention runs without a mask).

        Returns the last layer's hidden states ``[batch, length, hidden]`` and the pooled [CLS]
        output ``[batch, hidden]``. Outputs at padded positions are defined but meaningless.

        Packed: with ``cu_seqlens`` (``[segments + 1]`` offsets from 0 to ``total_tokens``) and
        ``max_seqlen`` (an int no segment is longer than), ``input_ids`` and ``token_type_ids`` are
        ``[total_tokens]``, every segment's tokens end to end, and the hidden states are
        ``[total_tokens, hidden]``. The first ``num_examples`` segments (default: all) are the
        batch's examples, pooled ``[num_examples, hidden]``; any after them only pad the batch to a
        static size (:func:`pretrain.batching.pack`): they attend among themselves and are not pooled.
        """
        if cu_seqlens is not None:
            return self._forward_packed(input_ids, token_type_ids, cu_seqlens, max_seqlen, num_examples)
        if input_ids.size(1) > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {input_ids.size(1)} exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}"
            )
        # [batch, 1 (heads), 1 (queries), length (keys)]: True where a key may be attended to.
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        if self.config.causal:
            length = input_ids.size(1)
            causal = torch.ones(length, length, dtype=torch.bool, device=input_ids.device).tril()
            mask = causal[None, None] if mask is None else mask & causal[None, None]
        sequence_output = self.encoder(self.embeddings(input_ids, token_type_ids), mask)
        return sequence_output, self.pooler(sequence_output)

    def _forward_packed(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        cu_seqlens: torch.Tensor,
        max_seqlen: int | None,
        num_examples: int | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if max_seqlen is None or input_ids.dim() != 1:
            raise ValueError("a packed batch needs 1-D input_ids, cu_seqlens and max_seqlen")
        if max_seqlen > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {max_seqlen} exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}"
            )
        if self.config.causal:
            raise ValueError("causal (left-to-right) attention takes padded batches, not packed ones")
        layout = Packed.build(cu_seqlens, max_seqlen, input_ids.size(0))
        if num_examples is None:
            num_examples = layout.num_segments
        elif not 0 < num_examples <= layout.num_segments:
            raise ValueError(f"num_examples {num_examples} is not in 1..{layout.num_segments} (segments)")
        x = self.embeddings(input_ids, token_type_ids, layout.columns)
        sequence_output = self.encoder(x, layout)
        return sequence_output, self.pooler.pool(sequence_output[layout.offsets[:num_examples]])


# --- pre-training heads ----------------------------------------------------------------------------


class BertPredictionHeadTransform(nn.Module):
    """Dense + GELU + LayerNorm before the MLM decoder."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """MLM logits over the real vocabulary; ``decoder.weight`` is tied to the word embeddings."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.vocab_size = config.vocab_size
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.padded_vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.padded_vocab_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = F.linear(self.transform(x), self.decoder.weight, self.bias)
        return logits[..., : self.vocab_size]


class BertPreTrainingHeads(nn.Module):
    """The MLM head (``predictions``) and the NSP classifier (``seq_relationship``, absent when
    ``config.nsp`` is False)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2) if config.nsp else None


class PretrainingOutput(NamedTuple):
    """MLM logits ``[batch, max_predictions, vocab]`` (or ``[batch, length, vocab]`` when dense)
    and NSP logits ``[batch, 2]`` (index 0: B follows A, 1: B is random, as transformers), None
    for a model without the NSP head."""

    prediction_logits: torch.Tensor
    seq_relationship_logits: torch.Tensor | None


class BertForPreTraining(nn.Module):
    """BERT with its MLM and NSP heads; ``.bert`` is the encoder."""

    def __init__(self, config: BertConfig, *, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight
        self.init_weights(torch.Generator().manual_seed(seed))

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator) -> None:
        """BERT's init: weights N(0, initializer_range), biases 0, LayerNorm 1/0; padded vocab rows 0."""
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)) and module is not self.cls.predictions.decoder:
                module.weight.normal_(0.0, std, generator=generator)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.zero_()
            if isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
        self.cls.predictions.bias.zero_()
        self.bert.embeddings.word_embeddings.weight[self.config.vocab_size :].zero_()

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        masked_lm_positions: torch.Tensor | None = None,
        *,
        cu_seqlens: torch.Tensor | None = None,
        max_seqlen: int | None = None,
        num_examples: int | None = None,
    ) -> PretrainingOutput:
        """MLM logits at ``masked_lm_positions`` (``[batch, max_predictions]`` indices into the
        sequence; padding slots may point anywhere, e.g. 0) or at every position when it is None,
        and NSP logits from the pooled output. A packed batch (``cu_seqlens``, ``max_seqlen``,
        ``num_examples``: see :meth:`BertModel.forward`) gives the same logits as the padded one;
        its ``masked_lm_positions`` are still positions inside each example (and required), one
        row per example."""
        if cu_seqlens is not None:
            if masked_lm_positions is None:
                raise ValueError("a packed batch needs masked_lm_positions (the head runs sparsely)")
            num_examples = masked_lm_positions.size(0) if num_examples is None else num_examples
            if masked_lm_positions.size(0) != num_examples:
                raise ValueError(
                    f"masked_lm_positions has {masked_lm_positions.size(0)} rows for {num_examples} examples"
                )
        sequence_output, pooled_output = self.bert(
            input_ids,
            token_type_ids,
            attention_mask,
            cu_seqlens=cu_seqlens,
            max_seqlen=max_seqlen,
            num_examples=num_examples,
        )
        if cu_seqlens is not None:
            starts = cu_seqlens[:num_examples, None].to(masked_lm_positions.dtype)
            sequence_output = sequence_output[starts + masked_lm_positions]
        elif masked_lm_positions is not None:
            index = masked_lm_positions.unsqueeze(-1).expand(-1, -1, sequence_output.size(-1))
            sequence_output = torch.gather(sequence_output, 1, index)
        nsp = self.cls.seq_relationship
        return PretrainingOutput(
            self.cls.predictions(sequence_output), None if nsp is None else nsp(pooled_output)
        )

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike, *, seed: int = 0, **overrides: Any
    ) -> BertForPreTraining:
        """Load an HF-format BERT folder or URL (``config.json`` + ``model.safetensors`` or
        ``pytorch_model.bin``), including the output of ``save_pretrained``.

        Keys may lack the ``bert.`` prefix (``BertModel`` checkpoints); missing pooler or heads
        (encoder-only checkpoints such as sentence-transformers') are initialised from ``seed``.
        ``overrides`` replace config fields (e.g. ``nsp=False`` drops the NSP head). A folder
        without a ``config.json`` of its own loads the checkpoint it names, as the CLIs do
        (:func:`pretrain.checkpoint.weights_folder`: a run folder's newest complete one).
        """
        if not storage.exists(storage.join(path, hf.CONFIG_FILE)):
            path = ckpt.weights_folder(path)
        data, source = hf.read_config(path)
        config = dataclasses.replace(BertConfig.from_hf_dict(data, source), **overrides)
        hf.check_weights_fit(config, path, source)  # before a tensor is made: the config may lie
        model = cls(config, seed=seed)
        hf.load_hf_state_dict(model, *hf.read_weights(path))
        return model

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Write ``config.json`` and ``model.safetensors`` in transformers' layout (trimmed vocab,
        tied decoder weight left out) to a local folder or bucket URL."""
        hf.save_hf(self, storage.Folder(path))


# --- loss, cost, compile ---------------------------------------------------------------------------


@dataclass
class PretrainingLoss:
    """The losses (scalar tensors, ``total`` differentiable) and accuracy counts of one batch."""

    total: torch.Tensor
    mlm_loss: torch.Tensor
    nsp_loss: torch.Tensor
    mlm_correct: torch.Tensor
    mlm_count: torch.Tensor
    nsp_correct: torch.Tensor
    nsp_count: torch.Tensor


def pretraining_loss(
    outputs: PretrainingOutput,
    masked_lm_ids: torch.Tensor,
    masked_lm_weights: torch.Tensor,
    next_sentence_labels: torch.Tensor,
) -> PretrainingLoss:
    """MLM + NSP loss as google-research/bert's ``run_pretraining.py``.

    MLM: cross entropy at each prediction slot, weighted by ``masked_lm_weights`` (1 for a real
    masked token, 0 for a padding slot), summed and divided by ``sum(weights) + 1e-5``. NSP: mean
    cross entropy over the batch (0, with no pairs counted, for a model without the NSP head).
    Accuracy counts only slots with a positive weight. No host sync.
    """
    logits = outputs.prediction_logits.float()
    weights = masked_lm_weights.reshape(-1).float()
    per_slot = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)), masked_lm_ids.reshape(-1), reduction="none"
    )
    mlm_loss = (per_slot * weights).sum() / (weights.sum() + 1e-5)
    real = weights > 0
    with torch.no_grad():
        mlm_correct = (
            (logits.reshape(-1, logits.size(-1)).argmax(-1) == masked_lm_ids.reshape(-1)) & real
        ).sum()
    if outputs.seq_relationship_logits is None:
        zero = mlm_loss.new_zeros(())
        nsp_loss, nsp_correct, nsp_count = zero, mlm_correct.new_zeros(()), mlm_correct.new_zeros(())
    else:
        nsp_logits = outputs.seq_relationship_logits.float()
        nsp_loss = F.cross_entropy(nsp_logits, next_sentence_labels.reshape(-1))
        with torch.no_grad():
            nsp_correct = (nsp_logits.argmax(-1) == next_sentence_labels.reshape(-1)).sum()
        nsp_count = nsp_correct.new_full((), next_sentence_labels.numel())  # a fill: no host copy, no sync
    return PretrainingLoss(
        total=mlm_loss + nsp_loss,
        mlm_loss=mlm_loss,
        nsp_loss=nsp_loss,
        mlm_correct=mlm_correct,
        mlm_count=real.sum(),
        nsp_correct=nsp_correct,
        nsp_count=nsp_count,
    )


def left_to_right_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A masked-LM batch turned into a left-to-right LM batch (the paper's "LTR & No NSP").

    The original tokens are restored (``masked_lm_ids`` written back at ``masked_lm_positions``
    where the weight is positive); every position ``t`` with a real next token predicts token
    ``t + 1``: ``masked_lm_ids`` become the sequence shifted left, ``masked_lm_weights`` 1 where
    position ``t + 1`` is real; ``masked_lm_positions`` is dropped (the head runs densely).
    """
    input_ids = batch["input_ids"].clone()
    weights = batch["masked_lm_weights"] > 0
    rows = torch.arange(input_ids.size(0), device=input_ids.device)[:, None].expand_as(weights)
    input_ids[rows[weights], batch["masked_lm_positions"][weights]] = batch["masked_lm_ids"][weights]
    mask = batch["attention_mask"]
    targets = torch.zeros_like(input_ids)
    targets[:, :-1] = input_ids[:, 1:]
    target_weights = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    target_weights[:, :-1] = mask[:, 1:].float()
    out = {k: v for k, v in batch.items() if k != "masked_lm_positions"}
    out.update(input_ids=input_ids, masked_lm_ids=targets, masked_lm_weights=target_weights)
    return out


def parameter_counts(config: BertConfig) -> dict[str, int]:
    """Parameters of ``BertForPreTraining`` for ``config`` over the real (unpadded) vocabulary, as
    transformers counts them (the tied decoder once): embeddings, encoder, pooler, heads, total."""
    h, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    embeddings = (config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * h + 2 * h
    per_layer = 4 * (h * h + h) + 2 * h + (h * inter + inter) + (inter * h + h) + 2 * h
    pooler = h * h + h
    heads = (h * h + h) + 2 * h + config.vocab_size + (2 * h + 2 if config.nsp else 0)
    counts = {
        "embeddings": embeddings,
        "encoder": layers * per_layer,
        "pooler": pooler,
        "heads": heads,
    }
    counts["total"] = sum(counts.values())
    return counts


def training_state_bytes(config: BertConfig) -> int:
    """Bytes that the fp32 weights, their gradients and AdamW's two moments take (16 per parameter,
    over the padded vocabulary the embeddings hold): the least a training run of ``config`` needs,
    before activations. LAMB keeps the same state."""
    padded = dataclasses.replace(config, vocab_size=config.padded_vocab_size)
    return 16 * parameter_counts(padded)["total"]


def training_flops_per_token(
    config: BertConfig, seq_length: int, predictions_per_token: float = 20 / 128
) -> float:
    """Model FLOPs of one training step (forward + backward) per input token, for MFU.

    ``6 * N + 12 * L * H * S + 6 * p * (H^2 + H * V)`` where

    - ``N = L * (4 H^2 + 2 H I)``: the encoder's matmul weights (Q, K, V, output; FFN up and down).
      A matmul costs 2 FLOPs per weight per token forward and 4 backward: ``6 N``.
    - ``12 L H S``: attention scores ``Q K^T`` and ``P V``, each ``2 S H`` per token per layer forward,
      times 3 for forward + backward (as in the PaLM paper's MFU formula).
    - The MLM head (transform ``H^2`` + decoder ``H V`` over the real vocabulary) runs only at the
      masked positions, ``p`` per input token (``max_predictions / max_seq_length``; 1 for dense).
    - Embedding lookups, LayerNorm, softmax, GELU, the pooler and NSP head (once per sequence) are
      left out, as is usual. ``S`` is the padded length the step computes with.
    """
    h, n_layers, inter = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    matmul_params = n_layers * (4 * h * h + 2 * h * inter)
    head = 6 * predictions_per_token * (h * h + h * config.vocab_size)
    return 6 * matmul_params + 12 * n_layers * h * seq_length + head


def compile_for_training(model: BertForPreTraining, **options: Any) -> Callable[..., PretrainingLoss]:
    """``torch.compile`` ``model`` region by region, in place (each encoder layer and the embeddings;
    the heads run eagerly), so DDP and the checkpoints see the same module; returns
    :func:`pretraining_loss` compiled alike. ``options``: ``torch.compile``'s (mode, dynamic, backend)."""
    for region in (*model.bert.encoder.layer, model.bert.embeddings):
        region.compile(**options)
    return torch.compile(pretraining_loss, **options)
