"""Degenerate data gets a warning or a refusal that says what to change (issue 37): shards mostly
empty, NSP labels far from balanced (one-sentence documents; one document), a vocabulary smaller
than asked, [UNK] over 1% of new shards with the tokenizer's casing warning as one line, and shards
rewritten under a paused run."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.cli import main as pipelines
from pretrain.data import ExampleShards
from wordpiece.cli import main as wordpiece

FAST = ["--runner", "FnApiRunner"]
WORDS = "the cat sat on a mat and then it ran away from home to see the world again today".split()


def _run(main, *args: str):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def _warnings(result) -> list[str]:
    return [
        line.removeprefix("warning: ") for line in result.output.splitlines() if line.startswith("warning:")
    ]


@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> Path:
    """`pipelines text` outputs of 400 one-sentence documents, and of one document of 400 sentences,
    and a small uncased vocabulary learned from the first."""
    root, rng = tmp_path_factory.mktemp("texts"), random.Random(0)
    sentences = [" ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "." for _ in range(400)]
    (root / "short.txt").write_text("\n\n".join(sentences) + "\n")
    (root / "one.txt").write_text("\n".join(sentences) + "\n")
    for name in ("short", "one"):
        _run(
            pipelines,
            "text",
            "--input",
            str(root / f"{name}.txt"),
            "--output",
            str(root / name),
            "--num-shards",
            "1",
            *FAST,
        )
    _run(
        wordpiece,
        "train",
        "--corpus",
        str(root / "short"),
        "--output",
        str(root / "vocab"),
        "--vocab-size",
        "200",
        "--num-unused",
        "0",
    )
    return root


def _examples(texts: Path, corpus: str, out: str, *flags: str):
    args = [
        "--corpus",
        str(texts / corpus),
        "--output",
        str(texts / out),
        "--max-seq-length",
        "32",
        "--num-shards",
        "1",
    ]
    return _run(pipelines, "examples", *args, "--num-buckets", "4", *FAST, *flags)


def test_one_sentence_documents_are_warned_of(texts):
    result = _examples(texts, "short", "ex-short", "--vocab", str(texts / "vocab" / "vocab.txt"))
    assert _warnings(result) == [
        "random next 1.00 (0.50 is balanced): the documents are too short to take a next sentence from their own "
        "text (one sentence each?): give documents of several sentences; or use --format packed (no next sentence "
        "prediction)"
    ]


def test_one_document_is_warned_of(texts):
    result = _examples(texts, "one", "ex-one", "--vocab", str(texts / "vocab" / "vocab.txt"))
    [warning] = _warnings(result)
    assert warning.startswith("random next 0.00 (0.50 is balanced), and ")
    assert warning.endswith(
        " pairs skipped for want of another document to draw a random next sentence from: give the text as many "
        "documents (a blank line between documents in `pipelines text`); or use --format packed (no next sentence "
        "prediction)"
    )


def test_mostly_empty_shards_are_warned_of(texts):
    result = _run(
        pipelines, "text", "--input", str(texts / "one.txt"), "--output", str(texts / "many"), *FAST
    )
    assert _warnings(result) == [
        "47 of the 48 shards are empty, for 1 row(s) in all: lower --num-shards (each shard of 100-500 MB at scale)"
    ]


def test_a_vocabulary_smaller_than_asked_is_warned_of(texts):
    result = _run(
        wordpiece,
        "train",
        "--corpus",
        str(texts / "short"),
        "--output",
        str(texts / "big"),
        "--vocab-size",
        "5000000",
    )
    [warning] = _warnings(result)
    assert warning.endswith(
        " tokens, not the --vocab-size 5,000,000 asked: the corpus has no more pieces seen --min-frequency 2 "
        "times; give a larger corpus or a smaller --vocab-size"
    )


def test_a_casing_that_does_not_fit_is_one_warning_line_and_its_unknown_share_another(texts):
    tokenizer = texts / "vocab" / "tokenizer.json"  # an uncased vocabulary lacks the capitals
    result = _examples(texts, "short", "ex-cased", "--vocab", str(tokenizer), "--cased")
    casing, _, unknown = _warnings(result)  # the second: one-sentence documents
    assert casing == f"{tokenizer}: its normalizer is uncased, but cased was asked for; tokenising cased."
    assert unknown.endswith(
        "% of the tokens are [UNK] (stats.json unk_rate) in these cased shards: the casing does not fit the "
        "vocabulary? (pipelines examples --cased/--uncased)"
    )
    assert "UserWarning" not in result.output and result.output.count(casing) == 1


def test_shards_rewritten_under_a_paused_run_are_refused(shards):
    reader = ExampleShards(str(shards), batch_size=2)
    state = reader.state_at(1) | {"manifest_sha256": "0" * 64}
    with pytest.raises(ValueError) as caught:
        reader.load_state_dict(state)
    assert str(caught.value) == (
        f"the shards at {shards} were rewritten since it read them (manifest.json's SHA-256 000000000000… then, "
        f"{reader.manifest_sha256[:12]}… now): give the shards it read"
    )
    reader.load_state_dict(reader.state_at(1))  # the same shards: continued
