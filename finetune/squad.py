"""SQuAD v1.1 and v2.0: reading the official JSON, windowed features, a span head, n-best answers.

As the paper (Sections 4.2, 4.3) and google-research/bert ``run_squad.py``:

- **features**: ``[CLS] question [SEP] context-window [SEP]``, the question cut to
  ``max_query_length`` tokens, windows over the context's tokens that start ``doc_stride`` tokens
  apart (the original's meaning of the stride) and fill ``max_seq_length``. The start/end labels
  are the answer's first and last token, or 0 (``[CLS]``) when the answer is not wholly inside the
  window or the question is unanswerable. Token boundaries are the fast tokenizer's character
  offsets into the original context, so an answer's tokens and a predicted span's text both come
  from exact character positions (no whitespace re-tokenisation, no ``get_final_text``).
- **model**: the encoder plus ``Linear(hidden, 2)`` on every token (``qa_outputs``: start and end
  logits); the loss is the mean of the start and end cross-entropies.
- **answers**: per example, the ``n_best_size`` best starts and ends of every window give candidate
  spans (start and end in the context, start in its *max-context* window, end >= start, at most
  ``max_answer_length`` tokens) ranked by start + end logit; the text is the context between the
  start token's first and the end token's last character. v2.0: a window's null score is its
  ``[CLS]`` start + end logit, the example's is the minimum over windows; its null odds are the
  null score minus the best non-null span's score, and the prediction is ``""`` when the odds
  exceed the threshold.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import fsspec
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from finetune.common import (
    Encoder,
    FinetuneError,
    SettingsError,
    TaskOutput,
    TrainConfig,
    check_casing,
    check_max_seq_length,
    fit,
    load_encoder,
    predict,
)
from finetune.common import save_model as common_save_model
from finetune.heads import BiLSTM
from finetune.squad_eval import evaluate_v1, evaluate_v2, tune_null_threshold
from pretrain import hf
from pretrain.model import BertModel
from schemas.files import write_json

logger = logging.getLogger(__name__)

VERSIONS = ("1.1", "2.0")
NO_SPAN_NULL_ODDS = 1e6
"""Null odds of a v2.0 example that has no valid non-null span at all (it is always answered ``""``)."""
MAX_BAD_IDS_REPORTED = 20


class SquadFormatError(FinetuneError):
    """A SQuAD file that does not follow the official layout; the message names the file and place."""


@dataclasses.dataclass(frozen=True)
class SquadExample:
    """One question on one context.

    ``answers`` are the gold texts (all of them, for scoring); ``answer_start``/``answer_text`` the
    answer trained on (the first one; None for unanswerable questions). ``bad_offset`` is set when
    some answer's ``answer_start`` does not point at its text in the context.
    """

    qid: str
    question: str
    context: str
    answers: tuple[str, ...]
    is_impossible: bool
    answer_start: int | None
    answer_text: str | None
    bad_offset: bool = False


@dataclasses.dataclass
class SquadStats:
    """Counts from reading one file (``metrics.json`` reports them)."""

    num_examples: int = 0
    num_impossible: int = 0
    num_answers_bad_offset: int = 0
    num_examples_bad_offset: int = 0
    num_duplicate_ids: int = 0
    bad_offset_ids: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The counts as a plain dict."""
        return dataclasses.asdict(self)


