"""Batches of documents in, record batches out: batching changes nothing, draws stay uniform."""

from __future__ import annotations

import dataclasses
import hashlib
import random

import numpy as np
import pyarrow as pa

from pipelines.examples.batches import (
    RequestDrawer,
    bucket_of,
    fulfil_bucket,
    plan_batch,
    random_next_warning,
    tokenize_documents,
)
from pipelines.examples.dofns import document_batches
from pipelines.examples.finish import PAIR_COLUMN, ExampleVocab, examples_table
from pipelines.examples.pairs import PairConfig
from pipelines.examples.pipeline import ExamplesConfig
from pipelines.examples.write import STREAM_SHARD, pair_shards, shard_pieces, shard_table
from schemas.examples import examples_format
from tests.conftest import SHARED_DATA, require
from tests.unit.test_examples_pairs import tokenized_document
from wordpiece.chunk_cache import ChunkCache
from wordpiece.tokenizer import WordPieceTokenizer

BERT_VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"

TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, 3000)]
VOCAB = ExampleVocab.build(TOKENS, random_token_from_whole_vocab=False)
FMT = examples_format(len(TOKENS))
CONFIG = ExamplesConfig(
    corpus="c", vocab="v", output="o", dupe_factor=3, num_buckets=4, pairs=PairConfig(max_seq_length=48)
)


def _documents(count: int):
    rng = random.Random(count)
    documents = []
    for d in range(count):
        sentences = [
            [rng.randrange(5, 3000) for _ in range(rng.randint(3, 30))] for _ in range(rng.randint(1, 25))
        ]
        documents.append(tokenized_document(f"doc{d:03d}", sentences))
    return documents


def _rows(finished):
    tables = [examples_table(columns, FMT) for columns, _ in finished]
    table = pa.concat_tables(tables).sort_by(
        [("doc_id", "ascending"), ("dupe_index", "ascending"), (PAIR_COLUMN, "ascending")]
    )
    return table.to_pylist()


def _run(documents, batch_size, config=CONFIG):
    """The whole graph in plain Python: plan in batches, meet by bucket, fulfil."""
    sizes = {}
    for d in documents:
        sizes[bucket_of(d.doc_id, CONFIG.num_buckets)] = (
            sizes.get(bucket_of(d.doc_id, CONFIG.num_buckets), 0) + 1
        )
    drawer = RequestDrawer(sizes)
    finished, requests = [], {}
    for first in range(0, len(documents), batch_size):
        done, _, wanted = plan_batch(documents[first : first + batch_size], config, drawer, VOCAB)
        finished += done
        for bucket, batch in wanted:
            requests.setdefault(bucket, []).append(batch)
    for bucket, batches in requests.items():
        members = [d for d in documents if bucket_of(d.doc_id, CONFIG.num_buckets) == bucket]
        finished += fulfil_bucket(members, batches[::-1], config, VOCAB)
    return _rows(finished)


def test_batch_sizes_change_no_example():
    documents = _documents(30)
    one = _run(documents, 30)
    assert one == _run(documents, 7) == _run(documents[::-1], 1)
    labels = [r["next_sentence_labels"] for r in one]
    assert 0 < sum(labels) < len(labels)
    for row in one:
        ids = row["input_ids"]
        assert (
            ids[0] == VOCAB.cls_id
            and ids[-1] == VOCAB.sep_id
            and ids[row["num_tokens_a"] - 1] == VOCAB.sep_id
        )
        assert len(ids) == row["num_tokens"] <= 48


