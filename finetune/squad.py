"""SQuAD v1.1 and v2.0 as the paper (Sections 4.2, 4.3) and google-research/bert ``run_squad.py``."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from finetune.config import FitConfig
from finetune.encoder import prepare_encoder, read_head, save_model
from finetune.heads import BiLSTM, TaskOutput, seeded_linear
from finetune.inputs import check_examples, input_json
from finetune.loop import fit, predict
from finetune.sequences import doc_windows, max_context_windows
from finetune.squad_eval import evaluate_v1, evaluate_v2, tune_null_threshold
from pretrain.model import BertModel
from schemas import storage
from schemas.commands import InputError, UsageError
from schemas.inputs import boolean, field, items

logger = logging.getLogger(__name__)

VERSIONS = ("1.1", "2.0")
NO_SPAN_NULL_ODDS = 1e6
"""Null odds of a v2.0 example that has no valid non-null span at all (it is always answered ``""``)."""
MAX_BAD_IDS_REPORTED = 20
MODEL_FOLDER = "model"  # as --checkpoint it restores the span head too
HEAD_PREFIXES = ("qa_outputs.", "bilstm.")


@dataclasses.dataclass(frozen=True)
class SquadConfig(FitConfig):
    """A SQuAD run: the fit settings with SQuAD's defaults, the windows, the answer search, ``bilstm``."""

    epochs: float = 2.0
    lr: float = 3e-5
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    bilstm: bool = False
    eval_flag: ClassVar[str] = "--max-predict-examples"

    def problems(self) -> list[str]:
        """:meth:`FitConfig.problems` and the windows' and answer search's."""
        found = super().problems()
        for name in ("doc_stride", "max_query_length", "n_best_size", "max_answer_length"):
            if getattr(self, name) < 1:
                found.append(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.max_seq_length < self.max_query_length + 4:
            found.append(
                f"--max-seq-length {self.max_seq_length} leaves no room for the context after a question "
                f"of up to --max-query-length {self.max_query_length} tokens: lower --max-query-length"
            )
        return found


@dataclasses.dataclass(frozen=True)
class SquadExample:
    """One question on one context: every gold answer text, and the answer trained on (None if none)."""

    qid: str
    question: str
    context: str
    answers: tuple[str, ...]
    is_impossible: bool
    answer_start: int | None
    answer_text: str | None


@dataclasses.dataclass
class SquadStats:
    """Counts from reading one file (``metrics.json`` reports them)."""

    num_examples: int = 0
    num_impossible: int = 0
    num_answers_bad_offset: int = 0
    num_examples_bad_offset: int = 0
    num_duplicate_ids: int = 0
    bad_offset_ids: list[str] = dataclasses.field(default_factory=list)
    duplicate_ids: list[str] = dataclasses.field(default_factory=list)
    """The first repeated ids: predictions are keyed by id, so the questions sharing one share it."""


def read_squad(path: str, version: str) -> tuple[list[SquadExample], SquadStats]:
    """Read and check a SQuAD v1.1 or v2.0 file, every field typed (v2.0's ``is_impossible`` may be
    ``"true"``/``"false"``; by default "has no answers"): one :class:`InputError` naming the file,
    question and field. An ``answer_start`` that misses its text is counted, never fatal."""
    examples: list[SquadExample] = []
    stats = SquadStats()
    seen: set[str] = set()
    for a, article in enumerate(items(input_json(path), "data", f"{path}: the top level")):
        for p, paragraph in enumerate(items(article, "paragraphs", f"{path}: data[{a}]")):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            context = field(paragraph, "context", str, where)
            for q, qa in enumerate(items(paragraph, "qas", where)):
                qid = field(qa, "id", str, f"{where}.qas[{q}]")
                examples.append(_question(qa, context, version, f"{path}: question {qid!r}", stats))
                if qid in seen and len(stats.duplicate_ids) < MAX_BAD_IDS_REPORTED:
                    stats.duplicate_ids.append(qid)
                stats.num_duplicate_ids += qid in seen
                seen.add(qid)
    stats.num_examples = len(examples)
    stats.num_impossible = sum(e.is_impossible for e in examples)
    return examples, stats


def _question(qa: Any, context: str, version: str, where: str, stats: SquadStats) -> SquadExample:
    question = field(qa, "question", str, where)
    answers = [
        (
            field(answer, "text", str, f"{where}, answer {i}"),
            field(answer, "answer_start", int, f"{where}, answer {i}"),
        )
        for i, answer in enumerate(items(qa, "answers", where))
    ]
    is_impossible = version == "2.0" and boolean(qa, "is_impossible", where, default=not answers)
    if not is_impossible and not answers:
        needs = " and is not marked is_impossible" if version == "2.0" else "; SQuAD v1.1 needs one"
        raise InputError(f"{where}: has no answers{needs}")
    bad = [
        i
        for i, (text, start) in enumerate(answers)
        if start < 0 or context[start : start + len(text)] != text
    ]
    stats.num_answers_bad_offset += len(bad)
    if bad:
        stats.num_examples_bad_offset += 1
        if len(stats.bad_offset_ids) < MAX_BAD_IDS_REPORTED:
            stats.bad_offset_ids.append(qa["id"])
        logger.warning("%s: answer_start does not point at the answer text", where)
    trained = not is_impossible and 0 not in bad
    return SquadExample(
        qa["id"],
        question,
        context,
        tuple(text for text, _ in answers),
        is_impossible,
        answers[0][1] if trained else None,
        answers[0][0] if trained else None,
    )


@dataclasses.dataclass(frozen=True)
class SquadFeature:
    """One window of one example. ``token_offsets[i]`` is the ``(start, end)`` character span in
    the context of token ``i`` when it is a context token, else None; ``max_context[i]`` whether
    this window is the one where context token ``i`` has the most context. Labels are token
    indices in ``input_ids`` (0, the ``[CLS]``, for "no answer in this window")."""

    example_index: int
    window_index: int
    input_ids: list[int]
    token_type_ids: list[int]
    token_offsets: list[tuple[int, int] | None]
    max_context: list[bool]
    start_position: int = 0
    end_position: int = 0

    def inputs(self, training: bool) -> dict[str, Any]:
        """The model's inputs (and, ``training``, its targets)."""
        inputs: dict[str, Any] = {"input_ids": self.input_ids, "token_type_ids": self.token_type_ids}
        if training:
            inputs |= {"start_positions": self.start_position, "end_positions": self.end_position}
        return inputs


def char_span_to_tokens(
    offsets: Sequence[tuple[int, int]], start_char: int, end_char: int
) -> tuple[int, int] | None:
    """The first and last token overlapping characters ``[start_char, end_char)``, or None if none does."""
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
    examples: Sequence[SquadExample], tokenizer: Tokenizer, config: SquadConfig, *, training: bool = False
) -> list[SquadFeature]:
    """Every window of every example (``training=True`` adds start/end labels and leaves out the
    answerable examples with no usable answer: a bad offset, or an answer covering no token).
    ``tokenizer`` is a ``tokenizers.Tokenizer`` whose offsets refer to the original text; contexts
    shared by several questions are tokenised once. Linear in each context's length."""
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    contexts = list(dict.fromkeys(e.context for e in examples))
    encoded = dict(zip(contexts, tokenizer.encode_batch(contexts, add_special_tokens=False), strict=True))
    questions = tokenizer.encode_batch_fast([e.question for e in examples], add_special_tokens=False)
    features = []
    for example_index, example in enumerate(examples):
        context_ids, offsets = encoded[example.context].ids, encoded[example.context].offsets
        prefix = [cls_id, *questions[example_index].ids[: config.max_query_length], sep_id]
        answer = None
        if training and example.answer_start is not None:
            end_char = example.answer_start + len(example.answer_text or "")
            answer = char_span_to_tokens(offsets, example.answer_start, end_char)
        if training and not example.is_impossible and answer is None:
            continue  # a bad offset, or an answer with no tokens: nothing to learn from
        windows = doc_windows(len(context_ids), config.max_seq_length - len(prefix) - 1, config.doc_stride)
        owner = max_context_windows(windows)
        for window_index, (start, length) in enumerate(windows):
            start_position = end_position = 0
            if answer is not None and start <= answer[0] and answer[1] < start + length:
                start_position, end_position = (
                    answer[0] - start + len(prefix),
                    answer[1] - start + len(prefix),
                )
            span = range(start, start + length)
            features.append(
                SquadFeature(
                    example_index,
                    window_index,
                    [*prefix, *context_ids[start : start + length], sep_id],
                    [0] * len(prefix) + [1] * (length + 1),
                    [None] * len(prefix) + [tuple(offsets[i]) for i in span] + [None],
                    [False] * len(prefix) + [owner[i] == window_index for i in span] + [False],
                    start_position,
                    end_position,
                )
            )
    return features


