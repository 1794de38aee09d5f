"""SQuAD reading, windowed features (on the real fixtures), the span head and the n-best search."""

from __future__ import annotations

import json

import pytest
import torch

from finetune.sequences import doc_windows, max_context_windows
from finetune.squad import (
    NO_SPAN_NULL_ODDS,
    SpanQuestionAnswering,
    SquadConfig,
    SquadFeature,
    answers_at_threshold,
    build_features,
    char_span_to_tokens,
    predict_example,
    read_squad,
)
from schemas.commands import CommandError
from tests.conftest import SHARED_DATA, require

SQUAD_V1 = SHARED_DATA / "squad" / "allennlp-models_test_fixtures_squad.json"
SQUAD_V2 = SHARED_DATA / "squad" / "allennlp-models_test_fixtures_squad2.json"
VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"


@pytest.fixture(scope="module")
def tokenizer():
    from wordpiece.tokenizer import WordPieceTokenizer

    return WordPieceTokenizer.load(str(require(VOCAB)), cased=False).tokenizer


# --- windows ---------------------------------------------------------------------------------------


def test_doc_windows_follow_the_original_stride():
    assert doc_windows(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]
    assert doc_windows(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert doc_windows(5, 10, 3) == [(0, 5)]
    assert doc_windows(0, 4, 2) == [(0, 0)]
    # A stride longer than the window never skips tokens.
    assert doc_windows(9, 3, 5) == [(0, 3), (3, 3), (6, 3)]


@pytest.mark.parametrize(
    ("num_tokens", "size", "stride"), [(1, 1, 1), (37, 8, 3), (100, 20, 7), (64, 16, 16)]
)
def test_doc_windows_cover_every_token_and_each_has_one_max_context_window(num_tokens, size, stride):
    windows = doc_windows(num_tokens, size, stride)
    covered = {start + i for start, length in windows for i in range(length)}
    assert covered == set(range(num_tokens))
    assert all(length <= size for _, length in windows)
    owners = max_context_windows(windows)
    assert len(owners) == num_tokens
    for position, owner in enumerate(owners):
        start, length = windows[owner]
        assert start <= position < start + length


def test_the_max_context_window_is_the_centred_one_the_first_on_ties():
    # Token 3: window 0 has 3 left, 0 right (score 0.04); window 1 has 1 left, 2 right (1.04).
    # Token 2: window 0 min(2, 1) = 1; window 1 min(0, 3) = 0. Token 4, 5: only window 1.
    assert max_context_windows([(0, 4), (2, 4)]) == [0, 0, 0, 1, 1, 1]
    assert max_context_windows([(0, 4), (2, 4), (4, 2)]) == [0, 0, 0, 1, 1, 1]  # a tie: the first


def test_max_context_windows_are_those_of_the_reference_rule_in_linear_time():
    """The reference rule looks at every window for every token; here each window once."""
    windows = doc_windows(50, 8, 3)
    reference = []
    for position in range(50):
        scores = [
            (min(position - s, s + n - 1 - position) + 0.01 * n, -w)
            for w, (s, n) in enumerate(windows)
            if s <= position < s + n
        ]
        reference.append(-max(scores)[1])
    assert max_context_windows(windows) == reference
    assert len(max_context_windows(doc_windows(1_000_000, 384, 128))) == 1_000_000  # well under a second


def test_char_span_to_tokens():
    offsets = [(0, 5), (6, 8), (8, 11), (12, 13)]  # "hello ab ##cde !"
    assert char_span_to_tokens(offsets, 6, 11) == (1, 2)
    assert char_span_to_tokens(offsets, 9, 10) == (2, 2)  # inside a token: the whole token
    assert char_span_to_tokens(offsets, 5, 6) is None  # only the space
    assert char_span_to_tokens(offsets, 0, 13) == (0, 3)


# --- reading ---------------------------------------------------------------------------------------


def write_squad(path, qas, context="Denver won the game in 2016."):
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}))
    return str(path)


