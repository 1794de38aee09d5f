"""SQuAD's official metrics, as ``evaluate-v1.1.py`` and ``evaluate-v2.0.py`` compute them, each
version's quirks kept; unlike the v2.0 script, a question without a prediction scores 0 and counts."""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable, Mapping

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)

NA_PROB_THRESH = 1.0  # evaluate-v2.0.py's default: null odds above it count as predicting no answer


def normalize_answer(text: str) -> str:
    """Lower-case, remove punctuation, remove the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _token_f1(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
    common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match_v1(prediction: str, gold: str) -> float:
    """1.0 when the normalised strings are equal, else 0.0 (``evaluate-v1.1.py``)."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_v1(prediction: str, gold: str) -> float:
    """Token F1 of the normalised strings; 0.0 when either is empty (``evaluate-v1.1.py``)."""
    return _token_f1(normalize_answer(prediction).split(), normalize_answer(gold).split())


def f1_v2(prediction: str, gold: str) -> float:
    """Token F1; when either side is empty, 1.0 if both are and 0.0 otherwise (``evaluate-v2.0.py``)."""
    prediction_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not prediction_tokens or not gold_tokens:
        return float(prediction_tokens == gold_tokens)
    return _token_f1(prediction_tokens, gold_tokens)


def _questions(data: Iterable[Mapping]) -> Iterable[Mapping]:
    for article in data:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def evaluate_v1(data: Iterable[Mapping], predictions: Mapping[str, str]) -> dict[str, float]:
    """``evaluate-v1.1.py``'s ``{"exact_match", "f1"}``, with ``total`` and ``unanswered`` (scored 0)."""
    exact_match = f1 = 0.0
    total = unanswered = 0
    for qa in _questions(data):
        total += 1
        if qa["id"] not in predictions:  # scores 0, as the official script
            unanswered += 1
            continue
        golds = [answer["text"] for answer in qa["answers"]]
        prediction = predictions[qa["id"]]
        exact_match += max((exact_match_v1(prediction, g) for g in golds), default=0.0)
        f1 += max((f1_v1(prediction, g) for g in golds), default=0.0)
    if total == 0:
        raise ValueError("the data has no questions to score")
    return {
        "exact_match": 100.0 * exact_match / total,
        "f1": 100.0 * f1 / total,
        "total": total,
        "unanswered": unanswered,
    }


def has_answer_by_id(data: Iterable[Mapping]) -> dict[str, bool]:
    """Question id -> whether it has gold answers (``make_qid_to_has_ans``; the last repeat wins)."""
    return {qa["id"]: bool(qa["answers"]) for qa in _questions(data)}


def raw_scores_v2(
    data: Iterable[Mapping], predictions: Mapping[str, str]
) -> tuple[dict[str, float], dict[str, float]]:
    """Per predicted question id: exact and F1 before any null threshold (``get_raw_scores``)."""
    exact: dict[str, float] = {}
    f1: dict[str, float] = {}
    for qa in (qa for qa in _questions(data) if qa["id"] in predictions):
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        exact[qa["id"]] = max(exact_match_v1(predictions[qa["id"]], g) for g in golds)
        f1[qa["id"]] = max(f1_v2(predictions[qa["id"]], g) for g in golds)
    return exact, f1


def apply_null_threshold(
    scores: Mapping[str, float],
    null_odds: Mapping[str, float],
    has_answer: Mapping[str, bool],
    threshold: float,
) -> dict[str, float]:
    """Scores with each question whose null odds exceed ``threshold`` counted as answered ``""``."""
    return {
        qid: (float(not has_answer[qid]) if null_odds[qid] > threshold else score)
        for qid, score in scores.items()
    }


def _summary(exact: Mapping[str, float], f1: Mapping[str, float], qids: list[str]) -> dict[str, float]:
    total = len(qids)
    return {
        "exact": 100.0 * sum(exact[q] for q in qids) / total,
        "f1": 100.0 * sum(f1[q] for q in qids) / total,
        "total": total,
    }