def _top_indices(logits: Sequence[float], n: int) -> list[int]:
    return sorted(range(len(logits)), key=lambda i: logits[i], reverse=True)[:n]


@dataclasses.dataclass(frozen=True)
class ExamplePrediction:
    """The n-best answers of one example (best first), its best non-null answer and v2.0's null odds."""

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
    """The n-best span search over all windows of one example (``run_squad.py``'s
    ``write_predictions``): ``windows`` pairs each feature with its start and end logits;
    ``with_null`` (v2.0) adds the null answer ``""`` with the smallest ``[CLS]`` score over the
    windows and computes the null odds."""
    candidates = []  # (score, start_logit, end_logit, text)
    null = None  # (score, start_logit, end_logit)
    for feature, start_logits, end_logits in windows:
        if with_null and (null is None or start_logits[0] + end_logits[0] < null[0]):
            null = (start_logits[0] + end_logits[0], start_logits[0], end_logits[0])
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
    if null is not None:
        candidates.append((*null, ""))
    candidates.sort(key=lambda c: c[0], reverse=True)
    nbest: dict[str, tuple[float, float, float]] = {}
    for score, start_logit, end_logit, text in candidates:
        if len(nbest) < n_best_size and text not in nbest:
            nbest[text] = (score, start_logit, end_logit)
    if null is not None and "" not in nbest:
        nbest[""] = null
    if not nbest:  # no valid span at all: the original's placeholder
        nbest["empty"] = (0.0, 0.0, 0.0)
    top = max(score for score, _, _ in nbest.values())
    exps = {text: math.exp(score - top) for text, (score, _, _) in nbest.items()}
    total = sum(exps.values())
    scored = [
        {"text": text, "probability": exps[text] / total, "start_logit": s, "end_logit": e}
        for text, (_, s, e) in nbest.items()
    ]
    best = next((e for e in scored if e["text"]), None)
    null_odds = None
    if with_null:
        null_odds = NO_SPAN_NULL_ODDS if best is None else null[0] - best["start_logit"] - best["end_logit"]
    return ExamplePrediction(scored, "" if best is None else best["text"], null_odds)