def test_bad_answer_offsets_are_counted_and_skipped_for_training(tmp_path, tokenizer):
    qas = [
        {"id": "good", "question": "Who won?", "answers": [{"text": "Denver", "answer_start": 0}]},
        {"id": "bad", "question": "When?", "answers": [{"text": "2016", "answer_start": 3}]},
        {
            "id": "second-bad",
            "question": "What?",
            "answers": [{"text": "the game", "answer_start": 11}, {"text": "game", "answer_start": 99}],
        },
    ]
    examples, stats = read_squad(write_squad(tmp_path / "train.json", qas), "1.1")
    assert stats.num_examples == 3
    assert stats.num_answers_bad_offset == 2 and stats.num_examples_bad_offset == 2
    assert stats.bad_offset_ids == ["bad", "second-bad"]
    assert examples[1].answer_start is None and examples[1].answers == ("2016",)  # still scored
    assert examples[2].answer_text == "the game"  # only a later answer is bad: still trained on
    config = SquadConfig(max_seq_length=32, doc_stride=8, max_query_length=8)
    features = build_features(examples, tokenizer, config, training=True)
    assert {f.example_index for f in features} == {0, 2}
    assert len(build_features(examples, tokenizer, config)) == 3


@pytest.mark.parametrize(
    ("qa", "message"),
    [
        (
            {"question": "q", "answers": []},
            r"data\[0\]\.paragraphs\[0\]\.qas\[0\]: the field 'id' is missing",
        ),
        ({"id": "x", "answers": []}, r"question 'x': the field 'question' is missing"),
        ({"id": "x", "question": "q"}, r"question 'x': the field 'answers' is missing"),
        (
            {"id": "x", "question": "q", "answers": [{"text": "a"}]},
            r"question 'x', answer 0: the field 'answer_start'",
        ),
        ({"id": "x", "question": "q", "answers": []}, r"question 'x': has no answers; SQuAD v1.1 needs one"),
        ({"id": 7, "question": "q", "answers": []}, r"qas\[0\]: the field 'id' is a int, not str"),
    ],
)
def test_missing_fields_name_the_file_the_question_and_the_field(tmp_path, qa, message):
    path = write_squad(tmp_path / "dev.json", [qa])
    with pytest.raises(CommandError, match=r"dev\.json: (data\[0\]\.paragraphs\[0\]\.)?" + message):
        read_squad(path, "1.1")


def test_missing_context_and_bad_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"qas": []}]}]}))
    with pytest.raises(
        CommandError, match=r"x\.json: data\[0\]\.paragraphs\[0\]: the field 'context' is missing"
    ):
        read_squad(str(path), "2.0")
    path.write_text("{not json")
    with pytest.raises(CommandError, match=r"x\.json: not valid JSON"):
        read_squad(str(path), "2.0")


# --- features on the real fixtures -----------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.1", "2.0"])
@pytest.mark.parametrize(("max_seq_length", "doc_stride"), [(384, 128), (64, 16)])
def test_labels_map_back_to_the_answer_text(tokenizer, version, max_seq_length, doc_stride):
    examples, stats = read_squad(require(SQUAD_V1 if version == "1.1" else SQUAD_V2), version)
    assert stats.num_answers_bad_offset == 0
    config = SquadConfig(max_seq_length=max_seq_length, doc_stride=doc_stride, max_query_length=24)
    features = build_features(examples, tokenizer, config, training=True)
    labelled = set()
    for feature in features:
        assert len(feature.input_ids) <= max_seq_length
        assert len(feature.input_ids) == len(feature.token_type_ids) == len(feature.token_offsets)
        example = examples[feature.example_index]
        if feature.start_position == 0:
            assert feature.end_position == 0
            continue
        offsets = feature.token_offsets
        text = example.context[offsets[feature.start_position][0] : offsets[feature.end_position][1]]
        # Token boundaries fall on the answer's ("Nieuwl" is ni ##eu ##wl of Nieuwland).
        assert text == example.answer_text
        labelled.add(feature.example_index)
    answerable = {i for i, e in enumerate(examples) if not e.is_impossible}
    if max_seq_length == 384:
        assert labelled == answerable  # every answer fits in a window
    else:
        # Answers shorter than a window are in one, unless they are too long for it.
        too_long = {i for i in answerable if len(tokenizer.encode(examples[i].answer_text).ids) > 30}
        assert labelled == answerable - too_long


