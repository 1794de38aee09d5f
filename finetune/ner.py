"""Named-entity recognition on the CoNLL-2003 layout (the paper's Section 5.3).

Files are four columns (token, POS, chunk, NER tag), one token a line, a blank line between
sentences and ``-DOCSTART-`` lines between documents; ``train.txt``, ``valid.txt`` and
``test.txt`` (optional) in ``--data-dir``. Tags in IOB1 (the original release) or IOB2 are both
accepted and converted to IOB2. Reading and scoring (conlleval's) are :mod:`finetune.conll`. As
in the paper, each word is tagged at its first sub-token, and each sentence is encoded with as much
of its document around it as fits; a sentence longer than ``max_seq_length`` is read in
overlapping windows, ``doc_stride`` sub-tokens apart, every word tagged from the window where it
has the most context (:mod:`finetune.ner_windows`). ``metrics.json`` says how many sentences of
each split needed more than one window.

Two modes: fine-tuned (:class:`TokenClassifier`, the whole model trained) and, with
``features``, feature-based (the paper's Table 7: the encoder frozen, the chosen layers' activations
into a two-layer BiLSTM and a classifier, :class:`finetune.heads.FeatureTagger`). Both use the same
data, scoring and outputs; the feature-based machinery, and the activation cache its runs
share, is :mod:`finetune.ner_features`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import fsspec
import torch
import torch.nn.functional as F
from torch import nn

from finetune import ner_features
from finetune.common import (
    FinetuneError,
    TaskOutput,
    TrainConfig,
    TrainResult,
    _seeded_linear,
    check_casing,
    check_max_seq_length,
    fit,
    load_encoder,
    predict,
)
from finetune.conll import SPLIT_FILES, Sentence, read_conll, score
from finetune.heads import IGNORE, collate_tokens
from finetune.hidden import FEATURE_CHOICES
from finetune.ner_windows import Windows, default_doc_stride, sentence_features
from schemas.files import write_file, write_json

logger = logging.getLogger(__name__)


class TokenClassifier(nn.Module):
    """Dropout and a linear layer on every token's last hidden state; cross-entropy over the
    labelled tokens (labels :data:`IGNORE` elsewhere)."""

    def __init__(self, encoder: nn.Module, num_labels: int, *, seed: int = 0) -> None:
        super().__init__()
        config = encoder.config
        self.bert = encoder
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = _seeded_linear(config.hidden_size, num_labels, config.initializer_range, seed)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> TaskOutput:
        """Logits ``[batch, length, num_labels]`` and the loss when ``labels``."""
        sequence, _ = self.bert(input_ids, token_type_ids, attention_mask)
        logits = self.classifier(self.dropout(sequence)).float()
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=IGNORE
            )
        return TaskOutput(logits, loss)


def label_set(sentences: Sequence[Sentence]) -> list[str]:
    """``O`` then every ``B-X``/``I-X`` of the entity types seen, sorted (both prefixes per type)."""
    kinds = sorted({t[2:] for s in sentences for t in s.tags if t != "O"})
    return ["O"] + [f"{p}-{k}" for k in kinds for p in ("B", "I")]


def tag_windows(
    model: nn.Module, windows: Windows, labels: Sequence[str], config: TrainConfig
) -> list[list[str]]:
    """Predicted IOB2 tags for every word of every sentence of ``windows`` (:func:`sentence_features`),
    each word read from its window."""
    outputs = predict(
        model, windows.features, batch_size=config.eval_batch_size, device=config.device,
        precision=config.precision, collate_fn=collate_tokens, progress=config.progress,
    )  # fmt: skip
    return windows.tags([logits.argmax(-1).tolist() for logits in outputs], labels)


def _write_predictions(fs, path: str, sentences: Sequence[Sentence], predicted) -> None:
    """conlleval's input: ``word gold predicted`` a line, a blank line after each sentence."""
    lines = []
    for sentence, tags in zip(sentences, predicted, strict=True):
        lines.extend(f"{w} {g} {p}\n" for w, g, p in zip(sentence.words, sentence.tags, tags, strict=True))
        lines.append("\n")
    write_file(path, "".join(lines), fs)