def test_random_b_is_whole_sentences_of_another_document():
    # Each document its own range of ids, so B's tokens name the document they came from.
    rng = random.Random(1)
    documents = [
        tokenized_document(
            f"doc{d:02d}",
            [[5 + 200 * d + rng.randrange(200) for _ in range(rng.randint(3, 20))] for _ in range(12)],
        )
        for d in range(12)
    ]
    unmasked = dataclasses.replace(CONFIG, apply_masking=False)
    rows = _run(documents, 5, unmasked)
    assert any(r["next_sentence_labels"] for r in rows)
    for row in rows:
        if row["next_sentence_labels"]:
            b = row["input_ids"][row["num_tokens_a"] : -1]
            (source,) = {(i - 5) // 200 for i in b}
            assert f"doc{source:02d}" != row["doc_id"]
            tokens = documents[source].tokens.tolist()
            # Not truncated at the front: B starts at a sentence boundary of its document.
            if len(row["input_ids"]) < unmasked.pairs.max_seq_length:
                start = next(i for i in range(len(tokens)) if tokens[i : i + len(b)] == b)
                offsets = documents[source].offsets.tolist()
                assert start in offsets and start + len(b) in offsets  # whole sentences


def test_draws_are_uniform_over_the_other_documents():
    rng = np.random.default_rng(0)
    for _ in range(50):
        sizes = {
            int(b): int(n)
            for b, n in zip(rng.choice(20, 6, replace=False), rng.integers(1, 5, 6), strict=True)
        }
        drawer = RequestDrawer(sizes)
        own = np.array(rng.choice(sorted(sizes), 200))
        draws = rng.random(200)
        buckets, index = drawer.draw(own, draws)
        for o, u, b, i in zip(own.tolist(), draws.tolist(), buckets.tolist(), index.tolist(), strict=True):
            others = [(k, j) for k in sorted(sizes) for j in range(sizes[k] - (k == o))]
            assert (b, i) == others[int(u * len(others))]
    assert RequestDrawer({3: 1}).draw(np.array([3]), np.array([0.5])) is None


def test_shard_pieces_reassemble_into_sorted_shards_of_the_schema():
    documents = _documents(10)
    finished, _, _ = plan_batch(documents, CONFIG, RequestDrawer({0: 10}), VOCAB)
    pieces = [p for columns, _ in finished for p in shard_pieces(columns, FMT, 3)]
    assert {shard for shard, _ in pieces} == {0, 1, 2}
    total = 0
    for shard in range(3):
        table = shard_table([p for s, p in pieces if s == shard][::-1], FMT)
        FMT.validate(table, "shard")
        keys = list(
            zip(table.column("doc_id").to_pylist(), table.column("dupe_index").to_pylist(), strict=True)
        )
        assert keys == sorted(keys)
        total += len(table)
    assert total == sum(len(c) for c, _ in finished)
    assert len(shard_table([], FMT)) == 0


def _mix64(x: int) -> int:
    mask = (1 << 64) - 1
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & mask
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def _hashed_bits(key: int, counter: int, stream: int) -> int:
    """``wordpiece.masking.hashed_bits`` for one value, in plain integers."""
    return _mix64((key + _mix64(((stream << 40) | counter) + 0x9E3779B97F4A7C15)) & ((1 << 64) - 1))


def test_pair_shards_are_a_hash_of_each_pairs_identity():
    """The shard of every example, recomputed row by row in plain Python from its definition:
    the document's SHA-256, mixed with the pass, then with the pair index."""
    finished, _, _ = plan_batch(_documents(6), CONFIG, RequestDrawer({0: 6}), VOCAB)
    columns = finished[0][0]
    for num_shards in (1, 7, 256):
        expected = []
        for d, k, p in zip(
            columns.doc_ids, columns.dupe_index.tolist(), columns.pair_index.tolist(), strict=True
        ):
            document = int.from_bytes(hashlib.sha256(d.encode("utf-8")).digest()[:8], "big")
            expected.append(
                _hashed_bits(_hashed_bits(document, k, STREAM_SHARD), p, STREAM_SHARD) % num_shards
            )
        assert pair_shards(columns, num_shards).tolist() == expected
    # Spread over the shards: every one of 7 gets between half and twice its share.
    counts = np.bincount(pair_shards(columns, 7), minlength=7)
    assert counts.min() > len(columns) / 14 and counts.max() < 2 * len(columns) / 7


def test_tokenize_documents_reads_a_sliced_table_of_documents():
    """Documents from a slice of a documents table (as ``document_batches`` cuts it): each
    document's ids are its sentences' ids, empty sentences left out, a document without tokens
    counted, not kept; the batches cover every document once."""
    tokenizer = WordPieceTokenizer.load(str(require(BERT_VOCAB)), cased=False).tokenizer
    tokenizer.encode_special_tokens = True
    table = pa.table(
        {
            "doc_id": ["first", "a", "b", "c"],
            "sentences": [["not in the slice"], ["Hello there.", "", "Second one."], ["", "  "], ["Last."]],
        }
    )
    documents, without_tokens = tokenize_documents(ChunkCache(tokenizer), table.slice(1))
    assert [d.doc_id for d in documents] == ["a", "c"] and without_tokens == 1
    expected = [tokenizer.encode(s, add_special_tokens=False).ids for s in ("Hello there.", "Second one.")]
    assert documents[0].tokens.tolist() == expected[0] + expected[1]
    assert documents[0].offsets.tolist() == [0, len(expected[0]), len(expected[0]) + len(expected[1])]
    assert documents[1].tokens.tolist() == tokenizer.encode("Last.", add_special_tokens=False).ids
    sizes = [len(batch) for batch in document_batches(table)]
    assert sum(sizes) == len(table)


def test_document_batches_cut_between_whole_documents(monkeypatch):
    import pipelines.examples.dofns as dofns

    monkeypatch.setattr(dofns, "BATCH_SENTENCES", 3)
    table = pa.table({"doc_id": list("abcde"), "sentences": [["1"], ["1", "2"], ["1"] * 5, ["1"], ["1"]]})
    batches = list(document_batches(table))
    # a+b reach 3 sentences; c alone passes it; d+e are what is left.
    assert [b.column("doc_id").to_pylist() for b in batches] == [["a", "b"], ["c"], ["d", "e"]]
    assert list(document_batches(table.slice(0, 0))) == []


def test_random_next_sentences_from_copies_of_the_same_text_are_counted_and_warned_of():
    """50 copies of one document (one doc_id: it hashes the text): every random B is a copy of A's
    own text, so the NSP labels mean nothing; stats.json says so and the run warns."""
    copies = [tokenized_document("same", [[5, 6, 7], [8, 9]])] * 50
    requests = {}
    for bucket, batch in plan_batch(copies, CONFIG, RequestDrawer({bucket_of("same", 4): 50}), VOCAB)[2]:
        requests.setdefault(bucket, []).append(batch)
    (batches,) = requests.values()
    tallies = [tally for _, tally in fulfil_bucket(copies, batches, CONFIG, VOCAB)]
    random_next = sum(t["random_next"] for t in tallies)
    assert random_next > 0 and sum(t["random_next_same_text"] for t in tallies) == random_next
    stats = {"random_next_rate": 0.5, "skipped": {"pairs_without_other_document": 0}}
    warning = random_next_warning(stats | {"random_next_same_text_share": 1.0})
    assert warning.startswith("random-next share 0.00: 100% of the random next sentences come from copies")
    assert random_next_warning(stats | {"random_next_same_text_share": 0.0}) is None
    assert random_next_warning(stats | {"random_next_same_text_share": None}) is None
