"""Outputs never over inputs: every command refuses, even with ``--overwrite``, an output that is,
holds or lies inside one of its inputs (symlinks followed; URLs by bucket and normalised prefix),
in one line with exit 2 (a combination of flags refused before anything is read), and leaves the
input byte for byte. The sweep found ``finetune glue --data-dir D --output D --overwrite`` deleting
D's TSVs, ``pipelines corpus``/``examples`` deleting their input and crashing, and
``finetune glue --predict-only --checkpoint OUT/model --output OUT --overwrite`` deleting the model
it was about to read. No model, shard or pipeline runs here: every case ends before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from schemas.commands import UsageError
from schemas.paths import CONTAINS, INSIDE, SAME, check_apart, location, relation
from tests.clis import CLIS

TAIL = "an output is never written over an input, even with --overwrite; choose another"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _data(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text(f"the user's {name}\n")
    return folder


def _refused(cli: str, *args: str) -> str:
    """Run ``cli ARGS``; it must exit 2 with one error line; return that line."""
    result = CliRunner().invoke(CLIS[cli], [str(a) for a in args], prog_name=cli)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.parametrize(
    ("output", "input_", "expected"),
    [
        ("/a/b", "/a/b", SAME),
        ("/a", "/a/b/c.tsv", CONTAINS),
        ("/a/b/out", "/a/b", INSIDE),
        ("/a/b", "/a/bc", None),  # a shared prefix is not a folder
        ("/a/bc", "/a/b", None),
        ("gs://b/x", "gs://b/x", SAME),
        ("gs://b", "gs://b/x/y", CONTAINS),
        ("gs://b/x", "gs://c/x", None),  # another bucket
        ("gs://b/x", "s3://b/x", None),  # another store
    ],
)
def test_relation_is_a_pure_test_on_resolved_locations(output, input_, expected):
    assert relation(output, input_) == expected


def test_locations_follow_symlinks_and_normalise_urls(tmp_path: Path, monkeypatch):
    real = _data(tmp_path / "real")
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    assert location("link/sub/../x") == str(real / "x") == location(f"file://{real}/x")
    assert location("~") == os.path.expanduser("~")
    assert location("gcs://b//x/./y/") == "gs://b/x/y" == location("GS://b/x/y")
    assert location("s3a://b/x/../y") == "s3://b/y"
    with pytest.raises(UsageError, match=r"--output link is the same place as --data-dir real \(both are "):
        check_apart({"--output": "link"}, {"--data-dir": "real"})
    check_apart({"--output": "out", "--cache": None}, {"--data-dir": ["real", ""], "--vocab": None})


def test_finetune_glue_never_writes_over_its_data_dir(tmp_path: Path):
    data = _data(tmp_path / "MRPC", "train.tsv", "dev.tsv", "test.tsv")
    before = _files(data)
    common = ("glue", "--task", "mrpc", "--data-dir", data, "--checkpoint", tmp_path / "none", "--overwrite")
    line = _refused("finetune", *common, "--output", data)
    assert line == f"error: --output {data} is the same place as --data-dir {data}: {TAIL} --output"
    (tmp_path / "link").symlink_to(data)
    line = _refused("finetune", *common, "--output", tmp_path / "link")
    assert f"--output {tmp_path / 'link'} is the same place as --data-dir {data} (both are {data})" in line
    assert _refused("finetune", *common, "--output", data / "out").startswith(
        f"error: --output {data / 'out'} lies inside"
    )
    assert _refused("finetune", *common, "--output", tmp_path).startswith(
        f"error: --output {tmp_path} holds --data-dir"
    )
    assert _files(data) == before and not (data / "out").exists()


def test_finetune_predict_only_never_deletes_the_model_it_reads(tmp_path: Path):
    out = tmp_path / "ft"
    model = _data(out / "model", "config.json", "model.safetensors", "vocab.txt")
    data = _data(tmp_path / "MRPC", "dev.tsv")
    before = _files(out)
    line = _refused(
        "finetune",
        "glue",
        "--task",
        "mrpc",
        "--data-dir",
        data,
        "--checkpoint",
        model,
        "--output",
        out,
        "--predict-only",
        "--overwrite",
    )
    assert line == f"error: --output {out} holds --checkpoint {model}: {TAIL} --output"
    assert _files(out) == before


def test_every_finetune_command_checks_its_inputs(tmp_path: Path):
    squad = _data(tmp_path / "squad", "train.json", "dev.json")
    line = _refused(
        "finetune",
        "squad",
        "--version",
        "1.1",
        "--train-file",
        squad / "train.json",
        "--predict-file",
        squad / "dev.json",
        "--checkpoint",
        tmp_path / "none",
        "--output",
        squad,
    )
    assert "--output" in line and "holds --train-file" in line
    swag = _data(tmp_path / "swag", "train.csv")
    line = _refused(
        "finetune",
        "swag",
        "--train-file",
        swag / "train.csv",
        "--checkpoint",
        tmp_path / "c",
        "--output",
        swag / "train.csv",
    )
    assert "is the same place as --train-file" in line
    cache = tmp_path / "cache"
    line = _refused(
        "finetune",
        "ner",
        "--data-dir",
        tmp_path / "conll",
        "--checkpoint",
        tmp_path / "c",
        "--output",
        cache,
        "--features",
        "last",
        "--feature-cache",
        cache,
    )
    assert "is the same place as --feature-cache" in line
    text = _data(tmp_path / "text", "lines.txt")
    line = _refused(
        "finetune",
        "features",
        "--checkpoint",
        tmp_path / "c",
        "--input",
        text / "lines.txt",
        "--output",
        text,
    )
    assert "holds --input" in line
    run = _data(tmp_path / "mrpc", "metrics.json")
    assert "holds RUNS" in _refused("finetune", "report", run, "--output", tmp_path)


def test_the_feature_cache_is_never_written_into_an_input(tmp_path: Path):
    conll = _data(tmp_path / "conll", "train.txt", "valid.txt")
    before = _files(conll)
    line = _refused(
        "finetune",
        "ner",
        "--data-dir",
        conll,
        "--checkpoint",
        tmp_path / "c",
        "--output",
        tmp_path / "out",
        "--features",
        "last",
        "--feature-cache",
        conll / "cache",
    )
    assert line == (
        f"error: --feature-cache {conll / 'cache'} lies inside --data-dir {conll}: {TAIL} --feature-cache"
    )
    assert _files(conll) == before and not (conll / "cache").exists() and not (tmp_path / "out").exists()


def test_pipelines_never_write_over_their_input(tmp_path: Path):
    corpus = _data(tmp_path / "corpus", "manifest.json", "COMPLETED", "vocab.txt")
    before = _files(corpus)
    line = _refused("pipelines", "corpus", "--input", corpus, "--output", corpus, "--overwrite")
    assert line == f"error: --output {corpus} is the same place as --input {corpus}: {TAIL} --output"
    line = _refused(
        "pipelines",
        "examples",
        "--corpus",
        corpus,
        "--vocab",
        corpus / "vocab.txt",
        "--output",
        corpus,
        "--overwrite",
    )
    assert line.startswith(f"error: --output {corpus} is the same place as --corpus {corpus}")
    line = _refused(
        "pipelines",
        "examples",
        "--corpus",
        corpus,
        "--vocab",
        corpus / "vocab.txt",
        "--output",
        tmp_path / "shards",
        "--temp-location",
        corpus / "tmp",
    )
    assert line.startswith(f"error: --temp-location {corpus / 'tmp'} lies inside --corpus {corpus}")
    books = _data(tmp_path / "books", "a.txt", "b.txt")
    line = _refused("pipelines", "books", "--input", f"{books}/*.txt", "--output", books, "--overwrite")
    assert line.startswith(f"error: --output {books} holds --input {books}/*.txt")
    (tmp_path / "books-link").symlink_to(books)  # the pattern's folder through a link: the files count
    line = _refused("pipelines", "text", "--input", f"{tmp_path}/books-link/*.txt", "--output", books)
    assert f"--output {books} holds --input" in line
    assert _files(corpus) == before and len(_files(books)) == 2


def test_wordpiece_and_pretrain_never_write_over_their_input(tmp_path: Path):
    corpus = _data(tmp_path / "corpus", "COMPLETED")
    line = _refused("wordpiece", "train", "--corpus", corpus, "--output", corpus / "vocab")
    assert line == f"error: --output {corpus / 'vocab'} lies inside --corpus {corpus}: {TAIL} --output"
    shards = _data(tmp_path / "shards", "COMPLETED")
    run = _data(tmp_path / "run", "metrics.jsonl")
    tiny = ("--config", "tiny", "--max-steps", "1")
    line = _refused("pretrain", "--shards", shards, "--output", shards / "run", *tiny)
    assert line.startswith(f"error: --output {shards / 'run'} lies inside --shards {shards}")
    assert "is the same place as --init-from" in _refused(
        "pretrain", "--shards", shards, "--init-from", run, "--output", run
    )
    line = _refused("pretrain", "--shards", shards, "--resume", run, "--output", run / "phase2")
    assert "lies inside --resume" in line
    assert "holds --checkpoint" in _refused(
        "pretrain", "export", "--checkpoint", run / "checkpoints", "--output", run
    )
    # buckets by bucket and prefix, refused before any bucket is contacted
    line = _refused("pretrain", "export", "--checkpoint", "gs://b/runs/x", "--output", "gcs://b//runs/x/hf/")
    assert "lies inside --checkpoint gs://b/runs/x (resolved: gs://b/runs/x/hf and gs://b/runs/x)" in line
    assert _files(run) == {"metrics.jsonl": b"the user's metrics.jsonl\n"} and not (shards / "run").exists()


def test_the_chain_never_writes_a_stage_over_an_input(tmp_path: Path):
    dump = _data(tmp_path / "dumps", "enwiki.xml.bz2") / "enwiki.xml.bz2"
    work = tmp_path / "work"
    glue = _data(work / "finetune" / "mrpc", "train.tsv", "dev.tsv")
    line = _refused(
        "chain", "--workdir", work, "--wiki-dump", dump, "--glue-dir", glue, "--glue-task", "mrpc"
    )
    assert line.startswith(f"error: stage finetune output {glue} is the same place as --glue-dir {glue}")
    assert line.endswith("choose another --workdir")
    books = _data(tmp_path / "books", "a.txt")
    line = _refused("chain", "--workdir", books / "w", "--wiki-dump", dump, "--books", books)
    assert line.startswith(f"error: --workdir {books / 'w'} lies inside --books {books}")
    from chain.cli import main as chain

    result = CliRunner().invoke(
        chain,
        ["ablate", "--workdir", str(books), "--wiki-dump", str(dump), "--books", str(books), "--dry-run"],
    )
    assert (
        result.exit_code == 2 and f"--workdir {books} is the same place as --books {books}" in result.output
    )
    assert _files(glue) == {"train.tsv": b"the user's train.tsv\n", "dev.tsv": b"the user's dev.tsv\n"}
