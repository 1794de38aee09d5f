"""Feature-based NER (the paper's Table 7): a head (:class:`finetune.heads.FeatureTagger`) trained
on a frozen encoder's layers over each sentence's own sub-tokens, read in its window of document
context. ``--cache-features`` runs the encoder once over the training set; ``--feature-cache DIR``
keeps every layer of every split in DIR (safetensors, one file per split) for later runs whatever
their ``--features``, so Table 7's rows cost one encoder pass. A file is named by the SHA-256 of what
determines it: the encoder's weights, its precision, and each feature's ids, types and span.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import safetensors.torch
import torch

from finetune.config import FitConfig
from finetune.encoder import Encoder
from finetune.heads import FeatureTagger, cache_layers, collate_tokens, collate_with_layers, sentence_only
from finetune.loop import MODEL_INPUTS, TrainResult, fit, predict
from finetune.ner_windows import Windows
from pretrain.runtime import resolve_device, resolve_precision
from schemas import storage
from schemas.commands import InputError

logger = logging.getLogger(__name__)

CACHE_FORMAT = "ner-feature-cache"
CACHE_VERSION = "1"
SPAN_INPUTS = (*MODEL_INPUTS, "sentence_start", "sentence_end", "layers")  # the window, or its cached layers


def feature_tagger(
    encoder: Encoder, labels: Sequence[str], features: str, config: FitConfig
) -> FeatureTagger:
    """A :class:`~finetune.heads.FeatureTagger` on the frozen encoder (InputError: too shallow)."""
    try:
        return FeatureTagger(encoder.model, len(labels), features, seed=config.seed)
    except ValueError as err:
        raise InputError(f"--checkpoint {encoder.source}: {err}") from None


def weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 over every tensor of ``model.state_dict()``: name, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}|{flat.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def inputs_digest(weights: str, precision: str, features: Sequence[dict[str, Any]]) -> str:
    """SHA-256 naming one split's cached activations: the encoder (``weights``), ``precision``
    and each feature's ids, types and sentence span (labels do not change activations)."""
    digest = hashlib.sha256(f"{CACHE_FORMAT}|{CACHE_VERSION}|{weights}|{precision}|".encode())
    for f in features:
        row = [
            len(f["input_ids"]),
            f["sentence_start"],
            f["sentence_end"],
            *f["input_ids"],
            *f["token_type_ids"],
        ]
        digest.update(torch.tensor(row, dtype=torch.int64).numpy().tobytes())
    return digest.hexdigest()


def _cache_name(digest: str) -> str:
    return f"{digest[:32]}.safetensors"


def load_cached(
    folder: storage.Folder, digest: str, lengths: Sequence[int], num_states: int, hidden: int
) -> torch.Tensor | None:
    """The cached activations ``[sum(lengths), num_states, hidden]`` named ``digest`` (None: not
    there); an InputError for a file that does not hold what its name promises."""
    path = folder.path(_cache_name(digest))
    if not storage.exists(path):
        return None
    try:
        tensors = safetensors.torch.load(storage.read_bytes(path))
    except Exception as err:  # a truncated or foreign file
        raise InputError(f"{path}: not a readable feature cache ({err}); delete it") from None
    layers, stored = tensors.get("layers"), tensors.get("lengths")
    expected = (sum(lengths), num_states, hidden)
    if (
        layers is None
        or stored is None
        or (tuple(layers.shape), stored.tolist()) != (expected, list(lengths))
    ):
        raise InputError(f"{path}: does not match this run's inputs (expected layers {expected}); delete it")
    return layers


def save_cached(
    folder: storage.Folder,
    digest: str,
    layers: torch.Tensor,
    lengths: Sequence[int],
    metadata: dict[str, str],
) -> str:
    """Write one split's activations to ``folder`` (whole or not at all); returns the path."""
    tensors = {"layers": layers.contiguous(), "lengths": torch.tensor(list(lengths), dtype=torch.int64)}
    data = safetensors.torch.save(
        tensors, metadata={"format": CACHE_FORMAT, "version": CACHE_VERSION, **metadata}
    )
    folder.write(_cache_name(digest), data)
    return folder.path(_cache_name(digest))


