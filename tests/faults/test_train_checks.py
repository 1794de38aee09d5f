"""Start-up checks of the torch side: output folders (claimed, refused, replaced only with
--overwrite and only the files the command's record lists), flag ranges listed all at once, TensorBoard
missing, casing against the vocabulary, vocab.txt against the embedding rows. No shards needed."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import fsspec
import pytest

from finetune.config import FitConfig
from finetune.encoder import Encoder, check_casing, load_encoder
from pretrain import metrics
from pretrain.config import PretrainConfig
from schemas import storage
from schemas.commands import CommandError, OutputError
from schemas.outputs import RECORD_FILE, OutputFolder, OutputRecord
from tests.unit.test_finetune_common import VOCAB, hf_folder
from wordpiece.tokenizer import WordPieceTokenizer


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _open(url: str, **kw):
    return OutputFolder.open(url, "pretrain", **kw)


def _record(run: Path, files: list[str]) -> None:
    """The record an earlier `pretrain` run left, listing ``files``."""
    record = OutputRecord(
        "pretrain", "0123456789abcdef", files, "2026-01-01T00:00:00+00:00", "2026-01-01T01:00:00+00:00"
    )
    (run / RECORD_FILE).write_bytes(record.to_json())


def test_a_missing_or_empty_output_is_claimed_and_left_as_it_was(tmp_path: Path):
    with _open(str(tmp_path / "a" / "b")) as folder:
        assert folder.stale == [] and (tmp_path / "a" / "b" / ".claim").exists()
    assert not (tmp_path / "a").exists()  # the folders the claim made are gone again
    (tmp_path / "empty").mkdir()
    _open(str(tmp_path / "empty")).close()
    assert _tree(tmp_path) == ["empty"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        OutputError, match=r"file/run: cannot write there \((NotADirectoryError|FileExistsError)"
    ):
        _open(str(tmp_path / "file" / "run"))
    with pytest.raises(OutputError, match="is a file, not a folder"):
        _open(str(tmp_path / "file"))


def test_an_earlier_run_is_refused_then_replaced_with_overwrite_markers_first(tmp_path: Path, monkeypatch):
    run = tmp_path / "run"
    (run / "checkpoints" / "step-00000002").mkdir(parents=True)
    for name in ("COMMITTED", "model.safetensors"):
        (run / "checkpoints" / "step-00000002" / name).write_text(name)
    (run / "metrics.jsonl").write_text("{}\n")
    _record(
        run,
        [
            "checkpoints/step-00000002/COMMITTED",
            "checkpoints/step-00000002/model.safetensors",
            "metrics.jsonl",
        ],
    )
    before = _tree(tmp_path)
    with pytest.raises(
        OutputError, match=r"holds the 3 file\(s\) of an earlier `pretrain` run.*continue it with --resume R"
    ):
        _open(str(run), continue_hint="--resume R")
    assert _tree(tmp_path) == before
    folder = _open(str(run), overwrite=True)
    removed = []
    original = fsspec.implementations.local.LocalFileSystem.rm
    monkeypatch.setattr(
        fsspec.implementations.local.LocalFileSystem,
        "rm",
        lambda self, path, **kw: removed.append(Path(path).name) or original(self, path, **kw),
    )
    assert folder.begin() == 3 and _tree(tmp_path) == ["run", "run/.claim", f"run/{RECORD_FILE}"]
    assert removed[0] == "COMMITTED"  # an interrupted clean-up never leaves a committed husk
    folder.close()


def test_overwrite_never_deletes_files_no_run_wrote(tmp_path: Path):
    run = tmp_path / "run"
    (run / "plots").mkdir(parents=True)
    (run / "plots" / "curves.png").write_bytes(b"png")
    _record(run, ["plots/curves.png"])
    (run / "notes.txt").write_text("mine")
    before = _tree(tmp_path)
    with pytest.raises(
        OutputError, match=r"1 file\(s\) that no `pretrain` run recorded writing \(notes.txt\)"
    ):
        _open(str(run), overwrite=True)
    assert _tree(tmp_path) == before


def test_bucket_outputs_are_checked_the_same_way():
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/sweep-bucket/run/metrics.jsonl", b"{}\n")
    with pytest.raises(OutputError, match=r"holds 1 file\(s\) that no `pretrain` run recorded"):
        _open("memory://sweep-bucket/run", overwrite=True)
    fs.pipe_file(
        "/sweep-bucket/run/.output.json", OutputRecord("pretrain", "r", ["metrics.jsonl"], "t").to_json()
    )
    with _open("memory://sweep-bucket/run", overwrite=True) as folder:
        folder.begin()
    assert not fs.exists("/sweep-bucket/run/metrics.jsonl")
    assert not [p for p in fs.find("/sweep-bucket") if ".claim" in p]


def test_flag_ranges_are_all_listed_at_once():
    cfg = PretrainConfig(
        shards="s",
        output="o",
        lr=float("nan"),
        weight_decay=-1.0,
        max_grad_norm=float("inf"),
        dynamic_masking=True,
        masked_lm_prob=1.5,
        mask_share=2.0,
        streams=0,
    )
    problems = cfg.problems()
    for flag in (
        "--lr",
        "--weight-decay",
        "--max-grad-norm",
        "--masked-lm-prob",
        "--mask-share",
        "--streams",
    ):
        assert sum(p.startswith(flag) for p in problems) == 1, (flag, problems)
    with pytest.raises(CommandError, match=r"--lr must be positive and finite, got inf; --weight-decay"):
        FitConfig(lr=float("inf"), weight_decay=-0.1).checked()


def test_without_tensorboard_a_run_warns_once_and_keeps_its_metrics(tmp_path: Path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard` raises ImportError
    with caplog.at_level(logging.WARNING, logger="pretrain"):
        log = metrics.MetricsLog(storage.Folder(tmp_path), None)
    assert [r.message for r in caplog.records] == [metrics.TENSORBOARD_MISSING]
    log.log({"step": 1, "split": "train", "loss": 2.0})
    log.close()
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1
    assert not (tmp_path / "tensorboard").exists()


def test_casing_that_does_not_fit_the_vocabulary_is_warned_with_the_figures(caplog):
    texts = ["The Movie was Great", "A Film is Bad"] * 3
    uncased_vocab = WordPieceTokenizer(VOCAB, cased=False)
    with caplog.at_level(logging.WARNING, logger="finetune.encoder"):
        assert check_casing(Encoder(None, uncased_vocab, False, "hf"), texts) == 0.0
        assert not caplog.records
        cased = WordPieceTokenizer(VOCAB, cased=True)
        share = check_casing(Encoder(None, cased, True, "hf"), texts)
    assert share > 0.5
    (record,) = caplog.records
    assert record.getMessage().startswith(f"--cased: {100 * share:.1f}% of the tokens of 6 training texts")
    assert "0.0% with --uncased" in record.getMessage()


def test_vocab_txt_against_the_embedding_rows(tmp_path: Path):
    folder = hf_folder(tmp_path / "hf", vocab=VOCAB[:-2])
    with pytest.raises(
        CommandError, match=r"vocab.txt has 18 tokens but the word embeddings in .* have 20 rows"
    ):
        load_encoder(str(folder))


def test_shards_with_many_unknown_tokens_are_warned_with_the_figure(tmp_path: Path, caplog):
    from pretrain.startup import warn_unknown_share

    assert warn_unknown_share(str(tmp_path), cased=True) is None  # no stats.json: nothing to say
    (tmp_path / "stats.json").write_text('{"unk_rate": 0.002}')
    with caplog.at_level(logging.WARNING, logger="pretrain"):
        assert warn_unknown_share(str(tmp_path), cased=True) == 0.002
        assert not caplog.records
        (tmp_path / "stats.json").write_text('{"unk_rate": 0.0712}')
        assert warn_unknown_share(str(tmp_path), cased=True) == 0.0712
    (record,) = caplog.records
    assert "7.1% of the tokens are [UNK]" in record.getMessage() and "cased shards" in record.getMessage()
