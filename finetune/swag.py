"""SWAG: four-way multiple choice over the official CSV files (Zellers et al., 2018).

As in the paper (Section 4.4), each choice is ``[CLS] sent1 [SEP] sent2 + ending [SEP]``; a linear
layer scores each choice's pooled ``[CLS]`` and a softmax runs over the four. Metric: accuracy.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from finetune import metrics as M
from finetune.config import FitConfig
from finetune.encoder import Encoder, prepare_encoder
from finetune.heads import Classifier
from finetune.inputs import check_examples, input_lines
from finetune.loop import fit, predict_classes
from finetune.sequences import encode_pair
from schemas import storage
from schemas.commands import InputError, UsageError

logger = logging.getLogger(__name__)

NUM_CHOICES = 4
ENDINGS = tuple(f"ending{i}" for i in range(NUM_CHOICES))
TEXT_COLUMNS = ("sent1", "sent2", *ENDINGS)
SPLIT_FILES = {"train": "train.csv", "dev": "val.csv", "test": "test.csv"}


@dataclass(frozen=True)
class SwagConfig(FitConfig):
    """A SWAG run: the fit settings with the paper's batch size of 16."""

    batch_size: int = 16


@dataclass(frozen=True)
class SwagExample:
    """One row: where it came from (``file:line``), its context and start, endings, label and index."""

    guid: str
    context: str
    start: str
    endings: tuple[str, ...]
    label: int | None
    index: str


def read_swag(path: str, *, labelled: bool) -> list[SwagExample]:
    """Read a SWAG CSV in the official regular layout; a bad column or label names the file and line."""
    reader = csv.DictReader((text for _, text in input_lines(path)))
    wanted = list(TEXT_COLUMNS) + (["label"] if labelled else [])
    missing = [c for c in wanted if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(
            f"{path}:1: no column {', '.join(repr(c) for c in missing)} in the header; SWAG files in the "
            "regular layout (train.csv, val.csv, test.csv) have sent1, sent2, ending0..ending3 and label"
        )
    examples = []
    for number, row in enumerate(reader):
        where = f"{path}:{reader.line_num}"
        empty = [c for c in wanted if row.get(c) is None]
        if empty:
            raise InputError(f"{where}: the row has no value for column {empty[0]!r}")
        label = None
        if labelled:
            if row["label"].strip() not in {str(i) for i in range(NUM_CHOICES)}:
                raise InputError(f"{where}: label {row['label'].strip()!r} is not one of 0, 1, 2, 3")
            label = int(row["label"])
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
        feature: dict[str, Any] = {key: [c[key] for c in choices] for key in ("input_ids", "token_type_ids")}
        if example.label is not None:
            feature["labels"] = example.label
        result.append(feature)
    return result


def _files(
    data_dir: str | None, train_file: str | None, dev_file: str | None, test_file: str | None
) -> tuple[str, str, str | None]:
    """The train, dev and test files: each given one, else ``data_dir``'s (its test file if present)."""
    folder = None if data_dir is None else data_dir.rstrip("/")
    train = train_file or (folder and f"{folder}/{SPLIT_FILES['train']}")
    dev = dev_file or (folder and f"{folder}/{SPLIT_FILES['dev']}")
    if not train or not dev:
        raise UsageError("give --data-dir (train.csv, val.csv) or both --train-file and --dev-file")
    test = test_file or (folder and f"{folder}/{SPLIT_FILES['test']}")
    return train, dev, test if test_file or (test and storage.exists(test)) else None


def run_swag(
    data_dir: str | None,
    checkpoint: str,
    out: storage.Folder,
    config: SwagConfig,
    *,
    train_file: str | None = None,
    dev_file: str | None = None,
    test_file: str | None = None,
    before_training: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune ``checkpoint`` on SWAG; write ``metrics.json`` (returned) and the dev and test predictions
    (the leaderboard's layout). ``before_training``: as :func:`finetune.glue.run_glue`'s."""
    train_path, dev_path, test_path = _files(data_dir, train_file, dev_file, test_file)
    train = read_swag(train_path, labelled=True)[: config.max_train_examples]
    dev = read_swag(dev_path, labelled=True)[: config.max_eval_examples]
    test = read_swag(test_path, labelled=False) if test_path else []
    check_examples(train, train_path)
    check_examples(dev, dev_path)
    encoder = prepare_encoder(checkpoint, config, [e.context for e in train])
    model = Classifier(encoder.model, 1, per="choice", seed=config.seed)
    train_features = features(train, encoder, config.max_seq_length)
    if before_training is not None:
        before_training()
    trained = fit(model, train_features, config)
    scoring = dataclasses.replace(config, eval_batch_size=max(1, config.eval_batch_size // NUM_CHOICES))

    def choose(examples: list[SwagExample]) -> list[int]:
        scores = predict_classes(model, features(examples, encoder, config.max_seq_length), scoring)
        return scores.argmax(-1).tolist()

    dev_predictions = choose(dev)
    rows = "".join(f"{e.index},{p},{e.label}\n" for e, p in zip(dev, dev_predictions, strict=True))
    out.write("dev_predictions.csv", "index,pred,label\n" + rows)
    files = ["dev_predictions.csv"]
    if test:
        out.write("test_predictions.csv", "pred\n" + "".join(f"{p}\n" for p in choose(test)))
        files.append("test_predictions.csv")
    result = {
        "task": "swag",
        "checkpoint": encoder.source,
        "main_metric": "accuracy",
        "dev": {"accuracy": M.accuracy(dev_predictions, [e.label for e in dev])},
        "config": config.to_dict(),
        "train": trained.to_dict(),
        "num_examples": {"train": len(train), "dev": len(dev), "test": len(test)},
        "max_seq_length": config.max_seq_length,
        "files": files,
    }
    out.write_json("metrics.json", result, sort_keys=True)
    logger.info("swag: dev accuracy %.4f", result["dev"]["accuracy"])
    return result
