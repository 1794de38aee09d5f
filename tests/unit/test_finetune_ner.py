"""NER pieces: IOB1 -> IOB2, conlleval's entity scoring (equal to seqeval on real CoNLL-2003
data), reading the four-column layout, and document context around each sentence."""

from __future__ import annotations

import random

import pytest

from finetune.conll import Sentence, entities, read_conll, score, to_iob2
from finetune.heads import IGNORE
from finetune.ner import label_set
from finetune.ner_windows import sentence_features
from schemas.commands import CommandError
from tests.conftest import SHARED_DATA, require

VALID = SHARED_DATA / "ner" / "conll2003" / "valid.txt"


def test_iob1_and_iob2_give_the_same_entities():
    iob1 = ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG", "I-MISC"]
    iob2 = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "B-ORG", "B-MISC"]
    assert to_iob2(iob1) == iob2 and to_iob2(iob2) == iob2
    assert (
        entities(iob1)
        == entities(iob2)
        == {("PER", 0, 1), ("LOC", 3, 3), ("LOC", 4, 4), ("ORG", 5, 5), ("MISC", 6, 6)}
    )


def _perturb(tags: list[str], rng: random.Random, kinds: list[str]) -> list[str]:
    out = list(tags)
    for i in range(len(out)):
        r = rng.random()
        if r < 0.06:
            out[i] = "O"
        elif r < 0.12:
            out[i] = rng.choice(["B-", "I-"]) + rng.choice(kinds)
    return out


def test_scorer_equals_seqeval_on_real_conll():
    seqeval = pytest.importorskip("seqeval.metrics")
    sentences = read_conll(str(require(VALID)))
    assert len(sentences) > 3000 and all(len(s.words) == len(s.tags) for s in sentences)
    gold = [list(s.tags) for s in sentences]
    rng = random.Random(0)
    kinds = ["PER", "LOC", "ORG", "MISC"]
    predicted = [_perturb(t, rng, kinds) for t in gold]
    ours = score(gold, predicted)
    assert ours["f1"] == pytest.approx(seqeval.f1_score(gold, predicted), abs=1e-12)
    assert ours["precision"] == pytest.approx(seqeval.precision_score(gold, predicted), abs=1e-12)
    assert ours["recall"] == pytest.approx(seqeval.recall_score(gold, predicted), abs=1e-12)
    report = seqeval.classification_report(gold, predicted, output_dict=True)
    for kind in kinds:
        assert ours["per_type"][kind]["f1"] == pytest.approx(report[kind]["f1-score"], abs=1e-12)
        assert ours["per_type"][kind]["support"] == report[kind]["support"]
    assert 0.5 < ours["f1"] < 0.95
    assert score(gold, gold)["f1"] == 1.0


def _raw_tags(path) -> list[list[str]]:
    """The NER column of a CoNLL file as written (IOB1 for CoNLL-2003), one list per sentence."""
    sentences, current = [], []
    for line in [*path.read_text().splitlines(), ""]:
        columns = line.split()
        if not columns or columns[0] == "-DOCSTART-":
            if current:
                sentences.append(current)
            current = []
        else:
            current.append(columns[3])
    return sentences


def test_scorer_equals_seqeval_on_the_raw_iob1_tags_of_valid_txt():
    """The file's own IOB1 tags (before :func:`to_iob2`), gold and perturbed, as conlleval reads them."""
    seqeval = pytest.importorskip("seqeval.metrics")
    gold = _raw_tags(require(VALID))
    assert len(gold) == 3250 and sum(t.startswith("B-") for s in gold for t in s) == 4
    rng = random.Random(1)
    predicted = [_perturb(t, rng, ["PER", "LOC", "ORG", "MISC"]) for t in gold]
    ours = score(gold, predicted)
    assert ours["f1"] == pytest.approx(seqeval.f1_score(gold, predicted), abs=1e-12)
    report = seqeval.classification_report(gold, predicted, output_dict=True)
    assert {k: v["support"] for k, v in ours["per_type"].items()} == {
        k: report[k]["support"] for k in ("LOC", "MISC", "ORG", "PER")
    }
    assert score(gold, [list(s.tags) for s in read_conll(str(VALID))])["f1"] == 1.0  # IOB1 == its IOB2