def with_layers(
    model: FeatureTagger,
    features: Sequence[dict[str, Any]],
    config: FitConfig,
    *,
    folder: storage.Folder | None = None,
    split: str = "train",
    source: str = "",
) -> tuple[list[dict[str, Any]], str]:
    """``features`` cut to their sentences, each with the model's chosen ``layers``: computed, or
    with ``folder`` every layer read from it (else computed and written there); and which of
    ``computed``, ``read``, ``written`` happened."""
    device = resolve_device(config.device)
    precision = resolve_precision(config.precision, device)
    compute = dict(
        collate_fn=collate_tokens, batch_size=config.eval_batch_size, device=device, precision=precision
    )
    if folder is None:
        return cache_layers(model, features, **compute), "computed"
    num_states, hidden = model.bert.config.num_hidden_layers + 1, model.bert.config.hidden_size
    lengths = [f["sentence_end"] - f["sentence_start"] for f in features]
    digest = inputs_digest(weights_digest(model.bert), precision, features)
    everything = load_cached(folder, digest, lengths, num_states, hidden)
    outcome = "read"
    if everything is None:
        computed = cache_layers(model, features, **compute, which=range(num_states))
        everything = (
            torch.cat([f["layers"] for f in computed]) if computed else torch.empty(0, num_states, hidden)
        )
        meta = {"split": split, "checkpoint": source, "precision": precision, "sentences": str(len(features))}
        path = save_cached(folder, digest, everything, lengths, meta)
        logger.info(
            "ner: wrote the %s activations (%.0f MiB) to %s", split, everything.numel() * 4 / 2**20, path
        )
        outcome = "written"
    chosen = everything.index_select(1, torch.tensor(model.layers))
    del everything
    out = []
    for feature, layers in zip(features, torch.split(chosen, lengths), strict=True):
        cut = sentence_only(feature, feature["sentence_start"], feature["sentence_end"])
        cut["layers"] = layers
        out.append(cut)
    return out, outcome


def fit_feature_tagger(
    model: FeatureTagger,
    inputs: list[dict[str, Any]],
    config: FitConfig,
    *,
    cache: bool,
    folder: storage.Folder | None,
    source: str,
) -> tuple[TrainResult, str]:
    """Train the head on ``inputs`` (features with sentence spans): over the live encoder, or on
    activations computed once (``cache``) or shared through ``folder``. Returns the result and
    how the training activations were obtained (``live``, ``computed``, ``read``, ``written``)."""
    outcome = "live"
    if cache or folder is not None:
        inputs, outcome = with_layers(model, inputs, config, folder=folder, split="train", source=source)
    return fit(model, inputs, config, collate_fn=collate_with_layers(collate_tokens)), outcome


def tag_feature_based(
    model: FeatureTagger,
    windows: Windows,
    labels: Sequence[str],
    config: FitConfig,
    *,
    folder: storage.Folder | None,
    split: str,
    source: str,
) -> tuple[list[list[str]], str]:
    """IOB2 tags for every word of ``windows``' sentences (each from the window where it has the most
    context), the activations live or shared through ``folder``; and how they were obtained."""
    inputs = windows.features
    starts = [f["sentence_start"] for f in inputs]
    outcome = "live"
    if folder is not None:
        inputs, outcome = with_layers(model, inputs, config, folder=folder, split=split, source=source)
    outputs = predict(
        model, inputs, config, collate_fn=collate_with_layers(collate_tokens), inputs=SPAN_INPUTS
    )
    return windows.tags([logits.argmax(-1).tolist() for logits in outputs], labels, starts), outcome
