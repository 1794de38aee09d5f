"""Named-entity recognition on the CoNLL-2003 layout (the paper's Section 5.3), fine-tuned or, with
``features``, feature-based (Table 7: :mod:`finetune.ner_features`), with the same data, scoring
(:mod:`finetune.conll`) and windows (:mod:`finetune.ner_windows`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from finetune import ner_features
from finetune.config import FitConfig
from finetune.conll import SPLIT_FILES, Sentence, read_conll, score
from finetune.encoder import Encoder, prepare_encoder
from finetune.heads import Classifier, collate_tokens
from finetune.hidden import FEATURE_CHOICES
from finetune.inputs import check_examples
from finetune.loop import TrainResult, fit, predict
from finetune.ner_windows import Windows, default_doc_stride, sentence_features
from schemas import storage

logger = logging.getLogger(__name__)

FEATURE_LR = 1e-3
"""``--lr``'s default in the feature-based mode: the BiLSTM starts from scratch."""


@dataclass(frozen=True)
class NerConfig(FitConfig):
    """An NER run: the fit settings, the stride of a long sentence's windows (None: half a window)
    and the feature-based mode (``features``; activations cached in memory, or in a folder)."""

    lr: float = 5e-5
    doc_stride: int | None = None
    features: str | None = None
    cache_features: bool = False
    feature_cache: str | None = None

    def problems(self) -> list[str]:
        """:meth:`FitConfig.problems` and the NER settings'."""
        found = super().problems()
        if self.features is not None and self.features not in FEATURE_CHOICES:
            found.append(f"--features must be one of {', '.join(FEATURE_CHOICES)}, got {self.features!r}")
        if self.features is None and (self.cache_features or self.feature_cache is not None):
            found.append(
                "--cache-features and --feature-cache need --features (the fine-tuned mode trains the encoder)"
            )
        if self.doc_stride is not None and self.doc_stride < 1:
            found.append(f"--doc-stride must be at least 1, got {self.doc_stride}")
        return found


def label_set(sentences: Sequence[Sentence]) -> list[str]:
    """``O`` then every ``B-X``/``I-X`` of the entity types seen, sorted (both prefixes per type)."""
    kinds = sorted({t[2:] for s in sentences for t in s.tags if t != "O"})
    return ["O"] + [f"{p}-{k}" for k in kinds for p in ("B", "I")]


def tag_windows(
    model: nn.Module, windows: Windows, labels: Sequence[str], config: FitConfig
) -> list[list[str]]:
    """Predicted IOB2 tags for every word of every sentence of ``windows``."""
    outputs = predict(model, windows.features, config, collate_fn=collate_tokens)
    return windows.tags([logits.argmax(-1).tolist() for logits in outputs], labels)


def run_ner(
    data_dir: str,
    checkpoint: str,
    out: storage.Folder,
    config: NerConfig,
    before_training: Callable[[], None] | None = None,
    cache: storage.Folder | None = None,
) -> dict[str, Any]:
    """Fine-tune ``checkpoint`` for NER on ``data_dir``; write the predictions and ``metrics.json`` into
    ``out``; ``cache``: the claimed ``--feature-cache`` folder (else the one ``config`` names)."""
    root = data_dir.rstrip("/")
    train = read_conll(f"{root}/{SPLIT_FILES['train']}")[: config.max_train_examples]
    splits = {
        name: read_conll(f"{root}/{SPLIT_FILES[name]}")[: config.max_eval_examples]
        for name in ("valid", "test")
        if name == "valid" or storage.exists(f"{root}/{SPLIT_FILES[name]}")
    }
    check_examples(train, f"{root}/{SPLIT_FILES['train']}")
    labels = label_set(train)
    encoder = prepare_encoder(checkpoint, config, [" ".join(s.words) for s in train])
    stride = config.doc_stride or default_doc_stride(config.max_seq_length)
    windows: dict[str, dict[str, int]] = {}

    def windows_of(name: str, sentences: Sequence[Sentence]) -> Windows:
        spans = config.features is not None
        found = sentence_features(
            sentences, encoder, labels, config.max_seq_length, doc_stride=stride, spans=spans
        )
        windows[name] = found.summary()
        if found.num_long:
            logger.info(
                "ner: %d of %d %s sentences were longer than one window and were read in overlapping windows",
                *(found.num_long, len(sentences), name),
            )
        return found

    if cache is None and config.feature_cache is not None:
        cache = storage.Folder(config.feature_cache)
    model, trained, tag, activations = _train(
        encoder, labels, windows_of("train", train).features, config, before_training, cache
    )
    result: dict[str, Any] = {
        "task": "ner",
        "checkpoint": encoder.source,
        "main_metric": "f1",
        "labels": labels,
        "config": config.to_dict(),
        "train": trained.to_dict(),
        "num_examples": {"train": len(train), **{k: len(v) for k, v in splits.items()}},
        "max_seq_length": config.max_seq_length,
        "doc_stride": stride,
        "mode": "fine-tuned" if config.features is None else "feature-based",
        "files": [],
    }
    for name, sentences in splits.items():
        predicted = tag(name, windows_of(name, sentences))
        result[name] = score([s.tags for s in sentences], predicted)
        lines = [
            "".join(f"{w} {g} {p}\n" for w, g, p in zip(s.words, s.tags, tags, strict=True)) + "\n"
            for s, tags in zip(sentences, predicted, strict=True)
        ]
        out.write(f"{name}_predictions.txt", "".join(lines))
        result["files"].append(f"{name}_predictions.txt")
        logger.info("ner: %s F1 %.4f", name, result[name]["f1"])
    result["windows"] = windows
    if config.features is not None:
        result["feature_based"] = {
            "features": config.features,
            "layers": list(model.layers),
            "lstm_units": model.lstm_units,
            "lstm_layers": 2,
            "head_input": "sentence sub-tokens (the encoder sees the document window)",
            "cached": config.cache_features or config.feature_cache is not None,
            "feature_cache": config.feature_cache,
            "activations": activations,
            "num_trained_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        }
    result["dev"] = {k: result["valid"][k] for k in ("precision", "recall", "f1")}
    out.write_json("metrics.json", result, sort_keys=True)
    return result


def _train(
    encoder: Encoder,
    labels: list[str],
    features: list[dict[str, Any]],
    config: NerConfig,
    before_training: Callable[[], None] | None,
    folder: storage.Folder | None,
) -> tuple[nn.Module, TrainResult, Callable[[str, Windows], list[list[str]]], dict[str, str]]:
    """Train the tagger of ``config``'s mode; return it, the result, ``tag(split name, windows)``, and
    (feature-based) how each split's activations were obtained."""
    activations: dict[str, str] = {}
    if config.features is None:
        model: nn.Module = Classifier(encoder.model, len(labels), per="token", seed=config.seed)
        if before_training is not None:
            before_training()
        trained = fit(model, features, config, collate_fn=collate_tokens)
        return model, trained, lambda name, split: tag_windows(model, split, labels, config), activations
    model = ner_features.feature_tagger(encoder, labels, config.features, config)
    if before_training is not None:
        before_training()
    trained, activations["train"] = ner_features.fit_feature_tagger(
        model, features, config, cache=config.cache_features, folder=folder, source=encoder.source
    )

    def tag(name: str, split: Windows) -> list[list[str]]:
        tags, activations[name] = ner_features.tag_feature_based(
            model, split, labels, config, folder=folder, split=name, source=encoder.source
        )
        return tags

    return model, trained, tag, activations
