"""The vocabulary fields of a manifest (``schemas.manifest``): ``params.vocab_sha256`` required
for examples, ``vocab_file`` naming the copy the output carries, every other shape refused."""

from __future__ import annotations

import json

import pytest

from schemas import Manifest, ShardEntry, VocabFile, manifest_vocabulary
from schemas.commands import InputError
from wordpiece.tokenizer import WordPieceTokenizer, parse_vocab_txt, vocab_sha256, vocab_txt_bytes

SHA = "ab" * 32
ENTRY = ShardEntry("examples/part-00000-of-00001.arrow", "examples", "train", 3, 100, "cd" * 32)
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "##s"]


def _manifest(params: dict, **fields) -> Manifest:
    return Manifest("examples", 1, "pipelines examples", params, (ENTRY,), **fields)


def test_the_vocabulary_file_round_trips_and_old_manifests_keep_their_bytes():
    params = {"vocab_sha256": SHA, "cased": False, "vocab": "/data/vocab.txt"}
    copy = VocabFile("vocab.txt", 42, "ef" * 32)
    text = _manifest(params, vocab_file=copy).to_json()
    parsed = Manifest.from_json(text, "m.json")
    assert parsed.vocab_file == copy and parsed.to_json() == text
    recorded = manifest_vocabulary(parsed, "m.json")
    assert (recorded.sha256, recorded.cased, recorded.source, recorded.copy) == (
        SHA,
        False,
        "/data/vocab.txt",
        copy,
    )
    older = _manifest(params).to_json()
    assert "vocab_file" not in json.loads(older)  # written before shards carried a copy: same bytes as then
    assert manifest_vocabulary(Manifest.from_json(older, "m.json"), "m.json").copy is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.pop("vocab_sha256"), "m.json: no params.vocab_sha256"),
        (lambda p: p.update(vocab_sha256=None), "m.json: no params.vocab_sha256"),
        (lambda p: p.update(vocab_sha256=12), "params.vocab_sha256 is 12, not a SHA-256"),
        (lambda p: p.update(vocab_sha256="abc"), 'params.vocab_sha256 is "abc", not a SHA-256'),
        (lambda p: p.update(vocab_sha256=SHA.upper()), "not a SHA-256"),
        (lambda p: p.update(cased="yes"), 'params.cased is "yes", not true or false'),
        (lambda p: p.update(vocab=["a"]), 'params.vocab is ["a"], not a path'),
    ],
)
def test_an_examples_manifest_without_a_usable_vocabulary_hash_is_refused(change, message):
    params = {"vocab_sha256": SHA, "cased": False, "vocab": "/data/vocab.txt"}
    change(params)
    text = _manifest(params).to_json()
    with pytest.raises(InputError, match="the manifest is damaged") as err:
        Manifest.from_json(text, "m.json")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_other_formats_need_no_vocabulary():
    text = Manifest("documents", 1, "pipelines corpus", {"seed": 1}, (ENTRY,)).to_json()
    assert Manifest.from_json(text, "m.json").format == "documents"


@pytest.mark.parametrize(
    ("vocab_file", "problem"),
    [
        (
            {"path": "../vocab.txt", "num_bytes": 1, "sha256": SHA},
            "the path '../vocab.txt' is not a relative path inside",
        ),
        ({"path": "/etc/passwd", "num_bytes": 1, "sha256": SHA}, "is not a relative path inside the folder"),
        ({"path": "..", "num_bytes": 1, "sha256": SHA}, "is not a relative path inside the folder"),
        ({"path": "", "num_bytes": 1, "sha256": SHA}, "is not a non-empty string"),
        ({"path": 7, "num_bytes": 1, "sha256": SHA}, "the path 7 is not a non-empty string"),
        ({"path": "vocab\n.txt", "num_bytes": 1, "sha256": SHA}, "is not a relative path inside the folder"),
        ({"path": "vocab.txt", "num_bytes": -1, "sha256": SHA}, "num_bytes -1 is not a non-negative integer"),
        (
            {"path": "vocab.txt", "num_bytes": 10**12, "sha256": SHA},
            "num_bytes 1000000000000 is above 67,108,864",
        ),
        (
            {"path": "vocab.txt", "num_bytes": "12", "sha256": SHA},
            "num_bytes '12' is not a non-negative integer",
        ),
        (
            {"path": "vocab.txt", "num_bytes": True, "sha256": SHA},
            "num_bytes True is not a non-negative integer",
        ),
        ({"path": "vocab.txt", "num_bytes": 1, "sha256": "x" * 64}, "is not a hex SHA-256"),
        (
            {"path": "vocab.txt", "num_bytes": 1},
            "not an object with exactly the keys num_bytes, path, sha256",
        ),
        (
            {"path": "vocab.txt", "num_bytes": 1, "sha256": SHA, "extra": 1},
            "not an object with exactly the keys",
        ),
        ("vocab.txt", "not an object with exactly the keys"),
    ],
)
def test_a_vocabulary_file_entry_of_another_shape_is_one_line(vocab_file, problem):
    data = json.loads(_manifest({"vocab_sha256": SHA, "cased": False}).to_json())
    data["vocab_file"] = vocab_file
    with pytest.raises(
        InputError, match=r"^m\.json: vocab_file: .*; the manifest is damaged: copy the shards again$"
    ) as err:
        Manifest.from_json(json.dumps(data), "m.json")
    assert problem in str(err.value)


def test_vocab_txt_bytes_read_back_to_the_same_tokens_and_hash():
    data = vocab_txt_bytes(TOKENS)
    assert data == ("\n".join(TOKENS) + "\n").encode() and parse_vocab_txt(data, "v") == TOKENS
    assert vocab_sha256(TOKENS) == WordPieceTokenizer(TOKENS, cased=False).vocab_sha256
