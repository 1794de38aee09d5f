"""SWAG: four-way multiple choice over the official CSV files (Zellers et al., 2018).

The regular layout (``train.csv``, ``val.csv``, ``test.csv`` of rowanz/swagaf ``data/``) is a
quoted CSV with a header: an unnamed index column, ``video-id``, ``fold-ind``, ``startphrase``,
``sent1``, ``sent2``, ``gold-source``, ``ending0`` … ``ending3`` and ``label`` (absent in test).
As in the paper (Section 4.4), each choice is ``[CLS] sent1 [SEP] sent2 + ending [SEP]``; a linear
layer scores each choice's pooled ``[CLS]`` and a softmax runs over the four. Metric: accuracy.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec

from finetune import metrics as M
from finetune.common import (
    Encoder,
    FinetuneError,
    MultipleChoice,
    TrainConfig,
    check_casing,
    check_max_seq_length,
    encode_pair,
    fit,
    load_encoder,
    predict,
    stack,
)
from pretrain.runtime import exists, output_folder, write_json
from schemas.files import write_file

logger = logging.getLogger(__name__)

NUM_CHOICES = 4
ENDINGS = tuple(f"ending{i}" for i in range(NUM_CHOICES))
TEXT_COLUMNS = ("sent1", "sent2", *ENDINGS)
SPLIT_FILES = {"train": "train.csv", "dev": "val.csv", "test": "test.csv"}


@dataclass(frozen=True)
class SwagExample:
    """One row: where it came from (``file:line``), its context, start of the second sentence, the
    four endings and the gold ending's index (None in test files)."""

    guid: str
    context: str
    start: str
    endings: tuple[str, ...]
    label: int | None
    index: str