def test_windows_cover_the_real_contexts(tokenizer):
    examples, _ = read_squad(require(SQUAD_V1), "1.1")
    features = build_features(
        examples, tokenizer, SquadConfig(max_seq_length=64, doc_stride=16, max_query_length=16)
    )
    for index, example in enumerate(examples):
        windows = [f for f in features if f.example_index == index]
        assert len(windows) > 1
        context_offsets = tokenizer.encode(example.context, add_special_tokens=False).offsets
        covered = [o for f in windows for o in f.token_offsets if o is not None]
        assert set(covered) == set(context_offsets)
        owned = [o for f in windows for o, own in zip(f.token_offsets, f.max_context, strict=True) if own]
        assert sorted(owned) == sorted(context_offsets)  # each context token owned by one window
        for f in windows:
            # [CLS] question (at most 16 tokens) [SEP] context [SEP]; segment 1 from the context on.
            first_context = f.token_type_ids.index(1)
            assert first_context <= 18 and f.token_offsets[first_context - 1] is None
            assert f.input_ids[0] == tokenizer.token_to_id("[CLS]")
            assert f.input_ids[-1] == f.input_ids[first_context - 1] == tokenizer.token_to_id("[SEP]")


def test_impossible_questions_label_cls(tokenizer):
    examples, stats = read_squad(require(SQUAD_V2), "2.0")
    assert stats.num_impossible == 1 and stats.num_duplicate_ids == 1
    config = SquadConfig(max_seq_length=64, doc_stride=16, max_query_length=24)
    features = build_features(examples, tokenizer, config, training=True)
    impossible = [f for f in features if examples[f.example_index].is_impossible]
    assert impossible and all(f.start_position == f.end_position == 0 for f in impossible)


# --- the span head ---------------------------------------------------------------------------------


