"""Conversion between ``pretrain.model.BertForPreTraining`` and transformers' BERT folders
(``config.json`` and ``model.safetensors``, sharded safetensors, or ``pytorch_model.bin`` read with
``weights_only``), whose names are ours. A config is checked against the weights' headers before a
tensor is made (:func:`check_weights_fit`). Errors are one-line ``ValueError`` s naming the file.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import re
from typing import Any

import safetensors.torch
import torch
from torch import nn

from schemas import storage

logger = logging.getLogger(__name__)

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
_LAYER = re.compile(r"^bert\.encoder\.layer\.(\d+)\.")

MAX_JSON_BYTES = 16 << 20
"""The largest ``config.json``, ``tokenizer_config.json`` or sharded index read (real ones: a few kB)."""
MAX_HEADER_BYTES = 100_000_000
"""The largest safetensors header read (the format's own limit)."""
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "I16": 2, "F16": 2}
_DTYPE_BYTES |= {"BF16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8, "C64": 8}


def _loads(data: bytes, source: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"{source}: not valid JSON ({type(err).__name__}: {str(err)[:200]})") from None


def read_json_object(fs: storage.FileSystem, path: str, source: str) -> dict[str, Any]:
    """A small JSON file that must hold an object (``config.json`` and the like)."""
    size = fs.size(path)
    if size is not None and size > MAX_JSON_BYTES:
        raise ValueError(f"{source}: {size:,} bytes, more than any config ({MAX_JSON_BYTES:,}); not read")
    data = _loads(fs.cat_file(path), source)
    if not isinstance(data, dict):
        raise ValueError(f"{source}: holds a JSON {type(data).__name__}, not an object")
    return data


def read_config(path: str | os.PathLike) -> tuple[dict[str, Any], str]:
    """The ``config.json`` dict of an HF-format folder, and the file's path (for messages)."""
    source = storage.join(path, CONFIG_FILE)
    fs, root = storage.filesystem(path)
    try:
        return read_json_object(fs, storage.join(root, CONFIG_FILE), source), source
    except FileNotFoundError:
        raise ValueError(
            f"{source} not found: pass an HF-format BERT folder (config.json + model.safetensors)"
        ) from None


def read_header(fs: storage.FileSystem, path: str, source: str) -> tuple[dict[str, Any], int]:
    """A safetensors file's header (a JSON object; no tensor is read) and the bytes after it."""
    size = fs.size(path)
    with fs.open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
            raise ValueError(
                f"{source}: not a valid safetensors file (a header of {length:,} bytes in a file of {size:,})"
            )
        header = _loads(f.read(length), f"{source} (its header)")
    if not isinstance(header, dict):
        raise ValueError(f"{source}: not a valid safetensors file (its header is not a JSON object)")
    return header, size - 8 - length


def _safetensors_shapes(fs: storage.FileSystem, path: str) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from a safetensors header, each entry a known dtype and a shape that
    fits its byte range inside the file: the shapes never promise more than the file holds."""
    source = fs.unstrip_protocol(path)
    header, data_bytes = read_header(fs, path, source)
    shapes = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            shape, (begin, end) = tuple(entry["shape"]), entry["data_offsets"]
            itemsize = _DTYPE_BYTES[entry["dtype"]]
            if not all(type(n) is int and n >= 0 for n in (*shape, begin, end)):
                raise ValueError
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"{source}: not a valid safetensors file (the entry of {name} is not a dtype, shape and data_offsets)"
            ) from None
        if not begin <= end <= data_bytes or end - begin != math.prod(shape) * itemsize:
            raise ValueError(
                f"{source}: not a valid safetensors file ({name} of shape {list(shape)} does not fit bytes "
                f"{begin}-{end} of {data_bytes:,})"
            )
        shapes[name] = shape
    return shapes


def _safetensors_files(fs: storage.FileSystem, root: str, path) -> tuple[list[str] | None, str]:
    """The folder's safetensors files and the file naming them; None for ``pytorch_model.bin``."""
    if fs.exists(storage.join(root, SAFETENSORS_FILE)):
        return [SAFETENSORS_FILE], storage.join(path, SAFETENSORS_FILE)
    source = storage.join(path, SAFETENSORS_INDEX_FILE)
    if not fs.exists(storage.join(root, SAFETENSORS_INDEX_FILE)):
        if not fs.exists(storage.join(root, PYTORCH_FILE)):
            raise ValueError(
                f"{path}: no {SAFETENSORS_FILE}, {SAFETENSORS_INDEX_FILE} or {PYTORCH_FILE} found"
            )
        return None, storage.join(path, PYTORCH_FILE)
    weight_map = read_json_object(fs, storage.join(root, SAFETENSORS_INDEX_FILE), source).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ValueError(f"{source}: no weight_map of tensor names to shard files")
    for shard in set(weight_map.values()):
        if "/" in shard or "\\" in shard or shard in ("", ".", ".."):
            raise ValueError(f"{source}: shard {shard!r} is not a file name in the folder")
    return sorted(set(weight_map.values())), source


def stored_shapes(path: str | os.PathLike) -> tuple[dict[str, tuple[int, ...]], str]:
    """Tensor name -> shape of an HF-format folder's weights (from their headers), and the weights file."""
    fs, root = storage.filesystem(path)
    files, source = _safetensors_files(fs, root, path)
    if files is None:
        return {name: tuple(tensor.shape) for name, tensor in read_weights(path)[0].items()}, source
    return {
        k: v for name in files for k, v in _safetensors_shapes(fs, storage.join(root, name)).items()
    }, source


def tensor_names(path: str | os.PathLike) -> set[str] | None:
    """An HF-format folder's tensor names from the weights' headers; None for ``pytorch_model.bin``."""
    fs, root = storage.filesystem(path)
    return None if _safetensors_files(fs, root, path)[0] is None else set(stored_shapes(path)[0])


def check_vocab_rows(path: str | os.PathLike) -> None:
    """Refuse a folder whose ``vocab.txt`` has another number of tokens than its word embeddings rows."""
    fs, root = storage.filesystem(path)
    vocab_path, weights_path = storage.join(root, VOCAB_FILE), storage.join(root, SAFETENSORS_FILE)
    if not (fs.exists(vocab_path) and fs.exists(weights_path)):
        return
    shapes = {our_name(k): v for k, v in _safetensors_shapes(fs, weights_path).items()}
    rows = (shapes.get(_WORD_EMBEDDINGS) or [None])[0]
    with fs.open(vocab_path, "rb") as f:
        num_tokens = sum(1 for _ in f)
    if rows is not None and rows != num_tokens:
        raise ValueError(
            f"{storage.join(path, VOCAB_FILE)} has {num_tokens} tokens but the word embeddings in "
            f"{storage.join(path, SAFETENSORS_FILE)} have {rows} rows: the vocabulary is not the one this "
            "model was trained with"
        )


def read_weights(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], str]:
    """The tensors of an HF-format folder on the CPU, and the weights file's path (for messages)."""
    fs, root = storage.filesystem(path)
    files, source = _safetensors_files(fs, root, path)
    state: dict[str, torch.Tensor] = {}
    for name in files or []:
        try:
            state.update(safetensors.torch.load(fs.cat_file(storage.join(root, name))))
        except safetensors.SafetensorError as err:
            raise ValueError(f"{storage.join(path, name)}: not a valid safetensors file ({err})") from None
    if files is not None:
        return state, source
    try:
        state = torch.load(
            io.BytesIO(fs.cat_file(storage.join(root, PYTORCH_FILE))), map_location="cpu", weights_only=True
        )
    except Exception:  # torch's unpickling errors: a file that would run code, or a damaged one
        raise ValueError(
            f"{source}: not plain weights (unpickling it would run code, or it is damaged); not loaded: "
            "convert it to model.safetensors with a tool you trust"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{source}: holds no state dict of tensors")
    return state, source


def non_finite(obj: Any, name: str = "") -> str | None:
    """The dotted name of the first floating-point tensor in ``obj`` (nested dicts, lists, tuples)
    that holds NaN or infinity, or None: one device read when all are finite."""
    found = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            found.append((where, value))
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{where}.{key}" if where else str(key))
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                walk(item, f"{where}.{index}")

    walk(obj, name)
    if not found or bool(torch.stack([t.detach().isfinite().all() for _, t in found]).all()):
        return None
    return next(where for where, t in found if not bool(t.detach().isfinite().all()))


def expected_shapes(config: Any) -> dict[str, tuple[int, ...]]:
    """Every tensor ``BertForPreTraining(config)`` loads from an HF folder, with its shape
    (vocabulary rows unpadded, the tied decoder weight left out), from the config alone."""
    h, inner, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
    linear = {"bert.pooler.dense": (h, h), "cls.predictions.transform.dense": (h, h)}  # weight shapes
    if config.nsp:
        linear["cls.seq_relationship"] = (2, h)
    normed = ["bert.embeddings", "cls.predictions.transform"]  # modules with a LayerNorm of width h
    for layer in range(config.num_hidden_layers):
        prefix = f"bert.encoder.layer.{layer}."
        for name in ("query", "key", "value"):
            linear[f"{prefix}attention.self.{name}"] = (h, h)
        linear[prefix + "attention.output.dense"] = (h, h)
        linear.update({prefix + "intermediate.dense": (inner, h), prefix + "output.dense": (h, inner)})
        normed += [prefix + "attention.output", prefix + "output"]
    shapes = {
        _WORD_EMBEDDINGS: (vocab, h),
        "bert.embeddings.position_embeddings.weight": (config.max_position_embeddings, h),
        "bert.embeddings.token_type_embeddings.weight": (config.type_vocab_size, h),
        _MLM_BIAS: (vocab,),
    }
    for name, shape in linear.items():
        shapes.update({f"{name}.weight": shape, f"{name}.bias": shape[:1]})
    for name in normed:
        shapes.update({f"{name}.LayerNorm.weight": (h,), f"{name}.LayerNorm.bias": (h,)})
    return shapes


def _as_ours(stored: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """Stored tensors (or shapes) under our names: no ``position_ids`` buffer, the decoder bias as
    the MLM bias when that is absent; and the decoder weight (None without one), kept apart."""
    ours = {our_name(k): v for k, v in stored.items()}
    ours.pop("bert.embeddings.position_ids", None)
    decoder = ours.pop(_DECODER_WEIGHT, None)
    decoder_bias = ours.pop(_DECODER_BIAS, None)
    if decoder_bias is not None:
        ours.setdefault(_MLM_BIAS, decoder_bias)
    return ours, decoder


def _fit_problems(
    expected: dict[str, tuple[int, ...]], stored: dict[str, tuple[int, ...]]
) -> tuple[list[str], list[str], list[str]]:
    """What keeps ``stored`` shapes from loading where ``expected`` ones are (unknown ``bert.``
    tensors, missing embeddings or encoder tensors, other shapes); the names left at their fresh
    initialisation; and the stored names ignored (not ``bert.``)."""
    unexpected = sorted(set(stored) - set(expected))
    missing = sorted(set(expected) - set(stored))
    problems = [f"unexpected tensor {k}" for k in unexpected if k.startswith("bert.")]
    problems += [f"missing tensor {k}" for k in missing if k.startswith(_REQUIRED_PREFIXES)]
    for name in sorted(set(expected) & set(stored)):
        if tuple(stored[name]) != expected[name]:
            problems.append(f"{name} has shape {tuple(stored[name])}, the config needs {expected[name]}")
    return problems, missing, [k for k in unexpected if not k.startswith("bert.")]


def _sizes_held(stored: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """The config fields that the stored shapes fix: layers, width, vocabulary, positions, ..."""
    sizes = {"num_hidden_layers": len({int(m.group(1)) for name in stored if (m := _LAYER.match(name))})}
    for name, fields in (
        (_WORD_EMBEDDINGS, ("vocab_size", "hidden_size")),
        ("bert.embeddings.position_embeddings.weight", ("max_position_embeddings", None)),
        ("bert.embeddings.token_type_embeddings.weight", ("type_vocab_size", None)),
        ("bert.encoder.layer.0.intermediate.dense.weight", ("intermediate_size", None)),
    ):
        shape = stored.get(name, ())
        if len(shape) == 2:
            sizes.update({field: size for field, size in zip(fields, shape, strict=True) if field})
    return sizes


def check_weights_fit(config: Any, path: str | os.PathLike, config_source: str) -> None:
    """Refuse, before the model is made, a config whose model is not the one the folder's weights hold."""
    shapes, source = stored_shapes(path)
    stored, decoder = _as_ours(shapes)
    wrong = [
        f"{field} {getattr(config, field):,} where the weights hold {size:,}"
        for field, size in _sizes_held(stored).items()
        if getattr(config, field) != size
    ]
    if wrong:  # the tensors are not even compared: the config's own count may be hostile
        problems = [f"it says {', '.join(wrong)}"]
    else:
        problems, _, _ = _fit_problems(expected_shapes(config), stored)
    if decoder is not None and tuple(decoder) != tuple(stored.get(_WORD_EMBEDDINGS, decoder)):
        problems.append(f"{_DECODER_WEIGHT} has shape {tuple(decoder)}, not the word embeddings'")
    if problems:
        shown = "; ".join(problems[:3]) + (f"; ... ({len(problems)} in all)" if len(problems) > 3 else "")
        if not wrong and all(p.startswith(("missing tensor", "unexpected tensor")) for p in problems):
            raise ValueError(  # the sizes agree: the file lacks a tensor, or holds one no BERT has
                f"{source}: {shown}, though its sizes are those of {config_source}: the weights file is damaged "
                "or was edited; save or export the model again"
            )
        raise ValueError(
            f"{config_source} does not fit {source}: {shown}: give the config.json saved with these weights"
        )


def our_name(hf_key: str) -> str:
    """Our parameter name for a key of an HF BERT checkpoint."""
    key = hf_key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
    if key.startswith(("embeddings.", "encoder.", "pooler.")):
        key = "bert." + key
    return key


def load_hf_state_dict(
    model: nn.Module, hf_state: dict[str, torch.Tensor], source: str = "checkpoint"
) -> list[str]:
    """Copy an HF BERT state dict (keys with or without ``bert.``, TF-port ``gamma``/``beta``) into
    ``model`` in place; return the names left at their fresh initialisation (a missing pooler or
    heads). :class:`ValueError` naming ``source`` and every problem."""
    targets = model.state_dict()
    del targets[_DECODER_WEIGHT]  # the word embeddings under a second name
    incoming, decoder = _as_ours(hf_state)
    vocab_size = model.config.vocab_size
    expected = {
        name: (vocab_size, *t.shape[1:]) if name in _VOCAB_ROWS else tuple(t.shape)
        for name, t in targets.items()
    }
    problems, missing, ignored = _fit_problems(expected, {k: tuple(v.shape) for k, v in incoming.items()})
    if ignored:
        logger.warning("%s: ignoring tensors that are not part of BertForPreTraining: %s", source, ignored)
    word = incoming.get(_WORD_EMBEDDINGS)
    if decoder is not None and word is not None and not torch.equal(decoder, word):
        problems.append(
            f"{_DECODER_WEIGHT} differs from the word embeddings (untied decoders are not supported)"
        )
    if problems:
        raise ValueError(f"{source}: cannot load into BertForPreTraining: " + "; ".join(problems))
    bad = non_finite(incoming)
    if bad is not None:
        raise ValueError(
            f"{source}: {bad} holds NaN or infinity (the training diverged): use an earlier checkpoint"
        )
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
    """The tensors transformers' ``BertForPreTraining`` saves, as contiguous CPU copies."""
    vocab_size = model.config.vocab_size
    state = {}
    for name, tensor in model.state_dict().items():
        if name != _DECODER_WEIGHT:
            tensor = tensor[:vocab_size] if name in _VOCAB_ROWS else tensor
            state[name] = tensor.detach().to("cpu", copy=True).contiguous()
    return state


def save_hf(model: nn.Module, out: storage.Folder, metadata: dict[str, str] | None = None) -> None:
    """Write ``config.json`` and ``model.safetensors`` into ``out``, ``metadata`` in the header."""
    data = safetensors.torch.save(to_hf_state_dict(model), metadata={**(metadata or {}), "format": "pt"})
    out.write(SAFETENSORS_FILE, data)
    out.write_json(CONFIG_FILE, model.config.to_hf_dict(), sort_keys=True)


def export_hf(
    model: nn.Module, out: storage.Folder, vocab_file: str | os.PathLike, *, do_lower_case: bool = True
) -> None:
    """Write a folder that transformers' ``BertForPreTraining`` and ``BertTokenizer`` load into ``out``."""
    vocab = storage.read_bytes(vocab_file).decode("utf-8")
    num_tokens = len(vocab.splitlines())
    if num_tokens != model.config.vocab_size:
        raise ValueError(
            f"{vocab_file} has {num_tokens} tokens but the model's vocab_size is "
            f"{model.config.vocab_size}: pass the vocabulary the model was trained with"
        )
    save_hf(model, out)
    out.write(VOCAB_FILE, vocab)
    tokenizer_config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": do_lower_case,
        "model_max_length": model.config.max_position_embeddings,
    }
    out.write_json(TOKENIZER_CONFIG_FILE, tokenizer_config)
