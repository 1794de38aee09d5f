"""Conversion between ``pretrain.model.BertForPreTraining`` and transformers' BERT folders.

An HF-format folder holds ``config.json`` and the weights as ``model.safetensors`` (or sharded with
``model.safetensors.index.json``, or the older ``pytorch_model.bin``). Parameter names are the
same on both sides; the conversion only

- trims (export) or zero-pads (import) the vocabulary rows of the word embeddings and the MLM bias
  (our model pads them to a multiple of ``pad_vocab_to_multiple``);
- leaves out the MLM decoder weight and bias on export, as transformers 5's own ``save_pretrained``
  does: they are tied to ``bert.embeddings.word_embeddings.weight`` and ``cls.predictions.bias``
  (safetensors cannot store one tensor under two names), and transformers re-ties them on load;
- on import, accepts keys without the ``bert.`` prefix (``BertModel`` checkpoints), TF-port names
  ``LayerNorm.gamma`` / ``beta``, ignores the ``position_ids`` buffer, checks that a stored decoder
  weight equals the word embeddings, and initialises a missing pooler or missing heads afresh.

Every path is a local folder or an fsspec URL (``gs://``, ``s3://``, ``memory://``).
"""

from __future__ import annotations

import io
import json
import logging
import os
from typing import Any

import fsspec
import safetensors.torch
import torch
from torch import nn

logger = logging.getLogger(__name__)

# The functions below take a ``pretrain.model.BertForPreTraining`` (any module with a ``config``
# that has ``vocab_size``, ``max_position_embeddings`` and ``to_hf_dict``); this module does not
# import ``pretrain.model``, which imports it for ``from_pretrained``/``save_pretrained``.

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX_FILE = "model.safetensors.index.json"
PYTORCH_FILE = "pytorch_model.bin"
VOCAB_FILE = "vocab.txt"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"

_DECODER_WEIGHT = "cls.predictions.decoder.weight"
_DECODER_BIAS = "cls.predictions.decoder.bias"
_WORD_EMBEDDINGS = "bert.embeddings.word_embeddings.weight"
_MLM_BIAS = "cls.predictions.bias"
_VOCAB_ROWS = (_WORD_EMBEDDINGS, _MLM_BIAS)  # tensors whose first dimension is the vocabulary
_REQUIRED_PREFIXES = ("bert.embeddings.", "bert.encoder.")


def _join(path: str | os.PathLike, name: str) -> str:
    return str(path).rstrip("/") + "/" + name


def read_config(path: str | os.PathLike) -> tuple[dict[str, Any], str]:
    """The ``config.json`` dict of an HF-format folder, and the file's path (for messages)."""
    source = _join(path, CONFIG_FILE)
    try:
        with fsspec.open(source, "r") as f:
            return json.load(f), source
    except FileNotFoundError:
        raise ValueError(
            f"{source} not found: pass an HF-format BERT folder (config.json + model.safetensors)"
        ) from None


def _safetensors_shapes(fs: fsspec.AbstractFileSystem, path: str) -> dict[str, list[int]]:
    """Tensor name -> shape from a safetensors file's header alone (no tensor is read)."""
    with fs.open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        if not 2 <= size <= 100_000_000:
            raise ValueError(f"{path}: not a valid safetensors file (header of {size} bytes)")
        try:
            header = json.loads(f.read(size))
        except ValueError:
            raise ValueError(f"{path}: not a valid safetensors file (its header is not JSON)") from None
    return {k: v.get("shape", []) for k, v in header.items() if isinstance(v, dict)}


def check_vocab_rows(path: str | os.PathLike) -> None:
    """Refuse a folder whose ``vocab.txt`` has another number of tokens than its word embeddings
    have rows (read from the ``model.safetensors`` header: cheap, before any weight is loaded).
    Folders without either file, or with other weight formats, are left to the loaders' checks."""
    fs, root = fsspec.core.url_to_fs(str(path))
    vocab_path, weights_path = _join(root, VOCAB_FILE), _join(root, SAFETENSORS_FILE)
    if not (fs.exists(vocab_path) and fs.exists(weights_path)):
        return
    shapes = {our_name(k): v for k, v in _safetensors_shapes(fs, weights_path).items()}
    rows = (shapes.get(_WORD_EMBEDDINGS) or [None])[0]
    with fs.open(vocab_path, "r", encoding="utf-8") as f:
        num_tokens = len(f.read().splitlines())
    if rows is not None and rows != num_tokens:
        raise ValueError(
            f"{_join(path, VOCAB_FILE)} has {num_tokens} tokens but the word embeddings in "
            f"{_join(path, SAFETENSORS_FILE)} have {rows} rows: the vocabulary is not the one this "
            "model was trained with"
        )


