"""Pure functions behind `pipelines corpus`: splits, MinHash near-duplicates, stats, configs."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from pipelines.config import CorpusConfig, WikipediaConfig
from pipelines.corpus.dedup import (
    band_keys,
    estimated_jaccard,
    minhash_signature,
    shingle_hashes,
)
from pipelines.corpus.pipeline import offer_signature, pairs_in_bucket
from pipelines.corpus.split import assign_split
from pipelines.stats import bucket_label, build_stats, document_tally, sum_tallies
from pipelines.text import content_hash


def test_split_is_a_function_of_the_id_alone():
    ids = [content_hash([str(i)]) for i in range(20000)]
    splits = Counter(assign_split(i, 0.1, 0.05, "salt") for i in ids)
    assert abs(splits["validation"] / 20000 - 0.1) < 0.01
    assert abs(splits["test"] / 20000 - 0.05) < 0.01
    # Adding documents never moves old ones: the assignment only reads the id.
    assert [assign_split(i, 0.1, 0.05, "salt") for i in ids[:50]] == [
        assign_split(i, 0.1, 0.05, "salt") for i in ids[:50]
    ]
    assert assign_split(ids[0], 0.0, 0.0, "salt") == "train"


def test_shingles_short_and_long():
    assert len(shingle_hashes(["A b"], 5)) == 1
    assert np.array_equal(shingle_hashes(["A b"], 5), shingle_hashes(["a  B"], 5))
    assert len(shingle_hashes(["a b c", "d e f"], 5)) == 2
    assert len(shingle_hashes(["a b a b a b a b"], 2)) == 2  # "a b" and "b a"
    assert np.array_equal(shingle_hashes(["x y z w v"], 5), shingle_hashes(["X Y", "z w v"], 5))


def _words(rng: random.Random, n: int) -> list[str]:
    vocabulary = [f"w{i}" for i in range(5000)]
    return [rng.choice(vocabulary) for _ in range(n)]


def test_minhash_estimates_jaccard_and_is_deterministic():
    rng = random.Random(0)
    base = _words(rng, 2000)
    edited = list(base)
    for i in rng.sample(range(len(edited)), 20):  # 1% of words changed: ~95% of 5-gram shingles survive
        edited[i] = "CHANGED"
    a = minhash_signature([" ".join(base)], 5, 120)
    b = minhash_signature([" ".join(edited)], 5, 120)
    c = minhash_signature([" ".join(_words(rng, 2000))], 5, 120)
    sa = set(shingle_hashes([" ".join(base)], 5).tolist())
    sb = set(shingle_hashes([" ".join(edited)], 5).tolist())
    true_jaccard = len(sa & sb) / len(sa | sb)
    assert abs(estimated_jaccard(a, b) - true_jaccard) < 0.12
    assert estimated_jaccard(a, c) < 0.05
    assert np.array_equal(a, minhash_signature([" ".join(base)], 5, 120))
    assert a.dtype == np.uint32 and a.shape == (120,)
    shared_bands = set(band_keys(a, 20, 6)) & set(band_keys(b, 20, 6))
    assert shared_bands and not set(band_keys(a, 20, 6)) & set(band_keys(c, 20, 6))


def test_a_bucket_pairs_each_document_with_at_most_the_window_before_it(monkeypatch):
    monkeypatch.setattr("pipelines.corpus.pipeline.MAX_BUCKET_COMPARISONS", 2)
    found = list(pairs_in_bucket("0:key", iter(["a", "b", "c", "d"])))
    assert found[:-1] == [
        ("a", ["want", "b"]),
        ("a", ["want", "c"]),
        ("b", ["want", "c"]),
        ("b", ["want", "d"]),
        ("c", ["want", "d"]),
    ]
    assert found[-1] == Counter(largest_band_bucket=4)
    assert list(pairs_in_bucket("0:key", iter(["a"]))) == []  # alone: nothing to compare, no size


def test_a_signature_goes_to_every_document_that_asked_for_it():
    values = iter([["sig", "00ff"], ["want", "b"], ["want", "c"]])
    assert list(offer_signature("a", values)) == [("b", ["near", "a", "00ff"]), ("c", ["near", "a", "00ff"])]


def test_largest_counts_keep_the_largest_and_the_rest_add_up():
    total = sum_tallies([Counter(words=2, largest_band_bucket=3), Counter(words=1, largest_band_bucket=2)])
    assert total == Counter(words=3, largest_band_bucket=3)


def test_stats_reconcile_and_histograms():
    tally = document_tally(["one two three.", "four."], split="train")
    tally.update(
        {"records_in": 3, "dropped/redirect": 1, "rejected/parse_error": 1, "file_errors/truncated_input": 1}
    )
    stats = build_stats(tally)
    assert stats["records_in"] == 3 and stats["documents_out"] == 1 and stats["reconciles"]
    assert stats["histograms"]["sentence_words"] == {"1": 1, "2-3": 1}
    assert stats["splits"] == {"train": 1} and stats["file_errors"] == {"truncated_input": 1}
    tally["records_in"] += 1
    assert not build_stats(tally)["reconciles"]
    assert [bucket_label(n) for n in (0, 1, 2, 3, 4, 7, 8, 1000)] == [
        "0",
        "1",
        "2-3",
        "2-3",
        "4-7",
        "4-7",
        "8-15",
        "512-1023",
    ]


def test_configs_list_every_problem_at_once():
    with pytest.raises(ValueError) as err:
        CorpusConfig(inputs=(), output="", validation_fraction=0.6, test_fraction=0.5, num_shards=0)
    message = str(err.value)
    for flag in ("--input", "--output", "--test-fraction", "leave some training data", "--num-shards"):
        assert flag in message
    with pytest.raises(ValueError, match="--streams-per-range"):
        WikipediaConfig(inputs=("x",), output="o", streams_per_range=0)