def _read_splits(
    data_dir: str, max_train: int | None, max_eval: int | None
) -> tuple[list[Sentence], dict[str, list[Sentence]]]:
    """``train.txt`` (its first ``max_train`` sentences) and the scored splits: ``valid.txt`` and,
    when present, ``test.txt`` (each its first ``max_eval``)."""
    root = data_dir.rstrip("/")
    train = read_conll(f"{root}/{SPLIT_FILES['train']}")[:max_train]
    splits = {"valid": read_conll(f"{root}/{SPLIT_FILES['valid']}")[:max_eval]}
    fs, test_path = fsspec.core.url_to_fs(f"{root}/{SPLIT_FILES['test']}")
    if fs.exists(test_path):
        splits["test"] = read_conll(f"{root}/{SPLIT_FILES['test']}")[:max_eval]
    return train, splits


def run_ner(
    data_dir: str,
    checkpoint: str,
    output: str,
    config: TrainConfig,
    *,
    max_seq_length: int = 128,
    doc_stride: int | None = None,
    max_train_examples: int | None = None,
    max_eval_examples: int | None = None,
    cased: bool | None = None,
    features: str | None = None,
    cache_features: bool = False,
    feature_cache: str | None = None,
    before_training: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune ``checkpoint`` for NER on ``data_dir`` (train.txt; scored on valid.txt and, when
    present, test.txt) and write ``metrics.json`` and ``{valid,test}_predictions.txt``.

    A sentence longer than ``max_seq_length`` is read in windows ``doc_stride`` sub-tokens apart
    (default: half a window; :mod:`finetune.ner_windows`), so every word is trained on and tagged;
    ``metrics.json``'s ``windows`` counts, per split, the sentences that needed more than one.
    ``features`` (one of :data:`finetune.hidden.FEATURE_CHOICES`) is the feature-based mode of the
    paper's Table 7: the encoder frozen, those layers of each sentence fed to a two-layer BiLSTM
    and a classifier (:mod:`finetune.ner_features`); ``cache_features`` runs the frozen encoder
    over the training set once and keeps its activations in memory instead of recomputing them
    each epoch; ``feature_cache`` (a folder) also keeps every layer of every split there, for
    later runs with any ``features`` choice. ``before_training`` (the CLI's ``--overwrite``
    clean-up) is called once the data, checkpoint and settings have passed their checks (the
    feature tagger built), right before training."""
    check_settings(features, cache_features, feature_cache, doc_stride)
    train, splits = _read_splits(data_dir, max_train_examples, max_eval_examples)
    labels = label_set(train)
    encoder = load_encoder(checkpoint, cased=cased)
    check_max_seq_length(max_seq_length, encoder)
    check_casing(encoder, [" ".join(s.words) for s in train])
    stride = doc_stride or default_doc_stride(max_seq_length)

    def windows_of(sentences: Sequence[Sentence]) -> Windows:
        return sentence_features(
            sentences, encoder, labels, max_seq_length, doc_stride=stride, spans=features is not None
        )

    if features is None:
        model: nn.Module = TokenClassifier(encoder.model, len(labels), seed=config.seed)
        tag = _fine_tuned(model, train, windows_of, labels, config, before_training)
    else:
        settings = (config, cache_features, feature_cache, before_training)
        tag, model = _feature_based(encoder, train, windows_of, labels, features, *settings)
    fs, root = fsspec.core.url_to_fs(output)
    fs.makedirs(root, exist_ok=True)
    result: dict[str, Any] = {
        "task": "ner",
        "checkpoint": encoder.source,
        "main_metric": "f1",
        "labels": labels,
        "config": config.to_dict(),
        "train": tag.trained.to_dict(),
        "num_examples": {"train": len(train), **{k: len(v) for k, v in splits.items()}},
        "max_seq_length": max_seq_length,
        "doc_stride": stride,
        "mode": "fine-tuned" if features is None else "feature-based",
        "files": [],
    }
    for name, sentences in splits.items():
        predicted = tag(name, sentences)
        result[name] = score([s.tags for s in sentences], predicted)
        _write_predictions(fs, f"{root}/{name}_predictions.txt", sentences, predicted)
        result["files"].append(f"{name}_predictions.txt")
        logger.info("ner: %s F1 %.4f", name, result[name]["f1"])
    result["windows"] = tag.windows
    if features is not None:
        result["feature_based"] = _feature_summary(
            model, features, cache_features, feature_cache, tag.activations
        )
    result["dev"] = {k: result["valid"][k] for k in ("precision", "recall", "f1")}
    write_json(f"{root}/metrics.json", result, fs, sort_keys=True)
    return result


class _Tagger:
    """What :func:`run_ner` scores with: ``tag(split name, sentences)``, the :class:`TrainResult`,
    each split's window count (``windows``) and, feature-based, how each split's activations were
    obtained."""

    def __init__(
        self,
        tag: Callable[[str, Windows], list[list[str]]],
        trained: TrainResult,
        windows_of: Callable[[Sequence[Sentence]], Windows],
        train_windows: Windows,
    ):
        self._tag, self.trained, self._windows_of = tag, trained, windows_of
        self.windows: dict[str, dict[str, int]] = {}
        self.activations: dict[str, str] = {}
        self._count("train", train_windows)

    def _count(self, name: str, windows: Windows) -> None:
        self.windows[name] = windows.summary()
        if windows.num_long:
            logger.info(
                "ner: %d of %d %s sentences were longer than one window and were read in overlapping windows",
                windows.num_long, len(windows.words), name,
            )  # fmt: skip

    def __call__(self, name: str, sentences: Sequence[Sentence]) -> list[list[str]]:
        windows = self._windows_of(sentences)
        self._count(name, windows)
        return self._tag(name, windows)


def _fine_tuned(model, train, windows_of, labels, config, before_training) -> _Tagger:
    """Train the whole :class:`TokenClassifier` on the training sentences."""
    windows = windows_of(train)
    if before_training is not None:
        before_training()
    trained = fit(model, windows.features, config, collate_fn=collate_tokens)
    return _Tagger(
        lambda _name, split: tag_windows(model, split, labels, config), trained, windows_of, windows
    )


def _feature_based(
    encoder, train, windows_of, labels, features, config, cache, folder, before_training
) -> tuple[_Tagger, nn.Module]:
    """Train a feature tagger on the frozen encoder (:mod:`finetune.ner_features`)."""
    model = ner_features.feature_tagger(encoder, labels, features, config)
    windows = windows_of(train)
    if before_training is not None:
        before_training()
    trained, how = ner_features.fit_feature_tagger(
        model, windows.features, config, cache=cache, folder=folder, source=encoder.source
    )

    def tag(name: str, split: Windows) -> list[list[str]]:
        tags, tagger.activations[name] = ner_features.tag_feature_based(
            model, split, labels, config, folder=folder, split=name, source=encoder.source
        )
        return tags

    tagger = _Tagger(tag, trained, windows_of, windows)
    tagger.activations["train"] = how
    return tagger, model


def _feature_summary(model, features, cache, folder, activations) -> dict[str, Any]:
    """metrics.json's ``feature_based``: the choice, its layers, the head's size, the caching."""
    return {
        "features": features,
        "layers": list(model.layers),
        "lstm_units": model.lstm_units,
        "lstm_layers": 2,
        "head_input": "sentence sub-tokens (the encoder sees the document window)",
        "cached": cache or folder is not None,
        "feature_cache": folder,
        "activations": dict(activations),
        "num_trained_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }


def check_feature_choice(features: str) -> None:
    """Refuse an unknown ``--features`` before any file is read."""
    if features not in FEATURE_CHOICES:
        raise FinetuneError(f"--features must be one of {', '.join(FEATURE_CHOICES)}, got {features!r}")


def check_settings(
    features: str | None, cache_features: bool, feature_cache: str | None, doc_stride: int | None
) -> None:
    """Refuse settings that cannot work together before any file is read."""
    if features is not None:
        check_feature_choice(features)
    elif cache_features or feature_cache is not None:
        raise FinetuneError(
            "--cache-features and --feature-cache need --features (the fine-tuned mode trains the encoder)"
        )
    if doc_stride is not None and doc_stride < 1:
        raise FinetuneError(f"--doc-stride must be at least 1, got {doc_stride}")