def tensor_names(path: str | os.PathLike) -> set[str] | None:
    """The tensor names of an HF-format folder's weights without reading any tensor: from the
    ``model.safetensors`` header or the sharded index's weight map; None for other formats
    (``pytorch_model.bin``) or no weights."""
    fs, root = fsspec.core.url_to_fs(str(path))
    if fs.exists(_join(root, SAFETENSORS_FILE)):
        return set(_safetensors_shapes(fs, _join(root, SAFETENSORS_FILE)))
    if fs.exists(_join(root, SAFETENSORS_INDEX_FILE)):
        with fs.open(_join(root, SAFETENSORS_INDEX_FILE), "r") as f:
            return set(json.load(f).get("weight_map", {}))
    return None


def read_weights(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], str]:
    """The tensors of an HF-format folder (safetensors, sharded safetensors or pytorch_model.bin)
    on the CPU, and the weights file's path (for messages)."""
    fs, root = fsspec.core.url_to_fs(str(path))

    def read_bytes(name: str) -> bytes:
        with fs.open(_join(root, name), "rb") as f:
            return f.read()

    if fs.exists(_join(root, SAFETENSORS_FILE)):
        try:
            return safetensors.torch.load(read_bytes(SAFETENSORS_FILE)), _join(path, SAFETENSORS_FILE)
        except safetensors.SafetensorError as err:
            raise ValueError(
                f"{_join(path, SAFETENSORS_FILE)}: not a valid safetensors file ({err})"
            ) from None
    if fs.exists(_join(root, SAFETENSORS_INDEX_FILE)):
        weight_map = json.loads(read_bytes(SAFETENSORS_INDEX_FILE))["weight_map"]
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            state.update(safetensors.torch.load(read_bytes(shard)))
        return state, _join(path, SAFETENSORS_INDEX_FILE)
    if fs.exists(_join(root, PYTORCH_FILE)):
        buffer = io.BytesIO(read_bytes(PYTORCH_FILE))
        return torch.load(buffer, map_location="cpu", weights_only=True), _join(path, PYTORCH_FILE)
    raise ValueError(f"{path}: no {SAFETENSORS_FILE}, {SAFETENSORS_INDEX_FILE} or {PYTORCH_FILE} found")


def our_name(hf_key: str) -> str:
    """Our parameter name for a key of an HF BERT checkpoint."""
    key = hf_key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
    if key.startswith(("embeddings.", "encoder.", "pooler.")):
        key = "bert." + key
    return key