def test_span_head_is_independent_of_padding():
    from pretrain.model import BertConfig, BertModel

    config = BertConfig.preset(
        "tiny", vocab_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    model = SpanQuestionAnswering(BertModel(config), seed=0).eval()
    ids = torch.tensor([[2, 5, 6, 3, 7, 8, 9, 3]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    alone = model(ids, types, torch.ones_like(ids)).logits
    padded_ids = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], 1)
    mask = torch.tensor([[1] * 8 + [0] * 4])
    padded = model(padded_ids, torch.cat([types, torch.zeros(1, 4, dtype=torch.long)], 1), mask)
    for a, b in zip(alone, padded.logits, strict=True):
        torch.testing.assert_close(a, b[:, :8], atol=1e-5, rtol=1e-5)
        assert (b[:, 8:] == -10000.0).all()
    labels = torch.tensor([5]), torch.tensor([6])
    loss = model(padded_ids, None, mask, *labels).loss
    assert loss.ndim == 0 and torch.isfinite(loss)


# --- the n-best search -----------------------------------------------------------------------------

CONTEXT = "alpha beta gamma delta epsilon"
WORD_OFFSETS = [(0, 5), (6, 10), (11, 16), (17, 22), (23, 30)]


def window(first: int, count: int, max_context: list[bool] | None = None, index: int = 0) -> SquadFeature:
    """[CLS] q [SEP] + words first..first+count-1 + [SEP]."""
    offsets = [None, None, None, *WORD_OFFSETS[first : first + count], None]
    return SquadFeature(
        example_index=0,
        window_index=index,
        input_ids=[0] * len(offsets),
        token_type_ids=[0] * len(offsets),
        token_offsets=offsets,
        max_context=max_context or [o is not None for o in offsets],
    )


def logits(size: int, peaks: dict[int, float]) -> list[float]:
    return [peaks.get(i, 0.0) for i in range(size)]


def test_best_span_and_text_from_character_offsets():
    feature = window(0, 5)  # context tokens at 3..7
    start = logits(9, {4: 5.0, 1: 9.0})  # 1 is the question: never a start
    end = logits(9, {5: 4.0, 8: 9.0})  # 8 is the final [SEP]
    result = predict_example(CONTEXT, [(feature, start, end)], n_best_size=5)
    assert result.nbest[0]["text"] == "beta gamma"
    assert result.nbest[0]["start_logit"] == 5.0 and result.nbest[0]["end_logit"] == 4.0
    assert sum(e["probability"] for e in result.nbest) == pytest.approx(1.0)
    assert result.null_odds is None


def test_end_before_start_and_too_long_spans_are_skipped():
    feature = window(0, 5)
    start = logits(9, {6: 5.0, 3: 1.0})  # delta, alpha
    end = logits(9, {4: 6.0, 7: 2.0})  # beta (before delta), epsilon
    result = predict_example(CONTEXT, [(feature, start, end)], n_best_size=5)
    assert result.nbest[0]["text"] == "delta epsilon"
    # Among the 5 best starts (delta, alpha, then ties) and ends no 1-token span: the placeholder.
    short = predict_example(CONTEXT, [(feature, start, end)], n_best_size=5, max_answer_length=1)
    assert [e["text"] for e in short.nbest] == ["empty"]
    # With every position a candidate, the best 1-token span is beta (0 + 6), then delta (5 + 0).
    short = predict_example(CONTEXT, [(feature, start, end)], n_best_size=9, max_answer_length=1)
    assert [e["text"] for e in short.nbest[:2]] == ["beta", "delta"]
    assert all(len(e["text"].split()) == 1 for e in short.nbest)


def test_max_context_rule_picks_the_window_where_the_start_is_centred():
    # Two windows over words 0-3 and 1-4; "beta" (word 1) is max-context only in the first.
    first = window(0, 4, [False] * 3 + [True, True, True, False] + [False])
    second = window(1, 4, [False] * 3 + [False, False, True, True] + [False], index=1)
    # The second window likes "beta gamma" more, but its start is not max-context there.
    first_logits = (logits(8, {4: 2.0}), logits(8, {5: 2.0}))
    second_logits = (logits(8, {3: 9.0, 5: 1.0}), logits(8, {4: 9.0, 6: 1.0}))
    result = predict_example(CONTEXT, [(first, *first_logits), (second, *second_logits)], n_best_size=3)
    assert result.nbest[0]["text"] == "beta gamma"
    assert result.nbest[0]["start_logit"] == 2.0  # from the first window
    assert {e["text"] for e in result.nbest} >= {"delta epsilon"}


def test_null_score_is_the_minimum_cls_score_and_odds_drive_the_threshold():
    a, b = window(0, 3), window(2, 3, index=1)
    a_logits = (logits(7, {0: 3.0, 3: 2.0}), logits(7, {0: 3.0, 4: 2.0}))  # null 6, "alpha beta" 4
    b_logits = (logits(7, {0: 1.0}), logits(7, {0: 0.5}))  # null 1.5: the minimum
    result = predict_example(CONTEXT, [(a, *a_logits), (b, *b_logits)], n_best_size=5, with_null=True)
    assert result.best_non_null == "alpha beta"
    assert result.null_odds == pytest.approx(1.5 - 4.0)
    null = next(e for e in result.nbest if e["text"] == "")
    assert (null["start_logit"], null["end_logit"]) == (1.0, 0.5)
    best = {"q": result.best_non_null}
    odds = {"q": result.null_odds}
    assert answers_at_threshold(best, odds, 0.0) == {"q": "alpha beta"}
    assert answers_at_threshold(best, odds, -3.0) == {"q": ""}


def test_no_valid_span():
    feature = window(0, 2)
    flat = logits(6, {})
    v1 = predict_example(CONTEXT, [(feature, flat, flat)], max_answer_length=0)
    assert [e["text"] for e in v1.nbest] == ["empty"]  # the original's placeholder
    v2 = predict_example(CONTEXT, [(feature, flat, flat)], max_answer_length=0, with_null=True)
    assert v2.best_non_null == "" and v2.null_odds == NO_SPAN_NULL_ODDS