def answers_at_threshold(
    best_non_null: dict[str, str], null_odds: dict[str, float], threshold: float
) -> dict[str, str]:
    """v2.0 predictions: ``""`` where the null odds exceed ``threshold``, else the best non-null answer."""
    return {qid: "" if null_odds[qid] > threshold else text for qid, text in best_non_null.items()}


def predict_answers(
    examples: Sequence[SquadExample],
    features: Sequence[SquadFeature],
    logits: Sequence[tuple[torch.Tensor, torch.Tensor]],
    config: SquadConfig,
    with_null: bool,
) -> dict[str, ExamplePrediction]:
    """:func:`predict_example` for every example by question id (a repeated id keeps its last example)."""
    by_example: dict[int, list] = {}
    for feature, (start, end) in zip(features, logits, strict=True):
        length = len(feature.input_ids)
        by_example.setdefault(feature.example_index, []).append(
            (feature, start[:length].tolist(), end[:length].tolist())
        )
    search = {"n_best_size": config.n_best_size, "max_answer_length": config.max_answer_length}
    return {
        examples[i].qid: predict_example(examples[i].context, windows, **search, with_null=with_null)
        for i, windows in sorted(by_example.items())
    }


class SpanQuestionAnswering(nn.Module):
    """The encoder and ``qa_outputs``, start and end logits from every token's final hidden state
    (the paper's Figure 4 (c); transformers' names), -10000 at padding. ``bilstm``: a one-layer
    BiLSTM between them, the paper's "LTR & No NSP + BiLSTM" (Table 5)."""

    def __init__(self, encoder: BertModel, *, seed: int = 0, bilstm: bool = False) -> None:
        super().__init__()
        self.bert = encoder
        hidden = encoder.config.hidden_size
        self.bilstm = BiLSTM(hidden, hidden, num_layers=1, seed=seed + 1) if bilstm else None
        width = 2 * hidden if bilstm else hidden
        self.qa_outputs = seeded_linear(width, 2, encoder.config.initializer_range, seed)

    def forward(
        self, input_ids, token_type_ids=None, attention_mask=None, start_positions=None, end_positions=None
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


def load_span_head(model: SpanQuestionAnswering, checkpoint: str) -> bool:
    """Copy a span head saved in the checkpoint (``qa_outputs.*``, ``bilstm.*``) into ``model``, if any."""
    head = read_head(checkpoint, HEAD_PREFIXES)
    if not any(k.startswith("qa_outputs.") for k in head):
        return False
    has_bilstm = any(k.startswith("bilstm.") for k in head)
    if has_bilstm != (model.bilstm is not None):
        raise InputError(
            f"{checkpoint}: its span head was trained {'with' if has_bilstm else 'without'} a BiLSTM: "
            f"{'give' if has_bilstm else 'leave out'} --bilstm to continue from it"
        )
    try:
        model.load_state_dict(head, strict=False)
    except RuntimeError as err:
        raise InputError(f"{checkpoint}: its span head does not fit this model: {err}") from None
    return True


def _as_data(examples: Sequence[SquadExample]) -> list[dict]:
    """The examples as the ``data`` list of a SQuAD file (what the official metrics read)."""
    qas = [{"id": e.qid, "answers": [{"text": t} for t in e.answers]} for e in examples]
    return [{"paragraphs": [{"qas": qas}]}]


def _score(
    out: storage.Folder,
    examples: Sequence[SquadExample],
    answers: dict[str, ExamplePrediction],
    with_null: bool,
) -> dict[str, Any]:
    """Write the prediction files into ``out``; the official metrics (v2.0 also at a tuned threshold)."""
    data = _as_data(examples)
    files: dict[str, Any] = {"nbest_predictions.json": {qid: p.nbest for qid, p in answers.items()}}
    if with_null:
        best = {qid: p.best_non_null for qid, p in answers.items()}
        files["null_odds.json"] = null_odds = {qid: p.null_odds for qid, p in answers.items()}
        threshold = tune_null_threshold(data, best, null_odds)
        files["predictions.json"] = answers_at_threshold(best, null_odds, 0.0)
        files["predictions_tuned_threshold.json"] = tuned = answers_at_threshold(best, null_odds, threshold)
        metrics = {
            "threshold_0": evaluate_v2(data, files["predictions.json"], null_odds),
            "tuned_threshold": {"null_score_diff_threshold": threshold, **evaluate_v2(data, tuned)},
        }
    else:
        files["predictions.json"] = {qid: p.nbest[0]["text"] for qid, p in answers.items()}
        metrics = evaluate_v1(data, files["predictions.json"])
    for name, value in files.items():
        out.write_json(name, value, ensure_ascii=False)
    return metrics


def run_squad(
    version: str,
    train_file: str | None,
    predict_file: str,
    checkpoint: str,
    out: storage.Folder,
    config: SquadConfig,
    before_training: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune ``checkpoint`` on ``train_file`` (None: no training) and save it in ``model/``,
    answer ``predict_file`` and score it: the prediction files, and last ``metrics.json``, which it
    returns. ``before_training`` (``--overwrite``'s clean-up) runs once every check has passed."""
    train, train_stats = read_squad(train_file, version) if train_file else ([], None)
    train = train[: config.max_train_examples]
    questions, predict_stats = read_squad(predict_file, version)
    questions = questions[: config.max_eval_examples]
    check_examples(questions, predict_file)
    if train_file:
        check_examples(train, train_file)
    encoder = prepare_encoder(checkpoint, config, [e.context for e in train or questions])
    model = SpanQuestionAnswering(encoder.model, seed=config.seed, bilstm=config.bilstm)
    head_loaded = load_span_head(model, encoder.source)
    if not (train_file or head_loaded):
        raise InputError(
            f"without --train-file the span head is scored as it is, and {encoder.source} has none (it would be "
            "random): give --train-file, or the model/ folder of an earlier `finetune squad` run"
        )
    if before_training is not None:
        before_training()
    metrics: dict[str, Any] = {
        "task": "squad",
        "version": version,
        "checkpoint": encoder.source,
        "span_head": "from the checkpoint" if head_loaded else "fresh",
    }
    tokenizer = encoder.tokenizer.tokenizer
    if train_file:
        features = build_features(train, tokenizer, config, training=True)
        used = len({f.example_index for f in features})
        trained = fit(model, [f.inputs(True) for f in features], config)
        save_model(model, encoder, out.sub(MODEL_FOLDER), architectures=["BertForQuestionAnswering"])
        metrics["train"] = {
            "file": train_file,
            **dataclasses.asdict(train_stats),
            "num_examples_read": len(train),
            "num_examples_used": used,
            "num_examples_skipped": len(train) - used,
            "num_features": len(features),
            **trained.to_dict(),
        }
    features = build_features(questions, tokenizer, config)
    logits = predict(model, [f.inputs(False) for f in features], config)
    answers = predict_answers(questions, features, logits, config, with_null=version == "2.0")
    metrics.update(_score(out, questions, answers, with_null=version == "2.0"))
    metrics["predict"] = {
        "file": predict_file,
        **dataclasses.asdict(predict_stats),
        "num_examples_predicted": len(questions),
        "num_features": len(features),
    }
    metrics["config"] = config.to_dict()
    out.write_json("metrics.json", metrics, ensure_ascii=False)
    return metrics


def _mapping(path: str, kinds: tuple[type, ...], what: str) -> dict[str, Any]:
    """A JSON object mapping each question id to ``what`` (values of ``kinds``)."""
    obj = input_json(path)
    if not isinstance(obj, dict):
        raise InputError(
            f"{path}: a JSON {type(obj).__name__}; give one object mapping each question id to {what}"
        )
    for qid in obj:
        field(obj, qid, kinds, path)
    return obj


def evaluate_file(
    version: str, data_file: str, predictions_file: str, null_odds_file: str | None = None
) -> dict[str, Any]:
    """Score a prediction file as the official ``evaluate-v1.1.py`` / ``evaluate-v2.0.py`` do
    (:mod:`finetune.squad_eval`): v1.1 ``exact_match``, ``f1``; v2.0 ``exact``, ``f1``,
    ``HasAns_*``, ``NoAns_*`` and, with ``null_odds_file``, ``best_exact``/``best_f1`` with their
    thresholds. Both also give ``total`` and ``unanswered`` (questions without a prediction)."""
    if version == "1.1" and null_odds_file is not None:
        raise UsageError("null odds are a SQuAD v2.0 notion: leave --null-odds out for --version 1.1")
    questions, stats = read_squad(data_file, version)
    data, predictions = _as_data(questions), _mapping(predictions_file, (str,), "an answer string")
    repeated = {"num_duplicate_ids": stats.num_duplicate_ids, "duplicate_ids": stats.duplicate_ids}
    repeated = repeated if stats.num_duplicate_ids else {}  # counted and named, as in metrics.json
    try:
        if version == "1.1":
            return {**evaluate_v1(data, predictions), **repeated}
        null_odds = None if null_odds_file is None else _mapping(null_odds_file, (int, float), "a number")
        return {**evaluate_v2(data, predictions, null_odds), **repeated}
    except ValueError as err:
        raise InputError(f"{predictions_file} against {data_file}: {err}") from None