def load_hf_state_dict(
    model: nn.Module, hf_state: dict[str, torch.Tensor], source: str = "checkpoint"
) -> list[str]:
    """Copy an HF BERT state dict into ``model`` in place; return the names left at their fresh
    initialisation (a missing pooler or heads). Raises ``ValueError`` naming ``source`` and every
    problem: a missing encoder tensor, a shape mismatch, an unknown ``bert.`` key, an untied decoder.
    """
    targets = model.state_dict()
    del targets[_DECODER_WEIGHT]  # the word embeddings under a second name
    incoming: dict[str, torch.Tensor] = {}
    for key, tensor in hf_state.items():
        incoming[our_name(key)] = tensor
    incoming.pop("bert.embeddings.position_ids", None)
    decoder = incoming.pop(_DECODER_WEIGHT, None)
    decoder_bias = incoming.pop(_DECODER_BIAS, None)
    if decoder_bias is not None:
        incoming.setdefault(_MLM_BIAS, decoder_bias)

    problems = []
    unexpected = sorted(set(incoming) - set(targets))
    problems += [f"unexpected tensor {k}" for k in unexpected if k.startswith("bert.")]
    ignored = [k for k in unexpected if not k.startswith("bert.")]
    if ignored:
        logger.warning("%s: ignoring tensors that are not part of BertForPreTraining: %s", source, ignored)
    missing = sorted(set(targets) - set(incoming))
    problems += [f"missing tensor {k}" for k in missing if k.startswith(_REQUIRED_PREFIXES)]
    vocab_size = model.config.vocab_size
    for name in sorted(set(targets) & set(incoming)):
        expected = tuple(targets[name].shape)
        if name in _VOCAB_ROWS:
            expected = (vocab_size, *expected[1:])
        if tuple(incoming[name].shape) != expected:
            problems.append(f"{name} has shape {tuple(incoming[name].shape)}, the config needs {expected}")
    word = incoming.get(_WORD_EMBEDDINGS)
    if decoder is not None and word is not None and not torch.equal(decoder, word):
        problems.append(
            f"{_DECODER_WEIGHT} differs from the word embeddings (untied decoders are not supported)"
        )
    if problems:
        raise ValueError(f"{source}: cannot load into BertForPreTraining: " + "; ".join(problems))

    with torch.no_grad():
        for name in set(targets) & set(incoming):
            target, tensor = targets[name], incoming[name]
            if name in _VOCAB_ROWS:
                target[:vocab_size].copy_(tensor)
                target[vocab_size:].zero_()
            else:
                target.copy_(tensor)
    if missing:
        logger.info("%s: initialised afresh (absent from the checkpoint): %s", source, missing)
    return missing


def to_hf_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors transformers' ``BertForPreTraining`` saves: vocabulary rows trimmed, tied decoder
    weight and bias left out; contiguous CPU copies that share no memory."""
    vocab_size = model.config.vocab_size
    state = {}
    for name, tensor in model.state_dict().items():
        if name == _DECODER_WEIGHT:
            continue
        if name in _VOCAB_ROWS:
            tensor = tensor[:vocab_size]
        state[name] = tensor.detach().to("cpu", copy=True).contiguous()
    return state


def save_hf(model: nn.Module, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """Write ``config.json`` and ``model.safetensors`` (transformers' layout) to a folder or URL;
    ``metadata`` joins the safetensors header's ``{"format": "pt"}`` (a checkpoint's run id)."""
    fs, root = fsspec.core.url_to_fs(str(path))
    fs.makedirs(root, exist_ok=True)
    data = safetensors.torch.save(to_hf_state_dict(model), metadata={**(metadata or {}), "format": "pt"})
    with fs.open(_join(root, SAFETENSORS_FILE), "wb") as f:
        f.write(data)
    with fs.open(_join(root, CONFIG_FILE), "w") as f:
        json.dump(model.config.to_hf_dict(), f, indent=2, sort_keys=True)
        f.write("\n")


def export_hf(
    model: nn.Module,
    output: str | os.PathLike,
    vocab_file: str | os.PathLike,
    *,
    do_lower_case: bool = True,
) -> None:
    """Write a folder that transformers' ``BertForPreTraining.from_pretrained`` and
    ``BertTokenizerFast.from_pretrained`` load: ``config.json``, ``model.safetensors``,
    ``vocab.txt`` (copied from ``vocab_file``) and ``tokenizer_config.json``.

    Raises ``ValueError`` when ``vocab_file`` does not have ``config.vocab_size`` lines.
    """
    with fsspec.open(str(vocab_file), "r", encoding="utf-8") as f:
        vocab = f.read()
    num_tokens = len(vocab.splitlines())
    if num_tokens != model.config.vocab_size:
        raise ValueError(
            f"{vocab_file} has {num_tokens} tokens but the model's vocab_size is "
            f"{model.config.vocab_size}: pass the vocabulary the model was trained with"
        )
    save_hf(model, output)
    fs, root = fsspec.core.url_to_fs(str(output))
    with fs.open(_join(root, VOCAB_FILE), "w", encoding="utf-8") as f:
        f.write(vocab)
    tokenizer_config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": do_lower_case,
        "model_max_length": model.config.max_position_embeddings,
    }
    with fs.open(_join(root, TOKENIZER_CONFIG_FILE), "w") as f:
        json.dump(tokenizer_config, f, indent=2)
        f.write("\n")