def test_bad_lines_name_the_file_and_line(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("-DOCSTART- -X- O O\n\nEU NNP I-NP\n")
    with pytest.raises(CommandError, match=r"train.txt:3: expected 4 columns"):
        read_conll(str(path))
    path.write_text("EU NNP I-NP X-ORG\n")
    with pytest.raises(CommandError, match=r"train.txt:1: NER tag 'X-ORG'"):
        read_conll(str(path))


class _Tokenizer:
    """Words map to ids by length: a word of n letters is n sub-tokens (ids 10..)."""

    def special_ids(self):
        return {"[CLS]": 1, "[SEP]": 2, "[UNK]": 3}

    def encode_batch(self, words):
        return [[10 + i for i in range(len(w))] for w in words]


class _Encoder:
    tokenizer = _Tokenizer()


def test_each_sentence_gets_document_context_and_first_subtoken_labels():
    doc = [
        Sentence(("aa", "b"), ("O", "B-PER"), 1, 1),
        Sentence(("ccc", "d"), ("B-LOC", "O"), 1, 4),
        Sentence(("ee",), ("O",), 1, 7),
        Sentence(("ffff",), ("B-ORG",), 2, 10),  # another document: never context
    ]
    labels = label_set(doc)
    windows = sentence_features(doc, _Encoder(), labels, max_seq_length=12)
    middle = windows.features[1]
    # [CLS] aa b | ccc d | ee [SEP]: 3 + 4 + 2 + 2 = 11 tokens <= 12
    assert len(middle["input_ids"]) == 11
    assert windows.words[1] == [(1, 4), (1, 7)] and windows.num_long == 0
    assert [i for i, t in enumerate(middle["labels"]) if t != IGNORE] == [4, 7]
    assert middle["labels"][4] == labels.index("B-LOC") and middle["labels"][7] == labels.index("O")
    assert len(windows.features[3]["input_ids"]) == 6  # alone in its document
    tight = sentence_features(doc, _Encoder(), labels, max_seq_length=7).features
    assert len(tight[1]["input_ids"]) == 7  # context cut to fit


def test_a_long_sentence_is_read_in_windows_each_word_labelled_once():
    """14 sub-tokens in windows of 6 (max_seq_length 8) starting 3 apart: 0-5, 3-8, 6-11, 9-13.
    Each word is labelled in the window where its first sub-token has the most context."""
    words = ("aa", "bbb", "c", "dd", "eee", "f", "gg")  # sub-tokens start at 0, 2, 5, 6, 8, 11, 12
    tags = ("B-PER", "I-PER", "O", "B-LOC", "O", "B-ORG", "O")
    doc = [Sentence(("x",), ("O",), 1, 1), Sentence(words, tags, 1, 3)]
    labels = label_set(doc)
    windows = sentence_features(doc, _Encoder(), labels, max_seq_length=8, doc_stride=3, spans=True)
    assert windows.num_long == 1 and len(windows.features) == 1 + 4
    assert windows.summary() == {"sentences": 2, "longer_than_one_window": 1, "windows": 5}
    long = windows.features[1:]
    assert [len(f["input_ids"]) for f in long] == [8, 8, 8, 7]  # no document context once overflowing
    assert [(f["sentence_start"], f["sentence_end"]) for f in long] == [(1, 7), (1, 7), (1, 7), (1, 6)]
    # first sub-token -> its window (most context: min(left, right) in the window, first on ties)
    assert windows.words[1] == [(1, 1), (1, 3), (2, 3), (2, 4), (3, 3), (4, 3), (4, 4)]
    labelled = [
        (f, p)
        for f, feature in enumerate(windows.features)
        for p, t in enumerate(feature["labels"])
        if t != IGNORE
    ]
    assert sorted(labelled) == sorted([(0, 1), *windows.words[1]])  # every word once, nothing else
    for (f, p), tag in zip(windows.words[1], tags, strict=True):
        assert windows.features[f]["labels"][p] == labels.index(tag)
    best = [[max(t, 0) for t in f["labels"]] for f in windows.features]
    assert windows.tags(best, labels)[1] == list(tags)