def read_swag(path: str, *, labelled: bool) -> list[SwagExample]:
    """Read a SWAG CSV in the official regular layout; raise :class:`FinetuneError` naming the file
    and line for a missing column or a label that is not 0-3."""
    try:
        with fsspec.open(path, "rb") as f:
            text = f.read().decode("utf-8-sig")
    except FileNotFoundError:
        raise FinetuneError(f"{path} not found") from None
    except UnicodeDecodeError as err:
        raise FinetuneError(f"{path}: not UTF-8 (byte {err.start})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    wanted = list(TEXT_COLUMNS) + (["label"] if labelled else [])
    missing = [c for c in wanted if c not in (reader.fieldnames or [])]
    if missing:
        raise FinetuneError(
            f"{path}:1: no column {', '.join(repr(c) for c in missing)} in the header; SWAG files in the "
            "regular layout (train.csv, val.csv, test.csv) have sent1, sent2, ending0..ending3 and label"
        )
    examples = []
    for number, row in enumerate(reader):
        where = f"{path}:{reader.line_num}"
        empty = [c for c in wanted if row.get(c) is None]
        if empty:
            raise FinetuneError(f"{where}: the row has no value for column {empty[0]!r}")
        label = None
        if labelled:
            value = row["label"].strip()
            if value not in {str(i) for i in range(NUM_CHOICES)}:
                raise FinetuneError(f"{where}: label {value!r} is not one of 0, 1, 2, 3")
            label = int(value)
        index = row.get("") or row.get("fold-ind") or str(number)
        endings = tuple(row[c] for c in ENDINGS)
        examples.append(SwagExample(where, row["sent1"], row["sent2"], endings, label, index))
    return examples


def features(examples: Sequence[SwagExample], encoder: Encoder, max_seq_length: int) -> list[dict]:
    """Per example, four ``[CLS] context [SEP] start ending [SEP]`` sequences and ``labels``."""
    result = []
    for example in examples:
        choices = [
            encode_pair(
                encoder.tokenizer, example.context, f"{example.start} {ending}".strip(), max_seq_length
            )
            for ending in example.endings
        ]
        feature: dict[str, Any] = {
            "input_ids": [c["input_ids"] for c in choices],
            "token_type_ids": [c["token_type_ids"] for c in choices],
        }
        if example.label is not None:
            feature["labels"] = example.label
        result.append(feature)
    return result


def _split_file(data_dir: str | None, given: str | None, split: str) -> str | None:
    if given:
        return given
    if data_dir is None:
        return None
    return f"{data_dir.rstrip('/')}/{SPLIT_FILES[split]}"


def _read_splits(
    data_dir: str | None, train_file: str | None, dev_file: str | None, test_file: str | None
) -> tuple[list[SwagExample], list[SwagExample], list[SwagExample]]:
    """The train, dev and (when there is one) unlabelled test examples."""
    train_path = _split_file(data_dir, train_file, "train")
    dev_path = _split_file(data_dir, dev_file, "dev")
    if train_path is None or dev_path is None:
        raise FinetuneError("give --data-dir (train.csv, val.csv) or both --train-file and --dev-file")
    test_path = _split_file(data_dir, test_file, "test")
    if test_path is not None and test_file is None and not exists(test_path):
        test_path = None
    train = read_swag(train_path, labelled=True)
    dev = read_swag(dev_path, labelled=True)
    test = read_swag(test_path, labelled=False) if test_path else []
    return train, dev, test


def _write_predictions(
    output: str, dev: list[SwagExample], dev_predictions: list[int], test_predictions: list[int] | None
) -> list[str]:
    """``dev_predictions.csv`` (index, pred, label) and, when given, ``test_predictions.csv`` (the
    leaderboard's one ``pred`` per row) under ``output``; returns the files' names."""
    fs, root = output_folder(output)
    rows = "".join(f"{e.index},{p},{e.label}\n" for e, p in zip(dev, dev_predictions, strict=True))
    write_file(f"{root}/dev_predictions.csv", "index,pred,label\n" + rows, fs)
    files = ["dev_predictions.csv"]
    if test_predictions is not None:
        write_file(f"{root}/test_predictions.csv", "pred\n" + "".join(f"{p}\n" for p in test_predictions), fs)
        files.append("test_predictions.csv")
    return files


def run_swag(
    data_dir: str | None,
    checkpoint: str,
    output: str,
    config: TrainConfig,
    *,
    max_seq_length: int = 128,
    train_file: str | None = None,
    dev_file: str | None = None,
    test_file: str | None = None,
    max_train_examples: int | None = None,
    max_eval_examples: int | None = None,
    cased: bool | None = None,
    before_training: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune ``checkpoint`` on SWAG (``data_dir``'s ``train.csv``; dev ``val.csv``; ``test.csv``
    when present; each overridable by a file) and write ``metrics.json`` (dev accuracy, training
    loss and throughput), ``dev_predictions.csv`` and, with a test file, ``test_predictions.csv``
    (one ``pred`` per row, the leaderboard's layout). Returns the metrics. ``before_training`` (the
    CLI's ``--overwrite`` clean-up) is called once the data, checkpoint and settings have passed
    their checks, right before training."""
    train, dev, test = _read_splits(data_dir, train_file, dev_file, test_file)
    train, dev = train[:max_train_examples], dev[:max_eval_examples]
    encoder = load_encoder(checkpoint, cased=cased)
    check_max_seq_length(max_seq_length, encoder)
    check_casing(encoder, [e.context for e in train])
    model = MultipleChoice(encoder.model, seed=config.seed)
    train_features = features(train, encoder, max_seq_length)
    if before_training is not None:
        before_training()
    trained = fit(model, train_features, config)

    def choose(examples: list[SwagExample]) -> list[int]:
        outputs = predict(
            model,
            features(examples, encoder, max_seq_length),
            batch_size=max(1, config.eval_batch_size // NUM_CHOICES),
            device=config.device,
            precision=config.precision,
            progress=config.progress,
        )
        return stack(outputs).argmax(-1).tolist()

    dev_predictions = choose(dev)
    labels = [e.label for e in dev]
    files = _write_predictions(output, dev, dev_predictions, choose(test) if test else None)
    result = {
        "task": "swag",
        "checkpoint": encoder.source,
        "main_metric": "accuracy",
        "dev": {"accuracy": M.accuracy(dev_predictions, labels)},
        "config": config.to_dict(),
        "train": trained.to_dict(),
        "num_examples": {"train": len(train), "dev": len(dev), "test": len(test)},
        "max_seq_length": max_seq_length,
        "files": files,
    }
    write_json(f"{output.rstrip('/')}/metrics.json", result)
    logger.info("swag: dev accuracy %.4f", result["dev"]["accuracy"])
    return result