def _field(obj: Any, key: str, kind: type | tuple[type, ...], path: str, where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise SquadFormatError(
            f"{path}: {where} has no {key!r} field: give a SQuAD file in the official JSON layout "
            "(data -> paragraphs -> context, qas -> id, question, answers)"
        )
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise SquadFormatError(f"{path}: {where}.{key} is a {type(value).__name__}, not the expected type")
    return value


def _read_json(url: str, advice: str) -> Any:
    """The JSON object in a local file or fsspec URL; :class:`SquadFormatError` naming it otherwise."""
    try:
        with fsspec.open(url, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise SquadFormatError(f"{url}: no such file: check the path") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SquadFormatError(f"{url}: not valid UTF-8 JSON ({err}): {advice}") from None


def load_squad_json(path: str | Path) -> list[dict]:
    """The ``data`` list of a SQuAD JSON file; :class:`SquadFormatError` naming the file otherwise."""
    obj = _read_json(str(path), "give an official SQuAD file")
    return _field(obj, "data", list, str(path), "the top level")


def read_squad(path: str | Path, version: str) -> tuple[list[SquadExample], SquadStats]:
    """Read and check a SQuAD v1.1 or v2.0 file (``train-*.json`` or ``dev-*.json``).

    Every question needs ``id``, ``question`` and ``answers`` (each ``text`` and ``answer_start``);
    v2.0's ``is_impossible`` defaults to "has no answers". A missing field raises
    :class:`SquadFormatError` naming the file and the place. An answer whose ``answer_start`` does
    not point at its text is counted (and its example marked ``bad_offset``), never fatal.
    """
    if version not in VERSIONS:
        raise ValueError(f"unknown SQuAD version {version!r}; choose one of {', '.join(VERSIONS)}")
    path = str(path)
    examples: list[SquadExample] = []
    stats = SquadStats()
    seen: set[str] = set()
    for a, article in enumerate(load_squad_json(path)):
        for p, paragraph in enumerate(_field(article, "paragraphs", list, path, f"data[{a}]")):
            where = f"data[{a}].paragraphs[{p}]"
            context = _field(paragraph, "context", str, path, where)
            for q, qa in enumerate(_field(paragraph, "qas", list, path, where)):
                example = _read_question(qa, context, version, path, f"{where}.qas[{q}]", stats)
                stats.num_duplicate_ids += example.qid in seen
                seen.add(example.qid)
                examples.append(example)
    stats.num_examples = len(examples)
    stats.num_impossible = sum(e.is_impossible for e in examples)
    return examples, stats


def _read_question(
    qa: Any, context: str, version: str, path: str, where: str, stats: SquadStats
) -> SquadExample:
    qid = _field(qa, "id", str, path, where)
    question = _field(qa, "question", str, path, where)
    answers = _field(qa, "answers", list, path, where)
    texts, starts = [], []
    for i, answer in enumerate(answers):
        texts.append(_field(answer, "text", str, path, f"{where}.answers[{i}]"))
        starts.append(_field(answer, "answer_start", int, path, f"{where}.answers[{i}]"))
    is_impossible = bool(qa.get("is_impossible", not answers)) if version == "2.0" else False
    if not is_impossible and not answers:
        raise SquadFormatError(
            f"{path}: {where} (id {qid!r}) has no answers"
            + (" and is not marked is_impossible" if version == "2.0" else ": SQuAD v1.1 needs one")
        )
    bad = [
        i for i, (t, s) in enumerate(zip(texts, starts, strict=True)) if s < 0 or context[s : s + len(t)] != t
    ]
    stats.num_answers_bad_offset += len(bad)
    if bad:
        stats.num_examples_bad_offset += 1
        if len(stats.bad_offset_ids) < MAX_BAD_IDS_REPORTED:
            stats.bad_offset_ids.append(qid)
        logger.warning("%s: %s (id %s): answer_start does not point at the answer text", path, where, qid)
    trained = not is_impossible and 0 not in bad
    return SquadExample(
        qid=qid,
        question=question,
        context=context,
        answers=tuple(texts),
        is_impossible=is_impossible,
        answer_start=starts[0] if trained else None,
        answer_text=texts[0] if trained else None,
        bad_offset=bool(bad),
    )


# --- features --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SquadFeature:
    """One window of one example, ready for the model.

    ``token_offsets[i]`` is the ``(start, end)`` character span in the context of token ``i`` when
    it is a context token, else None; ``max_context[i]`` says whether this window is the one where
    context token ``i`` has the most context (False for non-context tokens). Labels are token
    indices in ``input_ids`` (0, the ``[CLS]``, for "no answer in this window").
    """

    example_index: int
    window_index: int
    input_ids: list[int]
    token_type_ids: list[int]
    token_offsets: list[tuple[int, int] | None]
    max_context: list[bool]
    start_position: int = 0
    end_position: int = 0


def doc_windows(num_tokens: int, max_tokens_per_window: int, doc_stride: int) -> list[tuple[int, int]]:
    """``(start, length)`` windows over ``num_tokens`` tokens: each starts ``doc_stride`` after the
    previous one (or right after it ends, when shorter), the last one reaches the end.

    An empty context still gets one empty window, so every example has a feature.
    """
    if max_tokens_per_window < 1 or doc_stride < 1:
        raise ValueError(f"window size {max_tokens_per_window} and doc_stride {doc_stride} must be positive")
    windows = []
    start = 0
    while True:
        length = min(num_tokens - start, max_tokens_per_window)
        windows.append((start, length))
        if start + length >= num_tokens:
            return windows
        start += min(length, doc_stride)


def is_max_context(windows: Sequence[tuple[int, int]], window_index: int, position: int) -> bool:
    """Whether context token ``position`` has its most context in window ``window_index``: the
    window maximising min(left, right context) + 0.01 * window length; the first one on ties."""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(windows):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return best_index == window_index


def char_span_to_tokens(
    offsets: Sequence[tuple[int, int]], start_char: int, end_char: int
) -> tuple[int, int] | None:
    """The first and last token overlapping characters ``[start_char, end_char)``, or None when no
    token does (an answer made only of whitespace or dropped characters)."""
    first = next((i for i, (s, e) in enumerate(offsets) if e > start_char and e > s), None)
    last = next(
        (
            i
            for i in range(len(offsets) - 1, -1, -1)
            if offsets[i][0] < end_char and offsets[i][1] > offsets[i][0]
        ),
        None,
    )
    if first is None or last is None or first > last:
        return None
    return first, last


def build_features(
    examples: Sequence[SquadExample],
    tokenizer: Tokenizer,
    *,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    training: bool = False,
) -> list[SquadFeature]:
    """Every window of every example (``training=True`` adds start/end labels and leaves out the
    answerable examples with no usable answer: a bad offset, or an answer covering no token).

    ``tokenizer`` is a ``tokenizers.Tokenizer`` with BERT normalisation (its character offsets
    refer to the original text). Contexts shared by several questions are tokenised once.
    """
    if max_seq_length < max_query_length + 4:
        raise ValueError(
            f"max_seq_length {max_seq_length} leaves no room for the context after a question of up to "
            f"{max_query_length} tokens: raise max_seq_length or lower max_query_length"
        )
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    contexts = list(dict.fromkeys(e.context for e in examples))
    encoded_contexts = dict(
        zip(contexts, tokenizer.encode_batch(contexts, add_special_tokens=False), strict=True)
    )
    encoded_questions = tokenizer.encode_batch_fast([e.question for e in examples], add_special_tokens=False)
    features = []
    for example_index, example in enumerate(examples):
        context = encoded_contexts[example.context]
        context_ids, offsets = context.ids, context.offsets
        query_ids = encoded_questions[example_index].ids[:max_query_length]
        answer_tokens = None
        if training and example.answer_start is not None:
            answer_tokens = char_span_to_tokens(
                offsets, example.answer_start, example.answer_start + len(example.answer_text or "")
            )
        if training and not example.is_impossible and answer_tokens is None:
            continue  # Bad offset, or an answer with no tokens: nothing to learn from (counted by the caller).
        windows = doc_windows(len(context_ids), max_seq_length - len(query_ids) - 3, doc_stride)
        prefix = [cls_id, *query_ids, sep_id]
        for window_index, (start, length) in enumerate(windows):
            input_ids = prefix + context_ids[start : start + length] + [sep_id]
            token_offsets: list[tuple[int, int] | None] = [None] * len(prefix)
            token_offsets += [tuple(o) for o in offsets[start : start + length]] + [None]
            max_context = [False] * len(prefix)
            max_context += [is_max_context(windows, window_index, start + i) for i in range(length)]
            max_context.append(False)
            start_position = end_position = 0
            if answer_tokens is not None and start <= answer_tokens[0] and answer_tokens[1] < start + length:
                start_position = answer_tokens[0] - start + len(prefix)
                end_position = answer_tokens[1] - start + len(prefix)
            features.append(
                SquadFeature(
                    example_index=example_index,
                    window_index=window_index,
                    input_ids=input_ids,
                    token_type_ids=[0] * len(prefix) + [1] * (length + 1),
                    token_offsets=token_offsets,
                    max_context=max_context,
                    start_position=start_position,
                    end_position=end_position,
                )
            )
    return features


# --- answers from logits ---------------------------------------------------------------------------


def _top_indices(logits: Sequence[float], n: int) -> list[int]:
    return sorted(range(len(logits)), key=lambda i: logits[i], reverse=True)[:n]


def _softmax(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


@dataclasses.dataclass(frozen=True)
class ExamplePrediction:
    """The n-best answers of one example (text, probability, start_logit, end_logit, best first),
    its best non-null answer, and for v2.0 its null odds (null score minus best non-null score)."""

    nbest: list[dict[str, Any]]
    best_non_null: str
    null_odds: float | None


def predict_example(
    context: str,
    windows: Sequence[tuple[SquadFeature, Sequence[float], Sequence[float]]],
    *,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    with_null: bool = False,
) -> ExamplePrediction:
    """The n-best span search over all windows of one example (``run_squad.py``'s ``write_predictions``).

    ``windows`` pairs each feature of the example with its start and end logits (one per token of
    ``input_ids``). ``with_null`` (v2.0) adds the null answer ``""`` with the smallest ``[CLS]``
    score over the windows and computes the null odds.
    """
    candidates = []  # (score, start_logit, end_logit, text)
    null_score = null_start = null_end = None
    for feature, start_logits, end_logits in windows:
        if with_null:
            score = start_logits[0] + end_logits[0]
            if null_score is None or score < null_score:
                null_score, null_start, null_end = score, start_logits[0], end_logits[0]
        offsets = feature.token_offsets
        for start in _top_indices(start_logits[: len(offsets)], n_best_size):
            if offsets[start] is None or not feature.max_context[start]:
                continue
            for end in _top_indices(end_logits[: len(offsets)], n_best_size):
                if offsets[end] is None or end < start or end - start + 1 > max_answer_length:
                    continue
                text = context[offsets[start][0] : offsets[end][1]]
                candidates.append(
                    (start_logits[start] + end_logits[end], start_logits[start], end_logits[end], text)
                )
    if with_null and null_score is not None:
        candidates.append((null_score, null_start, null_end, ""))
    candidates.sort(key=lambda c: c[0], reverse=True)
    nbest, seen = [], set()
    for score, start_logit, end_logit, text in candidates:
        if len(nbest) >= n_best_size:
            break
        if text in seen:
            continue
        seen.add(text)
        nbest.append({"text": text, "score": score, "start_logit": start_logit, "end_logit": end_logit})
    if with_null and "" not in seen and null_score is not None:
        nbest.append({"text": "", "score": null_score, "start_logit": null_start, "end_logit": null_end})
    if not nbest:  # No valid span at all (as the original, a placeholder answer).
        nbest.append({"text": "empty", "score": 0.0, "start_logit": 0.0, "end_logit": 0.0})
    probabilities = _softmax([entry.pop("score") for entry in nbest])
    scored = []
    for entry, probability in zip(nbest, probabilities, strict=True):
        scored.append({"text": entry["text"], "probability": probability, **entry})
    best = next((e for e in scored if e["text"]), None)
    null_odds = None
    if with_null:
        null_odds = (
            NO_SPAN_NULL_ODDS if best is None else null_score - best["start_logit"] - best["end_logit"]
        )
    return ExamplePrediction(
        nbest=scored, best_non_null="" if best is None else best["text"], null_odds=null_odds
    )


def answers_at_threshold(
    best_non_null: dict[str, str], null_odds: dict[str, float], threshold: float
) -> dict[str, str]:
    """v2.0 predictions: ``""`` where the null odds exceed ``threshold``, else the best non-null answer."""
    return {qid: "" if null_odds[qid] > threshold else text for qid, text in best_non_null.items()}


# --- the model -------------------------------------------------------------------------------------


class SpanQuestionAnswering(nn.Module):
    """The encoder and ``qa_outputs``, a ``Linear(hidden, 2)`` on every token's final hidden state
    giving start and end logits (the paper's Figure 4 (c); transformers' parameter names).

    Logits at padding positions are set to -10000, so that neither the loss nor the span search
    depends on how a batch was padded. ``bilstm``: a randomly initialised one-layer BiLSTM (the
    encoder's hidden size per direction, :class:`finetune.heads.BiLSTM`) between the encoder and
    ``qa_outputs`` (then ``Linear(2 * hidden, 2)``), the paper's "LTR & No NSP + BiLSTM" (Table 5).
    """

    def __init__(self, encoder: BertModel, *, seed: int = 0, bilstm: bool = False) -> None:
        super().__init__()
        self.bert = encoder
        hidden = encoder.config.hidden_size
        self.bilstm = BiLSTM(hidden, hidden, num_layers=1, seed=seed + 1) if bilstm else None
        self.qa_outputs = nn.Linear(2 * hidden if bilstm else hidden, 2)
        with torch.no_grad():
            generator = torch.Generator().manual_seed(seed)
            self.qa_outputs.weight.normal_(0.0, encoder.config.initializer_range, generator=generator)
            self.qa_outputs.bias.zero_()

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
    ) -> TaskOutput:
        """Start and end logits ``[batch, length]``; with positions, the mean of their cross-entropies."""
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask)
        if self.bilstm is not None:
            sequence_output = self.bilstm(sequence_output, attention_mask)
        logits = self.qa_outputs(sequence_output).float()
        if attention_mask is not None:
            logits = logits.masked_fill(attention_mask[..., None] == 0, -10000.0)
        start_logits, end_logits = logits.unbind(-1)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = (
                F.cross_entropy(start_logits, start_positions) + F.cross_entropy(end_logits, end_positions)
            ) / 2
        return TaskOutput((start_logits, end_logits), loss)


def _model_inputs(feature: SquadFeature, training: bool) -> dict[str, Any]:
    inputs: dict[str, Any] = {"input_ids": feature.input_ids, "token_type_ids": feature.token_type_ids}
    if training:
        inputs["start_positions"] = feature.start_position
        inputs["end_positions"] = feature.end_position
    return inputs


# --- running and scoring ---------------------------------------------------------------------------


def _as_data(examples: Sequence[SquadExample]) -> list[dict]:
    """The examples as the ``data`` list of a SQuAD file (what the official metrics read)."""
    qas = [{"id": e.qid, "answers": [{"text": t} for t in e.answers]} for e in examples]
    return [{"paragraphs": [{"qas": qas}]}]


def _write_json(url: str, obj: Any) -> None:
    """Write ``obj`` as indented UTF-8 JSON to a path or fsspec URL, whole or not at all."""
    write_json(url, obj, ensure_ascii=False)


def predict_answers(
    examples: Sequence[SquadExample],
    features: Sequence[SquadFeature],
    logits: Sequence[tuple[torch.Tensor, torch.Tensor]],
    *,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    with_null: bool = False,
) -> dict[str, ExamplePrediction]:
    """:func:`predict_example` for every example, from each feature's (start, end) logits; keyed by
    question id (a repeated id keeps its last example, as the official scripts do)."""
    by_example: dict[int, list] = {}
    for feature, (start, end) in zip(features, logits, strict=True):
        length = len(feature.input_ids)
        by_example.setdefault(feature.example_index, []).append(
            (feature, start[:length].tolist(), end[:length].tolist())
        )
    return {
        examples[i].qid: predict_example(
            examples[i].context,
            windows,
            n_best_size=n_best_size,
            max_answer_length=max_answer_length,
            with_null=with_null,
        )
        for i, windows in sorted(by_example.items())
    }


MODEL_FOLDER = "model"
"""Where ``run_squad`` saves the fine-tuned model in ``--output`` (transformers'
``BertForQuestionAnswering`` layout); giving that folder as ``--checkpoint`` restores the span head."""


def save_model(model: SpanQuestionAnswering, encoder: Encoder, folder: str) -> None:
    """:func:`finetune.common.save_model` as transformers' ``BertForQuestionAnswering`` (``bert.*``,
    ``qa_outputs.*`` and, with ``--bilstm``, ``bilstm.*``)."""
    common_save_model(model, encoder, folder, architectures=["BertForQuestionAnswering"])


def load_span_head(model: SpanQuestionAnswering, checkpoint: str) -> bool:
    """Copy ``qa_outputs.*`` (and ``bilstm.*``) from the checkpoint's weights into ``model`` when
    they are there (a folder :func:`save_model` wrote, or a transformers
    ``BertForQuestionAnswering``); True if so."""
    weights, source = hf.read_weights(checkpoint)
    head = {k: v for k, v in weights.items() if k.startswith(("qa_outputs.", "bilstm."))}
    if not any(k.startswith("qa_outputs.") for k in head):
        return False
    has_bilstm = any(k.startswith("bilstm.") for k in head)
    if has_bilstm != (model.bilstm is not None):
        raise FinetuneError(
            f"{source}: its span head was trained {'with' if has_bilstm else 'without'} a BiLSTM: "
            f"{'give' if has_bilstm else 'leave out'} --bilstm to continue from it"
        )
    own = {k: v for k, v in model.state_dict().items() if k.startswith(("qa_outputs.", "bilstm."))}
    try:
        model.load_state_dict({**model.state_dict(), **{k: head[k] for k in own if k in head}})
    except RuntimeError as err:
        raise FinetuneError(f"{source}: its span head does not fit this model: {err}") from None
    return True


@dataclasses.dataclass(frozen=True)
class SquadSettings:
    """The windowing, answer-search and head settings of one run (``metrics.json`` records them)."""

    version: str = "1.1"
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    bilstm: bool = False  # a BiLSTM between the encoder and the span head (SpanQuestionAnswering)

    def check(self) -> None:
        """Refuse impossible settings before any file is read, naming every problem at once."""
        problems = []
        if self.version not in VERSIONS:
            problems.append(f"--version must be one of {', '.join(VERSIONS)}, got {self.version!r}")
        for flag, value in (
            ("--doc-stride", self.doc_stride),
            ("--max-query-length", self.max_query_length),
            ("--n-best-size", self.n_best_size),
            ("--max-answer-length", self.max_answer_length),
        ):
            if value < 1:
                problems.append(f"{flag} must be at least 1, got {value}")
        if self.max_seq_length < self.max_query_length + 4:
            problems.append(
                f"--max-seq-length {self.max_seq_length} leaves no room for the context after a question "
                f"of up to --max-query-length {self.max_query_length} tokens: lower --max-query-length"
            )
        if problems:
            raise SettingsError("; ".join(problems))

    @property
    def window(self) -> dict[str, int]:
        """The keyword arguments of :func:`build_features` that shape the windows."""
        return {
            "max_seq_length": self.max_seq_length,
            "doc_stride": self.doc_stride,
            "max_query_length": self.max_query_length,
        }

    @property
    def with_null(self) -> bool:
        """Whether questions may be unanswerable (v2.0)."""
        return self.version == "2.0"


def _train(
    model: SpanQuestionAnswering,
    tokenizer: Tokenizer,
    examples: Sequence[SquadExample],
    settings: SquadSettings,
    config: TrainConfig,
) -> dict[str, Any]:
    """Fine-tune ``model`` on ``examples``; the counts and training figures for ``metrics.json``."""
    features = build_features(examples, tokenizer, training=True, **settings.window)
    used = len({f.example_index for f in features})
    result = fit(model, [_model_inputs(f, True) for f in features], config)
    return {
        "num_examples_read": len(examples),
        "num_examples_used": used,
        "num_examples_skipped": len(examples) - used,
        "num_features": len(features),
        **result.to_dict(),
    }


def _answer(
    model: SpanQuestionAnswering,
    tokenizer: Tokenizer,
    examples: Sequence[SquadExample],
    settings: SquadSettings,
    config: TrainConfig,
) -> tuple[dict[str, ExamplePrediction], int]:
    """Every example's n-best answers from ``model``, and the number of windows it read."""
    features = build_features(examples, tokenizer, training=False, **settings.window)
    logits = predict(
        model,
        [_model_inputs(f, False) for f in features],
        batch_size=config.eval_batch_size,
        device=config.device,
        precision=config.precision,
        progress=config.progress,
    )
    answers = predict_answers(
        examples,
        features,
        logits,
        n_best_size=settings.n_best_size,
        max_answer_length=settings.max_answer_length,
        with_null=settings.with_null,
    )
    return answers, len(features)


def _write_scored_predictions(
    output: str, examples: Sequence[SquadExample], answers: dict[str, ExamplePrediction], with_null: bool
) -> dict[str, Any]:
    """Write the prediction files into ``output``; the official metrics (v2.0: at null threshold 0
    and at the threshold tuned for F1 on these examples)."""
    _write_json(f"{output}/nbest_predictions.json", {qid: p.nbest for qid, p in answers.items()})
    data = _as_data(examples)
    metrics: dict[str, Any] = {}
    if with_null:
        best = {qid: p.best_non_null for qid, p in answers.items()}
        null_odds = {qid: p.null_odds for qid, p in answers.items()}
        predictions = answers_at_threshold(best, null_odds, 0.0)
        threshold = tune_null_threshold(data, best, null_odds)
        tuned = answers_at_threshold(best, null_odds, threshold)
        _write_json(f"{output}/null_odds.json", null_odds)
        _write_json(f"{output}/predictions_tuned_threshold.json", tuned)
        metrics["threshold_0"] = evaluate_v2(data, predictions, null_odds)
        metrics["tuned_threshold"] = {"null_score_diff_threshold": threshold, **evaluate_v2(data, tuned)}
    else:
        predictions = {qid: p.nbest[0]["text"] for qid, p in answers.items()}
        metrics.update(evaluate_v1(data, predictions))
    _write_json(f"{output}/predictions.json", predictions)
    return metrics


def run_squad(
    version: str,
    train_file: str | None,
    predict_file: str,
    checkpoint: str,
    output: str,
    *,
    epochs: float = 2.0,
    lr: float = 3e-5,
    batch_size: int = 32,
    seed: int = 42,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    max_train_examples: int | None = None,
    max_predict_examples: int | None = None,
    precision: str = "auto",
    device: str = "auto",
    progress: bool | None = None,
    bilstm: bool = False,
    before_training: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune ``checkpoint`` on ``train_file`` (skipped when None), answer ``predict_file``, score.
    ``bilstm`` adds a randomly initialised BiLSTM under the span head (:class:`SpanQuestionAnswering`).

    Every path may be local or an fsspec URL (``gs://``, ``s3://``). Writes into ``output``:
    ``predictions.json`` (question id -> answer; v2.0 at null threshold 0),
    ``nbest_predictions.json``, for v2.0 ``null_odds.json`` and ``predictions_tuned_threshold.json``
    (at the threshold tuned for F1 on ``predict_file``), after training the fine-tuned model in
    ``model/`` (:func:`save_model`; as ``checkpoint`` it restores the span head too), and last
    ``metrics.json``, which it returns. v1.1 metrics: ``exact_match``, ``f1``; v2.0: ``threshold_0``
    (``evaluate-v2.0.py`` on predictions.json with null_odds.json) and ``tuned_threshold`` (its
    ``null_score_diff_threshold`` and the official metrics there). Counts of bad answer offsets and
    skipped examples are under ``train`` and ``predict``. ``max_*_examples`` keep the first N
    questions of a file (scoring covers only those). ``before_training`` (the CLI's ``--overwrite``
    clean-up) is called once the files, checkpoint and settings have passed their checks, right
    before training (or, without ``train_file``, before predicting).
    """
    settings = SquadSettings(
        version, max_seq_length, doc_stride, max_query_length, n_best_size, max_answer_length, bilstm
    )
    settings.check()
    config = TrainConfig(
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        seed=seed,
        precision=precision,
        device=device,
        progress=progress,
    )
    files = SquadFiles(train_file, predict_file, max_train_examples, max_predict_examples)
    return _run(files, checkpoint, output.rstrip("/"), settings, config, before_training)


@dataclasses.dataclass(frozen=True)
class SquadFiles:
    """The files of one run, and how many of their first questions it uses (None: all)."""

    train_file: str | None
    predict_file: str
    max_train_examples: int | None = None
    max_predict_examples: int | None = None

    def read(
        self, version: str
    ) -> tuple[list[SquadExample], SquadStats | None, list[SquadExample], SquadStats]:
        """The training examples and their stats (none without a training file), then the predict
        file's: both read before any model is loaded, so that a bad file fails at once."""
        train, train_stats = read_squad(self.train_file, version) if self.train_file else ([], None)
        predict, predict_stats = read_squad(self.predict_file, version)
        return (
            train[: self.max_train_examples],
            train_stats,
            predict[: self.max_predict_examples],
            predict_stats,
        )


def _run(
    files: SquadFiles,
    checkpoint: str,
    output: str,
    settings: SquadSettings,
    config: TrainConfig,
    before_training: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """:func:`run_squad` once its settings are checked."""
    train_examples, train_stats, predict_examples, predict_stats = files.read(settings.version)
    encoder = load_encoder(checkpoint, seed=config.seed)
    check_max_seq_length(settings.max_seq_length, encoder)
    check_casing(encoder, [e.context for e in train_examples or predict_examples])
    tokenizer = encoder.tokenizer.tokenizer
    model = SpanQuestionAnswering(encoder.model, seed=config.seed, bilstm=settings.bilstm)
    head_loaded = load_span_head(model, encoder.source)
    if before_training is not None:
        before_training()
    fs, root = fsspec.core.url_to_fs(output)
    fs.makedirs(root, exist_ok=True)
    metrics: dict[str, Any] = {
        "task": "squad",
        "version": settings.version,
        "checkpoint": encoder.source,
        "span_head": "from the checkpoint" if head_loaded else "fresh",
    }
    if files.train_file:
        trained = _train(model, tokenizer, train_examples, settings, config)
        save_model(model, encoder, f"{output}/{MODEL_FOLDER}")
        metrics["train"] = {"file": files.train_file, **train_stats.to_dict(), **trained}
    answers, num_features = _answer(model, tokenizer, predict_examples, settings, config)
    metrics.update(_write_scored_predictions(output, predict_examples, answers, settings.with_null))
    metrics["predict"] = {
        "file": files.predict_file,
        **predict_stats.to_dict(),
        "num_examples_predicted": len(predict_examples),
        "num_features": num_features,
    }
    limits = {
        "max_train_examples": files.max_train_examples,
        "max_predict_examples": files.max_predict_examples,
    }
    metrics["settings"] = {**config.to_dict(), **dataclasses.asdict(settings), **limits}
    del metrics["settings"]["version"]
    _write_json(f"{output}/metrics.json", metrics)
    return metrics


def _read_mapping(path: str, kind: type | tuple[type, ...], what: str) -> dict[str, Any]:
    obj = _read_json(path, f"give one JSON object mapping each question id to {what}")
    if not isinstance(obj, dict) or not all(
        isinstance(v, kind) and not isinstance(v, bool) for v in obj.values()
    ):
        raise SquadFormatError(f"{path}: must be one JSON object mapping each question id to {what}")
    return obj


def evaluate_file(
    version: str, data_file: str, predictions_file: str, null_odds_file: str | None = None
) -> dict[str, Any]:
    """Score a prediction file as the official ``evaluate-v1.1.py`` / ``evaluate-v2.0.py`` do.

    v1.1: ``exact_match``, ``f1``. v2.0: ``exact``, ``f1``, ``HasAns_*``, ``NoAns_*``. Both: ``total``
    and ``unanswered`` (questions without a prediction, each scored 0). v2.0
    and given ``null_odds_file``, ``best_exact``/``best_f1`` with their thresholds (see
    :mod:`finetune.squad_eval`). Raises :class:`SquadFormatError` naming a malformed file.
    """
    if version not in VERSIONS:
        raise FinetuneError(f"--version must be one of {', '.join(VERSIONS)}, got {version!r}")
    read_squad(data_file, version)  # Checks the layout, naming the file and place of any problem.
    data = load_squad_json(data_file)
    predictions = _read_mapping(predictions_file, str, "an answer string")
    try:
        if version == "1.1":
            if null_odds_file is not None:
                raise FinetuneError("null odds are a SQuAD v2.0 notion: leave them out for --version 1.1")
            return evaluate_v1(data, predictions)
        null_odds = (
            None if null_odds_file is None else _read_mapping(null_odds_file, (int, float), "a number")
        )
        return evaluate_v2(data, predictions, null_odds)
    except FinetuneError:
        raise
    except ValueError as err:
        raise FinetuneError(f"{predictions_file} against {data_file}: {err}") from None