def best_threshold(
    predictions: Mapping[str, str], scores: Mapping[str, float], null_odds: Mapping, has_answer: Mapping
) -> tuple[float, float]:
    """``evaluate-v2.0.py``'s ``find_best_thresh``: (best score in percent, its threshold), from
    "every question answered no-answer" (threshold 0.0, the script's quirk) letting questions
    answer in increasing order of null odds."""
    current = best = sum(1 for qid in has_answer if not has_answer[qid] and qid in predictions)
    threshold = 0.0
    for qid in sorted(null_odds, key=lambda k: null_odds[k]):
        if qid not in scores or qid not in predictions:
            continue  # A question without a prediction scores 0 at every threshold.
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best = current
            threshold = null_odds[qid]
    return 100.0 * best / len(scores), threshold


def evaluate_v2(
    data: list[Mapping],
    predictions: Mapping[str, str],
    null_odds: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """``evaluate-v2.0.py``'s output (with ``best_*`` given ``null_odds``); a question without a
    prediction scores 0 and counts (``unanswered``)."""
    has_answer = has_answer_by_id(data)
    exact_raw, f1_raw = raw_scores_v2(data, predictions)
    if not exact_raw:
        raise ValueError("no question of the data has a prediction: nothing to score")
    odds = null_odds if null_odds is not None else {qid: 0.0 for qid in predictions}
    missing = [qid for qid in exact_raw if qid not in odds]
    if missing:
        raise ValueError(f"the null odds have no entry for question {missing[0]!r} ({len(missing)} missing)")
    unanswered = {qid: 0.0 for qid in has_answer if qid not in exact_raw}
    exact = {**apply_null_threshold(exact_raw, odds, has_answer, NA_PROB_THRESH), **unanswered}
    f1 = {**apply_null_threshold(f1_raw, odds, has_answer, NA_PROB_THRESH), **unanswered}
    exact_raw, f1_raw = {**exact_raw, **unanswered}, {**f1_raw, **unanswered}
    result: dict[str, float] = _summary(exact, f1, list(exact))
    result["unanswered"] = len(unanswered)
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [qid for qid, has in has_answer.items() if has is wanted and qid in exact]
        if qids:
            result.update({f"{prefix}_{k}": v for k, v in _summary(exact, f1, qids).items()})
    if null_odds is not None:
        result["best_exact"], result["best_exact_thresh"] = best_threshold(
            predictions, exact_raw, odds, has_answer
        )
        result["best_f1"], result["best_f1_thresh"] = best_threshold(predictions, f1_raw, odds, has_answer)
    return result


def tune_null_threshold(
    data: list[Mapping], answers: Mapping[str, str], null_odds: Mapping[str, float]
) -> float:
    """The null-odds threshold that maximises F1 on ``data`` when a question is answered ``""`` if
    its odds exceed it and ``answers[qid]`` (its best non-null answer) otherwise: the smallest odds
    value reaching the best F1, or 1.0 below the smallest odds where answering nothing is best (the
    official search would report 0.0, which need not reproduce its best score)."""
    has_answer = has_answer_by_id(data)
    _, f1_answered = raw_scores_v2(data, answers)
    qids = sorted((q for q in f1_answered if q in null_odds), key=lambda q: null_odds[q])
    if not qids:
        raise ValueError("no question of the data has both an answer and null odds: cannot tune")
    current = best = sum(float(not has_answer[q]) for q in qids)
    threshold = null_odds[qids[0]] - 1.0
    for i, qid in enumerate(qids):
        current += f1_answered[qid] - float(not has_answer[qid])
        if i + 1 < len(qids) and null_odds[qids[i + 1]] == null_odds[qid]:
            continue  # A threshold answers every question with equal odds at once.
        if current > best + 1e-12:
            best, threshold = current, null_odds[qid]
    return threshold
